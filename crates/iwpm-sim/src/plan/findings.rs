//! The items that came with IPv6 (the rdma-core-like peer, findings A-I's attacks and the
//! burst profile's connects): a part of the generator of its own, so `plan.rs` stays the
//! plan's types and its main generator.

use super::*;

/// The closed port finding I's flood asks for (nobody listens there).
pub const CLOSED_PORT: u16 = 8999;

impl Gen {
    /// The items that came with IPv6: the rdma-core-like peer, and findings A-I's attacks
    /// (every `attack` seed draws one of them or none; 3 % of `sweep`/`fleet` seeds get one,
    /// at lower rates).
    pub(super) fn extras(
        &mut self,
        x: &mut Rng,
        hosts: usize,
        profile: Profile,
        families: &mut BTreeMap<u16, ListenKind>,
    ) {
        match profile {
            Profile::Sweep | Profile::Fleet => self.sweep_extras(x, hosts, families),
            Profile::Attack => self.attack_extras(x, families),
            Profile::Burst | Profile::Keys => {}
        }
    }

    /// `sweep` and `fleet`: now and then an rdma-core-like peer, and (3 %) one of the
    /// findings' attacks at a random host's job port, at rates below `attack`'s.
    fn sweep_extras(
        &mut self,
        x: &mut Rng,
        hosts: usize,
        families: &mut BTreeMap<u16, ListenKind>,
    ) {
        let kind = families.get(&JOB_PORT).copied().unwrap_or_default();
        if x.chance(100) {
            let target = x.below(hosts as u64) as usize;
            let at = ms(x.range(600, 2_500));
            let n = x.range(1, 4) as u32;
            let (port, v6) = (JOB_PORT, kind.v6);
            self.push(
                at,
                What::RdmaPeer {
                    target,
                    port,
                    v6,
                    n,
                },
            );
        }
        if x.chance(30) {
            let target = x.below(hosts as u64) as usize;
            // After the job's listeners are up (by 300 ms); a drain runs from 100 ms
            // before.
            let at = ms(x.range(500, 3_000));
            let lasts = ms(3_000);
            let port = JOB_PORT;
            let what = match x.below(5) {
                0 => What::SpoofV6 {
                    target,
                    port,
                    rate: 500,
                    lasts,
                },
                1 => {
                    let drain = at - ms(100);
                    self.push_drain(drain, target, port, true, ms(6_000));
                    What::CookieSweep {
                        target,
                        port,
                        rate: 1_000,
                        lasts,
                    }
                }
                2 => What::RealPairs {
                    target,
                    port,
                    v6: kind.v6,
                    rate: 1_000,
                    lasts,
                },
                3 => {
                    let lasts = ms(30_000);
                    self.push_drain(at - ms(100), target, port, false, lasts);
                    What::Replay {
                        victim: (target + 1) % hosts,
                        target,
                        port,
                        lasts,
                    }
                }
                _ => What::RejectFlood {
                    target,
                    port: CLOSED_PORT,
                    rate: 1_000,
                    lasts,
                },
            };
            self.push(at, what);
        }
    }

    /// `attack`: one of the findings' attacks (or none) at host 0's rank-1 port, and the
    /// rdma-core-like peer at host 2.
    fn attack_extras(&mut self, x: &mut Rng, families: &mut BTreeMap<u16, ListenKind>) {
        // Rank 1's port (JOB_PORT + 1) is the new attacks' target on host 0 and the
        // rdma-core-like peer's on host 2.
        let port = JOB_PORT + 1;
        let mut kind = ListenKind {
            v6: x.chance(500),
            wildcard: x.chance(300),
        };
        let at = ms(x.range(0, 400));
        let lasts = ms(10_000);
        match x.below(7) {
            0 => {}
            // A spoofed IPv6 flood at a specific IPv6 listener (1) or at an IPv4
            // wildcard listener's port (2).
            pick @ (1 | 2) => {
                kind = ListenKind {
                    v6: pick == 1,
                    wildcard: pick == 2,
                };
                self.push(
                    at,
                    What::SpoofV6 {
                        target: 0,
                        port,
                        rate: 2_000,
                        lasts,
                    },
                );
            }
            3 => {
                kind.v6 = true;
                // The drain starts once the job's listeners are up (by 300 ms).
                let at = at + ms(400);
                self.push_drain(at, 0, port, true, ms(20_000));
                self.push(
                    at + ms(500),
                    What::CookieSweep {
                        target: 0,
                        port,
                        rate: 2_000,
                        lasts,
                    },
                );
            }
            4 => {
                let v6 = kind.v6;
                self.push(
                    at,
                    What::RealPairs {
                        target: 0,
                        port,
                        v6,
                        rate: 2_000,
                        lasts,
                    },
                );
            }
            5 => {
                let (port, lasts, at) = (JOB_PORT, ms(35_000), at + ms(400));
                self.push_drain(at, 0, port, false, lasts);
                self.push(
                    at,
                    What::Replay {
                        victim: 1,
                        target: 0,
                        port,
                        lasts,
                    },
                );
            }
            _ => {
                let lasts = ms(4_000);
                self.push(
                    at + ms(2_000),
                    What::RejectFlood {
                        target: 0,
                        port: CLOSED_PORT,
                        rate: 1_000,
                        lasts,
                    },
                );
            }
        }
        if kind != ListenKind::default() {
            families.insert(port, kind);
        }
        let at = ms(x.range(2_000, 4_000));
        self.push(
            at,
            What::RdmaPeer {
                target: 2,
                port,
                v6: kind.v6,
                n: 10,
            },
        );
    }

    /// A drain of `target`'s `port` from `at` (the findings' attacks that need answers read).
    pub(super) fn push_drain(
        &mut self,
        at: Duration,
        target: usize,
        port: u16,
        v6: bool,
        lasts: Duration,
    ) {
        self.push(
            at,
            What::Drain {
                target,
                port,
                v6,
                lasts,
            },
        );
    }
}

impl What {
    /// An attack added for findings A-I (IPv6 bounds, the REMOTE_INFO ledger).
    pub(super) fn is_findings_attack(&self) -> bool {
        matches!(
            self,
            What::SpoofV6 { .. }
                | What::CookieSweep { .. }
                | What::RealPairs { .. }
                | What::Replay { .. }
                | What::RejectFlood { .. }
                | What::Drain { .. }
        )
    }
}

impl Scenario {
    /// The scenario without the attacks of findings A-I (the rdma-core-like peer, IPv6
    /// and wildcard listeners stay): what a seed shows of those alone
    /// (`tests/it/findings.rs`).
    pub fn without_findings_attacks(&self) -> Scenario {
        Scenario {
            items: self
                .items
                .iter()
                .filter(|i| !i.what.is_findings_attack())
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// The scenario as it was before IPv6: every listener IPv4 on its host's address, and
    /// only the items an IPv4-only fleet had (what the step-9 regression seeds check).
    pub fn ipv4_only(&self) -> Scenario {
        Scenario {
            items: self
                .items
                .iter()
                .filter(|i| {
                    !i.what.is_findings_attack()
                        && !i.what.is_keys_item()
                        && !matches!(i.what, What::RdmaPeer { .. })
                })
                .cloned()
                .collect(),
            families: BTreeMap::new(),
            auth: FleetAuth::default(),
            ..self.clone()
        }
    }
}
