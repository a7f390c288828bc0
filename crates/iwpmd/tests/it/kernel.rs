//! The kernel conversation through the real binary: HELLO with the right header, MAPINFO
//! after the HELLO answer, REG_PID, ADD_MAPPING holding a real TCP port, the SIGUSR1 dump
//! of that mapping, REMOVE_MAPPING releasing it.

use std::net::{Ipv4Addr, SocketAddr};

use iwpm_proto::consts::{IWPM_ULIB_NAME, NLM_F_REQUEST, RDMA_NL_IWCM};
use iwpm_proto::netlink::{DaemonMsg, KernelMsg, ManageMappingRequest, NlString};
use iwpm_proto::sockaddr::SockAddrStorage;
use iwpm_testkit::prelude::*;
use rustix::process::Signal;

#[test]
fn hello_carries_request_flag_and_port_id() {
    let dir = scratch_dir("hello");
    let mut kernel = FakeKernel::bind(&dir);
    let d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
    let env = kernel.handshake();
    assert_eq!(env.client, RDMA_NL_IWCM);
    assert_ne!(env.flags & NLM_F_REQUEST, 0, "HELLO without NLM_F_REQUEST");
    assert_eq!(
        env.pid,
        d.pid(),
        "nlmsg_pid must be the daemon's port id (its pid)"
    );
    assert_eq!(env.seq, 0, "HELLO is the first message for client 2");
    assert!(d.stderr.wait_for("ready", WAIT), "{}", d.stderr.text());
}

#[test]
fn register_add_dump_remove() {
    let dir = scratch_dir("add");
    let mut kernel = FakeKernel::bind(&dir);
    let mut d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
    let hello = kernel.handshake();

    match kernel.register() {
        DaemonMsg::RegPid(r) => {
            // Echoed as C does: strlen + 1 bytes.
            assert_eq!(r.ibdev_name, NlString::new("siw_lo"), "device name echoed");
            assert_eq!(r.ulib_name, NlString::new(IWPM_ULIB_NAME));
            assert_eq!(r.ulib_version, 4);
            assert_eq!(r.err, 0);
        }
        other => panic!("{other:?}"),
    }

    let local: SocketAddr = (Ipv4Addr::LOCALHOST, 5000).into();
    let (seq, reply) = kernel.add_mapping(local);
    let mapped = match reply {
        DaemonMsg::AddMapping(r) => {
            assert_eq!(r.seq, seq);
            assert_eq!(r.err, 0);
            assert_eq!(
                r.addr,
                SockAddrStorage::from_socket_addr(local),
                "address echoed"
            );
            let mapped = r
                .mapped_addr
                .to_socket_addr()
                .expect("mapped address is IPv4");
            assert_eq!(mapped.ip(), local.ip(), "mapping never changes the IP");
            assert_ne!(mapped.port(), 0);
            mapped
        }
        other => panic!("{other:?}"),
    };
    assert!(
        !tcp_port_free(mapped),
        "mapped port {mapped} must be held by the daemon"
    );

    d.signal(Signal::USR1);
    let expect_local = "Local address IPV4 127.0.0.1:5000(0x1388)";
    let expect_mapped = format!(
        "Mapped address IPV4 127.0.0.1:{}(0x{:04X})",
        mapped.port(),
        mapped.port()
    );
    assert!(
        d.stderr.wait_for(&expect_mapped, WAIT),
        "{}",
        d.stderr.text()
    );
    let text = d.stderr.text();
    assert!(text.contains("print_iwpm_mapped_ports:"), "{text}");
    assert!(text.contains("Mapping #0"), "{text}");
    assert!(text.contains(expect_local), "{text}");

    kernel.send(&KernelMsg::RemoveMapping(ManageMappingRequest {
        echo_seq: 0,
        addr: SockAddrStorage::from_socket_addr(local),
        flags: None,
        unknown: vec![],
    }));
    assert!(
        eventually(WAIT, || tcp_port_free(mapped)),
        "REMOVE_MAPPING must release port {mapped}"
    );
    // REMOVE has no reply.
    assert!(kernel.recv(std::time::Duration::from_millis(300)).is_none());

    assert_eq!(hello.pid, d.pid());
    d.signal(Signal::TERM);
    assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
}

/// A Unix-datagram kernel side queues only `net.unix.max_dgram_qlen` (often 10) datagrams:
/// a burst of replies larger than that must be held and delivered in order, not dropped.
#[test]
fn reply_burst_larger_than_the_link_queue_is_delivered_in_order() {
    const BURST: u32 = 200;
    let dir = scratch_dir("burst");
    let mut kernel = FakeKernel::bind(&dir);
    let _d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
    kernel.handshake();
    kernel.register();
    let first = kernel.seq + 1;
    for i in 0..BURST {
        let port = 20_000 + u16::try_from(i).unwrap();
        kernel.send(&KernelMsg::AddMapping(ManageMappingRequest {
            echo_seq: 0,
            addr: SockAddrStorage::from_socket_addr(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
            flags: Some(iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP),
            unknown: vec![],
        }));
    }
    // Let the daemon hit the full queue before we read anything.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for i in 0..BURST {
        match kernel.recv_msg(WAIT) {
            Some((_, DaemonMsg::AddMapping(r))) => assert_eq!(r.seq, first + i, "order"),
            other => panic!("reply {i} of {BURST}: {other:?}"),
        }
    }
}
