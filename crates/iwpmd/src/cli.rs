//! Command line. Keeps rdma-core's `-s/--systemd` (and its dead `-f`) so the shipped unit
//! and init scripts work unchanged; everything else is an addition for operators and tests.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;

use clap::{ArgAction, Parser};

/// Default configuration file, as installed by rdma-core packages.
pub(crate) const DEFAULT_CONFIG: &str = "/etc/iwpmd.conf";

/// `--version`: the version and the source it was built from (`git describe` of the
/// checkout, or `IWPMD_BUILD` from a packager), as the start-up log line says it, so a bug
/// report can name the commit.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (build ",
    env!("IWPMD_BUILD"),
    ")"
);

/// iWARP port mapper daemon.
///
/// Reserves TCP ports for iWARP connections on behalf of the kernel (NETLINK_RDMA) and
/// exchanges mapped ports with the iwpmd of peer hosts (UDP port 3935).
#[derive(Debug, Parser)]
#[command(name = "iwpmd", version = VERSION)]
#[command(
    after_help = "Signals: SIGUSR1 logs the mapping table; SIGTERM exits 0; \
SIGHUP reads the fleet key file again when iwpmd.conf sets peer_key_file, and otherwise \
exits 1 (as rdma-core's iwpmd; the configuration is never reloaded)."
)]
pub(crate) struct Cli {
    /// Run under systemd: stay in the foreground and send READY=1 after the kernel handshake.
    #[arg(short = 's', long)]
    pub(crate) systemd: bool,

    /// Stay in the foreground without systemd notification.
    #[arg(long)]
    pub(crate) foreground: bool,

    /// Set by the detaching parent on the process it starts (`process::detach`).
    #[arg(long = "detached-child", hide = true)]
    pub(crate) detached_child: bool,

    /// Accepted for compatibility with rdma-core's iwpmd; has no effect.
    #[arg(short = 'f', hide = true, action = ArgAction::Count)]
    pub(crate) legacy_f: u8,

    /// Configuration file [default: /etc/iwpmd.conf, which may be missing]. A file named
    /// here must exist; `none` reads no file.
    #[arg(long, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,

    /// Kernel link: `netlink` (the real kernel) or `unix:PATH` (a kernel emulator bound to the
    /// Unix datagram socket PATH).
    #[arg(long, value_name = "netlink|unix:PATH", default_value = "netlink")]
    pub(crate) kernel: KernelSpec,

    /// UDP port of the peer protocol, 1-65535 (overrides `peer_port` in the configuration
    /// file).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) peer_port: Option<u16>,

    /// IPv4 address the peer sockets bind to (default 0.0.0.0).
    #[arg(long, value_name = "ADDR")]
    pub(crate) peer_bind_v4: Option<Ipv4Addr>,

    /// IPv6 address the peer sockets bind to (default ::).
    #[arg(long, value_name = "ADDR")]
    pub(crate) peer_bind_v6: Option<Ipv6Addr>,

    /// Do not open IPv6 peer sockets.
    #[arg(long)]
    pub(crate) no_ipv6: bool,

    /// After start-up, run as this user (keeping only CAP_NET_ADMIN).
    #[arg(long, value_name = "NAME")]
    pub(crate) user: Option<String>,

    /// Start even outside the initial network namespace (the kernel will not talk to us).
    #[arg(long)]
    pub(crate) allow_netns: bool,

    /// Print a completion script for SHELL and exit (used when packaging).
    #[arg(long, value_name = "SHELL", hide = true)]
    pub(crate) completions: Option<clap_complete::Shell>,

    /// Control socket for `iwpmctl` (`none` disables it). Default: /run/iwpmd/control.sock
    /// with the netlink kernel link, `PATH.control` with `--kernel unix:PATH`.
    #[arg(long, value_name = "PATH|none")]
    pub(crate) control_socket: Option<PathBuf>,

    /// Log to stderr instead of syslog/journald.
    #[arg(long)]
    pub(crate) log_stderr: bool,

    /// More log output (-v debug, -vv trace); `RUST_LOG` directives take precedence.
    #[arg(short, long, action = ArgAction::Count)]
    pub(crate) verbose: u8,

    /// Restart state file: the mappings with their reference counts, restored at the next
    /// start (overrides `state_file`; default /run/iwpmd/state with `--kernel netlink`,
    /// none with `unix:PATH`).
    #[arg(long, value_name = "PATH", conflicts_with = "no_state_file")]
    pub(crate) state_file: Option<PathBuf>,

    /// Keep no restart state file.
    #[arg(long)]
    pub(crate) no_state_file: bool,

    /// Ask ourselves over UDP, as the C daemon does, when a connect goes to a listener on
    /// this host's own IP (by default the answer comes from our own table: the same
    /// REMOTE_INFO and QUERY reply, without three datagrams to ourselves).
    #[arg(long)]
    pub(crate) no_local_answers: bool,

    /// With `--systemd`: hand reserved ports to the service manager's FD store even when it
    /// did not announce one in `$FDSTORE` (systemd before 254).
    #[arg(long)]
    pub(crate) fd_store: bool,
}

/// The configuration file the daemon reads (`--config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConfigSource {
    /// rdma-core's path: a missing file means the defaults, as with the C daemon.
    Default(PathBuf),
    /// A file the operator named: it must exist (a typo must not start a daemon without
    /// the configuration it was meant to have).
    Named(PathBuf),
    /// `--config none`: the defaults, no file.
    None,
}

impl Cli {
    /// Writes the completion script for `shell` to `out` (bash, zsh, fish, …).
    pub(crate) fn write_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
        use clap::CommandFactory;
        clap_complete::generate(shell, &mut Cli::command(), "iwpmd", out);
    }

    /// Which configuration file to read, and whether it must exist.
    pub(crate) fn config_source(&self) -> ConfigSource {
        match &self.config {
            None => ConfigSource::Default(PathBuf::from(DEFAULT_CONFIG)),
            Some(p) if p.as_os_str() == "none" => ConfigSource::None,
            Some(p) => ConfigSource::Named(p.clone()),
        }
    }

    /// Where the control socket goes, or `None` when disabled.
    pub(crate) fn control_socket_path(&self) -> Option<PathBuf> {
        match &self.control_socket {
            Some(p) if p.as_os_str() == "none" => None,
            Some(p) => Some(p.clone()),
            None => Some(match &self.kernel {
                KernelSpec::Netlink => PathBuf::from(iwpm_control::DEFAULT_SOCKET),
                KernelSpec::Unix(path) => iwpm_control::socket_beside(path),
            }),
        }
    }

    /// The state file in use, if any: `--no-state-file`, else `--state-file`, else the
    /// configuration file's `state_file` (`configured`; `Some(None)` = `none`), else the
    /// default with the real kernel and none with an emulator (tests must not share it).
    pub(crate) fn state_file_path(&self, configured: Option<Option<PathBuf>>) -> Option<PathBuf> {
        if self.no_state_file {
            return None;
        }
        if let Some(p) = &self.state_file {
            return Some(p.clone());
        }
        if let Some(c) = configured {
            return c;
        }
        match &self.kernel {
            KernelSpec::Netlink => Some(PathBuf::from(
                crate::restart::state_file::DEFAULT_STATE_FILE,
            )),
            KernelSpec::Unix(_) => None,
        }
    }

    /// How the process should run, from the mode flags.
    pub(crate) fn run_mode(&self) -> RunMode {
        if self.systemd {
            RunMode::Systemd
        } else if self.foreground {
            RunMode::Foreground
        } else if self.detached_child {
            RunMode::DetachedChild
        } else {
            RunMode::Daemon
        }
    }
}

/// Process model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunMode {
    /// Detach from the terminal (rdma-core's default): start the daemon as a child and
    /// wait until it is ready or has failed (`process::detach`).
    Daemon,
    /// The child [`RunMode::Daemon`] starts: detaches, then tells the parent.
    DetachedChild,
    /// Stay attached, no notification.
    Foreground,
    /// Stay attached and send `READY=1` to systemd.
    Systemd,
}

/// Which kernel the daemon talks to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KernelSpec {
    /// The real kernel over `NETLINK_RDMA`.
    Netlink,
    /// An emulator listening on a Unix datagram socket at this path; same bytes as netlink.
    Unix(PathBuf),
}

/// `--kernel` value that is neither `netlink` nor `unix:PATH`.
#[derive(Debug, thiserror::Error)]
#[error("expected `netlink` or `unix:PATH`")]
pub(crate) struct BadKernelSpec;

impl FromStr for KernelSpec {
    type Err = BadKernelSpec;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "netlink" {
            return Ok(KernelSpec::Netlink);
        }
        match s.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(KernelSpec::Unix(PathBuf::from(path))),
            _ => Err(BadKernelSpec),
        }
    }
}

impl fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelSpec::Netlink => f.write_str("netlink"),
            KernelSpec::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn rdma_core_flags_parse() {
        let cli = Cli::try_parse_from(["iwpmd", "-s"]).unwrap();
        assert_eq!(cli.run_mode(), RunMode::Systemd);
        let cli = Cli::try_parse_from(["iwpmd", "--systemd", "-f"]).unwrap();
        assert_eq!(cli.run_mode(), RunMode::Systemd);
        assert_eq!(cli.legacy_f, 1);
        let cli = Cli::try_parse_from(["iwpmd"]).unwrap();
        assert_eq!(cli.run_mode(), RunMode::Daemon);
        assert_eq!(cli.kernel, KernelSpec::Netlink);
        assert_eq!(
            cli.config_source(),
            ConfigSource::Default(PathBuf::from(DEFAULT_CONFIG))
        );
    }

    #[test]
    fn kernel_spec_parses() {
        assert_eq!(
            "netlink".parse::<KernelSpec>().unwrap(),
            KernelSpec::Netlink
        );
        assert_eq!(
            "unix:/tmp/k".parse::<KernelSpec>().unwrap(),
            KernelSpec::Unix(PathBuf::from("/tmp/k"))
        );
        assert!("unix:".parse::<KernelSpec>().is_err());
        assert!("tcp:1".parse::<KernelSpec>().is_err());
    }

    #[test]
    fn control_socket_defaults() {
        let cli = Cli::try_parse_from(["iwpmd"]).unwrap();
        assert_eq!(
            cli.control_socket_path(),
            Some(PathBuf::from("/run/iwpmd/control.sock"))
        );
        let cli = Cli::try_parse_from(["iwpmd", "--kernel", "unix:/tmp/k.sock"]).unwrap();
        assert_eq!(
            cli.control_socket_path(),
            Some(PathBuf::from("/tmp/k.sock.control"))
        );
        let cli = Cli::try_parse_from(["iwpmd", "--control-socket", "none"]).unwrap();
        assert_eq!(cli.control_socket_path(), None);
        let cli = Cli::try_parse_from(["iwpmd", "--control-socket", "/x/c"]).unwrap();
        assert_eq!(cli.control_socket_path(), Some(PathBuf::from("/x/c")));
    }

    #[test]
    fn verbosity_counts() {
        let cli = Cli::try_parse_from(["iwpmd", "-vv", "--foreground"]).unwrap();
        assert_eq!(cli.verbose, 2);
        assert_eq!(cli.run_mode(), RunMode::Foreground);
    }
}
