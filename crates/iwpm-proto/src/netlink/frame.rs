//! Netlink framing: the 16-byte `nlmsghdr`, splitting a datagram into messages
//! (`NLMSG_OK`/`NLMSG_NEXT`), and the two control messages iwpm sees (`NLMSG_DONE`,
//! `NLMSG_ERROR`).
//!
//! One datagram may hold several messages: the kernel packs MAPINFO records, each batch
//! ended by a payload-less `NLMSG_DONE`. Every message starts at a 4-byte boundary.

use crate::consts::{NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLMSG_MIN_TYPE, NLM_F_MULTI};
use crate::netlink::attr::align;
use crate::netlink::error::FrameError;

/// `NLM_F_CAPPED`: set by the kernel on an `NLMSG_ERROR` that echoes only the request's
/// header, not its payload.
pub const NLM_F_CAPPED: u16 = 0x100;

/// `struct nlmsghdr`, host byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct NlHeader {
    /// `nlmsg_len`: header plus payload, without trailing alignment padding.
    pub len: u32,
    /// `nlmsg_type`: `(client << 10) + op` for iwpm, or a control type (< 0x10).
    pub ty: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid`.
    pub pid: u32,
}

impl NlHeader {
    /// Size of the header on the wire.
    pub const LEN: usize = NLMSG_HDRLEN;

    /// Reads the first 16 bytes; `None` if there are fewer.
    pub fn parse(bytes: &[u8]) -> Option<NlHeader> {
        let b: &[u8; NLMSG_HDRLEN] = bytes.get(..NLMSG_HDRLEN)?.try_into().ok()?;
        Some(NlHeader {
            len: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            ty: u16::from_ne_bytes([b[4], b[5]]),
            flags: u16::from_ne_bytes([b[6], b[7]]),
            seq: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
            pid: u32::from_ne_bytes([b[12], b[13], b[14], b[15]]),
        })
    }

    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; NLMSG_HDRLEN] {
        let mut b = [0u8; NLMSG_HDRLEN];
        b[0..4].copy_from_slice(&self.len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.ty.to_ne_bytes());
        b[6..8].copy_from_slice(&self.flags.to_ne_bytes());
        b[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        b[12..16].copy_from_slice(&self.pid.to_ne_bytes());
        b
    }

    /// RDMA netlink client index (bits 10..15 of the type).
    pub fn client(&self) -> u8 {
        crate::consts::rdma_nl_get_client(self.ty)
    }

    /// iwpm op (bits 0..9 of the type).
    pub fn op(&self) -> u16 {
        crate::consts::rdma_nl_get_op(self.ty)
    }
}

/// What a [`Frame`] carries: the raw bytes of a message ([`RawFrame`]), or a decoded message
/// of one direction ([`KernelFrame`](super::KernelFrame), [`DaemonFrame`](super::DaemonFrame)).
/// One frame type serves all three, so the control variants are written once.
pub trait FrameBody {
    /// What comes with the body: the whole header for raw bytes, the envelope once decoded.
    type Head;
    /// Payload of other control messages: borrowed from the datagram in a raw frame, owned
    /// in a decoded one (so decoded frames outlive the datagram).
    type Control;
}

impl<'a> FrameBody for &'a [u8] {
    type Head = NlHeader;
    type Control = &'a [u8];
}

/// One message of a datagram, classified by type; `M` is the message body (see
/// [`FrameBody`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<M: FrameBody> {
    /// A protocol message (type >= 0x10): for iwpm, `(client << 10) + op`. Raw: the header
    /// and the bytes after it up to `nlmsg_len` (the attributes).
    Msg(M::Head, M),
    /// `NLMSG_DONE`. `result` is the kernel handler's return value (0 or -errno) after each
    /// daemon message; `None` for the payload-less DONE that ends a MAPINFO batch.
    Done {
        /// The header.
        header: NlHeader,
        /// The `int` payload, if any.
        result: Option<i32>,
    },
    /// `NLMSG_ERROR` (`struct nlmsgerr`): the kernel could not dispatch a message.
    Error {
        /// The header (seq and pid are those of the rejected request).
        header: NlHeader,
        /// Negative errno (0 would be an ACK).
        error: i32,
        /// The rejected request's header, when the payload carries it (the kernel always
        /// includes it; anything after it is ignored).
        request: Option<NlHeader>,
    },
    /// Any other control type (< `NLMSG_MIN_TYPE`), e.g. `NLMSG_NOOP`, `NLMSG_OVERRUN`.
    Control {
        /// The header.
        header: NlHeader,
        /// The payload as received.
        payload: M::Control,
    },
}

/// A frame as split from a datagram, its message still undecoded.
pub type RawFrame<'a> = Frame<&'a [u8]>;

impl RawFrame<'_> {
    /// The header of any kind of frame.
    pub fn header(&self) -> &NlHeader {
        match self {
            Frame::Done { header, .. }
            | Frame::Error { header, .. }
            | Frame::Control { header, .. }
            | Frame::Msg(header, _) => header,
        }
    }
}

impl<M: FrameBody> Frame<M> {
    /// Appends a control frame (anything but [`Frame::Msg`], which is the caller's) and
    /// returns true; false for a message. Control frames keep the header's type, flags, seq
    /// and pid (their length is recomputed); an `Error` is written in its capped form
    /// ([`encode_error`]).
    pub(crate) fn encode_control(&self, out: &mut Vec<u8>) -> bool
    where
        M::Control: AsRef<[u8]>,
    {
        match self {
            Frame::Msg(..) => return false,
            Frame::Done { header, result } => {
                encode_done(header.seq, header.pid, header.flags, *result, out)
            }
            Frame::Error {
                header,
                error,
                request,
            } => encode_error(header.seq, header.pid, *error, request.as_ref(), out),
            Frame::Control { header, payload } => push_message(
                header.ty,
                header.flags,
                header.seq,
                header.pid,
                payload.as_ref(),
                out,
            ),
        }
        true
    }
}

/// Splits a datagram into frames with the `NLMSG_OK`/`NLMSG_NEXT` rules.
///
/// Yields `Err` once and stops when the rest cannot be framed: fewer than 16 bytes left
/// (trailing bytes after the last message included), `nlmsg_len` < 16, `nlmsg_len` past the
/// end, or a `NLMSG_DONE`/`NLMSG_ERROR` too short for its payload. A last message whose
/// alignment padding is cut off is accepted, as `NLMSG_NEXT` does.
pub fn frames(datagram: &[u8]) -> Frames<'_> {
    Frames {
        buf: datagram,
        offset: 0,
        done: false,
    }
}

/// Iterator returned by [`frames`].
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    buf: &'a [u8],
    offset: usize,
    done: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<RawFrame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let offset = self.offset;
        let rest = self.buf.get(offset..).unwrap_or_default();
        if rest.is_empty() {
            self.done = true;
            return None;
        }
        let result = split(rest, offset);
        match &result {
            Ok((_, len)) => self.offset = offset + align(*len),
            Err(_) => self.done = true,
        }
        Some(result.map(|(frame, _)| frame))
    }
}

/// Classifies the message at the start of `rest`; returns it and its `nlmsg_len`.
fn split(rest: &[u8], offset: usize) -> Result<(RawFrame<'_>, usize), FrameError> {
    let header = NlHeader::parse(rest).ok_or(FrameError::TruncatedHeader {
        offset,
        available: rest.len(),
    })?;
    let len = header.len as usize;
    if len < NLMSG_HDRLEN {
        return Err(FrameError::LenTooShort {
            offset,
            len: header.len,
        });
    }
    let payload = rest
        .get(NLMSG_HDRLEN..len)
        .ok_or(FrameError::LenBeyondData {
            offset,
            len: header.len,
            available: rest.len(),
        })?;
    let frame = match header.ty {
        NLMSG_DONE => Frame::Done {
            header,
            result: match payload.len() {
                0 => None,
                n => Some(read_i32(payload).ok_or(FrameError::ShortDone { offset, len: n })?),
            },
        },
        NLMSG_ERROR => Frame::Error {
            header,
            error: read_i32(payload).ok_or(FrameError::ShortError {
                offset,
                len: payload.len(),
            })?,
            request: payload.get(4..).and_then(NlHeader::parse),
        },
        ty if ty < NLMSG_MIN_TYPE => Frame::Control { header, payload },
        _ => Frame::Msg(header, payload),
    };
    Ok((frame, len))
}

fn read_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

/// Appends an `NLMSG_DONE`: with `result`, the kernel's dump completion (20 bytes, it sends
/// it with `NLM_F_MULTI`); without, the 16-byte end of a MAPINFO batch (`NLM_F_MULTI`,
/// seq 0).
pub fn encode_done(seq: u32, pid: u32, flags: u16, result: Option<i32>, out: &mut Vec<u8>) {
    let payload = result.map(i32::to_ne_bytes);
    let payload: &[u8] = payload.as_ref().map_or(&[], |p| &p[..]);
    push_message(NLMSG_DONE, flags, seq, pid, payload, out);
}

/// Appends an `NLMSG_ERROR` echoing only the request's header (`NLM_F_CAPPED` set), or
/// with `request` `None` only the 4-byte error code (flags 0; the kernel never sends that
/// form, but [`frames`] accepts it). See [`encode_error_echo`] for the kernel's usual form.
pub fn encode_error(seq: u32, pid: u32, error: i32, request: Option<&NlHeader>, out: &mut Vec<u8>) {
    let mut payload = error.to_ne_bytes().to_vec();
    let flags = match request {
        Some(h) => {
            payload.extend_from_slice(&h.to_bytes());
            NLM_F_CAPPED
        }
        None => 0,
    };
    push_message(NLMSG_ERROR, flags, seq, pid, &payload, out);
}

/// Appends an `NLMSG_ERROR` as the kernel sends it for a rejected message (no
/// `NETLINK_CAP_ACK` on the socket): the error code, then the whole rejected message
/// (`original`, header included), flags 0.
pub fn encode_error_echo(seq: u32, pid: u32, error: i32, original: &[u8], out: &mut Vec<u8>) {
    let mut payload = error.to_ne_bytes().to_vec();
    payload.extend_from_slice(original);
    push_message(NLMSG_ERROR, 0, seq, pid, &payload, out);
}

/// Flags the kernel puts on a dump-completion or MAPINFO `NLMSG_DONE`.
pub const DONE_FLAGS: u16 = NLM_F_MULTI;

/// Appends one message (header + payload), padded to the next 4-byte boundary.
pub(crate) fn push_message(
    ty: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let header = NlHeader {
        len: (NLMSG_HDRLEN + payload.len()) as u32,
        ty,
        flags,
        seq,
        pid,
    };
    let start = out.len();
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(payload);
    out.resize(start + align(NLMSG_HDRLEN + payload.len()), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(len: u32, ty: u16) -> Vec<u8> {
        NlHeader {
            len,
            ty,
            flags: 1,
            seq: 7,
            pid: 9,
        }
        .to_bytes()
        .to_vec()
    }

    #[test]
    fn header_round_trip() {
        let h = NlHeader {
            len: 164,
            ty: 0x0801,
            flags: 1,
            seq: 4,
            pid: 0,
        };
        let b = h.to_bytes();
        assert_eq!(&b[..8], &[0xa4, 0, 0, 0, 0x01, 0x08, 0x01, 0x00]);
        assert_eq!(NlHeader::parse(&b), Some(h));
        assert_eq!((h.client(), h.op()), (2, 1));
        assert_eq!(NlHeader::parse(&b[..15]), None);
    }

    #[test]
    fn done_forms() {
        let mut out = vec![];
        encode_done(3, 113, DONE_FLAGS, Some(-22), &mut out);
        encode_done(0, 113, DONE_FLAGS, None, &mut out);
        assert_eq!(out.len(), 20 + 16);
        let got: Vec<_> = frames(&out).collect();
        assert_eq!(got.len(), 2);
        assert!(
            matches!(got[0], Ok(Frame::Done { result: Some(-22), header }) if header.seq == 3 && header.len == 20)
        );
        assert!(matches!(got[1], Ok(Frame::Done { result: None, header }) if header.len == 16));
    }

    #[test]
    fn error_forms() {
        let req = NlHeader {
            len: 48,
            ty: 0x0c06,
            flags: 1,
            seq: 0,
            pid: 113,
        };
        let mut out = vec![];
        encode_error(0, 113, -22, Some(&req), &mut out);
        encode_error(5, 113, -1, None, &mut out);
        let got: Vec<_> = frames(&out).map(Result::unwrap).collect();
        assert_eq!(
            got[0],
            Frame::Error {
                header: NlHeader {
                    len: 36,
                    ty: NLMSG_ERROR,
                    flags: NLM_F_CAPPED,
                    seq: 0,
                    pid: 113
                },
                error: -22,
                request: Some(req)
            }
        );
        assert!(matches!(
            got[1],
            Frame::Error {
                error: -1,
                request: None,
                ..
            }
        ));
    }

    #[test]
    fn control_and_message() {
        let mut buf = hdr(20, 1);
        buf.extend_from_slice(&[1, 2, 3, 4]);
        buf.extend(hdr(16, 0x0808));
        let got: Vec<_> = frames(&buf).map(Result::unwrap).collect();
        assert!(matches!(
            got[0],
            Frame::Control {
                payload: [1, 2, 3, 4],
                ..
            }
        ));
        assert!(matches!(got[1], Frame::Msg(_, [])));
        assert_eq!(got[1].header().ty, 0x0808);
    }

    #[test]
    fn unaligned_len_skips_padding() {
        // 17-byte message, 3 padding bytes, then a 16-byte one.
        let mut buf = hdr(17, 0x0808);
        buf.extend_from_slice(&[0xaa, 0, 0, 0]);
        buf.extend(hdr(16, 0x0806));
        let got: Vec<_> = frames(&buf).map(Result::unwrap).collect();
        assert!(matches!(got[0], Frame::Msg(_, [0xaa])));
        assert_eq!(got[1].header().ty, 0x0806);
        // Last message without its padding: accepted, then the end.
        let buf = {
            let mut b = hdr(17, 0x0808);
            b.push(0xbb);
            b
        };
        assert_eq!(frames(&buf).count(), 1);
    }

    #[test]
    fn errors_stop_the_walk() {
        let mut buf = hdr(16, 0x0808);
        buf.extend_from_slice(&[0; 5]);
        let got: Vec<_> = frames(&buf).collect();
        assert_eq!(
            got[1],
            Err(FrameError::TruncatedHeader {
                offset: 16,
                available: 5
            })
        );
        assert_eq!(got.len(), 2);
        assert_eq!(
            frames(&hdr(15, 0x0808)).collect::<Vec<_>>(),
            [Err(FrameError::LenTooShort { offset: 0, len: 15 })]
        );
        assert_eq!(
            frames(&hdr(40, 0x0808)).collect::<Vec<_>>(),
            [Err(FrameError::LenBeyondData {
                offset: 0,
                len: 40,
                available: 16
            })]
        );
        let mut short_done = hdr(18, NLMSG_DONE);
        short_done.extend_from_slice(&[0, 0]);
        assert_eq!(
            frames(&short_done).collect::<Vec<_>>(),
            [Err(FrameError::ShortDone { offset: 0, len: 2 })]
        );
        assert_eq!(
            frames(&hdr(16, NLMSG_ERROR)).collect::<Vec<_>>(),
            [Err(FrameError::ShortError { offset: 0, len: 0 })]
        );
        assert_eq!(frames(&[]).count(), 0);
    }
}
