//! Parsing the daemon's SIGUSR1 dump (its log lines on stderr) into the mapping table and
//! counters, so the lab can compare what the daemon holds with what the kernel believes.
//!
//! The dump is rdma-core's lines (`print_iwpm_mapped_ports:`, `Mapping #i`, `Local address
//! IPV4 ip:port(0xPPPP)`, `Mapped address ...`) plus the Rust daemon's extra lines
//! (refcount/owner/flags per mapping, exchanges in flight, the `io counters:` line and, at
//! debug level for the `iwpmd::dump` target, the `core counters:` line). Both counter lines
//! are `name=value` pairs read into typed structures ([`IoCounter`] of iwpm-control, the
//! daemon's own list; [`Counter`] of iwpm-core): a name the lab does not know, or a known
//! one missing, is a parse error, so a renamed counter cannot read as 0. (The restart
//! counters, printed only when the daemon keeps ports across restarts, may be absent.)

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

pub use iwpm_control::IoCounter;
use iwpm_core::{Counter, Stats};
use iwpm_report::Presence;
use serde::Serialize;

/// One mapping as the daemon printed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DumpMapping {
    /// The unmapped local address.
    pub local: SocketAddr,
    /// The mapped address.
    pub mapped: SocketAddr,
    /// References (kernel users) of the mapping.
    pub refcount: Option<u32>,
    /// Mapped without a port reservation (siw).
    pub no_port_map: Option<bool>,
    /// The local address is a wildcard.
    pub wildcard: Option<bool>,
}

/// The values of the `io counters:` line, one per [`IoCounter`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoCounters([u64; IO_COUNTERS]);

const IO_COUNTERS: usize = IoCounter::ALL.len();

impl IoCounters {
    /// One counter.
    pub fn get(&self, counter: IoCounter) -> u64 {
        self.0[counter.index()]
    }

    /// Sets one counter.
    pub fn set(&mut self, counter: IoCounter, value: u64) {
        self.0[counter.index()] = value;
    }
}

/// A parsed dump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// Mappings, newest first (the daemon's order).
    pub mappings: Vec<DumpMapping>,
    /// Active (connecting) peer exchanges in flight.
    pub exchanges_connecting: Option<u64>,
    /// Passive (accepting) peer exchanges in flight.
    pub exchanges_accepting: Option<u64>,
    /// The `io counters:` line.
    pub io: IoCounters,
    /// The `core counters:` line, rebuilt into the core's own struct.
    pub core: Stats,
}

impl Dump {
    /// A core counter.
    pub fn core(&self, counter: Counter) -> u64 {
        self.core.get(counter)
    }

    /// An IO counter.
    pub fn io(&self, counter: IoCounter) -> u64 {
        self.io.get(counter)
    }

    /// The mapping for this local address.
    pub fn find(&self, local: SocketAddr) -> Option<&DumpMapping> {
        self.mappings.iter().find(|m| m.local == local)
    }
}

/// Which counters line of the dump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterLine {
    /// `io counters:`.
    Io,
    /// `core counters:`.
    Core,
}

impl CounterLine {
    fn prefix(self) -> &'static str {
        match self {
            CounterLine::Io => "io counters: ",
            CounterLine::Core => "core counters: ",
        }
    }
}

impl fmt::Display for CounterLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.prefix().trim_end().trim_end_matches(':'))
    }
}

/// Why dump lines could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// No `print_iwpm_mapped_ports:` header.
    #[error("no dump header")]
    NoHeader,
    /// An address line that does not parse.
    #[error("bad address line: {0}")]
    BadAddress(String),
    /// A `Mapping #i` without both address lines.
    #[error("mapping #{0} is incomplete")]
    Incomplete(usize),
    /// A counters line is missing (the lab runs the daemon with `iwpmd::dump=debug`).
    #[error("no {0} line")]
    MissingLine(CounterLine),
    /// A word of a counters line that is not `name=number`.
    #[error("{line}: {word:?} is not name=value")]
    BadPair {
        /// The line.
        line: CounterLine,
        /// The word.
        word: String,
    },
    /// A counter name the lab does not know (renamed or new in the daemon).
    #[error("{line}: unknown counter {name:?}")]
    UnknownCounter {
        /// The line.
        line: CounterLine,
        /// The name.
        name: String,
    },
    /// A counter the lab knows that the daemon did not print (renamed or removed).
    #[error("{line}: counter {name} missing")]
    MissingCounter {
        /// The line.
        line: CounterLine,
        /// The name.
        name: &'static str,
    },
}

/// Parses the message texts of a dump (what follows the log target), from the header on.
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Dump, DumpError> {
    let mut dump = Dump::default();
    let mut started = false;
    let (mut io_seen, mut core_seen) = (false, false);
    let mut current: Option<(usize, Option<SocketAddr>, Option<SocketAddr>)> = None;
    let finish = |cur: &mut Option<(usize, Option<SocketAddr>, Option<SocketAddr>)>,
                  dump: &mut Dump|
     -> Result<(), DumpError> {
        if let Some((i, l, m)) = cur.take() {
            match (l, m) {
                (Some(local), Some(mapped)) => dump.mappings.push(DumpMapping {
                    local,
                    mapped,
                    refcount: None,
                    no_port_map: None,
                    wildcard: None,
                }),
                _ => return Err(DumpError::Incomplete(i)),
            }
        }
        Ok(())
    };
    for raw in lines {
        let line = raw.trim();
        if line == "print_iwpm_mapped_ports:" {
            started = true;
            continue;
        }
        if !started {
            continue;
        }
        if let Some(i) = line.strip_prefix("Mapping #") {
            finish(&mut current, &mut dump)?;
            current = Some((i.parse().unwrap_or(0), None, None));
        } else if let Some(rest) = line.strip_prefix("Local address ") {
            let a = parse_address(rest).ok_or_else(|| DumpError::BadAddress(line.into()))?;
            if let Some(c) = current.as_mut() {
                c.1 = Some(a);
            }
        } else if let Some(rest) = line.strip_prefix("Mapped address ") {
            let a = parse_address(rest).ok_or_else(|| DumpError::BadAddress(line.into()))?;
            if let Some(c) = current.as_mut() {
                c.2 = Some(a);
            }
            finish(&mut current, &mut dump)?;
        } else if let Some(rest) = line.strip_prefix("refcount ") {
            if let Some(m) = dump.mappings.last_mut() {
                let words: Vec<&str> = rest.split_whitespace().collect();
                m.refcount = words.first().and_then(|w| w.parse().ok());
                m.wildcard = word_after(&words, "wildcard").map(|w| w == "yes");
                m.no_port_map = word_after(&words, "no_port_map").map(|w| w == "yes");
            }
        } else if let Some(rest) = line.strip_prefix("peer exchanges in flight: ") {
            let nums: Vec<u64> = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            dump.exchanges_connecting = nums.first().copied();
            dump.exchanges_accepting = nums.get(1).copied();
        } else if let Some(rest) = line.strip_prefix(CounterLine::Io.prefix()) {
            dump.io = parse_io(rest)?;
            io_seen = true;
        } else if let Some(rest) = line.strip_prefix(CounterLine::Core.prefix()) {
            dump.core = parse_core(rest)?;
            core_seen = true;
        }
    }
    finish(&mut current, &mut dump)?;
    if !started {
        return Err(DumpError::NoHeader);
    }
    if !io_seen {
        return Err(DumpError::MissingLine(CounterLine::Io));
    }
    if !core_seen {
        return Err(DumpError::MissingLine(CounterLine::Core));
    }
    Ok(dump)
}

fn word_after<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    let i = words.iter().position(|w| *w == key)?;
    words.get(i + 1).copied()
}

/// `IPV4 127.0.0.1:4000(0x0FA0)` or `IPV6 fd00::1:4000(0x0FA0)`.
fn parse_address(rest: &str) -> Option<SocketAddr> {
    let (_, addr) = rest.split_once(' ')?;
    let addr = addr.split('(').next()?;
    let (ip, port) = addr.rsplit_once(':')?;
    let ip: IpAddr = ip.parse().ok()?;
    Some(SocketAddr::new(ip, port.parse().ok()?))
}

/// The `name=value` words of a counters line.
fn pairs(line: CounterLine, rest: &str) -> impl Iterator<Item = Result<(&str, u64), DumpError>> {
    rest.split_whitespace().map(move |word| {
        word.split_once('=')
            .and_then(|(name, value)| Some((name, value.parse().ok()?)))
            .ok_or_else(|| DumpError::BadPair {
                line,
                word: word.to_string(),
            })
    })
}

fn parse_io(rest: &str) -> Result<IoCounters, DumpError> {
    let line = CounterLine::Io;
    let mut io = IoCounters::default();
    let mut seen = HashSet::new();
    for pair in pairs(line, rest) {
        let (name, value) = pair?;
        let counter = IoCounter::from_name(name).ok_or_else(|| DumpError::UnknownCounter {
            line,
            name: name.to_string(),
        })?;
        io.set(counter, value);
        seen.insert(counter);
    }
    let missing = IoCounter::ALL
        .iter()
        .copied()
        .find(|c| c.presence() == Presence::Always && !seen.contains(c));
    match missing {
        Some(c) => Err(DumpError::MissingCounter {
            line,
            name: c.name(),
        }),
        None => Ok(io),
    }
}

fn parse_core(rest: &str) -> Result<Stats, DumpError> {
    let line = CounterLine::Core;
    let mut stats = Stats::default();
    let mut seen = HashSet::new();
    for pair in pairs(line, rest) {
        let (name, value) = pair?;
        let counter: Counter = name.parse().map_err(|_| DumpError::UnknownCounter {
            line,
            name: name.to_string(),
        })?;
        stats.set(counter, value);
        seen.insert(counter);
    }
    match Counter::all().find(|c| !seen.contains(c)) {
        Some(c) => Err(DumpError::MissingCounter {
            line,
            name: c.name(),
        }),
        None => Ok(stats),
    }
}

#[cfg(test)]
mod tests {
    use iwpm_core::KernelOp;
    use iwpm_proto::peer::PeerMsgType;

    use super::*;

    const IO: &str = "io counters: kernel_rx=5 kernel_tx=6 kernel_tx_errors=0 kernel_tx_queued=0 \
                      kernel_truncated=0 kernel_foreign=0 kernel_overruns=0 peer_rx=0 peer_tx=7 \
                      peer_tx_dropped=0 reserve_no_fd=0 reserve_no_port=0 dumps=1 \
                      dumps_coalesced=0 ports_held=1";

    /// The core line as the daemon prints it, from the core's own export.
    fn core_line(stats: &Stats) -> String {
        let pairs: Vec<String> = stats.iter().map(|(n, v)| format!("{n}={v}")).collect();
        format!("core counters: {}", pairs.join(" "))
    }

    fn with_counters<'a>(io: &'a str, core: &'a str) -> Vec<&'a str> {
        vec!["print_iwpm_mapped_ports:", io, core]
    }

    #[test]
    fn parses_a_dump() {
        let mut stats = Stats {
            retransmissions: 9,
            ..Stats::default()
        };
        stats.netlink_in[2] = 3;
        stats.peer_out[1] = 4;
        let core = core_line(&stats);
        let lines = [
            "Received SIGUSR1 signal",
            "print_iwpm_mapped_ports:",
            "Mapping #0",
            "Local address IPV4 127.0.0.1:20001(0x4E21)",
            "Mapped address IPV4 127.0.0.1:41234(0xA112)",
            "    refcount 2 owner client 2 wildcard no no_port_map no age 0s",
            "Mapping #1",
            "Local address IPV6 fd00::2:4000(0x0FA0)",
            "Mapped address IPV6 fd00::2:4000(0x0FA0)",
            "    refcount 1 owner client 2 wildcard no no_port_map yes age 3s",
            "kernel client 2 registered: device siw0 interface lo",
            "peer exchanges in flight: 3 connecting, 4 accepting; iwpm ABI 4",
            IO,
            &core,
        ];
        let d = parse(lines).unwrap();
        assert_eq!(d.mappings.len(), 2);
        assert_eq!(d.mappings[0].local, "127.0.0.1:20001".parse().unwrap());
        assert_eq!(d.mappings[0].mapped, "127.0.0.1:41234".parse().unwrap());
        assert_eq!(d.mappings[0].refcount, Some(2));
        assert_eq!(d.mappings[1].local, "[fd00::2]:4000".parse().unwrap());
        assert_eq!(d.mappings[1].no_port_map, Some(true));
        assert_eq!(d.exchanges_connecting, Some(3));
        assert_eq!(d.exchanges_accepting, Some(4));
        assert_eq!(d.io(IoCounter::PortsHeld), 1);
        assert_eq!(d.io(IoCounter::PeerTx), 7);
        assert_eq!(d.core(Counter::Retransmissions), 9);
        assert_eq!(d.core(Counter::NetlinkIn(KernelOp::QueryMapping)), 3);
        assert_eq!(d.core(Counter::PeerOut(PeerMsgType::Accept)), 4);
        assert_eq!(d.core, stats);
    }

    #[test]
    fn needs_the_header_and_both_counter_lines() {
        assert_eq!(parse(["Mapping #0"]), Err(DumpError::NoHeader));
        let core = core_line(&Stats::default());
        assert_eq!(
            parse(["print_iwpm_mapped_ports:", IO]),
            Err(DumpError::MissingLine(CounterLine::Core))
        );
        assert_eq!(
            parse(["print_iwpm_mapped_ports:", &core]),
            Err(DumpError::MissingLine(CounterLine::Io))
        );
    }

    #[test]
    fn a_renamed_counter_is_an_error_not_zero() {
        let core = core_line(&Stats::default());
        let renamed = core.replace("retransmissions=", "retransmits=");
        assert_eq!(
            parse(with_counters(IO, &renamed)),
            Err(DumpError::UnknownCounter {
                line: CounterLine::Core,
                name: "retransmits".into()
            })
        );
        let dropped = core.replace(" peer_duplicates=0", "");
        assert_eq!(
            parse(with_counters(IO, &dropped)),
            Err(DumpError::MissingCounter {
                line: CounterLine::Core,
                name: "peer_duplicates"
            })
        );
        let io = IO.replace("ports_held=", "ports=");
        assert!(matches!(
            parse(with_counters(&io, &core)),
            Err(DumpError::UnknownCounter { line: CounterLine::Io, name }) if name == "ports"
        ));
        let io = IO.replace(" dumps=1", "");
        assert_eq!(
            parse(with_counters(&io, &core)),
            Err(DumpError::MissingCounter {
                line: CounterLine::Io,
                name: "dumps"
            })
        );
        let io = IO.replace("dumps=1", "dumps=one");
        assert!(matches!(
            parse(with_counters(&io, &core)),
            Err(DumpError::BadPair { line: CounterLine::Io, word }) if word == "dumps=one"
        ));
    }

    #[test]
    fn every_io_counter_the_daemon_names_reads_back() {
        // The daemon prints the names of iwpm-control's list; each one lands in its slot,
        // the restart counters included (printed only when the daemon keeps ports).
        let pairs: Vec<String> = IoCounter::ALL
            .iter()
            .map(|c| format!("{c}={}", c.index() + 10))
            .collect();
        let io = format!("io counters: {}", pairs.join(" "));
        let d = parse(with_counters(&io, &core_line(&Stats::default()))).unwrap();
        for &c in IoCounter::ALL {
            assert_eq!(d.io(c), c.index() as u64 + 10, "{c}");
        }
        let d = parse(with_counters(IO, &core_line(&Stats::default()))).unwrap();
        assert_eq!(
            d.io(IoCounter::StateWrites),
            0,
            "absent restart counters read as 0"
        );
    }
}
