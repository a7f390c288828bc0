//! `/etc/iwpmd.conf`: parsed exactly as the C daemon parses it, with line-numbered
//! diagnostics instead of syslog lines.
//!
//! # Grammar (the C daemon's, reproduced byte for byte)
//!
//! * The file is read in chunks of at most 127 bytes (`fgets` with a 128-byte buffer): a
//!   physical line longer than that is cut into several "lines", each parsed on its own
//!   ([`ConfigDiagnostic::LongLineSplit`] says so). Parsing stops at a NUL byte in a chunk.
//! * A chunk whose first byte is `#` or `\n` is skipped. `#` anywhere else is not a comment.
//! * Otherwise the chunk must read: a key of 1 to 64 bytes other than `=` and space, optional
//!   whitespace, one or more `=`, then a C `%d` integer (optional whitespace, optional sign,
//!   decimal digits; the rest of the chunk is ignored). So a line starting with a space is
//!   unparsable, while a tab or CR is *part of the key* (and makes it unknown).
//! * Known key with a value > 0: stored (a later line overrides an earlier one). Known key
//!   with a value <= 0: ignored ([`ConfigDiagnostic::NonPositiveValue`], a warning, where C
//!   is silent: a line that has no effect is worth a word). Unknown key: warning. Nothing is
//!   ever fatal.
//!
//! Differences from C, on purpose: a value beyond the C `int` range is rejected with
//! [`ConfigDiagnostic::ValueOutOfRange`] (C is undefined there; glibc wraps it modulo 2^32);
//! text after the integer still counts as in C but earns
//! [`ConfigDiagnostic::TrailingTextIgnored`] (`nl_sock_rbuf_size=400M` means 400 bytes).
//! C scans the key with width 64 into a 64-byte buffer, so a 64-byte key overflows it by
//! one byte; here it is simply an unknown key.
//!
//! # Keys
//!
//! | key | origin | value |
//! |---|---|---|
//! | `nl_sock_rbuf_size` | C daemon | netlink receive buffer in bytes, 1..=2147483647 |
//! | `peer_port` | extension | UDP port of the peer protocol, 1..=65535 (default 3935) |
//! | `peer_bind_v4` | extension | IPv4 address the peer sockets bind to (default `0.0.0.0`) |
//! | `peer_bind_v6` | extension | IPv6 address the peer sockets bind to (default `::`) |
//! | `peer_allow` | extension | networks whose peer datagrams are processed, CIDR list separated by commas or spaces (default: all); repeated lines add to the list |
//! | `max_mappings` | extension | most mappings held at once (default 100000) |
//! | `max_exchanges` | extension | most local (connecting) peer exchanges in flight (default 131072) |
//! | `max_peer_exchanges` | extension | most remote (accepting) peer exchanges held (default 65536; the oldest confirmed is evicted first) |
//! | `peer_source_quota` | extension | most remote exchanges waiting for their ACK per source address (default 256; only port-mapped IPv6 peers hold one; the oldest gives way) |
//! | `remote_info_budget` | extension | most REMOTE_INFO entries sent to the kernel before a peer's ACK verified (default 128; half at most per source) |
//! | `remote_info_source_burst` | extension | REMOTE_INFOs one source's verified ACKs may release (or return the budget token of) at once (default 2048) |
//! | `remote_info_source_rate` | extension | the same per second after the burst (default 128) |
//! | `state_file` | extension | absolute path of the restart state file, or `none` (default `/run/iwpmd/state`) |
//! | `peer_key_file` | extension | absolute path of the fleet key file ([`crate::keyfile`]; default: none, datagrams are neither signed nor checked) |
//! | `peer_auth_required` | extension | networks whose peer datagrams must be signed with a fleet key, CIDR list like `peer_allow` (default: none); repeated lines add to the list |
//! | `peer_auth_window` | extension | how far a signed datagram's time stamp may be from our clock, in seconds, 1..=3600 (default 60) |
//!
//! Extension values are strict: the whole value (surrounding whitespace aside) must parse,
//! else [`ConfigDiagnostic::InvalidValue`] (the line is skipped with a warning), except
//! a `peer_allow` or `peer_auth_required` entry that is not a network
//! ([`ConfigDiagnostic::BadPeerAllowEntry`]) and a `peer_key_file` that is not an absolute
//! path ([`ConfigDiagnostic::BadPeerKeyFile`]), each an [`Severity::Error`]: skipping the
//! line would let in peers the operator meant to keep out, or leave unsigned the datagrams
//! the operator meant to sign.
//! The C daemon only warns about extension keys
//! ("Couldn't find param" or "Couldn't parse a line"), so one file serves both daemons.
//! C peers always talk to port 3935: change `peer_port` only for tests and labs.
//!
//! A new key is one line of the `config_keys!` list (variant, name, origin), a field of
//! [`Config`] or [`ExtraConfig`] and its value rule in the parser (`config/extension.rs`
//! for an extension key; the parser's match over [`ConfigKey`] has no `_`), then its row
//! in the table above and in `iwpmd.conf(5)`
//! (`packaging/iwpmd.conf.5`; a test checks both against [`ConfigKey::ALL`]) and its use
//! in the daemon (`Settings::apply_file` destructures [`Config`] without `..`).
//!
//! # Use
//!
//! ```
//! use iwpm_proto::config::{parse_config, ConfigDiagnostic, Severity};
//!
//! let (config, diagnostics) = parse_config("nl_sock_rbuf_size=419430400\nfoo=1\n");
//! assert_eq!(config.nl_sock_rbuf_size, Some(419_430_400));
//! assert_eq!(config.peer_port(), 3935);
//! assert!(matches!(&diagnostics[..], [ConfigDiagnostic::UnknownKey { line: 2, .. }]));
//! assert_eq!(diagnostics[0].severity(), Severity::Warning);
//! assert_eq!(diagnostics[0].to_string(), "line 2: unknown key \"foo\"");
//! ```

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::cidr::{Cidr, CidrError};
use crate::consts::IWPM_PEER_PORT;

mod extension;

/// Where the C daemon (and we, by default) read the configuration.
pub const IWPM_CONFIG_FILE: &str = "/etc/iwpmd.conf";
/// Longest chunk the C parser reads as one line (its buffer, minus the NUL).
pub const CONFIG_CHUNK_LEN: usize = 127;
/// Longest key the C parser scans (`%64[^= ]`).
pub const CONFIG_KEY_MAX_LEN: usize = 64;
/// Default of `peer_auth_window`, in seconds.
pub const PEER_AUTH_WINDOW_DEFAULT: u32 = 60;
/// Largest `peer_auth_window`, in seconds (an hour).
pub const PEER_AUTH_WINDOW_MAX: u32 = 3600;

/// The parsed configuration; `None` means "not set", i.e. the default applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `nl_sock_rbuf_size`: netlink socket receive buffer (SO_RCVBUFFORCE, then SO_RCVBUF).
    /// Unset: leave the kernel default (the C code's default; the packaged file sets
    /// 419430400).
    pub nl_sock_rbuf_size: Option<u32>,
    /// Keys of this implementation that the C daemon does not know.
    pub extra: ExtraConfig,
}

/// Extension keys (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraConfig {
    /// `peer_port`: UDP port of the peer listeners.
    pub peer_port: Option<u16>,
    /// `peer_bind_v4`: address of the IPv4 peer sockets.
    pub peer_bind_v4: Option<Ipv4Addr>,
    /// `peer_bind_v6`: address of the IPv6 peer sockets.
    pub peer_bind_v6: Option<Ipv6Addr>,
    /// `peer_allow`: networks whose peer datagrams are processed (every line adds to it).
    pub peer_allow: Option<Vec<Cidr>>,
    /// `max_mappings`.
    pub max_mappings: Option<u32>,
    /// `max_exchanges` (local exchanges).
    pub max_exchanges: Option<u32>,
    /// `max_peer_exchanges` (remote exchanges).
    pub max_peer_exchanges: Option<u32>,
    /// `peer_source_quota`.
    pub peer_source_quota: Option<u32>,
    /// `remote_info_budget`.
    pub remote_info_budget: Option<u32>,
    /// `remote_info_source_burst`.
    pub remote_info_source_burst: Option<u32>,
    /// `remote_info_source_rate`.
    pub remote_info_source_rate: Option<u32>,
    /// `state_file`: `Some(None)` for `none`, `Some(Some(path))` for a path.
    pub state_file: Option<Option<std::path::PathBuf>>,
    /// `peer_key_file`: the fleet key file.
    pub peer_key_file: Option<std::path::PathBuf>,
    /// `peer_auth_required`: networks whose datagrams must be signed (every line adds to it).
    pub peer_auth_required: Option<Vec<Cidr>>,
    /// `peer_auth_window`: seconds, 1..=[`PEER_AUTH_WINDOW_MAX`].
    pub peer_auth_window: Option<u32>,
}

impl Config {
    /// Peer listener port, default [`IWPM_PEER_PORT`].
    pub fn peer_port(&self) -> u16 {
        self.extra.peer_port.unwrap_or(IWPM_PEER_PORT)
    }

    /// IPv4 peer bind address, default `0.0.0.0`.
    pub fn peer_bind_v4(&self) -> Ipv4Addr {
        self.extra.peer_bind_v4.unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// IPv6 peer bind address, default `::`.
    pub fn peer_bind_v6(&self) -> Ipv6Addr {
        self.extra.peer_bind_v6.unwrap_or(Ipv6Addr::UNSPECIFIED)
    }

    /// How far a signed peer datagram's time stamp may be from our clock, in seconds,
    /// default [`PEER_AUTH_WINDOW_DEFAULT`].
    pub fn peer_auth_window(&self) -> u32 {
        self.extra
            .peer_auth_window
            .unwrap_or(PEER_AUTH_WINDOW_DEFAULT)
    }
}

/// Whether a key is also understood by the C daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyOrigin {
    /// Known to rdma-core's `iwpmd`; parsed with its `%d` rules.
    CDaemon,
    /// Ours only; parsed strictly.
    Extension,
}

/// Defines [`ConfigKey`], its table, names and origins from one list, in table order.
macro_rules! config_keys {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal, $origin:ident;)*) => {
        /// Every key this parser knows.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ConfigKey {
            $($(#[doc = $doc])* $variant,)*
        }

        /// Number of keys.
        const NUM_KEYS: usize = [$($name),*].len();

        impl ConfigKey {
            /// The table of known keys.
            pub const ALL: [ConfigKey; NUM_KEYS] = [$(ConfigKey::$variant),*];

            /// The key as written in the file.
            pub fn name(self) -> &'static str {
                match self {
                    $(ConfigKey::$variant => $name,)*
                }
            }

            /// Who defines the key.
            pub fn origin(self) -> KeyOrigin {
                match self {
                    $(ConfigKey::$variant => KeyOrigin::$origin,)*
                }
            }
        }
    };
}

config_keys! {
    /// `nl_sock_rbuf_size` (C daemon).
    NlSockRbufSize => "nl_sock_rbuf_size", CDaemon;
    /// `peer_port` (extension).
    PeerPort => "peer_port", Extension;
    /// `peer_bind_v4` (extension).
    PeerBindV4 => "peer_bind_v4", Extension;
    /// `peer_bind_v6` (extension).
    PeerBindV6 => "peer_bind_v6", Extension;
    /// `peer_allow` (extension).
    PeerAllow => "peer_allow", Extension;
    /// `max_mappings` (extension).
    MaxMappings => "max_mappings", Extension;
    /// `max_exchanges` (extension).
    MaxExchanges => "max_exchanges", Extension;
    /// `max_peer_exchanges` (extension).
    MaxPeerExchanges => "max_peer_exchanges", Extension;
    /// `peer_source_quota` (extension).
    PeerSourceQuota => "peer_source_quota", Extension;
    /// `remote_info_budget` (extension).
    RemoteInfoBudget => "remote_info_budget", Extension;
    /// `remote_info_source_burst` (extension).
    RemoteInfoSourceBurst => "remote_info_source_burst", Extension;
    /// `remote_info_source_rate` (extension).
    RemoteInfoSourceRate => "remote_info_source_rate", Extension;
    /// `state_file` (extension).
    StateFile => "state_file", Extension;
    /// `peer_key_file` (extension).
    PeerKeyFile => "peer_key_file", Extension;
    /// `peer_auth_required` (extension).
    PeerAuthRequired => "peer_auth_required", Extension;
    /// `peer_auth_window` (extension).
    PeerAuthWindow => "peer_auth_window", Extension;
}

impl ConfigKey {
    /// Exact, case-sensitive look-up (C uses `strcmp`).
    pub fn from_name(name: &[u8]) -> Option<ConfigKey> {
        ConfigKey::ALL
            .into_iter()
            .find(|k| k.name().as_bytes() == name)
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How much a diagnostic matters, for the logging layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// Expected and harmless (C is silent).
    Debug,
    /// Worth knowing, nothing lost.
    Info,
    /// A line (or part of one) was not applied, or not as it reads.
    Warning,
    /// The file must not be used as it is: the daemon refuses to start (a rule that
    /// would fail open without the line, such as a bad `peer_allow` entry).
    Error,
}

/// Why a line could not be parsed at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnparsableReason {
    /// No key at the start: the line starts with a space or `=` (or a NUL byte).
    NoName,
    /// The key runs past 64 bytes.
    NameTooLong,
    /// No `=` after the key (and optional whitespace).
    NoEquals,
    /// No decimal integer after the `=` (C `%d` failed).
    NoInteger,
    /// Nothing after the `=` (extension keys).
    NoValue,
}

impl fmt::Display for UnparsableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UnparsableReason::NoName => "no key at the start of the line",
            UnparsableReason::NameTooLong => "key longer than 64 bytes",
            UnparsableReason::NoEquals => "no '=' after the key",
            UnparsableReason::NoInteger => "no decimal integer after '='",
            UnparsableReason::NoValue => "no value after '='",
        })
    }
}

/// One remark about one line. `line` is the 1-based physical line number (a long line's
/// continuation chunks carry the number of the line they come from).
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ConfigDiagnostic {
    /// The line was skipped (C: "Couldn't parse a line").
    #[error("line {line}: cannot parse {text:?}: {reason}")]
    UnparsableLine {
        /// Line number.
        line: usize,
        /// What is missing.
        reason: UnparsableReason,
        /// The chunk, without its newline (lossy UTF-8).
        text: String,
    },
    /// The key is not in [`ConfigKey::ALL`]; skipped (C: "Couldn't find param", or, when
    /// the value is no integer, an unparsable line: C reads the value first).
    #[error("line {line}: unknown key {key:?}")]
    UnknownKey {
        /// Line number.
        line: usize,
        /// The key as scanned (lossy UTF-8; may hold tabs or CRs).
        key: String,
        /// The value starts with a decimal integer (C reads it before the key, so it
        /// skips the line as unparsable when not).
        value_is_integer: bool,
    },
    /// A C key with a value <= 0: ignored, as C does (silently there; a warning here).
    #[error("line {line}: {key} = {value} ignored (not positive)")]
    NonPositiveValue {
        /// Line number.
        line: usize,
        /// The key.
        key: ConfigKey,
        /// The value.
        value: i32,
    },
    /// A number outside what the key accepts (for a C key: outside the C `int` range);
    /// ignored.
    #[error("line {line}: {key} = {value} out of range ({min}..={max}), ignored")]
    ValueOutOfRange {
        /// Line number.
        line: usize,
        /// The key.
        key: ConfigKey,
        /// The number as written.
        value: String,
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// An extension key's value does not parse; ignored.
    #[error("line {line}: {key} = {value:?} is not {expected}, ignored")]
    InvalidValue {
        /// Line number.
        line: usize,
        /// The key.
        key: ConfigKey,
        /// The value as written, trimmed.
        value: String,
        /// What the key takes.
        expected: &'static str,
    },
    /// An entry of a `peer_allow` list is not an IP network (`entry` is `""` for a line
    /// with no entry at all). Unlike other bad lines this one is an [`Severity::Error`]:
    /// without the line the allow-list would be wider than the operator wrote (with no
    /// other `peer_allow` line, open to every peer), so the daemon refuses to start.
    #[error(
        "line {line}: peer_allow entry {entry:?} is not an IP network \
         (e.g. 10.0.0.0/8, fd00::/64): {reason}"
    )]
    BadPeerAllowEntry {
        /// Line number.
        line: usize,
        /// The entry as written.
        entry: String,
        /// Why it does not parse.
        reason: CidrError,
    },
    /// An entry of a `peer_auth_required` list is not an IP network (`entry` is `""` for a
    /// line with no entry at all). An [`Severity::Error`] like [`Self::BadPeerAllowEntry`]:
    /// without the line, datagrams the operator meant to require signed would be taken
    /// unsigned.
    #[error(
        "line {line}: peer_auth_required entry {entry:?} is not an IP network \
         (e.g. 10.0.0.0/8, fd00::/64): {reason}"
    )]
    BadPeerAuthEntry {
        /// Line number.
        line: usize,
        /// The entry as written.
        entry: String,
        /// Why it does not parse.
        reason: CidrError,
    },
    /// `peer_key_file` is not an absolute path. An [`Severity::Error`]: without the line the
    /// daemon would run without its fleet keys, neither signing nor checking datagrams.
    #[error("line {line}: peer_key_file = {value:?} is not an absolute path")]
    BadPeerKeyFile {
        /// Line number.
        line: usize,
        /// The value as written, trimmed.
        value: String,
    },
    /// A C key's value was followed by other text, which C (and we) ignore; the value
    /// *was* applied.
    #[error("line {line}: {key} = {value}: text {trailing:?} after the number ignored")]
    TrailingTextIgnored {
        /// Line number.
        line: usize,
        /// The key.
        key: ConfigKey,
        /// The value applied.
        value: i64,
        /// The ignored text, trimmed.
        trailing: String,
    },
    /// The line is longer than 127 bytes, so (as in C) its tail was parsed as further lines.
    #[error("line {line}: {len} bytes long; parsed as {CONFIG_CHUNK_LEN}-byte pieces")]
    LongLineSplit {
        /// Line number.
        line: usize,
        /// Length without the newline.
        len: usize,
    },
    /// A key set again; the later value wins (as in C).
    #[error("line {line}: {key} overrides the value set on line {previous_line}")]
    Overridden {
        /// Line number.
        line: usize,
        /// The key.
        key: ConfigKey,
        /// Line of the value replaced.
        previous_line: usize,
    },
}

impl ConfigDiagnostic {
    /// The 1-based line the diagnostic is about.
    pub fn line(&self) -> usize {
        match self {
            ConfigDiagnostic::UnparsableLine { line, .. }
            | ConfigDiagnostic::UnknownKey { line, .. }
            | ConfigDiagnostic::NonPositiveValue { line, .. }
            | ConfigDiagnostic::ValueOutOfRange { line, .. }
            | ConfigDiagnostic::InvalidValue { line, .. }
            | ConfigDiagnostic::BadPeerAllowEntry { line, .. }
            | ConfigDiagnostic::BadPeerAuthEntry { line, .. }
            | ConfigDiagnostic::BadPeerKeyFile { line, .. }
            | ConfigDiagnostic::TrailingTextIgnored { line, .. }
            | ConfigDiagnostic::LongLineSplit { line, .. }
            | ConfigDiagnostic::Overridden { line, .. } => *line,
        }
    }

    /// How loudly to log it.
    pub fn severity(&self) -> Severity {
        match self {
            ConfigDiagnostic::Overridden { .. } => Severity::Info,
            ConfigDiagnostic::BadPeerAllowEntry { .. }
            | ConfigDiagnostic::BadPeerAuthEntry { .. }
            | ConfigDiagnostic::BadPeerKeyFile { .. } => Severity::Error,
            _ => Severity::Warning,
        }
    }
}

/// Parses the file's text. Never fails: bad lines are skipped and reported.
pub fn parse_config(text: &str) -> (Config, Vec<ConfigDiagnostic>) {
    parse_config_bytes(text.as_bytes())
}

/// [`parse_config`] on raw bytes (the C daemon does not care about UTF-8 either).
pub fn parse_config_bytes(bytes: &[u8]) -> (Config, Vec<ConfigDiagnostic>) {
    let mut p = Parser::default();
    for (idx, physical) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        let line = idx + 1;
        let content_len = physical.len() - usize::from(physical.ends_with(b"\n"));
        if content_len > CONFIG_CHUNK_LEN {
            p.diags.push(ConfigDiagnostic::LongLineSplit {
                line,
                len: content_len,
            });
        }
        for chunk in physical.chunks(CONFIG_CHUNK_LEN) {
            p.chunk(line, chunk);
        }
    }
    (p.config, p.diags)
}

#[derive(Default)]
struct Parser {
    config: Config,
    diags: Vec<ConfigDiagnostic>,
    /// Line that last set each key, for [`ConfigDiagnostic::Overridden`].
    set_on: Vec<(ConfigKey, usize)>,
}

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn trim_c_space(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if !is_c_space(*first) {
            break;
        }
        b = rest;
    }
    while let [rest @ .., last] = b {
        if !is_c_space(*last) {
            break;
        }
        b = rest;
    }
    b
}

/// Result of C `%d` on a byte string.
struct ScannedInt<'a> {
    /// The sign and digits as written.
    text: &'a [u8],
    /// The value, `None` when outside `i64` (any such value is out of every range).
    value: Option<i64>,
    /// What follows the digits.
    rest: &'a [u8],
}

/// C `%d`: skip whitespace, optional sign, one or more decimal digits.
fn scan_c_int(s: &[u8]) -> Option<ScannedInt<'_>> {
    let start = s.iter().position(|&b| !is_c_space(b))?;
    let s = &s[start..];
    let sign_len = usize::from(matches!(s.first(), Some(b'+' | b'-')));
    let digits = s[sign_len..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return None;
    }
    let end = sign_len + digits;
    let negative = s[0] == b'-';
    let mut value: Option<i64> = Some(0);
    for &d in &s[sign_len..end] {
        let digit = i64::from(d - b'0');
        value = value.and_then(|v| v.checked_mul(10)).and_then(|v| {
            if negative {
                v.checked_sub(digit)
            } else {
                v.checked_add(digit)
            }
        });
    }
    Some(ScannedInt {
        text: &s[..end],
        value,
        rest: &s[end..],
    })
}

impl Parser {
    fn chunk(&mut self, line: usize, chunk: &[u8]) {
        if matches!(chunk.first(), Some(b'#' | b'\n')) {
            return;
        }
        // Like sscanf, look no further than a NUL byte.
        let view = chunk.split(|&b| b == 0).next().unwrap_or_default();
        let unparsable = |reason| ConfigDiagnostic::UnparsableLine {
            line,
            reason,
            text: lossy(chunk.strip_suffix(b"\n").unwrap_or(chunk)),
        };
        let name_len = view
            .iter()
            .take(CONFIG_KEY_MAX_LEN)
            .take_while(|&&b| b != b'=' && b != b' ')
            .count();
        if name_len == 0 {
            self.diags.push(unparsable(UnparsableReason::NoName));
            return;
        }
        let name = &view[..name_len];
        let after_name = &view[name_len..];
        let after_space = &after_name[after_name.iter().take_while(|&&b| is_c_space(b)).count()..];
        let equals = after_space.iter().take_while(|&&b| b == b'=').count();
        if equals == 0 {
            let too_long = name_len == CONFIG_KEY_MAX_LEN
                && after_name.first().is_some_and(|&b| b != b'=' && b != b' ');
            self.diags.push(unparsable(if too_long {
                UnparsableReason::NameTooLong
            } else {
                UnparsableReason::NoEquals
            }));
            return;
        }
        let value = &after_space[equals..];
        match ConfigKey::from_name(name) {
            Some(key) if key.origin() == KeyOrigin::Extension => {
                let trimmed = trim_c_space(value);
                if trimmed.is_empty() {
                    self.diags.push(unparsable(UnparsableReason::NoValue));
                } else {
                    self.extension(line, key, trimmed);
                }
            }
            // C parses the integer before it looks the key up, so it skips `foo=bar` for
            // its value; both are a warning and the line is skipped either way, and the
            // name is what an operator got wrong.
            None => self.diags.push(ConfigDiagnostic::UnknownKey {
                line,
                key: lossy(name),
                value_is_integer: scan_c_int(value).is_some(),
            }),
            Some(key) => {
                let Some(int) = scan_c_int(value) else {
                    self.diags.push(unparsable(UnparsableReason::NoInteger));
                    return;
                };
                self.c_int(line, key, &int);
            }
        }
    }

    fn c_int(&mut self, line: usize, key: ConfigKey, int: &ScannedInt<'_>) {
        let c_int = int.value.and_then(|v| i32::try_from(v).ok());
        let Some(v) = c_int else {
            self.diags.push(ConfigDiagnostic::ValueOutOfRange {
                line,
                key,
                value: lossy(int.text),
                min: 1,
                max: i64::from(i32::MAX),
            });
            return;
        };
        if v <= 0 {
            self.diags.push(ConfigDiagnostic::NonPositiveValue {
                line,
                key,
                value: v,
            });
            return;
        }
        let value = v.unsigned_abs();
        match key {
            ConfigKey::NlSockRbufSize => self.config.nl_sock_rbuf_size = Some(value),
            // Extension keys never come here.
            _ => return,
        }
        self.mark_set(line, key);
        let trailing = trim_c_space(int.rest);
        if !trailing.is_empty() {
            self.diags.push(ConfigDiagnostic::TrailingTextIgnored {
                line,
                key,
                value: i64::from(v),
                trailing: lossy(trailing),
            });
        }
    }

    fn mark_set(&mut self, line: usize, key: ConfigKey) {
        match self.set_on.iter_mut().find(|(k, _)| *k == key) {
            Some((_, previous_line)) => {
                self.diags.push(ConfigDiagnostic::Overridden {
                    line,
                    key,
                    previous_line: *previous_line,
                });
                *previous_line = line;
            }
            None => self.set_on.push((key, line)),
        }
    }
}
