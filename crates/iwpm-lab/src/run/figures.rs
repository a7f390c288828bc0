//! The figures a run reports besides its checks: connect latency (from the tap and the
//! relay when there are any), the peer-protocol counters of both daemons, and what a
//! daemon ran short of (descriptors, ports).

use std::net::SocketAddr;
use std::time::Duration;

use iwpm_core::Counter;
use iwpm_proto::peer::PeerMsgType;

use crate::dump::{Dump, IoCounter};
use crate::lab::{Lab, LabError, Side};
use crate::report::{Latency, Peer, Percentiles, Resource, Shortage};
use crate::workload::ConnRecord;

/// Connect latency of the established connections, split where the tap (A's QUERY) and
/// the relay (the peer exchange) can tell the parts apart; and how long B's listener ADD took.
pub(super) fn latency(lab: &Lab, records: &[ConnRecord], listen_addr: &SocketAddr) -> Latency {
    let tap = lab.a.tap.as_ref().map(|t| t.records());
    let relay = lab.b.relay.as_ref().map(|r| r.exchanges());
    let (mut total, mut local, mut peer, mut rest) = (vec![], vec![], vec![], vec![]);
    for r in records {
        let (Some(info), Some(lat)) = (r.established(), r.latency()) else {
            continue;
        };
        total.push(lat);
        let q = tap
            .as_ref()
            .and_then(|t| t.queries.get(&info.local))
            .and_then(|q| Some(q.answered?.saturating_duration_since(q.sent)));
        if let Some(q) = q {
            rest.push(lat.saturating_sub(q));
            let p = relay
                .as_ref()
                .and_then(|m| m.get(&info.local))
                .and_then(|e| {
                    Some(
                        e.first_answer_delivered?
                            .saturating_duration_since(e.first_request),
                    )
                });
            if let Some(p) = p {
                peer.push(p);
                local.push(q.saturating_sub(p));
            }
        }
    }
    let listen_add_ms = lab
        .b
        .tap
        .as_ref()
        .and_then(|t| t.records().adds.get(listen_addr).copied())
        .and_then(|a| Some(a.answered?.saturating_duration_since(a.sent).as_secs_f64() * 1e3));
    Latency {
        connect_histogram: crate::histogram::buckets(&total),
        connect: Percentiles::of(&total),
        daemon_local: Percentiles::of(&local),
        peer_exchange: Percentiles::of(&peer),
        kernel_and_fabric: Percentiles::of(&rest),
        listen_add_ms,
    }
}

/// Peer traffic of both daemons (killed ones included) and of the relays, and what the
/// daemons ran out of.
pub(super) fn peer_counters(lab: &mut Lab) -> Result<(Peer, Vec<Shortage>), LabError> {
    let ka = lab.a.host.stats().kernel;
    let kb = lab.b.host.stats().kernel;
    let mut p = Peer {
        exchanges: ka.query_replies,
        remote_infos: kb.remote_info_received,
        remote_infos_used: kb.remote_info_hits,
        ..Peer::default()
    };
    let mut shortages = Vec::new();
    for side in lab.sides_mut() {
        let d = side.total_counters()?;
        shortages.extend(shortages_of(side, &d));
        p.requests += d.core(Counter::PeerOut(PeerMsgType::Request));
        p.accepts += d.core(Counter::PeerOut(PeerMsgType::Accept));
        p.acks += d.core(Counter::PeerOut(PeerMsgType::Ack));
        p.rejects += d.core(Counter::PeerOut(PeerMsgType::Reject));
        p.retransmissions += d.core(Counter::Retransmissions);
        p.duplicates += d.core(Counter::PeerDuplicates);
        p.remote_info_deferred += d.core(Counter::RemoteInfoDeferred);
        p.query_replies_held += d.core(Counter::QueryRepliesHeld);
        if let Some(r) = &side.relay {
            let st = r.stats();
            p.relay_seen += st.seen.iter().sum::<u64>();
            p.relay_dropped += st.dropped.iter().sum::<u64>();
            p.relay_blocked += st.blocked;
            p.relay_extra_copies += st.duplicated + st.replayed;
            p.relay_reordered += st.reordered;
            p.relay_overtaken += st.overtaken;
            p.relay_spared += st.spared;
            for e in r.exchanges().values() {
                let resent = u64::from(e.requests.saturating_sub(1));
                p.request_resends += resent;
                p.exchanges_resent += u64::from(resent > 0);
                p.exchanges_every_ack_lost +=
                    u64::from(e.every_ack_lost() && e.acks >= crate::report::causes::ACK_SENDS);
            }
        }
    }
    Ok((p, shortages))
}

/// The daemon's refused reservations by resource (from its counters `d`, all incarnations),
/// with the warning its current incarnation logged about each.
fn shortages_of(side: &Side, d: &Dump) -> Vec<Shortage> {
    [
        (
            Resource::FileDescriptors,
            IoCounter::ReserveNoFd,
            "out of file descriptors",
        ),
        (Resource::Ports, IoCounter::ReserveNoPort, "out of ports"),
    ]
    .into_iter()
    .filter(|&(_, counter, _)| d.io(counter) > 0)
    .map(|(resource, counter, needle)| Shortage {
        host: side.name.clone(),
        resource,
        refused: d.io(counter),
        logged: side.daemon.as_ref().and_then(|daemon| {
            let log = daemon.log();
            let i = log.find_from(0, needle, Duration::ZERO)?;
            let line = log.lines_from(i).into_iter().next()?;
            Some(crate::daemon::message_of(&line).to_owned())
        }),
    })
    .collect()
}
