//! `peer_allow`: which source addresses may talk the peer protocol to us at all.

use std::net::IpAddr;

use iwpm_proto::cidr::Cidr;

/// Networks whose peer datagrams are processed; empty means every source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerAllow {
    nets: Vec<Cidr>,
}

impl PeerAllow {
    /// Only sources in `nets` (an empty list allows every source).
    pub fn only(nets: Vec<Cidr>) -> Self {
        PeerAllow { nets }
    }

    /// True if datagrams from `ip` are processed.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.nets.is_empty() || self.nets.iter().any(|n| n.contains(ip))
    }

    /// The configured networks (empty: all).
    pub fn networks(&self) -> &[Cidr] {
        &self.nets
    }
}
