//! (in progress)
#![forbid(unsafe_code)]

pub mod kernel;

pub use kernel::Violation;
