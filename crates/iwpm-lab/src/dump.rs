//! Parsing the daemon's SIGUSR1 dump (its log lines on stderr) into the mapping table and
//! counters, so the lab can compare what the daemon holds with what the kernel believes.
//!
//! The dump is rdma-core's lines (`print_iwpm_mapped_ports:`, `Mapping #i`, `Local address
//! IPV4 ip:port(0xPPPP)`, `Mapped address ...`) plus the Rust daemon's extra lines
//! (refcount/owner/flags per mapping, exchanges in flight, IO counters and, at debug level
//! for the `iwpmd::dump` target, the core counters).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

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

/// A parsed dump.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Dump {
    /// Mappings, newest first (the daemon's order).
    pub mappings: Vec<DumpMapping>,
    /// Active (connecting) peer exchanges in flight.
    pub exchanges_connecting: Option<u64>,
    /// Passive (accepting) peer exchanges in flight.
    pub exchanges_accepting: Option<u64>,
    /// The `io counters:` line (`kernel_rx`, `peer_tx`, `ports_held`, ...).
    pub io: BTreeMap<String, u64>,
    /// The core counters (`retransmissions`, `peer_duplicates`, ...); array counters are
    /// summed under their name and also kept per index as `name[i]`.
    pub core: BTreeMap<String, u64>,
}

impl Dump {
    /// A core counter, 0 when absent.
    pub fn core(&self, name: &str) -> u64 {
        self.core.get(name).copied().unwrap_or(0)
    }

    /// An IO counter, 0 when absent.
    pub fn io(&self, name: &str) -> u64 {
        self.io.get(name).copied().unwrap_or(0)
    }

    /// The mapping for this local address.
    pub fn find(&self, local: SocketAddr) -> Option<&DumpMapping> {
        self.mappings.iter().find(|m| m.local == local)
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
}

/// Parses the message texts of a dump (what follows the log target), from the header on.
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Dump, DumpError> {
    let mut dump = Dump::default();
    let mut started = false;
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
        } else if let Some(rest) = line.strip_prefix("io counters: ") {
            for kv in rest.split_whitespace() {
                if let Some((k, v)) = kv.split_once('=') {
                    if let Ok(v) = v.parse() {
                        dump.io.insert(k.to_string(), v);
                    }
                }
            }
        } else if let Some(rest) = line.strip_prefix("core counters: ") {
            parse_debug_counters(rest, &mut dump.core);
        }
    }
    finish(&mut current, &mut dump)?;
    if !started {
        return Err(DumpError::NoHeader);
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

/// Reads `name: 12` and `name: [1, 2, 3]` pairs out of a `{:?}` rendering of a counters
/// struct. Arrays are stored summed under `name` and per element as `name[i]`.
fn parse_debug_counters(text: &str, out: &mut BTreeMap<String, u64>) {
    let body = text
        .split_once('{')
        .map_or(text, |(_, b)| b)
        .trim_end_matches('}');
    let mut rest = body;
    while let Some((name, after)) = rest.split_once(':') {
        let name = name.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        if let Some(arr) = after.strip_prefix('[') {
            let Some((inside, tail)) = arr.split_once(']') else {
                break;
            };
            let values: Vec<u64> = inside
                .split(',')
                .filter_map(|v| v.trim().parse().ok())
                .collect();
            for (i, v) in values.iter().enumerate() {
                out.insert(format!("{name}[{i}]"), *v);
            }
            out.insert(name, values.iter().sum());
            rest = tail;
        } else {
            let end = after.find(',').unwrap_or(after.len());
            if let Ok(v) = after[..end].trim().parse() {
                out.insert(name, v);
            }
            rest = &after[end..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_dump() {
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
            "    kernel client 2 registered: device siw0 interface lo",
            "    peer exchanges in flight: 3 connecting, 4 accepting; iwpm ABI 4",
            "io counters: kernel_rx=5 kernel_tx=6 peer_tx=7 ports_held=1",
            "core counters: Stats { netlink_in: [1, 2, 3], retransmissions: 9, \
             peer_duplicates: 0 }",
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
        assert_eq!(d.io("ports_held"), 1);
        assert_eq!(d.core("retransmissions"), 9);
        assert_eq!(d.core("netlink_in"), 6);
        assert_eq!(d.core("netlink_in[2]"), 3);
    }

    #[test]
    fn needs_the_header() {
        assert_eq!(parse(["Mapping #0"]), Err(DumpError::NoHeader));
    }
}
