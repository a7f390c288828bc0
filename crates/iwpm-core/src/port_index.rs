//! One address side of the mapping table, indexed by port, answering C's two look-ups in
//! O(1) however many entries share a port.
//!
//! Nearly every port holds one entry (mapped ports are reserved one per mapping; local
//! ports are a listener's or a connection's own), so that case is one inline id: 24 bytes
//! per port with the key, which is most of what the table costs per mapping. The entry's
//! IP is then read from the table (`ip_of`). A port shared by a few addresses keeps its
//! ids with their IPs; a crowded one (a listener on the same port of many local
//! addresses) keeps them by IP and in id order, so neither look-up scans the port.
//!
//! * *exact*: same IP (and so family) on the port;
//! * *loose*: same IP, or the entry is a wildcard of the searched address's family, or the
//!   searched address is a wildcard (so `0.0.0.0:P` also matches an IPv6 entry on port P,
//!   as in C). A wildcard entry never answers for the other family: the kernel never
//!   connects an IPv6 peer to an IPv4-wildcard listener or the other way round (siw and
//!   the iWARP adapters listen per address family), so a REMOTE_INFO sent for such a pair
//!   would stay in the kernel unconsumed (C answers it, and leaks that entry);
//! * *collision* (our ADD_MAPPING duplicate rule, `docs/protocol.md` §4.5): the loose
//!   look-up within the searched address's family only. C's loose look-up lets a wildcard
//!   collide with every entry on the port, IPv6 ones too, which refuses the second of
//!   nfsd's `0.0.0.0:P` and `[::]:P` listeners; the families' listeners and their mapped
//!   ports never meet (each mapping reserves a port of its own), so nothing is protected.
//!
//! When several entries match, the newest (largest id) wins.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::int_hash::IntMap;
use crate::mapping_id::MappingId;

/// A port holding this many entries is indexed by IP.
const CROWDED_AT: usize = 16;

/// Which of C's two look-ups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Family, IP and port equal.
    Exact,
    /// Equal, or the entry a wildcard of the same family, or the searched address a
    /// wildcard.
    Loose,
    /// Loose within the searched address's family.
    Collision,
}

impl Lookup {
    fn accepts(self, entry: IpAddr, searched: IpAddr) -> bool {
        let same_family = entry.is_ipv4() == searched.is_ipv4();
        entry == searched
            || match self {
                Lookup::Exact => false,
                Lookup::Loose => {
                    (entry.is_unspecified() && same_family) || searched.is_unspecified()
                }
                Lookup::Collision => {
                    same_family && (entry.is_unspecified() || searched.is_unspecified())
                }
            }
    }
}

/// Index of `ip`'s family in a per-family pair.
fn family(ip: IpAddr) -> usize {
    usize::from(ip.is_ipv6())
}

/// The wildcard address of `ip`'s family.
fn wildcard_of(ip: IpAddr) -> IpAddr {
    if ip.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    }
}

/// Entries of a crowded port.
#[derive(Clone, Debug, Default)]
struct Crowded {
    /// Every id, per family (IPv4, IPv6).
    all: [BTreeSet<MappingId>; 2],
    by_ip: HashMap<IpAddr, Vec<MappingId>>,
}

impl Crowded {
    fn newest(&self, lookup: Lookup, ip: IpAddr) -> Option<MappingId> {
        let on = |ip: IpAddr| self.by_ip.get(&ip).and_then(|v| v.iter().max().copied());
        let last = |f: usize| self.all[f].last().copied();
        match lookup {
            Lookup::Exact => on(ip),
            Lookup::Loose if ip.is_unspecified() => last(0).max(last(1)),
            Lookup::Collision if ip.is_unspecified() => last(family(ip)),
            Lookup::Loose | Lookup::Collision => on(ip).max(on(wildcard_of(ip))),
        }
    }

    fn insert(&mut self, id: MappingId, ip: IpAddr) {
        self.all[family(ip)].insert(id);
        self.by_ip.entry(ip).or_default().push(id);
    }

    fn len(&self) -> usize {
        self.all[0].len() + self.all[1].len()
    }
}

/// The entries on one port.
#[derive(Clone, Debug)]
enum PortEntries {
    One(MappingId),
    #[expect(
        clippy::box_collection,
        reason = "one pointer instead of a Vec's three keeps every port's entry small"
    )]
    Few(Box<Vec<(MappingId, IpAddr)>>),
    Crowded(Box<Crowded>),
}

/// One side's index: port to entries.
#[derive(Clone, Debug, Default)]
pub(crate) struct PortIndex {
    ports: IntMap<u16, PortEntries>,
}

impl PortIndex {
    /// Adds `id`, whose address on this side is `ip`:`port`.
    pub(crate) fn insert(
        &mut self,
        port: u16,
        ip: IpAddr,
        id: MappingId,
        ip_of: impl Fn(MappingId) -> Option<IpAddr>,
    ) {
        let Some(entries) = self.ports.get_mut(&port) else {
            self.ports.insert(port, PortEntries::One(id));
            return;
        };
        match entries {
            PortEntries::One(first) => {
                let first_ip = ip_of(*first).unwrap_or(ip);
                *entries = PortEntries::Few(Box::new(vec![(*first, first_ip), (id, ip)]));
            }
            PortEntries::Few(v) if v.len() + 1 >= CROWDED_AT => {
                let mut c = Crowded::default();
                for (x, x_ip) in v.iter().copied().chain([(id, ip)]) {
                    c.insert(x, x_ip);
                }
                *entries = PortEntries::Crowded(Box::new(c));
            }
            PortEntries::Few(v) => v.push((id, ip)),
            PortEntries::Crowded(c) => c.insert(id, ip),
        }
    }

    /// Removes `id` (address `ip`:`port` on this side).
    pub(crate) fn remove(&mut self, port: u16, ip: IpAddr, id: MappingId) {
        let Some(entries) = self.ports.get_mut(&port) else {
            return;
        };
        let empty = match entries {
            PortEntries::One(x) => *x == id,
            PortEntries::Few(v) => {
                v.retain(|(x, _)| *x != id);
                match v[..] {
                    [] => true,
                    [(only, _)] => {
                        *entries = PortEntries::One(only);
                        false
                    }
                    _ => false,
                }
            }
            PortEntries::Crowded(c) => {
                c.all[family(ip)].remove(&id);
                if let Some(v) = c.by_ip.get_mut(&ip) {
                    v.retain(|x| *x != id);
                    if v.is_empty() {
                        c.by_ip.remove(&ip);
                    }
                }
                c.len() == 0
            }
        };
        if empty {
            self.ports.remove(&port);
        }
    }

    /// The newest entry on `port` that `lookup` accepts for `ip`.
    pub(crate) fn newest(
        &self,
        lookup: Lookup,
        port: u16,
        ip: IpAddr,
        ip_of: impl Fn(MappingId) -> Option<IpAddr>,
    ) -> Option<MappingId> {
        match self.ports.get(&port)? {
            PortEntries::One(id) => ip_of(*id).filter(|e| lookup.accepts(*e, ip)).map(|_| *id),
            PortEntries::Few(v) => v
                .iter()
                .filter(|(_, e)| lookup.accepts(*e, ip))
                .map(|(id, _)| *id)
                .max(),
            PortEntries::Crowded(c) => c.newest(lookup, ip),
        }
    }

    /// Number of ids held.
    pub(crate) fn len(&self) -> usize {
        self.ports
            .values()
            .map(|e| match e {
                PortEntries::One(_) => 1,
                PortEntries::Few(v) => v.len(),
                PortEntries::Crowded(c) => c.len(),
            })
            .sum()
    }

    /// True if `id` is held under `port` with address `ip`.
    pub(crate) fn contains(&self, port: u16, ip: IpAddr, id: MappingId) -> bool {
        match self.ports.get(&port) {
            Some(PortEntries::One(x)) => *x == id,
            Some(PortEntries::Few(v)) => v.contains(&(id, ip)),
            Some(PortEntries::Crowded(c)) => {
                c.all[family(ip)].contains(&id) && c.by_ip.get(&ip).is_some_and(|v| v.contains(&id))
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Entries 1..=n on port 5000, entry i at 10.0.0.i; entry 1000 is the wildcard.
    fn ip_of(id: MappingId) -> Option<IpAddr> {
        Some(match id.0 {
            1000 => ip("0.0.0.0"),
            n => IpAddr::from([10, 0, (n >> 8) as u8, n as u8]),
        })
    }

    #[test]
    fn one_few_and_crowded_ports_answer_alike() {
        for n in [1u64, 3, CROWDED_AT as u64 + 5] {
            let mut x = PortIndex::default();
            for i in 1..=n {
                x.insert(5000, ip_of(MappingId(i)).unwrap(), MappingId(i), ip_of);
            }
            let last = ip_of(MappingId(n)).unwrap();
            assert_eq!(
                x.newest(Lookup::Exact, 5000, last, ip_of),
                Some(MappingId(n))
            );
            assert_eq!(x.newest(Lookup::Exact, 5001, last, ip_of), None);
            assert_eq!(x.newest(Lookup::Exact, 5000, ip("10.9.9.9"), ip_of), None);
            assert_eq!(
                x.newest(Lookup::Loose, 5000, ip("0.0.0.0"), ip_of),
                Some(MappingId(n))
            );
            assert_eq!(
                x.newest(Lookup::Loose, 5000, ip("::"), ip_of),
                Some(MappingId(n))
            );
            let first = ip_of(MappingId(1)).unwrap();
            assert_eq!(
                x.newest(Lookup::Loose, 5000, first, ip_of),
                Some(MappingId(1))
            );
            // a wildcard entry: newest for every loose search on the port
            x.insert(5000, ip("0.0.0.0"), MappingId(1000), ip_of);
            assert_eq!(
                x.newest(Lookup::Loose, 5000, first, ip_of),
                Some(MappingId(1000))
            );
            assert_eq!(
                x.newest(Lookup::Exact, 5000, first, ip_of),
                Some(MappingId(1))
            );
            // ... but never for the other family.
            assert_eq!(x.newest(Lookup::Loose, 5000, ip("fd00::1"), ip_of), None);
            // A wildcard search collides within its own family only.
            assert_eq!(x.newest(Lookup::Collision, 5000, ip("::"), ip_of), None);
            assert_eq!(
                x.newest(Lookup::Collision, 5000, ip("0.0.0.0"), ip_of),
                Some(MappingId(1000))
            );
            assert_eq!(
                x.newest(Lookup::Collision, 5000, first, ip_of),
                Some(MappingId(1000))
            );
            assert_eq!(x.len(), n as usize + 1);
            assert!(x.contains(5000, ip("0.0.0.0"), MappingId(1000)));
            x.remove(5000, ip("0.0.0.0"), MappingId(1000));
            for i in 1..=n {
                x.remove(5000, ip_of(MappingId(i)).unwrap(), MappingId(i));
            }
            assert_eq!(x.len(), 0);
            assert!(x.ports.is_empty(), "n={n}");
        }
    }
}
