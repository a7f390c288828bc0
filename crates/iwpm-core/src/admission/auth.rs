//! Fleet keys in the core: what we send to a keyed peer is sealed (`iwpm_proto::peer::auth`),
//! and a sealed datagram is believed only if its MAC verifies under a key we hold, its stamp
//! is inside the clock window and it was not seen before. Whoever passes that is a fleet
//! member, so the defences against spoofed sources do not apply to it.
//!
//! The stamps come from the wall clock the shell hands in ([`Authenticator::set_wall_clock`]:
//! the core never reads a clock), advanced by the core's own `now` between two hand-ins, and
//! never repeat: each is at least one microsecond past the last.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use iwpm_proto::cidr::Cidr;
use iwpm_proto::fleet_key::FleetKeys;
use iwpm_proto::peer::auth::{self, AuthBlock};
use iwpm_proto::peer::{PeerMessage, PeerMsgType};

use iwpm_report::{AuthFailure, KeyUse};

use super::replay::{ReplayMemory, Stale, MAX_REMEMBERED};

/// Whether a datagram proved where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// Not sealed, or sealed while we hold no key: anyone could have sent it.
    Unauthenticated,
    /// Sealed under a fleet key we hold: a fleet member sent it, once.
    Authenticated,
}

/// A datagram that passed authentication (or needed none): its inner bytes and its trust.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The datagram as its sender had it before sealing (`None`: the received bytes).
    pub(crate) inner: Option<Vec<u8>>,
    pub(crate) trust: Trust,
    /// The key it verified under.
    pub(crate) key_id: Option<u32>,
}

/// A sealed datagram not believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) failure: AuthFailure,
    /// For [`AuthFailure::Clock`]: the sender's clock minus ours, in milliseconds.
    pub(crate) skew_ms: i64,
    pub(crate) key_id: u32,
}

/// Keys, clock, replay memory and the policy of who must be authenticated.
#[derive(Debug)]
pub(crate) struct Authenticator {
    keys: Option<FleetKeys>,
    /// Use counts by key id (kept across reloads for the ids still listed).
    uses: BTreeMap<u32, (u64, u64)>,
    required: Vec<Cidr>,
    window: Duration,
    /// A wall-clock reading and the `now` it was taken at.
    wall: Option<(Instant, Duration)>,
    last_stamp_us: u64,
    replay: ReplayMemory,
}

impl Authenticator {
    pub(crate) fn new(required: Vec<Cidr>, window: Duration) -> Self {
        Authenticator {
            keys: None,
            uses: BTreeMap::new(),
            required,
            window,
            wall: None,
            last_stamp_us: 0,
            replay: ReplayMemory::new(MAX_REMEMBERED),
        }
    }

    /// A new key set (or none). Use counts stay for the ids still listed.
    pub(crate) fn set_keys(&mut self, keys: Option<FleetKeys>) {
        self.uses
            .retain(|id, _| keys.as_ref().is_some_and(|k| k.get(*id).is_some()));
        self.keys = keys;
    }

    /// The wall clock read at `now` (time since the Unix epoch). The first reading is the
    /// daemon's start: nothing sealed at or before it is believed, since a restarted
    /// daemon's replay memory is empty and a capture of the minute before must not pass.
    /// (A peer whose clock runs `d` behind ours is refused for `d` after our start; its
    /// retransmissions, sealed afresh, pass from then on.)
    pub(crate) fn set_wall_clock(&mut self, now: Instant, since_epoch: Duration) {
        if self.wall.is_none() {
            self.replay
                .raise_floor(u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX));
        }
        self.wall = Some((now, since_epoch));
    }

    pub(crate) fn is_keyed(&self) -> bool {
        self.keys.is_some()
    }

    /// True when datagrams from `ip` must be sealed.
    pub(crate) fn required_from(&self, ip: IpAddr) -> bool {
        self.required.iter().any(|n| n.contains(ip))
    }

    fn wall_us(&self, now: Instant) -> Option<u64> {
        let (at, wall) = self.wall?;
        let t = if now >= at {
            wall + (now - at)
        } else {
            wall.saturating_sub(at - now)
        };
        u64::try_from(t.as_micros()).ok()
    }

    /// Opens a datagram received from `from`: a plain one as it is (unauthenticated), a
    /// sealed one verified when we hold keys (unauthenticated, unsealed, when we hold none).
    pub(crate) fn open(
        &mut self,
        now: Instant,
        from: IpAddr,
        datagram: &[u8],
    ) -> Result<Opened, Refused> {
        let Some(block) = auth::auth_block(datagram) else {
            return Ok(Opened {
                inner: None,
                trust: Trust::Unauthenticated,
                key_id: None,
            });
        };
        let inner = auth::unseal(datagram);
        let Some(keys) = &self.keys else {
            return Ok(Opened {
                inner,
                trust: Trust::Unauthenticated,
                key_id: None,
            });
        };
        let refused = |failure, skew_ms| Refused {
            failure,
            skew_ms,
            key_id: block.key_id,
        };
        let Some(key) = keys.get(block.key_id) else {
            return Err(refused(AuthFailure::UnknownKey, 0));
        };
        if !auth::verify(datagram, key) {
            return Err(refused(AuthFailure::BadMac, 0));
        }
        let Some(wall_us) = self.wall_us(now) else {
            return Err(refused(AuthFailure::Clock, 0));
        };
        let window_us = u64::try_from(self.window.as_micros()).unwrap_or(u64::MAX);
        let skew_us = i128::from(block.stamp_us) - i128::from(wall_us);
        if skew_us.unsigned_abs() > u128::from(window_us) {
            let skew_ms = i64::try_from(skew_us / 1000).unwrap_or(i64::MAX);
            return Err(refused(AuthFailure::Clock, skew_ms));
        }
        // Bound to its sender before it is remembered: the MAC does not cover the IP
        // header, so a copy sent first from another address would otherwise be believed,
        // and the real datagram, arriving second, refused as its replay.
        if inner.as_deref().and_then(sender_of) != Some(from.to_canonical()) {
            return Err(refused(AuthFailure::WrongSource, 0));
        }
        match self.replay.remember(
            mac_prefix(&block),
            block.stamp_us,
            wall_us.saturating_sub(window_us),
        ) {
            Ok(()) => {}
            Err(Stale::Replayed | Stale::BelowFloor) => {
                return Err(refused(AuthFailure::Replayed, 0));
            }
        }
        self.uses.entry(block.key_id).or_default().1 += 1;
        Ok(Opened {
            inner,
            trust: Trust::Authenticated,
            key_id: Some(block.key_id),
        })
    }

    /// `inner` sealed with the signing key, or `None` without keys (or before the shell
    /// handed in the wall clock) or for a datagram that is not a peer message form.
    pub(crate) fn seal(&mut self, now: Instant, inner: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys.as_ref()?;
        let stamp = self.wall_us(now)?.max(self.last_stamp_us + 1);
        let key = keys.signing();
        let sealed = auth::seal(inner, key, stamp).ok()?;
        self.last_stamp_us = stamp;
        self.uses.entry(key.id()).or_default().0 += 1;
        Some(sealed)
    }

    /// Every key with its use counts.
    pub(crate) fn report(&self) -> Vec<KeyUse> {
        let Some(keys) = &self.keys else {
            return Vec::new();
        };
        let signing = keys.signing().id();
        keys.iter()
            .map(|k| {
                let (signed, verified) = self.uses.get(&k.id()).copied().unwrap_or_default();
                KeyUse {
                    id: k.id(),
                    signing: k.id() == signing,
                    accept_only: k.accept_only(),
                    signed,
                    verified,
                }
            })
            .collect()
    }
}

/// The address a peer message names as its sender: the connecting side's (`cp`) for a
/// REQUEST or an ACK, the accepting side's (`ap`, which a port mapper never changes) for
/// an ACCEPT or a REJECT. A real peer sends from it: its REQUEST goes out by the route of
/// the connection it asks for, and an answer goes back from the address it was sent to.
fn sender_of(inner: &[u8]) -> Option<IpAddr> {
    let msg = PeerMessage::decode(inner).ok()?;
    let ip = match msg.msg_type {
        PeerMsgType::Request | PeerMsgType::Ack => msg.cp_ip,
        PeerMsgType::Accept | PeerMsgType::Reject => msg.ap_ip,
    };
    Some(ip.to_canonical())
}

fn mac_prefix(block: &AuthBlock) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&block.mac[..8]);
    u64::from_le_bytes(b)
}
