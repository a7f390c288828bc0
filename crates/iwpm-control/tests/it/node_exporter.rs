//! The metrics read by their real consumer: Debian's `prometheus-node-exporter` with its
//! textfile collector over `iwpmctl metrics` output. A real daemon runs over the emulated
//! kernel (the lab, with connections so the counters move); its metrics go into a `.prom`
//! file; node_exporter, on loopback with every other collector disabled, serves them over
//! HTTP; every `iwpmd_` series must come back with its type and value, and the collector
//! must report no parse error (`node_textfile_scrape_error 0`).
//!
//! Ignored, with the reason, where node_exporter is not installed (the crate's build script
//! decides; skipped visibly if it went missing since the build); a failure in CI (`CI` or
//! `IWPM_RIG_REQUIRED=1`, as `.ci/run` sets), which installs it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use iwpm_control::metrics;
use iwpm_kernel_emu::{AcceptMode, EventChannel};
use iwpm_lab::workload::Acceptor;
use iwpm_lab::{Lab, LabConfig};
use iwpm_testkit::host::which;

fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var("IWPM_RIG_REQUIRED").as_deref() == Ok("1")
}

/// Kills node_exporter when the test ends, however it ends.
struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn iwpmctl(socket: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_iwpmctl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("cannot run iwpmctl");
    assert!(
        out.status.success(),
        "iwpmctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `GET /metrics` over HTTP/1.0; `None` until the exporter listens.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let (head, body) = body.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
}

/// Prometheus text: `# TYPE` per name, and each sample (name with its labels sorted, as
/// node_exporter writes them) to its value.
type Exposition = (BTreeMap<String, String>, BTreeMap<String, f64>);

fn parse_text(text: &str) -> Exposition {
    let mut types = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            types.insert(name.to_owned(), kind.to_owned());
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let key = match series.split_once('{') {
                Some((name, labels)) => {
                    let mut l: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                    l.sort_unstable();
                    format!("{name}{{{}}}", l.join(","))
                }
                None => series.to_owned(),
            };
            samples.insert(key, value.parse::<f64>().expect("sample value"));
        }
    }
    (types, samples)
}

#[test]
#[cfg_attr(
    node_exporter_missing,
    ignore = "prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)"
)]
fn node_exporter_serves_every_iwpmd_series_with_its_type() {
    let Some(exporter) = ["prometheus-node-exporter", "node_exporter"]
        .into_iter()
        .find_map(which)
    else {
        assert!(
            !required(),
            "prometheus-node-exporter must be installed in CI (.ci/run installs it)"
        );
        iwpm_testkit::host::say_skipped(
            "node_exporter_serves_every_iwpmd_series_with_its_type",
            "prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)",
        );
        return;
    };
    let lab = Lab::start(LabConfig::default()).expect("lab set-up");
    let channel = EventChannel::new();
    let listen_addr = lab.b_addr(4100);
    let _listener = lab
        .b
        .host
        .listen(listen_addr, AcceptMode::Auto, Some(&channel))
        .expect("listen on B");
    let _acceptor = Acceptor::start(channel);
    let _conns: Vec<_> = (0..2)
        .map(|_| lab.a.host.connect(None, listen_addr).expect("connect"))
        .collect();
    let daemon = lab.a.daemon.as_ref().expect("daemon running");
    let socket = iwpm_control::socket_beside(&daemon.config().kernel);

    let dir = std::env::temp_dir().join(format!("iwpm-node-exporter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let textfile = iwpmctl(&socket, &["metrics"]);
    std::fs::write(dir.join("iwpmd.prom"), &textfile).unwrap();
    // What the daemon means: the families and types of its OpenMetrics text.
    let openmetrics = iwpmctl(&socket, &["metrics", "--openmetrics", "--check"]);
    let meant = metrics::parse(&openmetrics).unwrap_or_else(|e| panic!("{e}\n{openmetrics}"));

    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let log = dir.join("node_exporter.log");
    let _running = Exporter(
        Command::new(&exporter)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!("--collector.textfile.directory={}", dir.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start node_exporter"),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let served = loop {
        if let Some(body) = scrape(port) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "node_exporter never answered on 127.0.0.1:{port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let (types, samples) = parse_text(&served);
    assert_eq!(
        samples.get("node_textfile_scrape_error"),
        Some(&0.0),
        "the textfile collector could not read iwpmctl's output:\n{}\n{textfile}",
        log_text()
    );

    // Every sample the daemon meant, under the type it meant, with the value in the file.
    let (file_types, file_samples) = parse_text(&textfile);
    assert!(meant.len() > 20, "{openmetrics}");
    for s in &meant {
        let want = match s.kind.as_str() {
            "info" => "gauge",
            other => other,
        };
        assert_eq!(
            types.get(&s.name).map(String::as_str),
            Some(want),
            "{} ({} {}): TYPE as served",
            s.name,
            s.family,
            s.kind
        );
        assert_eq!(file_types.get(&s.name).map(String::as_str), Some(want));
        let key = if s.labels.is_empty() {
            s.name.clone()
        } else {
            let mut l: Vec<String> = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            l.sort_unstable();
            format!("{}{{{}}}", s.name, l.join(","))
        };
        let in_file = file_samples
            .get(&key)
            .unwrap_or_else(|| panic!("{key} not in\n{textfile}"));
        assert_eq!(samples.get(&key), Some(in_file), "{key} as served");
    }
    // And nothing of ours that the daemon did not mean.
    let ours = samples.keys().filter(|k| k.starts_with("iwpmd_")).count();
    assert_eq!(ours, meant.len(), "{served}");
    assert!(samples["iwpmd_core_peer_in_accept_total"] >= 2.0);
    std::fs::remove_dir_all(&dir).unwrap();
}
