//! Golden vectors of the peer protocol (`tests/vectors/peer/*.hex`).
//!
//! `c-*.hex` are real datagrams of the C daemon taken from the rig's strace captures (each
//! file names its capture line, kept in `tests/vectors/captures/*.excerpt`); the others are
//! hand-built from `docs/protocol.md` §6 and say so; `ext-*.hex` are 96-byte datagrams with
//! the iwpmd-rs extension block (§6.13), hand-built (`ext-bad-*.hex` must not decode).
//! Format: `#` starts a comment, the rest is hex byte pairs separated by whitespace.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use iwpm_proto::peer::auth::unseal;
use iwpm_proto::peer::{
    peer_extension, IpVersion, PeerError, PeerExtension, PeerMessage, PeerMsgType, EXT_MAGIC,
    EXT_VERSION, PEER_EXTENDED_LEN, PEER_REQUEST_LEN, PEER_SHORT_LEN,
};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/peer")
}

fn parse_hex(text: &str) -> Vec<u8> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(str::split_whitespace)
        .map(|pair| {
            assert_eq!(pair.len(), 2, "bad hex token {pair:?}");
            u8::from_str_radix(pair, 16).unwrap_or_else(|e| panic!("bad hex {pair:?}: {e}"))
        })
        .collect()
}

fn vector(name: &str) -> Vec<u8> {
    let path = vectors_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    parse_hex(&text)
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
}

/// Byte ranges an IPv4 message does not use: bytes 4..16 of each address field.
fn ipv4_padding(len: usize) -> Vec<std::ops::Range<usize>> {
    let mut r = vec![20..32, 36..48];
    if len == PEER_REQUEST_LEN {
        r.push(52..64);
    }
    r
}

fn zero_ipv4_padding(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for r in ipv4_padding(b.len()) {
        b[r].fill(0);
    }
    b
}

// ------------------------------------------- worked exchange (docs/protocol.md §6.11)

const H: u64 = 0x0123_4567_89ab_cdef;

fn worked_request() -> PeerMessage {
    PeerMessage::request(
        H,
        sa("10.0.0.1:5000"),
        sa("10.0.0.1:41234"),
        sa("10.0.0.2:4000"),
    )
}

#[test]
fn worked_request_matches_vector_both_ways() {
    let bytes = vector("worked-4.8-request.hex");
    let req = worked_request();
    assert_eq!(req.encode(), bytes);
    let d = PeerMessage::decode(&bytes).unwrap();
    assert_eq!(d, req);
    assert_eq!(d.version, 0);
    assert_eq!(d.msg_type, PeerMsgType::Request);
    assert_eq!(d.ip_version, IpVersion::V4);
    assert_eq!(d.pmtime, 0);
    assert_eq!(d.reserved_port, 41234);
    assert_eq!(d.cp(), sa("10.0.0.1:5000"));
    assert_eq!(d.ap(), sa("10.0.0.2:4000"));
    assert_eq!(d.mapped_cp(), Some(sa("10.0.0.1:41234")));
    assert_eq!(d.assoc_handle, H);
    assert_eq!(bytes.len(), PEER_REQUEST_LEN);
}

#[test]
fn worked_accept_ack_reject_match_vectors() {
    let req = worked_request();
    let accept = PeerMessage::accept_for(&req, sa("10.0.0.2:40123"));
    let accept_bytes = vector("worked-4.8-accept.hex");
    assert_eq!(accept.encode(), accept_bytes);
    assert_eq!(PeerMessage::decode(&accept_bytes).unwrap(), accept);
    assert_eq!(accept.msg_type, PeerMsgType::Accept);
    assert_eq!(accept.cp(), sa("10.0.0.1:5000"));
    assert_eq!(accept.ap(), sa("10.0.0.2:40123"));
    assert_eq!(accept.reserved_port, 0);
    assert_eq!(accept.mapped_cp(), None);
    assert_eq!(accept_bytes.len(), PEER_SHORT_LEN);

    let ack = PeerMessage::ack_for(&accept);
    let ack_bytes = vector("worked-4.8-ack.hex");
    assert_eq!(ack.encode(), ack_bytes);
    assert_eq!(PeerMessage::decode(&ack_bytes).unwrap(), ack);
    assert_eq!(ack.msg_type, PeerMsgType::Ack);
    assert_eq!(ack.ap(), sa("10.0.0.2:40123"));

    let reject = PeerMessage::reject_for(&req);
    let reject_bytes = vector("worked-4.8-reject.hex");
    assert_eq!(reject.encode(), reject_bytes);
    assert_eq!(PeerMessage::decode(&reject_bytes).unwrap(), reject);
    assert_eq!(reject.msg_type, PeerMsgType::Reject);
    assert_eq!(reject.ap(), sa("10.0.0.2:4000"));
    assert_eq!(reject.cp(), sa("10.0.0.1:5000"));
}

#[test]
fn answers_echo_version_and_pmtime() {
    let req = PeerMessage::decode(&vector("echo-v2-request.hex")).unwrap();
    assert_eq!(req.version, 2);
    assert_eq!(req.pmtime, 0x7e);
    assert_eq!(req.assoc_handle, u64::MAX);
    assert_eq!(req.cp(), sa("192.0.2.1:49152"));
    assert_eq!(req.ap(), sa("192.0.2.2:3260"));
    assert_eq!(req.mapped_cp(), Some(sa("198.51.100.7:50000")));

    let accept = PeerMessage::accept_for(&req, sa("192.0.2.2:61000"));
    assert_eq!(accept.encode(), vector("echo-v2-accept.hex"));
    assert_eq!(
        PeerMessage::ack_for(&accept).encode(),
        vector("echo-v2-ack.hex")
    );
    assert_eq!(
        PeerMessage::reject_for(&req).encode(),
        vector("echo-v2-reject.hex")
    );
}

/// The REQUEST of `ipv6-request.hex` (and of `ext-v1-ipv6-request.hex`).
fn ipv6_request() -> PeerMessage {
    PeerMessage::request(
        0xfedc_ba98_7654_3210,
        sa("[fd00::1]:5000"),
        sa("[fd00::9]:41234"),
        sa("[fd00::2]:4000"),
    )
}

#[test]
fn ipv6_exchange_matches_vectors() {
    let req = ipv6_request();
    let req_bytes = vector("ipv6-request.hex");
    assert_eq!(req.encode(), req_bytes);
    let d = PeerMessage::decode(&req_bytes).unwrap();
    assert_eq!(d, req);
    assert_eq!(d.ip_version, IpVersion::V6);
    assert_eq!(d.cp_ip, v6("fd00::1"));
    assert_eq!(d.ap_ip, v6("fd00::2"));
    assert_eq!(d.mapped_cp_ip, Some(v6("fd00::9")));

    let accept = PeerMessage::accept_for(&req, sa("[fd00::2]:40123"));
    let accept_bytes = vector("ipv6-accept.hex");
    assert_eq!(accept.encode(), accept_bytes);
    assert_eq!(PeerMessage::decode(&accept_bytes).unwrap(), accept);

    let ack = PeerMessage::ack_for(&accept);
    let ack_bytes = vector("ipv6-ack.hex");
    assert_eq!(ack.encode(), ack_bytes);
    assert_eq!(PeerMessage::decode(&ack_bytes).unwrap(), ack);

    let reject = PeerMessage::reject_for(&req);
    let reject_bytes = vector("ipv6-reject.hex");
    assert_eq!(reject.encode(), reject_bytes);
    assert_eq!(PeerMessage::decode(&reject_bytes).unwrap(), reject);
}

// ------------------------------------------- extension block (docs/protocol.md §6.13)

/// The cookie of `ext-v1-ipv6-accept.hex`: an arbitrary pattern, 0xc0..=0xd7.
fn ext_cookie() -> [u8; 24] {
    std::array::from_fn(|i| 0xc0 + i as u8)
}

#[test]
fn ext_request_matches_vector_both_ways() {
    let bytes = vector("ext-v1-ipv6-request.hex");
    assert_eq!(bytes.len(), PEER_EXTENDED_LEN);
    let req = ipv6_request();
    let offer = PeerExtension {
        flags: PeerExtension::CAN_ECHO,
        cookie: [0; 24],
    };
    assert_eq!(req.encode_with_extension(&offer), bytes);
    // The first 64 bytes are the plain IPv6 REQUEST: what rdma-core reads.
    assert_eq!(bytes[..PEER_REQUEST_LEN], vector("ipv6-request.hex")[..]);

    let d = PeerMessage::decode(&bytes).unwrap();
    assert_eq!(d, req);
    assert_eq!(d.msg_type, PeerMsgType::Request);
    assert_eq!(d.ip_version, IpVersion::V6);
    assert_eq!(d.cp(), sa("[fd00::1]:5000"));
    assert_eq!(d.ap(), sa("[fd00::2]:4000"));
    assert_eq!(d.mapped_cp(), Some(sa("[fd00::9]:41234")));
    assert_eq!(d.assoc_handle, 0xfedc_ba98_7654_3210);
    let ext = peer_extension(&bytes).unwrap();
    assert_eq!(ext, offer);
    assert!(ext.can_echo());
    assert_eq!(d.encode_with_extension(&ext), bytes);
}

#[test]
fn ext_accept_and_ack_match_vectors_both_ways() {
    let req = ipv6_request();
    let ext = PeerExtension {
        flags: PeerExtension::CAN_ECHO,
        cookie: ext_cookie(),
    };
    let accept = PeerMessage::accept_for(&req, sa("[fd00::2]:40123"));
    let accept_bytes = vector("ext-v1-ipv6-accept.hex");
    assert_eq!(accept.encode_with_extension(&ext), accept_bytes);
    assert_eq!(
        accept_bytes[..PEER_SHORT_LEN],
        vector("ipv6-accept.hex")[..]
    );
    assert!(accept_bytes[PEER_SHORT_LEN..PEER_REQUEST_LEN]
        .iter()
        .all(|&b| b == 0));

    // Decoding gives the ACCEPT with the 64-byte field present: the unspecified address.
    let d = PeerMessage::decode(&accept_bytes).unwrap();
    assert_eq!(
        d,
        PeerMessage {
            mapped_cp_ip: Some(v6("::")),
            ..accept
        }
    );
    assert_eq!(d.msg_type, PeerMsgType::Accept);
    assert_eq!(d.cp(), sa("[fd00::1]:5000"));
    assert_eq!(d.ap(), sa("[fd00::2]:40123"));
    assert_eq!(d.reserved_port, 0);
    assert_eq!(peer_extension(&accept_bytes), Some(ext));
    assert_eq!(d.encode_with_extension(&ext), accept_bytes);

    // The ACK: the same bytes with magic 0x26, the block echoed.
    let ack_bytes = vector("ext-v1-ipv6-ack.hex");
    let mut expected = accept_bytes.clone();
    assert_eq!(expected[0], 0x16);
    expected[0] = 0x26;
    assert_eq!(ack_bytes, expected);
    let ack = PeerMessage::ack_for(&accept);
    assert_eq!(ack.encode_with_extension(&ext), ack_bytes);
    let d = PeerMessage::decode(&ack_bytes).unwrap();
    assert_eq!(d.msg_type, PeerMsgType::Ack);
    assert_eq!(d.ap(), sa("[fd00::2]:40123"));
    assert_eq!(d.assoc_handle, 0xfedc_ba98_7654_3210);
    assert_eq!(peer_extension(&ack_bytes), Some(ext));
    assert_eq!(d.encode_with_extension(&ext), ack_bytes);
}

#[test]
fn ext_bad_magic_vector_is_bad_extension() {
    let bytes = vector("ext-bad-magic.hex");
    assert_eq!(bytes.len(), PEER_EXTENDED_LEN);
    assert_eq!(
        PeerMessage::decode(&bytes),
        Err(PeerError::BadExtension {
            magic: *b"iwrs",
            version: EXT_VERSION
        })
    );
    assert_eq!(peer_extension(&bytes), None);
    // Only the magic differs from the valid REQUEST.
    let mut fixed = bytes.clone();
    fixed[64..68].copy_from_slice(&EXT_MAGIC);
    assert_eq!(fixed, vector("ext-v1-ipv6-request.hex"));
}

#[test]
fn ext_vectors_state_their_provenance() {
    let mut n = 0;
    for entry in std::fs::read_dir(vectors_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("ext-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines()
                .any(|l| l.starts_with("# Provenance: hand-built, iwpmd-rs extension v1")),
            "{name}: no provenance line"
        );
        n += 1;
    }
    assert_eq!(n, 4, "extension vector count changed: update this test");
}

// ---------------------------------------------------------------- real C datagrams

struct CExchange {
    prefix: &'static str,
    handle: u64,
    cp: &'static str,
    ap: &'static str,
    mapped_cp: &'static str,
    mapped_ap: &'static str,
}

const C_EXCHANGES: [CExchange; 2] = [
    // Single host: rping over siw, so the mapped ports equal the local ones (NO_PORT_MAP).
    CExchange {
        prefix: "c-single-vm",
        handle: 0x0000_55c9_6898_eb90,
        cp: "10.88.0.1:36021",
        ap: "10.88.0.1:7174",
        mapped_cp: "10.88.0.1:36021",
        mapped_ap: "10.88.0.1:7174",
    },
    CExchange {
        prefix: "c-2vm",
        handle: 0x0000_555f_8a24_6a10,
        cp: "10.77.0.2:51194",
        ap: "10.77.0.1:7174",
        mapped_cp: "10.77.0.2:51194",
        mapped_ap: "10.77.0.1:7174",
    },
];

/// Asserts that our encoding of `ours` equals the C datagram `c` except in the IPv4
/// padding, that the C datagram really carries garbage there, and that we zero it.
fn assert_equal_but_padding(ours: &[u8], c: &[u8]) {
    assert_eq!(ours.len(), c.len());
    assert_eq!(ours, zero_ipv4_padding(c).as_slice());
    let padding = ipv4_padding(c.len());
    let differing: Vec<usize> = (0..c.len()).filter(|&i| ours[i] != c[i]).collect();
    assert!(
        !differing.is_empty(),
        "the C datagram was expected to leak non-zero padding bytes"
    );
    for i in differing {
        assert!(
            padding.iter().any(|r| r.contains(&i)),
            "byte {i} differs outside the IPv4 padding"
        );
    }
    for r in padding {
        assert!(ours[r].iter().all(|&b| b == 0));
    }
}

#[test]
fn c_datagrams_decode_to_expected_fields() {
    for x in &C_EXCHANGES {
        let req = PeerMessage::decode(&vector(&format!("{}-request.hex", x.prefix))).unwrap();
        assert_eq!(req.version, 0, "{}", x.prefix);
        assert_eq!(req.msg_type, PeerMsgType::Request);
        assert_eq!(req.ip_version, IpVersion::V4);
        assert_eq!(req.pmtime, 0);
        assert_eq!(req.assoc_handle, x.handle);
        assert_eq!(req.cp(), sa(x.cp));
        assert_eq!(req.ap(), sa(x.ap));
        assert_eq!(req.mapped_cp(), Some(sa(x.mapped_cp)));

        let accept = PeerMessage::decode(&vector(&format!("{}-accept.hex", x.prefix))).unwrap();
        assert_eq!(accept.msg_type, PeerMsgType::Accept);
        assert_eq!(accept.version, 0);
        assert_eq!(accept.pmtime, 0);
        assert_eq!(accept.reserved_port, 0);
        assert_eq!(accept.assoc_handle, x.handle);
        assert_eq!(accept.cp(), sa(x.cp));
        assert_eq!(accept.ap(), sa(x.mapped_ap));
        assert_eq!(accept.mapped_cp_ip, None);

        let ack = PeerMessage::decode(&vector(&format!("{}-ack.hex", x.prefix))).unwrap();
        assert_eq!(ack.msg_type, PeerMsgType::Ack);
        assert_eq!(ack.reserved_port, 0);
        assert_eq!(ack.assoc_handle, x.handle);
        assert_eq!(ack.cp(), sa(x.cp));
        assert_eq!(ack.ap(), sa(x.mapped_ap));
        assert_eq!(ack.mapped_cp_ip, None);
    }
}

#[test]
fn c_datagrams_reencode_with_padding_zeroed() {
    for x in &C_EXCHANGES {
        for kind in ["request", "accept", "ack"] {
            let c = vector(&format!("{}-{kind}.hex", x.prefix));
            let ours = PeerMessage::decode(&c).unwrap().encode();
            assert_equal_but_padding(&ours, &c);
        }
    }
}

#[test]
fn constructors_reproduce_c_datagrams_but_padding() {
    for x in &C_EXCHANGES {
        let req = PeerMessage::request(x.handle, sa(x.cp), sa(x.mapped_cp), sa(x.ap));
        assert_equal_but_padding(&req.encode(), &vector(&format!("{}-request.hex", x.prefix)));
        let accept = PeerMessage::accept_for(&req, sa(x.mapped_ap));
        assert_equal_but_padding(
            &accept.encode(),
            &vector(&format!("{}-accept.hex", x.prefix)),
        );
        let ack = PeerMessage::ack_for(&accept);
        assert_equal_but_padding(&ack.encode(), &vector(&format!("{}-ack.hex", x.prefix)));
    }
}

// ---------------------------------------------------------------- every vector file

#[test]
fn every_vector_decodes_and_reencodes_canonically() {
    let mut n = 0;
    for entry in std::fs::read_dir(vectors_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("hex") {
            continue;
        }
        let bytes = parse_hex(&std::fs::read_to_string(&path).unwrap());
        n += 1;
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with("ext-bad-") {
            assert!(
                matches!(
                    PeerMessage::decode(&bytes),
                    Err(PeerError::BadExtension { .. })
                ),
                "{path:?}"
            );
            continue;
        }
        let msg = PeerMessage::decode(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert!(msg.is_consistent());
        let canonical = match msg.ip_version {
            IpVersion::V4 => zero_ipv4_padding(&bytes),
            IpVersion::V6 => bytes.clone(),
        };
        let again = match (peer_extension(&bytes), unseal(&bytes)) {
            // (the sealed form: its own test, `peer_auth_vectors`, re-seals it)
            (_, Some(_)) => bytes.clone(),
            (Some(ext), None) => msg.encode_with_extension(&ext),
            (None, None) => msg.encode(),
        };
        assert_eq!(again, canonical, "{path:?}");
        assert_eq!(PeerMessage::decode(&canonical).unwrap(), msg);
    }
    assert_eq!(n, 25, "vector count changed: update this test");
}

// ---------------------------------------------------------------- provenance

/// Finds each `c-*.hex` vector's source line in the capture excerpts shipped with the
/// vectors (`tests/vectors/captures/*.excerpt`, each kept line prefixed with `L<n> `, n being
/// its line number in the full capture) and checks the bytes are those of that line.
#[test]
fn c_vectors_match_their_capture_lines() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in std::fs::read_dir(vectors_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("c-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let header = text
            .lines()
            .find_map(|l| l.strip_prefix("# Real bytes: "))
            .unwrap_or_else(|| panic!("{name}: no provenance line"));
        let (file, rest) = header
            .split_once(", capture line ")
            .unwrap_or_else(|| panic!("{name}: provenance line without a capture line"));
        assert!(
            file.starts_with("tests/vectors/captures/"),
            "{name}: provenance outside the shipped captures: {file}"
        );
        let line_no: usize = rest.split(',').next().unwrap().parse().unwrap();
        let excerpt = std::fs::read_to_string(crate_dir.join(file))
            .unwrap_or_else(|e| panic!("{name}: cannot read {file}: {e}"));
        let prefix = format!("L{line_no} ");
        let line = excerpt
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{name}: capture line {line_no} not kept in {file}"));
        let escaped: String = parse_hex(&text)
            .iter()
            .map(|b| format!("\\x{b:02x}"))
            .collect();
        assert!(
            line.contains(&format!("\"{escaped}\"")),
            "{name}: bytes not found on capture line {line_no} of {file}"
        );
        checked += 1;
    }
    assert_eq!(checked, 6, "every real-capture vector is checked");
}

#[test]
fn hex_loader_ignores_comments() {
    assert_eq!(parse_hex("# x 00\n0a ff # 11\n 01"), vec![0x0a, 0xff, 0x01]);
}
