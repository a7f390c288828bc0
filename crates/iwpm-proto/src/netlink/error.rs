//! Typed decode errors: one variant per way a datagram or a message can be malformed, so a
//! caller can map each to its reaction (drop, `HANDLE_ERR` 10, log) without parsing text.

/// A datagram could not be split into netlink messages, or a control message's payload is
/// too short. [`frames`](super::frames) yields one of these and then stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FrameError {
    /// Fewer than 16 bytes (a whole `nlmsghdr`) remain at `offset`.
    #[error("truncated netlink header at offset {offset}: {available} bytes left, need 16")]
    TruncatedHeader {
        /// Byte offset of the message in the datagram.
        offset: usize,
        /// Bytes left from `offset` to the end of the datagram.
        available: usize,
    },
    /// `nlmsg_len` is smaller than the header itself.
    #[error("nlmsg_len {len} at offset {offset} is shorter than the 16-byte header")]
    LenTooShort {
        /// Byte offset of the message in the datagram.
        offset: usize,
        /// The `nlmsg_len` found.
        len: u32,
    },
    /// `nlmsg_len` runs past the end of the datagram (a truncated read, or a bad length).
    #[error("nlmsg_len {len} at offset {offset} runs past the datagram ({available} bytes left)")]
    LenBeyondData {
        /// Byte offset of the message in the datagram.
        offset: usize,
        /// The `nlmsg_len` found.
        len: u32,
        /// Bytes left from `offset` to the end of the datagram.
        available: usize,
    },
    /// `NLMSG_DONE` whose payload is neither empty (end of a MAPINFO batch) nor an `int`.
    #[error("NLMSG_DONE at offset {offset} has a {len}-byte payload (need 0 or at least 4)")]
    ShortDone {
        /// Byte offset of the message in the datagram.
        offset: usize,
        /// Payload length.
        len: usize,
    },
    /// `NLMSG_ERROR` whose payload cannot hold the error code.
    #[error("NLMSG_ERROR at offset {offset} has a {len}-byte payload (need at least 4)")]
    ShortError {
        /// Byte offset of the message in the datagram.
        offset: usize,
        /// Payload length.
        len: usize,
    },
}

/// Why one iwpm message (or the datagram carrying it) was rejected.
///
/// `op` is the iwpm op (`nlmsg_type & 0x3ff`), `attr` the attribute id, `offset` a byte
/// offset inside the message payload (just after the 16-byte header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NetlinkError {
    /// The datagram's framing is broken (see [`FrameError`]).
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Client index or op that the receiving side does not handle (client other than
    /// `RDMA_NL_IWCM`, legacy client 3 on the daemon side, op >= 9, control types).
    #[error("unknown iwpm message: client {client}, op {op}")]
    UnknownOp {
        /// Client index (`nlmsg_type >> 10`).
        client: u8,
        /// Op (`nlmsg_type & 0x3ff`).
        op: u16,
    },
    /// A valid op travelling the wrong way (REMOTE_INFO or HANDLE_ERR from the kernel,
    /// REMOVE_MAPPING from the daemon).
    #[error("iwpm op {op} is never sent in this direction")]
    WrongDirection {
        /// The op.
        op: u16,
    },
    /// A mandatory attribute is absent (both peers treat every attribute as mandatory).
    #[error("op {op}: mandatory attribute {attr} is missing")]
    MissingAttr {
        /// The op.
        op: u16,
        /// Lowest missing attribute id.
        attr: u16,
    },
    /// An integer or address attribute is shorter than its type (u16 2, u32 4,
    /// sockaddr 128 bytes). Longer payloads are accepted, as by the kernel and libnl.
    #[error("op {op}: attribute {attr} has {len} bytes, need at least {min}")]
    AttrTooShort {
        /// The op.
        op: u16,
        /// Attribute id.
        attr: u16,
        /// Payload length found.
        len: usize,
        /// Minimum payload length.
        min: usize,
    },
    /// A string attribute lacks its NUL (daemon side: last byte; kernel side: within the
    /// first 32 bytes).
    #[error("op {op}: string attribute {attr} is not NUL-terminated")]
    StringNotTerminated {
        /// The op.
        op: u16,
        /// Attribute id.
        attr: u16,
    },
    /// A string attribute is longer than the field allows.
    #[error("op {op}: string attribute {attr} is {len} bytes, at most {max} allowed")]
    StringTooLong {
        /// The op.
        op: u16,
        /// Attribute id.
        attr: u16,
        /// Length as the receiving side counts it (daemon side: payload bytes; kernel side:
        /// payload bytes minus one trailing NUL).
        len: usize,
        /// The limit in the same unit.
        max: usize,
    },
    /// A string attribute with an empty payload (not even a NUL).
    #[error("op {op}: string attribute {attr} is empty")]
    EmptyString {
        /// The op.
        op: u16,
        /// Attribute id.
        attr: u16,
    },
    /// A known attribute appears twice. Stricter than libnl and the kernel ("last one
    /// wins"): neither peer ever repeats one, and accepting it would make the decoded value
    /// depend on a rule the reader has to remember.
    #[error("op {op}: attribute {attr} appears more than once")]
    DuplicateAttr {
        /// The op.
        op: u16,
        /// Attribute id.
        attr: u16,
    },
    /// 1 to 3 bytes are left after the last attribute: a partial `nlattr` header.
    #[error("op {op}: {remaining} stray bytes at payload offset {offset}, too short for an attribute header")]
    AttrHeaderTruncated {
        /// The op.
        op: u16,
        /// Payload offset of the stray bytes.
        offset: usize,
        /// How many bytes are left.
        remaining: usize,
    },
    /// `nla_len` is smaller than the 4-byte attribute header.
    #[error("op {op}: attribute at payload offset {offset} has nla_len {nla_len} (< 4)")]
    AttrLenInvalid {
        /// The op.
        op: u16,
        /// Payload offset of the attribute.
        offset: usize,
        /// The `nla_len` found.
        nla_len: u16,
    },
    /// `nla_len` runs past the end of the message.
    #[error("op {op}: attribute at payload offset {offset} has nla_len {nla_len} but only {remaining} bytes remain")]
    AttrOverrun {
        /// The op.
        op: u16,
        /// Payload offset of the attribute.
        offset: usize,
        /// The `nla_len` found.
        nla_len: u16,
        /// Bytes left in the message from `offset`.
        remaining: usize,
    },
}

impl NetlinkError {
    /// True for errors about the attributes of a message whose type was understood: the C
    /// daemon answers those with `HANDLE_ERR` code 10 (`IWPM_INVALID_NLMSG_ERR`), the
    /// kernel with `NLMSG_DONE` -EINVAL. False for framing errors and unknown ops.
    pub fn is_malformed_attrs(&self) -> bool {
        !matches!(
            self,
            NetlinkError::Frame(_)
                | NetlinkError::UnknownOp { .. }
                | NetlinkError::WrongDirection { .. }
        )
    }
}
