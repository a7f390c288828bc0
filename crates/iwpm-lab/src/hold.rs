//! `iwpm-lab --hold`: the lab set up with B listening and a few connections from A
//! established, so that `iwpmctl list` shows real mappings; each daemon's pid, control
//! socket and a line to paste (with the absolute path of `iwpmctl`, which a user who only
//! ran the lab has not on `$PATH`) are printed, and everything is held until SIGINT or
//! SIGTERM. Then the connections are closed, both daemons are stopped with SIGTERM (their
//! exit statuses printed) and everything is removed (scratch directory, namespaces).

use std::io::Write as _;
use std::net::SocketAddr;

use anyhow::Context as _;
use iwpm_kernel_emu::{AcceptMode, EventChannel};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::workload::{connect_all, Acceptor, WorkloadConfig};
use crate::{Lab, LabConfig};

/// Connections `--hold` opens unless `--connections` says otherwise: enough for `list` to
/// show a table, few enough to read.
pub const DEFAULT_CONNECTIONS: usize = 4;

/// What `--hold` opens and prints.
#[derive(Clone, Debug)]
pub struct HoldOptions {
    /// The connections from A to B's listener.
    pub workload: WorkloadConfig,
    /// The port B listens on.
    pub listen_port: u16,
    /// The `iwpmctl` binary the printed lines name.
    pub iwpmctl: std::path::PathBuf,
}

/// Sets the lab up, opens the connections, prints the handles and holds until SIGINT or
/// SIGTERM. `Ok(true)` when both daemons then exit cleanly.
pub fn hold(config: LabConfig, opts: &HoldOptions) -> anyhow::Result<bool> {
    // Handlers (not a blocked mask, which the daemons would inherit) catch the signals
    // from here on; the set-up below is then cleaned up whichever comes.
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("catching SIGINT/SIGTERM")?;
    let mut lab = Lab::start(config).context("setting up the lab")?;
    let listen = lab.b_addr(opts.listen_port);
    let channel = EventChannel::new();
    let listener = lab
        .b
        .host
        .listen(listen, AcceptMode::Auto, Some(&channel))
        .map_err(|e| anyhow::anyhow!("B's listener on {listen}: {e}"))?;
    let acceptor = Acceptor::start(channel);
    let records = connect_all(&lab.a.host, listen, &opts.workload, |_| {});
    let established = records.iter().filter(|r| r.established().is_some()).count();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "iwpm-lab: holding two iwpmd over emulated kernels (lab pid {}); Ctrl-C or SIGTERM \
         stops them and cleans up",
        std::process::id()
    )?;
    writeln!(
        out,
        "{}",
        connections_line(
            listen,
            listener.info.mapped_local,
            records.len(),
            established
        )
    )?;
    let ctl = shell_word(&opts.iwpmctl.display().to_string());
    for side in lab.sides_mut() {
        let mappings = side.dump().map(|d| d.mappings.len());
        let Some(d) = &side.daemon else { continue };
        let socket = shell_word(&d.config().control_socket.display().to_string());
        let pid = d.pid();
        let mappings = match mappings {
            Ok(1) => "1 mapping".to_owned(),
            Ok(n) => format!("{n} mappings"),
            Err(e) => format!("mappings unknown: {e}"),
        };
        writeln!(
            out,
            "host {}: {}, iwpmd pid {pid} ({mappings}), control socket {socket}",
            side.name, side.addrs.public
        )?;
        writeln!(out, "  {ctl} --socket {socket} status")?;
        writeln!(
            out,
            "  kill -USR1 {pid}  (table dump: in its log, shown with --verbose); kill -TERM \
             {pid} stops it"
        )?;
    }
    if let Some(ns) = lab.a.place.name() {
        writeln!(
            out,
            "namespaces: {ns}, {}",
            lab.b.place.name().unwrap_or("?")
        )?;
    }
    writeln!(out, "`list` instead of `status` shows a daemon's mappings")?;
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);
    let signal = match signals.forever().next() {
        Some(SIGINT) => "SIGINT",
        _ => "SIGTERM",
    };
    for r in &records {
        let _ = r.id.destroy();
    }
    for a in acceptor.accepted() {
        let _ = a.id.destroy();
    }
    drop(acceptor);
    let _ = listener.id.destroy();
    let mut clean = true;
    let mut exits = Vec::new();
    for side in lab.sides_mut() {
        match side.stop_daemon() {
            Ok(Some(status)) => {
                clean &= status.success();
                exits.push(format!("{} {status}", side.name));
            }
            Ok(None) => exits.push(format!("{} already gone", side.name)),
            Err(e) => {
                clean = false;
                exits.push(format!("{} {e}", side.name));
            }
        }
    }
    drop(lab);
    // Whoever started us may be gone (a closed pipe): the clean-up is done either way.
    let _ = writeln!(
        std::io::stdout(),
        "iwpm-lab: {signal}: daemons stopped ({}), lab removed",
        exits.join(", ")
    );
    Ok(clean)
}

/// What is held: B's listener and A's connections to it.
fn connections_line(
    listen: SocketAddr,
    mapped: SocketAddr,
    opened: usize,
    established: usize,
) -> String {
    let failed = opened - established;
    let failed = if failed > 0 {
        format!(", {failed} failed")
    } else {
        String::new()
    };
    format!(
        "held: B listens on {listen} (mapped {mapped}); A opened {opened} connections to it: \
         {established} established{failed}"
    )
}

/// `word` as one shell word: as it is when nothing in it is special to a shell, else in
/// single quotes (so a printed command line pastes as it reads).
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%=".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_paste_as_they_read() {
        assert_eq!(
            shell_word("/tmp/iwpm-lab-1-0/a-tap.sock.control"),
            "/tmp/iwpm-lab-1-0/a-tap.sock.control"
        );
        assert_eq!(shell_word("/my dir/iwpmctl"), "'/my dir/iwpmctl'");
        assert_eq!(shell_word("/it's/x"), r"'/it'\''s/x'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn the_held_connections_are_counted() {
        let l: SocketAddr = "127.0.0.2:18515".parse().unwrap();
        let m: SocketAddr = "127.0.0.2:40000".parse().unwrap();
        assert_eq!(
            connections_line(l, m, 4, 4),
            "held: B listens on 127.0.0.2:18515 (mapped 127.0.0.2:40000); A opened 4 \
             connections to it: 4 established"
        );
        assert!(connections_line(l, m, 4, 3).ends_with("3 established, 1 failed"));
    }
}
