//! `iwpm-lab --hold`: two daemons over emulated kernels with B's listener and A's
//! connections held until SIGTERM, inspected from outside by pasting the line the lab
//! prints (the absolute path of `iwpmctl`) into a shell, and cleaned up (no daemon,
//! scratch directory or namespace left).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use iwpm_testkit::workspace::built_binary;
use rustix::process::{kill_process, Pid, Signal};

use crate::common::lab_command;

/// SIGTERM to `child`.
fn sigterm(child: &Child) -> rustix::io::Result<()> {
    kill_process(Pid::from_child(child), Signal::TERM)
}

/// `iwpmctl` as this run built it, beside the lab (`cargo test --workspace` builds it).
fn iwpmctl() -> PathBuf {
    built_binary("iwpmctl", "iwpm-control")
}

/// The lab's stdout lines as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Lines until one equal to `last` (panics after `limit`).
fn until(rx: &mpsc::Receiver<String>, last: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l == last => return got,
            Ok(l) => got.push(l),
            Err(e) => panic!("no {last:?} within {limit:?} ({e}); got {got:?}"),
        }
    }
}

/// The words after `key` in `line` (`iwpmd pid 123,` → `123`).
fn after<'a>(line: &'a str, key: &str) -> &'a str {
    let rest = &line[line
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} in {line:?}"))
        + key.len()..];
    rest.split(|c: char| c.is_whitespace() || c == ',')
        .find(|w| !w.is_empty())
        .unwrap_or_default()
}

/// Runs `line` as a user pasting it would (`sh -c`); its stdout, which must be a success.
fn paste(line: &str) -> String {
    let out = Command::new("sh").args(["-c", line]).output().unwrap();
    assert!(
        out.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lab process, killed if the test fails before it is released.
struct Held(Child);

impl Drop for Held {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = sigterm(&self.0);
            let _ = self.0.wait();
        }
    }
}

fn hold_and_release(extra: &[&str]) {
    let ctl = iwpmctl();
    let child = lab_command()
        .env("IWPMCTL_BIN", &ctl)
        .arg("--hold")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut held = Held(child);
    let child = &mut held.0;
    let rx = lines_of(child);
    let printed = until(&rx, "ready", Duration::from_secs(60));
    let hosts: Vec<&String> = printed.iter().filter(|l| l.starts_with("host ")).collect();
    assert_eq!(hosts.len(), 2, "{printed:#?}");
    let ctl_lines: Vec<&String> = printed
        .iter()
        .filter(|l| l.contains(" --socket "))
        .collect();
    assert_eq!(ctl_lines.len(), 2, "{printed:#?}");
    assert!(
        printed.iter().any(|l| l.starts_with("held: B listens on ")
            && l.ends_with("A opened 4 connections to it: 4 established")),
        "{printed:#?}"
    );
    let mut pids = Vec::new();
    let mut sockets = Vec::new();
    // A holds a mapping per connection, B its listener's.
    for ((host, line), mappings) in hosts
        .iter()
        .zip(&ctl_lines)
        .zip(["4 mappings", "1 mapping"])
    {
        let pid = after(host, "iwpmd pid");
        assert!(host.contains(&format!("({mappings})")), "{host}");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words[0],
            ctl.to_str().unwrap(),
            "{line}: not the absolute path"
        );
        assert_eq!(words.last(), Some(&"status"), "{line}");
        // The printed line, pasted into a shell as it is.
        let text = paste(line);
        assert_eq!(after(&text, "pid:"), pid, "{text}");
        assert!(text.contains("handshake:       done"), "{text}");
        // And with `list`, the mappings held.
        let list = paste(&line.replace(" status", " list"));
        assert!(list.trim_end().ends_with(mappings), "{list}");
        pids.push(pid.parse::<i32>().unwrap());
        sockets.push(PathBuf::from(words[2]));
    }
    let namespaces: Vec<String> = printed
        .iter()
        .find_map(|l| l.strip_prefix("namespaces: "))
        .map(|l| l.split(", ").map(str::to_owned).collect())
        .unwrap_or_default();

    sigterm(child).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "iwpm-lab --hold ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "{status}: {rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("SIGTERM: daemons stopped (A exit status: 0, B exit status: 0)")),
        "{rest:?}"
    );
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "iwpmd {pid} left running"
        );
    }
    for s in sockets {
        assert!(!s.parent().unwrap().exists(), "{} left behind", s.display());
    }
    if !namespaces.is_empty() {
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        for ns in namespaces {
            assert!(!list.contains(&ns), "namespace {ns} left: {list}");
        }
    }
}

#[test]
fn hold_prints_working_iwpmctl_lines_and_cleans_up_on_sigterm() {
    hold_and_release(&[]);
}

#[test]
#[cfg_attr(not_root, ignore = "needs root (--netns)")]
fn hold_in_two_namespaces_removes_them() {
    if !rustix::process::geteuid().is_root() {
        iwpm_testkit::host::say_skipped(
            "hold_in_two_namespaces_removes_them",
            "--netns needs root",
        );
        return;
    }
    hold_and_release(&["--netns"]);
}
