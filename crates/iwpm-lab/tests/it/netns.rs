//! The two hosts in their own network namespaces, joined by a veth pair: the daemons'
//! peer traffic crosses the veth. Needs root and `ip`; skips with the reason otherwise.
//! Each test creates uniquely named namespaces and the lab deletes them when dropped.

use std::path::Path;
use std::time::Duration;

use iwpm_lab::netns;
use iwpm_lab::relay::RelayConfig;
use iwpm_lab::workload::WorkloadConfig;
use iwpm_lab::{run, Family, Lab, LabConfig, RunOptions, Topology};

fn skip_reason() -> Option<String> {
    if !netns::is_root() {
        return Some(format!(
            "not root (uid {}): network namespaces need CAP_SYS_ADMIN",
            rustix::process::geteuid().as_raw()
        ));
    }
    if !netns::have_ip() {
        return Some("the `ip` command (iproute2) is missing".into());
    }
    None
}

/// The inode of a network namespace file, to tell namespaces apart.
fn ns_inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

fn veth_run(family: Family, loss: f64, connections: usize) {
    if let Some(why) = skip_reason() {
        iwpm_testkit::host::say_skipped("the veth lab run", &why);
        return;
    }
    let mut lab = Lab::start(LabConfig {
        family,
        topology: Topology::VethPair,
        relay: Some(RelayConfig {
            loss,
            ..RelayConfig::default()
        }),
        ..LabConfig::default()
    })
    .unwrap_or_else(|e| panic!("lab set-up failed: {e}"));
    let names: Vec<String> = [&lab.a, &lab.b]
        .iter()
        .map(|s| s.place.name().expect("named namespace").to_string())
        .collect();
    assert_ne!(names[0], names[1]);
    // Each daemon really runs in its host's namespace, not in ours.
    let ours = ns_inode(Path::new("/proc/self/ns/net"));
    for (side, name) in [&lab.a, &lab.b].iter().zip(&names) {
        let pid = side.daemon.as_ref().unwrap().pid();
        let theirs = ns_inode(Path::new(&format!("/proc/{pid}/ns/net")));
        assert_eq!(theirs, ns_inode(&Path::new("/run/netns").join(name)));
        assert_ne!(theirs, ours);
    }
    let opts = RunOptions {
        workload: WorkloadConfig {
            connections,
            concurrency: connections.min(64),
            ..WorkloadConfig::default()
        },
        ..RunOptions::default()
    };
    let report = run(&mut lab, &opts, Duration::ZERO, |_| {}).unwrap();
    assert!(report.ok, "{}", report.render());
    assert_eq!(report.connections.consistent, connections);
    drop(lab);
    for name in &names {
        assert!(
            !Path::new("/run/netns").join(name).exists(),
            "namespace {name} left behind"
        );
    }
}

#[test]
#[cfg_attr(not_root, ignore = "needs root (network namespaces)")]
fn veth_pair_ipv4() {
    veth_run(Family::V4, 0.0, 200);
}

#[test]
#[cfg_attr(not_root, ignore = "needs root (network namespaces)")]
fn veth_pair_ipv6_with_loss() {
    veth_run(Family::V6, 0.2, 40);
}
