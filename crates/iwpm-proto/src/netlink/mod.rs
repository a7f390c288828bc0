//! Netlink framing and the iwpm message codec (in progress).
pub mod attr;
pub mod message;
