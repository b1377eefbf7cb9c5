//! Address handles (`ibv_ah`) and shared receive queues (`ibv_srq`).
//!
//! An address handle names where UD datagrams go: the destination GID (its IP address on
//! RoCEv2), hop limit and traffic class. The UDP source port is not the handle's: as in rxe,
//! every packet of a UD QP leaves from the QP's port (`0xC000 | hash_32(qpn, 14)`).

use std::net::IpAddr;
use std::sync::Arc;

use crate::driver::device::Device;
use crate::ib::{AhAttr, RecvWr, Result, SrqAttr, SrqAttrMask, VerbsError};
use crate::transport::Srq;

/// An address handle (`ibv_create_ah`).
#[derive(Debug, Clone)]
pub struct AddressHandle {
    pub(crate) pd: u32,
    pub(crate) attr: AhAttr,
}

impl AddressHandle {
    /// Checks `attr` against the device as rxe_av_chk_attr does: a GID index in the table and
    /// a destination of the device's address family.
    pub(crate) fn new(dev: &Device, pd: u32, attr: &AhAttr) -> Result<AddressHandle> {
        if attr.sgid_index as usize >= dev.limits.gid_table_len as usize {
            return Err(VerbsError::InvalidAttribute {
                attr: "sgid_index",
                reason: "outside the GID table",
            });
        }
        let dst = attr.dgid.to_ip();
        if dst.is_ipv4() != dev.local.is_ipv4() || attr.dgid.is_zero() {
            return Err(VerbsError::InvalidAttribute {
                attr: "dgid",
                reason: "not an address of the device's IP family",
            });
        }
        Ok(AddressHandle { pd, attr: *attr })
    }

    /// The attributes (`ibv_query_ah`).
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// The destination IP address.
    pub fn dest_ip(&self) -> IpAddr {
        self.attr.dgid.to_ip()
    }
}

/// A shared receive queue (`ibv_srq`): receive WRs that any QP created on it consumes.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    pub(crate) dev: Arc<Device>,
    pub(crate) srq: Arc<Srq>,
}

impl SharedReceiveQueue {
    /// `ibv_post_srq_recv`: queues the WRs in order; stops at the first one refused and
    /// returns its index with the error.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> core::result::Result<(), super::PostError> {
        self.dev
            .check_open()
            .map_err(|error| super::PostError { bad_wr: 0, error })?;
        let mrs = self.dev.mrs.read().unwrap_or_else(|e| e.into_inner());
        wrs.iter().enumerate().try_for_each(|(i, wr)| {
            self.srq
                .post_recv(wr, &mrs)
                .map_err(|error| super::PostError { bad_wr: i, error })
        })
    }

    /// `ibv_modify_srq`: resize (`MAX_WR`) or arm the limit (`LIMIT`).
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.srq.modify(attr, mask)
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> SrqAttr {
        self.srq.query()
    }

    /// Receive WRs queued.
    pub fn len(&self) -> usize {
        self.srq.len()
    }

    /// Whether no receive WR is queued.
    pub fn is_empty(&self) -> bool {
        self.srq.is_empty()
    }

    /// Takes one pending `IBV_EVENT_SRQ_LIMIT_REACHED` asynchronous event, if any.
    pub fn take_limit_event(&self) -> bool {
        self.srq.take_limit_event()
    }

    /// `ibv_destroy_srq`: refused (and the SRQ handed back) while a QP uses it.
    pub fn destroy(self) -> core::result::Result<(), (SharedReceiveQueue, VerbsError)> {
        match self.srq.check_destroy() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}
