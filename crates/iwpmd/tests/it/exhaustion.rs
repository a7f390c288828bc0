//! Resource exhaustion: out of file descriptors (a daemon held to `ulimit -n 64`) and out
//! of ports (a network namespace whose ephemeral range has 50 ports). In both cases the
//! kernel gets CREATE_MAPPING_ERR (HANDLE_ERR 11) for what cannot be mapped, the log says
//! plainly what ran out, the daemon keeps answering without growing its descriptors, and
//! mappings work again once others are removed. Figures are printed (`--nocapture`).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use iwpm_proto::consts::err::IWPM_CREATE_MAPPING_ERR;
use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;
use iwpm_testkit::prelude::*;
use rustix::process::Signal;

/// `prefix... <daemon command>`: the daemon run under a wrapper (prlimit, setpriv).
fn wrapped(prefix: &[&str], daemon: &Command) -> Command {
    let mut cmd = Command::new(prefix[0]);
    cmd.args(&prefix[1..])
        .arg(daemon.get_program())
        .args(daemon.get_args());
    for (k, v) in daemon.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// A prefix that runs a command with RLIMIT_NOFILE 64:64: util-linux `prlimit`, else the
/// shell's `ulimit -n` (which sets both limits).
fn nofile_64() -> Vec<&'static str> {
    if have_tool("prlimit") {
        vec!["prlimit", "--nofile=64:64", "--"]
    } else {
        vec!["sh", "-c", "ulimit -n 64 && exec \"$@\"", "sh"]
    }
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Starts a daemon from `cmd` against `kernel`, does the handshake and registration.
fn start(mut kernel: FakeKernel, cmd: Command) -> (Watched, KernelPipe) {
    let d = Watched::spawn(cmd);
    kernel.handshake();
    kernel.register();
    assert!(
        d.wait_line("entering the event loop", WAIT),
        "{}",
        d.tail(30)
    );
    (d, KernelPipe::new(kernel))
}

/// Waits until the daemon's descriptor count satisfies `cond`.
fn fds_until(d: &Watched, cond: impl Fn(usize) -> bool) -> usize {
    let deadline = Instant::now() + WAIT;
    loop {
        let n = d.open_fds();
        if cond(n) || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Adds port-mapped mappings for 127.0.0.1:`first`.. until `extra_failures` ADDs in a row
/// have failed after the first failure; returns (held, failures, mapped addresses).
fn add_until_refused(
    k: &mut KernelPipe,
    first: u16,
    max: u16,
    extra_failures: usize,
) -> (Vec<SocketAddr>, usize) {
    let mut held = Vec::new();
    let mut failures = 0;
    for p in first..first + max {
        match k.add(local(p), 0, WAIT).expect("ADD not answered") {
            Ok(_) => {
                assert_eq!(failures, 0, "an ADD succeeded after the first refusal");
                held.push(local(p));
            }
            Err(code) => {
                assert_eq!(
                    code, IWPM_CREATE_MAPPING_ERR,
                    "refused ADD must get CREATE_MAPPING_ERR"
                );
                failures += 1;
                if failures > extra_failures {
                    break;
                }
            }
        }
    }
    (held, failures)
}

/// Removes `n` of the held mappings, waits for their sockets to close, adds `n` new ones.
fn recover(d: &Watched, k: &mut KernelPipe, held: &mut Vec<SocketAddr>, n: usize, next: u16) {
    let before = d.open_fds();
    for a in held.drain(..n) {
        k.send_remove(a);
    }
    let after = fds_until(d, |f| f + n <= before);
    assert!(
        after + n <= before,
        "REMOVE did not close the sockets ({before} -> {after})"
    );
    for p in next..next + u16::try_from(n).unwrap() {
        let outcome = k.add(local(p), 0, WAIT).expect("ADD not answered");
        assert!(
            outcome.is_ok(),
            "ADD after REMOVEs still refused: {outcome:?}"
        );
        held.push(local(p));
    }
}

/// The first daemon log line containing `needle`, from the message on.
fn first_line(d: &Watched, needle: &str) -> String {
    d.with(|s| {
        s.lines
            .iter()
            .find_map(|(_, l)| l.find(needle).map(|i| l[i..].to_owned()))
            .unwrap_or_default()
    })
}

/// The open descriptor numbers of process `pid`.
fn fd_numbers(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// True when this process has CAP_SYS_RESOURCE in its effective set (bit 24).
fn have_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
            u64::from_str_radix(hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

/// As root the daemon raises even the hard limit to what max_mappings needs.
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn root_raises_the_descriptor_limit_for_max_mappings() {
    if skip_unless_root(
        "root_raises_the_descriptor_limit_for_max_mappings",
        "raising the hard limit needs root",
    ) {
        return;
    }
    let dir = scratch_dir("nofile-raise");
    let kernel = FakeKernel::bind(&dir);
    let daemon = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    let (d, _k) = start(kernel, wrapped(&nofile_64(), &daemon));
    let (soft, hard) = nofile_limits(d.pid()).expect("/proc limits");
    assert!(
        d.wait_line("descriptor limit RLIMIT_NOFILE: soft", WAIT),
        "{}",
        d.tail(30)
    );
    if have_cap_sys_resource() {
        println!("fd limit figures: started with 64:64, running with soft {soft} hard {hard}");
        let soft: u64 = soft.parse().unwrap();
        assert!(soft >= 100_000 + 1024, "soft limit not raised: {soft}");
        assert_eq!(hard.parse::<u64>().unwrap(), soft);
    } else {
        // Containers often withhold CAP_SYS_RESOURCE even from root: then the daemon must
        // say that it could not raise the limit, and run on.
        assert!(
            d.wait_line("cannot raise the hard RLIMIT_NOFILE to 101024", WAIT),
            "{}",
            d.tail(30)
        );
        assert_eq!((soft.as_str(), hard.as_str()), ("64", "64"));
        println!(
            "fd limit figures: root without CAP_SYS_RESOURCE here: started with 64:64, \
             the daemon logged that it cannot raise the hard limit to 101024 and runs \
             with soft {soft} hard {hard}"
        );
    }
}

/// `ulimit -n 64` and no CAP_SYS_RESOURCE: mappings fail with CREATE_MAPPING_ERR when the
/// descriptors run out, the log names the limit, and removing mappings makes room again.
#[test]
fn descriptor_exhaustion_is_reported_and_recovers() {
    const NAME: &str = "descriptor_exhaustion_is_reported_and_recovers";
    let mut prefix = nofile_64();
    if have_cap_sys_resource() {
        // With CAP_SYS_RESOURCE the daemon would raise the hard limit: drop it from the
        // bounding set (util-linux setpriv), so the limit stays 64.
        if !have_tool("setpriv") {
            skip(
                NAME,
                "setpriv (util-linux) missing to drop CAP_SYS_RESOURCE",
            );
            return;
        }
        prefix.extend([
            "setpriv",
            "--inh-caps=-sys_resource",
            "--bounding-set=-sys_resource",
            "--",
        ]);
    }
    let dir = scratch_dir("nofile");
    let kernel = FakeKernel::bind(&dir);
    let daemon = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    let cmd = wrapped(&prefix, &daemon);
    let (mut d, mut k) = start(kernel, cmd);
    assert_eq!(
        nofile_limits(d.pid()),
        Some(("64".into(), "64".into())),
        "the test needs the daemon held to 64 descriptors"
    );
    assert!(
        // (info in the foreground, a warning for a service: `process::fd_limit_line`)
        d.wait_line(
            "RLIMIT_NOFILE: soft 64 hard 64 (as inherited) is below",
            WAIT
        ),
        "{}",
        d.tail(30)
    );
    let base_fds = d.open_fds();

    let (mut held, failures) = add_until_refused(&mut k, 21_000, 200, 20);
    let at_exhaustion = d.open_fds();
    assert!(failures > 20, "descriptors never ran out");
    // RLIMIT_NOFILE bounds descriptor numbers: when it bites, 0..63 are all taken
    // (descriptors inherited above the limit, e.g. a jobserver pipe, do not count).
    let below_limit = fd_numbers(d.pid()).iter().filter(|n| **n < 64).count();
    assert_eq!(
        below_limit, 64,
        "descriptors 0..63 not all in use at exhaustion"
    );
    assert!(
        d.wait_line("out of file descriptors", WAIT),
        "{}",
        d.tail(30)
    );
    assert!(
        d.count("RLIMIT_NOFILE limit of 64") >= 1,
        "the log must name the limit:\n{}",
        d.tail(30)
    );
    // Still serving: a mapping that needs no descriptor works.
    let siw = local(22_000);
    assert_eq!(k.add(siw, IWPM_FLAGS_NO_PORT_MAP, WAIT), Some(Ok(siw)));
    assert!(d.is_running());

    let n_held = held.len();
    recover(&d, &mut k, &mut held, 10, 23_000);
    let (_, again) = add_until_refused(&mut k, 24_000, 50, 0);
    assert_eq!(again, 1, "the limit applies again once the room is used");

    println!(
        "fd exhaustion log: {}",
        first_line(&d, "out of file descriptors")
    );
    println!(
        "fd exhaustion figures: RLIMIT_NOFILE 64:64 (hard limit not raisable); {base_fds} \
         descriptors at start; {n_held} port-mapped mappings held when descriptors ran out \
         (descriptors 0-63 all in use, {at_exhaustion} open in all); {failures} ADDs answered CREATE_MAPPING_ERR (HANDLE_ERR \
         {IWPM_CREATE_MAPPING_ERR}); after 10 REMOVEs, 10 of 10 new ADDs succeeded; the next \
         one was refused again"
    );
    d.signal(Signal::TERM);
    let status = wait_child(&mut d.child, WAIT).expect("no exit after SIGTERM");
    assert_eq!(status.code(), Some(0));
}

/// Runs `body` on a thread inside a new network namespace with `lo` up and an ephemeral
/// port range of `range`; `Err` with the reason when the namespace cannot be made.
fn in_netns<T: Send + 'static>(
    range: (u16, u16),
    body: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let t = std::thread::spawn(move || -> Result<T, String> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
        let run = |prog: &str, args: &[&str]| -> Result<(), String> {
            let out = Command::new(prog)
                .args(args)
                .output()
                .map_err(|e| format!("{prog}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{prog} {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        // Children inherit this thread's namespace.
        run("ip", &["link", "set", "lo", "up"])?;
        let value = format!("net.ipv4.ip_local_port_range={} {}", range.0, range.1);
        run("sysctl", &["-q", "-w", &value])?;
        let out = Command::new("sysctl")
            .args(["-n", "net.ipv4.ip_local_port_range"])
            .output()
            .map_err(|e| e.to_string())?;
        let got = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if got != format!("{} {}", range.0, range.1) {
            return Err(format!("port range not applied in the namespace: {got}"));
        }
        Ok(body())
    });
    match t.join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A namespace with 50 ephemeral ports: ADDs beyond them get CREATE_MAPPING_ERR, the
/// daemon stays healthy with a steady descriptor count, and REMOVEs make room again.
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn port_space_exhaustion_in_a_small_namespace() {
    const NAME: &str = "port_space_exhaustion_in_a_small_namespace";
    if !rustix::process::geteuid().is_root() {
        skip(NAME, "network namespaces need root");
        return;
    }
    for tool in ["ip", "sysctl"] {
        if Command::new(tool)
            .arg(if tool == "ip" { "-V" } else { "--version" })
            .output()
            .is_err()
        {
            skip(NAME, &format!("`{tool}` is not installed"));
            return;
        }
    }
    const RANGE: (u16, u16) = (40_000, 40_049);
    let result = in_netns(RANGE, || {
        let dir = scratch_dir("ports");
        let kernel = FakeKernel::bind(&dir);
        let mut daemon = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, 3935);
        daemon.stderr(Stdio::piped());
        let (mut d, mut k) = start(kernel, daemon);

        let (mut held, failures) = add_until_refused(&mut k, 20_000, 200, 0);
        let n_held = held.len();
        assert!(n_held <= 50, "{n_held} ports from a range of 50");
        assert!(n_held >= 40, "only {n_held} of 50 ports mapped");
        assert_eq!(failures, 1);
        let fds_at_exhaustion = d.open_fds();
        // Many more refused ADDs: answered, and no descriptor leaks.
        let t = Instant::now();
        let mut refused = 1;
        for p in 20_500..20_600 {
            let outcome = k.add(local(p), 0, WAIT).expect("ADD not answered");
            assert_eq!(outcome, Err(IWPM_CREATE_MAPPING_ERR));
            refused += 1;
        }
        let refused_ms = t.elapsed().as_secs_f64() * 1e3 / 100.0;
        let fds_after = d.open_fds();
        assert_eq!(fds_after, fds_at_exhaustion, "descriptors grew");
        assert!(d.wait_line("out of ports", WAIT), "{}", d.tail(30));
        assert!(
            d.count(&format!("ip_local_port_range ({}-{}", RANGE.0, RANGE.1)) >= 1,
            "the log must name the range:\n{}",
            d.tail(30)
        );
        assert!(d.is_running());

        recover(&d, &mut k, &mut held, 10, 21_000);
        d.signal(Signal::USR1);
        assert!(d.wait_line("io counters:", WAIT), "{}", d.tail(30));
        let io = d.with(|s| {
            s.lines
                .iter()
                .rev()
                .find(|(_, l)| l.contains("io counters:"))
                .map(|(_, l)| l.clone())
                .unwrap_or_default()
        });
        assert!(io.contains(&format!("ports_held={n_held}")), "{io}");
        assert!(io.contains(&format!("reserve_no_port={refused}")), "{io}");

        println!("port exhaustion log: {}", first_line(&d, "out of ports"));
        d.signal(Signal::TERM);
        let status = wait_child(&mut d.child, WAIT).expect("no exit after SIGTERM");
        assert_eq!(status.code(), Some(0));
        format!(
            "port exhaustion figures: net.ipv4.ip_local_port_range {}-{} in a private \
             namespace; {n_held} port-mapped mappings held when the range ran out; {refused} \
             ADDs answered CREATE_MAPPING_ERR (HANDLE_ERR {IWPM_CREATE_MAPPING_ERR}) in \
             {refused_ms:.2} ms each; descriptors {fds_at_exhaustion} at exhaustion and \
             {fds_after} after 100 more refusals; after 10 REMOVEs, 10 of 10 new ADDs \
             succeeded",
            RANGE.0, RANGE.1
        )
    });
    match result {
        Ok(figures) => println!("{figures}"),
        Err(reason) => {
            skip(NAME, &reason);
        }
    }
}
