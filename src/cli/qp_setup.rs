//! Creating a QP and bringing an RC one from INIT through RTR to RTS: the steps `softroce perf`
//! and `softroce pingpong` share (perftest's `ctx_create_qp` / `ctx_connect`, rdma-core's
//! pingpong programs' `pp_init_ctx` / `pp_connect_ctx`).

use softroce::ib::*;
use softroce::verbs::*;
use std::result::Result;

use super::CliError;

/// The queue sizes of a QP whose send and receive completions both go to one CQ.
#[derive(Debug, Clone, Copy)]
pub struct Queues {
    /// Send work requests outstanding at once.
    pub send_wr: u32,
    /// Receive work requests posted at once.
    pub recv_wr: u32,
    /// Bytes a SEND or WRITE may carry inline (0: none).
    pub inline: u32,
}

/// Creates a QP of `qp_type` with one SGE per work request on `cq`, in RESET.
pub fn create_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    qp_type: QpType,
    q: Queues,
) -> Result<QueuePair, VerbsError> {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: q.send_wr,
            max_recv_wr: q.recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: q.inline,
        },
        qp_type,
        sq_sig_all: false,
    })
}

/// Creates an RC QP ([`create_qp`]) and moves it to INIT, granting the peer `remote_access`.
pub fn create_rc_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    q: Queues,
    remote_access: AccessFlags,
) -> Result<QueuePair, CliError> {
    let qp = create_qp(pd, cq, QpType::Rc, q).map_err(CliError::Verbs)?;
    qp.init(remote_access).map_err(CliError::Verbs)?;
    Ok(qp)
}

/// Moves an INIT QP to RTR, then RTS, with the same attributes for both steps.
pub fn connect_rc(qp: &QueuePair, c: &RcConnect) -> Result<(), CliError> {
    qp.ready_to_receive(c)
        .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTR: {e}")))?;
    qp.ready_to_send(c)
        .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTS: {e}")))
}
