//! The report's explanations of failures: the `cause` lines (a resource a daemon ran out
//! of, REMOTE_INFOs that `--loss` kept from B) and the `mismatches` header, which says
//! what its count counts.

use super::{Report, Resource, Shortage};
use crate::mismatch::Mismatch;

impl Shortage {
    /// What ran out: "file descriptors", "ephemeral ports".
    pub fn what(&self) -> &'static str {
        match self.resource {
            Resource::FileDescriptors => "file descriptors",
            Resource::Ports => "ephemeral ports",
        }
    }

    /// The limit that was reached (from the daemon's warning when it names it) and what
    /// raises it.
    fn limit_and_remedy(&self) -> (String, &'static str) {
        let logged = self.logged.as_deref().unwrap_or_default();
        match self.resource {
            Resource::FileDescriptors => {
                let key = "RLIMIT_NOFILE limit of ";
                if let Some(i) = logged.find(key) {
                    let n = logged[i + key.len()..]
                        .split([' ', ',', ';', ')'])
                        .next()
                        .unwrap_or("?");
                    (
                        format!("RLIMIT_NOFILE {n}"),
                        "raise `ulimit -n` or LimitNOFILE",
                    )
                } else if logged.contains("system-wide") {
                    ("fs.file-max".into(), "raise fs.file-max")
                } else {
                    ("EMFILE/ENFILE".into(), "raise `ulimit -n`")
                }
            }
            Resource::Ports => (
                "net.ipv4.ip_local_port_range".into(),
                "widen net.ipv4.ip_local_port_range",
            ),
        }
    }
}

/// The report's `cause` line: what ran out, its limit, what it did, what raises it.
impl std::fmt::Display for Shortage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (limit, remedy) = self.limit_and_remedy();
        write!(
            f,
            "host {}: iwpmd ran out of {} ({limit}): {} mappings refused; their connections \
             went unmapped and were rejected (B listens on its mapped port); {remedy}",
            self.host,
            self.what(),
            self.refused
        )
    }
}

/// How often A's daemon sends the ACK of an exchange whose REMOTE_INFO waits for it
/// (`NOTICE_WAITS` in iwpm-core's `machine/peer/active.rs`: the ACK, then again per wait).
const ACK_SENDS: i32 = 3;

impl Report {
    /// The mismatch count, and what it means for the connections: one mismatch is one
    /// line below, and one line may stand for many failed connections.
    pub(super) fn mismatches_header(&self) -> String {
        let n = self.mismatches.len();
        if n == 0 {
            return "0".into();
        }
        let c = &self.connections;
        let inconsistent = c.established.saturating_sub(c.consistent);
        format!(
            "{n} lines below; connections: {} failed, {inconsistent} established but \
             inconsistent",
            c.failed
        )
    }

    /// With `--loss`, when every mismatch is a connection that reached B without
    /// REMOTE_INFO: that this is what the loss rate predicts, and why.
    pub(super) fn loss_cause(&self) -> Option<String> {
        let loss = self.settings.loss_percent;
        let held = self.peer.query_replies_held;
        let all_missing = self.mismatches.iter().all(Mismatch::is_missing_remote_info);
        if loss <= 0.0 || held == 0 || self.mismatches.is_empty() || !all_missing {
            return None;
        }
        let n = self.mismatches.len();
        let all_lost = (loss / 100.0).powi(ACK_SENDS);
        let predicted = held as f64 * all_lost;
        // Well beyond a Poisson count's spread: something else is wrong too.
        let verdict = if n as f64 <= 2.0 * predicted + 3.0 {
            "expected with --loss"
        } else {
            "more than the loss explains"
        };
        Some(format!(
            "{n} connections reached B without REMOTE_INFO, about {predicted:.0} predicted at \
             {loss} % loss: lost ACKs kept B's REMOTE_INFO tokens, so {held} REMOTE_INFOs \
             waited for A's ACK, which A sends {ACK_SENDS} times, all lost in {:.1} % of \
             cases; {verdict}",
            all_lost * 100.0
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mismatch::{ConnProblem, ConnTag};

    fn no_remote_info(index: usize) -> Mismatch {
        let local: std::net::SocketAddr = "127.0.0.1:10044".parse().unwrap();
        Mismatch::Connection {
            conn: ConnTag {
                index,
                local,
                remote: "127.0.0.2:18515".parse().unwrap(),
            },
            problem: ConnProblem::NoRemoteInfo { seen: local },
        }
    }

    fn cause_lines(r: &Report) -> Vec<String> {
        r.render()
            .lines()
            .filter_map(|l| l.strip_prefix("cause         "))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn loss_that_explains_the_missing_remote_infos_says_so() {
        let mut r = Report::default();
        r.settings.loss_percent = 30.0;
        r.peer.query_replies_held = 212;
        r.connections.established = 1000;
        r.connections.consistent = 996;
        r.mismatches = (0..4).map(no_remote_info).collect();
        assert_eq!(
            cause_lines(&r),
            [
                "4 connections reached B without REMOTE_INFO, about 6 predicted at 30 % loss: \
              lost ACKs kept B's REMOTE_INFO tokens, so 212 REMOTE_INFOs waited for A's ACK, \
              which A sends 3 times, all lost in 2.7 % of cases; expected with --loss"
            ]
        );
        let text = r.render();
        assert!(
            text.contains(
                "mismatches    4 lines below; connections: 0 failed, 4 established but \
                 inconsistent"
            ),
            "{text}"
        );

        r.mismatches = (0..40).map(no_remote_info).collect();
        assert!(cause_lines(&r)[0].ends_with("; more than the loss explains"));
        r.mismatches.push(Mismatch::PassiveNotDisconnected);
        assert!(cause_lines(&r).is_empty(), "another kind of mismatch");
        r.mismatches.pop();
        r.settings.loss_percent = 0.0;
        assert!(cause_lines(&r).is_empty(), "no loss");
    }

    /// Out of descriptors: the explanation once, short, in the `cause` line; the mismatch
    /// only names it; the header says how many connections that cost.
    #[test]
    fn a_shortage_is_explained_once() {
        let shortage = Shortage {
            host: "A".into(),
            resource: Resource::FileDescriptors,
            refused: 159,
            logged: Some(
                "out of file descriptors: the daemon has reached its RLIMIT_NOFILE limit of \
                 20000 (hard 20000; 19990 ports held for mappings), so a new mapping cannot \
                 hold its port; the kernel gets CREATE_MAPPING_ERR for it. suppressed=0"
                    .into(),
            ),
        };
        let mut r = Report {
            shortages: vec![shortage.clone()],
            mismatches: vec![
                Mismatch::OutOfResources(shortage),
                Mismatch::PassiveNotDisconnected,
            ],
            ..Report::default()
        };
        r.connections.attempted = 400;
        r.connections.established = 241;
        r.connections.consistent = 241;
        r.connections.failed = 159;
        let causes = cause_lines(&r);
        assert_eq!(
            causes,
            [
                "host A: iwpmd ran out of file descriptors (RLIMIT_NOFILE 20000): 159 mappings \
              refused; their connections went unmapped and were rejected (B listens on its \
              mapped port); raise `ulimit -n` or LimitNOFILE"
            ]
        );
        let text = r.render();
        assert_eq!(text.matches("RLIMIT_NOFILE").count(), 1, "{text}");
        assert!(
            text.contains("\n  host A: iwpmd ran out of file descriptors: 159 mappings refused\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "mismatches    2 lines below; connections: 159 failed, 0 established but \
                 inconsistent"
            ),
            "{text}"
        );
    }
}
