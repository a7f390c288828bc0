//! What the kernel sends a daemon, built the way the kernel builds it: the header
//! conventions (`iwpm_create_nlmsg`: client `RDMA_NL_IWCM`, `NLM_F_REQUEST`, port id 0),
//! REG_PID's fixed-size padded names, FLAGS only under ABI 4, the MAPINFO replay's
//! records and dump end, and the `NLMSG_DONE` that answers each daemon message.

use crate::consts::{
    IWPM_DEVNAME_SIZE, IWPM_IFNAME_SIZE, IWPM_UABI_VERSION, IWPM_UABI_VERSION_MIN,
    IWPM_ULIBNAME_SIZE, NLM_F_MULTI,
};
use crate::netlink::{
    encode_done, encode_kernel_msg, Envelope, Hello, KernelMsg, ManageMappingRequest,
    MapInfoNumRequest, MapInfoRecord, NlString, QueryMappingRequest, RegPidRequest, DONE_FLAGS,
};
use crate::sockaddr::SockAddrStorage;

/// One request in a datagram of its own, with the kernel's header and sequence number
/// `seq` ([`Envelope::kernel_request`]).
pub fn encode_request(seq: u32, msg: &KernelMsg) -> Vec<u8> {
    let mut out = Vec::new();
    encode_kernel_msg(&Envelope::kernel_request(seq), msg, &mut out);
    out
}

/// REG_PID (`iwpm_register_pid`): the names NUL-padded to their full field sizes
/// (16/32/32 bytes), as the kernel copies them. A stand-in that is not faithful on
/// purpose passes another `ulib_name` than [`IWPM_ULIB_NAME`](crate::consts::IWPM_ULIB_NAME).
pub fn reg_pid(echo_seq: u32, if_name: &str, ibdev_name: &str, ulib_name: &str) -> KernelMsg {
    KernelMsg::RegPid(RegPidRequest {
        echo_seq,
        if_name: NlString::padded(if_name, IWPM_IFNAME_SIZE),
        ibdev_name: NlString::padded(ibdev_name, IWPM_DEVNAME_SIZE),
        ulib_name: NlString::padded(ulib_name, IWPM_ULIBNAME_SIZE),
        unknown: Vec::new(),
    })
}

/// ADD_MAPPING (`iwpm_add_mapping`) for the unmapped local address `addr`.
pub fn add_mapping(echo_seq: u32, addr: SockAddrStorage, flags: Option<u32>) -> KernelMsg {
    KernelMsg::AddMapping(ManageMappingRequest {
        echo_seq,
        addr,
        flags,
        unknown: Vec::new(),
    })
}

/// QUERY_MAPPING (`iwpm_add_and_query_mapping`) for an active connect.
pub fn query_mapping(
    echo_seq: u32,
    local: SockAddrStorage,
    remote: SockAddrStorage,
    flags: Option<u32>,
) -> KernelMsg {
    KernelMsg::QueryMapping(QueryMappingRequest {
        echo_seq,
        local_addr: local,
        remote_addr: remote,
        flags,
        unknown: Vec::new(),
    })
}

/// REMOVE_MAPPING (`iwpm_remove_mapping`): never with FLAGS, in either ABI.
pub fn remove_mapping(echo_seq: u32, addr: SockAddrStorage) -> KernelMsg {
    KernelMsg::RemoveMapping(ManageMappingRequest {
        echo_seq,
        addr,
        flags: None,
        unknown: Vec::new(),
    })
}

/// The FLAGS attribute of ADD, QUERY and a MAPINFO record under the ABI in force: ABI 3
/// has none.
pub fn mapping_flags(abi: u16, flags: u32) -> Option<u32> {
    (abi > IWPM_UABI_VERSION_MIN).then_some(flags)
}

/// The ABI the kernel settles on after a daemon's HELLO: the lower of the two.
pub fn negotiated_abi(daemon_abi: u16) -> u16 {
    daemon_abi.min(IWPM_UABI_VERSION)
}

/// The kernel's answer to a daemon's HELLO (`iwpm_hello_cb`): HELLO with the
/// [`negotiated_abi`].
pub fn hello_reply(daemon_abi: u16) -> KernelMsg {
    KernelMsg::Hello(Hello {
        abi_version: negotiated_abi(daemon_abi),
        unknown: Vec::new(),
    })
}

/// MAPINFO_NUM (`iwpm_send_mapinfo_num`): the number of records a complete replay sent.
/// The SEQ attribute is 0 (the kernel never fills it in).
pub fn mapinfo_num(send_num: u32) -> KernelMsg {
    KernelMsg::MapInfoNum(MapInfoNumRequest {
        seq: 0,
        send_num,
        unknown: Vec::new(),
    })
}

/// Appends one MAPINFO record of a replay: header seq 0, port id 0, `NLM_F_MULTI`. The
/// kernel sends client `RDMA_NL_IWCM`; the model driver also replays as the legacy client.
pub fn encode_mapinfo_record(client: u8, record: MapInfoRecord, out: &mut Vec<u8>) {
    let env = Envelope {
        client,
        flags: NLM_F_MULTI,
        seq: 0,
        pid: 0,
    };
    encode_kernel_msg(&env, &KernelMsg::MapInfo(record), out);
}

/// Appends the payload-less `NLMSG_DONE` that ends each datagram of a MAPINFO replay.
pub fn encode_mapinfo_end(out: &mut Vec<u8>) {
    encode_done(0, 0, DONE_FLAGS, None, out);
}

/// Appends the dump-completion `NLMSG_DONE` that answers each daemon message: its seq and
/// port id, and the handler's return value (`None`: no payload).
pub fn encode_handler_done(seq: u32, pid: u32, result: Option<i32>, out: &mut Vec<u8>) {
    encode_done(seq, pid, DONE_FLAGS, result, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::IWPM_ULIB_NAME;
    use crate::netlink::{decode_kernel_datagram, KernelFrame};

    #[test]
    fn reg_pid_pads_names_to_field_sizes() {
        let KernelMsg::RegPid(m) = reg_pid(7, "lo", "siw0", IWPM_ULIB_NAME) else {
            panic!("not REG_PID");
        };
        assert_eq!(
            (m.if_name.0.len(), m.ibdev_name.0.len(), m.ulib_name.0.len()),
            (16, 32, 32)
        );
        assert_eq!(m.ibdev_name.as_bytes(), b"siw0");
        assert_eq!(m.echo_seq, 7);
    }

    #[test]
    fn abi_3_has_no_flags_and_hello_negotiates_down() {
        assert_eq!(mapping_flags(3, 1), None);
        assert_eq!(mapping_flags(4, 1), Some(1));
        assert_eq!(negotiated_abi(9), IWPM_UABI_VERSION);
        assert_eq!(negotiated_abi(3), 3);
    }

    #[test]
    fn a_request_carries_the_kernel_header() {
        let frames = decode_kernel_datagram(&encode_request(5, &mapinfo_num(2)), IWPM_UABI_VERSION);
        match &frames[..] {
            [Ok(KernelFrame::Msg(env, KernelMsg::MapInfoNum(m)))] => {
                assert_eq!(*env, Envelope::kernel_request(5));
                assert_eq!((m.seq, m.send_num), (0, 2));
            }
            other => panic!("{other:?}"),
        }
    }
}
