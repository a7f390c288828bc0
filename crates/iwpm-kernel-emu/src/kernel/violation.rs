//! Protocol deviations by the daemon, as the emulated kernel sees them.
//!
//! The real kernel tolerates most of these silently (and falls back to unmapped
//! connections), which is exactly why a test must look for them: a test of the daemon
//! asserts that this list stays empty.

use iwpm_proto::netlink::{FrameError, NetlinkError};
use iwpm_proto::sockaddr::SockAddrStorage;

/// Which kernel request a reply was meant for (the kernel side's, shared with the test
/// kit's stand-ins).
pub use iwpm_proto::kernel_side::RequestKind;

/// One deviation from what the kernel requires or what a correct daemon sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A message without `NLM_F_REQUEST`: the kernel drops it unseen.
    MissingRequestFlag {
        /// `nlmsg_type`.
        ty: u16,
        /// `nlmsg_seq`.
        seq: u32,
    },
    /// A netlink control message (type < 0x10, e.g. `NLMSG_DONE`) sent to the kernel.
    ControlMessage {
        /// `nlmsg_type`.
        ty: u16,
    },
    /// The datagram could not be split into messages; the kernel ignores the rest.
    BadFraming(FrameError),
    /// A message the kernel does not dispatch (client other than 2, op >= 9, a
    /// REMOVE_MAPPING from the daemon): answered with `NLMSG_ERROR` -EINVAL.
    Undispatchable {
        /// `nlmsg_type`.
        ty: u16,
    },
    /// Attributes the kernel's parser rejects (missing, too short, bad string): the handler
    /// returns -EINVAL and any pending request is left to time out.
    BadAttributes {
        /// The op.
        op: u16,
        /// Why.
        error: NetlinkError,
    },
    /// `nlmsg_pid` is 0. On HELLO the real kernel would unicast its reply to itself
    /// (a probable self-deadlock); the emulator refuses that send instead.
    ZeroPid {
        /// The op.
        op: u16,
    },
    /// `nlmsg_pid` does not fit the kernel's `int` pid (>= 2^31): stored as negative,
    /// hence "no daemon".
    NegativePid {
        /// The op.
        op: u16,
        /// The header value.
        pid: u32,
    },
    /// A reply's `nlmsg_pid` differs from the pid the daemon announced.
    PidMismatch {
        /// The op.
        op: u16,
        /// The header value.
        pid: u32,
        /// The pid the kernel has stored.
        expected: i32,
    },
    /// A reply whose SEQ attribute matches no request the kernel ever sent.
    UnknownSeq {
        /// The op.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
    },
    /// A reply for a request that already timed out. The real kernel would process it
    /// against freed stack memory (a hazard); the emulator ignores it.
    LateReply {
        /// The op.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
    },
    /// A second reply for a request that was already answered (same hazard as late).
    DuplicateReply {
        /// The op.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
    },
    /// A reply whose op does not match the request its SEQ names (e.g. an ADD reply for a
    /// QUERY). The real kernel would misread the request buffer; the emulator ignores it.
    WrongReplyOp {
        /// The op of the reply.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
        /// What the request was.
        expected: RequestKind,
    },
    /// HANDLE_ERR with code 0 for a pending request: the real kernel would complete it as a
    /// success with uninitialised mapped addresses. The emulator completes it unmapped.
    HandleErrZero {
        /// The ERR_SEQ attribute.
        seq: u32,
    },
    /// REG_PID reply with a device name, library name or version the kernel refuses
    /// (completed with `IWPM_USER_LIB_INFO_ERR`).
    RegPidInfoMismatch {
        /// The request's seq.
        seq: u32,
        /// Device name in the reply.
        ibdev_name: Vec<u8>,
        /// Library name in the reply.
        ulib_name: Vec<u8>,
        /// Version in the reply.
        version: u16,
    },
    /// A REG_PID reply or HELLO that settles on an ABI below 4: FLAGS disappear and siw
    /// mappings are silently skipped.
    DownLevelVersion {
        /// The op.
        op: u16,
        /// The version offered.
        version: u16,
    },
    /// A reply's LOCAL or REMOTE address does not echo the request's (completed with 15).
    AddressNotEchoed {
        /// The op.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
    },
    /// A mapped address of another family than the one it maps (completed with 15, or the
    /// REMOTE_INFO dropped).
    MappedFamilyMismatch {
        /// The op.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
    },
    /// With `IWPM_FLAGS_NO_PORT_MAP` the mapped address must equal the local one.
    NoPortMapNotIdentity {
        /// The op.
        op: u16,
        /// The local address.
        local: SockAddrStorage,
        /// What the daemon returned.
        mapped: SockAddrStorage,
    },
    /// The mapped local IP differs from the local IP (mappings change ports only).
    MappedIpChanged {
        /// The op.
        op: u16,
        /// The local address.
        local: SockAddrStorage,
        /// What the daemon returned.
        mapped: SockAddrStorage,
    },
    /// A MAPPING_ERR / PID_ERR attribute the kernel ignores (anything but 0, and 16 in a
    /// QUERY reply): the daemon meant an error, the kernel took a success.
    IgnoredErrCode {
        /// The op.
        op: u16,
        /// The SEQ attribute.
        seq: u32,
        /// The value.
        err: u16,
    },
    /// MAPINFO request with a wrong library name or a version below 3 (-EINVAL).
    BadMapInfoRequest {
        /// Library name sent.
        ulib_name: Vec<u8>,
        /// Version sent.
        version: u16,
    },
    /// MAPINFO_NUM ack whose ACK_NUM differs from SEND_NUM (the kernel logs "Invalid
    /// mapinfo number").
    MapInfoAckMismatch {
        /// SEND_NUM in the ack.
        sent: u32,
        /// ACK_NUM in the ack.
        acked: u32,
    },
    /// MAPINFO_NUM ack that answers no MAPINFO_NUM the kernel sent (or with another
    /// SEND_NUM).
    UnsolicitedMapInfoNum {
        /// SEND_NUM in the ack.
        send_num: u32,
    },
    /// A datagram from a socket with no address: nothing can be sent back to it.
    UnnamedSender,
}
