//! Work queue entries as the transport keeps them: the posted work request with its
//! scatter/gather list resolved to memory regions, plus the transport's progress on it.

use std::sync::Arc;

use super::keys::MrTable;
use super::mr::Mr;
use super::mw::{key_is_mw, Mw};
use crate::ib::{AccessFlags, Sge, SgeFault, VerbsError, WcStatus, WrOpcode};
use crate::memory::{AccessError, SharedBytes};
use crate::wire::Psn;

/// A scatter/gather element resolved at post time: its region and the offset into it.
#[derive(Debug, Clone)]
pub struct ResolvedSge {
    /// The region (kept alive while the WR is outstanding).
    pub mr: Arc<Mr>,
    /// Offset of the first byte in the region's storage.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// A WR's resolved scatter/gather list. Nearly every WR has one SGE, and posting one must not
/// allocate (the per-message path is allocation-free): one SGE is kept in place, longer lists
/// in a vector.
#[derive(Debug, Clone, Default)]
pub enum SgeList {
    /// No SGE (or only zero-length ones).
    #[default]
    Empty,
    /// One SGE.
    One(ResolvedSge),
    /// Two or more.
    Many(Vec<ResolvedSge>),
}

impl SgeList {
    /// The SGEs in order.
    pub fn as_slice(&self) -> &[ResolvedSge] {
        match self {
            SgeList::Empty => &[],
            SgeList::One(s) => std::slice::from_ref(s),
            SgeList::Many(v) => v,
        }
    }

    /// Appends `sge`; only the second one allocates.
    fn push(&mut self, sge: ResolvedSge, capacity: usize) {
        *self = match std::mem::take(self) {
            SgeList::Empty => SgeList::One(sge),
            SgeList::One(first) => {
                let mut v = Vec::with_capacity(capacity.max(2));
                v.push(first);
                v.push(sge);
                SgeList::Many(v)
            }
            SgeList::Many(mut v) => {
                v.push(sge);
                SgeList::Many(v)
            }
        };
    }
}

impl<'a> IntoIterator for &'a SgeList {
    type Item = &'a ResolvedSge;
    type IntoIter = std::slice::Iter<'a, ResolvedSge>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

/// Where a WR's local data lives.
#[derive(Debug, Clone)]
pub enum LocalData {
    /// Scatter/gather list.
    Sges(SgeList),
    /// Data copied at post time (IBV_SEND_INLINE).
    Inline(Vec<u8>),
}

impl Default for LocalData {
    /// No data.
    fn default() -> Self {
        LocalData::Sges(SgeList::Empty)
    }
}

impl LocalData {
    /// Resolves an SGE list against the table, checking keys, PD, bounds and rights.
    pub fn resolve(
        sges: &[Sge],
        mrs: &MrTable,
        pd: u32,
        need: AccessFlags,
    ) -> Result<LocalData, VerbsError> {
        Self::resolve_in(sges, mrs, Some(pd), need)
    }

    /// Resolves a receive WR's SGE list: keys, bounds and rights as [`LocalData::resolve`],
    /// but a region of another protection domain is accepted here and refused where the data
    /// lands ([`LocalData::recheck`]), as rxe and mlx5 check it; so a receive that
    /// names a region `ibv_rereg_mr` moved to another PD fails as on them
    /// (spec-notes/beyond-rxe.md rule 5).
    pub fn resolve_recv(sges: &[Sge], mrs: &MrTable) -> Result<LocalData, VerbsError> {
        Self::resolve_in(sges, mrs, None, AccessFlags::LOCAL_WRITE)
    }

    fn resolve_in(
        sges: &[Sge],
        mrs: &MrTable,
        pd: Option<u32>,
        need: AccessFlags,
    ) -> Result<LocalData, VerbsError> {
        let mut out = SgeList::Empty;
        for (index, sge) in sges.iter().enumerate() {
            if sge.length == 0 {
                continue; // a zero-length SGE contributes nothing and is not checked (as rxe)
            }
            let bad = |fault| VerbsError::BadSge { index, fault };
            let mr = mrs.by_lkey(sge.lkey).ok_or(bad(SgeFault::UnknownLkey))?;
            if pd.is_some_and(|pd| mr.pd != pd) {
                return Err(bad(SgeFault::UnknownLkey));
            }
            let offset = mr
                .check(sge.addr, sge.length as u64, need)
                .map_err(|f| match f {
                    super::mr::MrFault::AccessDenied => bad(SgeFault::AccessDenied),
                    _ => bad(SgeFault::OutOfRange),
                })?;
            out.push(
                ResolvedSge {
                    mr: Arc::clone(mr),
                    offset,
                    len: sge.length,
                },
                sges.len(),
            );
        }
        Ok(LocalData::Sges(out))
    }

    /// Checks a receive's regions again where its data lands, once per message: each must
    /// still be the region its key names and of protection domain `pd` (a load and a compare
    /// per SGE, no lock). One that `ibv_rereg_mr` replaced since the post is looked up again
    /// by its key and kept if the key still grants the same bytes with LOCAL_WRITE in `pd`
    /// (new rights only), as hardware that resolves keys at execution finds them. False if
    /// any fails: deregistered, of another PD, or its key now over other memory.
    pub fn recheck(&mut self, mrs: &MrTable, pd: u32) -> bool {
        let sges = match self {
            LocalData::Inline(_) => return true,
            LocalData::Sges(SgeList::Empty) => return true,
            LocalData::Sges(SgeList::One(s)) => std::slice::from_mut(s),
            LocalData::Sges(SgeList::Many(v)) => v.as_mut_slice(),
        };
        sges.iter_mut().all(|s| {
            if s.mr.pd == pd && s.mr.is_live() {
                return true;
            }
            let va = s.mr.iova.wrapping_add(s.offset);
            let Some(now) = mrs.by_lkey(s.mr.lkey).filter(|m| m.pd == pd) else {
                return false;
            };
            match now.check(va, u64::from(s.len), AccessFlags::LOCAL_WRITE) {
                Ok(offset) if Arc::ptr_eq(&now.storage, &s.mr.storage) => {
                    s.mr = Arc::clone(now);
                    s.offset = offset;
                    true
                }
                _ => false,
            }
        })
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            LocalData::Sges(s) => s.as_slice().iter().map(|s| s.len as u64).sum(),
            LocalData::Inline(v) => v.len() as u64,
        }
    }

    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies message bytes `at .. at + dst.len()` into `dst` (gather). Bounds were checked at
    /// post time; the error is a region whose memory the application took back meanwhile
    /// (`AccessError::Revoked`), and then `dst` does not hold the message's bytes.
    pub fn read(&self, mut at: u64, dst: &mut [u8]) -> Result<(), AccessError> {
        match self {
            LocalData::Inline(v) => {
                let start = at as usize;
                dst.copy_from_slice(&v[start..start + dst.len()]);
                Ok(())
            }
            LocalData::Sges(sges) => {
                let mut done = 0;
                for s in sges {
                    if done == dst.len() {
                        break;
                    }
                    if at >= s.len as u64 {
                        at -= s.len as u64;
                        continue;
                    }
                    let n = ((s.len as u64 - at) as usize).min(dst.len() - done);
                    s.mr.storage.read(s.offset + at, &mut dst[done..done + n])?;
                    done += n;
                    at = 0;
                }
                Ok(())
            }
        }
    }

    /// Where message bytes `at .. at + len` lie, if in one region: the region and the offset
    /// in it (for a transmit that gathers them from there instead of copying them).
    pub fn locate(&self, mut at: u64, len: usize) -> Option<(&Arc<SharedBytes>, u64)> {
        let LocalData::Sges(sges) = self else {
            return None;
        };
        for s in sges {
            if at < s.len as u64 {
                return (at + len as u64 <= s.len as u64).then_some((&s.mr.storage, s.offset + at));
            }
            at -= s.len as u64;
        }
        None
    }

    /// Copies `src` into message bytes `at .. at + src.len()` (scatter). The caller has checked
    /// that the range fits (`at + src.len() <= self.len()`); the error is as for
    /// [`Self::read`], and then the bytes did not all land.
    pub fn write(&self, mut at: u64, src: &[u8]) -> Result<(), AccessError> {
        if let LocalData::Sges(sges) = self {
            let mut done = 0;
            for s in sges {
                if done == src.len() {
                    break;
                }
                if at >= s.len as u64 {
                    at -= s.len as u64;
                    continue;
                }
                let n = ((s.len as u64 - at) as usize).min(src.len() - done);
                s.mr.storage.write(s.offset + at, &src[done..done + n])?;
                done += n;
                at = 0;
            }
        }
        Ok(())
    }
}

/// Where a send WQE stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendState {
    /// Not yet started by the requester.
    Posted,
    /// Some or all of its packets have been sent; awaiting acknowledgement or response.
    InFlight,
    /// Finished (its completion is generated when it reaches the front of the queue).
    Done(WcStatus),
}

/// A send WQE.
#[derive(Debug, Clone)]
pub struct SendWqe {
    /// The WR's id.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Whether a successful completion is reported.
    pub signaled: bool,
    /// FENCE flag.
    pub fence: bool,
    /// SOLICITED flag.
    pub solicited: bool,
    /// Local data (source for SEND/WRITE, target for READ and atomics).
    pub data: LocalData,
    /// Message length (for READ: bytes to read; for atomics: 8).
    pub length: u64,
    /// Transport progress.
    pub state: SendState,
    /// PSN of the first packet (valid once started).
    pub first_psn: Psn,
    /// PSN of the last packet (valid once started; a READ reserves one per response packet).
    pub last_psn: Psn,
    /// READ: bytes of response data received so far.
    pub read_done: u64,
    /// READ: PSN of the latest request sent for it. A retried READ asks only for the bytes not
    /// yet received, and its response starts again with FIRST or ONLY at this PSN.
    pub read_req_psn: Psn,
    /// Whether the requester has sent its first packet (READ and atomics count towards
    /// `max_rd_atomic` from then until they complete).
    pub started: bool,
    /// UD: where the datagram goes.
    pub ud: Option<UdTarget>,
    /// XRC: the number of the XRC SRQ at the target the message is for (its XRCETH).
    pub xrc_srqn: Option<u32>,
    /// BIND_MW and LOCAL_INV: the objects the WR names, looked up at post time (the checks
    /// run when the requester reaches the WR).
    pub local: Option<LocalOp>,
    /// Tag matching's internal WQEs (a rendezvous READ, its FIN): no send completion.
    pub tm_rndv: Option<super::tm_rndv::RndvRole>,
}

/// The objects a local operation (BIND_MW, LOCAL_INV) names, found by their keys when it is
/// posted: none where a key names nothing, which fails the WR when it executes (as rxe's
/// lookups in rxe_bind_mw and rxe_invalidate_mw/_mr fail then).
#[derive(Debug, Clone)]
pub struct LocalOp {
    /// The window (BIND_MW: `mw_rkey`'s; LOCAL_INV: the key's, if it names a window).
    pub mw: Option<Arc<Mw>>,
    /// BIND_MW: the region `mr_lkey` names in the QP's PD.
    pub mr: Option<Arc<Mr>>,
}

impl LocalOp {
    /// Looks up what `opcode` names; `None` for other opcodes.
    pub fn resolve(opcode: WrOpcode, mrs: &MrTable, pd: u32) -> Option<LocalOp> {
        match opcode {
            WrOpcode::BindMw { mw_rkey, bind, .. } => Some(LocalOp {
                mw: mrs.mw_by_index(mw_rkey).cloned(),
                mr: mrs.by_lkey(bind.mr_lkey).filter(|m| m.pd == pd).cloned(),
            }),
            WrOpcode::LocalInv { rkey } => Some(LocalOp {
                mw: if key_is_mw(rkey) {
                    mrs.mw_by_index(rkey).cloned()
                } else {
                    None
                },
                mr: None,
            }),
            _ => None,
        }
    }
}

/// The destination of a UD send WQE, resolved at post time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTarget {
    /// Destination IP address (the address handle's GID).
    pub ip: std::net::IpAddr,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// The Q_Key sent in the DETH (the QP's own when the WR's had bit 31 set).
    pub qkey: u32,
    /// Address handle hop limit (0: the default).
    pub hop_limit: u8,
    /// Address handle traffic class.
    pub traffic_class: u8,
}

/// A receive WQE.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    /// The WR's id.
    pub wr_id: u64,
    /// Where incoming SEND data goes.
    pub data: LocalData,
}
