//! Snapshots of what `iwpmctl` prints for people, for fixed replies, and of the
//! OpenMetrics rendering (which must also pass the strict checker).

use std::collections::BTreeMap;

use iwpm_control::render::{self, render};
use iwpm_control::{
    metrics, AuthFailure, ClientEntry, ExchangeEntry, KeyUse, KeysReport, LogLevelReply,
    MappingEntry, MappingList, PeerAuth, PeerEntry, PeerTally, PeersReport, ProbeReport,
    RecentEntry, Reply, StatusReport, TextReply,
};

fn status() -> StatusReport {
    StatusReport {
        version: "0.1.0".into(),
        pid: 4242,
        abi: 4,
        handshake: "done".into(),
        uptime_secs: 3723.4,
        kernel_link: "netlink".into(),
        clients: vec![ClientEntry {
            index: 2,
            ibdev: "siw0".into(),
            interface: "eth0".into(),
        }],
        mappings: 2,
        ports_held: 1,
        exchanges: 1,
        control_clients: 1,
        core_counters: BTreeMap::from([
            ("mappings".into(), 2),
            ("netlink_in_add_mapping".into(), 5),
            ("rejects_sent".into(), 0),
        ]),
        io_counters: BTreeMap::from([
            ("kernel_rx".into(), 9),
            ("ports_held".into(), 1),
            ("fd_store_sent".into(), 2),
            ("fd_store_failed".into(), 0),
            ("state_writes".into(), 7),
            ("state_write_errors".into(), 0),
        ]),
        gauges: vec!["mappings".into(), "ports_held".into()],
    }
}

#[test]
fn status_snapshot() {
    assert_eq!(
        render(&Reply::Status(status())),
        "\
version:         0.1.0
pid:             4242
kernel link:     netlink
iwpm ABI:        4
handshake:       done
uptime:          1h02m03s
kernel clients:  1 (#2: siw0 on eth0)
mappings:        2 (1 port held)
exchanges:       1
control clients: 1
core counters:   mappings=2 netlink_in_add_mapping=5
io counters:     kernel_rx=9 ports_held=1
restart:         fd_store_sent=2 fd_store_failed=0 state_writes=7 state_write_errors=0
"
    );
    // Without the restart machinery the daemon sends no restart counters, and no line.
    let mut off = status();
    off.io_counters
        .retain(|name, _| !name.starts_with("fd_store") && !name.starts_with("state_write"));
    let text = render(&Reply::Status(off));
    assert!(
        text.ends_with("io counters:     kernel_rx=9 ports_held=1\n"),
        "{text}"
    );
}

#[test]
fn list_snapshot() {
    let list = MappingList {
        mappings: vec![
            MappingEntry {
                local: "10.0.0.1:5000".parse().unwrap(),
                mapped: "10.0.0.1:41234".parse().unwrap(),
                owner_client: 2,
                owner_device: Some("siw0".into()),
                refcount: 1,
                flags: vec![],
                role: "connector".into(),
                age_ms: 850,
            },
            MappingEntry {
                local: "[::]:4000".parse().unwrap(),
                mapped: "[::]:4000".parse().unwrap(),
                owner_client: 2,
                owner_device: None,
                refcount: 3,
                flags: vec!["wildcard".into(), "no_port_map".into()],
                role: "listener".into(),
                age_ms: 125_000,
            },
        ],
    };
    assert_eq!(
        render(&Reply::List(list.clone())),
        "\
LOCAL          MAPPED          OWNER     REFS  ROLE       FLAGS                 AGE
10.0.0.1:5000  10.0.0.1:41234  2 (siw0)  1     connector  -                     850ms
[::]:4000      [::]:4000       2         3     listener   wildcard,no_port_map  2m05s
2 mappings
"
    );
    assert_eq!(
        render(&Reply::List(MappingList { mappings: vec![] })),
        "no mappings\n"
    );
    let mut one = list;
    one.mappings.truncate(1);
    let text = render(&Reply::List(one));
    assert!(text.ends_with("\n1 mapping\n"), "{text}");
}

/// Every count a person reads takes the number its noun is in, and `kernel clients`
/// is the count `iwpmd_kernel_clients` reports, not a client's index.
#[test]
fn status_counts_agree_with_the_metrics_and_their_nouns() {
    let mut s = status();
    s.ports_held = 2;
    s.clients.push(ClientEntry {
        index: 5,
        ibdev: "siw1".into(),
        interface: "eth1".into(),
    });
    let text = render(&Reply::Status(s.clone()));
    assert!(
        text.contains("\nkernel clients:  2 (#2: siw0 on eth0, #5: siw1 on eth1)\n"),
        "{text}"
    );
    assert!(
        text.contains("\nmappings:        2 (2 ports held)\n"),
        "{text}"
    );
    let prom = metrics::render(&s);
    assert!(prom.contains("\niwpmd_kernel_clients 2\n"), "{prom}");
    s.clients.clear();
    let text = render(&Reply::Status(s));
    assert!(text.contains("\nkernel clients:  0\n"), "{text}");
}

#[test]
fn peers_snapshot() {
    let p = PeersReport {
        in_flight: vec![ExchangeEntry {
            peer: "10.0.0.2:3935".parse().unwrap(),
            state: "requesting".into(),
            local: Some("10.0.0.1:5000".parse().unwrap()),
            retransmissions: 2,
            age_ms: 2100,
            expires_in_ms: 7900,
        }],
        recent: vec![RecentEntry {
            peer: "10.0.0.3".parse().unwrap(),
            outcome: "timed-out".into(),
            retransmissions: 9,
            took_ms: 10_000,
            ended_ago_ms: 61_000,
        }],
        peers: vec![PeerEntry {
            ip: "10.0.0.2".parse().unwrap(),
            tally: PeerTally {
                requests: 4,
                retransmissions: 2,
                accepts: 3,
                rejects: 0,
                timeouts: 0,
                requests_in: 1,
                auth: PeerAuth::Keyed { key_id: 3 },
            },
            last_seen_ms: 2100,
        }],
    };
    assert_eq!(
        render(&Reply::Peers(p)),
        "\
Exchanges in flight:
PEER           STATE       LOCAL          RETX  AGE   EXPIRES IN
10.0.0.2:3935  requesting  10.0.0.1:5000  2     2.1s  7.9s

Recently finished (ours):
PEER      OUTCOME    RETX  TOOK   ENDED
10.0.0.3  timed-out  9     10.0s  1m01s ago

Per peer:
PEER      REQUESTS  RETX  ACCEPTS  REJECTS  TIMEOUTS  REQUESTS IN  AUTH           LAST SEEN
10.0.0.2  4         2     3        0        0         1            keyed (key 3)  2.1s ago
"
    );
}

/// Every authentication state as the `peers` table shows it.
#[test]
fn peer_auth_states() {
    let cases = [
        (PeerAuth::Unkeyed, "unkeyed"),
        (PeerAuth::Keyed { key_id: 3 }, "keyed (key 3)"),
        (
            PeerAuth::Failing {
                reason: AuthFailure::BadMac,
                count: 12,
            },
            "failing: wrong key (12)",
        ),
        (
            PeerAuth::Failing {
                reason: AuthFailure::Clock,
                count: 3,
            },
            "failing: clock (3)",
        ),
        (
            PeerAuth::Failing {
                reason: AuthFailure::UnknownKey,
                count: 1,
            },
            "failing: unknown key id (1)",
        ),
        (
            PeerAuth::Failing {
                reason: AuthFailure::Replayed,
                count: 2,
            },
            "failing: replayed (2)",
        ),
        (
            PeerAuth::Failing {
                reason: AuthFailure::Missing,
                count: 5,
            },
            "failing: not authenticated (5)",
        ),
    ];
    for (auth, want) in cases {
        assert_eq!(render::peer_auth(auth), want);
    }
}

#[test]
fn keys_snapshots() {
    let key = |id, signing, accept_only, signed, verified| KeyUse {
        id,
        signing,
        accept_only,
        signed,
        verified,
    };
    let mut k = KeysReport {
        source: Some("/etc/iwpmd/peer-keys".into()),
        loaded_ago_ms: Some(62_000),
        reload_error: None,
        keys: vec![
            key(1, false, false, 120, 118),
            key(2, true, false, 7, 5),
            key(3, false, true, 0, 2),
        ],
    };
    assert_eq!(
        render(&Reply::Keys(k.clone())),
        "\
Fleet keys from /etc/iwpmd/peer-keys, loaded 1m02s ago:
ID  USE          SIGNED  VERIFIED
1   accepted     120     118
2   signing      7       5
3   accept-only  0       2
"
    );
    k.reload_error = Some("/etc/iwpmd/peer-keys: line 4: key 4 is 8 bytes".into());
    assert!(render(&Reply::Keys(k)).ends_with(
        "\nThe last reload (SIGHUP) was refused; the keys above stay in use:\n  \
         /etc/iwpmd/peer-keys: line 4: key 4 is 8 bytes\n"
    ));
    let none = KeysReport {
        source: None,
        loaded_ago_ms: None,
        reload_error: None,
        keys: vec![],
    };
    assert_eq!(
        render(&Reply::Keys(none)),
        "No fleet keys: iwpmd.conf sets no peer_key_file, so peer datagrams are neither \
         signed nor checked.\n"
    );
}

#[test]
fn probe_log_level_and_text_snapshots() {
    let mut p = ProbeReport {
        target: "192.0.2.20:3935".parse().unwrap(),
        local: "192.0.2.10".parse().unwrap(),
        reachable: true,
        answer: "rejected".into(),
        elapsed_us: 312,
        requests: 1,
    };
    assert_eq!(
        render(&Reply::Probe(p.clone())),
        "192.0.2.20:3935: reachable: the port mapper answered with a REJECT in 0.3 ms (1 request sent from 192.0.2.10)\n"
    );
    p.reachable = false;
    p.answer = "no-answer".into();
    p.elapsed_us = 1_500_400;
    p.requests = 5;
    assert_eq!(
        render(&Reply::Probe(p)),
        "192.0.2.20:3935: BLOCKED: no answer in 1500 ms to 5 requests from 192.0.2.10: UDP port 3935 is filtered, or no port mapper runs there\n"
    );
    assert_eq!(
        render(&Reply::LogLevel(LogLevelReply {
            filter: "debug".into(),
            previous: Some("info".into())
        })),
        "log filter: debug (was: info)\n"
    );
    assert_eq!(
        render(&Reply::Dump(TextReply {
            text: "print_iwpm_mapped_ports:".into()
        })),
        "print_iwpm_mapped_ports:\n"
    );
}

#[test]
fn metrics_snapshot_is_valid_openmetrics() {
    let text = metrics::render(&status());
    assert_eq!(
        text,
        "\
# TYPE iwpmd_build info
# HELP iwpmd_build iwpmd version and kernel link state.
iwpmd_build_info{version=\"0.1.0\",abi=\"4\",handshake=\"done\"} 1
# TYPE iwpmd_uptime_seconds gauge
# UNIT iwpmd_uptime_seconds seconds
# HELP iwpmd_uptime_seconds Time since the daemon started.
iwpmd_uptime_seconds 3723.400
# TYPE iwpmd_kernel_clients gauge
# HELP iwpmd_kernel_clients Registered kernel clients.
iwpmd_kernel_clients 1
# TYPE iwpmd_mappings gauge
# HELP iwpmd_mappings Mappings held.
iwpmd_mappings 2
# TYPE iwpmd_ports_held gauge
# HELP iwpmd_ports_held TCP ports held for mappings.
iwpmd_ports_held 1
# TYPE iwpmd_exchanges gauge
# HELP iwpmd_exchanges Peer exchanges in flight.
iwpmd_exchanges 1
# TYPE iwpmd_control_clients gauge
# HELP iwpmd_control_clients Connected control clients.
iwpmd_control_clients 1
# TYPE iwpmd_core_netlink_in_add_mapping counter
# HELP iwpmd_core_netlink_in_add_mapping Kernel messages received, by op (decoded or not).
iwpmd_core_netlink_in_add_mapping_total 5
# TYPE iwpmd_core_rejects_sent counter
# HELP iwpmd_core_rejects_sent REJECTs sent (REQUEST for an address with no mapping).
iwpmd_core_rejects_sent_total 0
# TYPE iwpmd_io_kernel_rx counter
# HELP iwpmd_io_kernel_rx Datagrams received from the kernel.
iwpmd_io_kernel_rx_total 9
# EOF
"
    );
    let samples = metrics::parse(&text).unwrap();
    assert_eq!(samples.len(), 10);
    assert_eq!(samples[0].labels[2], ("handshake".into(), "done".into()));
    // A label value that needs escaping stays valid.
    let mut odd = status();
    odd.version = "0.1.0 \"dev\"\\x".into();
    let text = metrics::render(&odd);
    let samples = metrics::parse(&text).unwrap();
    assert_eq!(samples[0].labels[0].1, odd.version);
}

/// `iwpmctl metrics` prints the Prometheus text format node_exporter's textfile collector
/// reads: `info` is a gauge named with its sample, counters are typed under their `_total`
/// name, and `# UNIT` / `# EOF` are gone; the samples are the OpenMetrics ones.
#[test]
fn textfile_form_for_node_exporter() {
    let text = metrics::textfile(&metrics::render(&status()));
    assert!(text.starts_with(
        "\
# TYPE iwpmd_build_info gauge
# HELP iwpmd_build_info iwpmd version and kernel link state.
iwpmd_build_info{version=\"0.1.0\",abi=\"4\",handshake=\"done\"} 1
# TYPE iwpmd_uptime_seconds gauge
# HELP iwpmd_uptime_seconds Time since the daemon started.
iwpmd_uptime_seconds 3723.400
"
    ));
    assert!(text.contains(
        "\
# TYPE iwpmd_core_netlink_in_add_mapping_total counter
# HELP iwpmd_core_netlink_in_add_mapping_total Kernel messages received, by op (decoded or not).
iwpmd_core_netlink_in_add_mapping_total 5
"
    ));
    assert!(text.ends_with("iwpmd_io_kernel_rx_total 9\n"), "{text}");
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(
        samples,
        metrics::parse(&metrics::render(&status())).unwrap().len()
    );
}

/// Issue 43, friction 13: a peer exchange finished within the millisecond showed
/// `TOOK 0ms`; the replies count whole milliseconds, so 0 means under one.
#[test]
fn durations_under_a_millisecond_are_not_shown_as_none() {
    assert_eq!(render::duration_ms(0), "<1ms");
    assert_eq!(render::duration_ms(1), "1ms");
    assert_eq!(render::duration_ms(999), "999ms");
    assert_eq!(render::duration_ms(6_700), "6.7s");
    assert_eq!(render::duration_ms(3_723_000), "1h02m03s");
}
