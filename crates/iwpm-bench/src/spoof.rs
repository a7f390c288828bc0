//! `iwpm-bench spoof`: the sans-IO core's handling time per peer datagram under a flood
//! from spoofed sources, in this process (no daemon, no socket).
//!
//! A booted core (`iwpm_core::Host` with the test kit's fake port reservations) holds four
//! port-mapped listeners, two IPv4 and two IPv6. Then every datagram of the flood comes from
//! a source of its own (an IPv4 address, or an IPv6 address in a /64 of its own: each is a
//! new entry for every per-source table), encoded with the real codec, in a fixed mix
//! ([`MIX`]): REQUESTs from port-mapped peers to the open listeners (64 bytes, and 96 with
//! the extension block), REQUESTs to closed ports (the REJECT path), and blind ACKs (a
//! random cookie). The clock is virtual: datagram `i` arrives at `i / rate` seconds, and
//! the core's timers run when due (timed apart). Nothing sleeps.
//!
//! Each datagram is timed with `Instant` around `handle_peer_datagram` and the draining of
//! its actions (`poll_action` until `None`, each sent buffer handed back with `recycle`, as
//! the daemon's shell does, without the `sendto`), and with the thread's CPU clock around
//! that (a datagram over 1 ms of wall time but not of CPU time waited for a CPU: load from
//! elsewhere, not the core); the figures are p50, p99, p99.9, max and the count over 1 ms,
//! overall and per kind, and the slowest datagrams by index (the flood is the same in
//! every run, so a stall of the core's comes back at the same index). Peak RSS
//! growth is `VmHWM` after the flood (reset before it) less `VmRSS` before. Next to it, the
//! cost of sealing and verifying a datagram with a fleet key (`crate::mac`).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use iwpm_core::{Action, Host, PeerSocket};
use iwpm_lab::progress::Status;
use iwpm_proto::peer::{IpVersion, PeerExtension, PeerMessage, PeerMsgType};
use iwpm_testkit::core_host::{CoreHarness, Ports};
use serde::Serialize;

use crate::mac::{self, MacCost};
use crate::procfs;
use crate::report::{render_targets, Target};
use crate::table::{Align, Table};

/// Sources (one datagram each) of the full flood.
pub(crate) const FULL_SOURCES: usize = 400_000;
/// Datagrams per virtual second by default.
pub(crate) const DEFAULT_RATE: u32 = 20_000;
/// The goal for p99.9, µs.
pub(crate) const P999_GOAL_US: f64 = 50.0;
/// A datagram slower than this is a stall (the goal: none).
const SLOW_NS: u64 = 1_000_000;
/// Slowest datagrams listed.
const SLOWEST: usize = 8;
/// MACs per round of the MAC measure (fewer for a flood of fewer than 4 times as many
/// sources).
const MAC_PER_ROUND: usize = 20_000;

/// `iwpm-bench spoof`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct SpoofArgs {
    /// Spoofed sources, one datagram each (at least 100).
    #[arg(long, default_value_t = FULL_SOURCES, value_parser = sources_in_range)]
    pub sources: usize,
    /// Datagrams per virtual second (1000 to 1 000 000).
    #[arg(long, default_value_t = DEFAULT_RATE, value_parser = rate_in_range)]
    pub rate: u32,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

fn sources_in_range(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (100..=16_000_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number from 100 to 16000000, got {text:?}"
        )),
    }
}

fn rate_in_range(text: &str) -> std::result::Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1_000..=1_000_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number from 1000 to 1000000, got {text:?}"
        )),
    }
}

/// What one datagram of the flood is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    RequestV4,
    RequestV4Ext,
    RequestV6,
    RequestV6Ext,
    ClosedV4,
    ClosedV6,
    AckV4,
    AckV6,
    AckV6Ext,
}

/// The mix, in hundredths of the flood.
const MIX: [(Kind, u32); 9] = [
    (Kind::RequestV4, 20),
    (Kind::RequestV4Ext, 5),
    (Kind::RequestV6, 15),
    (Kind::RequestV6Ext, 15),
    (Kind::ClosedV4, 10),
    (Kind::ClosedV6, 10),
    (Kind::AckV4, 10),
    (Kind::AckV6, 7),
    (Kind::AckV6Ext, 8),
];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::RequestV4 => "REQUEST open IPv4 64 B",
            Kind::RequestV4Ext => "REQUEST open IPv4 96 B",
            Kind::RequestV6 => "REQUEST open IPv6 64 B",
            Kind::RequestV6Ext => "REQUEST open IPv6 96 B",
            Kind::ClosedV4 => "REQUEST closed IPv4",
            Kind::ClosedV6 => "REQUEST closed IPv6",
            Kind::AckV4 => "blind ACK IPv4 48 B",
            Kind::AckV6 => "blind ACK IPv6 48 B",
            Kind::AckV6Ext => "blind ACK IPv6 96 B",
        }
    }

    fn v6(self) -> bool {
        matches!(
            self,
            Kind::RequestV6 | Kind::RequestV6Ext | Kind::ClosedV6 | Kind::AckV6 | Kind::AckV6Ext
        )
    }

    fn index(self) -> usize {
        MIX.iter().position(|(k, _)| *k == self).unwrap_or(0)
    }

    /// The kind whose share of the mix holds `roll` (0..100).
    fn of_roll(roll: u32) -> Kind {
        let mut acc = 0;
        for (kind, share) in MIX {
            acc += share;
            if roll < acc {
                return kind;
            }
        }
        MIX[MIX.len() - 1].0
    }
}

/// SplitMix64: a fixed, seeded sequence (the flood is the same in every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A port of the ephemeral range.
    fn port(&mut self) -> u16 {
        32_768 + (self.next() % 28_232) as u16
    }

    fn bytes24(&mut self) -> [u8; 24] {
        let mut b = [0u8; 24];
        for chunk in b.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes());
        }
        b
    }
}

/// One listener of the core: its address and the mapped one it answers with.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Listener {
    /// The listener's own address (what a REQUEST names).
    pub local: SocketAddr,
    /// Its mapped address (what an ACCEPT, and so an ACK, names).
    pub mapped: SocketAddr,
}

/// The listeners, two per family.
const LISTENERS: [&str; 4] = [
    "192.0.2.10:4791",
    "192.0.2.10:20049",
    "[2001:db8:ffff::10]:4791",
    "[2001:db8:ffff::10]:20049",
];
/// A port with no listener on the listeners' addresses.
const CLOSED_PORT: u16 = 5001;

/// The `i`th source: an IPv4 address of 10.0.0.0/8, or an IPv6 address in the /64
/// `2001:db8:HHHH:LLLL::/64` (`i` in the two groups), with a random interface id.
fn source(i: usize, v6: bool, rng: &mut Rng) -> SocketAddr {
    let n = i as u32;
    let ip = if v6 {
        let net = (0x2001_0db8_u128 << 96) | (u128::from(n) << 64);
        IpAddr::V6(Ipv6Addr::from(net | u128::from(rng.next() | 1)))
    } else {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (n & 0x00ff_ffff)))
    };
    SocketAddr::new(ip, rng.port())
}

/// The bytes of datagram `kind` from `from`.
fn datagram(kind: Kind, from: SocketAddr, listeners: &[Listener; 4], rng: &mut Rng) -> Vec<u8> {
    let pick = (rng.next() & 1) as usize + if kind.v6() { 2 } else { 0 };
    let listener = listeners[pick];
    let cp = SocketAddr::new(from.ip(), rng.port());
    // A port-mapped peer: its mapped port differs from its own.
    let mapped_cp = SocketAddr::new(from.ip(), cp.port() ^ 0x0400);
    let handle = rng.next() | 1;
    let request = |ap: SocketAddr| PeerMessage::request(handle, cp, mapped_cp, ap);
    let offer = PeerExtension {
        flags: PeerExtension::CAN_ECHO,
        cookie: [0; 24],
    };
    match kind {
        Kind::RequestV4 | Kind::RequestV6 => request(listener.local).encode(),
        Kind::RequestV4Ext | Kind::RequestV6Ext => {
            request(listener.local).encode_with_extension(&offer)
        }
        Kind::ClosedV4 | Kind::ClosedV6 => {
            request(SocketAddr::new(listener.local.ip(), CLOSED_PORT)).encode()
        }
        Kind::AckV4 | Kind::AckV6 | Kind::AckV6Ext => {
            let ack = PeerMessage {
                version: 0,
                msg_type: PeerMsgType::Ack,
                ip_version: IpVersion::of(from.ip()),
                pmtime: 0,
                reserved_port: 0,
                ap_port: listener.mapped.port(),
                cp_port: cp.port(),
                assoc_handle: handle,
                cp_ip: cp.ip(),
                ap_ip: listener.mapped.ip(),
                mapped_cp_ip: None,
            };
            match kind {
                Kind::AckV4 => ack.encode_with_echo(&rng.bytes24()),
                Kind::AckV6 => ack.encode(),
                _ => ack.encode_with_extension(&PeerExtension {
                    flags: PeerExtension::CAN_ECHO,
                    cookie: rng.bytes24(),
                }),
            }
        }
    }
}

/// Handling times, µs.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Latency {
    /// Timed calls.
    pub n: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    /// Calls over 1 ms.
    pub over_1ms: usize,
}

impl Latency {
    fn of(ns: &[u32]) -> Latency {
        if ns.is_empty() {
            return Latency::default();
        }
        let mut sorted = ns.to_vec();
        sorted.sort_unstable();
        let at = |p: f64| {
            // Nearest rank.
            let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            f64::from(sorted[rank - 1]) / 1e3
        };
        Latency {
            n: ns.len(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: f64::from(sorted[sorted.len() - 1]) / 1e3,
            mean_us: ns.iter().map(|&x| f64::from(x)).sum::<f64>() / ns.len() as f64 / 1e3,
            over_1ms: ns.iter().filter(|&&x| u64::from(x) > SLOW_NS).count(),
        }
    }
}

/// One kind of datagram of the flood.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct KindRow {
    pub kind: &'static str,
    pub sent: usize,
    pub latency: Latency,
}

/// One of the slowest datagrams.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Slow {
    /// Its place in the flood (0-based; also the number of sources seen before it).
    pub index: usize,
    pub kind: &'static str,
    /// Wall time.
    pub us: f64,
    /// The thread's CPU time.
    pub cpu_us: f64,
    /// Its arrival on the virtual clock, s.
    pub at_s: f64,
}

/// What the core sent during the flood.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Output {
    pub accepts: u64,
    pub rejects: u64,
    /// Other peer datagrams (none expected).
    pub other_peer: u64,
    /// Kernel datagrams (REMOTE_INFOs sent on a budget token).
    pub kernel: u64,
    /// Other actions (none expected).
    pub other: u64,
}

/// The core's counters after the flood.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CoreCounts {
    pub requests_in: u64,
    pub acks_in: u64,
    pub malformed: u64,
    pub accepts_stateless: u64,
    pub rejects_sent: u64,
    pub rejects_suppressed: u64,
    pub acks_unverified: u64,
    /// Blind ACKs that were not counted unverified: a ten-bit cookie guessed.
    pub acks_guessed: u64,
    pub remote_info_deferred: u64,
    pub remote_info_held_dropped: u64,
    pub exchanges_evicted: u64,
    pub exchanges_expired: u64,
    /// Exchanges alive at the end.
    pub exchanges_active: u64,
}

/// Resident memory around the flood.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Rss {
    /// Before the flood (the core set up, the timing arrays allocated and touched), bytes.
    pub before_bytes: u64,
    /// Peak during the flood (`VmHWM`), bytes.
    pub peak_bytes: u64,
    /// Peak less before, bytes.
    pub peak_growth_bytes: u64,
    /// After the flood, bytes.
    pub after_bytes: u64,
    /// How the peak was read.
    pub peak_from: &'static str,
}

/// One check that the flood's counts add up.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Check {
    pub what: String,
    pub ok: bool,
}

/// Everything `iwpm-bench spoof` measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SpoofReport {
    /// `release` or `debug` (timings are judged only in a release build).
    pub build: &'static str,
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    pub sources: usize,
    pub ipv4_sources: usize,
    pub ipv6_sources: usize,
    pub datagrams: usize,
    pub rate_per_s: u32,
    pub virtual_s: f64,
    pub listeners: Vec<Listener>,
    /// Per datagram: `handle_peer_datagram` and draining its actions, wall time.
    pub latency: Latency,
    /// The same in the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, read around the wall
    /// clock's two reads): what the core itself took, page faults included, time spent
    /// waiting for a CPU excluded.
    pub latency_cpu: Latency,
    /// Datagrams over 1 ms of wall time but not of CPU time (the thread was preempted).
    pub preempted_over_1ms: usize,
    pub kinds: Vec<KindRow>,
    pub slowest: Vec<Slow>,
    /// `handle_timeout` calls when a timer was due, and draining them (timed apart).
    pub timers: Latency,
    pub output: Output,
    pub core: CoreCounts,
    pub checks: Vec<Check>,
    pub counts_add_up: bool,
    pub rss: Rss,
    pub mac: MacCost,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
    /// Wall time of the flood, s (the timed calls and everything between them).
    pub wall_s: f64,
}

/// Runs the flood.
pub(crate) fn run(args: &SpoofArgs, status: &Status) -> Result<SpoofReport> {
    let load_before = procfs::load_average();
    status.phase("spoof: setting up the core");
    let mut h = CoreHarness::booted();
    let mut listeners = Vec::new();
    for local in LISTENERS {
        let seq = h.add(local, Some(0));
        let mapped = h
            .expect_add_reply(seq)
            .to_socket_addr()
            .with_context(|| format!("no mapped address for {local}"))?;
        let local: SocketAddr = local.parse()?;
        if mapped.port() == local.port() {
            bail!("{local} is not port mapped: {mapped}");
        }
        listeners.push(Listener { local, mapped });
    }
    let listeners: [Listener; 4] = listeners
        .try_into()
        .map_err(|_| anyhow::anyhow!("four listeners"))?;
    h.kernel_in.clear();
    h.peer_out.clear();
    let t0 = h.now;
    let mut host = h.host;
    let n = args.sources;
    let step = Duration::from_secs(1) / args.rate;

    // Everything the measure keeps, allocated and touched before the baseline.
    let mut times = vec![u32::MAX; n];
    let mut cpu_times = vec![u32::MAX; n];
    let mut kinds = vec![u8::MAX; n];
    // (Timers fall due about once per 3000 datagrams: room for many more.)
    let mut timer_times = vec![u32::MAX; n / 8 + 64];
    timer_times.clear();
    let mut output = Output::default();
    let mut sent = [0usize; MIX.len()];
    let mut rng = Rng(0x1f0a_d5ee_d000_0001);
    let pid = std::process::id();
    let rss_before = procfs::rss_bytes(pid).unwrap_or(0);
    let reset = procfs::reset_own_peak_rss();

    status.counted("spoof: datagrams", n as u64);
    let wall = Instant::now();
    for i in 0..n {
        let now = t0 + step * (i as u32);
        if host.poll_timeout().is_some_and(|d| d <= now) {
            let t = Instant::now();
            host.handle_timeout(now);
            drain(&mut host, &mut output);
            timer_times.push(nanos(t.elapsed()));
        }
        let kind = Kind::of_roll((rng.next() % 100) as u32);
        let from = source(i, kind.v6(), &mut rng);
        let bytes = datagram(kind, from, &listeners, &mut rng);
        let via = if kind.v6() {
            PeerSocket::V6Listener
        } else {
            PeerSocket::V4Listener
        };
        let cpu = procfs::own_thread_cpu_ns().unwrap_or(0);
        let t = Instant::now();
        host.handle_peer_datagram(now, via, from, &bytes);
        drain(&mut host, &mut output);
        times[i] = nanos(t.elapsed());
        let cpu = procfs::own_thread_cpu_ns().unwrap_or(0).saturating_sub(cpu);
        cpu_times[i] = u32::try_from(cpu).unwrap_or(u32::MAX - 1);
        kinds[i] = kind.index() as u8;
        sent[kind.index()] += 1;
        if i % 4096 == 0 {
            status.advance(i as u64, "");
        }
    }
    let wall_s = wall.elapsed().as_secs_f64();
    status.advance(n as u64, "");
    let peak = procfs::own_peak_rss_bytes().unwrap_or(0);
    let rss_after = procfs::rss_bytes(pid).unwrap_or(0);
    let stats = host.core().stats().clone();

    status.phase("spoof: the MAC's cost");
    // (A small flood, as the tests run in a debug build, measures fewer MACs.)
    let mac = mac::measure(MAC_PER_ROUND.min(n / 4))?;
    status.finish();

    let latency = Latency::of(&times);
    let latency_cpu = Latency::of(&cpu_times);
    // Over 1 ms of wall time but not of the thread's CPU time: the thread waited for a CPU
    // (another process ran), which no code of the core's can change.
    let preempted = times
        .iter()
        .zip(&cpu_times)
        .filter(|(&w, &c)| u64::from(w) > SLOW_NS && u64::from(c) <= SLOW_NS)
        .count();
    let kind_rows: Vec<KindRow> = MIX
        .iter()
        .enumerate()
        .map(|(k, (kind, _))| {
            let of_kind: Vec<u32> = times
                .iter()
                .zip(&kinds)
                .filter(|(_, &x)| usize::from(x) == k)
                .map(|(&t, _)| t)
                .collect();
            KindRow {
                kind: kind.label(),
                sent: sent[k],
                latency: Latency::of(&of_kind),
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| std::cmp::Reverse(times[i]));
    let slowest = order
        .iter()
        .take(SLOWEST)
        .map(|&i| Slow {
            index: i,
            kind: MIX[usize::from(kinds[i])].0.label(),
            us: f64::from(times[i]) / 1e3,
            cpu_us: f64::from(cpu_times[i]) / 1e3,
            at_s: (step * (i as u32)).as_secs_f64(),
        })
        .collect();

    let count = |kinds: &[Kind]| -> u64 { kinds.iter().map(|k| sent[k.index()] as u64).sum() };
    let open = count(&[
        Kind::RequestV4,
        Kind::RequestV4Ext,
        Kind::RequestV6,
        Kind::RequestV6Ext,
    ]);
    let closed = count(&[Kind::ClosedV4, Kind::ClosedV6]);
    let acks = count(&[Kind::AckV4, Kind::AckV6, Kind::AckV6Ext]);
    let ten_bit_acks = count(&[Kind::AckV6]);
    let core = CoreCounts {
        requests_in: stats.peer_in[usize::from(PeerMsgType::Request.code())],
        acks_in: stats.peer_in[usize::from(PeerMsgType::Ack.code())],
        malformed: stats.peer_malformed,
        accepts_stateless: stats.accepts_stateless,
        rejects_sent: stats.rejects_sent,
        rejects_suppressed: stats.rejects_suppressed,
        acks_unverified: stats.peer_acks_unverified,
        acks_guessed: acks.saturating_sub(stats.peer_acks_unverified),
        remote_info_deferred: stats.remote_info_deferred,
        remote_info_held_dropped: stats.remote_info_held_dropped,
        exchanges_evicted: stats.exchanges_evicted,
        exchanges_expired: stats.exchanges_expired,
        exchanges_active: stats.exchanges_active,
    };
    let ipv6_sources = MIX
        .iter()
        .filter(|(k, _)| k.v6())
        .map(|(k, _)| sent[k.index()])
        .sum::<usize>();
    let mut checks = Vec::new();
    let mut check = |what: String, ok: bool| checks.push(Check { what, ok });
    check(
        format!("datagrams sent by kind sum to {n}"),
        sent.iter().sum::<usize>() == n,
    );
    check(
        format!(
            "the core counted {} REQUESTs and {acks} ACKs in",
            open + closed
        ),
        core.requests_in == open + closed && core.acks_in == acks && core.malformed == 0,
    );
    check(
        format!("one ACCEPT out per REQUEST to an open listener ({open})"),
        output.accepts == open,
    );
    check(
        format!("REJECTs sent + suppressed = REQUESTs to closed ports ({closed})"),
        output.rejects == core.rejects_sent
            && core.rejects_sent + core.rejects_suppressed == closed,
    );
    check(
        format!(
            "blind ACKs unverified ({acks}), but for guessed ten-bit cookies (at most 1 in 100 \
             of {ten_bit_acks})"
        ),
        core.acks_unverified <= acks && core.acks_guessed <= ten_bit_acks / 100 + 1,
    );
    check(
        "nothing else sent".to_owned(),
        output.other_peer == 0 && output.other == 0,
    );
    check(
        format!("every datagram timed ({n})"),
        !times.contains(&u32::MAX) && !cpu_times.contains(&u32::MAX),
    );
    let counts_add_up = checks.iter().all(|c| c.ok);

    let release = !cfg!(debug_assertions);
    let judged = release && n >= FULL_SOURCES;
    let judge = |ok: bool| judged.then_some(ok);
    let targets = vec![
        Target {
            name: "p99.9 per datagram, µs".into(),
            value: latency.p999_us,
            goal: format!("<= {P999_GOAL_US}"),
            met: judge(latency.p999_us <= P999_GOAL_US),
        },
        Target {
            name: "datagrams over 1 ms of CPU time".into(),
            value: latency_cpu.over_1ms as f64,
            goal: "0".into(),
            met: judge(latency_cpu.over_1ms == 0),
        },
    ];
    let mut notes = vec![format!(
        "timed: handle_peer_datagram + draining its actions (buffers recycled, no sendto), \
         with Instant::now() twice (about 20-50 ns of the figure); virtual clock {} datagrams \
         per second",
        args.rate
    )];
    if preempted > 0 {
        notes.push(format!(
            "{preempted} datagram(s) over 1 ms of wall time took under 1 ms of CPU time: the \
             thread waited for a CPU (load from elsewhere); the 1 ms goal is judged on CPU time"
        ));
    }
    if !release {
        notes.push("debug build: timings not judged (cargo run --release)".into());
    } else if n < FULL_SOURCES {
        notes.push(format!(
            "{n} sources: timings not judged (the goals are for {FULL_SOURCES})"
        ));
    }
    if !reset {
        notes.push(
            "/proc/self/clear_refs not writable: the peak RSS counts from the process's start"
                .into(),
        );
    }
    Ok(SpoofReport {
        build: if release { "release" } else { "debug" },
        load_before,
        load_after: procfs::load_average(),
        sources: n,
        ipv4_sources: n - ipv6_sources,
        ipv6_sources,
        datagrams: n,
        rate_per_s: args.rate,
        virtual_s: (step * (n as u32)).as_secs_f64(),
        listeners: listeners.to_vec(),
        latency,
        latency_cpu,
        preempted_over_1ms: preempted,
        kinds: kind_rows,
        slowest,
        timers: Latency::of(&timer_times),
        output,
        core,
        checks,
        counts_add_up,
        rss: Rss {
            before_bytes: rss_before,
            peak_bytes: peak,
            peak_growth_bytes: peak.saturating_sub(rss_before),
            after_bytes: rss_after,
            peak_from: if reset {
                "VmHWM reset before the flood"
            } else {
                "VmHWM since start"
            },
        },
        mac,
        targets,
        notes,
        wall_s,
    })
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX - 1)
}

/// Drains the host's actions, counting them and handing their buffers back.
fn drain(host: &mut Host<Ports>, out: &mut Output) {
    while let Some(action) = host.poll_action() {
        match action {
            Action::ToPeer { datagram, .. } => {
                match datagram.first().map(|b| PeerMsgType::from_code(b >> 4)) {
                    Some(PeerMsgType::Accept) => out.accepts += 1,
                    Some(PeerMsgType::Reject) => out.rejects += 1,
                    _ => out.other_peer += 1,
                }
                host.recycle(datagram);
            }
            Action::ToKernel(bytes) => {
                out.kernel += 1;
                host.recycle(bytes);
            }
            // Once, at the first input after the start (no restart to recover from).
            Action::RecoveryEnded => {}
            _ => out.other += 1,
        }
    }
}

impl SpoofReport {
    /// The text report.
    pub(crate) fn render(&self) -> String {
        use Align::{Left, Right};
        let mut s = String::new();
        let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.1}"));
        let _ = writeln!(
            s,
            "iwpm-bench spoof, {} build (load average {} before, {} after)\n",
            self.build,
            load(self.load_before),
            load(self.load_after)
        );
        let _ = writeln!(
            s,
            "flood: {} datagrams from {} spoofed sources ({} IPv4 addresses, {} IPv6 /64s), \
             {} per virtual second ({:.1} s virtual, {:.1} s wall)",
            self.datagrams,
            self.sources,
            self.ipv4_sources,
            self.ipv6_sources,
            self.rate_per_s,
            self.virtual_s,
            self.wall_s
        );
        let mapped: Vec<String> = self
            .listeners
            .iter()
            .map(|l| format!("{} -> {}", l.local, l.mapped))
            .collect();
        let _ = writeln!(s, "listeners (port-mapped): {}", mapped.join(", "));
        let _ = writeln!(
            s,
            "\nper datagram (handle_peer_datagram + draining its actions), µs of wall time \
             (\"CPU time\": the thread's)"
        );
        let mut t = Table::new(&[
            ("kind", Left),
            ("n", Right),
            ("p50", Right),
            ("p99", Right),
            ("p99.9", Right),
            ("max", Right),
            ("mean", Right),
            ("> 1 ms", Right),
        ]);
        let row = |name: &str, l: &Latency| {
            vec![
                name.to_owned(),
                l.n.to_string(),
                format!("{:.2}", l.p50_us),
                format!("{:.2}", l.p99_us),
                format!("{:.2}", l.p999_us),
                format!("{:.1}", l.max_us),
                format!("{:.2}", l.mean_us),
                l.over_1ms.to_string(),
            ]
        };
        t.row(row("all", &self.latency));
        t.row(row("all, CPU time", &self.latency_cpu));
        for k in &self.kinds {
            t.row(row(k.kind, &k.latency));
        }
        t.row(row("timers (handle_timeout)", &self.timers));
        s += &t.render("  ");
        let slow: Vec<String> = self
            .slowest
            .iter()
            .map(|x| {
                format!(
                    "#{} {} {:.1} µs (CPU {:.1})",
                    x.index, x.kind, x.us, x.cpu_us
                )
            })
            .collect();
        let _ = writeln!(s, "  slowest: {}", slow.join("; "));
        let o = &self.output;
        let c = &self.core;
        let _ = writeln!(
            s,
            "\nsent: {} ACCEPTs, {} REJECTs ({} suppressed by the REJECT rates), {} REMOTE_INFOs \
             to the kernel; blind ACKs: {} unverified, {} guessed; \
             {} REMOTE_INFOs deferred to an ACK; {} exchanges evicted, {} alive at the end",
            o.accepts,
            o.rejects,
            c.rejects_suppressed,
            o.kernel,
            c.acks_unverified,
            c.acks_guessed,
            c.remote_info_deferred,
            c.exchanges_evicted,
            c.exchanges_active
        );
        let bad: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.as_str())
            .collect();
        let _ = writeln!(
            s,
            "counts add up: {}",
            if bad.is_empty() {
                "yes".to_owned()
            } else {
                format!("NO ({})", bad.join("; "))
            }
        );
        let mib = |b: u64| b as f64 / 1048576.0;
        let _ = writeln!(
            s,
            "RSS: {:.1} MiB before, peak {:.1} MiB (+{:.1} MiB, {}), {:.1} MiB after",
            mib(self.rss.before_bytes),
            mib(self.rss.peak_bytes),
            mib(self.rss.peak_growth_bytes),
            self.rss.peak_from,
            mib(self.rss.after_bytes)
        );
        let _ = writeln!(
            s,
            "MAC per datagram: seal {:.0} ns, verify {:.0} ns (a forged one {:.0} ns; {:.0}% of \
             the p50 above); {}",
            self.mac.seal_ns,
            self.mac.verify_ns,
            self.mac.verify_forged_ns,
            if self.latency.p50_us > 0.0 {
                self.mac.verify_ns / (self.latency.p50_us * 1e3) * 100.0
            } else {
                0.0
            },
            self.mac.what
        );
        let _ = writeln!(s, "\ntargets");
        s += &render_targets(&self.targets, "goal", "n/a", &self.notes);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_whole_and_each_roll_has_its_kind() {
        assert_eq!(MIX.iter().map(|(_, s)| s).sum::<u32>(), 100);
        assert_eq!(Kind::of_roll(0), Kind::RequestV4);
        assert_eq!(Kind::of_roll(20), Kind::RequestV4Ext);
        assert_eq!(Kind::of_roll(99), Kind::AckV6Ext);
        for (k, (kind, _)) in MIX.iter().enumerate() {
            assert_eq!(kind.index(), k);
        }
    }

    #[test]
    fn sources_are_distinct_addresses_and_slash_64s() {
        let mut rng = Rng(1);
        let v4: std::collections::HashSet<IpAddr> =
            (0..1000).map(|i| source(i, false, &mut rng).ip()).collect();
        assert_eq!(v4.len(), 1000);
        let nets: std::collections::HashSet<u64> = (0..1000)
            .map(|i| match source(i, true, &mut rng).ip() {
                IpAddr::V6(a) => (u128::from(a) >> 64) as u64,
                IpAddr::V4(_) => panic!("IPv6 asked"),
            })
            .collect();
        assert_eq!(nets.len(), 1000);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let ns: Vec<u32> = (1..=1000).map(|x| x * 1000).collect();
        let l = Latency::of(&ns);
        assert_eq!(
            (l.p50_us, l.p99_us, l.p999_us, l.max_us),
            (500.0, 990.0, 999.0, 1000.0)
        );
        assert_eq!(l.over_1ms, 0);
        assert_eq!(Latency::of(&[2_000_000]).over_1ms, 1);
    }

    #[test]
    fn every_kind_decodes_as_meant() {
        let mut rng = Rng(9);
        let l = |a: &str, m: &str| Listener {
            local: a.parse().unwrap(),
            mapped: m.parse().unwrap(),
        };
        let listeners = [
            l("192.0.2.10:1", "192.0.2.10:40001"),
            l("192.0.2.10:2", "192.0.2.10:40002"),
            l("[2001:db8::1]:1", "[2001:db8::1]:40001"),
            l("[2001:db8::1]:2", "[2001:db8::1]:40002"),
        ];
        for (kind, _) in MIX {
            let from = source(7, kind.v6(), &mut rng);
            let bytes = datagram(kind, from, &listeners, &mut rng);
            let msg = PeerMessage::decode(&bytes).unwrap();
            assert_eq!(msg.cp_ip, from.ip(), "{kind:?}");
            assert_eq!(msg.ip_version == IpVersion::V6, kind.v6(), "{kind:?}");
            let long = matches!(
                kind,
                Kind::RequestV4Ext | Kind::RequestV6Ext | Kind::AckV6Ext
            );
            assert_eq!(bytes.len() == 96, long, "{kind:?}");
            match msg.msg_type {
                PeerMsgType::Request => {
                    let mapped = msg.mapped_cp().unwrap();
                    assert_ne!(mapped, msg.cp(), "port-mapped peer");
                    let closed = matches!(kind, Kind::ClosedV4 | Kind::ClosedV6);
                    assert_eq!(msg.ap_port == CLOSED_PORT, closed, "{kind:?}");
                }
                PeerMsgType::Ack => {
                    assert!(listeners.iter().any(|l| l.mapped == msg.ap()), "{kind:?}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
