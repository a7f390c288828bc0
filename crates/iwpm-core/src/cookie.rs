//! Echo cookies: a keyed MAC in the bytes of our ACCEPT that the active side sends back in
//! its ACK, so an ACK counts only if it answers an ACCEPT we really sent to that address.
//!
//! # Why
//!
//! Nothing else in an ACK comes from us: the handle is the requester's, `ap` is the
//! listener's stable mapped address and `cp` is the requester's. An ACK written blind from
//! the attacker's own REQUEST would otherwise confirm an exchange, refund a REMOTE_INFO token
//! or release a held REMOTE_INFO, and the kernel never frees a REMOTE_INFO entry that no
//! connection consumes.
//!
//! # Where the cookie travels
//!
//! rdma-core builds every answer from the datagram it received: it copies both 16-byte
//! address fields, `pmtime` and the version bits of our ACCEPT into its ACK (seen on the
//! real kernel: an ACCEPT marked in those bytes came back with all of them). So does our
//! own active side.
//!
//! * **IPv4**: the 24 unused address bytes ([`Ipv4Echo`]) carry a 128-bit MAC, the mapped
//!   `cp` port the REQUEST named, the key epoch, flags and a format byte. Everything the
//!   passive side needs on the ACK is in the cookie, so it keeps no state before the ACK.
//! * **IPv6** has no unused address bytes: only `pmtime` (8 bits) and the version bits (2)
//!   are echoed. Ten bits make a blind ACK succeed once in 512 tries (two epochs are
//!   accepted); the state an IPv6 exchange needs stays in the exchange table, bounded by
//!   the per-source quota and the REMOTE_INFO budget (`docs/HARDENING.md`).
//!
//! # Keys
//!
//! SipHash-2-4 with a 128-bit output (`siphasher`), keyed per epoch: the epoch key is the
//! MAC of the epoch number under a base key derived from the shell's random `handle_key`.
//! An epoch lasts [`EPOCH`]; an ACK verifies under the current or the previous epoch's key,
//! so a cookie is good for 16 to 32 s, longer than an exchange (10 s) and far shorter than
//! any replay an attacker could stockpile. The clock is the core's `now`, never read here.
//!
//! # Delivery notices (IPv4)
//!
//! When the REMOTE_INFO waits for the ACK ([`RemoteInfoPlan::OnAck`]: the budget was
//! spent), the connection races it: the active side connects as soon as its kernel has the
//! answer. So after the kernel has taken the REMOTE_INFO (a netlink send is processed
//! inside `sendmsg`) the passive side sends the ACCEPT once more with [`NOTICE_AT`] set, and
//! our active side, seeing the plan in the ACCEPT's cookie (the flags are plain text),
//! holds its kernel's answer until that notice comes or a short wait runs out. The notice
//! byte is outside the MAC, so rdma-core's ACK to a notice (it re-ACKs every duplicate
//! ACCEPT) still verifies and is absorbed as a duplicate.

use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_proto::peer::{
    ipv4_echo, peer_extension, IpVersion, Ipv4Echo, PeerExtension, PeerMessage, IPV4_ECHO_LEN,
};
use siphasher::sip128::{Hasher128, SipHasher24};

/// How long one cookie key is the current one.
pub(crate) const EPOCH: Duration = Duration::from_secs(16);

/// Format byte of an IPv4 cookie (the last byte of the echo): tells a cookie from the zeros
/// an old peer writes.
const FORMAT_V1: u8 = 0xc1;

const MAC_LEN: usize = 16;
const PORT_AT: usize = MAC_LEN;
const EPOCH_AT: usize = PORT_AT + 2;
const FLAGS_AT: usize = EPOCH_AT + 1;
/// Set only in a *delivery notice* (below); outside the MAC, which is computed with it 0.
const NOTICE_AT: usize = FLAGS_AT + 1;
const FORMAT_AT: usize = IPV4_ECHO_LEN - 1;
const NOTICE: u8 = 1;

/// What the passive side did with the REMOTE_INFO when it answered (carried, authenticated,
/// in an IPv4 cookie).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteInfoPlan {
    /// None is needed: the connecting side is not port mapped (mapped `cp` = `cp`), so the
    /// kernel reports the right peer without one.
    NotNeeded,
    /// Sent with the ACCEPT (on a budget token; the exchange table holds the rest).
    SentAtOnce,
    /// To be sent when this ACK arrives: the cookie carries the mapped `cp` port.
    OnAck,
}

impl RemoteInfoPlan {
    fn code(self) -> u8 {
        match self {
            RemoteInfoPlan::NotNeeded => 0,
            RemoteInfoPlan::SentAtOnce => 1,
            RemoteInfoPlan::OnAck => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(RemoteInfoPlan::NotNeeded),
            1 => Some(RemoteInfoPlan::SentAtOnce),
            2 => Some(RemoteInfoPlan::OnAck),
            _ => None,
        }
    }
}

/// Where an ACCEPT carries its cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// A 24-byte block: an IPv4 message's unused address bytes, or (IPv6) the extension
    /// block that our own active side announced it echoes. A 128-bit MAC.
    Block,
    /// An IPv6 message to a peer that did not announce the extension (rdma-core): only
    /// `pmtime` and the version bits come back, 10 bits of MAC.
    TenBits,
}

/// How long an ACK can verify after its ACCEPT was marked, at most: two epochs.
pub(crate) const COOKIE_LIFETIME: Duration = Duration::from_secs(2 * EPOCH.as_secs());

/// What a verified ACK tells: the plan its ACCEPT was sent with and, for IPv4, the mapped
/// `cp` port of the REQUEST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verified {
    /// `None` for IPv6 (the cookie has no room for it; the exchange table knows).
    pub plan: Option<RemoteInfoPlan>,
    pub mapped_cp_port: u16,
}

/// The exchange a cookie is bound to: everything an ACK echoes that identifies it, plus the
/// datagram's source address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Binding {
    pub from: SocketAddr,
    pub handle: u64,
    pub cp: SocketAddr,
    /// The `ap` of our ACCEPT (the listener's mapped address as we answered it).
    pub ap: SocketAddr,
}

impl Binding {
    /// The binding of an ACCEPT we answer `req` (from `from`) with, answering `ap`.
    pub(crate) fn of_request(from: SocketAddr, req: &PeerMessage, ap: SocketAddr) -> Self {
        Binding {
            from,
            handle: req.assoc_handle,
            cp: req.cp(),
            ap,
        }
    }

    /// The binding an ACK (from `from`) claims.
    pub(crate) fn of_ack(from: SocketAddr, ack: &PeerMessage) -> Self {
        Binding {
            from,
            handle: ack.assoc_handle,
            cp: ack.cp(),
            ap: ack.ap(),
        }
    }
}

/// The cookie keys: the base key and the current and previous epochs' keys.
#[derive(Clone, Debug)]
pub(crate) struct CookieJar {
    base: [u8; 16],
    origin: Instant,
    epoch: u64,
    current: [u8; 16],
    previous: [u8; 16],
}

impl CookieJar {
    /// Keys derived from the shell's secret (`handle_key`, 32 random bytes); epochs count
    /// from `now`.
    pub(crate) fn new(secret: &[u8; 32], now: Instant) -> Self {
        let (k, rest) = secret.split_at(16);
        let mut h = keyed(k);
        h.write(b"iwpmd echo cookie base key");
        h.write(rest);
        let base = h.finish128().as_bytes();
        let mut jar = CookieJar {
            base,
            origin: now,
            epoch: 0,
            current: [0; 16],
            previous: [0; 16],
        };
        jar.current = jar.epoch_key(0);
        jar.previous = jar.current;
        jar
    }

    fn epoch_key(&self, epoch: u64) -> [u8; 16] {
        let mut h = keyed(&self.base);
        h.write(b"epoch");
        h.write_u64(epoch);
        h.finish128().as_bytes()
    }

    /// Moves the keys on to `now`'s epoch.
    fn rotate(&mut self, now: Instant) {
        let epoch = now.saturating_duration_since(self.origin).as_secs() / EPOCH.as_secs();
        if epoch == self.epoch {
            return;
        }
        self.previous = if epoch == self.epoch + 1 {
            self.current
        } else {
            self.epoch_key(epoch.saturating_sub(1))
        };
        self.current = self.epoch_key(epoch);
        self.epoch = epoch;
    }

    /// Marks `accept` (about to be sent for `binding`) with the cookie, in `room`: for
    /// [`Room::Block`] the returned 24 bytes are the cookie (write them into the IPv4 unused
    /// bytes with [`PeerMessage::encode_with_echo`], or into the extension block); for
    /// [`Room::TenBits`] `pmtime` and `version` are set and the block is zeros.
    pub(crate) fn mark(
        &mut self,
        now: Instant,
        accept: &mut PeerMessage,
        binding: &Binding,
        (plan, mapped_cp_port): (RemoteInfoPlan, u16),
        room: Room,
    ) -> Ipv4Echo {
        self.rotate(now);
        let mut echo = [0u8; IPV4_ECHO_LEN];
        match room {
            Room::Block => {
                echo[PORT_AT..EPOCH_AT].copy_from_slice(&mapped_cp_port.to_be_bytes());
                echo[EPOCH_AT] = self.epoch as u8;
                echo[FLAGS_AT] = plan.code();
                echo[FORMAT_AT] = FORMAT_V1;
                let mac = mac(&self.current, binding, &echo[MAC_LEN..]);
                echo[..MAC_LEN].copy_from_slice(&mac);
            }
            Room::TenBits => {
                let mac = mac(&self.current, binding, &[]);
                accept.pmtime = mac[0];
                accept.version = mac[1] & 0b11;
            }
        }
        echo
    }

    /// Checks the cookie an ACK (`ack`, from `binding.from`) echoes: `block` is the 24-byte
    /// cookie block it carried (an IPv4 ACK's unused bytes, or an IPv6 ACK's extension
    /// block), `None` for an IPv6 ACK without one, whose ten bits are checked instead.
    pub(crate) fn verify(
        &mut self,
        now: Instant,
        ack: &PeerMessage,
        block: Option<&Ipv4Echo>,
        binding: &Binding,
    ) -> Option<Verified> {
        self.rotate(now);
        match block {
            Some(echo) => {
                if echo[FORMAT_AT] != FORMAT_V1 {
                    return None;
                }
                let key = if echo[EPOCH_AT] == self.epoch as u8 {
                    &self.current
                } else if echo[EPOCH_AT] == self.epoch.wrapping_sub(1) as u8 && self.epoch > 0 {
                    &self.previous
                } else {
                    return None;
                };
                let want = mac(key, binding, &echo[MAC_LEN..]);
                if !constant_time_eq(&want, &echo[..MAC_LEN]) {
                    return None;
                }
                Some(Verified {
                    plan: Some(RemoteInfoPlan::from_code(echo[FLAGS_AT])?),
                    mapped_cp_port: u16::from_be_bytes([echo[PORT_AT], echo[PORT_AT + 1]]),
                })
            }
            None if ack.ip_version == IpVersion::V4 => None,
            None => {
                let matches = |key: &[u8; 16]| {
                    let mac = mac(key, binding, &[]);
                    ack.pmtime == mac[0] && ack.version == mac[1] & 0b11
                };
                (matches(&self.current) || (self.epoch > 0 && matches(&self.previous))).then_some(
                    Verified {
                        plan: None,
                        mapped_cp_port: 0,
                    },
                )
            }
        }
    }

    /// A 64-bit name of an exchange's binding, under a key of its own: what the core
    /// remembers of an exchange whose cookie already released its REMOTE_INFO.
    pub(crate) fn fingerprint(&self, b: &Binding) -> u64 {
        let mut h = keyed(&self.base);
        h.write(b"spent");
        write_addr(&mut h, b.from);
        h.write_u64(b.handle);
        write_addr(&mut h, b.cp);
        write_addr(&mut h, b.ap);
        h.finish128().h1
    }
}

fn keyed(key: &[u8]) -> SipHasher24 {
    let mut k = [0u8; 16];
    k.copy_from_slice(&key[..16]);
    SipHasher24::new_with_key(&k)
}

/// The MAC of an exchange's binding and the cookie's authenticated trailer (the notice
/// byte, when the trailer reaches it, counted as 0 when it holds the notice mark; any other
/// value there is authenticated like every other byte).
fn mac(key: &[u8; 16], b: &Binding, trailer: &[u8]) -> [u8; MAC_LEN] {
    let mut h = keyed(key);
    write_addr(&mut h, b.from);
    h.write_u64(b.handle);
    write_addr(&mut h, b.cp);
    write_addr(&mut h, b.ap);
    let notice = NOTICE_AT - MAC_LEN;
    if trailer.len() > notice {
        h.write(&trailer[..notice]);
        h.write_u8(if trailer[notice] == NOTICE {
            0
        } else {
            trailer[notice]
        });
        h.write(&trailer[notice + 1..]);
    } else {
        h.write(trailer);
    }
    h.finish128().as_bytes()
}

/// The 24-byte cookie block `datagram` (decoded as `msg`) carries: an IPv4 message's
/// unused address bytes, or an IPv6 message's extension block (`docs/protocol.md` §6.13);
/// `None` for an IPv6 message without one (rdma-core's).
pub(crate) fn block_of(msg: &PeerMessage, datagram: &[u8]) -> Option<Ipv4Echo> {
    match msg.ip_version {
        IpVersion::V4 => Some(ipv4_echo(datagram)),
        IpVersion::V6 => peer_extension(datagram).map(|e| e.cookie),
    }
}

/// Does this IPv6 REQUEST announce that its sender echoes a cookie block (an iwpmd-rs
/// active side)? An IPv4 one needs no announcement: rdma-core echoes the unused bytes.
pub(crate) fn announces_block(datagram: &[u8]) -> bool {
    peer_extension(datagram).is_some_and(|e| e.can_echo())
}

/// `msg`'s bytes with `block` where its family keeps a cookie: an IPv4 message's unused
/// address bytes, an IPv6 message's extension block (flagged: we echo such blocks too).
pub(crate) fn encode_with_block(msg: &PeerMessage, block: &Ipv4Echo) -> Vec<u8> {
    match msg.ip_version {
        IpVersion::V4 => msg.encode_with_echo(block),
        IpVersion::V6 => msg.encode_with_extension(&PeerExtension {
            flags: PeerExtension::CAN_ECHO,
            cookie: *block,
        }),
    }
}

/// Does an ACCEPT's cookie block say its REMOTE_INFO waits for our ACK (so a delivery notice
/// will follow)? Read without a key: the cookie is the peer's, only its MAC is secret.
pub(crate) fn plans_remote_info_on_ack(echo: &Ipv4Echo) -> bool {
    echo[FORMAT_AT] == FORMAT_V1
        && echo[FLAGS_AT] == RemoteInfoPlan::OnAck.code()
        && echo[NOTICE_AT] != NOTICE
}

/// Is this ACCEPT's echo a delivery notice (the REMOTE_INFO is in the peer's kernel)?
pub(crate) fn is_delivery_notice(echo: &Ipv4Echo) -> bool {
    echo[FORMAT_AT] == FORMAT_V1 && echo[NOTICE_AT] == NOTICE
}

/// The echo of the delivery notice for the ACK that echoed `echo`.
pub(crate) fn delivery_notice(echo: &Ipv4Echo) -> Ipv4Echo {
    let mut n = *echo;
    n[NOTICE_AT] = NOTICE;
    n
}

fn write_addr(h: &mut SipHasher24, a: SocketAddr) {
    match a.ip() {
        IpAddr::V4(v4) => {
            h.write_u8(4);
            h.write(&v4.octets());
        }
        IpAddr::V6(v6) => {
            h.write_u8(6);
            h.write(&v6.octets());
        }
    }
    h.write_u16(a.port());
}

/// Equality without an early exit, so the time taken says nothing of how many bytes of a
/// guess were right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    use iwpm_proto::peer::ipv4_echo;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn exchange(cp: &str, ap: &str) -> (PeerMessage, Binding) {
        let cp = sa(cp);
        let req = PeerMessage::request(7, cp, cp, sa(ap));
        let from = SocketAddr::new(cp.ip(), 3935);
        (req, Binding::of_request(from, &req, sa(ap)))
    }

    const V4: (&str, &str) = ("10.0.0.1:5000", "10.0.0.2:4000");
    const V6: (&str, &str) = ("[fd00::1]:5000", "[fd00::2]:4000");

    /// One exchange between `cp_ap`, its ACCEPT marked by a jar keyed with `key` at `t0`.
    fn marked(
        key: u8,
        (cp, ap): (&str, &str),
        plan: (RemoteInfoPlan, u16),
        room: Room,
    ) -> (Instant, CookieJar, Binding, PeerMessage, Ipv4Echo) {
        let t0 = Instant::now();
        let mut jar = CookieJar::new(&[key; 32], t0);
        let (req, b) = exchange(cp, ap);
        let mut acc = PeerMessage::accept_for(&req, b.ap);
        let echo = jar.mark(t0, &mut acc, &b, plan, room);
        (t0, jar, b, acc, echo)
    }

    /// The ACK the active side sends: our ACCEPT's bytes with the type changed.
    fn echoed_ack(accept: &PeerMessage, echo: &Ipv4Echo) -> (PeerMessage, Ipv4Echo) {
        let bytes = PeerMessage::ack_for(accept).encode_with_echo(echo);
        (PeerMessage::decode(&bytes).unwrap(), ipv4_echo(&bytes))
    }

    #[test]
    fn an_echoed_ipv4_cookie_verifies_with_its_plan_and_port() {
        let (t0, mut jar, b, acc, echo) =
            marked(9, V4, (RemoteInfoPlan::OnAck, 41234), Room::Block);
        let (ack, echo) = echoed_ack(&acc, &echo);
        let got = jar.verify(
            t0 + EPOCH,
            &ack,
            Some(&echo),
            &Binding::of_ack(b.from, &ack),
        );
        assert_eq!(
            got,
            Some(Verified {
                plan: Some(RemoteInfoPlan::OnAck),
                mapped_cp_port: 41234
            })
        );
    }

    #[test]
    fn a_delivery_notice_is_recognised_and_its_ack_still_verifies() {
        let (t0, mut jar, b, mut acc, echo) =
            marked(9, V4, (RemoteInfoPlan::OnAck, 41234), Room::Block);
        assert!(plans_remote_info_on_ack(&echo) && !is_delivery_notice(&echo));
        let notice = delivery_notice(&echo);
        assert!(is_delivery_notice(&notice) && !plans_remote_info_on_ack(&notice));
        // rdma-core answers the notice (a duplicate ACCEPT to it) with an ACK echoing it.
        let (ack, echoed) = echoed_ack(&acc, &notice);
        let got = jar.verify(t0, &ack, Some(&echoed), &Binding::of_ack(b.from, &ack));
        assert_eq!(got.map(|v| v.plan), Some(Some(RemoteInfoPlan::OnAck)));
        // Other plans announce no notice.
        let echo = jar.mark(
            t0,
            &mut acc,
            &b,
            (RemoteInfoPlan::SentAtOnce, 41234),
            Room::Block,
        );
        assert!(!plans_remote_info_on_ack(&echo));
        assert!(!plans_remote_info_on_ack(&[0; IPV4_ECHO_LEN]));
    }

    #[test]
    fn a_blind_or_tampered_or_stale_ipv4_ack_fails() {
        let (t0, mut jar, b, acc, echo) =
            marked(9, V4, (RemoteInfoPlan::NotNeeded, 5000), Room::Block);
        let (ack, good) = echoed_ack(&acc, &echo);
        let bind = Binding::of_ack(b.from, &ack);
        // Blind: written from the REQUEST alone, zero padding.
        assert_eq!(jar.verify(t0, &ack, Some(&[0; IPV4_ECHO_LEN]), &bind), None);
        // Any flipped bit of the echo, the plan and port included.
        for i in 0..IPV4_ECHO_LEN {
            let mut bad = good;
            bad[i] ^= 0x40;
            assert_eq!(jar.verify(t0, &ack, Some(&bad), &bind), None, "byte {i}");
        }
        // Another source port, handle or cp.
        let other = Binding {
            from: sa("10.0.0.1:3936"),
            ..bind
        };
        assert_eq!(jar.verify(t0, &ack, Some(&good), &other), None);
        let other = Binding { handle: 8, ..bind };
        assert_eq!(jar.verify(t0, &ack, Some(&good), &other), None);
        // Two epochs later the key is gone.
        assert_eq!(jar.verify(t0 + EPOCH * 2, &ack, Some(&good), &bind), None);
    }

    #[test]
    fn an_ipv6_cookie_rides_in_pmtime_and_version() {
        let (t0, mut jar, b, acc, echo) =
            marked(3, V6, (RemoteInfoPlan::SentAtOnce, 0), Room::TenBits);
        assert_eq!(echo, [0; IPV4_ECHO_LEN]);
        let (ack, _) = echoed_ack(&acc, &echo);
        let bind = Binding::of_ack(b.from, &ack);
        assert!(jar.verify(t0 + EPOCH, &ack, None, &bind).is_some());
        // The blind guess (the REQUEST's pmtime and version, 0) passes only by chance: out
        // of 1024 handles, about 2 in 1024 (two epochs) may pass.
        let passed = (0..1024u64)
            .filter(|h| {
                let bind = Binding { handle: *h, ..bind };
                let blind = PeerMessage {
                    assoc_handle: *h,
                    pmtime: 0,
                    version: 0,
                    ..ack
                };
                jar.verify(t0 + EPOCH, &blind, None, &bind).is_some()
            })
            .count();
        assert!(passed < 12, "{passed} of 1024 blind IPv6 ACKs passed");
    }

    #[test]
    fn an_ipv6_cookie_in_the_extension_block_is_full_strength() {
        let (t0, mut jar, b, acc, block) =
            marked(3, V6, (RemoteInfoPlan::OnAck, 45000), Room::Block);
        assert_eq!(
            (acc.pmtime, acc.version),
            (0, 0),
            "the ten bits stay unused"
        );
        let ack = PeerMessage::ack_for(&acc);
        let bind = Binding::of_ack(b.from, &ack);
        assert_eq!(
            jar.verify(t0, &ack, Some(&block), &bind),
            Some(Verified {
                plan: Some(RemoteInfoPlan::OnAck),
                mapped_cp_port: 45000
            })
        );
        for i in 0..IPV4_ECHO_LEN {
            let mut bad = block;
            bad[i] ^= 0x10;
            assert_eq!(jar.verify(t0, &ack, Some(&bad), &bind), None, "byte {i}");
        }
        // Without the block, the ten bits of an unmarked ACCEPT do not carry the plan:
        // whatever they verify by chance releases nothing (no plan).
        assert!(jar
            .verify(t0, &ack, None, &bind)
            .is_none_or(|v| v.plan.is_none()));
    }

    #[test]
    fn fingerprints_name_the_binding() {
        let t0 = Instant::now();
        let jar = CookieJar::new(&[3; 32], t0);
        let (_, b) = exchange("10.0.0.1:5000", "10.0.0.2:4000");
        assert_eq!(jar.fingerprint(&b), jar.fingerprint(&b));
        assert_ne!(
            jar.fingerprint(&b),
            jar.fingerprint(&Binding { handle: 8, ..b })
        );
        assert_ne!(
            jar.fingerprint(&b),
            CookieJar::new(&[4; 32], t0).fingerprint(&b)
        );
    }
}
