//! The mapping table: one entry per mapped local address, with reference counts, indexed by
//! local and by mapped endpoint.
//!
//! The C daemon keeps an unsorted list and scans it for every look-up. Here each address
//! side has an [`AddrIndex`]: a hash map from exact endpoint to entries plus a per-port set
//! (all entries on that port, and the wildcard ones among them). That answers both C
//! look-ups in O(entries sharing the port), which is O(1) in practice:
//!
//! * *exact*: family, IP and port equal;
//! * *loose*: same port and (identical address, or the entry is a wildcard, or the searched
//!   address is a wildcard) — so `0.0.0.0:P` also matches an IPv6 entry on port P, as in C.
//!
//! When several entries match, the newest wins (C scans from the list head, where new
//! entries go). [`MappingId`]s grow monotonically, so "newest" is the largest id.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use crate::action::ReservationId;

/// Names one mapping; larger ids are newer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingId(pub u64);

/// What a mapping is for, as far as the daemon can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MappingRole {
    /// Created by ADD_MAPPING: a listening endpoint, which peers may ask about.
    Listener,
    /// Created by QUERY_MAPPING: a connecting endpoint, never disclosed to peers.
    Connector,
    /// Replayed by the kernel after a restart (MAPINFO does not say which); treated as a
    /// listener, as the C daemon does.
    Recovered,
}

/// One mapping as stored.
#[derive(Clone, Debug)]
pub(crate) struct Mapping {
    /// The local address as first received from the kernel (all 128 bytes).
    pub local: SockAddrStorage,
    pub local_ep: Endpoint,
    /// The mapped address: `local` with the reserved port, or `local` itself (NO_PORT_MAP).
    pub mapped: SockAddrStorage,
    pub mapped_ep: Endpoint,
    /// Kernel client index that created it; only it may REMOVE it.
    pub owner: u8,
    /// Kernel references (ADD/QUERY/MAPINFO records); freed at 0.
    pub refcount: u32,
    pub no_port_map: bool,
    pub role: MappingRole,
    /// The shell's reserved TCP socket (`None` for NO_PORT_MAP).
    pub reservation: Option<ReservationId>,
    pub created_at: Instant,
}

/// Read-only view of a mapping, as returned by [`crate::Core::mappings`].
#[derive(Clone, Copy, Debug)]
pub struct MappingView<'a> {
    /// Identity of the mapping.
    pub id: MappingId,
    /// Local address as received (128 bytes).
    pub local: &'a SockAddrStorage,
    /// Local IP and port.
    pub local_endpoint: Endpoint,
    /// Mapped address (128 bytes).
    pub mapped: &'a SockAddrStorage,
    /// Mapped IP and port.
    pub mapped_endpoint: Endpoint,
    /// Number of kernel references.
    pub refcount: u32,
    /// Kernel client index owning the mapping.
    pub owner_client: u8,
    /// Local IP is 0.0.0.0 or `::`.
    pub wildcard: bool,
    /// Created with `IWPM_FLAGS_NO_PORT_MAP` (mapped = local, no reservation).
    pub no_port_map: bool,
    /// Listener, connector or recovered.
    pub role: MappingRole,
    /// The reservation holding the mapped port, if any.
    pub reservation: Option<ReservationId>,
    /// When the mapping was created.
    pub created_at: Instant,
}

/// Entries sharing one port.
#[derive(Clone, Debug, Default)]
struct PortSet {
    all: Vec<MappingId>,
    wildcards: Vec<MappingId>,
}

/// Exact and per-port index of one address side.
#[derive(Clone, Debug, Default)]
struct AddrIndex {
    exact: HashMap<Endpoint, Vec<MappingId>>,
    by_port: HashMap<u16, PortSet>,
}

fn newest<'a>(ids: impl IntoIterator<Item = &'a MappingId>) -> Option<MappingId> {
    ids.into_iter().max().copied()
}

fn remove_id(v: &mut Vec<MappingId>, id: MappingId) {
    if let Some(pos) = v.iter().position(|x| *x == id) {
        v.swap_remove(pos);
    }
}

impl AddrIndex {
    fn insert(&mut self, ep: Endpoint, id: MappingId) {
        self.exact.entry(ep).or_default().push(id);
        let set = self.by_port.entry(ep.port).or_default();
        set.all.push(id);
        if ep.is_wildcard() {
            set.wildcards.push(id);
        }
    }

    fn remove(&mut self, ep: Endpoint, id: MappingId) {
        if let Some(v) = self.exact.get_mut(&ep) {
            remove_id(v, id);
            if v.is_empty() {
                self.exact.remove(&ep);
            }
        }
        if let Some(set) = self.by_port.get_mut(&ep.port) {
            remove_id(&mut set.all, id);
            remove_id(&mut set.wildcards, id);
            if set.all.is_empty() {
                self.by_port.remove(&ep.port);
            }
        }
    }

    fn exact(&self, ep: &Endpoint) -> Option<MappingId> {
        self.exact.get(ep).and_then(newest)
    }

    fn loose(&self, ep: &Endpoint) -> Option<MappingId> {
        let set = self.by_port.get(&ep.port)?;
        if ep.is_wildcard() {
            return newest(&set.all);
        }
        let exact = self.exact(ep);
        let wild = newest(&set.wildcards);
        exact.max(wild)
    }

    fn len(&self) -> usize {
        self.exact.values().map(Vec::len).sum()
    }
}

/// The table. Storage is ordered by id so dumps list newest first without sorting.
#[derive(Clone, Debug, Default)]
pub(crate) struct MappingTable {
    entries: BTreeMap<MappingId, Mapping>,
    local: AddrIndex,
    mapped: AddrIndex,
    next_id: u64,
}

impl MappingTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn insert(&mut self, m: Mapping) -> MappingId {
        self.next_id += 1;
        let id = MappingId(self.next_id);
        self.local.insert(m.local_ep, id);
        self.mapped.insert(m.mapped_ep, id);
        self.entries.insert(id, m);
        id
    }

    pub fn remove(&mut self, id: MappingId) -> Option<Mapping> {
        let m = self.entries.remove(&id)?;
        self.local.remove(m.local_ep, id);
        self.mapped.remove(m.mapped_ep, id);
        Some(m)
    }

    pub fn get(&self, id: MappingId) -> Option<&Mapping> {
        self.entries.get(&id)
    }

    pub fn get_mut(&mut self, id: MappingId) -> Option<&mut Mapping> {
        self.entries.get_mut(&id)
    }

    /// C's loose look-up by local address.
    pub fn loose_local(&self, ep: &Endpoint) -> Option<MappingId> {
        self.local.loose(ep)
    }

    /// C's exact look-up by local address.
    pub fn exact_local(&self, ep: &Endpoint) -> Option<MappingId> {
        self.local.exact(ep)
    }

    /// C's loose look-up by mapped address.
    pub fn loose_mapped(&self, ep: &Endpoint) -> Option<MappingId> {
        self.mapped.loose(ep)
    }

    /// Newest first, as the C dump lists them.
    pub fn iter(&self) -> impl Iterator<Item = (MappingId, &Mapping)> {
        self.entries.iter().rev().map(|(id, m)| (*id, m))
    }

    pub fn view(id: MappingId, m: &Mapping) -> MappingView<'_> {
        MappingView {
            id,
            local: &m.local,
            local_endpoint: m.local_ep,
            mapped: &m.mapped,
            mapped_endpoint: m.mapped_ep,
            refcount: m.refcount,
            owner_client: m.owner,
            wildcard: m.local_ep.is_wildcard(),
            no_port_map: m.no_port_map,
            role: m.role,
            reservation: m.reservation,
            created_at: m.created_at,
        }
    }

    /// Checks that both indexes describe exactly the stored entries.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.local.len() != self.entries.len() || self.mapped.len() != self.entries.len() {
            return Err("index size differs from table size");
        }
        for (id, m) in &self.entries {
            if m.refcount == 0 {
                return Err("live mapping with refcount 0");
            }
            if !self
                .local
                .exact
                .get(&m.local_ep)
                .is_some_and(|v| v.contains(id))
            {
                return Err("mapping missing from the local index");
            }
            if !self
                .mapped
                .exact
                .get(&m.mapped_ep)
                .is_some_and(|v| v.contains(id))
            {
                return Err("mapping missing from the mapped index");
            }
            let set = self.local.by_port.get(&m.local_ep.port);
            if !set.is_some_and(|s| {
                s.all.contains(id) && s.wildcards.contains(id) == m.local_ep.is_wildcard()
            }) {
                return Err("mapping missing from the local port index");
            }
        }
        let port_total: usize = self.local.by_port.values().map(|s| s.all.len()).sum();
        if port_total != self.entries.len() {
            return Err("local port index has stale entries");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn ep(s: &str) -> Endpoint {
        s.parse::<SocketAddr>().unwrap().into()
    }

    fn mapping(local: &str, mapped: &str, now: Instant) -> Mapping {
        let l: SocketAddr = local.parse().unwrap();
        let m: SocketAddr = mapped.parse().unwrap();
        Mapping {
            local: l.into(),
            local_ep: l.into(),
            mapped: m.into(),
            mapped_ep: m.into(),
            owner: 2,
            refcount: 1,
            no_port_map: false,
            role: MappingRole::Listener,
            reservation: None,
            created_at: now,
        }
    }

    #[test]
    fn loose_and_exact_lookups_follow_c_rules() {
        let now = Instant::now();
        let mut t = MappingTable::default();
        let a = t.insert(mapping("10.0.0.1:4000", "10.0.0.1:40000", now));
        let w = t.insert(mapping("[::]:5000", "[::]:50000", now));
        assert_eq!(t.exact_local(&ep("10.0.0.1:4000")), Some(a));
        assert_eq!(t.loose_local(&ep("10.0.0.1:4000")), Some(a));
        assert_eq!(
            t.loose_local(&ep("0.0.0.0:4000")),
            Some(a),
            "searched wildcard"
        );
        assert_eq!(
            t.loose_local(&ep("10.0.0.2:4000")),
            None,
            "other specific IP"
        );
        assert_eq!(
            t.loose_local(&ep("10.9.9.9:5000")),
            Some(w),
            "cross-family wildcard"
        );
        assert_eq!(t.exact_local(&ep("10.9.9.9:5000")), None);
        assert_eq!(t.loose_mapped(&ep("10.0.0.1:40000")), Some(a));
        assert_eq!(t.loose_mapped(&ep("[2001:db8::1]:50000")), Some(w));
        t.check().unwrap();
        t.remove(a).unwrap();
        assert_eq!(t.loose_local(&ep("0.0.0.0:4000")), None);
        t.check().unwrap();
    }

    #[test]
    fn newest_match_wins() {
        let now = Instant::now();
        let mut t = MappingTable::default();
        let a = t.insert(mapping("10.0.0.1:4000", "10.0.0.1:40000", now));
        let b = t.insert(mapping("10.0.0.2:4000", "10.0.0.2:40001", now));
        assert_eq!(t.loose_local(&ep("0.0.0.0:4000")), Some(b));
        assert_eq!(t.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![b, a]);
    }
}
