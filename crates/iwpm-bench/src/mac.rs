//! What authenticating a peer datagram costs: sealing each datagram we send to a keyed
//! peer and verifying each sealed datagram we receive (`iwpm_proto::peer::auth`: HMAC-SHA256
//! under a fleet key, cut to 16 bytes, over the 108 bytes before the tag and a label),
//! measured next to the core's handling time (`crate::spoof`).

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context as _, Result};
use iwpm_proto::fleet_key::FleetKey;
use iwpm_proto::peer::auth::{self, PEER_AUTH_LEN};
use iwpm_proto::peer::{PeerExtension, PeerMessage};
use serde::Serialize;

/// Fleet key length measured (the key file's usual 256 bits).
pub(crate) const KEY_LEN: usize = 32;

/// Rounds of the measure; each figure is the median of the rounds' means.
const ROUNDS: usize = 21;

/// The MAC's cost per datagram.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MacCost {
    /// What was measured.
    pub what: String,
    /// `auth::seal` of one outgoing datagram (96-byte extended REQUEST), ns (median over
    /// rounds).
    pub seal_ns: f64,
    /// `auth::verify` of one incoming sealed datagram, ns (median over rounds).
    pub verify_ns: f64,
    /// `auth::verify` of a sealed datagram whose MAC is wrong (a forger's), ns.
    pub verify_forged_ns: f64,
    /// Operations per round.
    pub per_round: usize,
}

/// Measures sealing and verifying, `per_round` of each per round.
pub(crate) fn measure(per_round: usize) -> Result<MacCost> {
    let secret: Vec<u8> = (0..KEY_LEN as u8)
        .map(|i| i.wrapping_mul(37) ^ 0x5c)
        .collect();
    let key = FleetKey::new(1, secret, false).context("a 32-byte fleet key")?;
    let inner = PeerMessage::request(
        0x0123_4567_89ab_cdef,
        "[2001:db8::1]:5000".parse()?,
        "[2001:db8::1]:41234".parse()?,
        "[2001:db8::2]:4791".parse()?,
    )
    .encode_with_extension(&PeerExtension {
        flags: PeerExtension::CAN_ECHO,
        cookie: [0; 24],
    });
    let sealed = auth::seal(&inner, &key, 1_800_000_000_000_000).context("sealing")?;
    let mut forged = sealed.clone();
    forged[PEER_AUTH_LEN - 1] ^= 1;
    anyhow::ensure!(auth::verify(&sealed, &key) && !auth::verify(&forged, &key));
    let per_round = per_round.max(1);
    let (mut seals, mut verifies, mut forgeries) = (Vec::new(), Vec::new(), Vec::new());
    let ns_per = |t: Instant| t.elapsed().as_nanos() as f64 / per_round as f64;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for stamp in 0..per_round as u64 {
            // Every datagram is stamped anew, as the daemon does.
            black_box(auth::seal(black_box(&inner), &key, stamp).ok());
        }
        seals.push(ns_per(t));
        let t = Instant::now();
        let mut good = 0usize;
        for _ in 0..per_round {
            good += usize::from(auth::verify(black_box(&sealed), &key));
        }
        verifies.push(ns_per(t));
        let t = Instant::now();
        for _ in 0..per_round {
            good += usize::from(auth::verify(black_box(&forged), &key));
        }
        forgeries.push(ns_per(t));
        anyhow::ensure!(good == per_round, "verify changed its mind");
    }
    Ok(MacCost {
        what: format!(
            "iwpm_proto::peer::auth seal / verify (HMAC-SHA256 under a {KEY_LEN}-byte fleet \
             key, 16-byte tag, {PEER_AUTH_LEN}-byte sealed datagram), keyed anew per datagram"
        ),
        seal_ns: median(seals),
        verify_ns: median(verifies),
        verify_forged_ns: median(forgeries),
        per_round,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measure_is_positive() {
        let cost = measure(10).unwrap();
        assert!(
            cost.seal_ns > 0.0 && cost.verify_ns > 0.0 && cost.verify_forged_ns > 0.0,
            "{cost:?}"
        );
    }
}
