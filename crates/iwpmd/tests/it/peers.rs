//! Two real daemons on 127.0.0.1 and 127.0.0.2 (same peer port), each with a test-played
//! kernel: a QUERY on one side is answered through the UDP peer protocol by the other.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use iwpm_proto::netlink::{DaemonMsg, KernelMsg, QueryMappingRequest};
use iwpm_proto::peer::{PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::SockAddrStorage;
use iwpm_testkit::prelude::*;
use rustix::process::Signal;

const A_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn query(kernel: &mut FakeKernel, local: SocketAddr, remote: SocketAddr) -> u32 {
    kernel.send(&KernelMsg::QueryMapping(QueryMappingRequest {
        echo_seq: 0,
        local_addr: SockAddrStorage::from_socket_addr(local),
        remote_addr: SockAddrStorage::from_socket_addr(remote),
        flags: Some(0),
        unknown: vec![],
    }))
}

fn mapped_of(reply: DaemonMsg) -> SocketAddr {
    match reply {
        DaemonMsg::AddMapping(r) => {
            assert_eq!(r.err, 0);
            r.mapped_addr.to_socket_addr().unwrap()
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn query_accepted_by_the_peer_daemon() {
    let port = free_udp_port();
    let (dir_a, dir_b) = (scratch_dir("peer-a"), scratch_dir("peer-b"));
    let (mut ka, mut kb) = (FakeKernel::bind(&dir_a), FakeKernel::bind(&dir_b));
    let mut a = Daemon::start(iwpmd_bin!(), &ka, A_IP, port);
    let mut b = Daemon::start(iwpmd_bin!(), &kb, B_IP, port);
    for k in [&mut ka, &mut kb] {
        k.handshake();
        k.register();
    }

    let listen: SocketAddr = (B_IP, 7000).into();
    let (_, reply) = kb.add_mapping(listen);
    let b_mapped = mapped_of(reply);

    let local: SocketAddr = (A_IP, 6000).into();
    let seq = query(&mut ka, local, listen);

    let (_, msg) = ka.recv_msg(WAIT).expect("no QUERY reply on side A");
    let a_mapped = match msg {
        DaemonMsg::QueryMapping(r) => {
            assert_eq!(r.seq, seq);
            assert_eq!(r.err, 0);
            assert_eq!(r.local_addr, SockAddrStorage::from_socket_addr(local));
            assert_eq!(r.remote_addr, SockAddrStorage::from_socket_addr(listen));
            assert_eq!(r.mapped_remote_addr.to_socket_addr(), Some(b_mapped));
            let m = r.mapped_local_addr.to_socket_addr().unwrap();
            assert_eq!(m.ip(), IpAddr::V4(A_IP));
            assert!(!tcp_port_free(m), "A's mapped port must be held");
            m
        }
        other => panic!("expected QUERY reply, got {other:?}"),
    };

    let (_, msg) = kb.recv_msg(WAIT).expect("no REMOTE_INFO on side B");
    match msg {
        DaemonMsg::RemoteInfo(r) => {
            assert_eq!(r.local_addr, SockAddrStorage::from_socket_addr(listen));
            assert_eq!(r.remote_addr.to_socket_addr(), Some(local));
            assert_eq!(r.mapped_local_addr.to_socket_addr(), Some(b_mapped));
            assert_eq!(r.mapped_remote_addr.to_socket_addr(), Some(a_mapped));
        }
        other => panic!("expected REMOTE_INFO, got {other:?}"),
    }

    // A query for a port B has not mapped is rejected: error 16, unmapped remote.
    let unmapped: SocketAddr = (B_IP, 7001).into();
    let local2: SocketAddr = (A_IP, 6001).into();
    let seq = query(&mut ka, local2, unmapped);
    let (_, msg) = ka.recv_msg(WAIT).expect("no QUERY reply after a REJECT");
    match msg {
        DaemonMsg::QueryMapping(r) => {
            assert_eq!(r.seq, seq);
            assert_eq!(r.err, 16);
            assert_eq!(r.mapped_remote_addr.to_socket_addr(), Some(unmapped));
        }
        other => panic!("{other:?}"),
    }

    for d in [&mut a, &mut b] {
        d.signal(Signal::TERM);
        assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
    }
}

#[test]
fn request_for_unmapped_address_is_rejected_on_the_arrival_socket() {
    let port = free_udp_port();
    let dir = scratch_dir("reject");
    let mut kernel = FakeKernel::bind(&dir);
    let _d = Daemon::start(iwpmd_bin!(), &kernel, A_IP, port);
    kernel.handshake();

    let peer = UdpSocket::bind((A_IP, 0)).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = PeerMessage::request(
        0x0102_0304_0506_0708,
        (A_IP, 9000).into(),
        (A_IP, 9100).into(),
        (A_IP, 9999).into(),
    );
    peer.send_to(&req.encode(), (A_IP, port)).unwrap();
    let mut buf = [0u8; 128];
    let (n, from) = peer.recv_from(&mut buf).expect("no REJECT");
    assert_eq!(
        from,
        SocketAddr::from((A_IP, port)),
        "answer comes from the listener"
    );
    let rej = PeerMessage::decode(&buf[..n]).unwrap();
    assert_eq!(rej.msg_type, PeerMsgType::Reject);
    assert_eq!(rej.assoc_handle, req.assoc_handle);
    assert_eq!(n, 48);
}
