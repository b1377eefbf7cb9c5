//! Creating an RC QP and bringing it from INIT through RTR to RTS: the steps `softroce perf`
//! and `softroce pingpong` share (perftest's `ctx_create_qp` / `ctx_connect`, rc_pingpong's
//! `pp_init_ctx` / `pp_connect_ctx`).

use softroce::verbs::*;
use std::result::Result;

use super::CliError;

/// The queue sizes of an RC QP whose send and receive completions both go to one CQ.
#[derive(Debug, Clone, Copy)]
pub struct RcQueues {
    /// Send work requests outstanding at once.
    pub send_wr: u32,
    /// Receive work requests posted at once.
    pub recv_wr: u32,
    /// Bytes a SEND or WRITE may carry inline (0: none).
    pub inline: u32,
}

/// Creates an RC QP with one SGE per work request on `cq` and moves it to INIT, granting the
/// peer `remote_access`.
pub fn create_rc_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    q: RcQueues,
    remote_access: AccessFlags,
) -> Result<QueuePair, CliError> {
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap {
                max_send_wr: q.send_wr,
                max_recv_wr: q.recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: q.inline,
            },
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .map_err(CliError::Verbs)?;
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
