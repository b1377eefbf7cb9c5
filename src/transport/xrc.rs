//! XRC domains (IBTA vol. 1 annex A14; `ibv_open_xrcd`): the scope in which an XRC target QP
//! (`IBV_QPT_XRC_RECV`) finds the XRC SRQ each request's XRCETH names.
//!
//! Rules (spec-notes/xrc.md):
//! - An XRC SRQ belongs to one domain and has a number (24 bits) unique on the device; a
//!   target QP of the domain delivers a request to the SRQ its XRCETH names, if that SRQ is of
//!   the same domain. Any other number (no SRQ, or an SRQ of another domain) is an invalid
//!   request: NAK, counted (`xrc_srq_errors`), the QP unharmed by the packet's payload.
//! - The memory a request names is checked against the SRQ's protection domain (an XRC
//!   target QP has none of its own: mlx5 and the IBTA annex take the SRQ's).
//! - A domain cannot close while SRQs or QPs use it (EBUSY, as the kernel's usecnt).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::srq::Srq;
use crate::ib::VerbsError;

/// An XRC domain: its number and the XRC SRQs opened in it, by SRQ number.
#[derive(Debug)]
pub struct XrcDomain {
    id: u32,
    srqs: Mutex<HashMap<u32, Arc<Srq>>>,
    /// XRC target QPs of the domain.
    qps: AtomicU32,
}

/// What an XRC QP is, in the transport: an RC QP whose packets are of the XRC transport.
#[derive(Debug, Clone)]
pub enum XrcRole {
    /// `IBV_QPT_XRC_SEND`: requester only, each WR naming the remote SRQ; no receive queue.
    Send,
    /// `IBV_QPT_XRC_RECV`: responder only, in a domain whose SRQs receive its requests.
    Recv(Arc<XrcDomain>),
}

impl XrcDomain {
    /// A new, empty domain numbered `id`.
    pub fn new(id: u32) -> XrcDomain {
        XrcDomain {
            id,
            srqs: Mutex::new(HashMap::new()),
            qps: AtomicU32::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Arc<Srq>>> {
        self.srqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The domain's number.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Opens `srq` in the domain under its XRC number; an SRQ without one, or of another
    /// domain, is refused.
    pub fn add_srq(&self, srq: &Arc<Srq>) -> Result<(), VerbsError> {
        match srq.xrc() {
            Some((xrcd, n)) if xrcd == self.id => {
                self.lock().insert(n, Arc::clone(srq));
                Ok(())
            }
            _ => Err(VerbsError::ForeignObject("XRC shared receive queue")),
        }
    }

    /// Removes the SRQ numbered `srqn` (its destroy).
    pub fn remove_srq(&self, srqn: u32) {
        self.lock().remove(&srqn);
    }

    /// The domain's SRQ numbered `srqn`, if it has one.
    pub fn srq(&self, srqn: u32) -> Option<Arc<Srq>> {
        self.lock().get(&(srqn & 0xFF_FFFF)).cloned()
    }

    /// A target QP joins the domain.
    pub fn attach_qp(&self) {
        self.qps.fetch_add(1, Ordering::AcqRel);
    }

    /// A target QP of the domain is destroyed.
    pub fn detach_qp(&self) {
        let _ = self
            .qps
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Whether SRQs or target QPs still use the domain (its close is then EBUSY).
    pub fn in_use(&self) -> bool {
        self.qps.load(Ordering::Acquire) != 0 || !self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::{DeviceLimits, SrqAttr};
    use crate::transport::Counters;

    fn srq(pd: u32) -> Srq {
        let attr = SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        };
        Srq::new(
            pd,
            attr,
            &DeviceLimits::default(),
            Arc::new(Counters::default()),
        )
        .unwrap()
    }

    #[test]
    fn srqs_are_found_by_number_in_their_own_domain_only() {
        let a = XrcDomain::new(1);
        let b = XrcDomain::new(2);
        let s = Arc::new(srq(7).with_xrc(1, 0x42));
        a.add_srq(&s).unwrap();
        assert!(b.add_srq(&s).is_err());
        assert!(a.add_srq(&Arc::new(srq(7))).is_err());
        assert!(Arc::ptr_eq(&a.srq(0x42).unwrap(), &s));
        assert!(a.srq(0x43).is_none());
        assert!(b.srq(0x42).is_none());
        assert!(a.in_use());
        a.remove_srq(0x42);
        assert!(!a.in_use());
        a.attach_qp();
        assert!(a.in_use());
        a.detach_qp();
        a.detach_qp();
        assert!(!a.in_use());
    }
}
