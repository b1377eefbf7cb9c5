//! XRC (`ibv_open_xrcd`, `ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_create_qp_ex` with
//! `IBV_QPT_XRC_SEND` / `IBV_QPT_XRC_RECV`; IBTA vol. 1 annex A14, spec-notes/xrc.md).
//!
//! An XRC domain groups XRC SRQs and XRC target QPs: a request arriving at a target QP goes
//! to the SRQ of the domain its XRCETH names, and completes on that SRQ's CQ. An initiator
//! QP sends to any SRQ of the target's domain through one connection, naming it per WR
//! ([`PostBatch::post_send_xrc`](super::PostBatch::post_send_xrc)).

use std::sync::Arc;

use super::cq::CompletionQueue;
use super::device::{Context, ProtectionDomain, QpParts};
use super::qp::{QpInitAttr, QueuePair};
use super::srq::SharedReceiveQueue;
use crate::driver::device::Device;
use crate::driver::CqInner;
use crate::ib::{QpCap, QpType, Result, SrqAttr, VerbsError};
use crate::transport::{Srq, XrcDomain as Domain, XrcRole};

/// An XRC domain (`ibv_xrcd`).
#[derive(Debug)]
pub struct XrcDomain {
    pub(crate) dev: Arc<Device>,
    pub(crate) inner: Arc<Domain>,
}

impl Context {
    /// `ibv_open_xrcd`: a new XRC domain of this context. (A domain shared between processes
    /// through a file, the `fd` of `ibv_xrcd_init_attr`, is not offered: see spec-notes/xrc.md.)
    pub fn open_xrcd(&self) -> Result<XrcDomain> {
        self.dev.check_open()?;
        Ok(XrcDomain {
            dev: Arc::clone(&self.dev),
            inner: Arc::new(Domain::new(self.dev.alloc_handle())),
        })
    }
}

impl XrcDomain {
    /// The domain's number.
    pub fn id(&self) -> u32 {
        self.inner.id()
    }

    /// `ibv_close_xrcd`: refused (and the domain handed back) while XRC SRQs or target QPs
    /// of it exist (EBUSY, as the kernel's use count).
    pub fn close(self) -> core::result::Result<(), (XrcDomain, VerbsError)> {
        if self.inner.in_use() {
            return Err((self, VerbsError::Busy("XRC domain")));
        }
        Ok(())
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an XRC SRQ of this domain on `pd`, whose
    /// receive completions go to `cq`; its number ([`SharedReceiveQueue::srq_num`]) is what
    /// initiators name in their WRs.
    pub fn create_srq(
        &self,
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        attr: &SrqAttr,
    ) -> Result<SharedReceiveQueue> {
        self.dev.check_open()?;
        if !Arc::ptr_eq(&pd.dev, &self.dev)
            || !std::ptr::eq(cq.dev.as_ptr(), Arc::as_ptr(&self.dev))
        {
            return Err(VerbsError::ForeignObject("protection domain or CQ"));
        }
        let srqn = self.dev.alloc_handle() & 0xFF_FFFF;
        let srq = Srq::new(
            pd.handle,
            *attr,
            &self.dev.limits,
            Arc::clone(&self.dev.counters),
        )?
        .with_xrc(self.inner.id(), srqn);
        let srq = Arc::new(srq);
        self.inner.add_srq(&srq)?;
        self.dev.add_xrc_cq(srqn, Arc::clone(&cq.inner));
        Ok(SharedReceiveQueue {
            dev: Arc::clone(&self.dev),
            srq,
            xrcd: Some(Arc::clone(&self.inner)),
            tm_cq: None,
        })
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP of this domain. It has no
    /// send or receive queue and no CQ of its own (its completions are its SRQs').
    pub fn create_recv_qp(&self) -> Result<QueuePair> {
        self.dev.check_open()?;
        // The engine's table wants a CQ per side: a private one that nothing fills (no
        // send WR can be posted, receive completions go to the SRQs' CQs).
        let unused = Arc::new(CqInner::new(1, &self.dev));
        let qp = ProtectionDomain::create_qp_parts(
            &self.dev,
            0,
            QpParts {
                send_cq: Arc::clone(&unused),
                recv_cq: unused,
                cap: QpCap::default(),
                qp_type: QpType::Rc,
                sq_sig_all: false,
                srq: None,
                xrc: Some(XrcRole::Recv(Arc::clone(&self.inner))),
            },
        )?;
        self.inner.attach_qp();
        Ok(qp)
    }
}

impl ProtectionDomain {
    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_SEND`: an initiator QP (RC-like requester, no
    /// receive queue: `init.recv_cq` is not used and `max_recv_wr` must be 0).
    pub fn create_xrc_send_qp(&self, init: &QpInitAttr) -> Result<QueuePair> {
        if init.qp_type != QpType::Rc {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp_type",
                reason: "an XRC initiator is RC-like",
            });
        }
        self.create_qp_with(init, None, Some(XrcRole::Send))
    }
}

impl QueuePair {
    /// Whether this is an XRC initiator QP (`IBV_QPT_XRC_SEND`): rdma_cm marks its REQ as
    /// XRC (spec-notes/xrc.md rule 13).
    pub fn is_xrc_initiator(&self) -> bool {
        matches!(self.lock().xrc(), Some(XrcRole::Send))
    }
}
