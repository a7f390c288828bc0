//! The schedule of one run: the fleet's shape and a time-ordered list of workload events,
//! faults and attacks, all drawn from the seed ([`Scenario::generate`]).
//!
//! The schedule is data, so a failing run can be shrunk by dropping items
//! ([`crate::shrink`]) and a shrunk run is named by its seed plus the indices it keeps
//! (`iwpm-sim --seed S --keep 3,7,12`). Network randomness (which datagram a loss window
//! drops) comes from a separate stream of the same seed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::rng::Rng;

mod findings;
mod keys;
pub use findings::CLOSED_PORT;
pub use keys::{FleetAuth, KeyRole, OnPathMode, SpoofMode};

/// Which hosts a fault touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every host.
    All,
    /// Traffic from or to one host.
    Host(usize),
}

impl Scope {
    /// True if the fault touches `host`.
    pub fn touches(&self, host: usize) -> bool {
        match self {
            Scope::All => true,
            Scope::Host(h) => *h == host,
        }
    }
}

/// One scheduled event.
#[expect(
    missing_docs,
    reason = "each variant's doc names its fields; a line per field would only repeat them"
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// An application listens on `host`:`port` (all interfaces of the host's one IP).
    Listen { host: usize, port: u16 },
    /// That listener is destroyed.
    Unlisten { host: usize, port: u16 },
    /// Connection `id`: a rank on `from` connects to the listener `to`:`port`.
    Connect {
        id: u32,
        from: usize,
        to: usize,
        port: u16,
    },
    /// Connection `id` is destroyed by its active side.
    Close { id: u32 },
    /// Datagrams from or to `scope` are lost with probability `per_mille`.
    Loss {
        scope: Scope,
        per_mille: u16,
        lasts: Duration,
    },
    /// Datagrams are delivered twice with probability `per_mille`.
    Duplicate {
        scope: Scope,
        per_mille: u16,
        lasts: Duration,
    },
    /// Datagrams are held back by up to `extra` with probability `per_mille` (reordering).
    Reorder {
        scope: Scope,
        per_mille: u16,
        extra: Duration,
        lasts: Duration,
    },
    /// Every datagram and wire message from or to `scope` takes `extra` longer.
    DelaySpike {
        scope: Scope,
        extra: Duration,
        lasts: Duration,
    },
    /// The hosts below `split` cannot reach the others (wire messages wait, datagrams drop).
    Partition { split: usize, lasts: Duration },
    /// The daemon of `host` dies (its ports close) and restarts after `down` from its state
    /// file, then the kernel's MAPINFO replay.
    Crash { host: usize, down: Duration },
    /// The monotonic clock of `host` jumps forward (a suspended VM, a stopped process).
    ClockJump { host: usize, by: Duration },
    /// The hostile host sends never-ACKed, port-mapped-shape REQUESTs with `victim`'s IP as
    /// source to `target`'s listener `port`, `rate` per second (HARDENING #3, squatting).
    Squat {
        victim: usize,
        target: usize,
        port: u16,
        rate: u32,
        lasts: Duration,
    },
    /// The hostile host sends REQUEST + blind-ACK pairs from its own IP to `target`'s
    /// listener `port` (HARDENING #2/#10).
    BlindPairs {
        target: usize,
        port: u16,
        rate: u32,
        lasts: Duration,
    },
    /// Finding A: never-ACKed port-mapped IPv6 REQUESTs from spoofed sources, a new /64
    /// every [`crate::hostile::PER_SLASH64`] datagrams, asking for `target`'s IPv6 address
    /// and `port` (whose listener may be IPv6, or an IPv4 wildcard asked over IPv6).
    SpoofV6 {
        target: usize,
        port: u16,
        rate: u32,
        lasts: Duration,
    },
    /// Finding B: one IPv6 REQUEST from the hostile host's own address, then ACKs sweeping
    /// `pmtime` 0..=255 × version 0..=3 (the 10-bit IPv6 cookie), then the next REQUEST;
    /// `rate` datagrams per second.
    CookieSweep {
        target: usize,
        port: u16,
        rate: u32,
        lasts: Duration,
    },
    /// Finding D: the hostile host as a real host (it reads the ACCEPTs sent to its own
    /// address and ACKs them with their bytes), `rate` REQUEST+ACK pairs per second, never
    /// connecting.
    RealPairs {
        target: usize,
        port: u16,
        v6: bool,
        rate: u32,
        lasts: Duration,
    },
    /// Finding E: never-ACKed REQUESTs from spoofed IPv4 sources drain `target`'s
    /// REMOTE_INFO budget (so `victim`'s own connects get REMOTE_INFO-on-ACK cookies); the
    /// first such REQUEST+ACK pair of `victim` is captured and replayed from its address
    /// once a second.
    Replay {
        victim: usize,
        target: usize,
        port: u16,
        lasts: Duration,
    },
    /// Finding I: [`crate::hostile::REJECT_SOURCES`] spoofed sources flood REQUESTs for the
    /// closed `port` of `target`; halfway through, a real host (the rdma-core-like peer's
    /// address) asks for it once and must get its REJECT within 1 s.
    RejectFlood {
        target: usize,
        port: u16,
        rate: u32,
        lasts: Duration,
    },
    /// Never-ACKed port-mapped REQUESTs from spoofed sources (64 per source: each within
    /// its share of the budget, never evicted by the per-source quota), 192 at once, then
    /// 4 a second: `target`'s REMOTE_INFO budget stays spent, so REMOTE_INFOs wait for ACKs
    /// (the setting of findings B and E).
    Drain {
        target: usize,
        port: u16,
        v6: bool,
        lasts: Duration,
    },
    /// An rdma-core-like peer (no core: a hand-written actor, `crate::peer`) connects `n`
    /// times to `target`'s listener `port` over 1 s: REQUEST, then on the ACCEPT it lets
    /// its kernel connect and ACKs with the ACCEPT's bytes.
    RdmaPeer {
        target: usize,
        port: u16,
        v6: bool,
        n: u32,
    },
    /// A fleet key rotation's `step` on `host` (1: key 2 added accept-only, 2: key 2
    /// signs, 3: key 1 removed), as an operator's rollout applies it host by host.
    KeyStep { host: usize, step: u8 },
    /// An on-path attacker sees every datagram between hosts `a` and `b` and strips,
    /// replays or forges their sealed datagrams ([`OnPathMode`]).
    OnPath {
        a: usize,
        b: usize,
        mode: OnPathMode,
        lasts: Duration,
    },
    /// Item 5's spoofers aimed at a named victim (`None`: the rdma-core-like peer), at
    /// `target`'s `port`, `rate` datagrams per second ([`SpoofMode`]).
    VictimSpoof {
        victim: Option<usize>,
        target: usize,
        port: u16,
        mode: SpoofMode,
        rate: u32,
        lasts: Duration,
    },
}

/// The address family and shape of the listeners on one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenKind {
    /// IPv6 (`[host ip6]:port` or `[::]:port`), else IPv4.
    pub v6: bool,
    /// Bound on the wildcard address of its family; connects still target the host's
    /// specific address of that family.
    pub wildcard: bool,
}

impl fmt::Display for ListenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fam = if self.v6 { "v6" } else { "v4" };
        let shape = if self.wildcard {
            "wildcard"
        } else {
            "specific"
        };
        write!(f, "{fam} {shape}")
    }
}

impl What {
    /// Faults explain a legitimate connect that fails or is slow; workload and attacks do not.
    pub fn is_fault(&self) -> bool {
        if let Some(fault) = self.keys_fault() {
            return fault;
        }
        !(self.is_findings_attack()
            || matches!(
                self,
                What::Listen { .. }
                    | What::Unlisten { .. }
                    | What::Connect { .. }
                    | What::Close { .. }
                    | What::Squat { .. }
                    | What::BlindPairs { .. }
                    | What::RdmaPeer { .. }
            ))
    }

    /// How long the fault's effects may last after it starts (recovery included).
    pub fn window(&self) -> Duration {
        match self {
            What::Loss { lasts, .. }
            | What::Duplicate { lasts, .. }
            | What::Reorder { lasts, .. }
            | What::DelaySpike { lasts, .. }
            | What::Partition { lasts, .. } => *lasts,
            // Down time, then the replay window (9.5 s) and the lost exchanges' kernel timeout.
            What::Crash { down, .. } => *down + Duration::from_secs(10),
            What::ClockJump { by, .. } => *by,
            What::OnPath { lasts, .. } => *lasts,
            _ => Duration::ZERO,
        }
    }

    /// The hosts the item names (a scenario built by hand may name hosts it lacks).
    pub fn hosts(&self) -> Vec<usize> {
        match self {
            What::Listen { host, .. }
            | What::Unlisten { host, .. }
            | What::Crash { host, .. }
            | What::ClockJump { host, .. } => vec![*host],
            What::Connect { from, to, .. } => vec![*from, *to],
            What::Loss { scope, .. }
            | What::Duplicate { scope, .. }
            | What::Reorder { scope, .. }
            | What::DelaySpike { scope, .. } => match scope {
                Scope::All => vec![],
                Scope::Host(h) => vec![*h],
            },
            What::Squat { victim, target, .. } => vec![*victim, *target],
            What::BlindPairs { target, .. }
            | What::SpoofV6 { target, .. }
            | What::CookieSweep { target, .. }
            | What::RealPairs { target, .. }
            | What::RejectFlood { target, .. }
            | What::RdmaPeer { target, .. }
            | What::Drain { target, .. } => vec![*target],
            What::Replay { victim, target, .. } => vec![*victim, *target],
            What::KeyStep { host, .. } => vec![*host],
            What::OnPath { a, b, .. } => vec![*a, *b],
            What::VictimSpoof { victim, target, .. } => {
                victim.iter().copied().chain([*target]).collect()
            }
            What::Close { .. } | What::Partition { .. } => vec![],
        }
    }

    /// True if this fault touches `host` (a partition touches everyone).
    pub fn touches(&self, host: usize) -> bool {
        match self {
            What::Loss { scope, .. }
            | What::Duplicate { scope, .. }
            | What::Reorder { scope, .. }
            | What::DelaySpike { scope, .. } => scope.touches(host),
            What::Partition { .. } => true,
            What::Crash { host: h, .. } | What::ClockJump { host: h, .. } => *h == host,
            // Only a stripping or racing attacker is a fault (the sealed originals are
            // dropped, or refused as replays of its copies).
            What::OnPath {
                a,
                b,
                mode: OnPathMode::Strip | OnPathMode::Race,
                ..
            } => *a == host || *b == host,
            _ => false,
        }
    }
}

/// A scheduled event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// When, from the start of the run.
    pub at: Duration,
    /// What.
    pub what: What,
}

/// How big and how hostile generated runs are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Small and fast (the CI sweep): 2-4 hosts, 1-3 ranks, some faults, small attacks.
    Sweep,
    /// The step-9 attacks at full strength (default limits), no other faults.
    Attack,
    /// Bigger fleets for long sweeps: 3-6 hosts, 2-8 ranks (up to 47 ranks, so a host
    /// can hold more mappings than the kernel's replay limit of 227), more faults.
    Fleet,
    /// A legitimate burst: host 1 makes 1000 concurrent port-mapped connects to host 0's
    /// IPv4 listener and 1000 to its IPv6 one (ours ↔ ours, no faults, no attack).
    Burst,
    /// Fleet keys (issue 41 item 8): 3 hosts, keyed, unkeyed or mixed, and one of an
    /// on-path attacker, a key rotation, a host with a wrong key or a skewed clock, or
    /// item 5's spoofers aimed at a victim; the rdma-core-like peer; no faults.
    Keys,
}

impl Profile {
    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Sweep => "sweep",
            Profile::Attack => "attack",
            Profile::Fleet => "fleet",
            Profile::Burst => "burst",
            Profile::Keys => "keys",
        }
    }

    /// The profile of a command-line name.
    pub fn from_name(name: &str) -> Option<Profile> {
        [
            Profile::Sweep,
            Profile::Attack,
            Profile::Fleet,
            Profile::Burst,
            Profile::Keys,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// The fleet and its schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The seed it came from.
    pub seed: u64,
    /// Legitimate hosts (the hostile host, if any, is extra).
    pub hosts: usize,
    /// Ranks per host (listeners per host in the MPI job).
    pub ranks: usize,
    /// Per host: a port-mapped (hardware-like) device, else siw-like NO_PORT_MAP.
    pub port_mapped: Vec<bool>,
    /// Items in time order.
    pub items: Vec<Item>,
    /// The listeners' family and shape per port (absent: IPv4, the host's address).
    pub families: BTreeMap<u16, ListenKind>,
    /// Which hosts hold the fleet key (default: none, as before fleet keys).
    pub auth: FleetAuth,
}

/// First listener port of the MPI job (rank r listens on `JOB_PORT + r`).
pub const JOB_PORT: u16 = 7000;
/// First port of listeners that come and go.
const CHURN_PORT: u16 = 9000;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl Scenario {
    /// Draws a scenario from `seed`.
    pub fn generate(seed: u64, profile: Profile) -> Scenario {
        let mut r = Rng::new(seed, 1);
        let (hosts, ranks) = match profile {
            // Small enough for thousands of seeds a minute: at most 6 ranks in all.
            Profile::Sweep => {
                let hosts = r.range(2, 3) as usize;
                (hosts, r.range(1, 6 / hosts as u64) as usize)
            }
            Profile::Attack | Profile::Keys => (3, 2),
            Profile::Fleet => (r.range(3, 6) as usize, r.range(2, 8) as usize),
            Profile::Burst => return Scenario::burst(seed),
        };
        let port_mapped = (0..hosts)
            .map(|_| profile == Profile::Attack || r.chance(700))
            .collect();
        let mut g = Gen {
            r,
            items: Vec::new(),
            next_id: 1,
        };
        g.mpi_job(hosts, ranks, profile);
        g.churn(hosts, profile);
        g.faults(hosts, profile);
        g.attacks(hosts, profile);
        let mut items = std::mem::take(&mut g.items);
        items.sort_by_key(|i| i.at);
        // What came after IPv4-only fleets (families, wildcards, the rdma-core-like peer,
        // findings A-I) draws from a stream of its own and goes after the items above,
        // so an old seed keeps its items, their order and their indices (`--keep` lines
        // and the regression tests name items by index).
        let mut x = Rng::new(seed, 4);
        let mut families = families(&mut x, &items, profile);
        g.extras(&mut x, hosts, profile, &mut families);
        let mut extra = std::mem::take(&mut g.items);
        extra.sort_by_key(|i| i.at);
        items.extend(extra);
        // Fleet keys and their attacks: a stream of their own again, after everything above.
        let mut k = Rng::new(seed, 5);
        let auth = g.keys(&mut k, hosts, profile, &mut families);
        let mut keyed = g.items;
        keyed.sort_by_key(|i| i.at);
        items.extend(keyed);
        Scenario {
            seed,
            hosts,
            ranks,
            port_mapped,
            items,
            families,
            auth,
        }
    }

    /// The `burst` profile: host 1 makes 1000 concurrent connects to host 0's IPv4 listener
    /// (port [`JOB_PORT`]) and 1000 to its IPv6 one (`JOB_PORT + 1`), both hosts port
    /// mapped; the seed picks the listeners' shapes (specific or wildcard) and the spread
    /// (0.1-0.6 ms).
    pub fn burst(seed: u64) -> Scenario {
        let mut r = Rng::new(seed, 1);
        let mut items = Vec::new();
        let mut families = BTreeMap::new();
        for (k, v6) in [(0, false), (1, true)] {
            let port = JOB_PORT + k;
            let wildcard = r.chance(500);
            families.insert(port, ListenKind { v6, wildcard });
            items.push(Item {
                at: ms(100),
                what: What::Listen { host: 0, port },
            });
        }
        // Concurrent: each family's 1000 connects start within a few milliseconds (every
        // rank of a job calling connect at once), so the REQUESTs arrive before the ACKs.
        let spread_us = r.range(100, 600);
        for id in 1..=2000u32 {
            let port = JOB_PORT + u16::from(id > 1000);
            let at = ms(1_000) + Duration::from_micros(r.below(spread_us));
            items.push(Item {
                at,
                what: What::Connect {
                    id,
                    from: 1,
                    to: 0,
                    port,
                },
            });
            items.push(Item {
                at: ms(20_000),
                what: What::Close { id },
            });
        }
        for port in [JOB_PORT, JOB_PORT + 1] {
            items.push(Item {
                at: ms(22_000),
                what: What::Unlisten { host: 0, port },
            });
        }
        items.sort_by_key(|i| i.at);
        Scenario {
            seed,
            hosts: 2,
            ranks: 1,
            port_mapped: vec![true, true],
            items,
            families,
            auth: FleetAuth::default(),
        }
    }

    /// The family and shape of `port`'s listeners.
    pub fn kind_of(&self, port: u16) -> ListenKind {
        self.families.get(&port).copied().unwrap_or_default()
    }

    /// The same scenario with only the items at `keep` (indices into `items`).
    pub fn keep(&self, keep: &[usize]) -> Scenario {
        Scenario {
            items: keep
                .iter()
                .filter_map(|i| self.items.get(*i).cloned())
                .collect(),
            ..self.clone()
        }
    }

    /// When the last item's effects are over.
    pub fn end(&self) -> Duration {
        self.items
            .iter()
            .map(|i| {
                i.at + match &i.what {
                    What::Squat { lasts, .. }
                    | What::BlindPairs { lasts, .. }
                    | What::SpoofV6 { lasts, .. }
                    | What::CookieSweep { lasts, .. }
                    | What::RealPairs { lasts, .. }
                    | What::Replay { lasts, .. }
                    | What::RejectFlood { lasts, .. }
                    | What::VictimSpoof { lasts, .. }
                    | What::Drain { lasts, .. } => *lasts,
                    What::RdmaPeer { .. } => Duration::from_secs(1),
                    w => w.window(),
                }
            })
            .max()
            .unwrap_or_default()
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let modes: String = self
            .port_mapped
            .iter()
            .map(|p| if *p { 'P' } else { 'n' })
            .collect();
        writeln!(
            f,
            "seed {} hosts {} ranks {} devices {modes} ({} items)",
            self.seed,
            self.hosts,
            self.ranks,
            self.items.len()
        )?;
        if !self.families.is_empty() {
            let ports: Vec<String> = self
                .families
                .iter()
                .map(|(p, k)| format!("{p} {k}"))
                .collect();
            writeln!(f, "  listeners: {}", ports.join(", "))?;
        }
        if self.auth != FleetAuth::default() {
            writeln!(f, "  keys: {}", self.auth)?;
        }
        // In time order, as they happen; each keeps its index, which `--keep` takes (the
        // generator adds items family by family, so index order jumps back in time).
        let mut order: Vec<(usize, &Item)> = self.items.iter().enumerate().collect();
        order.sort_by_key(|&(i, it)| (it.at, i));
        for (i, it) in order {
            writeln!(f, "  [{i:3}] t={:>9.3}s {:?}", it.at.as_secs_f64(), it.what)?;
        }
        Ok(())
    }
}

struct Gen {
    r: Rng,
    items: Vec<Item>,
    next_id: u32,
}

impl Gen {
    fn push(&mut self, at: Duration, what: What) {
        self.items.push(Item { at, what });
    }

    /// Every rank listens, then every rank connects to every other rank (its own host's
    /// too: those are answered from the local table), then the job ends.
    fn mpi_job(&mut self, hosts: usize, ranks: usize, profile: Profile) {
        // Under attack the connects start once the flood is under way.
        let (first, last) = match profile {
            Profile::Attack => (2_000, 5_000),
            _ => (500, 3_000),
        };
        for h in 0..hosts {
            for rank in 0..ranks {
                let at = ms(self.r.range(50, 300));
                self.push(
                    at,
                    What::Listen {
                        host: h,
                        port: JOB_PORT + rank as u16,
                    },
                );
            }
        }
        let job_end = ms(self.r.range(25_000, 35_000));
        for from in 0..hosts {
            for fr in 0..ranks {
                for to in 0..hosts {
                    for tr in 0..ranks {
                        if (from, fr) == (to, tr) {
                            continue;
                        }
                        let id = self.next_id;
                        self.next_id += 1;
                        let at = ms(self.r.range(first, last));
                        self.push(
                            at,
                            What::Connect {
                                id,
                                from,
                                to,
                                port: JOB_PORT + tr as u16,
                            },
                        );
                        let close = job_end + ms(self.r.below(500));
                        self.push(close, What::Close { id });
                    }
                }
            }
        }
        for h in 0..hosts {
            for rank in 0..ranks {
                self.push(
                    job_end + ms(1_000),
                    What::Unlisten {
                        host: h,
                        port: JOB_PORT + rank as u16,
                    },
                );
            }
        }
    }

    /// Listeners that come and go, with short connections to them while they live.
    fn churn(&mut self, hosts: usize, profile: Profile) {
        let n = match profile {
            Profile::Sweep => self.r.below(4),
            Profile::Attack | Profile::Keys => 2,
            Profile::Fleet => self.r.below(8),
            Profile::Burst => 0,
        };
        for k in 0..n {
            let host = self.r.below(hosts as u64) as usize;
            let port = CHURN_PORT + k as u16;
            let born = ms(self.r.range(100, 10_000));
            let life = ms(self.r.range(5_000, 20_000));
            self.push(born, What::Listen { host, port });
            self.push(born + life, What::Unlisten { host, port });
            // Connects end well before the listener goes (a connect in flight when it goes
            // would be refused, rightly).
            for _ in 0..self.r.range(1, 4) {
                let from = self.r.below(hosts as u64) as usize;
                let id = self.next_id;
                self.next_id += 1;
                let at = born + ms(self.r.range(100, 1_000));
                self.push(
                    at,
                    What::Connect {
                        id,
                        from,
                        to: host,
                        port,
                    },
                );
                let close = at + ms(self.r.range(500, 3_000));
                self.push(close, What::Close { id });
            }
        }
    }

    fn scope(&mut self, hosts: usize) -> Scope {
        if self.r.chance(300) {
            Scope::All
        } else {
            Scope::Host(self.r.below(hosts as u64) as usize)
        }
    }

    fn faults(&mut self, hosts: usize, profile: Profile) {
        let n = match profile {
            Profile::Sweep => self.r.below(5),
            Profile::Attack | Profile::Burst | Profile::Keys => 0,
            Profile::Fleet => self.r.below(10),
        };
        for _ in 0..n {
            let at = ms(self.r.range(0, 30_000));
            let lasts = ms(self.r.range(200, 5_000));
            let what = match self.r.below(8) {
                0 => What::Loss {
                    scope: self.scope(hosts),
                    per_mille: self.r.range(50, 500) as u16,
                    lasts,
                },
                1 => What::Duplicate {
                    scope: self.scope(hosts),
                    per_mille: self.r.range(50, 500) as u16,
                    lasts,
                },
                2 => What::Reorder {
                    scope: self.scope(hosts),
                    per_mille: self.r.range(50, 500) as u16,
                    extra: ms(self.r.range(1, 50)),
                    lasts,
                },
                3 => What::DelaySpike {
                    scope: self.scope(hosts),
                    extra: ms(self.r.range(50, 2_000)),
                    lasts,
                },
                4 => What::Partition {
                    split: self.r.range(1, hosts as u64 - 1) as usize,
                    lasts,
                },
                5 | 6 => What::Crash {
                    host: self.r.below(hosts as u64) as usize,
                    down: ms(self.r.range(10, 3_000)),
                },
                _ => What::ClockJump {
                    host: self.r.below(hosts as u64) as usize,
                    by: ms(self.r.range(100, 15_000)),
                },
            };
            self.push(at, what);
        }
    }

    fn attacks(&mut self, hosts: usize, profile: Profile) {
        match profile {
            Profile::Burst | Profile::Keys => {}
            Profile::Sweep | Profile::Fleet => {
                if self.r.chance(200) {
                    let target = self.r.below(hosts as u64) as usize;
                    let victim = (target + 1) % hosts;
                    let at = ms(self.r.range(0, 5_000));
                    let lasts = ms(self.r.range(1_000, 4_000));
                    self.push(
                        at,
                        What::Squat {
                            victim,
                            target,
                            port: JOB_PORT,
                            rate: 50,
                            lasts,
                        },
                    );
                }
                if self.r.chance(200) {
                    let target = self.r.below(hosts as u64) as usize;
                    let at = ms(self.r.range(0, 5_000));
                    let lasts = ms(self.r.range(1_000, 4_000));
                    self.push(
                        at,
                        What::BlindPairs {
                            target,
                            port: JOB_PORT,
                            rate: 50,
                            lasts,
                        },
                    );
                }
            }
            Profile::Attack => {
                // Host 1's IP floods host 0's rank-0 listener from before the job's
                // connects until after the kernel's 10 s would have run out; the blind
                // pairs run alongside against host 2.
                let kind = self.r.below(3);
                if kind != 1 {
                    let at = ms(self.r.range(0, 400));
                    self.push(
                        at,
                        What::Squat {
                            victim: 1,
                            target: 0,
                            port: JOB_PORT,
                            rate: 300,
                            lasts: ms(16_000),
                        },
                    );
                }
                if kind != 0 {
                    let at = ms(self.r.range(0, 400));
                    self.push(
                        at,
                        What::BlindPairs {
                            target: 2,
                            port: JOB_PORT,
                            rate: 200,
                            lasts: ms(5_000),
                        },
                    );
                }
            }
        }
    }
}

/// The listeners' family and shape per port: one draw for the MPI job's ports (a job
/// picks a family), one per churn port. IPv4 stays the majority (650 ‰) so old seeds keep
/// their character; IPv6 and wildcards still come up in every few sweep seeds. The
/// `attack` profile keeps the job's rank-0 port IPv4 (the step-9 attacks target it);
/// [`Gen::extras`] picks rank 1's.
fn families(x: &mut Rng, items: &[Item], profile: Profile) -> BTreeMap<u16, ListenKind> {
    let draw = |x: &mut Rng| ListenKind {
        v6: x.chance(350),
        wildcard: x.chance(250),
    };
    let mut out = BTreeMap::new();
    let job = draw(x);
    let ports: std::collections::BTreeSet<u16> = items
        .iter()
        .filter_map(|i| match i.what {
            What::Listen { port, .. } => Some(port),
            _ => None,
        })
        .collect();
    for port in ports {
        let kind = if port >= CHURN_PORT {
            draw(x)
        } else if profile == Profile::Attack {
            ListenKind::default()
        } else {
            job
        };
        if kind != ListenKind::default() {
            out.insert(port, kind);
        }
    }
    out
}
