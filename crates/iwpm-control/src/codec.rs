//! Framing, without IO: a frame is a 4-byte big-endian length `n` followed by `n` bytes
//! of UTF-8 JSON (one [`Request`] or [`Response`]). The length is checked against the
//! receiver's limit before anything is buffered beyond it, so a hostile peer cannot make
//! either side allocate more than the limit; a frame of length 0 is an error.
//!
//! [`FrameDecoder`] takes bytes as they arrive (any split) and yields whole frames;
//! [`decode_request`] checks the version before the command, so a client of another
//! version gets [`CodecError::Version`] rather than a parse error about a command it may
//! legitimately have.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::proto::{Request, Response, PROTOCOL_VERSION};

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;
/// Largest request body the daemon accepts.
pub const MAX_REQUEST_LEN: usize = 16 * 1024;
/// Largest response body the client accepts (a full table of 100 000 mappings fits).
pub const MAX_RESPONSE_LEN: usize = 256 * 1024 * 1024;

/// What went wrong with a frame.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The length prefix exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A frame of length 0.
    #[error("empty frame")]
    Empty,
    /// The body is not the expected JSON.
    #[error("malformed message: {0}")]
    Json(String),
    /// The body is of another protocol version.
    #[error("protocol version {got} (this side speaks {PROTOCOL_VERSION})")]
    Version {
        /// The version the message carried.
        got: u32,
    },
}

/// Serialises `msg` as one frame.
pub fn encode_frame<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serialising these types cannot fail: no maps with non-string keys, no custom
    // serialisers. Should it ever, an empty body makes the receiver report `Empty`.
    let body = serde_json::to_vec(msg).unwrap_or_default();
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Accumulates bytes and splits them into frame bodies.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max: usize,
}

impl FrameDecoder {
    /// A decoder refusing bodies over `max` bytes.
    pub fn new(max: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            max,
        }
    }

    /// Bytes the decoder still wants before the current frame is whole (at least 1 while
    /// nothing is buffered), never more than the limit allows. Read at most this much to
    /// keep the buffer bounded.
    pub fn wanted(&self) -> usize {
        match self.announced() {
            Some(len) => (HEADER_LEN + len.min(self.max))
                .saturating_sub(self.buf.len())
                .max(1),
            None => HEADER_LEN - self.buf.len(),
        }
    }

    fn announced(&self) -> Option<usize> {
        let head: [u8; HEADER_LEN] = self.buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(u32::from_be_bytes(head) as usize)
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame body, if one is buffered. After an error the decoder's state is
    /// unspecified: the connection should be closed.
    pub fn next_body(&mut self) -> Result<Option<Vec<u8>>, CodecError> {
        let Some(len) = self.announced() else {
            return Ok(None);
        };
        if len == 0 {
            return Err(CodecError::Empty);
        }
        if len > self.max {
            return Err(CodecError::TooLarge { len, max: self.max });
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let rest = self.buf.split_off(HEADER_LEN + len);
        let mut frame = std::mem::replace(&mut self.buf, rest);
        frame.drain(..HEADER_LEN);
        Ok(Some(frame))
    }
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

fn decode_versioned<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let v: VersionOnly =
        serde_json::from_slice(body).map_err(|e| CodecError::Json(e.to_string()))?;
    if v.version != PROTOCOL_VERSION {
        return Err(CodecError::Version { got: v.version });
    }
    serde_json::from_slice(body).map_err(|e| CodecError::Json(e.to_string()))
}

/// Decodes a request body (version first).
pub fn decode_request(body: &[u8]) -> Result<Request, CodecError> {
    decode_versioned(body)
}

/// Decodes a response body (version first).
pub fn decode_response(body: &[u8]) -> Result<Response, CodecError> {
    decode_versioned(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Command, ErrorKind};

    #[test]
    fn roundtrip_in_pieces() {
        let req = Request::new(Command::Probe {
            host: "192.0.2.1".parse().unwrap(),
            timeout_ms: Some(900),
        });
        let frame = encode_frame(&req);
        let mut d = FrameDecoder::new(MAX_REQUEST_LEN);
        for b in &frame {
            assert!(d.wanted() >= 1);
            assert_eq!(d.next_body().unwrap(), None);
            d.push(std::slice::from_ref(b));
        }
        let body = d.next_body().unwrap().unwrap();
        assert_eq!(decode_request(&body).unwrap(), req);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn wire_form_is_stable() {
        let frame = encode_frame(&Request::new(Command::Status));
        assert_eq!(&frame[..4], &[0, 0, 0, 40]);
        assert_eq!(
            std::str::from_utf8(&frame[4..]).unwrap(),
            r#"{"version":1,"command":{"cmd":"status"}}"#
        );
        let r = Response::error(ErrorKind::PermissionDenied, "uid 65534");
        let frame = encode_frame(&r);
        assert_eq!(
            std::str::from_utf8(&frame[4..]).unwrap(),
            r#"{"version":1,"result":{"error":{"kind":"permission_denied","message":"uid 65534"}}}"#
        );
    }

    #[test]
    fn limits_and_errors() {
        let mut d = FrameDecoder::new(10);
        d.push(&[0, 0, 0, 11]);
        assert_eq!(
            d.next_body(),
            Err(CodecError::TooLarge { len: 11, max: 10 })
        );
        let mut d = FrameDecoder::new(10);
        d.push(&[0, 0, 0, 0]);
        assert_eq!(d.next_body(), Err(CodecError::Empty));
        let mut d = FrameDecoder::new(10);
        d.push(&[0, 0, 0, 200]);
        assert_eq!(d.wanted(), 10, "never asks past the limit");
        assert_eq!(
            decode_request(br#"{"version":2,"command":{"cmd":"teleport"}}"#),
            Err(CodecError::Version { got: 2 })
        );
        assert!(matches!(
            decode_request(br#"{"version":1,"command":{"cmd":"teleport"}}"#),
            Err(CodecError::Json(_))
        ));
        assert!(matches!(
            decode_request(br#"{"version":1,"command":{"cmd":"status"},"x":1}"#),
            Err(CodecError::Json(_))
        ));
    }
}
