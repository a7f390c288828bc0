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
pub(crate) const ACK_SENDS: u32 = 3;

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
    /// REMOTE_INFO: what the loss rate leads one to expect, how that is computed, and what
    /// the relays saw. The expectation cannot be exact (which REMOTE_INFOs wait depends on
    /// when ACKs were lost, and how often A sends an ACK on timing), so it is a binomial
    /// mean with its 95 % range; the verdict rests on what the relays observed: a
    /// connection fails only if the relay dropped every ACK of its exchange.
    pub(super) fn loss_cause(&self) -> Option<String> {
        let loss = self.settings.loss_percent;
        let held = self.peer.query_replies_held;
        let all_missing = self.mismatches.iter().all(Mismatch::is_missing_remote_info);
        if loss <= 0.0 || held == 0 || self.mismatches.is_empty() || !all_missing {
            return None;
        }
        let n = self.mismatches.len() as u64;
        let all_lost = (loss / 100.0).powi(ACK_SENDS as i32);
        let mean = held as f64 * all_lost;
        let (low, high) = binomial_range(held, all_lost);
        let bound = self.peer.exchanges_every_ack_lost;
        let verdict = if n <= bound {
            "expected with --loss, as the relays' drops explain"
        } else {
            "more than the loss explains"
        };
        Some(format!(
            "{n} connections reached B without REMOTE_INFO at {loss} % loss; the relays \
             dropped all {ACK_SENDS} ACKs of {bound} exchanges (A sends that many only while \
             a REMOTE_INFO waits); {verdict}. Expected about {mean:.1} (95 % range \
             {low}-{high}): lost ACKs kept B's REMOTE_INFO tokens, so {held} REMOTE_INFOs \
             waited for A's ACK, which A sends {ACK_SENDS} times, all lost in {:.1} % of \
             cases (binomial; more where A sent fewer ACKs)",
            all_lost * 100.0
        ))
    }
}

/// The 2.5 % and 97.5 % quantiles of a binomial count (`n` trials, success `p`).
fn binomial_range(n: u64, p: f64) -> (u64, u64) {
    if n == 0 || p <= 0.0 {
        return (0, 0);
    }
    if p >= 1.0 {
        return (n, n);
    }
    // pmf(0) = (1-p)^n, then pmf(k+1) = pmf(k) * (n-k)/(k+1) * p/(1-p), in logs so that a
    // large n does not underflow.
    let ratio = (p / (1.0 - p)).ln();
    let mut log_pmf = n as f64 * (1.0 - p).ln();
    let mut cdf = 0.0;
    let mut low = None;
    for k in 0..=n {
        if k > 0 {
            log_pmf += ((n - k + 1) as f64 / k as f64).ln() + ratio;
        }
        cdf += log_pmf.exp();
        if low.is_none() && cdf >= 0.025 {
            low = Some(k);
        }
        if cdf >= 0.975 {
            return (low.unwrap_or(k), k);
        }
    }
    (low.unwrap_or(n), n)
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
    fn binomial_ranges() {
        assert_eq!(binomial_range(212, 0.027), (2, 11));
        assert_eq!(binomial_range(0, 0.5), (0, 0));
        assert_eq!(binomial_range(10, 1.0), (10, 10));
        // Symmetric around the mean for p = 1/2.
        assert_eq!(binomial_range(100, 0.5), (40, 60));
    }

    #[test]
    fn loss_that_explains_the_missing_remote_infos_says_so() {
        let mut r = Report::default();
        r.settings.loss_percent = 30.0;
        r.peer.query_replies_held = 212;
        r.connections.established = 1000;
        r.connections.consistent = 996;
        r.mismatches = (0..4).map(no_remote_info).collect();
        r.peer.exchanges_every_ack_lost = 5;
        assert_eq!(
            cause_lines(&r),
            [
                "4 connections reached B without REMOTE_INFO at 30 % loss; the relays dropped \
              all 3 ACKs of 5 exchanges (A sends that many only while a REMOTE_INFO waits); \
              expected with --loss, as the relays' drops explain. Expected about 5.7 (95 % \
              range 2-11): lost ACKs kept B's REMOTE_INFO tokens, so 212 REMOTE_INFOs waited \
              for A's ACK, which A sends 3 times, all lost in 2.7 % of cases (binomial; more \
              where A sent fewer ACKs)"
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

        // More failures than exchanges that lost every ACK: the loss does not explain them.
        r.mismatches = (0..6).map(no_remote_info).collect();
        assert!(
            cause_lines(&r)[0].contains("; more than the loss explains."),
            "{:?}",
            cause_lines(&r)
        );
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
