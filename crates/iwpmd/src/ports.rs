//! The TCP ports the daemon holds for its mappings: the reservations (one bound socket per
//! mapped port, as in rdma-core) and how a new reservation's port is chosen.

mod port_picker;
pub(crate) mod reservations;
