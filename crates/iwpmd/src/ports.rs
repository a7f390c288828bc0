//! The TCP ports the daemon holds for its mappings: the reservations (one bound socket per
//! mapped port, as in rdma-core), how a new reservation's port is chosen, and the lender
//! the core borrows them through (`lender.rs`, which explains refusals in the log).

mod lender;
mod port_picker;
pub(crate) mod reservations;

pub(crate) use self::lender::Ports;
