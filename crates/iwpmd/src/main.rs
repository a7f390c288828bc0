//! `iwpmd`: the iWARP port mapper daemon. A thin IO shell around `iwpm-core`: it owns the
//! sockets, the signals, the logging and the process model; every protocol decision is the
//! core's.
//!
//! Start-up order (rdma-core's, with the socket binds moved before detaching): CLI,
//! logging, network namespace check (real kernel only), config, single-instance lock, UDP
//! peer sockets, detach (new session, `/`), descriptor limit, kernel link, runtime
//! directory handed to `--user`, privilege drop (`privileges`), state file and control
//! socket (as that user), signals, HELLO, then "ready" to the waiting command, loop. In the
//! default detaching mode all of this runs in a child the command starts and waits for
//! (`process::detach`), so every start-up failure reaches the terminal with status 1.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod control;
mod dump;
mod fleet_keys;
mod instance_lock;
mod io_counters;
mod kernel;
mod logging;
mod outbox;
mod peer;
mod ports;
mod privileges;
mod process;
mod restart;
mod send_failure;
mod settings;
mod shell;
mod snapshot;
mod startup;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use iwpm_core::CoreConfig;
use iwpm_proto::consts::IWPMD_NL_GROUPS_MASK;

use crate::cli::{Cli, KernelSpec, RunMode};
use crate::kernel::link::KernelLink;
use crate::logging::LogTarget;
use crate::peer::sockets::PeerSockets;
use crate::restart::{Restart, RestartConfig};
use crate::settings::Settings;
use crate::shell::Shell;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(shell) = cli.completions {
        return print_completions(shell);
    }
    if cli.run_mode() == RunMode::Daemon {
        // Before logging is set up: the child logs, we only wait for its word.
        let status = process::detach();
        // Say while a terminal still listens if the detached daemon's log will go nowhere
        // (after a failed start its message is all the terminal needs).
        if status == 0 {
            if let Some(warning) = detached_log_lost(&cli) {
                eprintln!("iwpmd: warning: {warning}");
            }
        }
        return ExitCode::from(status);
    }
    let log_target = logging::init(cli.log_stderr, cli.verbose);
    if log_target == LogTarget::Syslog && cli.run_mode() == RunMode::Foreground {
        if let Some(why) = logging::syslog_unreachable() {
            eprintln!(
                "iwpmd: warning: {why}: the log will be lost; add --log-stderr to see it here."
            );
        }
    }
    let mut readiness = (cli.run_mode() == RunMode::DetachedChild).then(process::Readiness::new);
    match run(&cli, readiness.as_mut()) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            let message = startup::failure_message(&e);
            tracing::error!("{message}");
            match readiness.as_mut() {
                // The waiting parent prints it on the terminal and exits 1.
                Some(r) => r.failed(&message),
                // syslog may not reach the operator's terminal; say it there too.
                None if log_target == LogTarget::Syslog => eprintln!("iwpmd: {message}"),
                None => {}
            }
            ExitCode::from(1)
        }
    }
}

/// Why a detached daemon's log (and its SIGUSR1 dumps) would be lost, if it would: its
/// stderr is `/dev/null`, and syslog(3) drops lines without a word when nothing listens.
fn detached_log_lost(cli: &Cli) -> Option<String> {
    if cli.log_stderr {
        return Some(
            "with --log-stderr the detached daemon logs to its stderr, which is /dev/null: \
             its log and its SIGUSR1 dumps will be lost. Add --foreground to keep them on \
             this terminal."
                .to_owned(),
        );
    }
    logging::syslog_unreachable().map(|why| {
        format!(
            "{why}: the detached daemon's log and its SIGUSR1 dumps will be lost. Start a \
             syslog daemon, run it under systemd (-s), or keep it in the foreground with \
             --foreground --log-stderr."
        )
    })
}

/// Prints the completion script. A reader that stops early (`| head`) is not an error:
/// the script is generated whole first, then written, and a closed pipe ends us quietly.
fn print_completions(shell: clap_complete::Shell) -> ExitCode {
    use std::io::Write as _;
    let mut script = Vec::new();
    Cli::write_completions(shell, &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwpmd: cannot write the completion script: {e}");
            ExitCode::from(1)
        }
    }
}

/// `readiness`: set in the detached child, told once the daemon serves (or, by `main`, why
/// it could not).
fn run(cli: &Cli, readiness: Option<&mut process::Readiness>) -> anyhow::Result<u8> {
    // Before any thread: descriptors a service manager passed back (FD store).
    let inherited = restart::systemd::Inherited::take_from_env();
    if cli.legacy_f > 0 {
        tracing::warn!("option -f is accepted for compatibility and ignored");
    }
    if cli.kernel == KernelSpec::Netlink {
        startup::check_netns(cli.allow_netns)?;
    }
    let settings = Settings::load(cli)?;
    tracing::debug!(?settings, "effective settings");
    // Before privileges are dropped: the file is root's.
    let fleet = match &settings.peer_key_file {
        Some(path) => {
            let source = fleet_keys::KeySource::new(path.clone());
            let loaded = source.load_at_start()?;
            tracing::info!("fleet keys: {}", loaded.describe());
            Some((source, loaded))
        }
        None => {
            fleet_keys::warn_unused_credential();
            None
        }
    };
    let _lock = instance_lock::InstanceLock::acquire(&cli.kernel)?;
    let peers = PeerSockets::open(settings.peer_bind)?;

    let mode = cli.run_mode();
    if let Some(r) = readiness.as_deref() {
        r.detach_here().context("Failed to daemonize")?;
    }
    tracing::warn!(
        "Starting iWarp Port Mapper V{} process (pid {})",
        iwpm_proto::consts::IWPM_UABI_VERSION,
        std::process::id()
    );
    tracing::info!("{}", startup::version_line());
    let max_mappings = settings.core.max_mappings;
    let fd_limit = process::raise_fd_limit(max_mappings);
    process::log_fd_limit(&fd_limit, max_mappings, mode != RunMode::Foreground);

    let kernel = match &cli.kernel {
        KernelSpec::Netlink => {
            KernelLink::open_netlink(IWPMD_NL_GROUPS_MASK, settings.nl_sock_rbuf_size)?
        }
        KernelSpec::Unix(path) => KernelLink::open_unix(path)?,
    };
    tracing::info!(
        link = %cli.kernel,
        port_id = kernel.port_id(),
        peers = %peers.describe(),
        "sockets open"
    );
    if let Some(rb) = kernel.receive_buffer() {
        tracing::info!(
            requested = rb.requested,
            granted = rb.granted,
            option = if rb.forced {
                "SO_RCVBUFFORCE"
            } else {
                "SO_RCVBUF"
            },
            "netlink receive buffer"
        );
    }

    // Every privileged step is done; the dump writer thread has not started yet. The state
    // file and the control socket are made after the switch: their directory goes to the
    // user first.
    let control_path = cli.control_socket_path();
    if let Some(user) = cli.user.as_deref() {
        let files: Vec<&std::path::Path> = settings
            .state_file
            .iter()
            .chain(control_path.iter())
            .map(|p| p.as_path())
            .collect();
        let runtime_dir = std::path::Path::new(restart::state_file::DEFAULT_STATE_FILE)
            .parent()
            .unwrap_or(std::path::Path::new("/run/iwpmd"));
        privileges::prepare_runtime_files(user, &files, runtime_dir);
    }
    log_privileges(privileges::drop_privileges(cli.user.as_deref())?);

    let now = Instant::now();
    let (handle_key, early) =
        settings::random_key().context("no random bytes for association handles")?;
    if early {
        tracing::info!("kernel random pool not ready yet: association handles keyed from its early-boot output");
    }
    let config = CoreConfig {
        netlink_pid: kernel.port_id(),
        peer_port: settings.peer_bind.port,
        handle_key,
        ..settings.core.clone()
    };
    let restart = Restart::new(
        RestartConfig {
            notify: mode == RunMode::Systemd,
            force_fd_store: cli.fd_store,
            state_file: settings.state_file.clone(),
        },
        inherited,
        now,
    );
    if restart.fd_store_enabled() {
        tracing::info!("reserved ports are kept in the service manager's FD store");
    }
    let mut shell =
        Shell::new(config, kernel, peers, restart).context("cannot set up the event loop")?;
    if let Some((source, loaded)) = fleet {
        shell.start_fleet_keys(now, source, loaded);
    }
    if let Some(path) = control_path {
        // Not fatal: rdma-core's daemon has no control socket, and mappings matter more.
        // But an error: iwpmctl will not work, and the reason names the path.
        match control::server::ControlServer::bind(&path, shell.registry()) {
            Ok(server) => shell.attach_control(server, cli.kernel.to_string()),
            Err(e) => tracing::error!(path = %path.display(), "control socket disabled: {e}"),
        }
    }
    shell.start()?;
    if let Some(r) = readiness {
        r.ready();
    }
    let exit = shell.run().context("event loop failed")?;
    Ok(exit.status())
}

fn log_privileges(dropped: Option<privileges::Dropped>) {
    match dropped {
        None => tracing::debug!("no capabilities to drop"),
        Some(d) => tracing::info!(
            permitted_before = d.before.bits().count_ones(),
            kept = %privileges::describe(d.kept),
            user = %d.user.as_ref().map_or("unchanged", |u| u.0.as_str()),
            "privileges dropped"
        ),
    }
}
