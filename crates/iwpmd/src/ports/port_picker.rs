//! Choosing the TCP port of a new reservation ourselves instead of `bind(port 0)`.
//!
//! Why: the kernel's `bind(port 0)` scans `ip_local_port_range` from a random offset over
//! the ports of one parity (the other is left to `connect()`), then over the other. Every
//! reservation we hold stays in that range, so the scan lengthens as they accumulate, and
//! once the preferred half is full every bind walks all of it (`iwpm-bench`, range
//! 32768-60999: 1.25 ms of daemon CPU per ADD+REMOVE at 19k held, 43 µs now). A random
//! port bound explicitly is one hash look-up: it either binds or fails with `EADDRINUSE`,
//! and with a fraction `f` of the range taken the expected number of tries is `1/(1-f)`.
//!
//! What stays as with `bind(port 0)` (and as in the C daemon): the socket, its family, the
//! wildcard address, no `SO_REUSEADDR`, no `IPV6_V6ONLY` (an IPv6 reservation also holds
//! the IPv4 port; an explicit bind checks that overlap exactly as port 0 does, so a port
//! any socket of either family holds fails with `EADDRINUSE` and another is tried). Ports
//! in `ip_local_reserved_ports` are never picked (port 0 skips them; an explicit bind
//! would not). Like the kernel we prefer the parity `connect()` leaves alone, while that
//! half has room. When the range is nearly full, or a few random tries failed (ports taken
//! by other users of the host), we fall back to `bind(port 0)`, which finds the last free
//! ports if there are any.
//!
//! Ports our own reservations hold ([`OwnPorts`]) are never tried: that bind would fail
//! with `EADDRINUSE` for certain (every reservation is on the wildcard address, where an
//! IPv4 and a dual-stack IPv6 socket conflict too), and with half the range held, half of
//! the random tries would be such system calls.
//!
//! The choice is pure ([`PortPicker::candidates`], tested without sockets); the binding
//! loop is [`bind_ephemeral`]. The range is re-read from `/proc` at most every
//! [`RANGE_REFRESH`], so an operator's `sysctl` change is followed.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::rand::GetRandomFlags;
use socket2::Socket;

const PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
const RESERVED_PORTS: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";
/// The kernel's default range, used when `/proc` cannot be read.
const DEFAULT_RANGE: (u16, u16) = (32768, 60999);
/// How long a read of the range is trusted.
pub(super) const RANGE_REFRESH: Duration = Duration::from_secs(10);
/// Random ports tried before falling back to port 0.
pub(super) const MAX_TRIES: usize = 8;
/// Random draws per reservation at most (draws of our own or reserved ports cost no
/// system call, so they do not count as tries).
const MAX_DRAWS: usize = MAX_TRIES * 16;
/// Above this share of the range held by us, go straight to port 0 (random tries would
/// mostly fail).
const NEARLY_FULL: f64 = 0.9;
/// Below this share of the preferred half held by us, pick only from that half.
const HALF_PREFERRED: f64 = 0.75;

/// The ephemeral range and the reserved ports: the kernel's rules for port 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PortRules {
    /// `ip_local_port_range`, inclusive.
    pub(crate) low: u16,
    /// Upper end, inclusive.
    pub(crate) high: u16,
    /// `ip_local_reserved_ports`, inclusive ranges, sorted.
    pub(crate) reserved: Vec<(u16, u16)>,
}

impl PortRules {
    /// Parses the two sysctl files' contents (`"32768\t60999"`, `"8080,9000-9010"`); a
    /// range that does not parse or is inverted gives the kernel's default range.
    pub(super) fn parse(range: &str, reserved: &str) -> PortRules {
        let mut it = range.split_whitespace().map(str::parse::<u16>);
        let (low, high) = match (it.next(), it.next()) {
            (Some(Ok(l)), Some(Ok(h))) if l > 0 && l <= h => (l, h),
            _ => DEFAULT_RANGE,
        };
        let mut ranges: Vec<(u16, u16)> = reserved
            .trim()
            .split(',')
            .filter_map(|part| {
                let part = part.trim();
                match part.split_once('-') {
                    Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
                    None => part.parse().ok().map(|p| (p, p)),
                }
            })
            .filter(|(a, b)| a <= b)
            .collect();
        ranges.sort_unstable();
        PortRules {
            low,
            high,
            reserved: ranges,
        }
    }

    /// Reads the rules of this network namespace from `/proc`.
    pub(super) fn read() -> PortRules {
        let range = std::fs::read_to_string(PORT_RANGE).unwrap_or_default();
        let reserved = std::fs::read_to_string(RESERVED_PORTS).unwrap_or_default();
        PortRules::parse(&range, &reserved)
    }

    /// Number of ports in the range.
    pub(super) fn size(&self) -> u32 {
        u32::from(self.high) - u32::from(self.low) + 1
    }

    fn is_reserved(&self, port: u16) -> bool {
        let i = self.reserved.partition_point(|(_, end)| *end < port);
        self.reserved
            .get(i)
            .is_some_and(|(start, _)| *start <= port)
    }
}

/// The ports our reservations hold, one bit per port (8 KiB, whatever the count).
pub(super) struct OwnPorts {
    bits: Box<[u64; 1024]>,
    len: usize,
}

impl Default for OwnPorts {
    fn default() -> Self {
        OwnPorts {
            bits: Box::new([0; 1024]),
            len: 0,
        }
    }
}

impl std::fmt::Debug for OwnPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnPorts").field("len", &self.len).finish()
    }
}

impl OwnPorts {
    fn slot(port: u16) -> (usize, u64) {
        (usize::from(port / 64), 1u64 << (port % 64))
    }

    /// Records `port` as held; false if it already was.
    pub(super) fn insert(&mut self, port: u16) -> bool {
        let (i, bit) = Self::slot(port);
        let new = self.bits[i] & bit == 0;
        self.bits[i] |= bit;
        self.len += usize::from(new);
        new
    }

    /// Records `port` as released; false if it was not held.
    pub(super) fn remove(&mut self, port: u16) -> bool {
        let (i, bit) = Self::slot(port);
        let held = self.bits[i] & bit != 0;
        self.bits[i] &= !bit;
        self.len -= usize::from(held);
        held
    }

    /// Whether `port` is held.
    pub(super) fn contains(&self, port: u16) -> bool {
        let (i, bit) = Self::slot(port);
        self.bits[i] & bit != 0
    }

    /// Number of ports held.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// Picks random candidate ports; owns only a random generator and the rules.
#[derive(Debug)]
pub(super) struct PortPicker {
    rules: PortRules,
    read_at: Option<Instant>,
    rng: u64,
}

impl PortPicker {
    /// A picker with fixed rules and seed (tests); [`PortPicker::from_system`] for the
    /// daemon.
    pub(super) fn new(rules: PortRules, seed: u64) -> PortPicker {
        PortPicker {
            rules,
            read_at: None,
            rng: seed,
        }
    }

    /// The host's rules, read lazily, and a random seed that never waits for the kernel's
    /// random pool (see [`seed`]).
    pub(super) fn from_system() -> PortPicker {
        let seed = seed(|buf, flags| rustix::rand::getrandom(buf, flags), clock_seed);
        let mut picker = PortPicker::new(PortRules::parse("", ""), seed);
        picker.read_at = Some(Instant::now() - RANGE_REFRESH * 2);
        picker
    }

    /// Re-reads the rules from `/proc` when the last read is older than [`RANGE_REFRESH`]
    /// (never for a picker made by [`PortPicker::new`]).
    pub(super) fn refresh(&mut self, now: Instant) {
        if let Some(at) = self.read_at {
            if now.saturating_duration_since(at) >= RANGE_REFRESH {
                self.rules = PortRules::read();
                self.read_at = Some(now);
            }
        }
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Up to [`MAX_TRIES`] distinct-ish random ports to try, none of them in `ours`;
    /// empty when the range is nearly full (use port 0 then). Ports at an odd offset from
    /// the range's start (the half `bind(port 0)` prefers) while that half is less than
    /// 3/4 held, else any; never a reserved port.
    pub(super) fn candidates(&mut self, ours: &OwnPorts) -> Vec<u16> {
        let size = self.rules.size();
        let held = ours.len();
        if held as f64 >= f64::from(size) * NEARLY_FULL || size < 4 {
            return Vec::new();
        }
        let odd_only = (held as f64) < f64::from(size / 2) * HALF_PREFERRED;
        let mut out = Vec::with_capacity(MAX_TRIES);
        // Bounded: a range made mostly of reserved or own ports ends with few candidates.
        for _ in 0..MAX_DRAWS {
            if out.len() == MAX_TRIES {
                break;
            }
            let r = self.next();
            let offset = if odd_only {
                // Odd offsets 1, 3, ... below `size`.
                ((r % u64::from(size / 2)) * 2 + 1) as u32
            } else {
                (r % u64::from(size)) as u32
            };
            let Ok(port) = u16::try_from(u32::from(self.rules.low) + offset) else {
                continue;
            };
            if port <= self.rules.high && !self.rules.is_reserved(port) && !ours.contains(port) {
                out.push(port);
            }
        }
        out
    }
}

/// The `getrandom` call to make after `failed` (the last call's flags and error; `None`
/// first), or `None` for the clock seed. Never a blocking call: in a fresh VM the pool
/// may take a second to initialise, and the picker's seed is made on the event loop's
/// path. So the ready pool (`GRND_NONBLOCK`), else the early-boot output
/// (`GRND_INSECURE`, Linux 5.6), else the clock. The seed only spreads the picks (the
/// kernel's own port choice is no secret either); the handle key is seeded alike.
pub(super) fn seed_flags(failed: Option<(GetRandomFlags, Errno)>) -> Option<GetRandomFlags> {
    match failed {
        None => Some(GetRandomFlags::NONBLOCK),
        Some((f, Errno::AGAIN)) if f == GetRandomFlags::NONBLOCK => Some(GetRandomFlags::INSECURE),
        // EINVAL from GRND_INSECURE: a kernel before 5.6; anything else: no getrandom.
        Some(_) => None,
    }
}

/// A seed from `getrandom` with the flags [`seed_flags`] chooses, else from `clock`
/// (with a warning).
pub(super) fn seed(
    mut getrandom: impl FnMut(&mut [u8], GetRandomFlags) -> Result<usize, Errno>,
    clock: impl FnOnce() -> u64,
) -> u64 {
    let mut failed = None;
    while let Some(flags) = seed_flags(failed) {
        let mut buf = [0u8; 8];
        let mut filled = 0;
        let outcome = loop {
            if filled == buf.len() {
                break Ok(());
            }
            match getrandom(buf.get_mut(filled..).unwrap_or_default(), flags) {
                Ok(0) => break Err(Errno::AGAIN),
                Ok(n) => filled += n,
                Err(Errno::INTR) => {}
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok(()) => return u64::from_le_bytes(buf),
            Err(e) => failed = Some((flags, e)),
        }
    }
    let why = failed.map(|(_, e)| io::Error::from(e));
    tracing::warn!(
        error = ?why,
        "no non-blocking random bytes for the port picker's seed; seeded from the clock and pid"
    );
    clock()
}

/// The clock and the pid, mixed (splitmix64's finaliser): distinct per start.
fn clock_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = now ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Binds `socket` to `bind` (whose port is 0) on a port chosen by `picker`, not one of
/// `ours`, falling back to port 0 (see the module docs). Returns the port when we chose
/// it, `None` when the kernel did (port 0: ask the socket). Errors other than
/// `EADDRINUSE` end the attempt at once, as they would for port 0.
pub(super) fn bind_ephemeral(
    picker: &mut PortPicker,
    socket: &Socket,
    bind: SocketAddr,
    ours: &OwnPorts,
) -> io::Result<Option<u16>> {
    debug_assert_eq!(bind.port(), 0);
    picker.refresh(Instant::now());
    for port in picker.candidates(ours) {
        let mut at = bind;
        at.set_port(port);
        match socket.bind(&at.into()) {
            Ok(()) => return Ok(Some(port)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    socket.bind(&bind.into()).map(|()| None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Step 10 (first fix): the seed never asks `getrandom` to block. NONBLOCK first, then
    /// INSECURE on EAGAIN, then the clock on EINVAL; the old code made one call with no
    /// flags, which waits for the pool.
    #[test]
    fn the_seed_never_blocks() {
        assert_eq!(seed_flags(None), Some(GetRandomFlags::NONBLOCK));
        assert_eq!(
            seed_flags(Some((GetRandomFlags::NONBLOCK, Errno::AGAIN))),
            Some(GetRandomFlags::INSECURE)
        );
        assert_eq!(
            seed_flags(Some((GetRandomFlags::INSECURE, Errno::INVAL))),
            None
        );
        assert_eq!(
            seed_flags(Some((GetRandomFlags::NONBLOCK, Errno::NOSYS))),
            None
        );

        // A pool not ready yet, on a kernel before 5.6: every call is non-blocking, and
        // the clock seeds.
        let mut calls = Vec::new();
        let s = seed(
            |_, f| {
                calls.push(f);
                Err(if f == GetRandomFlags::NONBLOCK {
                    Errno::AGAIN
                } else {
                    Errno::INVAL
                })
            },
            || 7,
        );
        assert_eq!(s, 7);
        assert_eq!(calls, [GetRandomFlags::NONBLOCK, GetRandomFlags::INSECURE]);
        assert!(calls
            .iter()
            .all(|f| f.intersects(GetRandomFlags::NONBLOCK | GetRandomFlags::INSECURE)));

        // Early boot on 5.6+: the early-boot output seeds, filled across short reads.
        let s = seed(
            |buf, f| {
                if f == GetRandomFlags::NONBLOCK {
                    return Err(Errno::AGAIN);
                }
                buf[0] = 1;
                Ok(1)
            },
            || panic!("the clock is not needed"),
        );
        assert_eq!(s, u64::from_le_bytes([1; 8]));
    }
    use socket2::{Domain, Protocol, Type};
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn rules(low: u16, high: u16, reserved: &str) -> PortRules {
        PortRules::parse(&format!("{low}\t{high}\n"), reserved)
    }

    /// `n` held ports, all below the ranges the tests use (they count, never collide).
    fn holding(n: u16) -> OwnPorts {
        let mut ours = OwnPorts::default();
        for port in 1..=n {
            ours.insert(port);
        }
        ours
    }

    #[test]
    fn parses_the_sysctl_formats() {
        let r = PortRules::parse("32768\t60999\n", "8080,9000-9010, 40000\n");
        assert_eq!((r.low, r.high), (32768, 60999));
        assert_eq!(r.reserved, vec![(8080, 8080), (9000, 9010), (40000, 40000)]);
        assert!(r.is_reserved(9005) && r.is_reserved(40000) && !r.is_reserved(9011));
        assert_eq!(r.size(), 28232);
        // Garbage or an inverted range: the kernel's default, not a panic.
        for bad in ["", "x y", "61000 1000", "0 10"] {
            let r = PortRules::parse(bad, "junk,-,5-4");
            assert_eq!((r.low, r.high), DEFAULT_RANGE, "{bad:?}");
            assert!(r.reserved.is_empty());
        }
    }

    #[test]
    fn candidates_stay_in_range_skip_reserved_and_prefer_odd_offsets() {
        let mut p = PortPicker::new(rules(40000, 40099, "40001-40049"), 7);
        for _ in 0..200 {
            for port in p.candidates(&holding(0)) {
                assert!((40050..=40099).contains(&port), "{port}");
                assert_eq!((port - 40000) % 2, 1, "odd offset while the half has room");
            }
        }
        // With the odd half mostly held, both parities.
        let mut p = PortPicker::new(rules(40000, 40099, ""), 7);
        let seen: HashSet<u16> = (0..200).flat_map(|_| p.candidates(&holding(40))).collect();
        assert!(seen.iter().any(|p| p % 2 == 0) && seen.iter().any(|p| p % 2 == 1));
        assert!(seen.iter().all(|p| (40000..=40099).contains(p)));
    }

    #[test]
    fn nearly_full_or_tiny_ranges_fall_back_to_port_zero() {
        let mut p = PortPicker::new(rules(40000, 40099, ""), 1);
        assert_eq!(p.candidates(&holding(10)).len(), MAX_TRIES);
        assert!(p.candidates(&holding(90)).is_empty());
        let mut tiny = PortPicker::new(rules(40000, 40001, ""), 1);
        assert!(tiny.candidates(&holding(0)).is_empty());
        // Every port reserved: no candidate, never a loop.
        let mut all = PortPicker::new(rules(40000, 40099, "40000-40099"), 1);
        assert!(all.candidates(&holding(0)).is_empty());
    }

    /// Our own ports are never candidates (their bind would fail for certain), and
    /// skipping them does not use up the tries.
    #[test]
    fn candidates_skip_our_own_ports() {
        let mut p = PortPicker::new(rules(40000, 40099, ""), 11);
        let mut ours = OwnPorts::default();
        // Most of the odd half is ours.
        for port in (40001..40099).step_by(2).take(35) {
            ours.insert(port);
        }
        assert_eq!(ours.len(), 35);
        for _ in 0..200 {
            let c = p.candidates(&ours);
            assert_eq!(c.len(), MAX_TRIES);
            assert!(c.iter().all(|&port| !ours.contains(port)), "{c:?}");
        }
        assert!(ours.remove(40001) && !ours.remove(40001) && !ours.contains(40001));
        assert_eq!(ours.len(), 34);
        assert!(!ours.insert(40003), "already held");
        assert!(ours.insert(u16::MAX) && ours.contains(u16::MAX) && !ours.contains(0));
    }

    #[test]
    fn candidates_are_spread_over_the_range() {
        let mut p = PortPicker::new(rules(32768, 60999, ""), 42);
        let twenty_k = holding(20_000);
        let ports: Vec<u16> = (0..1000).flat_map(|_| p.candidates(&twenty_k)).collect();
        let below_mid = ports.iter().filter(|&&p| p < 46884).count();
        let share = below_mid as f64 / ports.len() as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
    }

    fn tcp(domain: Domain) -> Socket {
        Socket::new(domain, Type::STREAM, Some(Protocol::TCP)).unwrap()
    }

    /// A real bind in the host's range holds the port exactly as port 0 would, and a port
    /// taken by another socket is skipped, not shared.
    #[test]
    fn binds_in_the_range_and_skips_taken_ports() {
        let rules = PortRules::read();
        let mut p = PortPicker::new(rules.clone(), 99);
        let wild: SocketAddr = (Ipv4Addr::UNSPECIFIED, 0).into();
        let mut held = Vec::new();
        let mut ours = OwnPorts::default();
        for _ in 0..50 {
            let s = tcp(Domain::IPV4);
            let chosen = bind_ephemeral(&mut p, &s, wild, &ours).unwrap();
            let port = s.local_addr().unwrap().as_socket().unwrap().port();
            assert!(
                chosen.is_none_or(|c| c == port),
                "{chosen:?} but bound {port}"
            );
            assert!((rules.low..=rules.high).contains(&port), "{port}");
            assert!(ours.insert(port), "{port} handed out twice");
            // Held: a plain bind of the same port on loopback fails.
            let other = tcp(Domain::IPV4);
            assert!(other
                .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())
                .is_err());
            held.push(s);
        }
        let ports: HashSet<u16> = held
            .iter()
            .map(|s| s.local_addr().unwrap().as_socket().unwrap().port())
            .collect();
        assert_eq!(ports.len(), held.len(), "no port handed out twice");
    }

    /// Every candidate taken: the picker falls back to port 0 and still succeeds.
    #[test]
    fn falls_back_to_port_zero_when_candidates_are_taken() {
        let mut blockers = Vec::new();
        let mut base = None;
        // Find 100 consecutive free ports outside the ephemeral range and hold all.
        'find: for start in (20000u16..30000).step_by(100) {
            blockers.clear();
            for port in start..start + 100 {
                let s = tcp(Domain::IPV4);
                if s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into())
                    .is_err()
                {
                    continue 'find;
                }
                blockers.push(s);
            }
            base = Some(start);
            break;
        }
        let Some(start) = base else {
            return; // a busy host; nothing to prove
        };
        let mut p = PortPicker::new(rules(start, start + 99, ""), 5);
        let s = tcp(Domain::IPV4);
        let chosen =
            bind_ephemeral(&mut p, &s, (Ipv4Addr::UNSPECIFIED, 0).into(), &holding(0)).unwrap();
        assert_eq!(
            chosen, None,
            "port 0: the kernel chose, the caller must ask the socket"
        );
        let port = s.local_addr().unwrap().as_socket().unwrap().port();
        assert!(
            !(start..start + 100).contains(&port),
            "{port} is held by a blocker"
        );
    }

    /// An IPv6 wildcard reservation (dual-stack, as C binds it) is refused a port an IPv4
    /// socket holds, and then holds the IPv4 port itself.
    #[test]
    fn ipv6_reservations_respect_the_ipv4_overlap() {
        let v4 = tcp(Domain::IPV4);
        v4.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)).into())
            .unwrap();
        let taken = v4.local_addr().unwrap().as_socket().unwrap().port();
        let Ok(v6) = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)) else {
            return; // no IPv6
        };
        if v6.only_v6().unwrap_or(true) {
            return; // bindv6only=1: no overlap to check
        }
        // Range of four ports whose odd offsets are `taken` and `taken + 2`: about half the
        // candidates are the port the IPv4 socket holds, and each of those must fail.
        let mut p = PortPicker::new(rules(taken - 1, taken + 2, ""), 3);
        assert!(p.candidates(&holding(0)).contains(&taken));
        if bind_ephemeral(&mut p, &v6, (Ipv6Addr::UNSPECIFIED, 0).into(), &holding(0)).is_err() {
            return; // IPv6 disabled
        }
        let got = v6.local_addr().unwrap().as_socket().unwrap().port();
        assert_ne!(got, taken);
        let again = tcp(Domain::IPV4);
        assert!(again
            .bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, got)).into())
            .is_err());
    }
}
