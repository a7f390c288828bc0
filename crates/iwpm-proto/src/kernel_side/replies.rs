//! What the kernel takes back from a daemon: which messages it dispatches at all, which
//! requests it waits for (and for how long), and which daemon message answers which
//! request. The attribute rules are the codec's
//! ([`decode_daemon_msg`](crate::netlink::decode_daemon_msg)).

use std::time::Duration;

use crate::consts::op::{
    RDMA_NL_IWPM_ADD_MAPPING, RDMA_NL_IWPM_QUERY_MAPPING, RDMA_NL_IWPM_REG_PID,
};
use crate::consts::{NLM_F_REQUEST, RDMA_NL_LS};
use crate::netlink::DaemonMsg;

/// `IWPM_NL_TIMEOUT`: how long the kernel waits for the answer to a [`RequestKind`]; an
/// answer after that finds nobody waiting.
pub const IWPM_NL_TIMEOUT: Duration = Duration::from_secs(10);

/// A kernel request that waits for an answer (REMOVE and MAPINFO_NUM do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// REG_PID (op 0).
    RegPid,
    /// ADD_MAPPING (op 1).
    AddMapping,
    /// QUERY_MAPPING (op 2).
    QueryMapping,
}

impl RequestKind {
    /// The request of iwpm op `op`, if the kernel waits for its answer.
    pub fn of_op(op: u16) -> Option<RequestKind> {
        match op {
            RDMA_NL_IWPM_REG_PID => Some(RequestKind::RegPid),
            RDMA_NL_IWPM_ADD_MAPPING => Some(RequestKind::AddMapping),
            RDMA_NL_IWPM_QUERY_MAPPING => Some(RequestKind::QueryMapping),
            _ => None,
        }
    }

    /// Its iwpm op.
    pub fn op(self) -> u16 {
        match self {
            RequestKind::RegPid => RDMA_NL_IWPM_REG_PID,
            RequestKind::AddMapping => RDMA_NL_IWPM_ADD_MAPPING,
            RequestKind::QueryMapping => RDMA_NL_IWPM_QUERY_MAPPING,
        }
    }
}

/// A daemon message that answers a kernel request, named by the request's header seq (an
/// attribute of the answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A reply of the request's own op: the kernel takes it only for a request of `kind`.
    Reply {
        /// The op replied to.
        kind: RequestKind,
        /// The request's seq.
        seq: u32,
    },
    /// HANDLE_ERR: fails whatever request has `seq`. Code 0 is a hazard: the kernel would
    /// complete the request as a success with addresses it never got.
    HandleErr {
        /// The request's seq (`IWPM_NLA_ERR_SEQ`).
        seq: u32,
        /// The IWPM error code.
        code: u16,
    },
}

impl Answer {
    /// What `msg` answers, if it answers a request at all (REMOTE_INFO, MAPINFO, the
    /// MAPINFO_NUM ack and HELLO do not).
    pub fn of(msg: &DaemonMsg) -> Option<Answer> {
        let (kind, seq) = match msg {
            DaemonMsg::RegPid(r) => (RequestKind::RegPid, r.seq),
            DaemonMsg::AddMapping(r) => (RequestKind::AddMapping, r.seq),
            DaemonMsg::QueryMapping(r) => (RequestKind::QueryMapping, r.seq),
            DaemonMsg::HandleErr(e) => {
                return Some(Answer::HandleErr {
                    seq: e.seq,
                    code: e.code,
                })
            }
            _ => return None,
        };
        Some(Answer::Reply { kind, seq })
    }

    /// The seq of the request answered.
    pub fn seq(self) -> u32 {
        match self {
            Answer::Reply { seq, .. } | Answer::HandleErr { seq, .. } => seq,
        }
    }

    /// Whether the kernel takes this as the answer to a request of `kind`: a reply only
    /// for its own op, HANDLE_ERR for any.
    pub fn fits(self, kind: RequestKind) -> bool {
        match self {
            Answer::Reply { kind: replied, .. } => replied == kind,
            Answer::HandleErr { .. } => true,
        }
    }
}

/// Whether the kernel dispatches a message from a daemon with this client and these
/// header flags: `rdma_nl_rcv_skb` skips one without `NLM_F_REQUEST` unseen, except the
/// LS client's (whose responses carry none).
pub fn dispatched(client: u8, flags: u16) -> bool {
    flags & NLM_F_REQUEST != 0 || client == RDMA_NL_LS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::HandleErr;

    #[test]
    fn waited_requests_round_trip_their_op() {
        for kind in [
            RequestKind::RegPid,
            RequestKind::AddMapping,
            RequestKind::QueryMapping,
        ] {
            assert_eq!(RequestKind::of_op(kind.op()), Some(kind));
        }
        assert_eq!(RequestKind::of_op(3), None);
    }

    #[test]
    fn handle_err_answers_any_request() {
        let err = Answer::of(&DaemonMsg::HandleErr(HandleErr {
            seq: 9,
            code: 11,
            unknown: vec![],
        }))
        .unwrap();
        assert_eq!(err.seq(), 9);
        assert!(err.fits(RequestKind::RegPid) && err.fits(RequestKind::QueryMapping));
        let reply = Answer::Reply {
            kind: RequestKind::AddMapping,
            seq: 9,
        };
        assert!(reply.fits(RequestKind::AddMapping) && !reply.fits(RequestKind::QueryMapping));
    }

    #[test]
    fn only_requests_and_ls_are_dispatched() {
        assert!(dispatched(2, NLM_F_REQUEST));
        assert!(!dispatched(2, 0));
        assert!(dispatched(RDMA_NL_LS, 0));
    }
}
