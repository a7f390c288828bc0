//! Whole-datagram convenience: frame a received datagram and decode every iwpm message in
//! it, keeping control messages, so a caller handles one list instead of two layers.

use crate::netlink::codec::NetlinkMessage;
use crate::netlink::error::NetlinkError;
use crate::netlink::frame::{frames, Frame, RawFrame};
use crate::netlink::message::{DaemonMsg, KernelMsg};

/// One decoded frame of a datagram received from the kernel.
pub type KernelFrame = Frame<KernelMsg>;

/// One decoded frame of a datagram received from the daemon (a daemon never sends `Done`
/// or `Error`; the kernel skips them).
pub type DaemonFrame = Frame<DaemonMsg>;

impl RawFrame<'_> {
    /// Decodes the message of this frame with its receiver's rules (ABI `abi` where they
    /// depend on it) and copies a control payload, so the result outlives the datagram.
    pub fn decode<M: NetlinkMessage>(&self, abi: u16) -> Result<Frame<M>, NetlinkError> {
        Ok(match *self {
            Frame::Msg(header, payload) => {
                let (env, msg) = M::decode(&header, payload, abi)?;
                Frame::Msg(env, msg)
            }
            Frame::Done { header, result } => Frame::Done { header, result },
            Frame::Error {
                header,
                error,
                request,
            } => Frame::Error {
                header,
                error,
                request,
            },
            Frame::Control { header, payload } => Frame::Control {
                header,
                payload: payload.to_vec(),
            },
        })
    }
}

impl<M: NetlinkMessage> Frame<M> {
    /// Appends this frame to `out`. Control frames keep the header's type, flags, seq and
    /// pid (their length is recomputed); an `Error` is written in its capped form
    /// ([`encode_error`](crate::netlink::encode_error)).
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Frame::Msg(env, msg) = self {
            msg.encode(env, out);
        } else {
            self.encode_control(out);
        }
    }
}

/// Decodes every frame of a datagram with the rules of `M`'s receiver. A message that fails
/// to decode gives an `Err` in its place and the walk goes on (whether to skip the rest is
/// the caller's policy: the C daemon does); a framing error ends the list.
pub fn decode_datagram<M: NetlinkMessage>(
    datagram: &[u8],
    abi: u16,
) -> Vec<Result<Frame<M>, NetlinkError>> {
    frames(datagram).map(|f| f?.decode::<M>(abi)).collect()
}

/// Decodes every frame of a datagram from the kernel with the daemon's rules at ABI `abi`
/// (see [`decode_datagram`]).
pub fn decode_kernel_datagram(datagram: &[u8], abi: u16) -> Vec<Result<KernelFrame, NetlinkError>> {
    decode_datagram(datagram, abi)
}

/// Decodes every frame of a datagram from the daemon with the kernel's rules (see
/// [`decode_datagram`]).
pub fn decode_daemon_datagram(datagram: &[u8]) -> Vec<Result<DaemonFrame, NetlinkError>> {
    // The kernel's rules do not depend on the ABI.
    decode_datagram(datagram, 0)
}
