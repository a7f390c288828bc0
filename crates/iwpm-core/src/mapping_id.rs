//! [`MappingId`], the name of one mapping-table entry. Its own module because both the
//! table and the per-port indexes (`port_index.rs`) speak of it, and neither should
//! depend on the other for it.

/// Names one mapping; larger ids are newer. The low 32 bits are the entry's slot in the
/// table, the high 32 bits a sequence number (so a reused slot never revives an old id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingId(pub u64);

impl MappingId {
    pub(crate) fn new(seq: u32, slot: u32) -> MappingId {
        MappingId((u64::from(seq) << 32) | u64::from(slot))
    }

    pub(crate) fn slot(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }

    pub(crate) fn seq(self) -> u32 {
        (self.0 >> 32) as u32
    }
}
