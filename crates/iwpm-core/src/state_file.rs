//! The restart state file: the mapping table with its true reference counts, written by the
//! shell whenever the table changes and read back by the next daemon, so that it can bind
//! every mapped port at once (before the kernel replays) and keep mappings beyond the
//! kernel's MAPINFO replay limit (~227 per client, `docs/protocol.md` §5.4).
//!
//! The codec lives here, sans IO, so it is fuzzed (`fuzz/fuzz_targets/state_file.rs`) and
//! unit-tested without files. Text, one line per mapping, so an operator can read it:
//!
//! ```text
//! iwpmd-state 1
//! host <hostname>
//! boot <kernel boot id>
//! m <owner client> <refcount> <p|n> <local addr> <mapped addr>[ c]
//! end <number of m lines> <FNV-1a 64 of every byte before "end", 16 hex digits>
//! ```
//!
//! `p` = port mapped (a TCP socket holds the mapped port), `n` = NO_PORT_MAP; a trailing
//! `c` marks a connector (created by QUERY_MAPPING). A file whose
//! magic, version, host or boot id differ from ours is *foreign*; a file that does not parse
//! or whose checksum or count is wrong is *corrupt*. Both are reported by the shell and
//! ignored: the kernel's replay still recovers what it can.

use std::fmt::Write as _;
use std::net::SocketAddr;

/// First word of the file.
pub const STATE_MAGIC: &str = "iwpmd-state";
/// Format version written (and the only one read).
pub const STATE_VERSION: u32 = 1;
/// Most mapping lines a file may hold (bounds memory on a hostile file).
pub const STATE_MAX_MAPPINGS: usize = 1 << 20;
/// Longest host or boot id accepted.
const MAX_TOKEN: usize = 255;

/// One mapping as saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedMapping {
    /// Kernel client index owning the mapping.
    pub owner: u8,
    /// Kernel references held (at least 1).
    pub refcount: u32,
    /// Created with NO_PORT_MAP (no socket holds a port).
    pub no_port_map: bool,
    /// Created by QUERY_MAPPING (an active connection's endpoint): restored only if the
    /// kernel's replay lists it (see `machine/restore.rs`).
    pub connector: bool,
    /// Local address.
    pub local: SocketAddr,
    /// Mapped address.
    pub mapped: SocketAddr,
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFile {
    /// Host name of the machine that wrote it.
    pub host: String,
    /// Kernel boot id (`/proc/sys/kernel/random/boot_id`) when it was written: mappings
    /// never outlive a reboot.
    pub boot_id: String,
    /// The mappings.
    pub mappings: Vec<SavedMapping>,
}

/// Why a state file was not used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateFileError {
    /// Not an iwpmd state file at all.
    #[error("not an iwpmd state file (bad magic)")]
    BadMagic,
    /// Another format version.
    #[error("state file version {0} (this daemon reads version {STATE_VERSION})")]
    Version(String),
    /// Written on another host or before the last reboot.
    #[error("state file is foreign: written for {what} {theirs:?}, this is {ours:?}")]
    Foreign {
        /// `host` or `boot`.
        what: &'static str,
        /// Value in the file.
        theirs: String,
        /// Our value.
        ours: String,
    },
    /// A line does not parse.
    #[error("state file line {line}: {why}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// The file ends early (no `end` line): a torn write.
    #[error("state file is truncated (no end line)")]
    Truncated,
    /// The checksum or the count in the `end` line does not match.
    #[error("state file checksum or count mismatch")]
    Checksum,
}

impl StateFileError {
    /// True when the file belongs to another host, boot or format (not damage).
    pub fn is_foreign(&self) -> bool {
        matches!(
            self,
            StateFileError::BadMagic | StateFileError::Version(_) | StateFileError::Foreign { .. }
        )
    }
}

/// FNV-1a, 64 bits: catches torn or edited files (not an authenticity check; the file is
/// root's, in a root-only directory).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Appends one `m` line, byte for byte what `writeln!(out, "m {} {} {kind} {} {}{}", ...)`
/// with the addresses' `Display` writes. Formatted by hand because it runs for every
/// mapping of every write and is most of the writer thread's time: through `fmt`, an IPv4
/// line cost ~350 ns, about 9 ns per byte (`benches/state_file.rs`). IPv6 addresses still
/// go through `Display` (its zero-run compression and scope id are not worth repeating).
fn push_mapping_line(out: &mut String, m: &SavedMapping) {
    let mut num = itoa::Buffer::new();
    out.push_str("m ");
    out.push_str(num.format(m.owner));
    out.push(' ');
    out.push_str(num.format(m.refcount));
    out.push_str(if m.no_port_map { " n " } else { " p " });
    push_socket_addr(out, &m.local);
    out.push(' ');
    push_socket_addr(out, &m.mapped);
    if m.connector {
        out.push_str(" c");
    }
    out.push('\n');
}

fn push_socket_addr(out: &mut String, addr: &SocketAddr) {
    match addr {
        SocketAddr::V4(v4) => {
            let mut num = itoa::Buffer::new();
            let [a, b, c, d] = v4.ip().octets();
            out.push_str(num.format(a));
            for octet in [b, c, d] {
                out.push('.');
                out.push_str(num.format(octet));
            }
            out.push(':');
            out.push_str(num.format(v4.port()));
        }
        SocketAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

fn valid_token(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_TOKEN && s.bytes().all(|b| b.is_ascii_graphic())
}

impl StateFile {
    /// The file's bytes. Host or boot id that are empty or contain spaces are written as
    /// `-` (they could not be read back otherwise).
    pub fn encode(&self) -> Vec<u8> {
        let token = |s: &str| {
            if valid_token(s) {
                s.to_owned()
            } else {
                "-".to_owned()
            }
        };
        let mut out = String::with_capacity(64 + self.mappings.len() * 64);
        let _ = writeln!(out, "{STATE_MAGIC} {STATE_VERSION}");
        let _ = writeln!(out, "host {}", token(&self.host));
        let _ = writeln!(out, "boot {}", token(&self.boot_id));
        for m in &self.mappings {
            push_mapping_line(&mut out, m);
        }
        let sum = fnv1a(out.as_bytes());
        let _ = writeln!(out, "end {} {sum:016x}", self.mappings.len());
        out.into_bytes()
    }

    /// Parses a file. Never panics; every defect is a typed error.
    pub fn decode(bytes: &[u8]) -> Result<StateFile, StateFileError> {
        let text = std::str::from_utf8(bytes).map_err(|_| StateFileError::BadMagic)?;
        let mut lines = Lines {
            text,
            pos: 0,
            line: 0,
        };
        let (_, head) = lines.next().ok_or(StateFileError::BadMagic)?;
        let mut words = head.split(' ');
        if words.next() != Some(STATE_MAGIC) {
            return Err(StateFileError::BadMagic);
        }
        let version = words.next().unwrap_or("");
        if version != STATE_VERSION.to_string() || words.next().is_some() {
            return Err(StateFileError::Version(version.chars().take(16).collect()));
        }
        let host = keyed(lines.next().ok_or(StateFileError::Truncated)?, "host")?;
        let boot_id = keyed(lines.next().ok_or(StateFileError::Truncated)?, "boot")?;
        let mut mappings = Vec::new();
        loop {
            let before = lines.pos;
            let (line, body) = lines.next().ok_or(StateFileError::Truncated)?;
            if let Some(rest) = body.strip_prefix("end ") {
                let mut w = rest.split(' ');
                let count: usize =
                    w.next()
                        .and_then(|c| c.parse().ok())
                        .ok_or(StateFileError::Line {
                            line,
                            why: "bad end count",
                        })?;
                let sum = w
                    .next()
                    .filter(|s| s.len() == 16)
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                    .ok_or(StateFileError::Line {
                        line,
                        why: "bad checksum",
                    })?;
                let covered = bytes.get(..before).ok_or(StateFileError::Checksum)?;
                if w.next().is_some() || count != mappings.len() || sum != fnv1a(covered) {
                    return Err(StateFileError::Checksum);
                }
                if lines.pos != bytes.len() {
                    return Err(StateFileError::Line {
                        line: line + 1,
                        why: "data after the end line",
                    });
                }
                return Ok(StateFile {
                    host,
                    boot_id,
                    mappings,
                });
            }
            if mappings.len() >= STATE_MAX_MAPPINGS {
                return Err(StateFileError::Line {
                    line,
                    why: "too many mappings",
                });
            }
            mappings.push(mapping_line(line, body)?);
        }
    }

    /// Checks that the file was written on this host since the last boot.
    pub fn check_origin(&self, host: &str, boot_id: &str) -> Result<(), StateFileError> {
        for (what, theirs, ours) in [("host", &self.host, host), ("boot", &self.boot_id, boot_id)] {
            if theirs != ours {
                return Err(StateFileError::Foreign {
                    what,
                    theirs: theirs.clone(),
                    ours: ours.to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// Newline-terminated lines with their 1-based numbers; an unterminated tail is `None`.
struct Lines<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Lines<'a> {
    fn next(&mut self) -> Option<(usize, &'a str)> {
        let rest = self.text.get(self.pos..)?;
        let end = rest.find('\n')?;
        self.pos += end + 1;
        self.line += 1;
        Some((self.line, rest.get(..end)?))
    }
}

fn keyed(item: (usize, &str), key: &'static str) -> Result<String, StateFileError> {
    let (line, body) = item;
    let value = body
        .strip_prefix(key)
        .and_then(|r| r.strip_prefix(' '))
        .filter(|v| valid_token(v))
        .ok_or(StateFileError::Line {
            line,
            why: "expected host / boot line",
        })?;
    Ok(value.to_owned())
}

fn mapping_line(line: usize, body: &str) -> Result<SavedMapping, StateFileError> {
    let bad = |why| StateFileError::Line { line, why };
    let mut w = body.split(' ');
    if w.next() != Some("m") {
        return Err(bad("expected a mapping line"));
    }
    let owner = w
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(bad("bad owner"))?;
    let refcount = w
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|r| *r > 0)
        .ok_or(bad("bad refcount"))?;
    let no_port_map = match w.next() {
        Some("p") => false,
        Some("n") => true,
        _ => return Err(bad("bad kind")),
    };
    let mut addr = || -> Option<SocketAddr> { w.next()?.parse().ok() };
    let local = addr().ok_or(bad("bad local address"))?;
    let mapped = addr().ok_or(bad("bad mapped address"))?;
    let connector = match w.next() {
        None => false,
        Some("c") => true,
        Some(_) => return Err(bad("trailing words")),
    };
    if w.next().is_some() {
        return Err(bad("trailing words"));
    }
    if local.is_ipv4() != mapped.is_ipv4() {
        return Err(bad("local and mapped families differ"));
    }
    // (A NO_PORT_MAP mapping whose mapped port differs from its local one is kept: the
    // kernel's replay can hand one back, the table holds it, and refusing it here would make
    // the whole file unreadable at the next start. No socket holds its port either way.)
    if !no_port_map && mapped.port() == 0 {
        return Err(bad("mapped port 0"));
    }
    Ok(SavedMapping {
        owner,
        refcount,
        no_port_map,
        connector,
        local,
        mapped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StateFile {
        StateFile {
            host: "node1".into(),
            boot_id: "3f1c-aa".into(),
            mappings: vec![
                SavedMapping {
                    owner: 2,
                    refcount: 3,
                    no_port_map: false,
                    connector: false,
                    local: "0.0.0.0:18515".parse().unwrap(),
                    mapped: "0.0.0.0:40001".parse().unwrap(),
                },
                SavedMapping {
                    owner: 2,
                    refcount: 1,
                    no_port_map: true,
                    connector: true,
                    local: "[fe80::1%2]:7000".parse().unwrap(),
                    mapped: "[fe80::1%2]:7000".parse().unwrap(),
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let f = sample();
        let bytes = f.encode();
        assert_eq!(StateFile::decode(&bytes), Ok(f.clone()));
        assert!(f.check_origin("node1", "3f1c-aa").is_ok());
        let e = f.check_origin("node2", "3f1c-aa").unwrap_err();
        assert!(e.is_foreign(), "{e}");
        assert!(f.check_origin("node1", "other").unwrap_err().is_foreign());
    }

    #[test]
    fn encoding_is_byte_exact() {
        let text = String::from_utf8(sample().encode()).unwrap();
        let body = "iwpmd-state 1\nhost node1\nboot 3f1c-aa\n\
                    m 2 3 p 0.0.0.0:18515 0.0.0.0:40001\n\
                    m 2 1 n [fe80::1%2]:7000 [fe80::1%2]:7000 c\n";
        assert_eq!(
            text,
            format!("{body}end 2 {:016x}\n", fnv1a(body.as_bytes()))
        );
    }

    proptest::proptest! {
        /// The hand-written line is what `Display` would write, for every address.
        #[test]
        fn mapping_lines_match_display(
            owner: u8,
            refcount: u32,
            no_port_map: bool,
            connector: bool,
            local: SocketAddr,
            mapped: SocketAddr,
        ) {
            let m = SavedMapping { owner, refcount, no_port_map, connector, local, mapped };
            let mut fast = String::new();
            push_mapping_line(&mut fast, &m);
            let kind = if no_port_map { 'n' } else { 'p' };
            let c = if connector { " c" } else { "" };
            proptest::prop_assert_eq!(
                fast,
                format!("m {owner} {refcount} {kind} {local} {mapped}{c}\n")
            );
        }
    }

    #[test]
    fn empty_table_round_trips() {
        let f = StateFile {
            mappings: vec![],
            ..sample()
        };
        assert_eq!(StateFile::decode(&f.encode()), Ok(f));
    }

    #[test]
    fn every_truncation_and_byte_flip_is_an_error() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert!(StateFile::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(StateFile::decode(&b).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn foreign_files_are_told_apart_from_corrupt_ones() {
        assert!(StateFile::decode(b"hello\n").unwrap_err().is_foreign());
        let v2 = String::from_utf8(sample().encode()).unwrap().replacen(
            "iwpmd-state 1",
            "iwpmd-state 2",
            1,
        );
        let e = StateFile::decode(v2.as_bytes()).unwrap_err();
        assert_eq!(e, StateFileError::Version("2".into()));
        let mut torn = sample().encode();
        torn.truncate(torn.len() - 10);
        assert!(!StateFile::decode(&torn).unwrap_err().is_foreign());
    }
}
