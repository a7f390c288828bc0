//! The human form of each reply: aligned tables and `key: value` blocks, stable enough to
//! be snapshot-tested (`tests/it/render.rs`); scripts should use `--json`.

use std::fmt::Write as _;

use iwpm_report::{count, Presence};

use crate::proto::{
    KeysReport, LogLevelReply, MappingList, PeerAuth, PeerTally, PeersReport, ProbeReport, Reply,
    StatusReport, TextReply,
};
use crate::IoCounter;

/// The text `iwpmctl` prints for `reply`.
pub fn render(reply: &Reply) -> String {
    match reply {
        Reply::Status(s) => status(s),
        Reply::List(l) => list(l),
        Reply::Peers(p) => peers(p),
        Reply::Keys(k) => keys(k),
        Reply::Metrics(TextReply { text }) | Reply::Dump(TextReply { text }) => {
            let mut t = text.clone();
            if !t.ends_with('\n') {
                t.push('\n');
            }
            t
        }
        Reply::LogLevel(l) => log_level(l),
        Reply::Probe(p) => probe(p),
    }
}

/// Left-aligned columns separated by two spaces; no trailing spaces.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{cell:<w$}");
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `1h02m03s`, `4m05s`, `6.7s`, `89ms` or `<1ms` (the replies count whole milliseconds,
/// so a 0 is a time under one, not none).
pub fn duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 if ms == 0 => "<1ms".to_owned(),
        0 => format!("{ms}ms"),
        1..=59 => format!("{}.{}s", s, (ms % 1000) / 100),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60),
    }
}

fn status(s: &StatusReport) -> String {
    let mut out = String::new();
    // The count first, as `iwpmd_kernel_clients` has it; then each client by the index
    // the kernel gave it (`OWNER` in `list`), which is not a count.
    let clients = if s.clients.is_empty() {
        "0".to_owned()
    } else {
        let each = s
            .clients
            .iter()
            .map(|c| format!("#{}: {} on {}", c.index, c.ibdev, c.interface))
            .collect::<Vec<_>>()
            .join(", ");
        format!("{} ({each})", s.clients.len())
    };
    let uptime_ms = (s.uptime_secs.max(0.0) * 1000.0) as u64;
    let rows: [(&str, String); 10] = [
        ("version", s.version.clone()),
        ("pid", s.pid.to_string()),
        ("kernel link", s.kernel_link.clone()),
        ("iwpm ABI", s.abi.to_string()),
        ("handshake", s.handshake.clone()),
        ("uptime", duration_ms(uptime_ms)),
        ("kernel clients", clients),
        (
            "mappings",
            format!(
                "{} ({} held)",
                s.mappings,
                count(s.ports_held, "port", "ports")
            ),
        ),
        ("exchanges", s.exchanges.to_string()),
        ("control clients", s.control_clients.to_string()),
    ];
    for (k, v) in rows {
        let _ = writeln!(out, "{:<16} {v}", format!("{k}:"));
    }
    // The restart counters get a line of their own, zeros included: `state_write_errors=0`
    // is the news there. The daemon sends them only while it keeps ports across restarts.
    let is_restart =
        |name: &str| IoCounter::from_name(name).is_some_and(|c| c.presence() == Presence::Restart);
    let (restart, io): (Vec<_>, Vec<_>) = s.io_counters.iter().partition(|(k, _)| is_restart(k));
    let core: Vec<_> = s.core_counters.iter().collect();
    for (title, counters) in [("core counters", core), ("io counters", io)] {
        let nonzero: Vec<String> = counters
            .iter()
            .filter(|(_, v)| **v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let shown = if nonzero.is_empty() {
            "all zero".to_owned()
        } else {
            nonzero.join(" ")
        };
        let _ = writeln!(out, "{:<16} {shown}", format!("{title}:"));
    }
    if !restart.is_empty() {
        // In the daemon's order (the dump's), not the map's.
        let mut restart = restart;
        restart.sort_by_key(|(k, _)| IoCounter::from_name(k).map(IoCounter::index));
        let pairs: Vec<String> = restart.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "{:<16} {}", "restart:", pairs.join(" "));
    }
    out
}

fn list(l: &MappingList) -> String {
    if l.mappings.is_empty() {
        return "no mappings\n".to_owned();
    }
    let rows: Vec<Vec<String>> = l
        .mappings
        .iter()
        .map(|m| {
            let owner = match &m.owner_device {
                Some(d) => format!("{} ({d})", m.owner_client),
                None => m.owner_client.to_string(),
            };
            let flags = if m.flags.is_empty() {
                "-".to_owned()
            } else {
                m.flags.join(",")
            };
            vec![
                m.local.to_string(),
                m.mapped.to_string(),
                owner,
                m.refcount.to_string(),
                m.role.clone(),
                flags,
                duration_ms(m.age_ms),
            ]
        })
        .collect();
    let mut out = table(
        &["LOCAL", "MAPPED", "OWNER", "REFS", "ROLE", "FLAGS", "AGE"],
        &rows,
    );
    let _ = writeln!(
        out,
        "{}",
        count(l.mappings.len() as u64, "mapping", "mappings")
    );
    out
}

fn peers(p: &PeersReport) -> String {
    let mut out = String::new();
    out.push_str("Exchanges in flight:\n");
    if p.in_flight.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = p
            .in_flight
            .iter()
            .map(|e| {
                vec![
                    e.peer.to_string(),
                    e.state.clone(),
                    e.local.map_or_else(|| "-".to_owned(), |l| l.to_string()),
                    e.retransmissions.to_string(),
                    duration_ms(e.age_ms),
                    duration_ms(e.expires_in_ms),
                ]
            })
            .collect();
        out.push_str(&table(
            &["PEER", "STATE", "LOCAL", "RETX", "AGE", "EXPIRES IN"],
            &rows,
        ));
    }
    out.push_str("\nRecently finished (ours):\n");
    if p.recent.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = p
            .recent
            .iter()
            .map(|r| {
                vec![
                    r.peer.to_string(),
                    r.outcome.clone(),
                    r.retransmissions.to_string(),
                    duration_ms(r.took_ms),
                    format!("{} ago", duration_ms(r.ended_ago_ms)),
                ]
            })
            .collect();
        out.push_str(&table(&["PEER", "OUTCOME", "RETX", "TOOK", "ENDED"], &rows));
    }
    out.push_str("\nPer peer:\n");
    if p.peers.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = p
            .peers
            .iter()
            .map(|e| {
                // No `..`: a tally the core adds gets its column here.
                let PeerTally {
                    requests,
                    retransmissions,
                    accepts,
                    rejects,
                    timeouts,
                    requests_in,
                    auth,
                } = e.tally;
                vec![
                    e.ip.to_string(),
                    requests.to_string(),
                    retransmissions.to_string(),
                    accepts.to_string(),
                    rejects.to_string(),
                    timeouts.to_string(),
                    requests_in.to_string(),
                    peer_auth(auth),
                    format!("{} ago", duration_ms(e.last_seen_ms)),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "PEER",
                "REQUESTS",
                "RETX",
                "ACCEPTS",
                "REJECTS",
                "TIMEOUTS",
                "REQUESTS IN",
                "AUTH",
                "LAST SEEN",
            ],
            &rows,
        ));
    }
    out
}

/// `keyed (key 3)`, `unkeyed`, `failing: wrong key (12)`.
pub fn peer_auth(auth: PeerAuth) -> String {
    match auth {
        PeerAuth::Unkeyed => "unkeyed".to_owned(),
        PeerAuth::Keyed { key_id } => format!("keyed (key {key_id})"),
        PeerAuth::Failing { reason, count } => format!("failing: {} ({count})", reason.describe()),
    }
}

fn keys(k: &KeysReport) -> String {
    let Some(source) = &k.source else {
        return "No fleet keys: iwpmd.conf sets no peer_key_file, so peer datagrams are \
                neither signed nor checked.\n"
            .to_owned();
    };
    let mut out = match k.loaded_ago_ms {
        Some(ms) => format!(
            "Fleet keys from {source}, loaded {} ago:\n",
            duration_ms(ms)
        ),
        None => format!("Fleet keys from {source}:\n"),
    };
    let rows: Vec<Vec<String>> = k
        .keys
        .iter()
        .map(|key| {
            let role = if key.signing {
                "signing"
            } else if key.accept_only {
                "accept-only"
            } else {
                "accepted"
            };
            vec![
                key.id.to_string(),
                role.to_owned(),
                key.signed.to_string(),
                key.verified.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(&["ID", "USE", "SIGNED", "VERIFIED"], &rows));
    if let Some(e) = &k.reload_error {
        let _ = writeln!(
            out,
            "\nThe last reload (SIGHUP) was refused; the keys above stay in use:\n  {e}"
        );
    }
    out
}

fn log_level(l: &LogLevelReply) -> String {
    match &l.previous {
        Some(prev) => format!("log filter: {} (was: {prev})\n", l.filter),
        None => format!("log filter: {}\n", l.filter),
    }
}

fn probe(p: &ProbeReport) -> String {
    let ms = p.elapsed_us as f64 / 1000.0;
    if p.reachable {
        format!(
            "{}: reachable: the port mapper answered with {} in {ms:.1} ms ({} sent from {})\n",
            p.target,
            match p.answer.as_str() {
                "rejected" => "a REJECT",
                "accepted" => "an ACCEPT",
                other => other,
            },
            count(p.requests, "request", "requests"),
            p.local
        )
    } else {
        format!(
            "{}: BLOCKED: no answer in {ms:.0} ms to {} from {}: UDP port {} is \
             filtered, or no port mapper runs there\n",
            p.target,
            count(p.requests, "request", "requests"),
            p.local,
            p.target.port()
        )
    }
}
