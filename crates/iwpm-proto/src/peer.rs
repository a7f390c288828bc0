//! Peer protocol codec (in progress).
