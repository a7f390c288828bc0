//! The connection manager of each host (what rdma_cm/iw_cm do around `iw_cm_map`, as in
//! `iwpm-kernel-emu`'s host module, without its threads): listeners, active connects,
//! passive children, the emulated TCP/MPA set-up between hosts and the passive side's
//! REMOTE_INFO look-up, which is where a wrong mapping becomes a wrong peer.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use iwpm_kernel_emu::kernel::{MapOutcome, MapRequest, MapResult, MapToken, UnmappedReason};
use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::check::ViolationKind;
use crate::world::{ConnPlan, World};

/// First port of the emulated ephemeral range (unmapped local addresses of connects).
const EPHEMERAL: u16 = 20_000;
const EPHEMERAL_SPAN: u16 = 20_000;

/// An emulated TCP/MPA message between hosts.
#[derive(Clone, Debug)]
pub(crate) enum WireMsg {
    /// The active device of connection `id` on host `from` connects.
    ConnReq {
        id: u32,
        from: usize,
        wire_src: SocketAddr,
        wire_dst: SocketAddr,
    },
    /// The passive side accepted connection `id`.
    Accepted { id: u32, by: usize },
    /// Nobody listens at the connection's wire destination.
    Refused { id: u32 },
    /// The active side of `id` went away.
    Disconnect { id: u32 },
}

#[derive(Debug)]
pub(crate) enum ListenState {
    Mapping,
    Listening {
        map: Box<MapResult>,
        wire_local: SocketAddr,
    },
}

#[derive(Debug)]
pub(crate) struct Listener {
    pub local: SocketAddr,
    pub state: ListenState,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ActiveState {
    Mapping,
    Connecting,
    Established,
    Failed,
}

#[derive(Debug)]
pub(crate) struct Active {
    pub local: SocketAddr,
    pub to: usize,
    pub map: Option<MapResult>,
    pub wire: Option<(SocketAddr, SocketAddr)>,
    pub state: ActiveState,
}

#[derive(Debug)]
pub(crate) struct Passive {
    /// Who the kernel says the peer is.
    pub remote: SocketAddr,
    /// The listener port (app) it arrived on.
    pub listener_port: u16,
    pub wire: (SocketAddr, SocketAddr),
    pub from: usize,
}

#[derive(Debug)]
pub(crate) enum MapFor {
    Listen(u16),
    Connect(u32),
}

/// rdma_cm ids of one host.
#[derive(Debug)]
pub struct Cm {
    pub(crate) listeners: BTreeMap<u16, Listener>,
    pub(crate) active: BTreeMap<u32, Active>,
    pub(crate) passive: BTreeMap<u32, Passive>,
    pub(crate) maps: BTreeMap<MapToken, MapFor>,
    /// Listens and connects whose mapping is still running but whose id is gone.
    pub(crate) orphaned: BTreeSet<MapToken>,
    ephemeral_used: BTreeSet<u16>,
    next_ephemeral: u16,
}

impl Cm {
    pub(crate) fn new() -> Self {
        Cm {
            listeners: BTreeMap::new(),
            active: BTreeMap::new(),
            passive: BTreeMap::new(),
            maps: BTreeMap::new(),
            orphaned: BTreeSet::new(),
            ephemeral_used: BTreeSet::new(),
            next_ephemeral: EPHEMERAL,
        }
    }

    fn ephemeral(&mut self) -> Option<u16> {
        for _ in 0..EPHEMERAL_SPAN {
            let p = self.next_ephemeral;
            self.next_ephemeral = if p + 1 >= EPHEMERAL + EPHEMERAL_SPAN {
                EPHEMERAL
            } else {
                p + 1
            };
            if self.ephemeral_used.insert(p) {
                return Some(p);
            }
        }
        None
    }
}

fn storage(a: SocketAddr) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(a)
}

fn addr(s: &SockAddrStorage, fallback: SocketAddr) -> SocketAddr {
    s.to_socket_addr().unwrap_or(fallback)
}

impl World {
    fn flags(&self, h: usize) -> u32 {
        if self.hosts[h].port_mapped {
            0
        } else {
            IWPM_FLAGS_NO_PORT_MAP
        }
    }

    fn start_map(&mut self, h: usize, request: MapRequest, what: MapFor) {
        let host = &mut self.hosts[h];
        let t = host.local(self.base, self.now);
        match host.with_kernel(|k, link| k.start_map(t, request, link)) {
            Ok(token) => {
                host.cm.maps.insert(token, what);
            }
            Err(e) => self.violate(
                ViolationKind::Sim,
                Some(h),
                format!("iw_cm_map refused: {e}"),
            ),
        }
        self.pump(h);
    }

    pub(crate) fn listen(&mut self, h: usize, port: u16) {
        if self.hosts[h].cm.listeners.contains_key(&port) {
            return;
        }
        let kind = self.scenario.kind_of(port);
        let ip = if kind.wildcard {
            if kind.v6 {
                std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            } else {
                std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
            }
        } else {
            self.hosts[h].addr(kind.v6)
        };
        let local = SocketAddr::new(ip, port);
        self.hosts[h].cm.listeners.insert(
            port,
            Listener {
                local,
                state: ListenState::Mapping,
            },
        );
        let request = MapRequest {
            local: storage(local),
            remote: None,
            flags: self.flags(h),
        };
        self.start_map(h, request, MapFor::Listen(port));
    }

    fn remove_mapping(&mut self, h: usize, map: &MapResult) {
        if map.mapped {
            let (local, m_local) = (map.request.local, map.m_local);
            self.hosts[h].with_kernel(|k, link| k.remove_mapping(&local, &m_local, link));
            self.pump(h);
        }
    }

    pub(crate) fn unlisten(&mut self, h: usize, port: u16) {
        let Some(l) = self.hosts[h].cm.listeners.remove(&port) else {
            return;
        };
        match l.state {
            ListenState::Listening { map, .. } => self.remove_mapping(h, &map),
            ListenState::Mapping => {
                self.orphan(h, |m| matches!(m, MapFor::Listen(p) if *p == port))
            }
        }
    }

    fn orphan(&mut self, h: usize, which: impl Fn(&MapFor) -> bool) {
        let cm = &mut self.hosts[h].cm;
        let tokens: Vec<MapToken> = cm
            .maps
            .iter()
            .filter(|(_, m)| which(m))
            .map(|(t, _)| *t)
            .collect();
        cm.orphaned.extend(tokens);
    }

    pub(crate) fn connect(&mut self, id: u32, from: usize, to: usize, port: u16) {
        if self.conns.contains_key(&id) || to >= self.hosts.len() || from >= self.hosts.len() {
            return;
        }
        let Some(eph) = self.hosts[from].cm.ephemeral() else {
            self.violate(
                ViolationKind::Sim,
                Some(from),
                "ephemeral ports exhausted".into(),
            );
            return;
        };
        let v6 = self.scenario.kind_of(port).v6;
        let local = SocketAddr::new(self.hosts[from].addr(v6), eph);
        let remote = SocketAddr::new(self.hosts[to].addr(v6), port);
        self.conns.insert(
            id,
            ConnPlan {
                from,
                to,
                port,
                started: self.now,
                done: None,
                wire_src: None,
            },
        );
        self.stats.connects += 1;
        self.hosts[from].cm.active.insert(
            id,
            Active {
                local,
                to,
                map: None,
                wire: None,
                state: ActiveState::Mapping,
            },
        );
        let request = MapRequest {
            local: storage(local),
            remote: Some(storage(remote)),
            flags: self.flags(from),
        };
        self.start_map(from, request, MapFor::Connect(id));
    }

    pub(crate) fn close(&mut self, id: u32) {
        let Some(plan) = self.conns.get(&id).cloned() else {
            return;
        };
        let h = plan.from;
        let Some(a) = self.hosts[h].cm.active.remove(&id) else {
            return;
        };
        self.hosts[h].cm.ephemeral_used.remove(&a.local.port());
        if matches!(a.state, ActiveState::Mapping | ActiveState::Connecting) {
            if self.scenario.auth.fails_between(plan.from, plan.to) {
                self.stats.gaps.key_failures += 1;
            } else if self.explained(plan.from, Some(plan.to), plan.started) {
                self.stats.gaps.closed_under_fault += 1;
            } else {
                self.stats.gaps.closed_early += 1;
            }
        }
        if a.state == ActiveState::Mapping {
            self.orphan(h, |m| matches!(m, MapFor::Connect(c) if *c == id));
            return;
        }
        if let Some(t) = a.wire {
            self.tuples.remove(&t);
        }
        if matches!(a.state, ActiveState::Established | ActiveState::Connecting) {
            self.send_wire(h, a.to, crate::cm::WireMsg::Disconnect { id });
        }
        if let Some(map) = a.map {
            self.remove_mapping(h, &map);
        }
    }

    /// An `iw_cm_map` finished on host `h`.
    pub(crate) fn map_done(&mut self, h: usize, token: MapToken, result: MapResult) {
        let Some(what) = self.hosts[h].cm.maps.remove(&token) else {
            return;
        };
        if self.hosts[h].cm.orphaned.remove(&token) {
            // The id was destroyed while mapping: what destroy would have done.
            self.remove_mapping(h, &result);
            return;
        }
        match what {
            MapFor::Listen(port) => self.listen_mapped(h, port, result),
            MapFor::Connect(id) => self.connect_mapped(h, id, result),
        }
    }

    fn judge_outcome(
        &mut self,
        h: usize,
        peer: Option<usize>,
        since: std::time::Duration,
        what: &str,
        outcome: &MapOutcome,
    ) {
        let bad = match outcome {
            MapOutcome::Mapped => return,
            MapOutcome::Unmapped(UnmappedReason::Timeout { .. }) => ViolationKind::KernelTimeout,
            MapOutcome::Unmapped(_) => ViolationKind::Unmapped,
        };
        if !self.explained(h, peer, since) {
            self.violate(bad, Some(h), format!("{what}: {outcome:?}"));
        }
    }

    fn listen_mapped(&mut self, h: usize, port: u16, map: MapResult) {
        let since = self.now;
        self.judge_outcome(
            h,
            None,
            since,
            &format!("listen on port {port}"),
            &map.outcome,
        );
        let port_mapped = self.hosts[h].port_mapped;
        let Some(l) = self.hosts[h].cm.listeners.get_mut(&port) else {
            return;
        };
        let mapped_local = addr(&map.m_local, l.local);
        let wire_local = if port_mapped { mapped_local } else { l.local };
        l.state = ListenState::Listening {
            map: Box::new(map),
            wire_local,
        };
    }

    fn connect_mapped(&mut self, h: usize, id: u32, map: MapResult) {
        let Some(plan) = self.conns.get(&id).cloned() else {
            return;
        };
        // A connect to a listener the plan does not hold open may rightly be refused (or,
        // REJECTs being rate-limited, time out): only planned ones are judged.
        if self.listener_planned(&plan) {
            self.judge_outcome(
                h,
                Some(plan.to),
                plan.started,
                &format!("connect {id}"),
                &map.outcome,
            );
        }
        let port_mapped = self.hosts[h].port_mapped;
        let v6 = self.scenario.kind_of(plan.port).v6;
        let remote = SocketAddr::new(self.hosts[plan.to].addr(v6), plan.port);
        let Some(a) = self.hosts[h].cm.active.get_mut(&id) else {
            return;
        };
        let m_local = addr(&map.m_local, a.local);
        let wire_src = if port_mapped { m_local } else { a.local };
        let wire_dst = map.m_remote.as_ref().map_or(remote, |r| addr(r, remote));
        a.map = Some(map);
        a.state = ActiveState::Connecting;
        a.wire = Some((wire_src, wire_dst));
        if let Some(p) = self.conns.get_mut(&id) {
            p.wire_src = Some(wire_src);
        }
        let target = self.host_index(wire_dst.ip());
        match target {
            Some(to) => self.send_wire(
                h,
                to,
                WireMsg::ConnReq {
                    id,
                    from: h,
                    wire_src,
                    wire_dst,
                },
            ),
            None => self.connect_failed(id, format!("no route to {wire_dst}")),
        }
    }

    fn connect_failed(&mut self, id: u32, why: String) {
        let Some(plan) = self.conns.get(&id).cloned() else {
            return;
        };
        // Counted once, while it was still connecting (a closed one was counted by close).
        let mut counted = false;
        if let Some(a) = self.hosts[plan.from].cm.active.get_mut(&id) {
            counted = a.state == ActiveState::Connecting;
            a.state = ActiveState::Failed;
            if let Some(t) = a.wire.take() {
                self.tuples.remove(&t);
            }
        }
        let planned = self.listener_planned(&plan);
        let explained = self.explained(plan.from, Some(plan.to), plan.started);
        if counted {
            let key = self.scenario.auth.fails_between(plan.from, plan.to);
            let n = &mut self.stats.gaps;
            match (planned, explained) {
                (false, _) => n.refused_unplanned += 1,
                (true, true) if key => n.key_failures += 1,
                (true, true) => n.failed_under_fault += 1,
                (true, false) => n.failed_unexplained += 1,
            }
        }
        if planned && !explained {
            self.violate(
                ViolationKind::ConnectFailed,
                Some(plan.from),
                format!("connect {id} to host {} port {}: {why}", plan.to, plan.port),
            );
        }
    }

    /// The plan holds the connect's listener open from before the connect to now.
    fn listener_planned(&self, plan: &ConnPlan) -> bool {
        self.listen_plan
            .get(&(plan.to, plan.port))
            .is_some_and(|(born, dies)| *born < plan.started && self.now < *dies)
    }

    pub(crate) fn on_wire(&mut self, h: usize, msg: WireMsg) {
        match msg {
            WireMsg::ConnReq {
                id,
                from,
                wire_src,
                wire_dst,
            } => self.conn_req(h, id, from, wire_src, wire_dst),
            WireMsg::Accepted { id, by } => self.accepted(h, id, by),
            WireMsg::Refused { id } => {
                self.connect_failed(id, "refused: no listener at the wire address".into())
            }
            WireMsg::Disconnect { id } => {
                self.hosts[h].cm.passive.remove(&id);
            }
        }
    }

    /// `cm_conn_req_handler`: the listener the device listens with, and the peer's real
    /// address from the remote-info table (consumed), else its wire address.
    fn conn_req(
        &mut self,
        h: usize,
        id: u32,
        from: usize,
        wire_src: SocketAddr,
        wire_dst: SocketAddr,
    ) {
        let found = self.hosts[h]
            .cm
            .listeners
            .iter()
            .find_map(|(port, l)| match &l.state {
                ListenState::Listening { map, wire_local }
                    if wire_local.port() == wire_dst.port()
                        && (wire_local.ip() == wire_dst.ip()
                            || (wire_local.ip().is_unspecified()
                                && wire_local.is_ipv6() == wire_dst.is_ipv6())) =>
                {
                    Some((*port, map.m_local))
                }
                _ => None,
            });
        let Some((port, m_local)) = found else {
            self.send_wire(h, from, WireMsg::Refused { id });
            return;
        };
        if !self.tuples.insert((wire_src, wire_dst)) {
            self.send_wire(h, from, WireMsg::Refused { id });
            return;
        }
        let real = self.hosts[h]
            .kernel
            .take_remote_info(&m_local, &storage(wire_src));
        if real.is_none() {
            self.count_miss(h, id, wire_src);
        }
        let remote = real.map_or(wire_src, |r| addr(&r, wire_src));
        self.hosts[h].cm.passive.insert(
            id,
            Passive {
                remote,
                listener_port: port,
                wire: (wire_src, wire_dst),
                from,
            },
        );
        self.touched.insert(h);
        self.send_wire(h, from, WireMsg::Accepted { id, by: h });
    }

    /// Files a passive look-up's miss under its reason (`Gaps`).
    fn count_miss(&mut self, h: usize, id: u32, wire_src: SocketAddr) {
        let Some(plan) = self.conns.get(&id).cloned() else {
            return;
        };
        let local = self.hosts[plan.from].cm.active.get(&id).map(|a| a.local);
        let explained = self.explained(plan.from, Some(h), plan.started);
        let planned = self.listener_planned(&plan);
        let siw = !self.hosts[plan.from].port_mapped;
        let n = &mut self.stats.gaps;
        match local {
            Some(l) if l == wire_src && siw => n.miss_siw += 1,
            Some(l) if l == wire_src => n.miss_fallback += 1,
            _ if explained => n.miss_under_fault += 1,
            Some(_) if planned => n.miss_unexplained += 1,
            _ => n.miss_unjudged += 1,
        }
    }

    /// The active side of `id` is established: both sides must name their true peer.
    fn accepted(&mut self, h: usize, id: u32, by: usize) {
        let alive = self.hosts[h]
            .cm
            .active
            .get(&id)
            .is_some_and(|a| a.state == ActiveState::Connecting);
        if !alive {
            if let Some(p) = self.hosts[by].cm.passive.get(&id) {
                let wire = p.wire;
                self.tuples.remove(&wire);
            }
            self.send_wire(h, by, WireMsg::Disconnect { id });
            return;
        }
        let Some(plan) = self.conns.get(&id).cloned() else {
            return;
        };
        let local = match self.hosts[h].cm.active.get_mut(&id) {
            Some(a) => {
                a.state = ActiveState::Established;
                a.local
            }
            None => return,
        };
        self.stats.established += 1;
        if self.victim == Some(h) {
            self.stats.victim_established += 1;
        }
        if let Some(p) = self.conns.get_mut(&id) {
            p.done = Some(self.now);
        }
        let explained = self.explained(h, Some(plan.to), plan.started);
        let Some(p) = self.hosts[by].cm.passive.get(&id) else {
            return;
        };
        let (remote, lport, pfrom) = (p.remote, p.listener_port, p.from);
        if !self.listener_planned(&plan) {
            // Not judged (see connect_mapped).
        } else if (by, lport) != (plan.to, plan.port) {
            self.violate(
                ViolationKind::WrongPeer,
                Some(h),
                format!(
                    "connect {id} meant for host {} port {} reached host {by} port {lport}",
                    plan.to, plan.port
                ),
            );
        } else if (remote != local || pfrom != h) && !explained {
            self.violate(ViolationKind::WrongPeer, Some(by), format!("connect {id}: the passive side reports peer {remote}, the true peer is {local}"));
        } else if self.now - plan.started >= iwpm_kernel_emu::kernel::IWPM_NL_TIMEOUT && !explained
        {
            self.violate(
                ViolationKind::KernelTimeout,
                Some(h),
                format!("connect {id} took {:?}", self.now - plan.started),
            );
        }
    }
}
