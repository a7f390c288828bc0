//! Proptest strategies for every typed netlink message of the iwpm protocol, both
//! directions, and for the netlink control frames (DONE, ERROR).

use iwpm_proto::netlink::*;
use iwpm_proto::sockaddr::SockAddrStorage;
use proptest::collection::vec;
use proptest::prelude::*;

/// Canonical IPv4/IPv6 addresses and arbitrary 128-byte blocks.
pub fn sockaddr() -> impl Strategy<Value = SockAddrStorage> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SockAddrStorage::from_socket_addr(
            (std::net::Ipv4Addr::from(ip), port).into()
        )),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SockAddrStorage::from_socket_addr(
            (std::net::Ipv6Addr::from(ip), port).into()
        )),
        vec(any::<u8>(), 128).prop_map(|v| SockAddrStorage(v.try_into().expect("128 bytes"))),
    ]
}

/// A string both receivers accept in a `max`-byte field: up to `max - 1` non-NUL bytes,
/// then 1 or more NULs, `max` bytes at most (covers `strlen + 1` and NUL-padded forms).
pub fn nl_string(max: usize) -> impl Strategy<Value = NlString> {
    vec(1u8..=255, 0..max).prop_flat_map(move |text| {
        let room = max - text.len();
        (Just(text), 1..=room).prop_map(|(mut text, nuls)| {
            text.resize(text.len() + nuls, 0);
            NlString(text)
        })
    })
}

/// Attributes outside a set whose first free id is `first_free` (id 0 included).
pub fn unknown(first_free: u16) -> impl Strategy<Value = Vec<RawAttr>> {
    vec(
        (
            prop_oneof![Just(0u16), first_free..=u16::MAX],
            vec(any::<u8>(), 0..24),
        )
            .prop_map(|(ty, payload)| RawAttr { ty, payload }),
        0..3,
    )
}

/// Envelope with a client the given side accepts.
pub fn envelope(clients: &'static [u8]) -> impl Strategy<Value = Envelope> {
    (
        proptest::sample::select(clients),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(client, flags, seq, pid)| Envelope {
            client,
            flags,
            seq,
            pid,
        })
}

/// FLAGS as the kernel sends it for `abi`: present from ABI 4 on.
fn flags(abi: u16) -> BoxedStrategy<Option<u32>> {
    if abi >= 4 {
        any::<u32>().prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    }
}

/// Every [`KernelMsg`] variant as the kernel would send it under `abi`.
pub fn kernel_msg(abi: u16) -> BoxedStrategy<KernelMsg> {
    let v4 = u16::from(abi >= 4);
    prop_oneof![
        (
            any::<u32>(),
            nl_string(16),
            nl_string(32),
            nl_string(32),
            unknown(5)
        )
            .prop_map(|(echo_seq, if_name, ibdev_name, ulib_name, unknown)| {
                KernelMsg::RegPid(RegPidRequest {
                    echo_seq,
                    if_name,
                    ibdev_name,
                    ulib_name,
                    unknown,
                })
            }),
        (any::<u32>(), sockaddr(), flags(abi), unknown(3 + v4)).prop_map(
            |(echo_seq, addr, flags, unknown)| KernelMsg::AddMapping(ManageMappingRequest {
                echo_seq,
                addr,
                flags,
                unknown
            })
        ),
        (
            any::<u32>(),
            sockaddr(),
            sockaddr(),
            flags(abi),
            unknown(4 + v4)
        )
            .prop_map(|(echo_seq, local_addr, remote_addr, flags, unknown)| {
                KernelMsg::QueryMapping(QueryMappingRequest {
                    echo_seq,
                    local_addr,
                    remote_addr,
                    flags,
                    unknown,
                })
            }),
        (any::<u32>(), sockaddr(), unknown(3)).prop_map(|(echo_seq, addr, unknown)| {
            KernelMsg::RemoveMapping(ManageMappingRequest {
                echo_seq,
                addr,
                flags: None,
                unknown,
            })
        }),
        (sockaddr(), sockaddr(), flags(abi), unknown(3 + v4)).prop_map(
            |(local_addr, mapped_addr, flags, unknown)| KernelMsg::MapInfo(MapInfoRecord {
                local_addr,
                mapped_addr,
                flags,
                unknown
            })
        ),
        (any::<u32>(), any::<u32>(), unknown(3)).prop_map(|(seq, send_num, unknown)| {
            KernelMsg::MapInfoNum(MapInfoNumRequest {
                seq,
                send_num,
                unknown,
            })
        }),
        (any::<u16>(), unknown(2)).prop_map(|(abi_version, unknown)| KernelMsg::Hello(Hello {
            abi_version,
            unknown
        })),
    ]
    .boxed()
}

fn query_reply() -> impl Strategy<Value = QueryMappingReply> {
    (
        any::<u32>(),
        (sockaddr(), sockaddr(), sockaddr(), sockaddr()),
        any::<u16>(),
        unknown(7),
    )
        .prop_map(|(seq, (l, r, ml, mr), err, unknown)| QueryMappingReply {
            seq,
            local_addr: l,
            remote_addr: r,
            mapped_local_addr: ml,
            mapped_remote_addr: mr,
            err,
            unknown,
        })
}

/// Every [`DaemonMsg`] variant, with strings the kernel accepts.
pub fn daemon_msg() -> BoxedStrategy<DaemonMsg> {
    prop_oneof![
        (
            any::<u32>(),
            nl_string(32),
            nl_string(32),
            any::<u16>(),
            any::<u16>(),
            unknown(6)
        )
            .prop_map(|(seq, ibdev_name, ulib_name, ulib_version, err, unknown)| {
                DaemonMsg::RegPid(RegPidReply {
                    seq,
                    ibdev_name,
                    ulib_name,
                    ulib_version,
                    err,
                    unknown,
                })
            }),
        (
            any::<u32>(),
            sockaddr(),
            sockaddr(),
            any::<u16>(),
            unknown(5)
        )
            .prop_map(
                |(seq, addr, mapped_addr, err, unknown)| DaemonMsg::AddMapping(AddMappingReply {
                    seq,
                    addr,
                    mapped_addr,
                    err,
                    unknown
                })
            ),
        query_reply().prop_map(DaemonMsg::QueryMapping),
        query_reply().prop_map(DaemonMsg::RemoteInfo),
        (any::<u32>(), any::<u16>(), unknown(3)).prop_map(|(seq, code, unknown)| {
            DaemonMsg::HandleErr(HandleErr { seq, code, unknown })
        }),
        (nl_string(32), any::<u16>(), unknown(3)).prop_map(|(ulib_name, ulib_version, unknown)| {
            DaemonMsg::MapInfo(MapInfoRequest {
                ulib_name,
                ulib_version,
                unknown,
            })
        }),
        (any::<u32>(), any::<u32>(), any::<u32>(), unknown(4)).prop_map(
            |(seq, send_num, ack_num, unknown)| DaemonMsg::MapInfoNum(MapInfoNumReply {
                seq,
                send_num,
                ack_num,
                unknown
            })
        ),
        (any::<u16>(), unknown(2)).prop_map(|(abi_version, unknown)| DaemonMsg::Hello(Hello {
            abi_version,
            unknown
        })),
    ]
    .boxed()
}

fn any_header() -> impl Strategy<Value = NlHeader> {
    (
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(len, ty, flags, seq, pid)| NlHeader {
            len,
            ty,
            flags,
            seq,
            pid,
        })
}

/// Control frames as `frames` reports them after encoding (lengths and the capped
/// error's flags filled in): DONE with and without result, capped ERROR, NOOP/OVERRUN.
pub fn control_frame() -> impl Strategy<Value = (NlHeader, ControlBody)> {
    let base = (any::<u16>(), any::<u32>(), any::<u32>());
    prop_oneof![
        (base, proptest::option::of(any::<i32>())).prop_map(|((flags, seq, pid), r)| (
            NlHeader {
                len: if r.is_some() { 20 } else { 16 },
                ty: 3,
                flags,
                seq,
                pid
            },
            ControlBody::Done(r)
        )),
        (base, any::<i32>(), proptest::option::of(any_header())).prop_map(
            |((_, seq, pid), error, request)| (
                NlHeader {
                    len: if request.is_some() { 36 } else { 20 },
                    ty: 2,
                    flags: if request.is_some() { NLM_F_CAPPED } else { 0 },
                    seq,
                    pid
                },
                ControlBody::Error(error, request)
            )
        ),
        (
            base,
            prop_oneof![Just(1u16), 4u16..16],
            vec(any::<u8>(), 0..12)
        )
            .prop_map(|((flags, seq, pid), ty, payload)| (
                NlHeader {
                    len: 16 + payload.len() as u32,
                    ty,
                    flags,
                    seq,
                    pid
                },
                ControlBody::Other(payload)
            )),
    ]
}

/// Body of a control frame from [`control_frame`].
#[derive(Clone, Debug)]
pub enum ControlBody {
    Done(Option<i32>),
    Error(i32, Option<NlHeader>),
    Other(Vec<u8>),
}

impl ControlBody {
    pub fn kernel_frame(&self, header: NlHeader) -> KernelFrame {
        match self.clone() {
            ControlBody::Done(result) => KernelFrame::Done { header, result },
            ControlBody::Error(error, request) => KernelFrame::Error {
                header,
                error,
                request,
            },
            ControlBody::Other(payload) => KernelFrame::Control { header, payload },
        }
    }

    pub fn daemon_frame(&self, header: NlHeader) -> DaemonFrame {
        match self.clone() {
            ControlBody::Done(result) => DaemonFrame::Done { header, result },
            ControlBody::Error(error, request) => DaemonFrame::Error {
                header,
                error,
                request,
            },
            ControlBody::Other(payload) => DaemonFrame::Control { header, payload },
        }
    }
}
