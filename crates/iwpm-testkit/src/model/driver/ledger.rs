//! The REMOTE_INFO ledger (`docs/HARDENING.md`, "Bounds per family and key state"): what peer datagrams
//! may make the core tell its kernel. A REMOTE_INFO for a peer's REQUEST takes a budget
//! token or answers a verified ACK, and a token comes back only with a verified ACK or the
//! refill, so over the whole run
//!
//! REMOTE_INFOs caused by peer datagrams <= budget x starts + elapsed / refill + 1
//!                                          + exchanges with a genuine ACK + chance
//!                                          + sealed REQUESTs delivered for the first time
//!
//! where an ACK is genuine when it echoes an ACCEPT the core sent to the ACK's source (the
//! model knows: it has every ACCEPT), and chance allows for ten-bit IPv6 cookies, which a
//! made-up ACK passes about once in 512 tries (a generous 1 in 64, plus 2).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Instant;

use iwpm_core::CoreConfig;
use iwpm_proto::peer::{IpVersion, PeerMessage, PeerMsgType, PEER_REQUEST_LEN};

use crate::model::pools::fail;

/// Offsets of the notice byte (outside the cookie's MAC) in an IPv4 datagram and in an
/// extension block: an ACK may echo the ACCEPT or its delivery notice.
const V4_NOTICE_AT: usize = 44;
const EXT_NOTICE_AT: usize = PEER_REQUEST_LEN + 8 + 20;

/// The binding of an exchange: (ACK source, handle, cp, ap).
type Binding = (SocketAddr, u64, SocketAddr, SocketAddr);

#[derive(Debug)]
pub(super) struct Ledger {
    started: Instant,
    /// REMOTE_INFOs sent while the core handled a peer datagram.
    from_peer: u64,
    /// Every ACCEPT sent: (destination, bytes without type bits and notice byte).
    accepts: HashSet<(SocketAddr, Vec<u8>)>,
    /// Exchanges that got a genuine ACK.
    genuine: HashSet<Binding>,
    /// IPv6 ACKs that were not genuine (each may pass a ten-bit cookie by chance).
    v6_made_up: u64,
    /// Sealed REQUESTs under the core's key delivered for the first time: a fleet member
    /// asked, and may get its REMOTE_INFO at once, on no budget.
    sealed_requests: u64,
}

/// A datagram as its sender had it before sealing (the datagram itself if not sealed).
fn inner(datagram: &[u8]) -> Vec<u8> {
    iwpm_proto::peer::auth::unseal(datagram).unwrap_or_else(|| datagram.to_vec())
}

/// An ACCEPT's or ACK's bytes as the cookie sees them: type bits and notice byte cleared.
fn as_echoed(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if let Some(first) = b.first_mut() {
        *first &= 0xcf;
    }
    let at = if b.len() > PEER_REQUEST_LEN {
        EXT_NOTICE_AT
    } else {
        V4_NOTICE_AT
    };
    if let Some(n) = b.get_mut(at) {
        *n = 0;
    }
    b
}

impl Ledger {
    pub(super) fn new(now: Instant) -> Self {
        Ledger {
            started: now,
            from_peer: 0,
            accepts: HashSet::new(),
            genuine: HashSet::new(),
            v6_made_up: 0,
            sealed_requests: 0,
        }
    }

    /// The core sent `datagram` to `to`.
    pub(super) fn sent(&mut self, to: SocketAddr, msg: &PeerMessage, datagram: &[u8]) {
        if msg.msg_type == PeerMsgType::Accept {
            self.accepts.insert((to, as_echoed(&inner(datagram))));
        }
    }

    /// A sealed datagram that verifies under the core's key arrives for the first time.
    pub(super) fn sealed_fresh(&mut self, datagram: &[u8]) {
        if PeerMessage::decode(datagram).is_ok_and(|m| m.msg_type == PeerMsgType::Request) {
            self.sealed_requests += 1;
        }
    }

    /// The core is handed `datagram` from `from`.
    pub(super) fn received(&mut self, from: SocketAddr, datagram: &[u8]) {
        let Ok(msg) = PeerMessage::decode(datagram) else {
            return;
        };
        if msg.msg_type != PeerMsgType::Ack {
            return;
        }
        if self.accepts.contains(&(from, as_echoed(&inner(datagram)))) {
            self.genuine
                .insert((from, msg.assoc_handle, msg.cp(), msg.ap()));
        } else if msg.ip_version == IpVersion::V6 {
            self.v6_made_up += 1;
        }
    }

    /// `n` REMOTE_INFOs came out of one peer datagram; checks the bound.
    pub(super) fn remote_infos(&mut self, n: u64, now: Instant, config: &CoreConfig, starts: u32) {
        self.from_peer += n;
        let elapsed = now.saturating_duration_since(self.started);
        let refills = (elapsed.as_nanos() / config.remote_info_refill.as_nanos().max(1)) as u64;
        let bound = u64::from(config.remote_info_budget) * u64::from(starts)
            + refills
            + 1
            + self.genuine.len() as u64
            + self.v6_made_up / 64
            + self.sealed_requests
            + 2;
        if self.from_peer > bound {
            fail(format!(
                "the ledger: {} REMOTE_INFOs for peer datagrams, more than budget {} x {starts} \
                 starts + {refills} refills + 1 + {} exchanges with a genuine ACK + {} made-up \
                 IPv6 ACKs / 64 + {} sealed REQUESTs + 2 = {bound}",
                self.from_peer,
                config.remote_info_budget,
                self.genuine.len(),
                self.v6_made_up,
                self.sealed_requests
            ));
        }
    }
}
