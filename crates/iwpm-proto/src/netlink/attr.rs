//! Netlink attributes (`struct nlattr`): the string payload type, the raw catch-all, and
//! the walker/writer the codec builds on.
//!
//! Layout: `nla_len` (u16, header included, padding excluded), `nla_type` (u16), payload,
//! zero padding to a multiple of 4. Both the kernel and libnl always write the padding.

use crate::consts::{NLA_ALIGNTO, NLA_HDRLEN};

/// A string attribute payload, kept byte-exact (including its NUL and any NUL padding).
///
/// The two peers write strings differently: rdma-core writes `strlen + 1` bytes
/// ([`NlString::new`]), the kernel a fixed-size NUL-padded field ([`NlString::padded`]).
/// Keeping the raw bytes makes both round-trip exactly.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct NlString(pub Vec<u8>);

impl NlString {
    /// `s` plus one NUL, as rdma-core's `nla_put_string` writes it.
    pub fn new(s: &str) -> Self {
        let mut v = Vec::with_capacity(s.len() + 1);
        v.extend_from_slice(s.as_bytes());
        v.push(0);
        NlString(v)
    }

    /// `s` NUL-padded to `size` bytes, as the kernel writes its fixed-size name fields.
    /// A string of `size` bytes or more is cut to `size - 1` so that a NUL always ends it
    /// (the kernel refuses such names before sending); `size` 0 gives an empty payload.
    pub fn padded(s: &str, size: usize) -> Self {
        let mut v = vec![0u8; size];
        let n = s.len().min(size.saturating_sub(1));
        v[..n].copy_from_slice(&s.as_bytes()[..n]);
        NlString(v)
    }

    /// The string bytes up to (not including) the first NUL; all bytes if there is none.
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        &self.0[..end]
    }

    /// [`as_bytes`](Self::as_bytes) as text, invalid UTF-8 replaced.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }

    /// The raw payload, NULs included.
    pub fn raw(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for NlString {
    fn from(s: &str) -> Self {
        NlString::new(s)
    }
}

/// An attribute outside the op's set (id 0, an id above the set, a flag-carrying type, or
/// FLAGS under ABI 3), kept as received and re-emitted after the known attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawAttr {
    /// `nla_type` as on the wire (flag bits included).
    pub ty: u16,
    /// Payload without padding.
    pub payload: Vec<u8>,
}

/// Rounds up to the netlink alignment (`NLA_ALIGN`, same as `NLMSG_ALIGN`).
pub(crate) const fn align(len: usize) -> usize {
    (len + NLA_ALIGNTO - 1) & !(NLA_ALIGNTO - 1)
}

/// Appends one attribute with zero padding.
///
/// A payload longer than `u16::MAX - 4` cannot be expressed; it is cut so that `nla_len`
/// stays truthful (no iwpm attribute comes near: the largest is 128 bytes).
pub(crate) fn push_attr(out: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let max = usize::from(u16::MAX) - NLA_HDRLEN;
    let payload = &payload[..payload.len().min(max)];
    let nla_len = (NLA_HDRLEN + payload.len()) as u16;
    out.extend_from_slice(&nla_len.to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len() + align(payload.len()) - payload.len(), 0);
}

/// One attribute as found by [`walk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AttrRef<'a> {
    /// `nla_type` as on the wire.
    pub ty: u16,
    /// Payload without padding.
    pub payload: &'a [u8],
}

/// How an attribute walk failed; the codec adds the op to make a `NetlinkError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// 1..=3 bytes left.
    HeaderTruncated { offset: usize, remaining: usize },
    /// `nla_len` < 4.
    LenInvalid { offset: usize, nla_len: u16 },
    /// `nla_len` beyond the end.
    Overrun {
        offset: usize,
        nla_len: u16,
        remaining: usize,
    },
}

/// Iterates over the attributes of a message payload, in wire order. Stops after the first
/// error. The last attribute may lack its padding (the peers tolerate that too); anything
/// else that does not parse is an error, where the peers would silently ignore the rest.
pub(crate) fn walk(payload: &[u8]) -> Walk<'_> {
    Walk {
        buf: payload,
        offset: 0,
        done: false,
    }
}

/// Iterator returned by [`walk`].
#[derive(Debug)]
pub(crate) struct Walk<'a> {
    buf: &'a [u8],
    offset: usize,
    done: bool,
}

impl<'a> Iterator for Walk<'a> {
    type Item = Result<AttrRef<'a>, WalkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = self.buf.get(self.offset..).unwrap_or_default();
        if rest.is_empty() {
            self.done = true;
            return None;
        }
        let offset = self.offset;
        let fail = |this: &mut Self, e| {
            this.done = true;
            Some(Err(e))
        };
        let (Some(len_bytes), Some(ty_bytes)) = (rest.get(0..2), rest.get(2..4)) else {
            return fail(
                self,
                WalkError::HeaderTruncated {
                    offset,
                    remaining: rest.len(),
                },
            );
        };
        let nla_len = u16::from_ne_bytes([len_bytes[0], len_bytes[1]]);
        let ty = u16::from_ne_bytes([ty_bytes[0], ty_bytes[1]]);
        let len = usize::from(nla_len);
        if len < NLA_HDRLEN {
            return fail(self, WalkError::LenInvalid { offset, nla_len });
        }
        let Some(payload) = rest.get(NLA_HDRLEN..len) else {
            return fail(
                self,
                WalkError::Overrun {
                    offset,
                    nla_len,
                    remaining: rest.len(),
                },
            );
        };
        self.offset = offset + align(len);
        Some(Ok(AttrRef { ty, payload }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_appends_one_nul() {
        assert_eq!(NlString::new("siw0").0, b"siw0\0");
        assert_eq!(NlString::new("").0, b"\0");
    }

    #[test]
    fn padded_fills_and_cuts() {
        let s = NlString::padded("eth0", 16);
        assert_eq!(s.0.len(), 16);
        assert_eq!(&s.0[..5], b"eth0\0");
        assert!(s.0[4..].iter().all(|&b| b == 0));
        let cut = NlString::padded("0123456789abcdefXYZ", 16);
        assert_eq!(&cut.0[..], b"0123456789abcde\0");
        assert!(NlString::padded("x", 0).0.is_empty());
    }

    #[test]
    fn as_bytes_stops_at_first_nul() {
        let s = NlString(b"abc\0def\0".to_vec());
        assert_eq!(s.as_bytes(), b"abc");
        assert_eq!(s.to_string_lossy(), "abc");
        assert_eq!(NlString(b"raw".to_vec()).as_bytes(), b"raw");
        assert_eq!(NlString(vec![0xff, 0]).to_string_lossy(), "\u{fffd}");
    }

    #[test]
    fn push_attr_pads_with_zeros() {
        let mut out = vec![];
        push_attr(&mut out, 2, b"siw0\0");
        assert_eq!(out, [9, 0, 2, 0, b's', b'i', b'w', b'0', 0, 0, 0, 0]);
        push_attr(&mut out, 7, &[]);
        assert_eq!(&out[12..], [4, 0, 7, 0]);
    }

    #[test]
    fn walk_reads_back_what_push_wrote() {
        let mut out = vec![];
        push_attr(&mut out, 1, &5u32.to_ne_bytes());
        push_attr(&mut out, 2, b"ab\0");
        push_attr(&mut out, 0, &[]);
        let got: Vec<_> = walk(&out).map(Result::unwrap).collect();
        assert_eq!(got.len(), 3);
        assert_eq!((got[1].ty, got[1].payload), (2, &b"ab\0"[..]));
        assert_eq!((got[2].ty, got[2].payload), (0, &[][..]));
    }

    #[test]
    fn walk_accepts_missing_final_padding() {
        // nla_len 5, message ends right after the payload byte.
        let buf = [5, 0, 1, 0, 0xaa];
        let got: Vec<_> = walk(&buf).collect();
        assert_eq!(
            got,
            [Ok(AttrRef {
                ty: 1,
                payload: &[0xaa][..]
            })]
        );
    }

    #[test]
    fn walk_errors_then_stops() {
        assert_eq!(
            walk(&[8, 0, 1, 0, 0, 0, 0, 0, 1, 2]).collect::<Vec<_>>()[1],
            Err(WalkError::HeaderTruncated {
                offset: 8,
                remaining: 2
            })
        );
        let mut it = walk(&[3, 0, 1, 0, 9, 9, 9, 9]);
        assert_eq!(
            it.next(),
            Some(Err(WalkError::LenInvalid {
                offset: 0,
                nla_len: 3
            }))
        );
        assert_eq!(it.next(), None);
        assert_eq!(
            walk(&[12, 0, 1, 0, 0, 0]).next(),
            Some(Err(WalkError::Overrun {
                offset: 0,
                nla_len: 12,
                remaining: 6
            }))
        );
    }
}
