//! Netlink attributes (in progress).

/// A NUL-terminated string attribute payload, kept byte-exact (including NUL padding).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct NlString(pub Vec<u8>);

/// An attribute this codec does not interpret, kept as received.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawAttr {
    /// `nla_type` as on the wire (flag bits included).
    pub ty: u16,
    /// Payload without padding.
    pub payload: Vec<u8>,
}
