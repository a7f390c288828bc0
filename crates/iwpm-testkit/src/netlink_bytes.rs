//! Netlink messages by hand, for tests of the codec: hex test vectors, a header with a
//! raw payload, attributes packed and unpacked the way the kernel lays them out, and
//! surgery on the attributes of a well-formed message.

use iwpm_proto::netlink::*;
use iwpm_proto::sockaddr::SockAddrStorage;

/// Parses a vector file: hex byte pairs separated by whitespace; `#` starts a comment.
pub fn hex(text: &str) -> Vec<u8> {
    let digits: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    assert!(digits.len() % 2 == 0, "odd number of hex digits");
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Canonical sockaddr for "ip:port".
pub fn sa(s: &str) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(s.parse().expect("socket address"))
}

/// The single message of a one-message datagram, split into header and payload.
pub fn single(datagram: &[u8]) -> (NlHeader, &[u8]) {
    let all: Vec<_> = frames(datagram).collect();
    assert_eq!(all.len(), 1, "expected exactly one frame");
    match all[0].expect("frame") {
        Frame::Msg(header, payload) => (header, payload),
        other => panic!("not a protocol message: {other:?}"),
    }
}

/// Builds a message from a header (length recomputed) and `(type, payload)` attributes,
/// padded the usual way.
pub fn build(ty: u16, flags: u16, seq: u32, pid: u32, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut payload = vec![];
    for (t, p) in attrs {
        payload.extend_from_slice(&((4 + p.len()) as u16).to_ne_bytes());
        payload.extend_from_slice(&t.to_ne_bytes());
        payload.extend_from_slice(p);
        payload.resize(payload.len() + (4 - p.len() % 4) % 4, 0);
    }
    with_payload(ty, flags, seq, pid, &payload)
}

/// A message with a raw payload (no padding added); `nlmsg_len` = 16 + payload.
pub fn with_payload(ty: u16, flags: u16, seq: u32, pid: u32, payload: &[u8]) -> Vec<u8> {
    let h = NlHeader {
        len: (16 + payload.len()) as u32,
        ty,
        flags,
        seq,
        pid,
    };
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// The attributes of a well-formed message, in wire order.
pub fn attrs_of(msg: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let (_, mut p) = single(msg);
    let mut out = vec![];
    while p.len() >= 4 {
        let len = u16::from_ne_bytes([p[0], p[1]]) as usize;
        let ty = u16::from_ne_bytes([p[2], p[3]]);
        out.push((ty, p[4..len].to_vec()));
        p = &p[((len + 3) & !3).min(p.len())..];
    }
    out
}

/// Rebuilds `msg` with its attributes replaced by `f(attrs)`.
pub fn rewrite(msg: &[u8], f: impl FnOnce(&mut Vec<(u16, Vec<u8>)>)) -> Vec<u8> {
    let (h, _) = single(msg);
    let mut attrs = attrs_of(msg);
    f(&mut attrs);
    build(h.ty, h.flags, h.seq, h.pid, &attrs)
}
