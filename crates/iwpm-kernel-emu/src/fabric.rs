//! The emulated network between hosts: IP routing to hosts and the set of live wire
//! connections.
//!
//! A connection is delivered to the host owning the destination IP the *device* used
//! (the mapped remote address), which looks up its listener by the address its device
//! listens on. Nothing else is checked, so a wrong mapping anywhere shows up as
//! `Rejected` (no listener there, duplicate 4-tuple) or `Unreachable` (no such IP).

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use crate::host::{EmulatedHost, HostConfig, HostError, HostShared};
use crate::kernel::Violation;

/// Fabric-wide settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricConfig {
    /// Delay of every fabric message (connection request, accept, reject, disconnect),
    /// standing in for TCP and MPA set-up time. 0 delivers on the next driver round.
    pub wire_delay: Duration,
}

/// A set of emulated hosts that can connect to each other. Cheap to clone; when the last
/// handle is dropped every host's driver thread stops.
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    shared: Arc<FabricShared>,
}

impl Fabric {
    /// An empty fabric with no wire delay.
    pub fn new() -> Self {
        Self::with_config(FabricConfig::default())
    }

    /// An empty fabric.
    pub fn with_config(config: FabricConfig) -> Self {
        Fabric {
            shared: Arc::new(FabricShared {
                config,
                hosts: RwLock::new(Vec::new()),
                tuples: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// Creates a host: binds its kernel-link socket and starts its driver thread.
    pub fn add_host(&self, config: HostConfig) -> Result<EmulatedHost, HostError> {
        if config.ips.is_empty() {
            return Err(HostError::NoAddress(config.name));
        }
        {
            let hosts = self.shared.read_hosts();
            if hosts.iter().any(|h| h.config.name == config.name) {
                return Err(HostError::DuplicateName(config.name));
            }
            if let Some(ip) = config
                .ips
                .iter()
                .find(|ip| hosts.iter().any(|h| h.owns_ip(**ip)))
            {
                return Err(HostError::DuplicateIp(*ip));
            }
        }
        let shared = HostShared::start(
            config,
            Arc::downgrade(&self.shared),
            self.shared.config.wire_delay,
        )?;
        self.shared
            .hosts
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(shared.clone());
        Ok(EmulatedHost { shared })
    }

    /// The host with this name.
    pub fn host(&self, name: &str) -> Option<EmulatedHost> {
        self.shared
            .read_hosts()
            .iter()
            .find(|h| h.config.name == name)
            .map(|h| EmulatedHost { shared: h.clone() })
    }

    /// All hosts, in creation order.
    pub fn hosts(&self) -> Vec<EmulatedHost> {
        self.shared
            .read_hosts()
            .iter()
            .map(|h| EmulatedHost { shared: h.clone() })
            .collect()
    }

    /// Every host's violations, labelled with the host name.
    pub fn violations(&self) -> Vec<(String, Violation)> {
        self.hosts()
            .iter()
            .flat_map(|h| {
                let name = h.name().to_string();
                h.violations().into_iter().map(move |v| (name.clone(), v))
            })
            .collect()
    }

    /// Live wire connections (4-tuples, active side first).
    pub fn live_connections(&self) -> usize {
        self.shared
            .tuples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Stops every host.
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }
}

/// State shared by hosts of one fabric.
#[derive(Debug, Default)]
pub(crate) struct FabricShared {
    config: FabricConfig,
    hosts: RwLock<Vec<Arc<HostShared>>>,
    tuples: Mutex<HashSet<(SocketAddr, SocketAddr)>>,
}

impl FabricShared {
    fn read_hosts(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<HostShared>>> {
        self.hosts.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The running host that owns `ip`.
    pub(crate) fn route(&self, ip: IpAddr) -> Option<Arc<HostShared>> {
        self.read_hosts()
            .iter()
            .find(|h| h.owns_ip(ip) && !h.is_stopped())
            .cloned()
    }

    /// The host that owns `ip`, running or not.
    pub(crate) fn owner(&self, ip: IpAddr) -> Option<Arc<HostShared>> {
        self.read_hosts().iter().find(|h| h.owns_ip(ip)).cloned()
    }

    /// Registers a wire connection; false if that 4-tuple is already live.
    pub(crate) fn claim_tuple(&self, src: SocketAddr, dst: SocketAddr) -> bool {
        self.tuples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((src, dst))
    }

    /// Forgets a wire connection (idempotent).
    pub(crate) fn release_tuple(&self, tuple: (SocketAddr, SocketAddr)) {
        self.tuples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&tuple);
    }

    fn shutdown(&self) {
        let hosts: Vec<_> = self.read_hosts().clone();
        for h in hosts {
            h.stop();
        }
    }
}

impl Drop for FabricShared {
    fn drop(&mut self) {
        self.shutdown();
    }
}
