//! The kernel's two address tables: mapinfo (what to replay to a restarted daemon) and
//! remote-info (how the passive side learns the connecting peer's real address).
//!
//! The kernel keeps both in chained hash tables; iteration order there depends on a hash
//! of the addresses. Here both are vectors in insertion order, which changes only the
//! order of MAPINFO records in a replay (the daemon must not depend on it).

use iwpm_proto::sockaddr::SockAddrStorage;

/// One `iwpm_mapping_info` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapInfoEntry {
    /// The unmapped local address.
    pub local: SockAddrStorage,
    /// The mapped local address (equal to `local` when mapping failed).
    pub mapped: SockAddrStorage,
    /// The FLAGS the mapping was requested with.
    pub flags: u32,
}

/// The mapinfo table (`iwpm_create_mapinfo` / `iwpm_remove_mapinfo`).
#[derive(Clone, Debug, Default)]
pub struct MapInfoTable {
    entries: Vec<MapInfoEntry>,
}

impl MapInfoTable {
    /// Adds an entry (duplicates allowed, as in the kernel).
    pub fn insert(&mut self, entry: MapInfoEntry) {
        self.entries.push(entry);
    }

    /// Removes one entry for this id, newest first. The kernel removes the first entry of
    /// the hash bucket of (local, mapped) whose mapped address matches; an entry with the
    /// same local and mapped address is what lands in that bucket **(inferred)**.
    pub fn remove(&mut self, local: &SockAddrStorage, mapped: &SockAddrStorage) -> bool {
        let found = self
            .entries
            .iter()
            .rposition(|e| e.mapped.same_endpoint(mapped) && e.local.same_endpoint(local));
        match found {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// `iwpm_mapinfo_available`.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[MapInfoEntry] {
        &self.entries
    }
}

/// One `iwpm_remote_info` entry, added by REMOTE_INFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteInfoEntry {
    /// The listener's mapped address as the peer was told (part of the key).
    pub mapped_local: SockAddrStorage,
    /// The connecting peer's mapped address (part of the key).
    pub mapped_remote: SockAddrStorage,
    /// The connecting peer's real address (the value).
    pub remote: SockAddrStorage,
}

/// The remote-info table. Entries are consumed by the incoming connection they describe;
/// unconsumed ones stay forever, as in the kernel.
#[derive(Clone, Debug, Default)]
pub struct RemoteInfoTable {
    entries: Vec<RemoteInfoEntry>,
}

impl RemoteInfoTable {
    /// Adds an entry (duplicates are simply added).
    pub fn insert(&mut self, entry: RemoteInfoEntry) {
        self.entries.push(entry);
    }

    /// `iwpm_get_remote_info`: finds the entry keyed by (mapped local, mapped remote),
    /// compared by family, IP and port; removes it and returns the real remote address.
    pub fn take(
        &mut self,
        mapped_local: &SockAddrStorage,
        mapped_remote: &SockAddrStorage,
    ) -> Option<SockAddrStorage> {
        // The kernel's bucket lists are newest first.
        let i = self.entries.iter().rposition(|e| {
            e.mapped_local.same_endpoint(mapped_local)
                && e.mapped_remote.same_endpoint(mapped_remote)
        })?;
        Some(self.entries.remove(i).remote)
    }

    /// Number of entries (unconsumed ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[RemoteInfoEntry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tests::sa;

    /// A table with one entry: mapped 127.0.0.1:4000 <- 127.0.0.2:5000 (real :30000).
    fn one_entry() -> RemoteInfoTable {
        let mut t = RemoteInfoTable::default();
        t.insert(RemoteInfoEntry {
            mapped_local: sa("127.0.0.1:4000"),
            mapped_remote: sa("127.0.0.2:5000"),
            remote: sa("127.0.0.2:30000"),
        });
        t
    }

    #[test]
    fn remote_info_is_consumed_once() {
        let mut t = one_entry();
        assert_eq!(t.take(&sa("127.0.0.1:4000"), &sa("127.0.0.2:5001")), None);
        assert_eq!(
            t.take(&sa("127.0.0.1:4000"), &sa("127.0.0.2:5000")),
            Some(sa("127.0.0.2:30000"))
        );
        assert_eq!(t.take(&sa("127.0.0.1:4000"), &sa("127.0.0.2:5000")), None);
    }

    #[test]
    fn wildcard_key_does_not_match_specific() {
        let mut t = one_entry();
        assert_eq!(t.take(&sa("0.0.0.0:4000"), &sa("127.0.0.2:5000")), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn mapinfo_remove_newest_matching() {
        let mut t = MapInfoTable::default();
        for flags in [0, 1] {
            t.insert(MapInfoEntry {
                local: sa("127.0.0.1:4000"),
                mapped: sa("127.0.0.1:40000"),
                flags,
            });
        }
        assert!(!t.remove(&sa("127.0.0.1:4000"), &sa("127.0.0.1:40001")));
        assert!(t.remove(&sa("127.0.0.1:4000"), &sa("127.0.0.1:40000")));
        assert_eq!(t.entries()[0].flags, 0);
        assert_eq!(t.len(), 1);
    }
}
