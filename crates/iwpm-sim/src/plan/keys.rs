//! The items that came with fleet keys (issue 41 item 8): which hosts hold the key (keyed,
//! unkeyed and mixed fleets, a host with a wrong key, a host whose wall clock is off by more
//! than the clock window), a key rotation rolled out host by host, an on-path attacker
//! between two hosts, and item 5's spoofers aimed at a named victim. Everything here draws
//! from a stream of the seed of its own (stream 5), after every older item, so an old seed
//! keeps its items and their indices.

use super::*;

/// What a host holds of the fleet key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyRole {
    /// No key (as before fleet keys, or one of ours not configured).
    #[default]
    Unkeyed,
    /// The fleet's key (key 1; key 2 too as a rotation goes).
    Keyed,
    /// Key id 1 with other bytes: every sealed exchange with a keyed host fails.
    WrongKey,
    /// The fleet's keys, but the host's wall clock is off by `ms` (beyond the ±60 s
    /// window): every sealed exchange with a keyed host fails.
    Skewed {
        /// The host's wall clock minus the fleet's, in milliseconds.
        ms: i64,
    },
}

/// The fleet's keys: per host its [`KeyRole`], and whether keyed hosts require every
/// datagram from the fleet's networks to be sealed (`peer_auth_required`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetAuth {
    /// Per host (a missing entry is [`KeyRole::Unkeyed`]).
    pub roles: Vec<KeyRole>,
    /// Keyed hosts set `peer_auth_required` to the fleet's networks (10.0.0.0/16 and
    /// fd00::/32): drawn only when every host is keyed.
    pub required: bool,
}

impl FleetAuth {
    /// The role of host `h`.
    pub fn role(&self, h: usize) -> KeyRole {
        self.roles.get(h).copied().unwrap_or_default()
    }

    /// True if host `h` holds a key (the right one or not).
    pub fn keyed(&self, h: usize) -> bool {
        self.role(h) != KeyRole::Unkeyed
    }

    /// True if host `h` holds a wrong key or has a skewed wall clock.
    pub fn bad(&self, h: usize) -> bool {
        matches!(self.role(h), KeyRole::WrongKey | KeyRole::Skewed { .. })
    }

    /// True if a sealed exchange between hosts `a` and `b` cannot succeed, as expected:
    /// both keyed and one of them with a wrong key or a skewed clock.
    pub fn fails_between(&self, a: usize, b: usize) -> bool {
        a != b && self.keyed(a) && self.keyed(b) && (self.bad(a) || self.bad(b))
    }
}

impl fmt::Display for FleetAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<String> = self
            .roles
            .iter()
            .map(|r| match r {
                KeyRole::Unkeyed => "-".to_string(),
                KeyRole::Keyed => "K".to_string(),
                KeyRole::WrongKey => "W".to_string(),
                KeyRole::Skewed { ms } => format!("S{:+.1}s", *ms as f64 / 1000.0),
            })
            .collect();
        let required = if self.required { ", required" } else { "" };
        write!(f, "{}{required}", roles.join(" "))
    }
}

/// What the on-path attacker does with the sealed datagrams it sees between its two hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnPathMode {
    /// Forwards the first 64 bytes instead of the sealed 124 (a downgrade).
    Strip,
    /// Captures a sealed REQUEST + ACK pair and replays it once a second (within the 60 s
    /// window and beyond).
    Replay,
    /// Sends a copy of each sealed datagram with one byte flipped, 1 ms after it.
    Flip,
    /// Sends a copy of each sealed datagram from another source, 1 ms after it.
    Resend,
    /// Sends a copy of each sealed datagram from another source as it leaves, over a path
    /// faster than the original's: the copy arrives first.
    Race,
}

/// Item 5's spoofers, aimed at a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoofMode {
    /// REQUESTs for the target's closed port with the victim's address (its REJECTs must
    /// not be spent): the victim asks for that port itself every 250 ms.
    Reject,
    /// Blind ACKs from the victim's /64 (its exact address among them), guessed cookies.
    BlindAck,
    /// REQUESTs from the victim's /64 for the victim's listener, never ACKed, while the
    /// victim's own exchanges wait between their REQUEST and their ACK.
    Between,
}

impl What {
    /// `Some(is_fault)` for the fleet-key items: only a stripping or racing attacker is a
    /// fault (the sealed originals between its hosts are dropped, or refused as replays of
    /// its copies: finding K1).
    pub(super) fn keys_fault(&self) -> Option<bool> {
        match self {
            What::KeyStep { .. } | What::VictimSpoof { .. } => Some(false),
            // (a racing copy gets the original refused as its replay: as good as dropped)
            What::OnPath { mode, .. } => Some(matches!(mode, OnPathMode::Strip | OnPathMode::Race)),
            _ => None,
        }
    }

    /// An item added with fleet keys.
    pub fn is_keys_item(&self) -> bool {
        matches!(
            self,
            What::KeyStep { .. } | What::OnPath { .. } | What::VictimSpoof { .. }
        )
    }
}

impl Scenario {
    /// The scenario without item 5's spoofers (what the victim's service is compared
    /// against).
    pub fn without_victim_spoofs(&self) -> Scenario {
        Scenario {
            items: self
                .items
                .iter()
                .filter(|i| !matches!(i.what, What::VictimSpoof { .. }))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// True if the scenario has one of item 5's spoofers.
    pub fn has_victim_spoofs(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i.what, What::VictimSpoof { .. }))
    }
}

/// A skew beyond the ±60 s window: 61-300 s either way.
fn skew(k: &mut Rng) -> KeyRole {
    let ms = k.range(61_000, 300_000) as i64;
    KeyRole::Skewed {
        ms: if k.chance(500) { ms } else { -ms },
    }
}

impl Gen {
    /// The fleet's keys and the items that come with them.
    pub(super) fn keys(
        &mut self,
        k: &mut Rng,
        hosts: usize,
        profile: Profile,
        families: &mut BTreeMap<u16, ListenKind>,
    ) -> FleetAuth {
        match profile {
            Profile::Burst | Profile::Attack => FleetAuth::default(),
            Profile::Sweep | Profile::Fleet => self.keys_sweep(k, hosts),
            Profile::Keys => self.keys_profile(k, hosts, families),
        }
    }

    /// `sweep` and `fleet`: a quarter of the seeds have keys, all hosts or some; a few a
    /// wrong key or a skewed clock, a rotation, or an on-path attacker between hosts 0 and 1.
    fn keys_sweep(&mut self, k: &mut Rng, hosts: usize) -> FleetAuth {
        if !k.chance(250) {
            return FleetAuth::default();
        }
        let mut roles = vec![KeyRole::Keyed; hosts];
        let mixed = k.chance(400);
        if mixed {
            for r in roles.iter_mut() {
                if k.chance(500) {
                    *r = KeyRole::Unkeyed;
                }
            }
            roles[k.below(hosts as u64) as usize] = KeyRole::Keyed;
        }
        let required = !mixed && k.chance(500);
        if k.chance(100) {
            let h = k.below(hosts as u64) as usize;
            if roles[h] == KeyRole::Keyed {
                roles[h] = KeyRole::WrongKey;
            }
        }
        if k.chance(100) {
            let h = k.below(hosts as u64) as usize;
            let role = skew(k);
            if roles[h] == KeyRole::Keyed {
                roles[h] = role;
            }
        }
        if k.chance(300) {
            self.rotation(k, &roles);
        }
        if k.chance(60) {
            let mode = [
                OnPathMode::Strip,
                OnPathMode::Replay,
                OnPathMode::Flip,
                OnPathMode::Resend,
            ][k.below(4) as usize];
            let at = ms(k.range(300, 3_000));
            let lasts = if mode == OnPathMode::Replay {
                ms(75_000)
            } else {
                ms(k.range(2_000, 8_000))
            };
            self.push(
                at,
                What::OnPath {
                    a: 0,
                    b: 1,
                    mode,
                    lasts,
                },
            );
        }
        self.race(k);
        FleetAuth { roles, required }
    }

    /// Half the re-sending attackers race the original instead (drawn last, so that
    /// nothing drawn before moves).
    fn race(&mut self, k: &mut Rng) {
        let race = k.chance(500);
        for it in &mut self.items {
            if let What::OnPath { mode, .. } = &mut it.what {
                if *mode == OnPathMode::Resend && race {
                    *mode = OnPathMode::Race;
                }
            }
        }
    }

    /// A rotation: every host holding the fleet's key adds key 2 accept-only, then (once
    /// all have) signs with it, then (once all do) removes key 1; each step host by host at
    /// times of its own, seconds apart from the next step.
    fn rotation(&mut self, k: &mut Rng, roles: &[KeyRole]) {
        for (step, (lo, hi)) in [
            (1u8, (200, 3_000)),
            (2, (6_000, 9_000)),
            (3, (12_000, 15_000)),
        ] {
            for (host, role) in roles.iter().enumerate() {
                if matches!(role, KeyRole::Keyed | KeyRole::Skewed { .. }) {
                    let at = ms(k.range(lo, hi));
                    self.push(at, What::KeyStep { host, step });
                }
            }
        }
    }

    /// The `keys` profile: one of the on-path attacks between hosts 0 and 1, a rotation, a
    /// wrong key or a skewed clock on host 2, or one of item 5's spoofers at host 0; the
    /// rdma-core-like peer connects 10 times to host 0's rank-1 listener.
    fn keys_profile(
        &mut self,
        k: &mut Rng,
        hosts: usize,
        families: &mut BTreeMap<u16, ListenKind>,
    ) -> FleetAuth {
        let kind = k.below(10);
        let fleet = k.below(9);
        // 0 every host keyed, 1 mixed (host 0 keyed), 2 no keys: the on-path attacks and
        // the rotation mostly keyed, a wrong key and a skew always, the spoofers a third each.
        let shape = match kind {
            5 | 6 => 0,
            0..=4 => u64::from(fleet >= 7),
            _ => fleet / 3,
        };
        let mut roles = vec![KeyRole::Keyed; hosts];
        let mut required = false;
        match shape {
            0 => required = k.chance(700),
            1 => {
                for r in roles.iter_mut().skip(1) {
                    if k.chance(500) {
                        *r = KeyRole::Unkeyed;
                    }
                }
            }
            _ => roles = vec![KeyRole::Unkeyed; hosts],
        }
        let port = JOB_PORT + 1;
        let at = ms(k.range(0, 400));
        let on_path = |mode, lasts| What::OnPath {
            a: 0,
            b: 1,
            mode,
            lasts,
        };
        match kind {
            0 => self.push(at, on_path(OnPathMode::Strip, ms(10_000))),
            1 => self.push(at, on_path(OnPathMode::Replay, ms(75_000))),
            2 => self.push(at, on_path(OnPathMode::Flip, ms(10_000))),
            3 => self.push(at, on_path(OnPathMode::Resend, ms(10_000))),
            4 => self.rotation(k, &roles),
            5 => roles[2] = KeyRole::WrongKey,
            6 => roles[2] = skew(k),
            7 => {
                let at = ms(k.range(500, 1_000));
                let lasts = ms(4_000);
                self.push(
                    at,
                    What::VictimSpoof {
                        victim: Some(1),
                        target: 0,
                        port: CLOSED_PORT,
                        mode: SpoofMode::Reject,
                        rate: 1_000,
                        lasts,
                    },
                );
                // The victim's own REQUESTs for the closed port, every 250 ms.
                for n in 0..16u64 {
                    let id = self.next_id;
                    self.next_id += 1;
                    let t = at + ms(100 + 250 * n);
                    let what = What::Connect {
                        id,
                        from: 1,
                        to: 0,
                        port: CLOSED_PORT,
                    };
                    self.push(t, what);
                    self.push(t + ms(2_000), What::Close { id });
                }
            }
            _ => {
                families.insert(
                    port,
                    ListenKind {
                        v6: true,
                        wildcard: false,
                    },
                );
                let victim = if k.chance(500) { None } else { Some(1) };
                let mode = if kind == 8 {
                    SpoofMode::BlindAck
                } else {
                    SpoofMode::Between
                };
                self.push_drain(ms(400), 0, port, true, ms(20_000));
                self.push(
                    ms(450),
                    What::VictimSpoof {
                        victim,
                        target: 0,
                        port,
                        mode,
                        rate: 1_000,
                        lasts: ms(8_000),
                    },
                );
            }
        }
        let v6 = families.get(&port).is_some_and(|f| f.v6);
        let at = ms(k.range(2_000, 4_000));
        self.push(
            at,
            What::RdmaPeer {
                target: 0,
                port,
                v6,
                n: 10,
            },
        );
        self.race(k);
        FleetAuth { roles, required }
    }
}
