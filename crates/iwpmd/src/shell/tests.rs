//! The shell's unit tests: a real `Shell` on a Unix-datagram kernel link whose other end
//! the test plays, driven one wait and one drain at a time.

use super::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixDatagram;

use iwpm_core::CoreConfig;
use iwpm_proto::consts::{NLMSG_DONE, NLM_F_REQUEST, RDMA_NL_IWCM};
use iwpm_proto::netlink::{
    decode_daemon_datagram, encode_kernel_msg, DaemonFrame, DaemonMsg, Envelope, Hello, KernelMsg,
    ManageMappingRequest, NlString, RegPidRequest,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use iwpm_core::state_file::StateFile;

use crate::peer::sockets::PeerBind;
use crate::restart::RestartConfig;

fn next_msg(emu: &UnixDatagram) -> DaemonMsg {
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let n = emu.recv(&mut buf).expect("nothing from the shell");
    match decode_daemon_datagram(&buf[..n]).into_iter().next() {
        Some(Ok(DaemonFrame::Msg(_, m))) => m,
        other => panic!("{other:?}"),
    }
}

/// A shell on a Unix kernel link whose other end, `emu`, the test plays; started (its
/// HELLO is waiting in `emu`).
fn shell_on_unix_link(tag: &str) -> (Shell, UnixDatagram, std::path::PathBuf) {
    shell_with_restart(tag, RestartConfig::default())
}

/// [`shell_on_unix_link`] with restart survival set up as `restart`.
fn shell_with_restart(
    tag: &str,
    restart: RestartConfig,
) -> (Shell, UnixDatagram, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("iwpmd-shell-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let emu = UnixDatagram::bind(&path).unwrap();
    emu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut shell = unstarted_shell(KernelLink::open_unix(&path).unwrap(), restart);
    shell.start().unwrap();
    (shell, emu, path)
}

/// A shell on `kernel` with loopback peer sockets, not started yet.
fn unstarted_shell(kernel: KernelLink, restart: RestartConfig) -> Shell {
    let peers = PeerSockets::open(PeerBind {
        port: 0,
        v4: Ipv4Addr::LOCALHOST,
        v6: None,
    })
    .unwrap();
    let now = Instant::now();
    let config = CoreConfig {
        netlink_pid: kernel.port_id(),
        ..CoreConfig::default()
    };
    let restart = Restart::new(restart, Default::default(), now);
    Shell::new(config, kernel, peers, restart).unwrap()
}

fn kernel_datagram(msg: &KernelMsg) -> Vec<u8> {
    let mut out = Vec::new();
    encode_kernel_msg(
        &Envelope {
            client: RDMA_NL_IWCM,
            flags: NLM_F_REQUEST,
            seq: 1,
            pid: 0,
        },
        msg,
        &mut out,
    );
    out
}

/// A REMOVE_MAPPING is never answered, so reading stops after it instead of trying
/// the (usually empty) link once more; the level-triggered wait finds what is left.
#[test]
fn reading_stops_after_an_unanswered_request_and_the_wait_finds_the_rest() {
    let (mut shell, emu, path) = shell_on_unix_link("lt");
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let (_, daemon) = emu.recv_from(&mut buf).unwrap();
    let remove = kernel_datagram(&KernelMsg::RemoveMapping(ManageMappingRequest {
        echo_seq: 1,
        addr: SockAddrStorage::from(SocketAddr::from((Ipv4Addr::LOCALHOST, 7000))),
        flags: None,
        unknown: vec![],
    }));
    emu.send_to_addr(&remove, &daemon).unwrap();
    emu.send_to_addr(&remove, &daemon).unwrap();
    let mut events = Events::with_capacity(8);
    let ready = shell
        .wait(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    assert!(ready.readable);
    shell.drain_kernel();
    assert_eq!(
        shell.counters.kernel_rx, 1,
        "read past an unanswered REMOVE"
    );
    let ready = shell.wait(&mut events, Some(Duration::ZERO)).unwrap();
    assert!(ready.readable, "the second REMOVE is still waiting");
    shell.drain_kernel();
    assert_eq!(shell.counters.kernel_rx, 2);
    let ready = shell.wait(&mut events, Some(Duration::ZERO)).unwrap();
    assert!(!ready.readable);
    let _ = std::fs::remove_file(&path);
}

/// The netlink messages in the next datagram the shell sent, as their replies' kinds.
fn next_datagram(emu: &UnixDatagram) -> Vec<DaemonMsg> {
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let n = emu.recv(&mut buf).expect("nothing from the shell");
    decode_daemon_datagram(&buf[..n])
        .into_iter()
        .map(|frame| match frame {
            Ok(DaemonFrame::Msg(_, m)) => m,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// An ADD_MAPPING with header seq `port`, so that each one is a new request.
fn add_mapping(port: u16) -> Vec<u8> {
    let mut out = kernel_datagram(&KernelMsg::AddMapping(ManageMappingRequest {
        echo_seq: 0,
        addr: SockAddrStorage::from(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        flags: Some(iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP),
        unknown: vec![],
    }));
    out[8..12].copy_from_slice(&u32::from(port).to_ne_bytes());
    out
}

/// Registers the iWARP CM client (REG_PID), which ADD_MAPPING needs, and reads the
/// answer.
fn register(shell: &mut Shell, emu: &UnixDatagram, daemon: &std::os::unix::net::SocketAddr) {
    let reg = kernel_datagram(&KernelMsg::RegPid(RegPidRequest {
        echo_seq: 0,
        if_name: NlString::padded("eth0", 16),
        ibdev_name: NlString::padded("siw0", 32),
        ulib_name: NlString::padded(iwpm_proto::consts::IWPM_ULIB_NAME, 32),
        unknown: vec![],
    }));
    emu.send_to_addr(&reg, daemon).unwrap();
    let mut events = Events::with_capacity(8);
    shell
        .wait(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    shell.drain_kernel();
    assert!(matches!(next_msg(emu), DaemonMsg::RegPid(_)));
}

/// A lone request is answered in a datagram of its own at once; the answers to the
/// requests read after it in the same wake-up leave together in one datagram.
#[test]
fn answers_to_a_burst_of_requests_leave_in_one_datagram() {
    let (mut shell, emu, path) = shell_on_unix_link("burst");
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let (_, daemon) = emu.recv_from(&mut buf).unwrap();
    register(&mut shell, &emu, &daemon);
    let mut events = Events::with_capacity(8);
    let tx_before = shell.counters.kernel_tx;

    emu.send_to_addr(&add_mapping(7000), &daemon).unwrap();
    shell
        .wait(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    shell.drain_kernel();
    let lone = next_datagram(&emu);
    assert!(matches!(lone[..], [DaemonMsg::AddMapping(_)]), "{lone:?}");

    for port in 7001..7005 {
        emu.send_to_addr(&add_mapping(port), &daemon).unwrap();
    }
    shell
        .wait(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    shell.drain_kernel();
    assert_eq!(shell.counters.kernel_rx, 6);
    assert_eq!(
        shell.counters.kernel_tx,
        tx_before + 5,
        "counted per message"
    );
    let first = next_datagram(&emu);
    assert!(matches!(first[..], [DaemonMsg::AddMapping(_)]), "{first:?}");
    let rest = next_datagram(&emu);
    let ports: Vec<u16> = rest
        .iter()
        .map(|m| match m {
            DaemonMsg::AddMapping(r) => r.addr.port(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ports, [7002, 7003, 7004], "in order, in one datagram");
    emu.set_nonblocking(true).unwrap();
    assert!(emu.recv(&mut buf).is_err(), "nothing else was sent");
    let _ = std::fs::remove_file(&path);
}

/// Waits up to `timeout` for the kernel link; whether it is readable.
fn link_readable(shell: &mut Shell, timeout: Duration) -> bool {
    let mut events = Events::with_capacity(8);
    shell.wait(&mut events, Some(timeout)).unwrap().readable
}

/// The kernel's NLMSG_DONE for a message we sent with header seq `seq`.
fn done(seq: u32) -> Vec<u8> {
    let mut d = Vec::with_capacity(20);
    d.extend_from_slice(&20u32.to_ne_bytes());
    d.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
    d.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
    d.extend_from_slice(&seq.to_ne_bytes());
    d.extend_from_slice(&0u32.to_ne_bytes());
    d.extend_from_slice(&0i32.to_ne_bytes());
    d
}

/// Once the DONE of the last message sent is read, reading stops: the next read would
/// usually find the link empty, and the level-triggered wait finds what is left.
#[test]
fn reading_stops_once_every_message_sent_is_acknowledged() {
    let (mut shell, emu, path) = shell_on_unix_link("acks");
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let (_, daemon) = emu.recv_from(&mut buf).unwrap();
    assert_eq!(shell.outbox.acks_due(), 1, "HELLO sent");
    let remove = kernel_datagram(&KernelMsg::RemoveMapping(ManageMappingRequest {
        echo_seq: 1,
        addr: SockAddrStorage::from(SocketAddr::from((Ipv4Addr::LOCALHOST, 7000))),
        flags: None,
        unknown: vec![],
    }));
    emu.send_to_addr(&done(0), &daemon).unwrap();
    emu.send_to_addr(&remove, &daemon).unwrap();
    assert!(link_readable(&mut shell, Duration::from_secs(5)));
    shell.drain_kernel();
    assert_eq!(shell.counters.kernel_rx, 1, "read past the last DONE due");
    assert_eq!(shell.outbox.acks_due(), 0);
    assert!(link_readable(&mut shell, Duration::ZERO));
    shell.drain_kernel();
    assert_eq!(shell.counters.kernel_rx, 2, "REMOVE read next turn");
    // An acknowledgement nobody waits for (a replay's closing DONE) stops reading too,
    // and the count stays at zero.
    emu.send_to_addr(&done(0), &daemon).unwrap();
    emu.send_to_addr(&remove, &daemon).unwrap();
    assert!(link_readable(&mut shell, Duration::from_secs(5)));
    shell.drain_kernel();
    assert_eq!((shell.counters.kernel_rx, shell.outbox.acks_due()), (3, 0));
    let _ = std::fs::remove_file(&path);
}

/// How often the loop's wait (100 ms timeout) returns in 300 ms, reading what it finds.
fn wakes_in_300_ms(shell: &mut Shell) -> u32 {
    let mut events = Events::with_capacity(8);
    let started = Instant::now();
    let mut wakes = 0;
    while started.elapsed() < Duration::from_millis(300) && wakes < 1000 {
        let ready = shell
            .wait(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        if ready.readable {
            shell.drain_kernel();
        }
        wakes += 1;
    }
    wakes
}

/// With the other end of the link gone, waiting still sleeps (no busy loop).
#[test]
fn a_wait_on_a_link_whose_other_end_is_gone_still_sleeps() {
    let (mut shell, emu, path) = shell_on_unix_link("gone");
    drop(emu);
    let _ = std::fs::remove_file(&path);
    let wakes = wakes_in_300_ms(&mut shell);
    assert!(wakes <= 10, "{wakes} wake-ups in 300 ms");
}

/// A link that hangs up (only a Unix socket can; here it is shut down on our side) is
/// reported once and no longer waited on, instead of waking every wait at once.
#[test]
fn a_hung_up_link_is_no_longer_watched() {
    let (mut shell, _emu, path) = shell_on_unix_link("hup");
    rustix::net::shutdown(&shell.kernel.link, rustix::net::Shutdown::Both).unwrap();
    let wakes = wakes_in_300_ms(&mut shell);
    assert!(
        !shell.wakeups.watches_kernel(),
        "the hung-up link is still watched"
    );
    assert!(wakes <= 10, "{wakes} wake-ups in 300 ms");
    let _ = std::fs::remove_file(&path);
}

/// The Unix kernel link cannot produce `ENOBUFS` (a full Unix datagram queue makes the
/// sender wait), so the overrun path is driven directly: it is counted, and the core
/// announces the daemon to the kernel again with HELLO.
#[test]
fn kernel_overrun_is_counted_and_announces_the_daemon_again() {
    let (mut shell, emu, path) = shell_on_unix_link("ovr");
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let (n, daemon) = emu.recv_from(&mut buf).unwrap();
    assert!(matches!(
        decode_daemon_datagram(&buf[..n]).into_iter().next(),
        Some(Ok(DaemonFrame::Msg(_, DaemonMsg::Hello(_))))
    ));
    let hello = kernel_datagram(&KernelMsg::Hello(Hello {
        abi_version: 4,
        unknown: vec![],
    }));
    emu.send_to_addr(&hello, &daemon).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !shell.restart.ready() && Instant::now() < deadline {
        shell.drain_kernel();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(shell.restart.ready(), "handshake did not finish");
    assert!(matches!(next_msg(&emu), DaemonMsg::MapInfo(_)));

    shell.kernel_overrun(Instant::now());
    assert_eq!(shell.counters.kernel_overruns, 1);
    assert!(
        matches!(
            next_msg(&emu),
            DaemonMsg::Hello(Hello { abi_version: 4, .. })
        ),
        "no HELLO after the overrun"
    );
    assert!(shell
        .snapshot()
        .io_counters_line()
        .contains("kernel_overruns=1"));
    let _ = std::fs::remove_file(&path);
}

/// The state file follows the host's policy: a table change is written when the host asks
/// (`Action::SaveState`, after its gathering delay), the write's outcome goes back to it,
/// and at exit the change the file still lacks is written at once.
#[test]
fn the_state_file_is_written_when_the_host_asks_and_at_exit() {
    let dir = std::env::temp_dir().join(format!("iwpmd-shell-statedir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let state = dir.join("state");
    let config = RestartConfig {
        state_file: Some(state.clone()),
        ..RestartConfig::default()
    };
    let (mut shell, emu, path) = shell_with_restart("state", config);
    let mut buf = vec![0u8; crate::kernel::link::RECV_BUFFER];
    let (_, daemon) = emu.recv_from(&mut buf).unwrap();
    register(&mut shell, &emu, &daemon);
    emu.send_to_addr(&add_mapping(7000), &daemon).unwrap();
    assert!(link_readable(&mut shell, Duration::from_secs(5)));
    shell.drain_kernel();
    assert!(matches!(next_msg(&emu), DaemonMsg::AddMapping(_)));
    let changed = shell.host.unsaved_generation();
    assert!(changed.is_some(), "the mapping is not in the file yet");
    // The host's deadline is the write's; the outcome comes back from the writer thread.
    let deadline = Instant::now() + Duration::from_secs(5);
    while shell.restart.counts().state_writes != Some(1) && Instant::now() < deadline {
        let now = Instant::now();
        if shell.host.poll_timeout().is_some_and(|d| d <= now) {
            shell.host.handle_timeout(now);
            shell.flush(now);
        }
        std::thread::sleep(Duration::from_millis(5));
        shell.restart_tick(Instant::now());
    }
    assert_eq!(shell.restart.counts().state_writes, Some(1));
    assert_eq!(shell.host.unsaved_generation(), None, "reported back");
    let file = StateFile::decode(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(file.mappings.len(), 1);
    // A change the file lacks at exit is written then, without waiting.
    emu.send_to_addr(&add_mapping(7001), &daemon).unwrap();
    assert!(link_readable(&mut shell, Duration::from_secs(5)));
    shell.drain_kernel();
    assert!(shell.host.unsaved_generation().is_some());
    shell.restart.on_exit(&mut shell.host);
    assert_eq!(shell.restart.counts().state_writes, Some(2));
    assert_eq!(shell.host.unsaved_generation(), None);
    let file = StateFile::decode(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(file.mappings.len(), 2);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hello_the_kernel_link_refuses_is_a_start_up_error() {
    let path = std::env::temp_dir().join(format!("iwpmd-shell-nohello-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let emu = UnixDatagram::bind(&path).unwrap();
    let kernel = KernelLink::open_unix(&path).unwrap();
    // The other end goes away before the daemon says HELLO: the send is refused.
    drop(emu);
    let mut shell = unstarted_shell(kernel, RestartConfig::default());
    match shell.start() {
        Err(SetupError::HelloNotSent(SendFailure::Os(e))) => {
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        }
        other => panic!("expected HelloNotSent, got {other:?}"),
    }
    let _ = std::fs::remove_file(&path);
}
