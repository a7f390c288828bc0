//! The run's results: one serialisable structure, printed as text for people and as JSON
//! for machines (the same numbers).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::histogram::Bucket;
use crate::lab::RestartOutcome;
use crate::mismatch::Mismatch;
pub use crate::mismatch::{Resource, Shortage};

pub(crate) mod causes;

/// p50/p99/max of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank).
    pub p99_ms: f64,
    /// 99.9th percentile (nearest rank).
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Percentiles {
    /// From samples (any order); `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Percentiles> {
        if samples.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let i = (p * v.len() as f64).ceil() as usize;
            v[i.clamp(1, v.len()) - 1]
        };
        Some(Percentiles {
            count: v.len(),
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            p999_ms: rank(0.999),
            max_ms: v[v.len() - 1],
        })
    }
}

/// What was run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunSettings {
    /// Connections asked for.
    pub connections: usize,
    /// Concurrency.
    pub concurrency: usize,
    /// "ipv4" or "ipv6".
    pub family: String,
    /// "loopback", "private namespace" or "namespaces + veth".
    pub topology: String,
    /// "port-mapped (FLAGS=0)" or "no port map (FLAGS=1, siw)".
    pub mode: String,
    /// Host A's address.
    pub host_a: String,
    /// Host B's address.
    pub host_b: String,
    /// The daemons' peer port.
    pub peer_port: u16,
    /// Relays in front of the daemons.
    pub relays: bool,
    /// Relay loss, percent.
    pub loss_percent: f64,
    /// Relay duplication, percent.
    pub duplicate_percent: f64,
    /// Relay reordering, percent.
    pub reorder_percent: f64,
    /// Whether B's daemon was killed and restarted.
    pub restart_daemon: bool,
    /// The daemon binary.
    pub daemon_binary: String,
}

/// Connection outcomes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Connections {
    /// Attempted.
    pub attempted: usize,
    /// Established (and still up at the peak).
    pub established: usize,
    /// Not established.
    pub failed: usize,
    /// Failures by category.
    pub failures: BTreeMap<String, usize>,
    /// Established with the daemons' mapping (not the kernel's unmapped fallback).
    pub mapped: usize,
    /// Passive ends that found the peer's real address in the remote-info table.
    pub remote_info_found: usize,
    /// Passive ends that needed no REMOTE_INFO and got none: A is not port mapped (its
    /// mapped address is its own), so B's kernel sees A's real address without one.
    pub remote_info_not_needed: usize,
    /// Passive ends whose REMOTE_INFO reached B's kernel only after the connection (the
    /// kernel then reports the peer's mapped address and keeps the entry forever). A race
    /// the protocol allows: B's daemon sends its UDP ACCEPT before its REMOTE_INFO, and the
    /// connection can overtake it. Reported, not counted as a mismatch; a REMOTE_INFO that
    /// never arrives is one.
    pub remote_info_late: usize,
    /// Connections whose both ends, both daemons and both kernels agree.
    pub consistent: usize,
}

/// Mapping counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Mappings {
    /// Mappings held by A's daemon at the peak.
    pub peak_a: usize,
    /// Mappings held by B's daemon at the peak.
    pub peak_b: usize,
    /// TCP ports A's daemon held at the peak.
    pub ports_held_a: u64,
    /// TCP ports B's daemon held at the peak.
    pub ports_held_b: u64,
    /// Mappings left in A's daemon after teardown.
    pub after_teardown_a: usize,
    /// Mappings left in B's daemon after teardown.
    pub after_teardown_b: usize,
}

/// Peer protocol traffic (both daemons, all incarnations).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Peer {
    /// Exchanges answered to A's kernel (QUERY replies with the peer's mapping).
    pub exchanges: u64,
    /// REMOTE_INFO messages B's daemon sent to its kernel.
    pub remote_infos: u64,
    /// Of `remote_infos`, those an incoming connection found in B's kernel (the rest are
    /// left over: [`Peer::stale_remote_info`] says why).
    pub remote_infos_used: u64,
    /// REQUESTs sent (retransmissions included).
    pub requests: u64,
    /// ACCEPTs sent.
    pub accepts: u64,
    /// ACKs sent.
    pub acks: u64,
    /// REJECTs sent.
    pub rejects: u64,
    /// REQUEST + ACCEPT retransmissions (the daemons' count).
    pub retransmissions: u64,
    /// REQUESTs the relays saw resent (the second and later of an exchange), with the
    /// relays; the rest of `retransmissions` are ACCEPTs.
    pub request_resends: u64,
    /// Exchanges whose REQUEST the relays saw more than once.
    pub exchanges_resent: u64,
    /// Exchanges whose ACK A's daemon sent as often as it does while B's REMOTE_INFO waits
    /// for it (3 times) and the relays dropped every one for `--loss`: the connections the
    /// loss kept from their REMOTE_INFO, as the relays saw it.
    pub exchanges_every_ack_lost: u64,
    /// Duplicates absorbed by the daemons: repeats a daemon recognised (one killed and
    /// restarted cannot recognise what its former self answered).
    pub duplicates: u64,
    /// Datagrams the relays saw.
    pub relay_seen: u64,
    /// Datagrams the relays dropped (for `--loss`, or held by the lab).
    pub relay_dropped: u64,
    /// Of `relay_dropped`, those the lab held back on purpose: B's relay drops all peer
    /// traffic from just before the last dump of B's daemon until it is killed
    /// (`--restart-daemon`), so that dump's counters are its last.
    pub relay_blocked: u64,
    /// Extra copies the relays sent.
    pub relay_extra_copies: u64,
    /// Copies the relays held back to reorder them.
    pub relay_reordered: u64,
    /// Held-back copies that later datagrams overtook.
    pub relay_overtaken: u64,
    /// Datagrams the loss draw picked but the relays let through, because their exchange
    /// had already sent its eighth REQUEST (see the relay's docs).
    pub relay_spared: u64,
    /// REMOTE_INFO entries B's kernel still holds after teardown (a REQUEST answered
    /// twice, e.g. across a daemon restart, leaves one the kernel never consumes).
    pub stale_remote_info: usize,
    /// REMOTE_INFOs B's daemon held back for the peer's ACK, its budget spent (counter
    /// `remote_info_deferred`).
    pub remote_info_deferred: u64,
    /// Connections whose QUERY answer A's daemon held after its ACK, because the ACCEPT
    /// said B's REMOTE_INFO waits for that ACK (counter `query_replies_held`).
    pub query_replies_held: u64,
}

/// Latencies of established connections.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// From `rdma_create_id` to `ESTABLISHED`.
    pub connect: Option<Percentiles>,
    /// The daemon's own share of the QUERY: its QUERY round trip at the tap minus the
    /// peer exchange.
    pub daemon_local: Option<Percentiles>,
    /// From the first REQUEST to the ACCEPT delivered, at the relay (the UDP round trip,
    /// the remote daemon and any retransmission waits).
    pub peer_exchange: Option<Percentiles>,
    /// The rest: emulated kernel, rdma_cm and fabric (connect minus the QUERY round trip).
    pub kernel_and_fabric: Option<Percentiles>,
    /// B's listener ADD_MAPPING round trip (purely daemon-local), ms.
    pub listen_add_ms: Option<f64>,
    /// The connect latencies in log-scale buckets (see [`crate::histogram`]), from the
    /// first to the last non-empty one.
    pub connect_histogram: Vec<Bucket>,
}

/// Wall-clock phases, one after the other: they add up to `total_s`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Hosts, taps, relays, daemons started (until each said HELLO), B's listener.
    pub setup_s: f64,
    /// Opening the connections (and, with `--restart-daemon`, the restart).
    pub connect_s: f64,
    /// The cross-checks at the peak, `check_wait_s` included.
    pub check_s: f64,
    /// Of `check_s`: waiting for passive ends and for REMOTE_INFOs still on their way.
    pub check_wait_s: f64,
    /// Tearing the connections down and waiting for every table to empty.
    pub teardown_s: f64,
    /// Reading the counters and stopping the daemons with SIGTERM.
    pub stop_s: f64,
    /// Everything: the sum of the phases above.
    pub total_s: f64,
    /// Established connections per second of the connect phase.
    pub connections_per_s: f64,
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// Settings.
    pub settings: RunSettings,
    /// Outcomes.
    pub connections: Connections,
    /// Mappings.
    pub mappings: Mappings,
    /// Peer traffic.
    pub peer: Peer,
    /// Latencies.
    pub latency: Latency,
    /// Durations.
    pub timings: Timings,
    /// The daemon restart, with `--restart-daemon`.
    pub restart: Option<RestartOutcome>,
    /// Resources the daemons ran out of (the cause of failed connections, when any).
    pub shortages: Vec<Shortage>,
    /// Protocol violations the emulated kernels recorded ("host: violation").
    pub violations: Vec<String>,
    /// Every disagreement between what should hold and what did (JSON: their text).
    pub mismatches: Vec<Mismatch>,
    /// Daemon exit statuses after SIGTERM ("A", "B").
    pub daemon_exits: BTreeMap<String, String>,
    /// No failure, mismatch or violation.
    pub ok: bool,
}

impl Timings {
    /// Every phase, then the total they add up to:
    /// `setup 0.02 s + connecting 0.19 s + checks 0.03 s + teardown 0.09 s + stopping 0.05 s
    /// = 0.38 s`, with the checks' waits in parentheses when there were any.
    pub fn line(&self) -> String {
        let wait = if self.check_wait_s >= 0.005 {
            format!(
                " ({:.2} s waiting for passive ends and REMOTE_INFOs)",
                self.check_wait_s
            )
        } else {
            String::new()
        };
        format!(
            "setup {:.2} s + connecting {:.2} s + checks {:.2} s{wait} + teardown {:.2} s + \
             stopping {:.2} s = {:.2} s",
            self.setup_s, self.connect_s, self.check_s, self.teardown_s, self.stop_s, self.total_s
        )
    }
}

fn ms(p: &Option<Percentiles>) -> [String; 3] {
    match p {
        Some(p) => [
            format!("{:.3}", p.p50_ms),
            format!("{:.3}", p.p99_ms),
            format!("{:.3}", p.max_ms),
        ],
        None => ["n/a".into(), "n/a".into(), "n/a".into()],
    }
}

impl Report {
    /// The human-readable report.
    pub fn render(&self) -> String {
        let mut o = String::new();
        self.render_settings(&mut o);
        self.render_counts(&mut o);
        self.render_peer(&mut o);
        self.render_latency(&mut o);
        self.render_restart(&mut o);
        self.render_verdict(&mut o);
        o
    }

    fn render_settings(&self, o: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            o,
            "iwpm-lab: {} connections (concurrency {}), {} {}, {}",
            s.connections, s.concurrency, s.family, s.topology, s.mode
        );
        let _ = writeln!(
            o,
            "  host A {} -> host B {}, peer port {}, {}",
            s.host_a,
            s.host_b,
            s.peer_port,
            if s.relays {
                format!(
                    "daemons behind lab relays (loss {}%, duplicate {}%, reorder {}%)",
                    s.loss_percent, s.duplicate_percent, s.reorder_percent
                )
            } else {
                "daemons talk directly".to_string()
            }
        );
        let _ = writeln!(o);
    }

    fn render_counts(&self, o: &mut String) {
        let c = &self.connections;
        let m = &self.mappings;
        let failures = if c.failures.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = c.failures.iter().map(|(k, v)| format!("{v} {k}")).collect();
            format!(" ({})", parts.join(", "))
        };
        let _ = writeln!(
            o,
            "connections   {}/{} established, {} failed{failures}",
            c.established, c.attempted, c.failed
        );
        let _ = writeln!(
            o,
            "              {} mapped by the daemons, {} consistent on both sides, remote-info found {}, not needed {}",
            c.mapped, c.consistent, c.remote_info_found, c.remote_info_not_needed
        );
        if c.remote_info_late > 0 {
            let _ = writeln!(
                o,
                "              {} REMOTE_INFO arrived after their connection (race lost, see --help)",
                c.remote_info_late
            );
        }
        let _ = writeln!(
            o,
            "mappings      held at peak: A {} (TCP ports {}), B {} (TCP ports {}); after teardown: A {}, B {}",
            m.peak_a, m.ports_held_a, m.peak_b, m.ports_held_b, m.after_teardown_a, m.after_teardown_b
        );
    }

    fn render_peer(&self, o: &mut String) {
        let p = &self.peer;
        let _ = writeln!(
            o,
            "peer          {} exchanges, {} REMOTE_INFO ({} found by their connection); sent \
             REQUEST {}, ACCEPT {}, ACK {}, REJECT {}",
            p.exchanges,
            p.remote_infos,
            p.remote_infos_used,
            p.requests,
            p.accepts,
            p.acks,
            p.rejects
        );
        let _ = writeln!(
            o,
            "              retransmissions {}{}, duplicates absorbed {} (repeats a daemon \
             recognised)",
            p.retransmissions,
            self.retransmissions_why(),
            p.duplicates
        );
        if self.settings.relays {
            let _ = writeln!(
                o,
                "              relays: {} datagrams seen, {} dropped{}, {} extra copies, {} held back \
                 ({} overtaken), {} spared from loss",
                p.relay_seen,
                p.relay_dropped,
                self.dropped_why(),
                p.relay_extra_copies,
                p.relay_reordered,
                p.relay_overtaken,
                p.relay_spared
            );
        }
        if p.stale_remote_info > 0 {
            let _ = writeln!(o, "              {}", self.stale_remote_info_line());
        }
    }

    /// Which datagrams the retransmissions were, where the relays saw them: REQUESTs of
    /// how many exchanges (one may resend more than once), and ACCEPTs.
    fn retransmissions_why(&self) -> String {
        let p = &self.peer;
        if !self.settings.relays || p.retransmissions == 0 {
            return String::new();
        }
        let accepts = p.retransmissions.saturating_sub(p.request_resends);
        format!(
            " ({} REQUESTs resent for {} exchanges, {accepts} ACCEPTs)",
            p.request_resends, p.exchanges_resent
        )
    }

    /// What the relays' drops were, when the lab itself caused some of them.
    fn dropped_why(&self) -> String {
        let p = &self.peer;
        if p.relay_blocked == 0 {
            return String::new();
        }
        let loss = p.relay_dropped.saturating_sub(p.relay_blocked);
        let by_loss = if loss > 0 {
            format!("{loss} for --loss, ")
        } else {
            String::new()
        };
        format!(
            " ({by_loss}{} by the lab's hold on B's peer traffic around the kill: datagrams of \
             exchanges then in flight, which A's daemon completes by resending their REQUEST \
             after 1 s (the retransmissions above); expected)",
            p.relay_blocked
        )
    }

    /// The REMOTE_INFO entries no connection consumed, and why they are there.
    fn stale_remote_info_line(&self) -> String {
        let left = self.peer.stale_remote_info;
        let late = self.connections.remote_info_late.min(left);
        let repeats = left - late;
        let mut why = Vec::new();
        if late > 0 {
            why.push(format!("{late} arrived after their connection (see above)"));
        }
        if repeats > 0 {
            let verdict = if self.settings.restart_daemon {
                "B's killed daemon had answered the REQUEST (REMOTE_INFO sent, its ACCEPT lost \
                 in the hold or the kill) and the restarted one answered its retransmission \
                 again; the connection consumed the newer entry; expected with --restart-daemon"
            } else {
                "a REQUEST answered twice; not expected without --restart-daemon"
            };
            why.push(format!("{repeats} repeat an earlier one ({verdict})"));
        }
        format!(
            "{left} REMOTE_INFO entries left unconsumed in B's kernel, which keeps them as \
             Linux does: {}",
            why.join("; ")
        )
    }

    fn render_latency(&self, o: &mut String) {
        let l = &self.latency;
        let _ = writeln!(
            o,
            "latency (ms)        {:>10} {:>10} {:>10}",
            "p50", "p99", "max"
        );
        for (name, v) in [
            ("connect", &l.connect),
            ("  daemon-local", &l.daemon_local),
            ("  peer exchange", &l.peer_exchange),
            ("  kernel+fabric", &l.kernel_and_fabric),
        ] {
            let [a, b, c] = ms(v);
            let _ = writeln!(o, "  {name:<18}{a:>10} {b:>10} {c:>10}");
        }
        if let Some(add) = l.listen_add_ms {
            let _ = writeln!(o, "  listen (ADD_MAPPING round trip): {add:.3} ms");
        }
        if !l.connect_histogram.is_empty() {
            let _ = writeln!(
                o,
                "connect latency distribution (log-scale buckets; steps 1 s apart are peer \
                 retransmissions)"
            );
            o.push_str(&crate::histogram::render(&l.connect_histogram));
        }
        let t = &self.timings;
        let _ = writeln!(
            o,
            "throughput    {:.0} connections/s ({} in {:.2} s)",
            t.connections_per_s, self.connections.established, t.connect_s
        );
        let _ = writeln!(o, "time          {}", t.line());
    }

    fn render_restart(&self, o: &mut String) {
        let Some(r) = &self.restart else { return };
        let in_flight = r.in_flight_at_kill.map_or(String::new(), |n| {
            format!(" with {n} connections in flight")
        });
        let _ = writeln!(
            o,
            "restart       B's iwpmd pid {} killed (-9){in_flight}, restarted as pid {}; down {:.0} ms",
            r.old_pid, r.new_pid, r.downtime_ms
        );
        let _ = writeln!(
            o,
            "              mappings before the kill {}, after the restart {}, mappings lost: {}",
            r.daemon_mappings_before,
            r.daemon_mappings_after,
            r.mappings_lost.len()
        );
        let _ =
            writeln!(
            o,
            "              kernel mappings recovered {}/{} ({} replayed), same mapped ports: {}",
            r.recovered,
            r.kernel_mappings,
            r.replayed,
            if r.lost.is_empty() && r.changed.is_empty() { "yes" } else { "NO" }
        );
    }

    fn render_verdict(&self, o: &mut String) {
        let exits: Vec<String> = self
            .daemon_exits
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(o, "daemons       exit after SIGTERM: {}", exits.join(", "));
        for s in &self.shortages {
            let _ = writeln!(o, "cause         {s}");
        }
        if let Some(cause) = self.loss_cause() {
            let _ = writeln!(o, "cause         {cause}");
        }
        let _ = writeln!(o, "violations    {}", self.violations.len());
        for v in self.violations.iter().take(10) {
            let _ = writeln!(o, "  {v}");
        }
        let _ = writeln!(o, "mismatches    {}", self.mismatches_header());
        for v in self.mismatches.iter().take(20) {
            let _ = writeln!(o, "  {v}");
        }
        if self.mismatches.len() > 20 {
            let _ = writeln!(o, "  ... and {} more", self.mismatches.len() - 20);
        }
        let _ = writeln!(o, "result        {}", if self.ok { "OK" } else { "FAILED" });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwpm_testkit::report_text::phases_and_total;

    #[test]
    fn restart_drops_and_unconsumed_remote_infos_are_explained() {
        let mut r = Report::default();
        r.settings.relays = true;
        r.settings.restart_daemon = true;
        r.peer.relay_dropped = 64;
        r.peer.relay_blocked = 64;
        r.peer.stale_remote_info = 14;
        let text = r.render();
        assert!(
            text.contains("64 dropped (64 by the lab's hold on B's peer traffic around the kill"),
            "{text}"
        );
        assert!(
            text.contains("14 REMOTE_INFO entries left unconsumed in B's kernel"),
            "{text}"
        );
        assert!(
            text.contains("14 repeat an earlier one")
                && text.contains("expected with --restart-daemon"),
            "{text}"
        );
        r.settings.restart_daemon = false;
        r.peer.relay_dropped = 70;
        r.peer.relay_blocked = 0;
        r.connections.remote_info_late = 4;
        let text = r.render();
        assert!(text.contains("70 dropped, "), "{text}");
        assert!(text.contains("4 arrived after their connection"), "{text}");
        assert!(
            text.contains("10 repeat an earlier one (a REQUEST answered twice; not expected"),
            "{text}"
        );
    }

    #[test]
    fn the_time_line_lists_phases_that_add_up_to_the_total() {
        let mut t = Timings {
            setup_s: 0.0221,
            connect_s: 9.054,
            check_s: 1.0349,
            check_wait_s: 1.004,
            teardown_s: 0.0792,
            stop_s: 0.0254,
            ..Timings::default()
        };
        t.total_s = t.setup_s + t.connect_s + t.check_s + t.teardown_s + t.stop_s;
        let r = Report {
            timings: t,
            ..Report::default()
        };
        let text = r.render();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("time          "))
            .unwrap();
        assert_eq!(
            line,
            "setup 0.02 s + connecting 9.05 s + checks 1.03 s (1.00 s waiting for passive ends \
             and REMOTE_INFOs) + teardown 0.08 s + stopping 0.03 s = 10.22 s"
        );
        let (phases, total) = phases_and_total(line);
        assert_eq!(phases.len(), 5, "{line}");
        let sum: f64 = phases.iter().sum();
        // Each printed part is rounded to 0.005 s at most.
        assert!(
            (sum - total).abs() <= 0.005 * 6.0,
            "{sum} != {total}: {line}"
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = Percentiles::of(&samples).unwrap();
        assert_eq!(p.count, 100);
        assert!((p.p50_ms - 50.0).abs() < 1e-9);
        assert!((p.p99_ms - 99.0).abs() < 1e-9);
        assert!((p.max_ms - 100.0).abs() < 1e-9);
        assert_eq!(Percentiles::of(&[]), None);
        let one = Percentiles::of(&[Duration::from_millis(7)]).unwrap();
        assert!((one.p50_ms - 7.0).abs() < 1e-9 && (one.p99_ms - 7.0).abs() < 1e-9);
    }
}
