//! Tunables of the core. Defaults follow the C daemon's timing (1 s × 9 retransmissions,
//! 10 s lifetime) and the kernel's 10 s request timeout; the limits are sized so that a
//! remote flood costs bounded memory here and in the kernel (see `docs/HARDENING.md`).

use std::time::Duration;

use crate::peer_allow::PeerAllow;

use iwpm_proto::cidr::Cidr;

use iwpm_proto::consts::{IWPM_PEER_PORT, IWPM_UABI_VERSION};

/// Configuration of a [`crate::Core`].
///
/// Construct with `CoreConfig { netlink_pid, ..Default::default() }`: the shell must fill in
/// `netlink_pid` (a 0 there makes the kernel unicast to itself) and must fill `handle_key`
/// with 32 bytes from the operating system's random source (the default key is public).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// Our bound netlink port id, written into every `nlmsg_pid`.
    pub netlink_pid: u32,
    /// Highest iwpm ABI version offered in HELLO (4).
    pub max_abi: u16,
    /// UDP port of the peer daemons (3935).
    pub peer_port: u16,
    /// Period of REQUEST/ACCEPT retransmissions (1 s).
    pub retransmit_interval: Duration,
    /// Retransmissions after the first send (9).
    pub max_retransmits: u32,
    /// How long a peer exchange lives (10 s).
    pub exchange_lifetime: Duration,
    /// Most distinct mappings held at once; beyond it creations fail with CREATE_MAPPING_ERR.
    pub max_mappings: usize,
    /// Most *local* (active) peer exchanges held at once: one per connect of this host in the
    /// last `exchange_lifetime`. Beyond it a QUERY gets CREATE_MAPPING_ERR. Remote traffic
    /// never counts here, so a flood cannot refuse local connects. 131 072 sustains
    /// 13 107 connects per second with the 10 s lifetime (a few hundred bytes each).
    pub max_exchanges: usize,
    /// Most *remote* (passive) peer exchanges held at once. At the limit the oldest exchange
    /// not yet confirmed by an ACK is evicted (then the oldest confirmed one): a new REQUEST
    /// is never refused for lack of room, like SYN-flood handling.
    pub max_peer_exchanges: usize,
    /// REMOTE_INFO entries the kernel may be holding for exchanges no ACK has confirmed
    /// (the kernel frees an entry only when its connection arrives; spoofed REQUESTs never
    /// connect). Sent at once while tokens remain (a verified ACK returns the token); without
    /// a token the REMOTE_INFO waits for the ACK. One source (IPv4 address, IPv6 /64) may
    /// hold at most half of it (rounded up), so a host that does not spoof cannot take it
    /// all. 0 = always wait for the ACK.
    pub remote_info_budget: u32,
    /// One REMOTE_INFO token comes back per this interval (1 s): lost ACKs would otherwise
    /// drain the budget for good. A flood therefore pins at most `remote_info_budget`
    /// entries plus one per interval (about 1 KiB of kernel memory per second), and legitimate
    /// traffic stays in eager mode while fewer than one ACK per interval is lost.
    pub remote_info_refill: Duration,
    /// REMOTE_INFOs that one source's (IPv4 address, IPv6 /64) verified ACKs may release
    /// or return the budget token of, at once: the burst of a real host, which proved its
    /// address. 2048 serves an MPI job's 1000 concurrent connects from one host twice over.
    pub remote_info_source_burst: u32,
    /// The same, refilled per second after the burst. A real host that completes exchanges
    /// and never connects thus pins at most `remote_info_source_burst` kernel entries plus
    /// this many per second.
    pub remote_info_source_rate: u32,
    /// REJECTs sent per second at most, in all (burst as large); beyond, REQUESTs for
    /// unknown addresses are dropped silently (the peer's kernel then times out instead of
    /// failing fast). There is no per-source share: a REJECT is smaller than the REQUEST it
    /// answers, so a share would protect no one's bandwidth and would only let a spoofer
    /// spend a victim's REJECTs with its address. Authenticated REQUESTs are not counted.
    pub max_rejects_per_sec: u32,
    /// Source addresses whose peer datagrams are processed (default: all).
    pub peer_allow: PeerAllow,
    /// Networks whose peer datagrams must be sealed with a fleet key
    /// ([`crate::Host::set_fleet_keys`]); a plain or stripped one from there is dropped and
    /// counted. Default: none, so rdma-core peers are served as they always were.
    pub peer_auth_required: Vec<Cidr>,
    /// How far a sealed datagram's stamp may be from our wall clock, either way (60 s).
    pub peer_auth_window: Duration,
    /// Minimum time between two log lines of the same kind (the rest are counted).
    pub log_interval: Duration,
    /// A reply the core could not produce within this time after the kernel's request is
    /// dropped: the kernel gave up at 10 s and a late reply would hit freed state.
    pub reply_deadline: Duration,
    /// If the kernel answers neither HELLO reply nor error within this time, report
    /// [`crate::Action::Ready`] anyway.
    pub handshake_timeout: Duration,
    /// Answer a QUERY_MAPPING whose remote IP is its own local IP from our own table: the
    /// listener is behind our kernel, so we would be the peer daemon. REMOTE_INFO and the
    /// QUERY reply go to the kernel in the order the UDP exchange with ourselves would
    /// produce them, without the three datagrams and their wake-ups (true). `false`: ask
    /// ourselves over UDP, as the C daemon does.
    pub local_answers: bool,
    /// Key of the association-handle generator (a ChaCha20 stream): handles cannot be
    /// predicted from earlier ones without it.
    pub handle_key: [u8; 32],
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            netlink_pid: 0,
            max_abi: IWPM_UABI_VERSION,
            peer_port: IWPM_PEER_PORT,
            retransmit_interval: Duration::from_secs(1),
            max_retransmits: 9,
            exchange_lifetime: Duration::from_secs(10),
            max_mappings: 100_000,
            max_exchanges: 131_072,
            max_peer_exchanges: 65_536,
            remote_info_budget: 128,
            remote_info_refill: Duration::from_secs(1),
            remote_info_source_burst: 2_048,
            remote_info_source_rate: 128,
            max_rejects_per_sec: 10_000,
            peer_allow: PeerAllow::default(),
            peer_auth_required: Vec::new(),
            peer_auth_window: Duration::from_secs(60),
            log_interval: Duration::from_secs(5),
            reply_deadline: Duration::from_millis(9_500),
            handshake_timeout: Duration::from_secs(5),
            local_answers: true,
            handle_key: *b"iwpmd-rs public test key 0000001",
        }
    }
}
