//! Malformed netlink input: each case asserts the exact error variant.

use iwpm_proto::consts::{NLM_F_REQUEST, SOCKADDR_STORAGE_SIZE};
use iwpm_proto::netlink::*;
use iwpm_testkit::netlink_bytes::*;

const ULIB: &str = "iWarpPortMapperUser";

fn env(client: u8) -> Envelope {
    Envelope {
        client,
        flags: NLM_F_REQUEST,
        seq: 7,
        pid: 0,
    }
}

fn kernel_bytes(msg: &KernelMsg) -> Vec<u8> {
    let mut out = vec![];
    encode_kernel_msg(&env(2), msg, &mut out);
    out
}

fn daemon_bytes(msg: &DaemonMsg) -> Vec<u8> {
    let mut out = vec![];
    encode_daemon_msg(&env(2), msg, &mut out);
    out
}

fn as_kernel(bytes: &[u8], abi: u16) -> Result<(Envelope, KernelMsg), NetlinkError> {
    let (h, p) = single(bytes);
    decode_kernel_msg(&h, p, abi)
}

fn as_daemon(bytes: &[u8]) -> Result<(Envelope, DaemonMsg), NetlinkError> {
    let (h, p) = single(bytes);
    decode_daemon_msg(&h, p)
}

/// One valid message of every K->D op, as sent under ABI 4.
fn kernel_samples() -> Vec<KernelMsg> {
    let a = sa("192.0.2.10:20000");
    vec![
        KernelMsg::RegPid(RegPidRequest {
            echo_seq: 1,
            if_name: NlString::padded("eth0", 16),
            ibdev_name: NlString::padded("siw0", 32),
            ulib_name: NlString::padded(ULIB, 32),
            unknown: vec![],
        }),
        KernelMsg::AddMapping(ManageMappingRequest {
            echo_seq: 1,
            addr: a,
            flags: Some(1),
            unknown: vec![],
        }),
        KernelMsg::QueryMapping(QueryMappingRequest {
            echo_seq: 1,
            local_addr: a,
            remote_addr: a,
            flags: Some(1),
            unknown: vec![],
        }),
        KernelMsg::RemoveMapping(ManageMappingRequest {
            echo_seq: 1,
            addr: a,
            flags: None,
            unknown: vec![],
        }),
        KernelMsg::MapInfo(MapInfoRecord {
            local_addr: a,
            mapped_addr: a,
            flags: Some(0),
            unknown: vec![],
        }),
        KernelMsg::MapInfoNum(MapInfoNumRequest {
            seq: 0,
            send_num: 1,
            unknown: vec![],
        }),
        KernelMsg::Hello(Hello {
            abi_version: 4,
            unknown: vec![],
        }),
    ]
}

/// One valid message of every D->K op.
fn daemon_samples() -> Vec<DaemonMsg> {
    let a = sa("192.0.2.10:20000");
    let q = QueryMappingReply {
        seq: 1,
        local_addr: a,
        remote_addr: a,
        mapped_local_addr: a,
        mapped_remote_addr: a,
        err: 0,
        unknown: vec![],
    };
    vec![
        DaemonMsg::RegPid(RegPidReply {
            seq: 1,
            ibdev_name: NlString::new("siw0"),
            ulib_name: NlString::new(ULIB),
            ulib_version: 4,
            err: 0,
            unknown: vec![],
        }),
        DaemonMsg::AddMapping(AddMappingReply {
            seq: 1,
            addr: a,
            mapped_addr: a,
            err: 0,
            unknown: vec![],
        }),
        DaemonMsg::QueryMapping(q.clone()),
        DaemonMsg::RemoteInfo(q),
        DaemonMsg::HandleErr(HandleErr {
            seq: 1,
            code: 10,
            unknown: vec![],
        }),
        DaemonMsg::MapInfo(MapInfoRequest {
            ulib_name: NlString::new(ULIB),
            ulib_version: 4,
            unknown: vec![],
        }),
        DaemonMsg::MapInfoNum(MapInfoNumReply {
            seq: 1,
            send_num: 1,
            ack_num: 1,
            unknown: vec![],
        }),
        DaemonMsg::Hello(Hello {
            abi_version: 4,
            unknown: vec![],
        }),
    ]
}

/// A HELLO (`0x0808`) with a raw payload.
fn hello_raw(payload: &[u8]) -> Vec<u8> {
    with_payload(0x0808, 1, 0, 0, payload)
}

// ---- framing --------------------------------------------------------------------------

#[test]
fn truncated_header() {
    let hello = kernel_bytes(&kernel_samples()[6]);
    assert_eq!(
        frames(&hello[..10]).collect::<Vec<_>>(),
        [Err(FrameError::TruncatedHeader {
            offset: 0,
            available: 10
        })]
    );
    // After a good message: reported at its offset, then the walk ends.
    let mut two = hello.clone();
    two.extend_from_slice(&hello[..12]);
    let got = decode_kernel_datagram(&two, 4);
    assert_eq!(got.len(), 2);
    assert!(got[0].is_ok());
    assert_eq!(
        got[1],
        Err(NetlinkError::Frame(FrameError::TruncatedHeader {
            offset: 24,
            available: 12
        }))
    );
}

#[test]
fn nlmsg_len_below_header() {
    for len in [0u32, 1, 15] {
        let mut b = hello_raw(&[6, 0, 1, 0, 4, 0, 0, 0]);
        b[..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(
            decode_daemon_datagram(&b),
            [Err(NetlinkError::Frame(FrameError::LenTooShort {
                offset: 0,
                len
            }))]
        );
    }
}

#[test]
fn nlmsg_len_beyond_data() {
    let good = kernel_bytes(&kernel_samples()[1]);
    let cut = &good[..good.len() - 4];
    assert_eq!(
        frames(cut).collect::<Vec<_>>(),
        [Err(FrameError::LenBeyondData {
            offset: 0,
            len: 164,
            available: 160
        })]
    );
    let mut b = good.clone();
    b[..4].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(
        decode_kernel_datagram(&b, 4),
        [Err(NetlinkError::Frame(FrameError::LenBeyondData {
            offset: 0,
            len: u32::MAX,
            available: 164
        }))]
    );
}

#[test]
fn short_done_and_error_payloads() {
    let done = with_payload(3, 2, 5, 9, &[0xea, 0xff]);
    assert_eq!(
        decode_kernel_datagram(&done, 4),
        [Err(NetlinkError::Frame(FrameError::ShortDone {
            offset: 0,
            len: 2
        }))]
    );
    let err = with_payload(2, 0, 5, 9, &[0xea, 0xff, 0xff]);
    assert_eq!(
        frames(&err).collect::<Vec<_>>(),
        [Err(FrameError::ShortError { offset: 0, len: 3 })]
    );
}

/// A bad message does not stop the datagram; a framing error does.
#[test]
fn datagram_error_policy() {
    let good = kernel_bytes(&kernel_samples()[6]);
    let bad = hello_raw(&[]);
    let mut d = good.clone();
    d.extend(&bad);
    d.extend(&good);
    d.extend([1, 2, 3]);
    d.extend(&good);
    let got = decode_kernel_datagram(&d, 4);
    assert_eq!(got.len(), 4);
    assert!(got[0].is_ok() && got[2].is_ok());
    assert_eq!(got[1], Err(NetlinkError::MissingAttr { op: 8, attr: 1 }));
    // Three stray bytes shift the next header: its length field is garbage.
    assert_eq!(
        got[3],
        Err(NetlinkError::Frame(FrameError::LenBeyondData {
            offset: 64,
            len: u32::from_ne_bytes([1, 2, 3, 24]),
            available: 27
        }))
    );
}

// ---- attribute walking ----------------------------------------------------------------

#[test]
fn truncated_attribute_header() {
    // A valid HELLO attribute, then 2 stray bytes.
    let b = hello_raw(&[6, 0, 1, 0, 4, 0, 0, 0, 8, 0]);
    let e = NetlinkError::AttrHeaderTruncated {
        op: 8,
        offset: 8,
        remaining: 2,
    };
    assert_eq!(as_kernel(&b, 4), Err(e));
    assert_eq!(as_daemon(&b), Err(e));
}

#[test]
fn truncated_attribute_payload() {
    // An address attribute cut short by the message end.
    let good = kernel_bytes(&kernel_samples()[1]);
    let (h, p) = single(&good);
    let cut = with_payload(h.ty, h.flags, h.seq, h.pid, &p[..8 + 100]);
    assert_eq!(
        as_kernel(&cut, 4),
        Err(NetlinkError::AttrOverrun {
            op: 1,
            offset: 8,
            nla_len: 132,
            remaining: 100
        })
    );
}

#[test]
fn nla_len_below_header() {
    for nla_len in [0u16, 3] {
        let mut p = nla_len.to_ne_bytes().to_vec();
        p.extend([1, 0, 4, 0, 0, 0]);
        let b = hello_raw(&p);
        assert_eq!(
            as_daemon(&b),
            Err(NetlinkError::AttrLenInvalid {
                op: 8,
                offset: 0,
                nla_len
            })
        );
    }
}

#[test]
fn overrunning_attribute() {
    // HELLO whose only attribute claims 12 bytes in an 8-byte payload.
    let b = hello_raw(&[12, 0, 1, 0, 4, 0, 0, 0]);
    assert_eq!(
        as_kernel(&b, 4),
        Err(NetlinkError::AttrOverrun {
            op: 8,
            offset: 0,
            nla_len: 12,
            remaining: 8
        })
    );
}

/// Attributes packed without padding: the next header is read at the aligned offset, lands
/// inside the real one and overruns.
#[test]
fn misaligned_attribute() {
    let p = [
        6, 0, 1, 0, 4, 0, /* next, unpadded: */ 6, 0, 7, 0, 1, 0,
    ];
    assert_eq!(
        as_kernel(&hello_raw(&p), 4),
        Err(NetlinkError::AttrOverrun {
            op: 8,
            offset: 8,
            nla_len: 7,
            remaining: 4
        })
    );
}

/// The last attribute may lack its padding (the kernel and libnl accept that too).
#[test]
fn missing_final_padding_is_accepted() {
    let b = hello_raw(&[6, 0, 1, 0, 3, 0]);
    assert!(matches!(
        as_kernel(&b, 4),
        Ok((_, KernelMsg::Hello(Hello { abi_version: 3, .. })))
    ));
}

// ---- value checks ---------------------------------------------------------------------

#[test]
fn short_sockaddr() {
    let add = kernel_bytes(&kernel_samples()[1]);
    let short = rewrite(&add, |a| a[1].1.truncate(SOCKADDR_STORAGE_SIZE - 1));
    assert_eq!(
        as_kernel(&short, 4),
        Err(NetlinkError::AttrTooShort {
            op: 1,
            attr: 2,
            len: 127,
            min: 128
        })
    );
    let reply = daemon_bytes(&daemon_samples()[2]);
    let short = rewrite(&reply, |a| a[4].1.truncate(16));
    assert_eq!(
        as_daemon(&short),
        Err(NetlinkError::AttrTooShort {
            op: 2,
            attr: 5,
            len: 16,
            min: 128
        })
    );
    // Longer is accepted; the first 128 bytes are the address.
    let long = rewrite(&add, |a| a[1].1.extend([0xee; 8]));
    let Ok((_, KernelMsg::AddMapping(m))) = as_kernel(&long, 4) else {
        panic!("long sockaddr rejected")
    };
    assert_eq!(m.addr, sa("192.0.2.10:20000"));
}

#[test]
fn short_integers() {
    // u32 with 3 bytes (kernel side: ADD SEQ; daemon side: MAPINFO_NUM ACK_NUM).
    let add = kernel_bytes(&kernel_samples()[1]);
    assert_eq!(
        as_kernel(&rewrite(&add, |a| a[0].1.truncate(3)), 4),
        Err(NetlinkError::AttrTooShort {
            op: 1,
            attr: 1,
            len: 3,
            min: 4
        })
    );
    let num = daemon_bytes(&daemon_samples()[6]);
    assert_eq!(
        as_daemon(&rewrite(&num, |a| a[2].1.truncate(0))),
        Err(NetlinkError::AttrTooShort {
            op: 7,
            attr: 3,
            len: 0,
            min: 4
        })
    );
    // u16 with 1 byte (HELLO both ways, HANDLE_ERR code).
    let b = hello_raw(&[5, 0, 1, 0, 4, 0, 0, 0]);
    let e = NetlinkError::AttrTooShort {
        op: 8,
        attr: 1,
        len: 1,
        min: 2,
    };
    assert_eq!(as_kernel(&b, 4), Err(e));
    assert_eq!(as_daemon(&b), Err(e));
    let herr = daemon_bytes(&daemon_samples()[4]);
    assert_eq!(
        as_daemon(&rewrite(&herr, |a| a[1].1.truncate(1))),
        Err(NetlinkError::AttrTooShort {
            op: 5,
            attr: 2,
            len: 1,
            min: 2
        })
    );
}

#[test]
fn unterminated_strings() {
    // Daemon side (libnl): the last byte must be NUL.
    let reg = kernel_bytes(&kernel_samples()[0]);
    let e = NetlinkError::StringNotTerminated { op: 0, attr: 3 };
    assert_eq!(
        as_kernel(&rewrite(&reg, |a| a[2].1 = b"siw0".to_vec()), 4),
        Err(e)
    );
    assert_eq!(
        as_kernel(&rewrite(&reg, |a| a[2].1 = b"siw0\0x".to_vec()), 4),
        Err(e)
    );
    // Kernel side: a NUL within the first 32 bytes; garbage after it is tolerated.
    let reply = daemon_bytes(&daemon_samples()[0]);
    assert_eq!(
        as_daemon(&rewrite(&reply, |a| a[1].1 = b"siw0".to_vec())),
        Err(NetlinkError::StringNotTerminated { op: 0, attr: 2 })
    );
    assert_eq!(
        as_daemon(&rewrite(&reply, |a| a[2].1 = vec![b'u'; 40])),
        Err(NetlinkError::StringNotTerminated { op: 0, attr: 3 })
    );
    assert!(as_daemon(&rewrite(&reply, |a| a[1].1 = b"siw0\0x".to_vec())).is_ok());
}

#[test]
fn strings_too_long() {
    // Daemon side: IF_NAME at most 16 bytes, IBDEV/ULIB at most 32.
    let reg = kernel_bytes(&kernel_samples()[0]);
    assert_eq!(
        as_kernel(
            &rewrite(&reg, |a| a[1].1 = NlString::padded("eth0", 17).0),
            4
        ),
        Err(NetlinkError::StringTooLong {
            op: 0,
            attr: 2,
            len: 17,
            max: 16
        })
    );
    assert_eq!(
        as_kernel(&rewrite(&reg, |a| a[3].1 = NlString::padded(ULIB, 33).0), 4),
        Err(NetlinkError::StringTooLong {
            op: 0,
            attr: 4,
            len: 33,
            max: 32
        })
    );
    // Kernel side: at most 31 characters once one trailing NUL is dropped.
    let mapinfo = daemon_bytes(&daemon_samples()[5]);
    assert_eq!(
        as_daemon(&rewrite(&mapinfo, |a| a[0].1 = NlString::padded(ULIB, 33).0)),
        Err(NetlinkError::StringTooLong {
            op: 6,
            attr: 1,
            len: 32,
            max: 31
        })
    );
    let thirty_two = NlString::new(&"d".repeat(32));
    let reply = daemon_bytes(&daemon_samples()[0]);
    assert_eq!(
        as_daemon(&rewrite(&reply, |a| a[1].1 = thirty_two.0.clone())),
        Err(NetlinkError::StringNotTerminated { op: 0, attr: 2 })
    );
    let thirty_one = NlString::new(&"d".repeat(31));
    assert!(as_daemon(&rewrite(&reply, |a| a[1].1 = thirty_one.0.clone())).is_ok());
}

#[test]
fn empty_strings() {
    let reg = kernel_bytes(&kernel_samples()[0]);
    assert_eq!(
        as_kernel(&rewrite(&reg, |a| a[1].1.clear()), 4),
        Err(NetlinkError::EmptyString { op: 0, attr: 2 })
    );
    let mapinfo = daemon_bytes(&daemon_samples()[5]);
    assert_eq!(
        as_daemon(&rewrite(&mapinfo, |a| a[0].1.clear())),
        Err(NetlinkError::EmptyString { op: 6, attr: 1 })
    );
    // A lone NUL is a valid (empty) name on both sides.
    assert!(as_kernel(&rewrite(&reg, |a| a[1].1 = vec![0]), 4).is_ok());
    assert!(as_daemon(&rewrite(&mapinfo, |a| a[0].1 = vec![0])).is_ok());
}

// ---- attribute sets -------------------------------------------------------------------

/// Removing any one attribute of any op is `MissingAttr` for exactly that id. FLAGS is
/// mandatory under ABI 4 only; REMOVE never needs it.
#[test]
fn missing_mandatory_attributes() {
    for msg in kernel_samples() {
        let bytes = kernel_bytes(&msg);
        let n = attrs_of(&bytes).len();
        for abi in [3u16, 4] {
            for drop in 0..n {
                let id = attrs_of(&bytes)[drop].0;
                let cut = rewrite(&bytes, |a| {
                    a.remove(drop);
                });
                let flags_id = match msg {
                    KernelMsg::AddMapping(_) | KernelMsg::MapInfo(_) => Some(3),
                    KernelMsg::QueryMapping(_) => Some(4),
                    _ => None,
                };
                if abi == 3 && flags_id == Some(id) {
                    assert!(as_kernel(&cut, abi).is_ok(), "{msg:?} abi 3 without FLAGS");
                } else {
                    assert_eq!(
                        as_kernel(&cut, abi),
                        Err(NetlinkError::MissingAttr {
                            op: msg.op(),
                            attr: id
                        }),
                        "{msg:?} abi {abi} without attr {id}"
                    );
                }
            }
        }
    }
    for msg in daemon_samples() {
        let bytes = daemon_bytes(&msg);
        for (drop, (id, _)) in attrs_of(&bytes).into_iter().enumerate() {
            let cut = rewrite(&bytes, |a| {
                a.remove(drop);
            });
            assert_eq!(
                as_daemon(&cut),
                Err(NetlinkError::MissingAttr {
                    op: msg.op(),
                    attr: id
                }),
                "{msg:?} without attr {id}"
            );
        }
    }
}

/// Value errors are reported before missing attributes, in wire order.
#[test]
fn error_precedence() {
    let reply = daemon_bytes(&daemon_samples()[0]);
    let both = rewrite(&reply, |a| {
        a.remove(0);
        a[3].1.truncate(1);
    });
    assert_eq!(
        as_daemon(&both),
        Err(NetlinkError::AttrTooShort {
            op: 0,
            attr: 5,
            len: 1,
            min: 2
        })
    );
}

#[test]
fn duplicate_attributes() {
    let add = kernel_bytes(&kernel_samples()[1]);
    let dup = rewrite(&add, |a| a.push(a[0].clone()));
    assert_eq!(
        as_kernel(&dup, 4),
        Err(NetlinkError::DuplicateAttr { op: 1, attr: 1 })
    );
    let hello = daemon_bytes(&daemon_samples()[7]);
    let dup = rewrite(&hello, |a| a.push((1, 3u16.to_ne_bytes().to_vec())));
    assert_eq!(
        as_daemon(&dup),
        Err(NetlinkError::DuplicateAttr { op: 8, attr: 1 })
    );
    // Repeated unknown attributes are all kept.
    let dup = rewrite(&hello, |a| {
        a.push((9, vec![1]));
        a.push((9, vec![2]));
    });
    let Ok((_, DaemonMsg::Hello(h))) = as_daemon(&dup) else {
        panic!("rejected")
    };
    assert_eq!(h.unknown.len(), 2);
    // Under ABI 3 a repeated FLAGS is just two unknown attributes.
    let dup = rewrite(&add, |a| a.push(a[2].clone()));
    assert!(as_kernel(&dup, 3).is_ok());
    assert_eq!(
        as_kernel(&dup, 4),
        Err(NetlinkError::DuplicateAttr { op: 1, attr: 3 })
    );
}

// ---- ops and directions ---------------------------------------------------------------

#[test]
fn unknown_ops_and_clients() {
    let payload = [6, 0, 1, 0, 4, 0, 0, 0];
    let header = |ty: u16| NlHeader {
        len: 24,
        ty,
        flags: 1,
        seq: 0,
        pid: 0,
    };
    let decode_k = |ty: u16| decode_kernel_msg(&header(ty), &payload, 4).map(|_| ());
    let decode_d = |ty: u16| decode_daemon_msg(&header(ty), &payload).map(|_| ());
    for op in [9u16, 10, 0x3ff] {
        let ty = (2 << 10) | op;
        assert_eq!(decode_k(ty), Err(NetlinkError::UnknownOp { client: 2, op }));
        assert_eq!(decode_d(ty), Err(NetlinkError::UnknownOp { client: 2, op }));
    }
    for client in [0u8, 1, 4, 5, 63] {
        let ty = (u16::from(client) << 10) | 8;
        assert_eq!(decode_k(ty), Err(NetlinkError::UnknownOp { client, op: 8 }));
    }
    // Legacy client 3: accepted from the kernel, not by the kernel.
    assert!(decode_k((3 << 10) | 8).is_ok());
    assert_eq!(
        decode_d((3 << 10) | 8),
        Err(NetlinkError::UnknownOp { client: 3, op: 8 })
    );
    // Control types handed to the message decoders.
    assert_eq!(
        decode_k(3),
        Err(NetlinkError::UnknownOp { client: 0, op: 3 })
    );
}

#[test]
fn wrong_directions() {
    // REMOTE_INFO and HANDLE_ERR never come from the kernel.
    for msg in &daemon_samples()[3..5] {
        let b = daemon_bytes(msg);
        assert_eq!(
            as_kernel(&b, 4),
            Err(NetlinkError::WrongDirection { op: msg.op() })
        );
        assert!(as_daemon(&b).is_ok());
    }
    // REMOVE_MAPPING never comes from the daemon.
    let b = kernel_bytes(&kernel_samples()[3]);
    assert_eq!(as_daemon(&b), Err(NetlinkError::WrongDirection { op: 3 }));
}

#[test]
fn error_classification() {
    assert!(NetlinkError::MissingAttr { op: 1, attr: 2 }.is_malformed_attrs());
    assert!(NetlinkError::DuplicateAttr { op: 1, attr: 2 }.is_malformed_attrs());
    assert!(!NetlinkError::UnknownOp { client: 2, op: 9 }.is_malformed_attrs());
    assert!(!NetlinkError::WrongDirection { op: 4 }.is_malformed_attrs());
    assert!(
        !NetlinkError::Frame(FrameError::LenTooShort { offset: 0, len: 3 }).is_malformed_attrs()
    );
    // Display is informative and carries no allocation-heavy payload.
    assert_eq!(
        NetlinkError::StringTooLong {
            op: 6,
            attr: 1,
            len: 32,
            max: 31
        }
        .to_string(),
        "op 6: string attribute 1 is 32 bytes, at most 31 allowed"
    );
}
