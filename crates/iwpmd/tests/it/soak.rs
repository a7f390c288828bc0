//! Soak tests of the live daemon (the real binary, its kernel link on a Unix datagram socket
//! played by the test): many ADD/REMOVE cycles, and many bogus peer datagrams from
//! loopback. The daemon's open file descriptors (`/proc/PID/fd`) and resident memory
//! (`VmRSS`) are measured after a warm-up and again after the run and a short settle:
//!
//! * descriptors must be exactly as many as before (every reserved port released);
//! * RSS may grow by at most [`RSS_BOUND_KIB`] (8 MiB): the reply-once memory of kernel
//!   request numbers alone is allowed 65 536 entries (~2.5 MiB) and fills only after ~20 s
//!   of traffic, the rest is allocator slack. The bound does not depend on N: a leak of a
//!   few bytes per cycle shows at the full size.
//!
//! N (cycles, and datagrams) comes from `IWPM_SOAK`: CI runs `IWPM_SOAK=200000`
//! (`.ci/run`), a full soak `IWPM_SOAK=1000000`; the default (20 000 cycles, 40 000
//! datagrams) keeps a local `cargo test --workspace` short. Figures are printed (run with
//! `--nocapture` to see them):
//!
//! ```text
//! IWPM_SOAK=1000000 cargo test -p iwpmd --test it -- soak:: --nocapture --test-threads 1
//! ```

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use iwpm_proto::netlink::{DaemonMsg, KernelMsg, ManageMappingRequest};
use iwpm_proto::peer::{IpVersion, PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::SockAddrStorage;
use iwpm_testkit::prelude::*;

/// Allowed RSS growth over a soak, in KiB.
const RSS_BOUND_KIB: u64 = 8 * 1024;
/// ADD/REMOVE cycles (and datagrams) without `IWPM_SOAK`.
const DEFAULT_CYCLES: u64 = 20_000;
const DEFAULT_DATAGRAMS: u64 = 40_000;
/// Peer datagrams between two waits for the daemon's UDP receive queue to empty (so the
/// datagrams are processed, not dropped by a full socket; drops are counted and bounded).
const BARRIER_EVERY: u64 = 64;
/// Peer datagrams between two kernel round trips (the daemon still answers its kernel).
const KERNEL_PING_EVERY: u64 = 8192;
/// Share of the datagrams the daemon's socket may drop (its queue overflowing while the
/// daemon is descheduled) before the run says little about the daemon.
const MAX_DROP_SHARE: f64 = 0.01;
const SETTLE: Duration = Duration::from_millis(500);
const LO: Ipv4Addr = Ipv4Addr::LOCALHOST;

fn soak_size(default: u64) -> u64 {
    std::env::var("IWPM_SOAK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug)]
struct Usage {
    fds: usize,
    rss_kib: u64,
}

fn usage(pid: u32) -> Usage {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    Usage { fds, rss_kib }
}

/// The /proc/net/udp line of the UDP socket bound to 127.0.0.1:`port`, split in columns.
fn udp_socket(pid: u32, port: u16) -> Option<Vec<String>> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).ok()?;
    let local = format!("{:08X}:{port:04X}", u32::from_ne_bytes(LO.octets()));
    table.lines().skip(1).find_map(|l| {
        let cols: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
        (cols.get(1) == Some(&local)).then_some(cols)
    })
}

/// Datagrams dropped so far by the socket (the `drops` column).
fn udp_drops(pid: u32, port: u16) -> Option<u64> {
    udp_socket(pid, port)?.last()?.parse().ok()
}

/// Bytes waiting in the socket's receive queue (`tx_queue:rx_queue`, hex).
fn udp_backlog(pid: u32, port: u16) -> Option<u64> {
    let cols = udp_socket(pid, port)?;
    let rx = cols.get(4)?.split(':').nth(1)?;
    u64::from_str_radix(rx, 16).ok()
}

/// Waits (bounded) until the daemon has read everything queued on its peer socket.
fn wait_drained(pid: u32, port: u16) {
    let deadline = Instant::now() + WAIT;
    while udp_backlog(pid, port).is_some_and(|b| b > 0) && Instant::now() < deadline {
        std::thread::yield_now();
    }
}

/// The daemon is still running (its stderr is shown if not).
fn assert_alive(daemon: &mut Daemon) {
    assert!(
        daemon.is_running(),
        "daemon died:\n{}",
        daemon.stderr.text()
    );
}

fn check_bounds(what: &str, n: u64, secs: f64, before: Usage, after: Usage) {
    let growth = after.rss_kib.saturating_sub(before.rss_kib);
    println!(
        "soak {what}: {n} in {secs:.1} s = {:.0}/s; fds {} -> {}; VmRSS {} KiB -> {} KiB \
         (+{growth} KiB, bound {RSS_BOUND_KIB} KiB)",
        n as f64 / secs,
        before.fds,
        after.fds,
        before.rss_kib,
        after.rss_kib,
    );
    assert_eq!(after.fds, before.fds, "{what}: open descriptors changed");
    assert!(
        growth <= RSS_BOUND_KIB,
        "{what}: RSS grew by {growth} KiB (bound {RSS_BOUND_KIB} KiB)"
    );
}

/// A quiet daemon (info level: per-message debug lines would cost more than the work)
/// past its handshake, with client 2 registered.
fn start(tag: &str) -> (FakeKernel, Daemon) {
    let mut kernel = FakeKernel::bind_owning(scratch_dir(tag));
    let port = free_udp_port();
    let mut cmd = daemon_command!(&kernel.path, LO, port);
    cmd.env("RUST_LOG", "info");
    let daemon = Daemon::spawn(cmd, port);
    kernel.handshake();
    kernel.register();
    daemon.wait_loop();
    (kernel, daemon)
}

fn add(kernel: &mut FakeKernel, addr: SocketAddr) -> SocketAddr {
    let (seq, reply) = kernel.add_mapping(addr);
    match reply {
        DaemonMsg::AddMapping(r) => {
            assert_eq!(r.seq, seq);
            assert_eq!(r.err, 0);
            assert_eq!(r.addr, SockAddrStorage::from_socket_addr(addr));
            let mapped = r.mapped_addr.to_socket_addr().expect("mapped address");
            assert_ne!(mapped.port(), 0);
            mapped
        }
        other => panic!("ADD {addr} answered with {other:?}"),
    }
}

fn remove(kernel: &mut FakeKernel, addr: SocketAddr) {
    kernel.send(&KernelMsg::RemoveMapping(ManageMappingRequest {
        echo_seq: 0,
        addr: SockAddrStorage::from_socket_addr(addr),
        flags: None,
        unknown: vec![],
    }));
}

/// ADD then REMOVE of the same address, N times. Each ADD must succeed, which also proves
/// the previous REMOVE freed the mapping (a second ADD of a held address is refused).
#[test]
fn add_remove_cycles_leak_nothing() {
    let n = soak_size(DEFAULT_CYCLES);
    let (mut kernel, mut daemon) = start("soak-cycles");
    let addr = SocketAddr::from((LO, 7100));
    let warm_up = (n / 20).clamp(100, 5_000);
    for _ in 0..warm_up {
        add(&mut kernel, addr);
        remove(&mut kernel, addr);
    }
    std::thread::sleep(SETTLE);
    let before = usage(daemon.pid());

    let t = Instant::now();
    let mut last = addr;
    let mut tenths = Vec::new();
    for i in 0..n {
        last = add(&mut kernel, addr);
        remove(&mut kernel, addr);
        if (i + 1) % (n / 10).max(1) == 0 {
            tenths.push(usage(daemon.pid()).rss_kib);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!("soak ADD/REMOVE cycles: VmRSS (KiB) after each tenth: {tenths:?}");
    assert!(
        eventually(WAIT, || tcp_port_free(SocketAddr::from((LO, last.port())))),
        "the last mapped port {last} is still reserved after its REMOVE"
    );
    std::thread::sleep(SETTLE);
    let after = usage(daemon.pid());
    assert_alive(&mut daemon);
    check_bounds("ADD/REMOVE cycles", n, secs, before, after);
}

/// Deterministic xorshift64* stream (no dependency needed for test noise).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn request_for_nothing(noise: &mut Noise, from: SocketAddr) -> PeerMessage {
    // ap: a loopback address and port no mapping has.
    let ap = SocketAddr::from((
        Ipv4Addr::new(127, 0, 0, 3),
        20_000 + noise.below(10_000) as u16,
    ));
    let cp = SocketAddr::new(from.ip(), 30_000 + noise.below(10_000) as u16);
    PeerMessage::request(noise.next(), cp, cp, ap)
}

/// One bogus datagram of kind `k`.
fn bogus(noise: &mut Noise, k: u64, from: SocketAddr) -> Vec<u8> {
    match k % 8 {
        // Random garbage, any length.
        0 => (0..noise.below(100)).map(|_| noise.next() as u8).collect(),
        // A REQUEST cut short.
        1 => {
            let mut b = request_for_nothing(noise, from).encode();
            b.truncate(1 + noise.below(63) as usize);
            if b.len() == 48 {
                b.pop();
            }
            b
        }
        // Wrong magic: IP-version nibble neither 4 nor 6.
        2 => {
            let mut b = request_for_nothing(noise, from).encode();
            let nibble = [0u8, 1, 2, 3, 5, 7, 8, 15][noise.below(8) as usize];
            b[0] = (b[0] & 0xf0) | nibble;
            b
        }
        // REQUESTs for addresses with no mapping (64- and 48-byte forms).
        3 => request_for_nothing(noise, from).encode(),
        4 => {
            let mut m = request_for_nothing(noise, from);
            m.mapped_cp_ip = None;
            m.encode()
        }
        // ACCEPT / ACK / REJECT for association handles nobody issued.
        k => {
            let ty = match k {
                5 => PeerMsgType::Accept,
                6 => PeerMsgType::Ack,
                _ => PeerMsgType::Reject,
            };
            let req = request_for_nothing(noise, from);
            PeerMessage {
                msg_type: ty,
                ip_version: IpVersion::V4,
                reserved_port: 0,
                mapped_cp_ip: None,
                ..req
            }
            .encode()
        }
    }
}

/// N bogus peer datagrams to the daemon's UDP port from loopback; the daemon must keep its
/// descriptors and memory, and still work afterwards.
#[test]
fn bogus_peer_datagrams_leak_nothing() {
    let n = soak_size(DEFAULT_DATAGRAMS);
    let (mut kernel, mut daemon) = start("soak-peer");
    // One real mapping, so the daemon has state the noise could disturb.
    let listen = SocketAddr::from((LO, 7200));
    let mapped = add(&mut kernel, listen);

    let sock = UdpSocket::bind((LO, 0)).unwrap();
    sock.set_nonblocking(true).unwrap();
    let from = sock.local_addr().unwrap();
    let to = SocketAddr::from((LO, daemon.peer_port));
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut answers = 0u64;
    let (pid, port) = (daemon.pid(), daemon.peer_port);
    let mut tenths = Vec::new();
    let mut run = |count: u64, kernel: &mut FakeKernel, answers: &mut u64, rss: &mut Vec<u64>| {
        let mut buf = [0u8; 128];
        for i in 0..count {
            let k = noise.next();
            let d = bogus(&mut noise, k, from);
            // Loopback UDP: a full socket buffer drops, it does not block.
            let _ = sock.send_to(&d, to);
            if i % BARRIER_EVERY == BARRIER_EVERY - 1 {
                wait_drained(pid, port);
                while sock.recv_from(&mut buf).is_ok() {
                    *answers += 1;
                }
            }
            if i % KERNEL_PING_EVERY == KERNEL_PING_EVERY - 1 {
                kernel.register();
            }
            if (i + 1) % (count / 10).max(1) == 0 {
                rss.push(usage(pid).rss_kib);
            }
        }
        wait_drained(pid, port);
    };
    let warm_up = (n / 20).clamp(1_000, 20_000);
    run(warm_up, &mut kernel, &mut answers, &mut Vec::new());
    std::thread::sleep(SETTLE);
    let before = usage(daemon.pid());
    let drops_before = udp_drops(daemon.pid(), daemon.peer_port);

    let t = Instant::now();
    answers = 0;
    run(n, &mut kernel, &mut answers, &mut tenths);
    let secs = t.elapsed().as_secs_f64();
    std::thread::sleep(SETTLE);
    let after = usage(daemon.pid());
    assert_alive(&mut daemon);
    let drops = udp_drops(daemon.pid(), daemon.peer_port)
        .zip(drops_before)
        .map(|(a, b)| a - b);
    println!(
        "soak bogus datagrams: {answers} answers (REJECTs) received; dropped by the \
         daemon's socket: {drops:?}; VmRSS (KiB) after each tenth: {tenths:?}"
    );
    if let Some(d) = drops {
        assert!(
            d as f64 <= n as f64 * MAX_DROP_SHARE,
            "{d} of {n} datagrams dropped unprocessed"
        );
    }

    // Still working: the mapping is intact and a new one can be made.
    assert!(!tcp_port_free(SocketAddr::from((LO, mapped.port()))));
    add(&mut kernel, SocketAddr::from((LO, 7201)));
    check_bounds("bogus peer datagrams", n, secs, before, after);
}
