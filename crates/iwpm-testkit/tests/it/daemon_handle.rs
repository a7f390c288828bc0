//! The daemon handle on a stand-in child (`sh`): its stderr reaches the log line by line,
//! the waits see what arrives and give up at their bound, and the stops end the process.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use iwpm_testkit::daemon::{Daemon, Log, EVENT_LOOP_LINE, WAIT};

/// `sh -c SCRIPT` with stderr piped, as the daemon commands are.
fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn log_finds_from_an_index_and_keeps_the_stream_text() {
    let log = Log::default();
    for line in ["a: one", "b: two", "a: three"] {
        log.push(line.to_owned());
    }
    assert_eq!(log.find_from(0, "a:", Duration::ZERO), Some(0));
    assert_eq!(log.find_from(1, "a:", Duration::ZERO), Some(2));
    assert_eq!(log.find_from(3, "a:", Duration::from_millis(30)), None);
    assert_eq!(log.count_from(1, "a:"), 1);
    assert_eq!(log.text(), "a: one\nb: two\na: three\n");
    assert_eq!(log.lines_from(2), vec!["a: three".to_owned()]);
    assert!(!log.wait_for("absent", Duration::from_millis(30)));
}

#[test]
fn a_wait_sees_a_line_pushed_while_it_waits() {
    let log = Log::default();
    let writer = log.clone();
    let pushed = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        writer.push("late line".to_owned());
        Instant::now()
    });
    let arrived = log.arrival_of("late", WAIT).expect("the line arrived");
    assert!(arrived <= pushed.join().unwrap());
}

#[test]
fn stderr_lines_reach_the_log_and_terminate_stops_the_child() {
    let cmd = sh(&format!(
        "echo first >&2; echo '{EVENT_LOOP_LINE}' >&2; exec sleep 30"
    ));
    let mut d = Daemon::spawn(cmd, 1234);
    d.wait_loop();
    assert!(d.is_running());
    assert_eq!(d.stderr.lines_from(0)[0], "first");
    let status = d.terminate(WAIT).expect("terminate");
    assert_eq!(
        status.signal(),
        Some(rustix::process::Signal::TERM.as_raw())
    );
    assert!(!d.is_running());
    assert_eq!(d.peer_port, 1234);
}

#[test]
fn a_reader_of_ours_gets_every_line_and_kill9_reaps() {
    let (tx, rx) = mpsc::channel();
    let child = sh("echo x >&2; echo y >&2; exec sleep 30").spawn().unwrap();
    let mut d = Daemon::adopt_with(child, 0, "reader".into(), move |line| {
        let _ = tx.send(line);
    })
    .unwrap();
    let got: Vec<String> = (0..2).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
    assert_eq!(got, ["x", "y"]);
    assert!(d.stderr.is_empty(), "the lines went to our reader only");
    let status = d.kill9().expect("kill9");
    assert_eq!(status.signal(), Some(9));
    assert_eq!(d.wait_exit(Duration::ZERO), Some(status));
}

#[test]
fn an_exit_is_seen_without_a_signal() {
    let mut d = Daemon::spawn(sh("exit 3"), 0);
    let status = d.wait_exit(WAIT).expect("exited");
    assert_eq!(status.code(), Some(3));
    assert_eq!(d.try_exit(), Some(status));
}
