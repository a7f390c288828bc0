//! One simulated host: an emulated kernel (`KernelIwpm`), the daemon process (an
//! [`iwpm_core::Host`]: the core, its port reservations and the state-file policy; absent
//! while crashed), the state file, the host's monotonic clock and the connection
//! manager's ids ([`crate::cm`]).
//!
//! The daemon is driven through the same `Host` as the real shell
//! (`crates/iwpmd/src/shell.rs`), and what the shell does around it is done here the same
//! way: every action is executed in order (kernel messages go to the kernel at once, as a
//! netlink `sendmsg` does), the kernel's answers are fed back (the core settles restart
//! recovery within them), and the host's timers (the core's and the state file's) run
//! when they are due. When the host asks for a state-file write (`Action::SaveState`,
//! after its gathering delay) the file is written at once and takes no time: the write
//! timing is the daemon's own, not a copy of it.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_core::state_file::StateFile;
use iwpm_core::FakePorts;
use iwpm_core::{CoreConfig, Previous, SavePolicy};
use iwpm_kernel_emu::kernel::{KernelConfig, KernelIwpm, Link, SendError, SendMode};

use iwpm_proto::fleet_key::{FleetKey, FleetKeys};

use crate::cm::Cm;
use crate::plan::KeyRole;
use crate::rng::mix;

/// UDP port of the daemons' client sockets (REQUESTs and ACKs leave from it).
pub const CLIENT_PORT: u16 = 50_000;

/// Mapped ports come from this range (the invariants attribute REMOTE_INFO entries by it).
pub const MAPPED_PORTS: std::ops::Range<u16> = 40_000..60_000;

/// A running daemon process: the core in its host, with the port reservations it holds
/// (all closed by the OS when the process dies) and the daemon's state-file policy.
pub type SimDaemon = iwpm_core::Host<FakePorts>;

/// Message counts of one host (what the scale table reports per host).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCounters {
    /// UDP datagrams sent by the daemon.
    pub udp_out: u64,
    /// UDP datagrams delivered to the daemon.
    pub udp_in: u64,
    /// Netlink datagrams daemon → kernel.
    pub nl_to_kernel: u64,
    /// Netlink datagrams kernel → daemon.
    pub nl_to_daemon: u64,
    /// Emulated TCP/MPA messages sent.
    pub wire_out: u64,
}

/// One simulated host of the fleet: its emulated kernel, its daemon and its connections
/// (not [`iwpm_core::Host`], which is the daemon's core loop inside it).
#[derive(Debug)]
pub struct SimHost {
    /// Index in the fleet.
    pub idx: usize,
    /// Its IPv4 address.
    pub ip: Ipv4Addr,
    /// Its IPv6 address (each host in its own /64, [`ip6_of`]).
    pub ip6: Ipv6Addr,
    /// Hardware-like device (mapped addresses on the wire), else siw-like NO_PORT_MAP.
    pub port_mapped: bool,
    /// The emulated kernel; daemon addresses are incarnation numbers.
    pub kernel: KernelIwpm<u32>,
    /// The daemon, unless crashed.
    pub daemon: Option<SimDaemon>,
    /// Daemon starts so far (the live one's kernel-link address).
    pub incarnation: u32,
    /// The state file as last written (empty: none).
    pub state_file: Vec<u8>,
    /// The table generation the live daemon last announced (`Action::TableChanged`):
    /// the deep checks run again when it moves.
    pub table_generation: u64,
    /// How far this host's monotonic clock is ahead of the fleet's.
    pub offset: Duration,
    /// Kernel datagrams waiting to be read by the daemon.
    pub to_daemon: VecDeque<Vec<u8>>,
    /// rdma_cm ids.
    pub cm: Cm,
    /// The wake-up already queued for this host, if any.
    pub wake: Option<Duration>,
    /// Message counts.
    pub counters: HostCounters,
    /// A MAPINFO replay of this host stopped early (the kernel's datagram limit).
    pub replay_truncated: bool,
    /// (incarnation, table generation) the deep checks last saw.
    pub checked: std::cell::Cell<Option<(u32, u64)>>,
    /// Kernel violations already judged.
    pub kernel_violations_seen: std::cell::Cell<usize>,
    /// What the host holds of the fleet key (its key file: kept across daemon restarts).
    pub key_role: KeyRole,
    /// Steps of the key rotation applied on this host (0: key 1 only; 3: key 2 only).
    pub rotation: u8,
    /// `peer_auth_required` covers the fleet's networks (keyed hosts only).
    pub auth_required: bool,
    seed: u64,
}

/// The fleet's wall clock at fleet time zero (2026-12-06, in seconds since the epoch).
pub const WALL_BASE: Duration = Duration::from_secs(1_796_515_200);

/// The fleet's key `id` (1 or 2), or host's wrong key 1 (same id, other bytes).
fn fleet_key(id: u32, accept_only: bool, wrong: bool) -> Option<FleetKey> {
    let fill = if wrong { 0x99 } else { 0x40 + id as u8 };
    FleetKey::new(id, vec![fill; 32], accept_only)
}

/// The kernel's sends: to the live daemon's queue, refused for a dead incarnation.
struct KernelLink<'a> {
    live: Option<u32>,
    out: &'a mut VecDeque<Vec<u8>>,
    sent: &'a mut u64,
}

impl Link<u32> for KernelLink<'_> {
    fn send(&mut self, to: &u32, datagram: &[u8], _mode: SendMode) -> Result<(), SendError> {
        if self.live != Some(*to) {
            return Err(SendError::ConnRefused);
        }
        self.out.push_back(datagram.to_vec());
        *self.sent += 1;
        Ok(())
    }
}

/// The fleet's IPv4 address of host `idx` (10.0.x.y, y from 1).
pub fn ip_of(idx: usize) -> Ipv4Addr {
    Ipv4Addr::from(FLEET_BASE + idx as u32 + 1)
}

/// 10.0.0.0: host `i` is at this plus `i + 1`.
const FLEET_BASE: u32 = 0x0a00_0000;

/// The host owning `ip`, if it is a fleet address below `hosts`.
pub fn host_of(ip: Ipv4Addr, hosts: usize) -> Option<usize> {
    let idx = u32::from(ip).checked_sub(FLEET_BASE)?.checked_sub(1)? as usize;
    (idx < hosts).then_some(idx)
}

/// The fleet's IPv6 address of host `idx`: `fd00:0:<hi>:<lo>::1`, with `idx + 1` in the
/// two 16-bit groups, so every host has a /64 of its own (the core groups IPv6 sources by
/// /64).
pub fn ip6_of(idx: usize) -> Ipv6Addr {
    let n = idx as u32 + 1;
    Ipv6Addr::new(0xfd00, 0, (n >> 16) as u16, n as u16, 0, 0, 0, 1)
}

/// The host owning the IPv6 address `ip`, if it is a fleet address below `hosts`.
pub fn host_of6(ip: Ipv6Addr, hosts: usize) -> Option<usize> {
    let s = ip.segments();
    if s[0] != 0xfd00 || s[1] != 0 || s[4..] != [0, 0, 0, 1] {
        return None;
    }
    let n = (u32::from(s[2]) << 16) | u32::from(s[3]);
    let idx = n.checked_sub(1)? as usize;
    (idx < hosts).then_some(idx)
}

/// The host owning `ip` (either family).
pub fn host_of_ip(ip: IpAddr, hosts: usize) -> Option<usize> {
    match ip {
        IpAddr::V4(v4) => host_of(v4, hosts),
        IpAddr::V6(v6) => host_of6(v6, hosts),
    }
}

impl SimHost {
    /// This host's address of the family `v6` names.
    pub fn addr(&self, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(self.ip6)
        } else {
            IpAddr::V4(self.ip)
        }
    }

    /// True if `ip` is one of this host's addresses.
    pub fn owns(&self, ip: IpAddr) -> bool {
        ip == IpAddr::V4(self.ip) || ip == IpAddr::V6(self.ip6)
    }

    /// A host whose kernel just loaded, no daemon yet.
    pub fn new(idx: usize, port_mapped: bool, seed: u64) -> Self {
        SimHost {
            idx,
            ip: ip_of(idx),
            ip6: ip6_of(idx),
            port_mapped,
            kernel: KernelIwpm::new(KernelConfig::default()),
            daemon: None,
            incarnation: 0,
            state_file: Vec::new(),
            table_generation: 0,
            offset: Duration::ZERO,
            to_daemon: VecDeque::new(),
            cm: Cm::new(),
            wake: None,
            counters: HostCounters::default(),
            replay_truncated: false,
            checked: std::cell::Cell::new(None),
            kernel_violations_seen: std::cell::Cell::new(0),
            key_role: KeyRole::Unkeyed,
            rotation: 0,
            auth_required: false,
            seed,
        }
    }

    /// The keys this host's daemon holds now (its role and the rotation's progress).
    pub fn fleet_keys(&self) -> Option<FleetKeys> {
        let keys: Vec<Option<FleetKey>> = match (self.key_role, self.rotation) {
            (KeyRole::Unkeyed, _) => return None,
            (KeyRole::WrongKey, _) => vec![fleet_key(1, false, true)],
            (_, 0) => vec![fleet_key(1, false, false)],
            (_, 1) => vec![fleet_key(1, false, false), fleet_key(2, true, false)],
            (_, 2) => vec![fleet_key(1, false, false), fleet_key(2, false, false)],
            _ => vec![fleet_key(2, false, false)],
        };
        FleetKeys::new(keys.into_iter().flatten().collect()).ok()
    }

    /// This host's wall clock at fleet time `now` (the fleet's, plus its skew if any).
    pub fn wall(&self, now: Duration) -> Duration {
        let t = WALL_BASE + now;
        match self.key_role {
            KeyRole::Skewed { ms } if ms >= 0 => t + Duration::from_millis(ms.unsigned_abs()),
            KeyRole::Skewed { ms } => t.saturating_sub(Duration::from_millis(ms.unsigned_abs())),
            _ => t,
        }
    }

    /// Hands the daemon its wall clock, as the shell does each loop turn.
    pub fn hand_wall_clock(&mut self, base: Instant, now: Duration) {
        let t = self.local(base, now);
        let wall = self.wall(now);
        if let Some(d) = self.daemon.as_mut() {
            d.handle_wall_clock(t, wall);
        }
    }

    /// Gives the daemon the keys it holds now (after a rotation step).
    pub fn load_keys(&mut self, base: Instant, now: Duration) {
        let t = self.local(base, now);
        let keys = self.fleet_keys();
        if let Some(d) = self.daemon.as_mut() {
            d.set_fleet_keys(t, keys);
        }
    }

    /// This host's clock at fleet time `now`.
    pub fn local(&self, base: Instant, now: Duration) -> Instant {
        base + now + self.offset
    }

    /// Fleet time of a host-local instant.
    pub fn global(&self, base: Instant, at: Instant) -> Duration {
        at.saturating_duration_since(base)
            .saturating_sub(self.offset)
    }

    /// Starts a daemon: restores the state file's mappings (their ports bound again), then
    /// greets the kernel.
    pub fn start_daemon(
        &mut self,
        base: Instant,
        now: Duration,
    ) -> Result<(), iwpm_core::state_file::StateFileError> {
        self.incarnation += 1;
        let t = self.local(base, now);
        let mut key = [0u8; 32];
        for (i, chunk) in key.chunks_mut(8).enumerate() {
            let word = mix(self.seed
                ^ mix(((self.idx as u64) << 20)
                    ^ u64::from(self.incarnation)
                    ^ ((i as u64) << 50)));
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        let peer_auth_required = if self.auth_required && self.key_role != KeyRole::Unkeyed {
            ["10.0.0.0/16", "fd00::/32"]
                .iter()
                .filter_map(|n| n.parse().ok())
                .collect()
        } else {
            Vec::new()
        };
        let config = CoreConfig {
            netlink_pid: 1000 + self.incarnation,
            handle_key: key,
            peer_auth_required,
            ..CoreConfig::default()
        };
        let ports = FakePorts::recording(
            MAPPED_PORTS,
            (mix(self.seed ^ self.idx as u64 ^ u64::from(self.incarnation) << 32) % 20_000) as u16,
        );
        let mut daemon = SimDaemon::new(config, ports, Some(SavePolicy::default()), t);
        if self.state_file.is_empty() {
            daemon.start(t);
        } else {
            let file = StateFile::decode(&self.state_file)?;
            let previous = Previous {
                mappings: &file.mappings,
                inherited_ports: false,
            };
            // What restore could not do shows up in the invariants (leaks, unmapped).
            let _report = daemon.start_after_restart(t, previous);
        }
        if self.key_role != KeyRole::Unkeyed {
            daemon.handle_wall_clock(t, self.wall(now));
            daemon.set_fleet_keys(t, self.fleet_keys());
        }
        self.daemon = Some(daemon);
        self.table_generation = 0;
        Ok(())
    }

    /// The daemon dies: its sockets (and so its reservations) close; the kernel keeps
    /// everything and learns of the death only when a send fails.
    pub fn crash(&mut self) {
        self.daemon = None;
        self.to_daemon.clear();
    }

    /// Runs `f` with the kernel and a link to the live daemon.
    pub fn with_kernel<R>(
        &mut self,
        f: impl FnOnce(&mut KernelIwpm<u32>, &mut dyn Link<u32>) -> R,
    ) -> R {
        let live = self.daemon.as_ref().map(|_| self.incarnation);
        let mut link = KernelLink {
            live,
            out: &mut self.to_daemon,
            sent: &mut self.counters.nl_to_daemon,
        };
        f(&mut self.kernel, &mut link)
    }

    /// Moves one queued kernel datagram into the daemon; false if none was queued.
    pub fn feed_daemon(&mut self, base: Instant, now: Duration) -> bool {
        let Some(bytes) = self.to_daemon.pop_front() else {
            return false;
        };
        let t = self.local(base, now);
        if let Some(d) = self.daemon.as_mut() {
            // Every queued datagram is fed: when a read loop may stop is the real shell's
            // concern.
            let _receipt = d.handle_kernel_datagram(t, &bytes);
        }
        true
    }

    /// Writes the state file the daemon asked for (`Action::SaveState` of `generation`)
    /// from its table as it is now, at once: the write takes no time.
    pub fn save_state(&mut self, base: Instant, now: Duration, generation: u64) {
        let t = self.local(base, now);
        let Some(d) = self.daemon.as_mut() else {
            return;
        };
        self.state_file = StateFile {
            host: format!("sim{}", self.idx),
            boot_id: "sim-boot".into(),
            mappings: d.core().saved_mappings(),
        }
        .encode();
        d.state_saved(t, generation, Duration::ZERO);
    }

    /// When this host next needs a wake-up (fleet time): the daemon's timers (its core's
    /// and its state file's) or the kernel's.
    pub fn deadline(&self, base: Instant) -> Option<Duration> {
        let daemon = self
            .daemon
            .as_ref()
            .and_then(SimDaemon::poll_timeout)
            .map(|t| self.global(base, t));
        let kernel = self.kernel.poll_timeout().map(|t| self.global(base, t));
        [daemon, kernel].into_iter().flatten().min()
    }

    /// The peer socket address a daemon action leaves from.
    pub fn peer_source(&self, via: iwpm_core::PeerSocket) -> SocketAddr {
        use iwpm_core::PeerSocket;
        let port = match via {
            PeerSocket::V4Listener | PeerSocket::V6Listener => iwpm_proto::consts::IWPM_PEER_PORT,
            _ => CLIENT_PORT,
        };
        let v6 = matches!(via, PeerSocket::V6Listener | PeerSocket::V6Client);
        SocketAddr::new(self.addr(v6), port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for i in [0, 1, 254, 255, 256, 999, 70_000] {
            assert_eq!(host_of(ip_of(i), 100_000), Some(i), "{i}");
        }
        assert_eq!(ip_of(0), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(host_of(Ipv4Addr::new(10, 255, 255, 1), 1000), None);
        for i in [0, 1, 65_534, 65_535, 70_000] {
            assert_eq!(host_of6(ip6_of(i), 100_000), Some(i), "{i}");
        }
        assert_eq!(ip6_of(0), "fd00:0:0:1::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(host_of6("fd00:0:0:1::2".parse().unwrap(), 10), None);
    }
}
