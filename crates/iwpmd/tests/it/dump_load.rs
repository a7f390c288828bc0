//! The SIGUSR1 dump of a large table does not hold up the event loop: with 50 000 mappings
//! and the log sink stalled in the middle of the dump, the daemon still answers an
//! ADD_MAPPING at once; SIGUSR1s arriving during the dump make exactly one more dump.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;
use iwpm_testkit::prelude::*;
use rustix::process::Signal;

const MAPPINGS: usize = 50_000;
/// An ADD answered later than this during a dump means the dump blocks the loop.
const ADD_BOUND: Duration = Duration::from_millis(500);

/// 127.1.x.y:5000, one distinct local address per mapping (no-port-map mappings hold no
/// port, so any address will do).
fn local(i: usize) -> SocketAddr {
    let i = u32::try_from(i).unwrap();
    let ip = Ipv4Addr::from(0x7f01_0000 + i);
    SocketAddr::from((ip, 5000))
}

#[test]
fn dump_of_50k_mappings_does_not_block_the_loop() {
    let dir = scratch_dir("dumpload");
    let mut kernel = FakeKernel::bind(&dir);
    let mut cmd = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    // No debug lines from the loop while the log sink is stalled (a log line written by
    // the loop itself would wait for the sink like any write); the shell's debug line
    // reports how long taking the dump text took.
    cmd.env("RUST_LOG", "info,iwpmd::shell=debug");
    let mut d = Watched::spawn(cmd);
    kernel.handshake();
    kernel.register();
    let mut k = KernelPipe::new(kernel);

    let t = Instant::now();
    let addrs: Vec<SocketAddr> = (0..MAPPINGS).map(local).collect();
    let outcomes = k.add_many(&addrs, IWPM_FLAGS_NO_PORT_MAP, 8, WAIT);
    let fill_s = t.elapsed().as_secs_f64();
    assert!(outcomes.iter().all(Result::is_ok), "an ADD failed");

    // The reader stops right after the dump header: the pipe fills and the dump writer
    // blocks mid-dump, as on a stalled syslog.
    d.with(|s| s.pause_at_header = true);
    let signalled = Instant::now();
    d.signal(Signal::USR1);
    assert!(d.wait(WAIT, |s| s.paused), "no dump header: {}", d.tail(20));
    let header_after = signalled.elapsed();

    let extra = local(MAPPINGS);
    let t = Instant::now();
    let outcome = k.add(extra, IWPM_FLAGS_NO_PORT_MAP, WAIT);
    let add_latency = t.elapsed();
    assert_eq!(outcome, Some(Ok(extra)), "ADD during the dump");
    assert!(
        d.with(|s| s.ends.is_empty()),
        "the dump ended before the ADD: the test proved nothing"
    );
    assert!(
        add_latency < ADD_BOUND,
        "ADD answered after {add_latency:?} while a dump was being written"
    );

    // Two more SIGUSR1 while the first dump is still being written: one more dump.
    d.signal(Signal::USR1);
    std::thread::sleep(Duration::from_millis(50));
    d.signal(Signal::USR1);
    std::thread::sleep(Duration::from_millis(50));
    d.resume();
    assert!(
        d.wait(Duration::from_secs(60), |s| s.ends.len() >= 2),
        "second dump missing: {}",
        d.tail(20)
    );
    std::thread::sleep(Duration::from_millis(500));
    let (headers, ends, per_dump) = d.with(|s| {
        (
            s.headers.clone(),
            s.ends.clone(),
            s.mappings_per_dump.clone(),
        )
    });
    assert_eq!(
        headers.len(),
        2,
        "SIGUSR1s during a dump must make exactly one more dump"
    );
    // The first dump is the table before the extra ADD, the second after it.
    assert_eq!(per_dump, vec![MAPPINGS, MAPPINGS + 1]);
    let second_dump = ends[1].saturating_duration_since(headers[1]);
    let take_ms = d.with(|s| {
        s.lines
            .iter()
            .filter_map(|(_, l)| l.split("took_ms=").nth(1))
            .filter_map(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .fold(0.0_f64, f64::max)
    });
    let coalesced = d.count("one more follows when it is done");
    assert!(coalesced >= 1, "{}", d.tail(20));
    assert!(d.is_running());

    println!(
        "dump figures: {} mappings (filled in {fill_s:.1} s); SIGUSR1 to dump header \
         {:.1} ms; taking the dump text (longest) {take_ms:.1} ms; ADD answered in \
         {:.2} ms while the dump writer was stalled mid-dump; {} SIGUSR1 during the dump \
         -> {} dumps in all; an unstalled dump of {} lines took {:.0} ms to write",
        MAPPINGS + 1,
        header_after.as_secs_f64() * 1e3,
        add_latency.as_secs_f64() * 1e3,
        2,
        headers.len(),
        4 * (MAPPINGS + 1),
        second_dump.as_secs_f64() * 1e3,
    );
    d.signal(Signal::TERM);
    let status = wait_child(&mut d.child, WAIT).expect("no exit after SIGTERM");
    assert_eq!(status.code(), Some(0));
}
