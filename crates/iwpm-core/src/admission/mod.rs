//! Admission: everything that decides whether a peer datagram is believed, and how far.
//! [`crate::Core`]'s exchanges keep only their own state; what a stranger on the network can
//! spend lives here, in one place with its own tests, as a QUIC endpoint keeps its
//! connection-independent state apart from its connections.
//!
//! In the order a datagram meets them:
//!
//! 1. `peer_allow`: sources outside the configured networks are dropped.
//! 2. Fleet keys ([`auth`]): a sealed datagram is opened; with keys, it is believed only
//!    if its MAC verifies, its stamp is inside the clock window and it was not seen
//!    before ([`replay`]). A plain datagram from a `peer_auth_required` network is dropped.
//!    What passes sealed is [`Trust::Authenticated`] and skips every defence below.
//! 3. For unauthenticated datagrams, the spoofing defences: echo cookies
//!    ([`crate::cookie`]), the REMOTE_INFO budget, each source's allowance of released
//!    REMOTE_INFOs, the released set and the REJECT cap. None of them is a per-source
//!    share a spoofer could spend with a victim's address, but the allowance (a verified
//!    ACK proves its source: `docs/HARDENING.md`).
//!
//! The bounds each of these keeps, with their tests, are in `docs/HARDENING.md`.

pub(crate) mod auth;
mod replay;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::config::CoreConfig;
use crate::cookie::CookieJar;
use crate::peer_allow::PeerAllow;
use crate::released::Released;
use crate::source_meter::SourceKey;
use crate::source_meter::{SourceMeter, MAX_SOURCES};
use crate::token_bucket::TokenBucket;

pub(crate) use auth::{Opened, Refused, Trust};
pub(crate) use iwpm_report::{AuthFailure, KeyUse};

/// How many addresses' allowances an IPv6 /64 has in all.
pub(crate) const NET_SHARE: u32 = 16;
/// Exchanges remembered as having released their REMOTE_INFO (`crate::released`): about
/// 40 bytes each.
const MAX_RELEASED: usize = 65_536;

/// Why a peer datagram was not admitted at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its source is outside `peer_allow`.
    NotAllowed,
    /// It failed authentication (or needed it and was plain).
    Auth(Refused),
}

/// What decides whether a peer datagram is believed.
#[derive(Debug)]
pub(crate) struct Admission {
    peer_allow: PeerAllow,
    pub(crate) auth: auth::Authenticator,
    /// Keys of the echo cookies in our ACCEPTs.
    pub(crate) cookies: CookieJar,
    /// REMOTE_INFOs the kernel may hold for exchanges no ACK confirmed yet.
    pub(crate) remote_info_tokens: TokenBucket,
    /// REJECTs we may send, in all.
    reject_tokens: TokenBucket,
    /// What each address's verified ACKs may release (REMOTE_INFOs) or return (budget
    /// tokens): `remote_info_source_burst`, then `remote_info_source_rate` per second.
    verified_allowance: SourceMeter,
    /// The same for each IPv6 /64, [`NET_SHARE`] times as much: a /64 may hold many hosts,
    /// and one real neighbour must not spend another's allowance, while a host that
    /// takes many addresses of its /64 still pins a bounded amount.
    net_allowance: SourceMeter,
    /// Exchanges whose cookie already released their REMOTE_INFO.
    pub(crate) released: Released,
}

impl Admission {
    pub(crate) fn new(config: &CoreConfig, now: Instant) -> Self {
        Admission {
            peer_allow: config.peer_allow.clone(),
            auth: auth::Authenticator::new(
                config.peer_auth_required.clone(),
                config.peer_auth_window,
            ),
            cookies: CookieJar::new(&config.handle_key, now),
            remote_info_tokens: TokenBucket::new(
                config.remote_info_budget,
                config.remote_info_refill,
                now,
            ),
            reject_tokens: TokenBucket::per_second(config.max_rejects_per_sec, now),
            verified_allowance: SourceMeter::new(
                config.remote_info_source_burst,
                Duration::from_secs(1)
                    .checked_div(config.remote_info_source_rate)
                    .unwrap_or(Duration::MAX),
                MAX_SOURCES,
            ),
            net_allowance: SourceMeter::new(
                config.remote_info_source_burst.saturating_mul(NET_SHARE),
                Duration::from_secs(1)
                    .checked_div(config.remote_info_source_rate.saturating_mul(NET_SHARE))
                    .unwrap_or(Duration::MAX),
                MAX_SOURCES,
            ),
            released: Released::new(MAX_RELEASED),
        }
    }

    /// The first look at a datagram from `from`: its source allowed, and (sealed) its
    /// authentication, or (plain) whether its network lets it go unauthenticated.
    pub(crate) fn admit(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
    ) -> Result<Opened, Refusal> {
        if !self.peer_allow.allows(from.ip()) {
            return Err(Refusal::NotAllowed);
        }
        let opened = self
            .auth
            .open(now, from.ip(), datagram)
            .map_err(Refusal::Auth)?;
        if opened.trust == Trust::Unauthenticated && self.auth.required_from(from.ip()) {
            return Err(Refusal::Auth(Refused {
                failure: AuthFailure::Missing,
                skew_ms: 0,
                key_id: 0,
            }));
        }
        Ok(opened)
    }

    /// May we answer a REQUEST for no listener with a REJECT? A REJECT (48 bytes) is never
    /// larger than the REQUEST it answers, so only the total is capped, never a source's
    /// share: a spoofer with a victim's address cannot spend the victim's REJECTs.
    /// Authenticated REQUESTs are not capped at all.
    pub(crate) fn may_reject(&mut self, now: Instant, trust: Trust) -> bool {
        trust == Trust::Authenticated || self.reject_tokens.take(now)
    }

    /// May a verified ACK from `from` release a REMOTE_INFO (or return a token) now? Takes
    /// one of its address's allowance and, for IPv6, of its /64's. Authenticated ACKs take
    /// none.
    pub(crate) fn take_allowance(&mut self, now: Instant, from: IpAddr, trust: Trust) -> bool {
        if trust == Trust::Authenticated {
            return true;
        }
        let address = SourceKey::exact(from);
        if !address.is_ipv6() {
            return self.verified_allowance.take(now, address);
        }
        // (the address first, so that an address at its own limit spends none of its /64's)
        self.verified_allowance.available(now, address) > 0
            && self.net_allowance.take(now, SourceKey::of(from))
            && self.verified_allowance.take(now, address)
    }
}
