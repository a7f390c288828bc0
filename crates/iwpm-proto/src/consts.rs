//! Protocol constants, named as in the kernel's `rdma_netlink.h` and `iw_portmap.h`.
//!
//! Values come from the kernel's uapi headers (`docs/protocol.md` §3, §4.1 and Appendix A
//! list them); they are frozen ABI and must never change.

/// `NETLINK_RDMA` protocol number for `socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA)`.
pub const NETLINK_RDMA: i32 = 20;

/// Netlink control message: error / acknowledgement (`struct nlmsgerr` payload).
pub const NLMSG_ERROR: u16 = 2;
/// Netlink control message: end of a (dump) multipart sequence.
pub const NLMSG_DONE: u16 = 3;
/// Types below this value are netlink control messages.
pub const NLMSG_MIN_TYPE: u16 = 0x10;

/// Header flag: this is a request. The kernel ignores daemon messages without it.
pub const NLM_F_REQUEST: u16 = 0x1;
/// Header flag: part of a multipart message (MAPINFO records, dump `NLMSG_DONE`).
pub const NLM_F_MULTI: u16 = 0x2;
/// Header flag: ask for an acknowledgement.
pub const NLM_F_ACK: u16 = 0x4;

/// Size of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// Size of `struct nlattr`.
pub const NLA_HDRLEN: usize = 4;
/// Netlink alignment for messages and attributes.
pub const NLA_ALIGNTO: usize = 4;

/// RDMA netlink client index of the iWARP connection manager (the port-mapper client).
pub const RDMA_NL_IWCM: u8 = 2;
/// Reserved client index; legacy `RDMA_NL_C4IW`, only used by ABI-3 daemons.
pub const RDMA_NL_RSVD: u8 = 3;
/// RDMA netlink client index of the local-service (LS) client.
pub const RDMA_NL_LS: u8 = 4;
/// RDMA netlink client index of the device (NLDEV) client.
pub const RDMA_NL_NLDEV: u8 = 5;
/// Number of client indices the kernel knows about.
pub const RDMA_NL_NUM_CLIENTS: u8 = 6;

/// Multicast group on which the kernel sends REG_PID.
pub const RDMA_NL_GROUP_IWPM: u32 = 2;
/// Multicast group of the LS client.
pub const RDMA_NL_GROUP_LS: u32 = 3;
/// Group bitmask the C daemon binds with (legacy group 1 plus group 2).
pub const IWPMD_NL_GROUPS_MASK: u32 = 0b11;

/// Lowest iwpm ABI version a kernel accepts.
pub const IWPM_UABI_VERSION_MIN: u16 = 3;
/// The iwpm ABI version this implementation speaks (adds the FLAGS attributes).
pub const IWPM_UABI_VERSION: u16 = 4;

/// FLAGS bit: the device owns its TCP port (siw); map each address to itself, bind nothing.
pub const IWPM_FLAGS_NO_PORT_MAP: u32 = 1;

/// User library name the kernel requires in REG_PID replies and MAPINFO requests.
pub const IWPM_ULIB_NAME: &str = "iWarpPortMapperUser";
/// Field size of the user library name (`IWPM_ULIBNAME_SIZE`).
pub const IWPM_ULIBNAME_SIZE: usize = 32;
/// Field size of the ib device name (`IWPM_DEVNAME_SIZE`).
pub const IWPM_DEVNAME_SIZE: usize = 32;
/// Field size of the network interface name (`IWPM_IFNAME_SIZE`).
pub const IWPM_IFNAME_SIZE: usize = 16;
/// Size of `struct sockaddr_storage` as carried in address attributes.
pub const SOCKADDR_STORAGE_SIZE: usize = 128;

/// Well-known UDP port of the peer (daemon-to-daemon) protocol.
pub const IWPM_PEER_PORT: u16 = 3935;

/// Linux `AF_INET`.
pub const AF_INET: u16 = 2;
/// Linux `AF_INET6`.
pub const AF_INET6: u16 = 10;

/// Port-mapper operations (`RDMA_NL_IWPM_*`), the low 10 bits of `nlmsg_type`.
pub mod op {
    /// Registration: kernel multicasts, daemon replies.
    pub const RDMA_NL_IWPM_REG_PID: u16 = 0;
    /// Map a local (listening) address.
    pub const RDMA_NL_IWPM_ADD_MAPPING: u16 = 1;
    /// Map a local address and learn the remote peer's mapping ("add and query").
    pub const RDMA_NL_IWPM_QUERY_MAPPING: u16 = 2;
    /// Release a mapping (kernel to daemon, no reply).
    pub const RDMA_NL_IWPM_REMOVE_MAPPING: u16 = 3;
    /// Passive side: tell the kernel about an incoming peer (daemon to kernel).
    pub const RDMA_NL_IWPM_REMOTE_INFO: u16 = 4;
    /// Report failure of a pending kernel request (daemon to kernel).
    pub const RDMA_NL_IWPM_HANDLE_ERR: u16 = 5;
    /// Restart recovery: request (daemon) and records (kernel).
    pub const RDMA_NL_IWPM_MAPINFO: u16 = 6;
    /// Restart recovery: record count (kernel) and acknowledgement (daemon).
    pub const RDMA_NL_IWPM_MAPINFO_NUM: u16 = 7;
    /// ABI negotiation.
    pub const RDMA_NL_IWPM_HELLO: u16 = 8;
    /// Number of iwpm ops; anything at or above is invalid.
    pub const RDMA_NL_IWPM_NUM_OPS: u16 = 9;
}

/// IWPM error codes (`iw_portmap.h`), carried in HANDLE_ERR and in MAPPING_ERR attributes.
pub mod err {
    /// Malformed netlink message.
    pub const IWPM_INVALID_NLMSG_ERR: u16 = 10;
    /// A TCP port could not be reserved.
    pub const IWPM_CREATE_MAPPING_ERR: u16 = 11;
    /// The address collides with an existing mapping.
    pub const IWPM_DUPLICATE_MAPPING_ERR: u16 = 12;
    /// No such mapping (never sent by the C daemon).
    pub const IWPM_UNKNOWN_MAPPING_ERR: u16 = 13;
    /// Bad client device information (never sent by the C daemon).
    pub const IWPM_CLIENT_DEV_INFO_ERR: u16 = 14;
    /// User library name or version mismatch.
    pub const IWPM_USER_LIB_INFO_ERR: u16 = 15;
    /// The remote peer rejected the query (QUERY reply MAPPING_ERR, not HANDLE_ERR).
    pub const IWPM_REMOTE_QUERY_REJECT: u16 = 16;
    /// ABI version mismatch (rdma-core only; not in the kernel enum).
    pub const IWPM_VERSION_MISMATCH_ERR: u16 = 17;
}

/// Attribute ids, positional from 1, one module per attribute set of `rdma_netlink.h`.
pub mod attr {
    /// REG_PID request (kernel to daemon): `IWPM_NLA_REG_*`.
    pub mod reg_pid {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_REG_PID_SEQ: u16 = 1;
        /// Network interface name.
        pub const IWPM_NLA_REG_IF_NAME: u16 = 2;
        /// RDMA device name.
        pub const IWPM_NLA_REG_IBDEV_NAME: u16 = 3;
        /// User library name.
        pub const IWPM_NLA_REG_ULIB_NAME: u16 = 4;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_REG_PID_MAX: u16 = 5;
    }
    /// REG_PID reply (daemon to kernel): `IWPM_NLA_RREG_*`.
    pub mod rreg_pid {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_RREG_PID_SEQ: u16 = 1;
        /// RDMA device name.
        pub const IWPM_NLA_RREG_IBDEV_NAME: u16 = 2;
        /// User library name.
        pub const IWPM_NLA_RREG_ULIB_NAME: u16 = 3;
        /// User library (iwpm ABI) version.
        pub const IWPM_NLA_RREG_ULIB_VER: u16 = 4;
        /// Error code (0 on success).
        pub const IWPM_NLA_RREG_PID_ERR: u16 = 5;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_RREG_PID_MAX: u16 = 6;
    }
    /// ADD_MAPPING / REMOVE_MAPPING request: `IWPM_NLA_MANAGE_*`.
    pub mod manage {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_MANAGE_MAPPING_SEQ: u16 = 1;
        /// Local address.
        pub const IWPM_NLA_MANAGE_ADDR: u16 = 2;
        /// Mapping flags (ABI 4 and later).
        pub const IWPM_NLA_MANAGE_FLAGS: u16 = 3;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_MANAGE_MAPPING_MAX: u16 = 4;
        /// Used by rdma-core for REMOVE_MAPPING (SEQ and ADDR only).
        pub const IWPM_NLA_REMOVE_MAPPING_MAX: u16 = 3;
    }
    /// ADD_MAPPING reply: `IWPM_NLA_RMANAGE_*`.
    pub mod rmanage {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_RMANAGE_MAPPING_SEQ: u16 = 1;
        /// Local address.
        pub const IWPM_NLA_RMANAGE_ADDR: u16 = 2;
        /// Mapped local address.
        pub const IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR: u16 = 3;
        /// Error code (0 on success).
        pub const IWPM_NLA_RMANAGE_MAPPING_ERR: u16 = 4;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_RMANAGE_MAPPING_MAX: u16 = 5;
    }
    /// QUERY_MAPPING request: `IWPM_NLA_QUERY_*`.
    pub mod query {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_QUERY_MAPPING_SEQ: u16 = 1;
        /// Local address.
        pub const IWPM_NLA_QUERY_LOCAL_ADDR: u16 = 2;
        /// Remote address.
        pub const IWPM_NLA_QUERY_REMOTE_ADDR: u16 = 3;
        /// Mapping flags (ABI 4 and later).
        pub const IWPM_NLA_QUERY_FLAGS: u16 = 4;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_QUERY_MAPPING_MAX: u16 = 5;
    }
    /// QUERY_MAPPING reply and REMOTE_INFO: `IWPM_NLA_RQUERY_*`.
    pub mod rquery {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_RQUERY_MAPPING_SEQ: u16 = 1;
        /// Local address.
        pub const IWPM_NLA_RQUERY_LOCAL_ADDR: u16 = 2;
        /// Remote address.
        pub const IWPM_NLA_RQUERY_REMOTE_ADDR: u16 = 3;
        /// Mapped local address.
        pub const IWPM_NLA_RQUERY_MAPPED_LOC_ADDR: u16 = 4;
        /// Mapped remote address.
        pub const IWPM_NLA_RQUERY_MAPPED_REM_ADDR: u16 = 5;
        /// Error code (0 on success).
        pub const IWPM_NLA_RQUERY_MAPPING_ERR: u16 = 6;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_RQUERY_MAPPING_MAX: u16 = 7;
    }
    /// MAPINFO request (daemon to kernel): `IWPM_NLA_MAPINFO_ULIB_*`.
    pub mod mapinfo_req {
        /// User library name.
        pub const IWPM_NLA_MAPINFO_ULIB_NAME: u16 = 1;
        /// User library (iwpm ABI) version.
        pub const IWPM_NLA_MAPINFO_ULIB_VER: u16 = 2;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_MAPINFO_REQ_MAX: u16 = 3;
    }
    /// MAPINFO record (kernel to daemon): `IWPM_NLA_MAPINFO_*`.
    pub mod mapinfo {
        /// Local address.
        pub const IWPM_NLA_MAPINFO_LOCAL_ADDR: u16 = 1;
        /// Mapped address.
        pub const IWPM_NLA_MAPINFO_MAPPED_ADDR: u16 = 2;
        /// Mapping flags (ABI 4 and later).
        pub const IWPM_NLA_MAPINFO_FLAGS: u16 = 3;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_MAPINFO_MAX: u16 = 4;
    }
    /// MAPINFO_NUM (both directions): `IWPM_NLA_MAPINFO_*_NUM`.
    pub mod mapinfo_num {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_MAPINFO_SEQ: u16 = 1;
        /// Records the kernel sent.
        pub const IWPM_NLA_MAPINFO_SEND_NUM: u16 = 2;
        /// Records the daemon accepted.
        pub const IWPM_NLA_MAPINFO_ACK_NUM: u16 = 3;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_MAPINFO_NUM_MAX: u16 = 4;
    }
    /// HANDLE_ERR: `IWPM_NLA_ERR_*`.
    pub mod err {
        /// Sequence number of the request (echoed in its reply).
        pub const IWPM_NLA_ERR_SEQ: u16 = 1;
        /// iwpm error code.
        pub const IWPM_NLA_ERR_CODE: u16 = 2;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_ERR_MAX: u16 = 3;
    }
    /// HELLO: `IWPM_NLA_HELLO_*`.
    pub mod hello {
        /// iwpm ABI version.
        pub const IWPM_NLA_HELLO_ABI_VERSION: u16 = 1;
        /// One past the last attribute id of the set.
        pub const IWPM_NLA_HELLO_MAX: u16 = 2;
    }
}

/// Builds `nlmsg_type` from a client index and an op: `(client << 10) + op`.
pub const fn rdma_nl_get_type(client: u8, op: u16) -> u16 {
    ((client as u16) << 10) + op
}

/// Client index of an `nlmsg_type` (bits 10..15).
pub const fn rdma_nl_get_client(ty: u16) -> u8 {
    (ty >> 10) as u8
}

/// Op of an `nlmsg_type` (bits 0..9).
pub const fn rdma_nl_get_op(ty: u16) -> u16 {
    ty & 0x3ff
}
