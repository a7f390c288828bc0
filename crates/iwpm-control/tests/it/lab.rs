//! `iwpmctl` against real daemons in the lab: two emulated hosts (kernel emulators), a real
//! `iwpmd` for each, real connections between them. Checks that `list --json` is exactly
//! the mappings the emulated kernels hold, that `metrics` is valid OpenMetrics, that a
//! non-root caller is refused (at the socket's permissions and, with those opened, by the
//! daemon's SO_PEERCRED check), that `probe` tells a reachable peer from a blocked one in
//! under 2 s without leaving anything in the peer's kernel, and that hostile control
//! clients (oversized, idle, too many, wrong version) cost the daemon nothing.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use iwpm_control::client::{Client, ClientError};
use iwpm_control::codec::{decode_response, encode_frame, FrameDecoder, MAX_RESPONSE_LEN};
use iwpm_control::{metrics, Command as Cmd, ErrorKind, Outcome, Reply, Request};
use iwpm_kernel_emu::{AcceptMode, EventChannel};
use iwpm_lab::workload::Acceptor;
use iwpm_lab::{Lab, LabConfig};
use iwpm_testkit::host::is_root;

const WAIT: Duration = Duration::from_secs(15);

fn iwpmctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iwpmctl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("cannot run iwpmctl")
}

fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "iwpmctl failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn json_reply(socket: &Path, args: &[&str]) -> Reply {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok_stdout(&iwpmctl(socket, &all))).expect("iwpmctl --json output")
}

fn control_socket(lab: &Lab, side: &str) -> PathBuf {
    let s = if side == "A" { &lab.a } else { &lab.b };
    let daemon = s.daemon.as_ref().expect("daemon running");
    iwpm_control::socket_beside(&daemon.config().kernel)
}

/// (local, mapped) pairs: the kernel's mapinfo entries (one per reference it holds)
/// against the daemon's list, each mapping counted `refcount` times.
fn kernel_pairs(lab: &Lab, side: &str) -> Vec<(SocketAddr, SocketAddr)> {
    let s = if side == "A" { &lab.a } else { &lab.b };
    let mut v: Vec<_> = s
        .host
        .kernel_view()
        .mapinfo
        .iter()
        .map(|e| {
            (
                e.local.to_socket_addr().unwrap(),
                e.mapped.to_socket_addr().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn daemon_pairs(reply: &Reply) -> Vec<(SocketAddr, SocketAddr)> {
    let Reply::List(list) = reply else {
        panic!("not a list: {reply:?}")
    };
    let mut v: Vec<_> = list
        .mappings
        .iter()
        .flat_map(|m| std::iter::repeat_n((m.local, m.mapped), m.refcount as usize))
        .collect();
    v.sort();
    v
}

#[test]
fn iwpmctl_against_the_lab() {
    let mut lab = Lab::start(LabConfig::default()).expect("lab set-up");
    // B listens; A connects three times: A holds three connector mappings, B one listener.
    let channel = EventChannel::new();
    let listen_addr = lab.b_addr(4000);
    let listener = lab
        .b
        .host
        .listen(listen_addr, AcceptMode::Auto, Some(&channel))
        .expect("listen on B");
    let _acceptor = Acceptor::start(channel);
    let conns: Vec<_> = (0..3)
        .map(|_| {
            lab.a
                .host
                .connect(None, listen_addr)
                .expect("connect from A")
        })
        .collect();
    let (sock_a, sock_b) = (control_socket(&lab, "A"), control_socket(&lab, "B"));

    // list --json equals the kernels' mappings, on both sides.
    for (side, sock, n) in [("A", &sock_a, 3), ("B", &sock_b, 1)] {
        let reply = json_reply(sock, &["list"]);
        let daemon = daemon_pairs(&reply);
        assert_eq!(daemon, kernel_pairs(&lab, side), "host {side}");
        assert_eq!(daemon.len(), n, "host {side}: {reply:?}");
        let human = ok_stdout(&iwpmctl(sock, &["list"]));
        assert!(human.starts_with("LOCAL "), "{human}");
        let noun = if n == 1 { "mapping" } else { "mappings" };
        assert!(human.ends_with(&format!("\n{n} {noun}\n")), "{human}");
    }

    // status: handshake done, one kernel client, counters that agree with the list.
    let Reply::Status(status) = json_reply(&sock_a, &["status"]) else {
        panic!("status")
    };
    assert_eq!(status.handshake, "done");
    assert_eq!(status.abi, 4);
    assert_eq!(status.mappings, 3);
    assert_eq!(status.ports_held, 3);
    assert_eq!(status.clients.len(), 1, "{status:?}");
    assert_eq!(status.pid, lab.a.daemon.as_ref().unwrap().pid());
    assert_eq!(status.core_counters["peer_in_accept"], 3);

    // metrics: strict OpenMetrics, and the values are the daemon's.
    let text = ok_stdout(&iwpmctl(&sock_a, &["metrics", "--openmetrics", "--check"]));
    let samples = metrics::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let value = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .value
    };
    assert_eq!(value("iwpmd_mappings"), 3.0);
    assert_eq!(value("iwpmd_ports_held"), 3.0);
    assert_eq!(value("iwpmd_core_peer_in_accept_total"), 3.0);
    assert_eq!(value("iwpmd_build_info"), 1.0);
    assert!(text.ends_with("# EOF\n"));

    // The human status counts kernel clients as the metrics do; `-j` is `--json`.
    let human = ok_stdout(&iwpmctl(&sock_a, &["status"]));
    let clients = value("iwpmd_kernel_clients");
    assert_eq!(clients, 1.0);
    assert!(
        human.contains(&format!("\nkernel clients:  {clients} (#")),
        "{human}"
    );
    assert!(human.contains("(3 ports held)"), "{human}");
    let short: Reply = serde_json::from_str(&ok_stdout(&iwpmctl(&sock_a, &["-j", "status"])))
        .expect("iwpmctl -j status prints JSON");
    assert!(matches!(short, Reply::Status(_)), "{short:?}");
    output_into_a_closed_pipe_is_quiet(&sock_a);

    // peers: A asked B three times and got three ACCEPTs.
    let Reply::Peers(peers) = json_reply(&sock_a, &["peers"]) else {
        panic!("peers")
    };
    let b_ip = listen_addr.ip();
    let b = tally_of(&peers, b_ip);
    assert_eq!((b.requests, b.accepts, b.rejects), (3, 3, 0), "{peers:?}");
    assert_eq!(peers.recent.len(), 3);
    assert!(peers.recent.iter().all(|r| r.outcome == "accepted"));
    // A connect to a port B does not listen on: B rejects, A's tallies say so.
    lab.a
        .host
        .connect(None, lab.b_addr(4002))
        .expect_err("no listener on 4002");
    let Reply::Peers(peers) = json_reply(&sock_a, &["peers"]) else {
        panic!("peers")
    };
    let b = tally_of(&peers, b_ip);
    assert_eq!((b.requests, b.accepts, b.rejects), (4, 3, 1), "{peers:?}");
    assert_eq!(
        peers.recent.last().map(|r| r.outcome.as_str()),
        Some("rejected")
    );
    let human = ok_stdout(&iwpmctl(&sock_a, &["peers"]));
    assert!(human.contains("\nPer peer:\nPEER "), "{human}");

    // dump: the SIGUSR1 text.
    let dump = ok_stdout(&iwpmctl(&sock_b, &["dump"]));
    assert!(
        dump.starts_with("print_iwpm_mapped_ports:\nMapping #0\n"),
        "{dump}"
    );
    assert!(dump.contains("\ncore counters: "), "{dump}");

    probe_reachable_and_blocked(&mut lab, &sock_a, b_ip);
    log_level_changes(&sock_a);
    if is_root() {
        non_root_is_refused(&sock_a);
    } else {
        iwpm_testkit::host::say_skipped(
            "iwpmctl_against_the_lab (its non-root refusal part)",
            "needs root to run a child as nobody",
        );
    }
    hostile_clients_cost_nothing(&sock_b);
    drop(conns);
    drop(listener);
}

/// `iwpmctl list | head -0`: the reader is gone before the table comes; iwpmctl ends
/// with status 0 and says nothing (no "Broken pipe" error, no panic).
fn output_into_a_closed_pipe_is_quiet(sock: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iwpmctl"))
        .arg("--socket")
        .arg(sock)
        .arg("list")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run iwpmctl");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "iwpmctl list into a closed pipe: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn probe_reachable_and_blocked(lab: &mut Lab, sock_a: &Path, b_ip: IpAddr) {
    let before = lab.b.host.stats().kernel.remote_info_received;
    let remote_info_before = lab.b.host.kernel_view().remote_info;
    let Reply::Status(b_before) = json_reply(&control_socket(lab, "B"), &["status"]) else {
        panic!()
    };
    let started = Instant::now();
    let Reply::Probe(p) = json_reply(sock_a, &["probe", &b_ip.to_string()]) else {
        panic!("probe")
    };
    let took = started.elapsed();
    assert!(p.reachable, "{p:?}");
    assert_eq!(p.answer, "rejected");
    assert!(took < Duration::from_secs(2), "probe took {took:?}");
    eprintln!(
        "probe reachable: {} us in the daemon, {took:?} for the whole iwpmctl run",
        p.elapsed_us
    );
    // Nothing stays on the peer: no REMOTE_INFO in its kernel, no exchange, one REJECT.
    let Reply::Status(b_after) = json_reply(&control_socket(lab, "B"), &["status"]) else {
        panic!()
    };
    assert_eq!(lab.b.host.stats().kernel.remote_info_received, before);
    assert_eq!(b_after.exchanges, b_before.exchanges);
    assert_eq!(b_after.mappings, b_before.mappings);
    assert_eq!(
        b_after.core_counters["rejects_sent"],
        b_before.core_counters["rejects_sent"] + u64::from(p.requests)
    );
    assert_eq!(lab.b.host.kernel_view().remote_info, remote_info_before);

    // Blocked: a host whose peer port swallows every datagram (a DROP firewall rule).
    let port = p.target.port();
    let black_hole = UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 3), port)).expect("bind 127.0.0.3");
    let started = Instant::now();
    let out = iwpmctl(sock_a, &["probe", "127.0.0.3"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("BLOCKED"), "{text}");
    assert!(
        took < Duration::from_secs(2),
        "blocked verdict took {took:?}"
    );
    black_hole.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 128];
    let mut got = 0;
    while let Ok((n, _)) = black_hole.recv_from(&mut buf) {
        assert_eq!(n, 64, "a REQUEST");
        assert_eq!(buf[0], 0x04, "IPv4 REQUEST magic");
        got += 1;
    }
    assert!(got >= 1, "the probe sent nothing to 127.0.0.3");
    eprintln!("probe blocked: verdict after {took:?} ({got} REQUESTs swallowed)");

    // Unreachable from the daemon's own address: bound to a loopback address, it cannot send to
    // another network at all. That is said, with the address, rather than blaming a
    // firewall over there for datagrams that never left.
    let out = iwpmctl(sock_a, &["probe", "10.255.255.1"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("BLOCKED"), "{said}");
    assert!(
        said.contains("cannot send to 10.255.255.1 from 127.") && said.contains("nothing was sent"),
        "{said}"
    );
}

fn log_level_changes(sock: &Path) {
    let Reply::LogLevel(l) = json_reply(sock, &["log-level"]) else {
        panic!()
    };
    let original = l.filter;
    let Reply::LogLevel(l) = json_reply(sock, &["log-level", "debug,iwpm_core=trace"]) else {
        panic!()
    };
    assert_eq!(l.previous.as_deref(), Some(original.as_str()));
    assert!(l.filter.contains("iwpm_core=trace"), "{l:?}");
    let bad = iwpmctl(sock, &["log-level", "=[bogus"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("invalid argument"),
        "{bad:?}"
    );
    let _ = json_reply(sock, &["log-level", &original]);
}

fn non_root_is_refused(sock: &Path) {
    // nobody must be able to run the binary and reach the socket's directory whatever the
    // umask and the checkout's permissions: a world-readable copy, searchable directories.
    let bin_dir = std::env::temp_dir().join(format!("iwpmctl-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::set_permissions(&bin_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.join("iwpmctl");
    std::fs::copy(env!("CARGO_BIN_EXE_iwpmctl"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    for dir in sock.ancestors().skip(1) {
        if dir == Path::new("/") || dir.as_os_str().is_empty() {
            break;
        }
        let mode = std::fs::metadata(dir).unwrap().permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001)).unwrap();
        }
    }
    let as_nobody = |args: &[&str]| {
        Command::new(&bin)
            .arg("--socket")
            .arg(sock)
            .args(args)
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run iwpmctl as nobody")
    };
    // The socket file is 0600: the kernel refuses the connect.
    let mode = std::fs::metadata(sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let out = as_nobody(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("permission denied"), "{err}");
    // With the file opened to everyone, the daemon's SO_PEERCRED check refuses.
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody(&["list"]);
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("iwpmd refused the request") && err.contains("uid 65534"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no data for a refused caller");
    let _ = std::fs::remove_dir_all(&bin_dir);
}

fn raw_answer(stream: &mut UnixStream) -> Option<Outcome> {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut d = FrameDecoder::new(MAX_RESPONSE_LEN);
    let mut buf = [0u8; 4096];
    loop {
        if let Some(body) = d.next_body().unwrap() {
            return Some(decode_response(&body).unwrap().result);
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => d.push(&buf[..n]),
        }
    }
}

fn error_kind(o: Option<Outcome>) -> Option<ErrorKind> {
    match o {
        Some(Outcome::Error(e)) => Some(e.kind),
        _ => None,
    }
}

fn hostile_clients_cost_nothing(sock: &Path) {
    // An oversized frame is refused by its header alone.
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    assert_eq!(error_kind(raw_answer(&mut s)), Some(ErrorKind::TooLarge));
    // Another protocol version gets a typed answer.
    let mut s = UnixStream::connect(sock).unwrap();
    let body = br#"{"version":99,"command":{"cmd":"warp"}}"#;
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(body).unwrap();
    assert_eq!(
        error_kind(raw_answer(&mut s)),
        Some(ErrorKind::UnsupportedVersion)
    );
    // Clients that connect and stall (one mid-frame) hold their slots but not the loop;
    // past the limit a client is told `busy`.
    let mut idle: Vec<UnixStream> = (0..15)
        .map(|_| UnixStream::connect(sock).unwrap())
        .collect();
    idle[0].write_all(&[0, 0, 0, 40, b'{']).unwrap();
    let started = Instant::now();
    let mut c = Client::connect(sock).unwrap();
    let reply = c.call(Cmd::Status, Duration::from_secs(5)).unwrap();
    assert!(matches!(reply, Reply::Status(ref s) if s.control_clients == 16));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stalled clients held the loop (they would until their 10 s timeout)"
    );
    match Client::connect(sock)
        .unwrap()
        .call(Cmd::Status, Duration::from_secs(5))
    {
        Err(ClientError::Daemon(e)) => assert_eq!(e.kind, ErrorKind::Busy),
        other => panic!("17th client: {other:?}"),
    }
    // Pipelined requests on one connection are answered in order.
    drop(idle);
    drop(c);
    // The daemon frees the slots as it sees the closes; wait until it has.
    let deadline = Instant::now() + WAIT;
    loop {
        let reply = Client::connect(sock)
            .unwrap()
            .call(Cmd::Status, Duration::from_secs(5));
        match reply {
            Ok(Reply::Status(s)) if s.control_clients == 1 => break,
            Ok(_) | Err(ClientError::Daemon(_)) => {}
            Err(e) => panic!("status: {e}"),
        }
        assert!(Instant::now() < deadline, "control slots never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut s = UnixStream::connect(sock).unwrap();
    let mut two = encode_frame(&Request::new(Cmd::Dump));
    two.extend(encode_frame(&Request::new(Cmd::List)));
    s.write_all(&two).unwrap();
    assert!(matches!(
        raw_answer(&mut s),
        Some(Outcome::Ok(Reply::Dump(_)))
    ));
    assert!(matches!(
        raw_answer(&mut s),
        Some(Outcome::Ok(Reply::List(_)))
    ));
}

/// `ip`'s tallies in a `peers` answer (the test fails when the peer is not listed).
fn tally_of(peers: &iwpm_control::proto::PeersReport, ip: IpAddr) -> iwpm_control::PeerTally {
    peers
        .peers
        .iter()
        .find(|p| p.ip == ip)
        .expect("B tallied")
        .tally
}
