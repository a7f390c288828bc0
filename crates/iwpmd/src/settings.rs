//! Effective settings: the command line over `/etc/iwpmd.conf` over built-in defaults.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use iwpm_core::{CoreConfig, PeerAllow};
use iwpm_proto::config::{parse_config_bytes, Config, ConfigDiagnostic, ExtraConfig, Severity};
use iwpm_proto::consts::IWPM_PEER_PORT;

use crate::cli::{Cli, ConfigSource};
use crate::peer::sockets::PeerBind;

/// What the daemon runs with. Its `Debug` is the "effective settings" line of `-v`: it
/// shows what a configuration file or the command line can set, and never key bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Netlink receive buffer in bytes; 0 keeps the kernel default.
    pub(crate) nl_sock_rbuf_size: usize,
    /// UDP peer sockets.
    pub(crate) peer_bind: PeerBind,
    /// Limits and the peer allow-list, as the core takes them (`netlink_pid`, `peer_port`
    /// and `handle_key` are filled in at start-up).
    pub(crate) core: CoreConfig,
    /// Restart state file in use (`None`: none), see [`Cli::state_file_path`].
    pub(crate) state_file: Option<std::path::PathBuf>,
    /// `state_file` from the configuration file, if set (`Some(None)` = `none`).
    configured_state_file: Option<Option<std::path::PathBuf>>,
    /// `peer_key_file`: the fleet key file (read at start-up and on SIGHUP, never kept
    /// here: `Debug` of the settings is logged).
    pub(crate) peer_key_file: Option<PathBuf>,
    /// Keys the file set that no longer have an effect (each warned about once).
    pub(crate) obsolete: Vec<&'static str>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No `..`: a new field does not compile until it is shown here.
        let Settings {
            nl_sock_rbuf_size,
            peer_bind,
            core,
            state_file,
            configured_state_file,
            peer_key_file,
            obsolete,
        } = self;
        f.debug_struct("Settings")
            .field("nl_sock_rbuf_size", nl_sock_rbuf_size)
            .field("peer_bind", peer_bind)
            .field("core", &ConfiguredCore(core))
            .field("state_file", state_file)
            .field("configured_state_file", configured_state_file)
            .field("peer_key_file", peer_key_file)
            .field("obsolete", obsolete)
            .finish()
    }
}

/// The core's configuration as the settings hold it. `netlink_pid`, `peer_port` and
/// `handle_key` are placeholders until start-up fills them in (the kernel link's port id,
/// `peer_bind.port`, 32 random bytes), so they are shown as what fills them: a logged
/// placeholder key (public, but 32 bytes) reads like the real one.
struct ConfiguredCore<'a>(&'a CoreConfig);

impl std::fmt::Debug for ConfiguredCore<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// Shown as is, without quotes.
        struct FilledAtStart(&'static str);
        impl std::fmt::Debug for FilledAtStart {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        let CoreConfig {
            netlink_pid: _,
            max_abi,
            peer_port: _,
            retransmit_interval,
            max_retransmits,
            exchange_lifetime,
            max_mappings,
            max_exchanges,
            max_peer_exchanges,
            remote_info_budget,
            remote_info_refill,
            remote_info_source_burst,
            remote_info_source_rate,
            max_rejects_per_sec,
            peer_allow,
            peer_auth_required,
            peer_auth_window,
            log_interval,
            reply_deadline,
            handshake_timeout,
            local_answers,
            handle_key: _,
        } = self.0;
        f.debug_struct("CoreConfig")
            .field("netlink_pid", &FilledAtStart("<the kernel link's port id>"))
            .field("max_abi", max_abi)
            .field("peer_port", &FilledAtStart("<peer_bind.port>"))
            .field("retransmit_interval", retransmit_interval)
            .field("max_retransmits", max_retransmits)
            .field("exchange_lifetime", exchange_lifetime)
            .field("max_mappings", max_mappings)
            .field("max_exchanges", max_exchanges)
            .field("max_peer_exchanges", max_peer_exchanges)
            .field("remote_info_budget", remote_info_budget)
            .field("remote_info_refill", remote_info_refill)
            .field("remote_info_source_burst", remote_info_source_burst)
            .field("remote_info_source_rate", remote_info_source_rate)
            .field("max_rejects_per_sec", max_rejects_per_sec)
            .field("peer_allow", peer_allow)
            .field("peer_auth_required", peer_auth_required)
            .field("peer_auth_window", peer_auth_window)
            .field("log_interval", log_interval)
            .field("reply_deadline", reply_deadline)
            .field("handshake_timeout", handshake_timeout)
            .field("local_answers", local_answers)
            .field(
                "handle_key",
                &FilledAtStart("<32 random bytes, drawn at start-up>"),
            )
            .finish()
    }
}

/// Why the configuration cannot be used: the daemon does not start.
/// A read error in plain words: a missing file is said so, not as an errno.
fn describe_read_error(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "there is no such file".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SettingsError {
    /// `--config PATH` names a file that cannot be read (missing included).
    // (`error`, not `source`: the message names it already, and the chain printed at exit
    // would say it twice)
    #[error("cannot read the configuration file {path} given with --config: {}", describe_read_error(.error))]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The file has a line that would fail open if skipped (a bad `peer_allow` entry).
    #[error("configuration file {path}: {diagnostic}; fix or remove the line")]
    Refused {
        /// The file.
        path: PathBuf,
        /// The first such line.
        diagnostic: ConfigDiagnostic,
    },
    /// `peer_auth_required` without `peer_key_file`: nothing could ever authenticate.
    #[error(
        "configuration file {path}: peer_auth_required is set but peer_key_file is not, so no \
         datagram from those networks could ever be authenticated; set peer_key_file to the \
         fleet key file (see iwpmd.conf(5)) or remove peer_auth_required"
    )]
    AuthWithoutKeys {
        /// The file.
        path: PathBuf,
    },
}

impl Settings {
    /// Reads the configuration file and applies the command line on top. rdma-core's
    /// default path may be missing (silent) or unreadable (a warning), as with the C
    /// daemon; a file named with `--config` must be readable. A line that is an error
    /// (not merely skipped) refuses the whole file.
    pub(crate) fn load(cli: &Cli) -> Result<Self, SettingsError> {
        let (path, text) = match cli.config_source() {
            ConfigSource::None => (None, None),
            ConfigSource::Default(path) => match std::fs::read(&path) {
                Ok(t) => (Some(path), Some(t)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read the configuration file");
                    (None, None)
                }
            },
            ConfigSource::Named(path) => match std::fs::read(&path) {
                Ok(t) => (Some(path), Some(t)),
                Err(error) => return Err(SettingsError::Unreadable { path, error }),
            },
        };
        let mut settings = Settings::defaults();
        if let (Some(path), Some(text)) = (path, text) {
            if let Some(diagnostic) = settings.apply_file(&text) {
                return Err(SettingsError::Refused { path, diagnostic });
            }
            if !settings.core.peer_auth_required.is_empty() && settings.peer_key_file.is_none() {
                return Err(SettingsError::AuthWithoutKeys { path });
            }
        }
        settings.apply_cli(cli);
        Ok(settings)
    }

    fn defaults() -> Self {
        Settings {
            nl_sock_rbuf_size: 0,
            peer_bind: PeerBind {
                port: IWPM_PEER_PORT,
                v4: Ipv4Addr::UNSPECIFIED,
                v6: Some(Ipv6Addr::UNSPECIFIED),
            },
            core: CoreConfig::default(),
            state_file: None,
            configured_state_file: None,
            peer_key_file: None,
            obsolete: Vec::new(),
        }
    }

    /// Applies the file's keys, logging each diagnostic at its severity; returns the first
    /// [`Severity::Error`] instead, applying nothing.
    #[deny(unused_variables)]
    fn apply_file(&mut self, text: &[u8]) -> Option<ConfigDiagnostic> {
        let (config, diagnostics) = parse_config_bytes(text);
        if let Some(error) = diagnostics.iter().find(|d| d.severity() == Severity::Error) {
            return Some(error.clone());
        }
        for d in &diagnostics {
            match d.severity() {
                Severity::Error | Severity::Warning => tracing::warn!("config: {d}"),
                Severity::Info => tracing::info!("config: {d}"),
                Severity::Debug => tracing::debug!("config: {d}"),
            }
        }
        // No `..`: a key added to the parser's `Config` does not compile until it is applied
        // here (and `deny` makes a key bound but not used an error too).
        let Config {
            nl_sock_rbuf_size,
            extra:
                ExtraConfig {
                    peer_port,
                    peer_bind_v4,
                    peer_bind_v6,
                    peer_allow,
                    max_mappings,
                    max_exchanges,
                    max_peer_exchanges,
                    peer_source_quota,
                    remote_info_budget,
                    remote_info_source_burst,
                    remote_info_source_rate,
                    state_file,
                    peer_key_file,
                    peer_auth_required,
                    peer_auth_window,
                },
        } = config;
        if let Some(size) = nl_sock_rbuf_size {
            tracing::info!("config: nl_sock_rbuf_size = {size}");
            self.nl_sock_rbuf_size = size as usize;
        }
        if let Some(port) = peer_port {
            self.peer_bind.port = port;
        }
        if let Some(v4) = peer_bind_v4 {
            self.peer_bind.v4 = v4;
        }
        if let Some(v6) = peer_bind_v6 {
            self.peer_bind.v6 = Some(v6);
        }
        let core = &mut self.core;
        if let Some(nets) = peer_allow {
            let list: Vec<String> = nets.iter().map(ToString::to_string).collect();
            tracing::info!("config: peer_allow = {}", list.join(", "));
            core.peer_allow = PeerAllow::only(nets);
        }
        let limits: [(Option<u32>, &mut usize); 3] = [
            (max_mappings, &mut core.max_mappings),
            (max_exchanges, &mut core.max_exchanges),
            (max_peer_exchanges, &mut core.max_peer_exchanges),
        ];
        for (value, slot) in limits {
            if let Some(v) = value {
                *slot = v as usize;
            }
        }
        if peer_source_quota.is_some() {
            // Since 1.1 nothing is limited per source: the REMOTE_INFOs held for an
            // rdma-core IPv6 peer's ACK share one table, which spoofers at 1 000/s cannot
            // empty, where a per-source quota was theirs to spend with a victim's address.
            tracing::warn!(
                "config: peer_source_quota no longer has an effect (nothing is limited per \
                 source any more); the line can go"
            );
            self.obsolete.push("peer_source_quota");
        }
        if let Some(v) = remote_info_budget {
            core.remote_info_budget = v;
        }
        if let Some(v) = remote_info_source_burst {
            core.remote_info_source_burst = v;
        }
        if let Some(v) = remote_info_source_rate {
            core.remote_info_source_rate = v;
        }
        if let Some(v) = state_file {
            self.configured_state_file = Some(v);
        }
        if let Some(path) = peer_key_file {
            tracing::info!("config: peer_key_file = {}", path.display());
            self.peer_key_file = Some(path);
        }
        if let Some(nets) = peer_auth_required {
            let list: Vec<String> = nets.iter().map(ToString::to_string).collect();
            tracing::info!("config: peer_auth_required = {}", list.join(", "));
            self.core.peer_auth_required = nets;
        }
        if let Some(secs) = peer_auth_window {
            self.core.peer_auth_window = std::time::Duration::from_secs(u64::from(secs));
        }
        None
    }

    fn apply_cli(&mut self, cli: &Cli) {
        if let Some(port) = cli.peer_port {
            self.peer_bind.port = port;
        }
        if let Some(v4) = cli.peer_bind_v4 {
            self.peer_bind.v4 = v4;
        }
        if let Some(v6) = cli.peer_bind_v6 {
            self.peer_bind.v6 = Some(v6);
        }
        if cli.no_ipv6 {
            self.peer_bind.v6 = None;
        }
        if cli.no_local_answers {
            self.core.local_answers = false;
        }
        self.state_file = cli.state_file_path(self.configured_state_file.clone());
    }
}

/// The key of the core's association-handle generator, from the kernel's random source.
///
/// Early at boot (the systemd unit and udev start us then) the kernel's pool may not be
/// initialised yet, and a blocking `getrandom` would hold up start-up — long enough for the
/// kernel to create listeners without a port mapper. So: the ready pool if it is ready,
/// else the kernel's early-boot output (`GRND_INSECURE`, still unpredictable from the
/// network), and only on kernels without it (before 5.6) a blocking read. The boolean says
/// whether the early-boot output was used.
pub(crate) fn random_key() -> std::io::Result<([u8; 32], bool)> {
    use rustix::io::Errno;
    use rustix::rand::{getrandom, GetRandomFlags};
    let mut key = [0u8; 32];
    let mut fill = |flags: GetRandomFlags| -> Result<(), Errno> {
        let mut filled = 0;
        while filled < key.len() {
            let rest = key.get_mut(filled..).unwrap_or_default();
            filled += getrandom(rest, flags)?;
        }
        Ok(())
    };
    match fill(GetRandomFlags::NONBLOCK) {
        Ok(()) => return Ok((key, false)),
        Err(Errno::AGAIN) => {}
        Err(e) => return Err(e.into()),
    }
    match fill(GetRandomFlags::INSECURE) {
        Ok(()) => Ok((key, true)),
        Err(Errno::INVAL) => fill(GetRandomFlags::empty())
            .map(|()| (key, false))
            .map_err(Into::into),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use iwpm_proto::config::ConfigKey;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("iwpmd").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_match_rdma_core() {
        let s = Settings::load(&cli(&["--config", "none"])).unwrap();
        assert_eq!(s.nl_sock_rbuf_size, 0);
        assert_eq!(s.peer_bind.port, 3935);
        assert_eq!(s.peer_bind.v4, Ipv4Addr::UNSPECIFIED);
        assert_eq!(s.peer_bind.v6, Some(Ipv6Addr::UNSPECIFIED));
    }

    #[test]
    fn every_config_key_changes_its_setting() {
        // One line per key (the match has no `_`, so a new key needs one), each checked
        // against what it must change: a key the parser reads and `apply_file` drops fails.
        let other_net: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let other_net_in: std::net::IpAddr = "10.1.2.3".parse().unwrap();
        for key in ConfigKey::ALL {
            let (line, applied): (&str, &dyn Fn(&Settings) -> bool) = match key {
                ConfigKey::NlSockRbufSize => {
                    ("nl_sock_rbuf_size=4096", &|s| s.nl_sock_rbuf_size == 4096)
                }
                ConfigKey::PeerPort => ("peer_port=4000", &|s| s.peer_bind.port == 4000),
                ConfigKey::PeerBindV4 => ("peer_bind_v4=127.0.0.1", &|s| {
                    s.peer_bind.v4 == Ipv4Addr::LOCALHOST
                }),
                ConfigKey::PeerBindV6 => ("peer_bind_v6=::1", &|s| {
                    s.peer_bind.v6 == Some(Ipv6Addr::LOCALHOST)
                }),
                ConfigKey::PeerAllow => ("peer_allow=10.0.0.0/8", &|s| {
                    !s.core.peer_allow.allows(other_net)
                }),
                ConfigKey::MaxMappings => ("max_mappings=7", &|s| s.core.max_mappings == 7),
                ConfigKey::MaxExchanges => ("max_exchanges=7", &|s| s.core.max_exchanges == 7),
                ConfigKey::MaxPeerExchanges => {
                    ("max_peer_exchanges=7", &|s| s.core.max_peer_exchanges == 7)
                }
                ConfigKey::PeerSourceQuota => ("peer_source_quota=7", &|s| {
                    s.obsolete == ["peer_source_quota"] && s.core == Settings::defaults().core
                }),
                ConfigKey::RemoteInfoBudget => {
                    ("remote_info_budget=7", &|s| s.core.remote_info_budget == 7)
                }
                ConfigKey::RemoteInfoSourceBurst => ("remote_info_source_burst=7", &|s| {
                    s.core.remote_info_source_burst == 7
                }),
                ConfigKey::RemoteInfoSourceRate => ("remote_info_source_rate=7", &|s| {
                    s.core.remote_info_source_rate == 7
                }),
                ConfigKey::StateFile => ("state_file=none", &|s| {
                    s.configured_state_file == Some(None)
                }),
                ConfigKey::PeerKeyFile => ("peer_key_file=/etc/iwpmd/peer-keys", &|s| {
                    s.peer_key_file.as_deref() == Some(std::path::Path::new("/etc/iwpmd/peer-keys"))
                }),
                ConfigKey::PeerAuthRequired => ("peer_auth_required=10.0.0.0/8", &|s| {
                    s.core
                        .peer_auth_required
                        .iter()
                        .any(|n| n.contains(other_net_in))
                }),
                ConfigKey::PeerAuthWindow => ("peer_auth_window=7", &|s| {
                    s.core.peer_auth_window == std::time::Duration::from_secs(7)
                }),
            };
            let mut s = Settings::defaults();
            assert!(!applied(&s), "{key}: the test value is the default");
            assert_eq!(s.apply_file(format!("{line}\n").as_bytes()), None, "{line}");
            assert!(applied(&s), "{line} was parsed but not applied");
        }
    }

    #[test]
    fn file_then_command_line() {
        let mut s = Settings::defaults();
        let refused = s.apply_file(
            b"nl_sock_rbuf_size=419430400\npeer_port=4000\npeer_bind_v4=127.0.0.1\nbogus=1\n",
        );
        assert_eq!(refused, None);
        assert_eq!(s.nl_sock_rbuf_size, 419_430_400);
        assert_eq!(s.peer_bind.port, 4000);
        assert_eq!(s.peer_bind.v4, Ipv4Addr::LOCALHOST);
        s.apply_cli(&cli(&["--peer-port", "5000", "--no-ipv6"]));
        assert_eq!(s.peer_bind.port, 5000);
        assert_eq!(s.peer_bind.v4, Ipv4Addr::LOCALHOST);
        assert_eq!(s.peer_bind.v6, None);
    }

    /// A named file must exist, `none` reads nothing, and a bad `peer_allow` entry refuses
    /// the file naming the entry (skipping the line would let every peer in).
    #[test]
    fn named_missing_files_and_bad_allow_lists_are_refused() {
        let e = Settings::load(&cli(&["--config", "/nonexistent/iwpmd.conf"])).unwrap_err();
        assert!(matches!(e, SettingsError::Unreadable { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/iwpmd.conf"), "{e}");
        let dir = std::env::temp_dir().join(format!("iwpmd-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("iwpmd.conf");
        std::fs::write(&file, "peer_allow = 10.0.0.0/8, 10.1.0.0/33\n").unwrap();
        let e = Settings::load(&cli(&["--config", file.to_str().unwrap()])).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, SettingsError::Refused { .. }), "{text}");
        assert!(
            text.contains("line 1: peer_allow entry \"10.1.0.0/33\""),
            "{text}"
        );
        std::fs::write(&file, "peer_allow = 10.0.0.0/8\n").unwrap();
        let s = Settings::load(&cli(&["--config", file.to_str().unwrap()])).unwrap();
        assert!(!s.core.peer_allow.allows("192.0.2.1".parse().unwrap()));
        // Signed datagrams required with no key to check them: refused, naming both keys.
        std::fs::write(&file, "peer_auth_required = 10.0.0.0/8\n").unwrap();
        let e = Settings::load(&cli(&["--config", file.to_str().unwrap()])).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, SettingsError::AuthWithoutKeys { .. }), "{text}");
        assert!(
            text.contains("peer_auth_required is set but peer_key_file is not"),
            "{text}"
        );
        std::fs::write(
            &file,
            "peer_auth_required = 10.0.0.0/8\npeer_key_file=/etc/iwpmd/peer-keys\n",
        )
        .unwrap();
        let s = Settings::load(&cli(&["--config", file.to_str().unwrap()])).unwrap();
        assert_eq!(s.core.peer_auth_required.len(), 1);
        // The settings' Debug (logged with -v) names the key file, never keys.
        assert!(format!("{s:?}").contains("/etc/iwpmd/peer-keys"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `-v` logs the settings' Debug as "effective settings": it must show no key bytes
    /// (not even the public placeholder) and no port id that start-up has not filled in.
    #[test]
    fn effective_settings_show_no_key_bytes() {
        let s = Settings::load(&cli(&["--config", "none"])).unwrap();
        let shown = format!("{s:?}");
        let key = &s.core.handle_key;
        let as_list = format!("{key:?}");
        let as_list = as_list.trim_start_matches('[').trim_end_matches(']');
        assert!(!shown.contains(as_list), "{shown}");
        assert!(!shown.contains(&*String::from_utf8_lossy(key)), "{shown}");
        assert!(
            shown.contains("handle_key: <32 random bytes, drawn at start-up>"),
            "{shown}"
        );
        assert!(!shown.contains("netlink_pid: 0"), "{shown}");
        assert!(shown.contains("max_mappings: 100000"), "{shown}");
    }

    #[test]
    fn seeds_differ() {
        assert_ne!(random_key().unwrap().0, random_key().unwrap().0);
    }
}
