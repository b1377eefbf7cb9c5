//! perftest's `-c UD`: ib_send_bw and ib_send_lat on Unreliable Datagram QPs.
//!
//! What differs from RC and UC (perftest 4.5, spec-notes/uc-ud-srq.md "perftest UD"): the QP
//! is created in INIT with Q_Key 0x11111111, goes to RTR with its state alone and to RTS with
//! its send PSN only at an end that sends (both ends of ib_send_lat and of -b, the client of
//! ib_send_bw), and that end makes one address handle per QP from the peer's GID (hop limit
//! 0xFF) and sends to the peer's QPN with that Q_Key. A message is at most one MTU: a larger
//! one shrinks to the MTU, except that an explicit -s larger than the MTU both ends agreed on
//! is refused; -a runs 2 .. MTU. Every receive has 40 bytes of room for the GRH in front of
//! the message (`UD_ADDITION`), so it is 40 bytes longer and its completion's byte count
//! includes them. Nothing recovers a lost datagram: a receiver that stops hearing from the
//! sender fails with the count it received, as perftest's server does after its timeout.

use softroce::ib::*;
use softroce::verbs::*;
use std::result::Result;

use super::params::{GRH_ROOM, QKEY};
use super::resources::Test;
use super::{Connection, PerfArgs};
use crate::cli::qp_setup::{create_qp, Queues};
use crate::cli::CliError;

/// Creates a UD QP and moves it to INIT with perftest's P_Key index 0, port 1 and Q_Key.
pub(super) fn create_ud_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    q: Queues,
) -> Result<QueuePair, CliError> {
    let qp = create_qp(pd, cq, QpType::Ud, q).map_err(CliError::Verbs)?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qkey: QKEY,
            ..Default::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )
    .map_err(|e| CliError::Failed(format!("Failed to modify QP to INIT: {e}")))?;
    Ok(qp)
}

impl Test<'_> {
    /// perftest's ctx_connect for UD: every QP to RTR (its state alone); at an end that sends,
    /// to RTS with its PSN and an address handle to the peer's GID.
    pub(super) fn connect_ud(&mut self, args: &PerfArgs) -> Result<(), CliError> {
        let sends = self.p.prog.lat() || self.is_client || self.p.duplex;
        for c in &mut self.conns {
            c.qp.modify(
                &QpAttr {
                    qp_state: QpState::Rtr,
                    ..Default::default()
                },
                QpAttrMask::STATE,
            )
            .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTR: {e}")))?;
            if !sends {
                continue;
            }
            c.qp.modify(
                &QpAttr {
                    qp_state: QpState::Rts,
                    sq_psn: c.mine.psn,
                    ..Default::default()
                },
                QpAttrMask::STATE | QpAttrMask::SQ_PSN,
            )
            .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTS: {e}")))?;
            let ah = self
                .pd
                .create_ah(&AhAttr {
                    dgid: c.remote.gid,
                    sgid_index: args.gid_index,
                    hop_limit: 0xFF,
                    traffic_class: args.tclass.unwrap_or(0),
                    ..Default::default()
                })
                .map_err(|e| CliError::Failed(format!("Failed to create AH: {e}")))?;
            c.ah = Some(ah);
        }
        Ok(())
    }

    /// Where receive `msg` of a UD QP starts: its GRH room, then the message. perftest puts the
    /// first at the receive half plus a cache line less 40 bytes, so that messages start on a
    /// cache line; under --check each receive has its own region.
    fn ud_recv_at(&self, msg: u64) -> u64 {
        let lead = if self.p.check {
            0
        } else {
            self.line.saturating_sub(GRH_ROOM)
        };
        self.layout.half + lead + self.layout.offset(msg)
    }

    /// Where the bytes of received message `msg` land in its QP's memory.
    pub(super) fn payload_at(&self, msg: u64) -> u64 {
        if self.p.conn == Connection::Ud {
            self.ud_recv_at(msg) + GRH_ROOM
        } else {
            self.layout.half + self.layout.offset(msg)
        }
    }

    /// Posts UD receive `msg` of QP `c`: the message's size plus the GRH room.
    pub(super) fn post_recv_ud(&self, c: usize, msg: u64) -> Result<(), CliError> {
        let conn = &self.conns[c];
        let sge = [conn
            .mr
            .sge(self.ud_recv_at(msg), (self.p.size + GRH_ROOM) as u32)];
        conn.qp
            .post_recv(&[RecvWr {
                wr_id: msg,
                sg_list: &sge,
            }])
            .map_err(|e| CliError::Failed(format!("post_recv: {e}")))
    }

    /// Posts SEND work requests of QP `c` as datagrams to the peer's QP through the address
    /// handle made at connect time.
    pub(super) fn post_send_ud(&self, c: usize, wrs: &[SendWr]) -> Result<(), CliError> {
        let conn = &self.conns[c];
        let ah = conn.ah.as_ref().ok_or_else(|| {
            CliError::Failed("post_send: this end has no address handle (it only receives)".into())
        })?;
        fn ud<'a>(wr: &SendWr<'a>, ah: &'a AddressHandle, qpn: u32) -> UdSendWr<'a> {
            UdSendWr {
                wr: wr.clone(),
                ah,
                remote_qpn: qpn,
                remote_qkey: QKEY,
            }
        }
        let qpn = conn.remote.qpn;
        let r = match wrs {
            [one] => conn.qp.post_send_ud(&[ud(one, ah, qpn)]),
            many => conn
                .qp
                .post_send_ud(&many.iter().map(|wr| ud(wr, ah, qpn)).collect::<Vec<_>>()),
        };
        r.map_err(|e| CliError::Failed(format!("post_send: {e}")))
    }

    /// A receiver's stall under UC or UD names what arrived: nothing recovers a lost message,
    /// so the run cannot end (perftest's server gives up likewise: "Did not get Message for
    /// 120 Seconds, exiting..").
    pub(super) fn stalled(&self, e: CliError, received: u64, expected: u64) -> CliError {
        match (self.p.conn, e) {
            (Connection::Uc | Connection::Ud, CliError::Failed(m)) => CliError::Failed(format!(
                "{m}: received {received} of {expected} messages ({} does not recover lost messages)",
                self.p.conn.name()
            )),
            (_, e) => e,
        }
    }
}
