//! The mapping table: one entry per mapped local address, with reference counts, indexed by
//! local and by mapped port.
//!
//! The C daemon keeps an unsorted list and scans it for every look-up. Here each address
//! side has a [`PortIndex`] that answers C's *exact* and *loose* look-ups in O(1) (rules in
//! `port_index.rs`). When several entries match, the newest wins (C scans from the list
//! head, where new entries go). [`MappingId`]s grow monotonically, so "newest" is the
//! largest id.
//!
//! Memory is the point of the layout (50 000 mappings must fit well under 32 MiB): an
//! entry lives in a slab slot (no per-entry allocation), keeps the first 28 bytes of its
//! local `sockaddr_storage` inline and the other 100 only when they are not all zero
//! (never, from Linux), and keeps its mapped address as just the port when it is the local
//! address with another port (always, except for addresses replayed by the kernel or
//! restored from the state file that differ otherwise). A unit test bounds the slot size;
//! `iwpm-bench` measures the whole daemon's bytes per mapping.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use iwpm_proto::consts::SOCKADDR_STORAGE_SIZE;
use iwpm_proto::sockaddr::{socket_addr_from_head, Endpoint, SockAddrStorage};

use crate::action::ReservationId;
use crate::mapping_id::MappingId;
use crate::port_index::{Lookup, PortIndex};

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

/// Bytes of a `sockaddr_storage` that hold family, port, address, flowinfo and scope id.
const ADDR_HEAD: usize = iwpm_proto::sockaddr::SOCKADDR_HEAD;
const ADDR_TAIL: usize = SOCKADDR_STORAGE_SIZE - ADDR_HEAD;

/// What a compact entry cannot rebuild, kept out of line (never needed with Linux's own
/// addresses): a local address whose bytes after the head are not all zero, a mapped
/// address that is not the local one with another port.
#[derive(Clone, Debug)]
struct Unusual {
    local_tail: [u8; ADDR_TAIL],
    mapped: Option<SockAddrStorage>,
}

/// One mapping as stored.
#[derive(Clone, Debug)]
pub(crate) struct Mapping {
    /// The head of the local address as first received from the kernel: family, port, IP,
    /// flowinfo, scope id (the rest is zero unless `unusual` says otherwise).
    local_head: [u8; ADDR_HEAD],
    /// The mapped port: the mapped address is the local one with this port (unless
    /// `unusual` holds another).
    mapped_port: u16,
    unusual: Option<Box<Unusual>>,
    /// Kernel client index that created it; only it may REMOVE it.
    pub owner: u8,
    /// Kernel references (ADD/QUERY/MAPINFO records); freed at 0.
    pub refcount: u32,
    /// No reservation holds a port (NO_PORT_MAP).
    pub no_port_map: bool,
    pub role: MappingRole,
    /// The shell's reserved TCP socket, unless `no_port_map` (see [`Mapping::reservation`]).
    reservation: u64,
    /// The high half of the entry's [`MappingId`] (the slot is the low half).
    seq: u32,
    pub created_at: Instant,
}

/// Whether every byte is zero, eight at a time.
fn all_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder().iter().fold(0u8, |acc, b| acc | b);
    words.fold(u64::from(rest), |acc, w| {
        acc | u64::from_ne_bytes(w.try_into().unwrap_or_default())
    }) == 0
}

impl Mapping {
    /// A mapping with one reference. `local` and `mapped` must be IPv4 or IPv6 (the core
    /// only maps addresses whose endpoint it could read).
    pub(crate) fn new(
        local: &SockAddrStorage,
        mapped: &SockAddrStorage,
        owner: u8,
        role: MappingRole,
        reservation: Option<ReservationId>,
        created_at: Instant,
    ) -> Mapping {
        let mapped_port = mapped.port();
        let other_mapped = (local.with_port(mapped_port) != *mapped).then_some(*mapped);
        Mapping::build(
            local,
            mapped_port,
            other_mapped,
            owner,
            role,
            reservation,
            created_at,
        )
    }

    /// A mapping with one reference whose mapped address is `local` with `mapped_port`
    /// (a reserved port, or the local port itself for NO_PORT_MAP): what ADD and QUERY
    /// create, without comparing two 128-byte blocks.
    pub(crate) fn new_local(
        local: &SockAddrStorage,
        mapped_port: u16,
        owner: u8,
        role: MappingRole,
        reservation: Option<ReservationId>,
        created_at: Instant,
    ) -> Mapping {
        Mapping::build(
            local,
            mapped_port,
            None,
            owner,
            role,
            reservation,
            created_at,
        )
    }

    fn build(
        local: &SockAddrStorage,
        mapped_port: u16,
        other_mapped: Option<SockAddrStorage>,
        owner: u8,
        role: MappingRole,
        reservation: Option<ReservationId>,
        created_at: Instant,
    ) -> Mapping {
        let bytes = local.as_bytes();
        let mut local_head = [0u8; ADDR_HEAD];
        local_head.copy_from_slice(&bytes[..ADDR_HEAD]);
        let tail_used = !all_zero(&bytes[ADDR_HEAD..]);
        let unusual = (tail_used || other_mapped.is_some()).then(|| {
            let mut local_tail = [0u8; ADDR_TAIL];
            local_tail.copy_from_slice(&bytes[ADDR_HEAD..]);
            Box::new(Unusual {
                local_tail,
                mapped: other_mapped,
            })
        });
        Mapping {
            local_head,
            mapped_port,
            unusual,
            owner,
            refcount: 1,
            no_port_map: reservation.is_none(),
            role,
            reservation: reservation.map_or(0, |r| r.0),
            seq: 0,
            created_at,
        }
    }

    /// The shell's reserved TCP socket (`None` for NO_PORT_MAP).
    pub(crate) fn reservation(&self) -> Option<ReservationId> {
        (!self.no_port_map).then_some(ReservationId(self.reservation))
    }

    /// The local address as received.
    pub(crate) fn local(&self) -> SockAddrStorage {
        let mut raw = SockAddrStorage::default();
        raw.0[..ADDR_HEAD].copy_from_slice(&self.local_head);
        if let Some(u) = &self.unusual {
            raw.0[ADDR_HEAD..].copy_from_slice(&u.local_tail);
        }
        raw
    }

    fn other_mapped(&self) -> Option<&SockAddrStorage> {
        self.unusual.as_ref().and_then(|u| u.mapped.as_ref())
    }

    /// The mapped address.
    pub(crate) fn mapped(&self) -> SockAddrStorage {
        match self.other_mapped() {
            Some(m) => *m,
            None => self.local().with_port(self.mapped_port),
        }
    }

    /// The local IP and port.
    pub(crate) fn local_ep(&self) -> Endpoint {
        endpoint_of(&self.local_head)
    }

    /// The local address as a socket address (IPv4/IPv6 with flowinfo and scope id), read
    /// from the inline head without rebuilding the 128 bytes.
    pub(crate) fn local_socket_addr(&self) -> Option<SocketAddr> {
        socket_addr_from_head(&self.local_head)
    }

    /// The mapped address as a socket address; see [`Mapping::local_socket_addr`].
    pub(crate) fn mapped_socket_addr(&self) -> Option<SocketAddr> {
        match self.other_mapped() {
            Some(m) => m.to_socket_addr(),
            None => self.local_socket_addr().map(|mut a| {
                a.set_port(self.mapped_port);
                a
            }),
        }
    }

    /// The mapped IP and port.
    pub(crate) fn mapped_ep(&self) -> Endpoint {
        match self.other_mapped() {
            Some(m) => endpoint_of(&m.0),
            None => Endpoint {
                port: self.mapped_port,
                ..self.local_ep()
            },
        }
    }
}

/// The endpoint of an address (its head, or all 128 bytes), read in place. Entries are
/// only made from IPv4/IPv6 addresses; any other family reads as `0.0.0.0` with the port
/// (never reached).
fn endpoint_of(addr: &[u8]) -> Endpoint {
    match addr
        .first_chunk::<ADDR_HEAD>()
        .and_then(socket_addr_from_head)
    {
        Some(a) => Endpoint {
            ip: a.ip(),
            port: a.port(),
        },
        None => Endpoint {
            ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
            port: addr
                .get(2..4)
                .map_or(0, |p| u16::from_be_bytes([p[0], p[1]])),
        },
    }
}

/// Read-only view of a mapping, as returned by [`crate::Core::mappings`].
#[derive(Clone, Copy, Debug)]
pub struct MappingView {
    /// Identity of the mapping.
    pub id: MappingId,
    /// Local address as received (128 bytes).
    pub local: SockAddrStorage,
    /// Local IP and port.
    pub local_endpoint: Endpoint,
    /// Mapped address (128 bytes).
    pub mapped: SockAddrStorage,
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

/// One slab slot: the entry (its id is its `seq` and the slot's index), or free.
type Slot = Option<Mapping>;

/// The table.
#[derive(Clone, Debug, Default)]
pub(crate) struct MappingTable {
    slots: Vec<Slot>,
    /// Free slots, reused last-freed first.
    free: Vec<u32>,
    local: PortIndex,
    mapped: PortIndex,
    next_seq: u32,
}

impl MappingTable {
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub(crate) fn insert(&mut self, m: Mapping) -> MappingId {
        self.next_seq = self.next_seq.wrapping_add(1);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let id = MappingId::new(self.next_seq, slot);
        let (local, mapped) = (m.local_ep(), m.mapped_ep());
        let slots = &self.slots;
        self.local
            .insert(local.port, local.ip, id, |x| ip_in(slots, x, Side::Local));
        self.mapped.insert(mapped.port, mapped.ip, id, |x| {
            ip_in(slots, x, Side::Mapped)
        });
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = Some(Mapping {
                seq: self.next_seq,
                ..m
            });
        }
        id
    }

    pub(crate) fn remove(&mut self, id: MappingId) -> Option<Mapping> {
        self.get(id)?;
        let slot = self.slots.get_mut(id.slot())?;
        let m = slot.take()?;
        self.free.push(u32::try_from(id.slot()).unwrap_or(u32::MAX));
        let (local, mapped) = (m.local_ep(), m.mapped_ep());
        self.local.remove(local.port, local.ip, id);
        self.mapped.remove(mapped.port, mapped.ip, id);
        Some(m)
    }

    pub(crate) fn get(&self, id: MappingId) -> Option<&Mapping> {
        live_in(&self.slots, id)
    }

    pub(crate) fn get_mut(&mut self, id: MappingId) -> Option<&mut Mapping> {
        match self.slots.get_mut(id.slot()) {
            Some(Some(m)) if m.seq == id.seq() => Some(m),
            _ => None,
        }
    }

    fn newest(&self, side: Side, lookup: Lookup, ep: &Endpoint) -> Option<MappingId> {
        let index = match side {
            Side::Local => &self.local,
            Side::Mapped => &self.mapped,
        };
        index.newest(lookup, ep.port, ep.ip, |x| ip_in(&self.slots, x, side))
    }

    /// C's loose look-up by local address.
    pub(crate) fn loose_local(&self, ep: &Endpoint) -> Option<MappingId> {
        self.newest(Side::Local, Lookup::Loose, ep)
    }

    /// The entry an ADD_MAPPING or a restored record of `ep` collides with: C's loose
    /// look-up within `ep`'s family (`port_index.rs`).
    pub(crate) fn colliding_local(&self, ep: &Endpoint) -> Option<MappingId> {
        self.newest(Side::Local, Lookup::Collision, ep)
    }

    /// C's exact look-up by local address.
    pub(crate) fn exact_local(&self, ep: &Endpoint) -> Option<MappingId> {
        self.newest(Side::Local, Lookup::Exact, ep)
    }

    /// C's loose look-up by mapped address.
    pub(crate) fn loose_mapped(&self, ep: &Endpoint) -> Option<MappingId> {
        self.newest(Side::Mapped, Lookup::Loose, ep)
    }

    /// Every entry with its id, in slot order.
    fn entries(&self) -> impl Iterator<Item = (MappingId, &Mapping)> {
        self.slots.iter().enumerate().filter_map(|(slot, m)| {
            let m = m.as_ref()?;
            Some((MappingId::new(m.seq, u32::try_from(slot).ok()?), m))
        })
    }

    /// Newest first, as the C dump lists them.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (MappingId, &Mapping)> {
        let mut all: Vec<(MappingId, &Mapping)> = self.entries().collect();
        all.sort_unstable_by_key(|(id, _)| std::cmp::Reverse(*id));
        all.into_iter()
    }

    pub(crate) fn view(id: MappingId, m: &Mapping) -> MappingView {
        let local_endpoint = m.local_ep();
        MappingView {
            id,
            local: m.local(),
            local_endpoint,
            mapped: m.mapped(),
            mapped_endpoint: m.mapped_ep(),
            refcount: m.refcount,
            owner_client: m.owner,
            wildcard: local_endpoint.is_wildcard(),
            no_port_map: m.no_port_map,
            role: m.role,
            reservation: m.reservation(),
            created_at: m.created_at,
        }
    }

    /// Checks that both indexes describe exactly the stored entries.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        let live = self.slots.iter().flatten().count();
        if live != self.len() {
            return Err("slot count differs from table size");
        }
        if self.local.len() != self.len() || self.mapped.len() != self.len() {
            return Err("index size differs from table size");
        }
        for (id, m) in self.entries() {
            if m.refcount == 0 {
                return Err("live mapping with refcount 0");
            }
            let (local, mapped) = (m.local_ep(), m.mapped_ep());
            if !self.local.contains(local.port, local.ip, id) {
                return Err("mapping missing from the local index");
            }
            if !self.mapped.contains(mapped.port, mapped.ip, id) {
                return Err("mapping missing from the mapped index");
            }
        }
        Ok(())
    }
}

/// Which address of an entry an index holds.
#[derive(Clone, Copy, Debug)]
enum Side {
    Local,
    Mapped,
}

/// The IP of entry `id` on `side`, read from the slots.
/// Entry `id` if its slot still holds it (a reused slot holds a newer id).
fn live_in(slots: &[Slot], id: MappingId) -> Option<&Mapping> {
    slots.get(id.slot())?.as_ref().filter(|m| m.seq == id.seq())
}

fn ip_in(slots: &[Slot], id: MappingId, side: Side) -> Option<IpAddr> {
    let m = live_in(slots, id)?;
    Some(match side {
        Side::Local => m.local_ep().ip,
        Side::Mapped => m.mapped_ep().ip,
    })
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
        Mapping::new(
            &l.into(),
            &m.into(),
            2,
            MappingRole::Listener,
            Some(ReservationId(7)),
            now,
        )
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
            None,
            "a wildcard answers only its own family (the kernel connects no other)"
        );
        assert_eq!(t.loose_local(&ep("[fd00::9]:5000")), Some(w), "wildcard");
        assert_eq!(t.exact_local(&ep("[fd00::9]:5000")), None);
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

    #[test]
    fn packed_addresses_keep_every_byte() {
        let now = Instant::now();
        let l: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
        let mut local: SockAddrStorage = l.into();
        local.0[100] = 0xab; // a non-zero tail byte: kept out of line
        let mut other: SockAddrStorage = "10.0.0.9:40000".parse::<SocketAddr>().unwrap().into();
        other.0[20] = 1;
        let plain = Mapping::new(
            &local,
            &local.with_port(50000),
            2,
            MappingRole::Listener,
            None,
            now,
        );
        assert_eq!(plain.local(), local);
        assert_eq!(plain.mapped(), local.with_port(50000));
        assert!(plain.unusual.as_ref().is_some_and(|u| u.mapped.is_none()));
        let usual = Mapping::new(
            &l.into(),
            &"[2001:db8::1]:1".parse::<SocketAddr>().unwrap().into(),
            2,
            MappingRole::Listener,
            None,
            now,
        );
        assert!(usual.unusual.is_none());
        assert_eq!(plain.mapped_ep(), ep("[2001:db8::1]:50000"));
        let odd = Mapping::new(&local, &other, 2, MappingRole::Recovered, None, now);
        assert_eq!(
            odd.mapped(),
            other,
            "a mapped address that is not local + port"
        );
        assert_eq!(odd.mapped_ep(), ep("10.0.0.9:40000"));
        assert!(
            std::mem::size_of::<Slot>() <= 112,
            "{}",
            std::mem::size_of::<Slot>()
        );
    }

    #[test]
    fn reused_slots_never_revive_old_ids() {
        let now = Instant::now();
        let mut t = MappingTable::default();
        let a = t.insert(mapping("10.0.0.1:4000", "10.0.0.1:40000", now));
        t.remove(a).unwrap();
        let b = t.insert(mapping("10.0.0.1:4001", "10.0.0.1:40001", now));
        assert_eq!(a.slot(), b.slot());
        assert!(b > a);
        assert!(t.get(a).is_none() && t.remove(a).is_none());
        assert_eq!(t.exact_local(&ep("10.0.0.1:4001")), Some(b));
        t.check().unwrap();
    }
}
