//! The kernel's two address tables: mapinfo (what to replay to a restarted daemon) and
//! remote-info (how the passive side learns the connecting peer's real address).
//!
//! The kernel keeps both in chained hash tables; iteration order there depends on a hash
//! of the addresses. Here both are vectors indexed by their key (so a look-up is O(1) at
//! 50k entries, as in the kernel); a removal moves the last entry into the hole, which
//! changes only the order of MAPINFO records in a replay (the daemon must not depend on
//! it). Entries whose addresses are not IPv4/IPv6 are kept but never match, as
//! `iwpm_compare_sockaddr` never matches them.

use std::collections::HashMap;

use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

/// Key of both tables: two endpoints; `None` when either is of another family.
fn key(a: &SockAddrStorage, b: &SockAddrStorage) -> Option<(Endpoint, Endpoint)> {
    Some((a.endpoint()?, b.endpoint()?))
}

/// A vector with a key index: the positions of each key's entries, in insertion order
/// (so the last one is the newest, wherever it sits in the vector).
#[derive(Clone, Debug)]
struct Indexed<T> {
    entries: Vec<T>,
    index: HashMap<(Endpoint, Endpoint), Vec<usize>>,
    key_of: fn(&T) -> Option<(Endpoint, Endpoint)>,
}

impl<T> Indexed<T> {
    fn new(key_of: fn(&T) -> Option<(Endpoint, Endpoint)>) -> Self {
        Indexed {
            entries: Vec::new(),
            index: HashMap::new(),
            key_of,
        }
    }

    fn push(&mut self, entry: T) {
        if let Some(k) = (self.key_of)(&entry) {
            self.index.entry(k).or_default().push(self.entries.len());
        }
        self.entries.push(entry);
    }

    /// Removes the newest entry with key `k`.
    fn take_newest(&mut self, k: &(Endpoint, Endpoint)) -> Option<T> {
        let positions = self.index.get_mut(k)?;
        let i = positions.pop()?;
        if positions.is_empty() {
            self.index.remove(k);
        }
        let last = self.entries.len() - 1;
        if i != last {
            // The last entry moves into slot i: fix its position in the index.
            if let Some(moved) = (self.key_of)(&self.entries[last]) {
                if let Some(p) = self
                    .index
                    .get_mut(&moved)
                    .and_then(|v| v.iter_mut().find(|p| **p == last))
                {
                    *p = i;
                }
            }
        }
        Some(self.entries.swap_remove(i))
    }
}

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
#[derive(Clone, Debug)]
pub struct MapInfoTable {
    table: Indexed<MapInfoEntry>,
}

impl Default for MapInfoTable {
    fn default() -> Self {
        MapInfoTable {
            table: Indexed::new(|e| key(&e.local, &e.mapped)),
        }
    }
}

impl MapInfoTable {
    /// Adds an entry (duplicates allowed, as in the kernel).
    pub fn insert(&mut self, entry: MapInfoEntry) {
        self.table.push(entry);
    }

    /// Removes one entry for this id, newest first. The kernel removes the first entry of
    /// the hash bucket of (local, mapped) whose mapped address matches; an entry with the
    /// same local and mapped address is what lands in that bucket **(inferred)**.
    pub fn remove(&mut self, local: &SockAddrStorage, mapped: &SockAddrStorage) -> bool {
        key(local, mapped).is_some_and(|k| self.table.take_newest(&k).is_some())
    }

    /// `iwpm_mapinfo_available`.
    pub fn is_empty(&self) -> bool {
        self.table.entries.is_empty()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.table.entries.len()
    }

    /// All entries (in insertion order until the first removal; see the module docs).
    pub fn entries(&self) -> &[MapInfoEntry] {
        &self.table.entries
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
#[derive(Clone, Debug)]
pub struct RemoteInfoTable {
    table: Indexed<RemoteInfoEntry>,
}

impl Default for RemoteInfoTable {
    fn default() -> Self {
        RemoteInfoTable {
            table: Indexed::new(|e| key(&e.mapped_local, &e.mapped_remote)),
        }
    }
}

impl RemoteInfoTable {
    /// Adds an entry (duplicates are simply added).
    pub fn insert(&mut self, entry: RemoteInfoEntry) {
        self.table.push(entry);
    }

    /// `iwpm_get_remote_info`: finds the entry keyed by (mapped local, mapped remote),
    /// compared by family, IP and port; removes it and returns the real remote address.
    pub fn take(
        &mut self,
        mapped_local: &SockAddrStorage,
        mapped_remote: &SockAddrStorage,
    ) -> Option<SockAddrStorage> {
        // The kernel's bucket lists are newest first.
        let k = key(mapped_local, mapped_remote)?;
        Some(self.table.take_newest(&k)?.remote)
    }

    /// Number of entries (unconsumed ones included).
    pub fn len(&self) -> usize {
        self.table.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.table.entries.is_empty()
    }

    /// All entries (in insertion order until the first removal; see the module docs).
    pub fn entries(&self) -> &[RemoteInfoEntry] {
        &self.table.entries
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
