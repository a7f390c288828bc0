//! Test support for the iwpmd-rs workspace, in one place instead of a copy per crate.
//!
//! Nothing here ships: the crate is `publish = false` and only tests, benches, the fuzz
//! targets and the lab depend on it.

pub mod model;
