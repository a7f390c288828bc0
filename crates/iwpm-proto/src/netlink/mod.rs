//! Netlink framing and the iwpm message codec (`NETLINK_RDMA`, client `RDMA_NL_IWCM`,
//! ABI 3 and 4).
//!
//! Hand-written rather than built on a netlink crate: the protocol is tiny and frozen (nine
//! ops, four value types, one 128-byte sockaddr), callers need matchable errors to choose
//! between `HANDLE_ERR` codes and silent drops (the netlink crates report `String`s), it has
//! no dependencies to churn, and a zero-dependency codec is cheap to fuzz and to share with
//! the kernel emulator. `docs/protocol.md` specifies the wire format.
//!
//! Layers, bottom up (private modules; everything public is re-exported here, once):
//! * `attr`: string payloads ([`NlString`]) and unknown attributes ([`RawAttr`]);
//! * `frame`: `nlmsghdr`, datagram splitting ([`frames`]), `NLMSG_DONE`/`NLMSG_ERROR`, and
//!   the one [`Frame`] type for raw and decoded frames;
//! * `message`: one typed struct per op and direction;
//! * `codec`: typed decode with the receiving side's acceptance rules, and encode
//!   ([`NetlinkMessage`] names both for either direction);
//! * `datagram`: both at once for a whole received datagram ([`decode_datagram`]).
//!
//! Byte order is the host's (the kernel ABI); only ports and IPs inside sockaddrs are
//! big-endian, and those stay raw in [`SockAddrStorage`](crate::sockaddr::SockAddrStorage).
mod attr;
mod codec;
mod datagram;
mod error;
mod frame;
mod message;

pub use attr::{NlString, RawAttr};
pub use codec::{
    decode_daemon_msg, decode_kernel_msg, encode_daemon_msg, encode_kernel_msg, NetlinkMessage,
};
pub use datagram::{
    decode_daemon_datagram, decode_datagram, decode_kernel_datagram, DaemonFrame, KernelFrame,
};
pub use error::{FrameError, NetlinkError};
pub use frame::{
    encode_done, encode_error, encode_error_echo, frames, Frame, FrameBody, Frames, NlHeader,
    RawFrame, DONE_FLAGS, NLM_F_CAPPED,
};
pub use message::{
    AddMappingReply, DaemonMsg, Envelope, HandleErr, Hello, KernelMsg, ManageMappingRequest,
    MapInfoNumReply, MapInfoNumRequest, MapInfoRecord, MapInfoRequest, QueryMappingReply,
    QueryMappingRequest, RegPidReply, RegPidRequest,
};
