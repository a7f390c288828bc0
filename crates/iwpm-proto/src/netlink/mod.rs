//! Netlink framing and the iwpm message codec (`NETLINK_RDMA`, client `RDMA_NL_IWCM`,
//! ABI 3 and 4).
//!
//! Hand-written rather than built on a netlink crate: the protocol is tiny and frozen (nine
//! ops, four value types, one 128-byte sockaddr), callers need matchable errors to choose
//! between `HANDLE_ERR` codes and silent drops (the netlink crates report `String`s), it has
//! no dependencies to churn, and a zero-dependency codec is cheap to fuzz and to share with
//! the kernel emulator. `docs/protocol.md` specifies the wire format.
//!
//! Layers, bottom up:
//! * [`attr`]: string payloads ([`NlString`]) and unknown attributes ([`RawAttr`]);
//! * [`frame`]: `nlmsghdr`, datagram splitting ([`frames`]), `NLMSG_DONE`/`NLMSG_ERROR`;
//! * [`message`]: one typed struct per op and direction;
//! * [`codec`]: typed decode with the receiving side's acceptance rules, and encode;
//! * [`datagram`]: both at once for a whole received datagram.
//!
//! Byte order is the host's (the kernel ABI); only ports and IPs inside sockaddrs are
//! big-endian, and those stay raw in [`SockAddrStorage`](crate::sockaddr::SockAddrStorage).
pub mod attr;
pub mod codec;
pub mod datagram;
pub mod error;
pub mod frame;
pub mod message;

pub use attr::{NlString, RawAttr};
pub use codec::{decode_daemon_msg, decode_kernel_msg, encode_daemon_msg, encode_kernel_msg};
pub use datagram::{decode_daemon_datagram, decode_kernel_datagram, DaemonFrame, KernelFrame};
pub use error::{FrameError, NetlinkError};
pub use frame::{
    encode_done, encode_error, encode_error_echo, frames, Frame, Frames, NlHeader, DONE_FLAGS,
    NLM_F_CAPPED,
};
pub use message::{
    AddMappingReply, DaemonMsg, Envelope, HandleErr, Hello, KernelMsg, ManageMappingRequest,
    MapInfoNumReply, MapInfoNumRequest, MapInfoRecord, MapInfoRequest, QueryMappingReply,
    QueryMappingRequest, RegPidReply, RegPidRequest,
};
