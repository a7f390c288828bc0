//! Start-up handshake: HELLO(max_abi), the kernel's HELLO reply or `NLMSG_ERROR` (ABI-3
//! kernels), then the MAPINFO request(s) and [`crate::Action::Ready`].
//!
//! Unlike C, which sends `READY=1` as soon as HELLO is written, Ready follows the kernel's
//! answer (or `handshake_timeout` without one), so "ready" means the ABI is known and the
//! restart replay has been requested.
//!
//! Also differing from C, on purpose:
//!
//! * **The ABI-3 fallback runs once**, only for the `NLMSG_ERROR` answering our HELLO; C
//!   re-runs it for any later error with seq 0 (e.g. the one for its legacy client-3 MAPINFO).
//! * **HELLO versions below 3 are refused** like versions above ours (HANDLE_ERR 17): C adopts
//!   them, and the kernel then rejects every REG_PID reply.
//! * **A HELLO the kernel could not answer** (its `NLMSG_DONE` carries an error) ends the
//!   handshake without MAPINFO instead of waiting forever.
//! * **Kernel answers are accepted only for our own requests.** No iwpm op needs a
//!   capability, so any local user can send the kernel a HELLO or MAPINFO request naming our
//!   port id, and the kernel then sends *us* a HELLO answer or a MAPINFO replay. A HELLO
//!   outside our handshake is dropped (C adopts its ABI), and MAPINFO records are taken only
//!   between our MAPINFO request and that client's MAPINFO_NUM (C adds them to its table,
//!   and identical records would inflate reference counts, leaking ports).
//! * **Lost kernel input is repaired**: after a receive-queue overrun the shell calls
//!   `handle_kernel_overrun` and we say HELLO again (the kernel may have marked us absent
//!   when its REG_PID multicast could not be queued).

use std::time::Instant;

use iwpm_proto::consts::op::RDMA_NL_IWPM_HELLO;
use iwpm_proto::consts::{
    rdma_nl_get_type, IWPM_UABI_VERSION_MIN, IWPM_ULIB_NAME, RDMA_NL_IWCM, RDMA_NL_RSVD,
};
use iwpm_proto::netlink::{DaemonMsg, Hello, MapInfoRequest, NlHeader, NlString};

use super::{code, Core};
use crate::action::Action;
use crate::ratelimit::LogKind;
use crate::request::{Abi, Request};

/// Start-up handshake state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// `start` not called yet.
    Idle,
    /// HELLO sent with header seq `seq`.
    Awaiting { seq: u32, deadline: Instant },
    /// Handshake done earlier; HELLO re-sent after lost kernel input.
    Resyncing { seq: u32, deadline: Instant },
    /// Negotiated (or given up on); [`crate::Action::Ready`] emitted.
    Done,
}

impl Core {
    pub(super) fn start_handshake(&mut self, now: Instant) {
        if self.handshake != Handshake::Idle {
            return;
        }
        let (seq, deadline) = self.send_hello(now, self.config.max_abi);
        self.handshake = Handshake::Awaiting { seq, deadline };
    }

    /// Re-sends HELLO with the negotiated ABI after lost kernel input (at most once a
    /// second; not during the start-up handshake, whose own deadline covers a lost answer).
    pub(super) fn resync(&mut self, now: Instant) {
        let recent = self
            .last_resync
            .is_some_and(|t| now.saturating_duration_since(t) < std::time::Duration::from_secs(1));
        if self.handshake != Handshake::Done || recent {
            return;
        }
        self.last_resync = Some(now);
        let (seq, deadline) = self.send_hello(now, self.abi.0);
        self.handshake = Handshake::Resyncing { seq, deadline };
    }

    /// Sends HELLO offering `abi_version`: its seq and when the kernel's answer is due.
    fn send_hello(&mut self, now: Instant, abi_version: u16) -> (u32, Instant) {
        let seq = self.clients.peek_seq(RDMA_NL_IWCM);
        let hello = Hello {
            abi_version,
            unknown: Vec::new(),
        };
        self.send_kernel(RDMA_NL_IWCM, DaemonMsg::Hello(hello));
        (seq, now + self.config.handshake_timeout)
    }

    /// Ends the handshake: MAPINFO request to each of `mapinfo_clients`, then Ready.
    fn finish_handshake(&mut self, now: Instant, mapinfo_clients: &[u8]) {
        let until = now + self.config.reply_deadline;
        for &client in mapinfo_clients {
            self.mapinfo_windows.retain(|(c, _)| *c != client);
            self.mapinfo_windows.push((client, until));
            let ulib_version = self.abi.0;
            self.send_kernel(
                client,
                DaemonMsg::MapInfo(MapInfoRequest {
                    ulib_name: NlString::new(IWPM_ULIB_NAME),
                    ulib_version,
                    unknown: Vec::new(),
                }),
            );
        }
        self.handshake = Handshake::Done;
        self.push(Action::Ready);
    }

    pub(super) fn handshake_timeout(&mut self, now: Instant) {
        match self.handshake {
            Handshake::Awaiting { deadline, .. } if now >= deadline => {
                tracing::warn!("no answer to HELLO; assuming ABI {}", self.abi.0);
                self.finish_handshake(now, &[RDMA_NL_IWCM]);
            }
            Handshake::Resyncing { deadline, .. } if now >= deadline => {
                tracing::warn!("no answer to the resynchronisation HELLO");
                self.handshake = Handshake::Done;
            }
            _ => {}
        }
        let mut expired = Vec::new();
        self.mapinfo_windows.retain(|(c, until)| {
            let open = now < *until;
            if !open {
                expired.push(*c);
            }
            open
        });
        for client in expired {
            self.replay_ended(client, false);
        }
    }

    /// True while MAPINFO records from `client` answer our request.
    pub(super) fn mapinfo_expected(&self, now: Instant, client: u8) -> bool {
        self.mapinfo_windows
            .iter()
            .any(|(c, until)| *c == client && now < *until)
    }

    /// The client's MAPINFO_NUM ends its replay.
    pub(super) fn close_mapinfo_window(&mut self, client: u8) {
        self.mapinfo_windows.retain(|(c, _)| *c != client);
    }

    pub(super) fn on_done(&mut self, now: Instant, header: NlHeader, result: Option<i32>) {
        self.stats.netlink_done_in += 1;
        if result.is_some_and(|r| r != 0) {
            self.stats.netlink_done_nonzero += 1;
        }
        // The DONE answering our HELLO. Its reply, if any, was queued before it; DONE(0)
        // without one is odd, so keep waiting for the deadline. An error means the kernel
        // could not answer us at all.
        if let (Handshake::Awaiting { seq, .. }, Some(r)) = (self.handshake, result) {
            if header.seq == seq && r != 0 {
                tracing::warn!("kernel failed our HELLO (error {r}); no MAPINFO request sent");
                self.finish_handshake(now, &[]);
            }
        }
    }

    pub(super) fn on_nl_error(
        &mut self,
        now: Instant,
        header: NlHeader,
        error: i32,
        request: Option<NlHeader>,
    ) {
        self.stats.netlink_error_in += 1;
        let hello_ty = rdma_nl_get_type(RDMA_NL_IWCM, RDMA_NL_IWPM_HELLO);
        if let Handshake::Awaiting { seq, .. } = self.handshake {
            if header.seq == seq && request.is_none_or(|r| r.ty == hello_ty) {
                tracing::warn!("kernel refused HELLO (error {error}): using iwpm ABI 3");
                self.abi = Abi(IWPM_UABI_VERSION_MIN);
                self.finish_handshake(now, &[RDMA_NL_IWCM, RDMA_NL_RSVD]);
                return;
            }
        }
        let ty = request.map(|r| r.ty);
        self.warn(
            now,
            LogKind::NetlinkError,
            format_args!(
                "kernel rejected our message (seq {}, type {ty:?}): error {error}",
                header.seq
            ),
        );
    }

    pub(super) fn on_hello(&mut self, now: Instant, req: Request, h: Hello) {
        let Request { client, seq } = req;
        let v = h.abi_version;
        match self.handshake {
            Handshake::Awaiting { .. } => {}
            Handshake::Resyncing { .. } => {
                let abi = self.abi.0;
                if v != abi {
                    self.warn(
                        now,
                        LogKind::Protocol,
                        format_args!(
                            "resynchronisation HELLO answered with ABI {v}; keeping {abi}"
                        ),
                    );
                }
                self.handshake = Handshake::Done;
                return;
            }
            Handshake::Idle | Handshake::Done => {
                self.count_warn(
                    now,
                    |s| &mut s.kernel_unsolicited,
                    LogKind::Unsolicited,
                    format_args!(
                        "kernel HELLO (ABI {v}) outside our handshake dropped: another local \
                         program asked the kernel in our name"
                    ),
                );
                return;
            }
        }
        if v > self.config.max_abi || v < IWPM_UABI_VERSION_MIN {
            self.warn(
                now,
                LogKind::Protocol,
                format_args!("kernel HELLO with unusable ABI version {v}"),
            );
            self.send_handle_err(client, seq, code::VERSION);
            self.finish_handshake(now, &[]);
            return;
        }
        if v != self.abi.0 {
            tracing::info!("iwpm ABI version {v} negotiated");
        }
        self.abi = Abi(v);
        self.finish_handshake(now, &[RDMA_NL_IWCM]);
    }
}
