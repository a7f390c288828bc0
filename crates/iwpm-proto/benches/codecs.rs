//! Encode and decode cost of the messages on the hot paths (ns per message, best of 5
//! rounds): the kernel's ADD/QUERY requests, the daemon's QUERY reply / REMOTE_INFO, and
//! the peer REQUEST/ACCEPT. `cargo bench -p iwpm-proto --bench codecs`.
//!
//! No bench framework: a plain `harness = false` main keeps CI's compile time unchanged.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::netlink::{
    decode_daemon_datagram, decode_kernel_datagram, encode_daemon_msg, encode_kernel_msg,
    DaemonMsg, Envelope, KernelMsg, ManageMappingRequest, QueryMappingReply, QueryMappingRequest,
};
use iwpm_proto::peer::PeerMessage;
use iwpm_proto::sockaddr::SockAddrStorage;

const N: usize = 200_000;

fn best_of(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..N {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / N as f64);
    }
    best
}

fn sa(s: &str) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(s.parse().unwrap_or_else(|_| unreachable!()))
}

fn main() {
    let env = Envelope::kernel_request(7);
    let add = KernelMsg::AddMapping(ManageMappingRequest {
        echo_seq: 1,
        addr: sa("192.0.2.1:4000"),
        flags: Some(0),
        unknown: vec![],
    });
    let query = KernelMsg::QueryMapping(QueryMappingRequest {
        echo_seq: 1,
        local_addr: sa("192.0.2.1:4000"),
        remote_addr: sa("192.0.2.2:5000"),
        flags: Some(0),
        unknown: vec![],
    });
    let reply = DaemonMsg::QueryMapping(QueryMappingReply {
        seq: 9,
        local_addr: sa("192.0.2.1:4000"),
        remote_addr: sa("192.0.2.2:5000"),
        mapped_local_addr: sa("192.0.2.1:40000"),
        mapped_remote_addr: sa("192.0.2.2:50000"),
        err: 0,
        unknown: vec![],
    });
    let cp: SocketAddr = "192.0.2.1:4000".parse().unwrap_or_else(|_| unreachable!());
    let mapped: SocketAddr = "192.0.2.1:40000".parse().unwrap_or_else(|_| unreachable!());
    let ap: SocketAddr = "192.0.2.2:5000".parse().unwrap_or_else(|_| unreachable!());
    let request = PeerMessage::request(0x1234, cp, mapped, ap);
    let request_bytes = request.encode();

    let mut buf = Vec::with_capacity(1024);
    let mut add_bytes = Vec::new();
    encode_kernel_msg(&env, &add, &mut add_bytes);
    let mut query_bytes = Vec::new();
    encode_kernel_msg(&env, &query, &mut query_bytes);
    let mut reply_bytes = Vec::new();
    encode_daemon_msg(&env, &reply, &mut reply_bytes);

    let rows: [(&str, f64); 7] = [
        (
            "decode kernel ADD_MAPPING",
            best_of(|| {
                black_box(decode_kernel_datagram(black_box(&add_bytes), 4));
            }),
        ),
        (
            "decode kernel QUERY_MAPPING",
            best_of(|| {
                black_box(decode_kernel_datagram(black_box(&query_bytes), 4));
            }),
        ),
        (
            "encode daemon QUERY reply",
            best_of(|| {
                buf.clear();
                encode_daemon_msg(&env, black_box(&reply), &mut buf);
            }),
        ),
        (
            "decode daemon QUERY reply",
            best_of(|| {
                black_box(decode_daemon_datagram(black_box(&reply_bytes)));
            }),
        ),
        (
            "encode peer REQUEST",
            best_of(|| {
                black_box(black_box(&request).encode());
            }),
        ),
        (
            "decode peer REQUEST",
            best_of(|| {
                black_box(PeerMessage::decode(black_box(&request_bytes)).ok());
            }),
        ),
        (
            "encode+decode peer ACCEPT",
            best_of(|| {
                let m = PeerMessage::decode(&request_bytes).ok();
                if let Some(m) = m {
                    black_box(PeerMessage::accept_for(&m, ap).encode());
                }
            }),
        ),
    ];
    println!("codec                              ns per message");
    for (name, ns) in rows {
        println!("{name:<34} {ns:>8.0}");
    }
}
