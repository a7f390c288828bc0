//! The lab's topology: two emulated hosts (A and B) on one [`Fabric`], each with a real
//! `iwpmd`, optionally a [`Tap`] on its kernel link and a [`Relay`] in front of its peer
//! port, all in the right network namespaces.
//!
//! # Address plans
//!
//! | family, topology | host A | host B | daemons' peer sockets (with relays) |
//! |---|---|---|---|
//! | IPv4, loopback | 127.0.0.1 | 127.0.0.2 | 127.0.1.1, 127.0.1.2 |
//! | IPv6, private namespace | fd00:6c61:62::1 | fd00:6c61:62::2 | fd00:6c61:62::11, ::12 |
//! | IPv4, two namespaces + veth | 198.18.0.1 | 198.18.0.2 | 198.18.0.11, 198.18.0.12 |
//! | IPv6, two namespaces + veth | fd00:6c61:62::1 | fd00:6c61:62::2 | ::11, ::12 |
//!
//! Without relays each daemon binds its host's address. IPv6 needs a namespace because
//! `lo` carries only `::1` and an unprivileged user cannot add addresses elsewhere: in a
//! private namespace (root, or a user namespace for the binary) the lab adds the
//! `fd00:6c61:62::/64` addresses to its own `lo`. The veth topology uses 198.18.0.0/15
//! (reserved for benchmarking) inside namespaces the lab creates and deletes, so nothing
//! it sends can leave the machine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use iwpm_core::Counter;
use iwpm_kernel_emu::{EmulatedHost, Fabric, FabricConfig, HostConfig, HostError, PortMapMode};
use serde::Serialize;

use crate::daemon::{DaemonConfig, DaemonError, LabDaemon};
use crate::dump::{Dump, IoCounter};
use crate::locate::{self, LocateError};
use crate::netns::{NetPlace, NetnsError};

/// Emulated ephemeral ports of each host (the unmapped side of a connection; not real
/// sockets). Every live connection holds one until teardown.
pub const EMULATED_PORTS: std::ops::RangeInclusive<u16> = 10_000..=59_999;
/// Most connections one run can hold at once: one emulated port each.
pub const MAX_CONNECTIONS: usize = 50_000;
use crate::relay::{Relay, RelayConfig, RelayError};
use crate::tap::{Tap, TapError};

/// Address family of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// How the two hosts are connected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Both hosts in the namespace the lab runs in (IPv4 loopback addresses, or IPv6 once
    /// the process is in a private namespace).
    Current,
    /// Both hosts in one private namespace made for the run (root only; how tests get
    /// IPv6 addresses).
    Private,
    /// One namespace per host, joined by a veth pair (root only).
    VethPair,
}

/// Everything that shapes a lab.
#[derive(Clone, Debug)]
pub struct LabConfig {
    /// Address family.
    pub family: Family,
    /// Namespaces.
    pub topology: Topology,
    /// Port mapping mode of both devices.
    pub mode: PortMapMode,
    /// The peer port; `None` picks one that is free on every address.
    pub peer_port: Option<u16>,
    /// With `peer_port` `None`: try this port first (3935 for the binary).
    pub preferred_port: Option<u16>,
    /// Put a relay in front of each daemon's peer port (see [`crate::relay`]).
    pub relay: Option<RelayConfig>,
    /// Tap both kernel links (see [`crate::tap`]).
    pub taps: bool,
    /// Emulated TCP/MPA set-up delay.
    pub wire_delay: Duration,
    /// The emulated kernel's request timeout (10 s in Linux).
    pub request_timeout: Duration,
    /// Start the daemons with the hosts (else [`Side::start_daemon`] does it).
    pub start_daemons: bool,
    /// Copy the daemons' stderr to ours.
    pub echo_daemon_logs: bool,
    /// Extra `RUST_LOG` directives for the daemons.
    pub daemon_log_directives: Option<String>,
    /// Contents of an `iwpmd.conf` for both daemons (`None`: no file, the defaults).
    pub daemon_config: Option<String>,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            family: Family::V4,
            topology: Topology::Current,
            mode: PortMapMode::PortMapped,
            peer_port: None,
            preferred_port: None,
            relay: Some(RelayConfig::default()),
            taps: true,
            wire_delay: Duration::from_millis(2),
            request_timeout: iwpm_kernel_emu::kernel::IWPM_NL_TIMEOUT,
            start_daemons: true,
            echo_daemon_logs: false,
            daemon_log_directives: None,
            daemon_config: None,
        }
    }
}

/// Why a lab could not be built or driven.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// No daemon binary.
    #[error(transparent)]
    Locate(#[from] LocateError),
    /// Namespace set-up.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// An emulated host.
    #[error("emulated host: {0}")]
    Host(#[from] HostError),
    /// A daemon process.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// A relay.
    #[error(transparent)]
    Relay(#[from] RelayError),
    /// A tap.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// The scratch directory.
    #[error("scratch directory {path}: {source}")]
    Scratch {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// No common free peer port.
    #[error("no UDP port is free on every lab address")]
    NoFreePort,
    /// The daemon did not announce itself to its emulated kernel.
    #[error("iwpmd of host {0} did not say HELLO to its kernel in time")]
    NoHello(String),
    /// The daemon did not finish the MAPINFO replay.
    #[error("iwpmd of host {0} did not acknowledge the MAPINFO replay in time")]
    NoReplayAck(String),
    /// The side has no daemon running.
    #[error("host {0} has no daemon running")]
    NoDaemon(String),
    /// An rdma_cm operation of the lab itself failed.
    #[error("rdma_cm: {0}")]
    Cm(iwpm_kernel_emu::CmError),
}

/// The addresses of one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HostAddrs {
    /// What applications use (and where the relay listens).
    pub public: IpAddr,
    /// Where the daemon's peer sockets bind when a relay fronts them.
    pub backstage: IpAddr,
    /// Where an IPv6 run's idle IPv4 peer sockets bind.
    pub idle_v4: Ipv4Addr,
}

/// The ULA prefix of the IPv6 plans (`fd00:6c61:62::/64`, "lab").
fn v6(last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x6c61, 0x62, 0, 0, 0, 0, last))
}

fn plan(family: Family, topology: &Topology) -> [HostAddrs; 2] {
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    let lo = |d| Ipv4Addr::new(127, 0, 0, d);
    let host = |public, backstage, idle_v4| HostAddrs {
        public,
        backstage,
        idle_v4,
    };
    // Two daemons in one namespace need distinct idle IPv4 binds; a veth pair's do not.
    let veth = matches!(topology, Topology::VethPair);
    let idle_b = if veth { lo(1) } else { lo(2) };
    match (family, veth) {
        (Family::V4, true) => [
            host(v4(198, 18, 0, 1), v4(198, 18, 0, 11), lo(1)),
            host(v4(198, 18, 0, 2), v4(198, 18, 0, 12), idle_b),
        ],
        (Family::V4, false) => [
            host(v4(127, 0, 0, 1), v4(127, 0, 1, 1), lo(1)),
            host(v4(127, 0, 0, 2), v4(127, 0, 1, 2), idle_b),
        ],
        (Family::V6, _) => [host(v6(1), v6(0x11), lo(1)), host(v6(2), v6(0x12), idle_b)],
    }
}

/// Adds the plan's IPv6 addresses to `lo` of `place` (private-namespace topologies).
pub fn add_v6_loopback_addresses(place: &NetPlace) -> Result<(), NetnsError> {
    for h in plan(Family::V6, &Topology::Private) {
        for ip in [h.public, h.backstage] {
            place.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{ip}/128"),
                "dev",
                "lo",
                "nodad",
            ])?;
        }
    }
    Ok(())
}

/// One host with its daemon and instruments.
#[derive(Debug)]
pub struct Side {
    /// "A" or "B".
    pub name: String,
    /// Its daemon (`None` before [`Side::start_daemon`] and between kill and restart).
    pub daemon: Option<LabDaemon>,
    /// The tap on its kernel link.
    pub tap: Option<Tap>,
    /// The relay in front of its daemon's peer port.
    pub relay: Option<Relay>,
    /// The emulated host.
    pub host: EmulatedHost,
    /// Its addresses.
    pub addrs: HostAddrs,
    /// Its namespace.
    pub place: NetPlace,
    daemon_config: DaemonConfig,
    /// Core and IO counters of daemons that were killed (summed), so totals survive a
    /// restart.
    pub retired: Dump,
}

/// How a daemon restart went.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RestartOutcome {
    /// The killed daemon's pid.
    pub old_pid: u32,
    /// The new daemon's pid.
    pub new_pid: u32,
    /// Entries in the kernel's mapinfo table when the new daemon was checked.
    pub kernel_mappings: usize,
    /// Mappings the old daemon held just before the kill (its last dump).
    pub daemon_mappings_before: usize,
    /// Mappings the new daemon holds once the replay is acknowledged (its first dump).
    pub daemon_mappings_after: usize,
    /// Connections in flight (started, no outcome yet) when the daemon was killed, when
    /// the caller could tell.
    pub in_flight_at_kill: Option<usize>,
    /// Mappings of the old daemon's last dump that the new daemon's first dump lacks, or
    /// has with another mapped address, although the kernel still holds them: one line
    /// each. "mappings lost: 0" is this list being empty.
    pub mappings_lost: Vec<String>,
    /// MAPINFO records the kernel replayed.
    pub replayed: u64,
    /// Kernel mappings found in the new daemon with the same mapped address.
    pub recovered: usize,
    /// Kernel mappings missing or with another mapped address: one line each.
    pub lost: Vec<String>,
    /// Mappings the old daemon held whose port the new one holds differently.
    pub changed: Vec<String>,
    /// From the kill until the new daemon acknowledged the replay.
    pub downtime_ms: f64,
}

impl Side {
    /// Starts the daemon and waits for its HELLO to reach the emulated kernel.
    pub fn start_daemon(&mut self) -> Result<(), LabError> {
        let daemon = LabDaemon::spawn(self.daemon_config.clone())?;
        let pid = i32::try_from(daemon.pid()).unwrap_or(i32::MAX);
        self.daemon = Some(daemon);
        if !self
            .host
            .wait_for(Duration::from_secs(10), |v| v.pid == pid)
        {
            return Err(LabError::NoHello(self.name.clone()));
        }
        Ok(())
    }

    /// The daemon, or an error if none runs.
    pub fn daemon_mut(&mut self) -> Result<&mut LabDaemon, LabError> {
        self.daemon
            .as_mut()
            .ok_or_else(|| LabError::NoDaemon(self.name.clone()))
    }

    /// A SIGUSR1 dump of the daemon.
    pub fn dump(&mut self) -> Result<Dump, LabError> {
        Ok(self.daemon_mut()?.dump()?)
    }

    /// `kill -9` of the daemon (the tap then fails the kernel's sends to it).
    pub fn kill_daemon(&mut self) -> Result<(), LabError> {
        if let Some(mut d) = self.daemon.take() {
            d.kill9()?;
        }
        if let Some(t) = &self.tap {
            t.daemon_gone();
        }
        Ok(())
    }

    /// Kills the daemon with SIGKILL, waits `pause`, starts a new one, waits until it has
    /// acknowledged the kernel's MAPINFO replay, and compares its table with the kernel's
    /// and with the old daemon's last dump.
    pub fn restart_daemon(&mut self, pause: Duration) -> Result<RestartOutcome, LabError> {
        self.restart_daemon_observed(pause, || None)
    }

    /// [`Side::restart_daemon`], recording `in_flight()` (connections in flight) at the
    /// moment of the kill.
    pub fn restart_daemon_observed(
        &mut self,
        pause: Duration,
        in_flight: impl Fn() -> Option<usize>,
    ) -> Result<RestartOutcome, LabError> {
        let old_pid = self.daemon_mut()?.pid();
        let acks_before = self.host.stats().kernel.mapinfo_num_acks;
        let replayed_before = self.host.stats().kernel.mapinfo_records_sent;
        // Hold peer traffic at the relay for a moment so the counters read just before the
        // kill are the daemon's last (what reaches a dying daemon is lost either way).
        let saved = self.relay.as_ref().map(|r| {
            let saved = r.config();
            r.set_config(RelayConfig {
                block: [true; 4],
                ..saved.clone()
            });
            std::thread::sleep(Duration::from_millis(20));
            saved
        });
        let before = self.dump().and_then(|d| {
            self.kill_daemon()?;
            Ok(d)
        });
        let killed_at = Instant::now();
        let in_flight_at_kill = in_flight();
        if let (Some(r), Some(saved)) = (&self.relay, saved) {
            r.set_config(saved);
        }
        let before = before?;
        retire(&mut self.retired, &before);
        std::thread::sleep(pause);
        self.start_daemon()?;
        let nonempty = !self.host.kernel_view().mapinfo.is_empty();
        if nonempty && !self.wait_replay_ack(acks_before) {
            return Err(LabError::NoReplayAck(self.name.clone()));
        }
        let downtime_ms = killed_at.elapsed().as_secs_f64() * 1e3;
        let after = self.dump()?;
        let view = self.host.kernel_view();
        let stats = self.host.stats().kernel;
        let mut out = RestartOutcome {
            old_pid,
            new_pid: self.daemon.as_ref().map_or(0, LabDaemon::pid),
            kernel_mappings: view.mapinfo.len(),
            daemon_mappings_before: before.mappings.len(),
            daemon_mappings_after: after.mappings.len(),
            in_flight_at_kill,
            replayed: stats.mapinfo_records_sent - replayed_before,
            downtime_ms,
            ..RestartOutcome::default()
        };
        for e in &view.mapinfo {
            let (Some(local), Some(mapped)) = (e.local.to_socket_addr(), e.mapped.to_socket_addr())
            else {
                continue;
            };
            match after.find(local) {
                Some(m) if m.mapped == mapped => out.recovered += 1,
                Some(m) => out.lost.push(format!(
                    "host {}: {local} was mapped to {mapped}, the restarted daemon has {}",
                    self.name, m.mapped
                )),
                None => out.lost.push(format!(
                    "host {}: {local} -> {mapped} missing after the restart",
                    self.name
                )),
            }
        }
        for m in &before.mappings {
            let kernel_has = view
                .mapinfo
                .iter()
                .any(|e| e.local.to_socket_addr() == Some(m.local));
            match after.find(m.local) {
                Some(n) if n.mapped != m.mapped => out.changed.push(format!(
                    "host {}: {} was {} before the restart, {} after",
                    self.name, m.local, m.mapped, n.mapped
                )),
                Some(_) => {}
                None if kernel_has => out.mappings_lost.push(format!(
                    "host {}: {} -> {} held before the kill, missing after the restart",
                    self.name, m.local, m.mapped
                )),
                // The kernel removed it meanwhile (its connection ended): gone, not lost.
                None => {}
            }
        }
        Ok(out)
    }

    fn wait_replay_ack(&self, acks_before: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.host.stats().kernel.mapinfo_num_acks > acks_before {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Counters of the current daemon plus those of killed ones.
    pub fn total_counters(&mut self) -> Result<Dump, LabError> {
        let mut d = self.dump()?;
        retire(&mut d, &self.retired);
        Ok(d)
    }

    /// SIGTERM to the daemon; its exit status.
    pub fn stop_daemon(&mut self) -> Result<Option<std::process::ExitStatus>, LabError> {
        match self.daemon.as_mut() {
            Some(d) => Ok(Some(d.terminate(Duration::from_secs(5))?)),
            None => Ok(None),
        }
    }
}

/// Adds `from`'s counters into `into`.
fn retire(into: &mut Dump, from: &Dump) {
    for c in Counter::all() {
        into.core
            .set(c, into.core.get(c).wrapping_add(from.core.get(c)));
    }
    for &c in IoCounter::ALL {
        // A level (`ports_held`) is the retired daemon's, not added to the next one's.
        if !c.is_gauge() {
            into.io.set(c, into.io.get(c).wrapping_add(from.io.get(c)));
        }
    }
}

/// Two hosts, their daemons and instruments.
#[derive(Debug)]
pub struct Lab {
    /// Host A (connects).
    pub a: Side,
    /// Host B (listens).
    pub b: Side,
    /// The peer port both daemons use.
    pub peer_port: u16,
    /// The configuration.
    pub config: LabConfig,
    fabric: Fabric,
    _places: Vec<NetPlace>,
    scratch: Scratch,
}

/// A directory for the run's Unix sockets, removed on drop.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static RUN: AtomicU32 = AtomicU32::new(0);

impl Lab {
    /// Builds the topology and starts everything (daemons only if `start_daemons`).
    pub fn start(config: LabConfig) -> Result<Lab, LabError> {
        let binary = locate::daemon_binary(|msg| eprintln!("{msg}"))?;
        let (pa, pb) = match config.topology {
            Topology::Current => (NetPlace::current(), NetPlace::current()),
            Topology::Private => {
                let p = NetPlace::private()?;
                (p.clone(), p)
            }
            Topology::VethPair => NetPlace::veth_pair()?,
        };
        let [aa, ab] = plan(config.family, &config.topology);
        match (config.family, &config.topology) {
            (Family::V6, Topology::Private) => add_v6_loopback_addresses(&pa)?,
            (_, Topology::VethPair) => {
                let len = if config.family == Family::V4 { 24 } else { 64 };
                for (p, h) in [(&pa, aa), (&pb, ab)] {
                    for ip in [h.public, h.backstage] {
                        let mut args = vec!["addr", "add"];
                        let cidr = format!("{ip}/{len}");
                        args.extend([cidr.as_str(), "dev", "veth0"]);
                        if config.family == Family::V6 {
                            args.push("nodad");
                        }
                        p.ip(&args)?;
                    }
                }
            }
            _ => {}
        }
        let n = RUN.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("iwpm-lab-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|source| LabError::Scratch {
            path: dir.clone(),
            source,
        })?;
        let scratch = Scratch(dir.clone());
        let fabric = Fabric::with_config(FabricConfig {
            wire_delay: config.wire_delay,
        });
        let mut last_err = None;
        for attempt in 0..4 {
            let port = match (config.peer_port, config.preferred_port) {
                (Some(p), _) => p,
                (None, Some(p)) if attempt == 0 => p,
                (None, _) => free_port(&[(&pa, aa), (&pb, ab)], config.relay.is_some())?,
            };
            let parts = SideBuild {
                fabric: &fabric,
                dir: &dir,
                binary: &binary,
                config: &config,
                port,
            };
            let build = |name: &str, place: &NetPlace, addrs: HostAddrs| {
                build_side(parts, name, place, addrs)
            };
            let sides = build("A", &pa, aa).and_then(|a| Ok((a, build("B", &pb, ab)?)));
            match sides {
                Ok((a, b)) => {
                    return Ok(Lab {
                        a,
                        b,
                        peer_port: port,
                        config,
                        fabric,
                        _places: vec![pa, pb],
                        scratch,
                    })
                }
                // Another process took the port between the probe and the bind: retry.
                Err(e @ (LabError::Daemon(DaemonError::Exited { .. }) | LabError::Relay(_)))
                    if config.peer_port.is_none() =>
                {
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or(LabError::NoFreePort))
    }

    /// The fabric (for live connection counts).
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The scratch directory of the run.
    pub fn scratch_dir(&self) -> &Path {
        &self.scratch.0
    }

    /// Where B's listener should listen: B's public address on `port`.
    pub fn b_addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.b.addrs.public, port)
    }

    /// Both sides.
    pub fn sides_mut(&mut self) -> [&mut Side; 2] {
        [&mut self.a, &mut self.b]
    }
}

/// What both sides of one start attempt are built from.
#[derive(Clone, Copy)]
struct SideBuild<'a> {
    fabric: &'a Fabric,
    dir: &'a Path,
    binary: &'a Path,
    config: &'a LabConfig,
    port: u16,
}

fn build_side(
    build: SideBuild<'_>,
    name: &str,
    place: &NetPlace,
    addrs: HostAddrs,
) -> Result<Side, LabError> {
    let SideBuild {
        fabric,
        dir,
        binary,
        config,
        port,
    } = build;
    let lower = name.to_lowercase();
    let kernel_path = dir.join(format!("{lower}-kernel.sock"));
    let mut host_config = HostConfig::new(name, addrs.public, &kernel_path)
        .with_mode(config.mode)
        .with_request_timeout(config.request_timeout);
    // Emulated (unmapped) ports only: wide enough for `MAX_CONNECTIONS` live connections.
    host_config.ephemeral_ports = EMULATED_PORTS;
    let host = match fabric.host(name) {
        Some(h) => h,
        None => place.run(|| fabric.add_host(host_config))??,
    };
    let tap = if config.taps {
        let path = dir.join(format!("{lower}-tap.sock"));
        Some(Tap::start(place, &path, host.kernel_socket_path())?)
    } else {
        None
    };
    let relay = match &config.relay {
        Some(rc) => Some(Relay::start(
            place,
            SocketAddr::new(addrs.public, port),
            SocketAddr::new(addrs.backstage, port),
            RelayConfig {
                // Each relay draws its own sequence.
                seed: rc.seed ^ u64::from(name.as_bytes()[0]),
                ..rc.clone()
            },
        )?),
        None => None,
    };
    if let (Some(relay), Some(tap)) = (&relay, &tap) {
        relay.set_kernel_barrier(tap.kernel_barrier());
    }
    let config_file = match &config.daemon_config {
        Some(text) => {
            let path = dir.join(format!("{lower}-iwpmd.conf"));
            std::fs::write(&path, text).map_err(|source| LabError::Scratch {
                path: path.clone(),
                source,
            })?;
            Some(path)
        }
        None => None,
    };
    let kernel = tap
        .as_ref()
        .map_or(host.kernel_socket_path().to_path_buf(), |t| {
            t.path().to_path_buf()
        });
    let daemon_config = DaemonConfig {
        config_file,
        control_socket: crate::daemon::control_socket_beside(&kernel),
        host: name.to_string(),
        binary: binary.to_path_buf(),
        kernel,
        peer_port: port,
        bind: if relay.is_some() {
            addrs.backstage
        } else {
            addrs.public
        },
        idle_v4_bind: addrs.idle_v4,
        place: place.clone(),
        echo: config.echo_daemon_logs,
        log_directives: config.daemon_log_directives.clone(),
    };
    let mut side = Side {
        name: name.to_string(),
        daemon: None,
        tap,
        relay,
        host,
        addrs,
        place: place.clone(),
        daemon_config,
        retired: Dump::default(),
    };
    if config.start_daemons {
        side.start_daemon()?;
    }
    Ok(side)
}

/// The `iwpmd.conf` the lab gives both daemons for `concurrency` connections in progress,
/// or `None` when the defaults suffice.
///
/// One default of the daemon is a defence sized for ordinary traffic, below what one lab
/// host sends at high concurrency: `remote_info_budget` (128 REMOTE_INFOs sent before their
/// ACK, at most half of them for one source; beyond, REMOTE_INFO waits for the verified
/// ACK, which races the lab's instant emulated connection). Every connection in progress
/// can hold one, so it is raised to twice the concurrency (one source's half of the budget
/// is then the concurrency).
pub fn daemon_limits_for(concurrency: usize) -> Option<String> {
    let defaults = iwpm_core::CoreConfig::default();
    let needed = u32::try_from(concurrency.saturating_mul(2)).unwrap_or(u32::MAX);
    let share = defaults.remote_info_budget.div_ceil(2);
    if needed / 2 <= share {
        return None;
    }
    Some(format!(
        "remote_info_budget={}\n",
        needed.max(defaults.remote_info_budget)
    ))
}

/// A UDP port free on every address the daemons and relays bind.
fn free_port(sides: &[(&NetPlace, HostAddrs); 2], relays: bool) -> Result<u16, LabError> {
    let candidates: Vec<(NetPlace, IpAddr)> = sides
        .iter()
        .flat_map(|(p, h)| {
            let mut v = vec![((*p).clone(), h.public)];
            if relays {
                v.push(((*p).clone(), h.backstage));
            }
            if h.public.is_ipv6() {
                v.push(((*p).clone(), IpAddr::V4(h.idle_v4)));
            }
            v
        })
        .collect();
    for _ in 0..200 {
        let (p0, ip0) = &candidates[0];
        let probe = p0.run(|| UdpSocket::bind(SocketAddr::new(*ip0, 0)))?;
        let Ok(probe) = probe else {
            continue;
        };
        let Ok(port) = probe.local_addr().map(|a| a.port()) else {
            continue;
        };
        let all = candidates[1..].iter().all(|(p, ip)| {
            p.run(|| UdpSocket::bind(SocketAddr::new(*ip, port)).is_ok())
                .unwrap_or(false)
        });
        if all {
            return Ok(port);
        }
    }
    Err(LabError::NoFreePort)
}
