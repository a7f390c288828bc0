//! Kernel clients (RDMA netlink client indices, 6 bits): registration from REG_PID, the
//! per-client header sequence counters, and the MAPINFO acceptance counters.
//!
//! Only the library name is compared on re-registration (HANDLE_ERR 15 on a mismatch, as
//! C); the interface and device names are kept for the dump.

use iwpm_proto::netlink::NlString;

/// Number of client indices (6-bit field of `nlmsg_type`).
pub(crate) const MAX_CLIENTS: usize = 64;

/// What a REG_PID told us about a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientInfo {
    pub if_name: NlString,
    pub ibdev_name: NlString,
    pub ulib_name: NlString,
}

/// Outcome of a registration attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Registration {
    /// Registered (first time or again with the same library name).
    Ok,
    /// Already registered under another library name (HANDLE_ERR 15, as C).
    LibraryMismatch,
}

#[derive(Debug)]
pub(crate) struct Clients {
    info: Vec<Option<ClientInfo>>,
    seq: [u32; MAX_CLIENTS],
    mapinfo_acks: [u32; MAX_CLIENTS],
}

impl Default for Clients {
    fn default() -> Self {
        Clients {
            info: vec![None; MAX_CLIENTS],
            seq: [0; MAX_CLIENTS],
            mapinfo_acks: [0; MAX_CLIENTS],
        }
    }
}

fn idx(client: u8) -> usize {
    usize::from(client) % MAX_CLIENTS
}

impl Clients {
    pub(crate) fn is_registered(&self, client: u8) -> bool {
        self.info[idx(client)].is_some()
    }

    pub(crate) fn register(&mut self, client: u8, info: ClientInfo) -> Registration {
        let slot = &mut self.info[idx(client)];
        if let Some(old) = slot {
            if old.ulib_name.as_bytes() != info.ulib_name.as_bytes() {
                return Registration::LibraryMismatch;
            }
        }
        *slot = Some(info);
        Registration::Ok
    }

    pub(crate) fn info(&self, client: u8) -> Option<&ClientInfo> {
        self.info.get(usize::from(client))?.as_ref()
    }

    /// Header seq for the next message to `client`: a per-client counter from 0, wrapping.
    pub(crate) fn next_seq(&mut self, client: u8) -> u32 {
        let c = &mut self.seq[idx(client)];
        let s = *c;
        *c = c.wrapping_add(1);
        s
    }

    /// The seq the next message to `client` will carry.
    pub(crate) fn peek_seq(&self, client: u8) -> u32 {
        self.seq[idx(client)]
    }

    /// Counts one accepted MAPINFO record of `client`.
    pub(crate) fn count_mapinfo(&mut self, client: u8) {
        let c = &mut self.mapinfo_acks[idx(client)];
        *c = c.wrapping_add(1);
    }

    /// Records accepted since the last call (the ACK_NUM of the batch a MAPINFO_NUM closes).
    pub(crate) fn take_mapinfo_acks(&mut self, client: u8) -> u32 {
        std::mem::take(&mut self.mapinfo_acks[idx(client)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(lib: &str) -> ClientInfo {
        ClientInfo {
            if_name: NlString::padded("eth0", 16),
            ibdev_name: NlString::padded("siw0", 32),
            ulib_name: NlString::padded(lib, 32),
        }
    }

    #[test]
    fn registration_and_library_mismatch() {
        let mut c = Clients::default();
        assert!(!c.is_registered(2));
        assert_eq!(c.register(2, info("iWarpPortMapperUser")), Registration::Ok);
        assert_eq!(c.register(2, info("iWarpPortMapperUser")), Registration::Ok);
        assert_eq!(c.register(2, info("other")), Registration::LibraryMismatch);
        assert!(c.is_registered(2));
        assert!(!c.is_registered(3));
    }

    #[test]
    fn sequence_counters_are_per_client() {
        let mut c = Clients::default();
        assert_eq!(c.next_seq(2), 0);
        assert_eq!(c.next_seq(2), 1);
        assert_eq!(c.next_seq(3), 0);
        assert_eq!(c.peek_seq(2), 2);
    }
}
