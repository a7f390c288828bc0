//! `rdma_nl_rcv`: splitting a daemon datagram into messages and dispatching each the way
//! `rdma_nl_rcv_skb` / `rdma_nl_rcv_msg` / the netlink dump machinery do
//! (`docs/protocol.md` §3.7).

use std::time::Instant;

use iwpm_proto::consts::NLM_F_ACK;
use iwpm_proto::kernel_side::{dispatched, requests::encode_handler_done};
use iwpm_proto::netlink::{
    decode_daemon_msg, encode_error, encode_error_echo, frames, DaemonMsg, Frame, NetlinkError,
    NlHeader,
};

use super::{KernelIwpm, Link, MapToken, SendMode, Violation};

/// `-EINVAL`.
pub(super) const EINVAL: i32 = -22;

impl<A: Clone + PartialEq + std::fmt::Debug> KernelIwpm<A> {
    pub(super) fn receive(
        &mut self,
        now: Instant,
        from: &A,
        datagram: &[u8],
        link: &mut dyn Link<A>,
    ) {
        self.stats.datagrams_in += 1;
        // The emulator's stand-in for group membership: whoever talked to us last.
        self.group_member = Some(from.clone());
        for frame in frames(datagram) {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    // rdma_nl_rcv_skb stops at a bad length without a word.
                    self.record_violation(Violation::BadFraming(e));
                    break;
                }
            };
            let header = *frame.header();
            if !dispatched(header.client(), header.flags) {
                self.record_violation(Violation::MissingRequestFlag {
                    ty: header.ty,
                    seq: header.seq,
                });
                self.ack(from, &header, link);
                continue;
            }
            match frame {
                Frame::Msg(header, payload) => self.dispatch(now, from, &header, payload, link),
                _ => {
                    self.record_violation(Violation::ControlMessage { ty: header.ty });
                    self.ack(from, &header, link);
                }
            }
        }
    }

    /// A skipped message gets an ACK (error 0) only if it asked for one.
    fn ack(&mut self, from: &A, header: &NlHeader, link: &mut dyn Link<A>) {
        if header.flags & NLM_F_ACK == 0 {
            return;
        }
        let mut buf = Vec::new();
        encode_error(header.seq, header.pid, 0, Some(header), &mut buf);
        self.reply(from, &buf, link);
        self.stats.errors_sent += 1;
    }

    fn dispatch(
        &mut self,
        now: Instant,
        from: &A,
        header: &NlHeader,
        payload: &[u8],
        link: &mut dyn Link<A>,
    ) {
        let decoded = decode_daemon_msg(header, payload);
        let msg = match decoded {
            Ok((_, msg)) => msg,
            Err(NetlinkError::UnknownOp { .. } | NetlinkError::WrongDirection { .. }) => {
                // is_nl_msg_valid / get_cb_table failed: a normal netlink error ACK, which
                // echoes the whole rejected message.
                self.record_violation(Violation::Undispatchable { ty: header.ty });
                let mut original = header.to_bytes().to_vec();
                original.extend_from_slice(payload);
                let mut buf = Vec::new();
                encode_error_echo(header.seq, header.pid, EINVAL, &original, &mut buf);
                self.reply(from, &buf, link);
                self.stats.errors_sent += 1;
                return;
            }
            Err(error) => {
                // iwpm_parse_nlmsg failed inside the dump handler.
                self.record_violation(Violation::BadAttributes {
                    op: header.op(),
                    error,
                });
                self.done(from, header, EINVAL, link);
                return;
            }
        };
        self.check_pid(header, &msg);
        let mut woken: Vec<MapToken> = Vec::new();
        let result = self.handle_msg(from, header, msg, link, &mut woken);
        // The handler's own sends (HELLO reply, MAPINFO replay) precede the DONE; callers
        // woken by the handler run after it.
        self.done(from, header, result, link);
        for token in woken {
            self.resume(now, token, link);
        }
    }

    fn check_pid(&mut self, header: &NlHeader, msg: &DaemonMsg) {
        let op = header.op();
        if header.pid == 0 {
            self.record_violation(Violation::ZeroPid { op });
            return;
        }
        if i32::try_from(header.pid).is_err() {
            self.record_violation(Violation::NegativePid {
                op,
                pid: header.pid,
            });
            return;
        }
        let announces = matches!(
            msg,
            DaemonMsg::Hello(_) | DaemonMsg::MapInfo(_) | DaemonMsg::RegPid(_)
        );
        if !announces && self.pid > 0 && i64::from(header.pid) != i64::from(self.pid) {
            self.record_violation(Violation::PidMismatch {
                op,
                pid: header.pid,
                expected: self.pid,
            });
        }
    }

    /// The dump-completion `NLMSG_DONE` carrying the handler's return value.
    fn done(&mut self, from: &A, header: &NlHeader, result: i32, link: &mut dyn Link<A>) {
        let mut buf = Vec::new();
        encode_handler_done(header.seq, header.pid, Some(result), &mut buf);
        self.reply(from, &buf, link);
        self.stats.dones_sent += 1;
    }

    /// Replies go to the sending socket itself, whatever pid it claims.
    fn reply(&mut self, from: &A, buf: &[u8], link: &mut dyn Link<A>) {
        if let Err(e) = link.send(from, buf, SendMode::NonBlocking) {
            tracing::debug!(error = %e, "reply to the daemon socket not delivered");
        }
    }
}
