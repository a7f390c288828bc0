//! Whole-datagram convenience: frame a received datagram and decode every iwpm message in
//! it, keeping control messages, so a caller handles one list instead of two layers.

use crate::netlink::codec::{
    decode_daemon_msg, decode_kernel_msg, encode_daemon_msg, encode_kernel_msg,
};
use crate::netlink::error::NetlinkError;
use crate::netlink::frame::{encode_done, encode_error, frames, push_message, Frame, NlHeader};
use crate::netlink::message::{DaemonMsg, Envelope, KernelMsg};

/// One decoded frame of a datagram received from the kernel.
// Frames are short-lived; boxing the message would cost an allocation per message and
// make matching clumsier than the size difference is worth.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelFrame {
    /// An iwpm message.
    Msg(Envelope, KernelMsg),
    /// `NLMSG_DONE` (see [`Frame::Done`]).
    Done {
        /// The header.
        header: NlHeader,
        /// Handler result, `None` at the end of a MAPINFO batch.
        result: Option<i32>,
    },
    /// `NLMSG_ERROR` (see [`Frame::Error`]).
    Error {
        /// The header.
        header: NlHeader,
        /// Negative errno.
        error: i32,
        /// The rejected request's header.
        request: Option<NlHeader>,
    },
    /// Another control message (see [`Frame::Control`]).
    Control {
        /// The header.
        header: NlHeader,
        /// The payload.
        payload: Vec<u8>,
    },
}

/// One decoded frame of a datagram received from the daemon.
#[allow(clippy::large_enum_variant)] // as for `KernelFrame`
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonFrame {
    /// An iwpm message.
    Msg(Envelope, DaemonMsg),
    /// `NLMSG_DONE` (a daemon never sends one; the kernel skips it).
    Done {
        /// The header.
        header: NlHeader,
        /// The `int` payload, if any.
        result: Option<i32>,
    },
    /// `NLMSG_ERROR` (a daemon never sends one; the kernel skips it).
    Error {
        /// The header.
        header: NlHeader,
        /// The error code.
        error: i32,
        /// The echoed header, if present.
        request: Option<NlHeader>,
    },
    /// Another control message.
    Control {
        /// The header.
        header: NlHeader,
        /// The payload.
        payload: Vec<u8>,
    },
}

/// Decodes every frame of a datagram from the kernel with the daemon's rules
/// ([`decode_kernel_msg`] at ABI `abi`). A message that fails to decode gives an `Err` in
/// its place and the walk goes on (whether to skip the rest is the caller's policy: the C
/// daemon does); a framing error ends the list.
pub fn decode_kernel_datagram(datagram: &[u8], abi: u16) -> Vec<Result<KernelFrame, NetlinkError>> {
    frames(datagram)
        .map(|f| {
            Ok(match f? {
                Frame::Message { header, payload } => {
                    let (env, msg) = decode_kernel_msg(&header, payload, abi)?;
                    KernelFrame::Msg(env, msg)
                }
                Frame::Done { header, result } => KernelFrame::Done { header, result },
                Frame::Error {
                    header,
                    error,
                    request,
                } => KernelFrame::Error {
                    header,
                    error,
                    request,
                },
                Frame::Control { header, payload } => KernelFrame::Control {
                    header,
                    payload: payload.to_vec(),
                },
            })
        })
        .collect()
}

/// Decodes every frame of a datagram from the daemon with the kernel's rules
/// ([`decode_daemon_msg`]); same error policy as [`decode_kernel_datagram`].
pub fn decode_daemon_datagram(datagram: &[u8]) -> Vec<Result<DaemonFrame, NetlinkError>> {
    frames(datagram)
        .map(|f| {
            Ok(match f? {
                Frame::Message { header, payload } => {
                    let (env, msg) = decode_daemon_msg(&header, payload)?;
                    DaemonFrame::Msg(env, msg)
                }
                Frame::Done { header, result } => DaemonFrame::Done { header, result },
                Frame::Error {
                    header,
                    error,
                    request,
                } => DaemonFrame::Error {
                    header,
                    error,
                    request,
                },
                Frame::Control { header, payload } => DaemonFrame::Control {
                    header,
                    payload: payload.to_vec(),
                },
            })
        })
        .collect()
}

impl KernelFrame {
    /// Appends this frame to `out`. Control frames keep the header's type, flags, seq and
    /// pid (their length is recomputed); an `Error` is written in its capped form
    /// ([`encode_error`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            KernelFrame::Msg(env, msg) => encode_kernel_msg(env, msg, out),
            KernelFrame::Done { header, result } => encode_done_frame(header, *result, out),
            KernelFrame::Error {
                header,
                error,
                request,
            } => encode_error_frame(header, *error, request.as_ref(), out),
            KernelFrame::Control { header, payload } => encode_control_frame(header, payload, out),
        }
    }
}

impl DaemonFrame {
    /// Appends this frame to `out` (same conventions as [`KernelFrame::encode`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            DaemonFrame::Msg(env, msg) => encode_daemon_msg(env, msg, out),
            DaemonFrame::Done { header, result } => encode_done_frame(header, *result, out),
            DaemonFrame::Error {
                header,
                error,
                request,
            } => encode_error_frame(header, *error, request.as_ref(), out),
            DaemonFrame::Control { header, payload } => encode_control_frame(header, payload, out),
        }
    }
}

/// The control-frame encodings both directions share.
fn encode_done_frame(header: &NlHeader, result: Option<i32>, out: &mut Vec<u8>) {
    encode_done(header.seq, header.pid, header.flags, result, out);
}

fn encode_error_frame(
    header: &NlHeader,
    error: i32,
    request: Option<&NlHeader>,
    out: &mut Vec<u8>,
) {
    encode_error(header.seq, header.pid, error, request, out);
}

fn encode_control_frame(header: &NlHeader, payload: &[u8], out: &mut Vec<u8>) {
    push_message(
        header.ty,
        header.flags,
        header.seq,
        header.pid,
        payload,
        out,
    );
}
