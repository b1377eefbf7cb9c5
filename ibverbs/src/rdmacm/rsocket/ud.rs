//! One UD queue pair of a datagram rsocket, bound to one local source address (rsocket.c's
//! `struct ds_qp`, `ds_create_qp`, `ds_init_bufs`, `ds_post_recv`, `ds_post_send`): its
//! rdma_cm identifier in the UDP port space, PD, CQ, the UD QP (Q_Key RDMA_UDP_QKEY, set by
//! rdma_create_qp), a send buffer of `sq` slots of 2048 bytes and a receive buffer of `rq`
//! slots of 2048 bytes plus the GRH area every receive's first SGE lands in
//! (spec-notes: rsockets.md R17-R19). Also the address handles to a peer's QP, made from an
//! rdma_cm route as `udp_svc_create_ah` does.

use std::net::SocketAddr;
use std::ptr::null_mut;

use libc::c_int;

use super::proto::ds_header;
use super::verbs::{self, ACCESS_LOCAL, ACCESS_WRITE};
use crate::ffi::*;
use crate::rdmacm::ffi::{rdma_cm_id, RDMA_PS_UDP, RDMA_UDP_QKEY};
use crate::rdmacm::{
    rdma_bind_addr, rdma_create_id, rdma_destroy_id, rdma_resolve_addr, rdma_resolve_route,
};

/// Bytes of one send or receive slot (`RS_SNDLOWAT`): the ds header and the payload.
pub(super) const SLOT: usize = 2048;
/// The GRH in front of every UD receive (`sizeof(struct ibv_grh)`).
pub(super) const GRH: usize = 40;
/// The flag bit of a receive's work request id (`rs_recv_wr_id`).
pub(super) const RECV_ID: u64 = 1 << 63;
/// Address and route resolution timeout of `udp_svc_create_ah` (2000 ms).
const RESOLVE_MS: c_int = 2000;

/// A UD QP and its buffers; everything is freed by `Drop`.
pub(super) struct UdQp {
    pub(super) id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    pub(super) cq: *mut ibv_cq,
    pub(super) qp: *mut ibv_qp,
    sbuf: Vec<u8>,
    pub(super) rbuf: Vec<u8>,
    smr: *mut ibv_mr,
    rmr: *mut ibv_mr,
    /// Free send slots.
    pub(super) free: Vec<u32>,
    /// The local address the QP is bound to (its `ds_header`'s source).
    pub(super) src: SocketAddr,
    /// Its `ds_header` (`qp->hdr`).
    pub(super) hdr: Vec<u8>,
    /// An address handle to itself (`qp->dest`), for `udp_svc_forward`.
    pub(super) self_ah: *mut ibv_ah,
    /// The QP number.
    pub(super) qpn: u32,
    /// The port's active MTU in bytes: the largest UD message.
    pub(super) mtu: usize,
}

// SAFETY: the raw pointers are the shim's verbs objects, which are thread-safe; a UdQp is
// only used under its rsocket's lock.
unsafe impl Send for UdQp {}

impl UdQp {
    /// `ds_create_qp`: an identifier bound to `src`, a UD QP of `sq`/`rq` entries with every
    /// receive posted, and its address handle to itself.
    pub(super) fn new(src: SocketAddr, sq: u32, rq: u32) -> Result<UdQp, c_int> {
        let mut q = UdQp {
            id: null_mut(),
            pd: null_mut(),
            cq: null_mut(),
            qp: null_mut(),
            sbuf: vec![0; sq as usize * SLOT],
            rbuf: vec![0; rq as usize * SLOT + GRH],
            smr: null_mut(),
            rmr: null_mut(),
            free: (0..sq).rev().collect(),
            src,
            hdr: ds_header(&src),
            self_ah: null_mut(),
            qpn: 0,
            mtu: SLOT,
        };
        // SAFETY: the objects are made in order and owned by `q` (Drop frees what exists).
        unsafe { q.create(sq, rq)? };
        q.self_ah = q.make_ah(src)?;
        for i in 0..rq {
            q.post_recv(i * SLOT as u32)?;
        }
        Ok(q)
    }

    unsafe fn create(&mut self, sq: u32, rq: u32) -> Result<(), c_int> {
        let err = || super::super::error::errno();
        // SAFETY: an identifier without a channel (synchronous), as rsocket.c's.
        if unsafe { rdma_create_id(null_mut(), &mut self.id, null_mut(), RDMA_PS_UDP) } != 0 {
            return Err(err());
        }
        let (mut ss, _) = super::super::addr::sockaddr_to_c(self.src);
        // SAFETY: a live identifier and our address.
        if unsafe { rdma_bind_addr(self.id, &mut ss as *mut _ as *mut libc::sockaddr) } != 0 {
            return Err(err());
        }
        // SAFETY: the bound identifier's device context.
        let ctx = unsafe { (*self.id).verbs };
        // SAFETY: the shim's exports on a live context.
        self.pd = unsafe { crate::ibv_alloc_pd(ctx) };
        if self.pd.is_null() {
            return Err(err());
        }
        let cqe = (sq + rq) as c_int;
        // SAFETY: as above; no channel.
        self.cq = unsafe { crate::ibv_create_cq(ctx, cqe, null_mut(), null_mut(), 0) };
        if self.cq.is_null() {
            return Err(err());
        }
        // SAFETY: plain data, zero is valid.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = self.cq;
        attr.recv_cq = self.cq;
        attr.qp_type = IBV_QPT_UD;
        attr.sq_sig_all = 1;
        attr.cap.max_send_wr = sq;
        attr.cap.max_recv_wr = rq;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 2;
        // SAFETY: live id, our PD, a local attribute block.
        if unsafe { crate::rdmacm::rdma_create_qp(self.id, self.pd, &mut attr) } != 0 {
            return Err(err());
        }
        // SAFETY: rdma_create_qp set the identifier's qp.
        self.qp = unsafe { (*self.id).qp };
        // SAFETY: a live QP.
        self.qpn = unsafe { (*self.qp).qp_num };
        // SAFETY: plain data, zero is valid.
        let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and the identifier's port; a writable attribute block.
        if unsafe { crate::ibv_query_port(ctx, (*self.id).port_num, &mut pa) } == 0 {
            // IBV_MTU_256 (1) .. IBV_MTU_4096 (5)
            self.mtu = 128usize << pa.active_mtu.clamp(1, 5);
        }
        // SAFETY: the buffers are owned by `self` and outlive their regions (Drop
        // deregisters first); a Vec's heap bytes do not move when the UdQp does.
        unsafe {
            let slen = self.sbuf.len();
            self.smr = verbs::reg(self.pd, self.sbuf.as_mut_ptr(), slen, ACCESS_LOCAL)?;
            let rlen = self.rbuf.len();
            self.rmr = verbs::reg(self.pd, self.rbuf.as_mut_ptr(), rlen, ACCESS_WRITE)?;
        }
        Ok(())
    }

    /// `ds_post_recv`: the GRH into the shared area after the slots, the datagram into the
    /// slot at `offset`.
    pub(super) fn post_recv(&mut self, offset: u32) -> Result<(), c_int> {
        let grh_at = self.rbuf.len() - GRH;
        // SAFETY: a live MR.
        let lkey = unsafe { (*self.rmr).lkey };
        let base = self.rbuf.as_ptr() as u64;
        let mut sge = [
            ibv_sge {
                addr: base + grh_at as u64,
                length: GRH as u32,
                lkey,
            },
            ibv_sge {
                addr: base + u64::from(offset),
                length: SLOT as u32,
                lkey,
            },
        ];
        // SAFETY: plain data; zero is a valid empty request.
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = RECV_ID | u64::from(offset);
        wr.sg_list = sge.as_mut_ptr();
        wr.num_sge = 2;
        let mut bad: *mut ibv_recv_wr = null_mut();
        // SAFETY: a live QP; the SGEs outlive the call and lie in our registered buffer.
        let r = unsafe {
            match (*(*self.qp).context).ops.post_recv {
                Some(p) => p(self.qp, &mut wr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if r == 0 {
            Ok(())
        } else {
            Err(r)
        }
    }

    /// `ds_post_send`: copies `hdr` and `payload` into a free slot and SENDs it to `qpn`
    /// through `ah` with Q_Key RDMA_UDP_QKEY. EAGAIN without a free slot.
    pub(super) fn send(
        &mut self,
        ah: *mut ibv_ah,
        qpn: u32,
        hdr: &[u8],
        payload: &[u8],
    ) -> Result<(), c_int> {
        let len = hdr.len() + payload.len();
        if len > SLOT {
            return Err(libc::EMSGSIZE);
        }
        let slot = self.free.pop().ok_or(libc::EAGAIN)?;
        let at = slot as usize * SLOT;
        self.sbuf[at..at + hdr.len()].copy_from_slice(hdr);
        self.sbuf[at + hdr.len()..at + len].copy_from_slice(payload);
        let mut sge = ibv_sge {
            addr: self.sbuf.as_ptr() as u64 + at as u64,
            length: len as u32,
            // SAFETY: a live MR.
            lkey: unsafe { (*self.smr).lkey },
        };
        // SAFETY: plain data; zero is a valid empty request.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = u64::from(slot);
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = 2; // IBV_SEND_SIGNALED
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        // wr.ud: ah at offset 0, remote_qpn at 8, remote_qkey at 12 (see `ud_remote_qpn`).
        wr.wr.remote_addr = ah as usize as u64;
        wr.wr.compare_add = u64::from(qpn) | (u64::from(RDMA_UDP_QKEY) << 32);
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: a live QP and AH; the SGE outlives the call and lies in our buffer.
        let r = unsafe {
            match (*(*self.qp).context).ops.post_send {
                Some(p) => p(self.qp, &mut wr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if r == 0 {
            Ok(())
        } else {
            self.free.push(slot);
            Err(r)
        }
    }

    /// `ibv_poll_cq` for one completion of the QP's CQ, if there is one.
    pub(super) fn poll(&self) -> Option<ibv_wc> {
        // SAFETY: ibv_wc is plain data; an all-zero value is valid.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: a live CQ of ours, its context's op table, one writable ibv_wc.
        let n = unsafe {
            match (*(*self.cq).context).ops.poll_cq {
                Some(p) => p(self.cq, 1, &mut wc),
                None => 0,
            }
        };
        (n == 1).then_some(wc)
    }

    /// The bytes of the receive slot at `offset`, `len` long (clamped to the slot).
    pub(super) fn slot(&self, offset: u32, len: usize) -> &[u8] {
        let at = offset as usize;
        &self.rbuf[at..at + len.min(SLOT)]
    }

    /// `udp_svc_create_ah`: resolves `dst` from this QP's address (port 0) on a throwaway
    /// identifier and makes an address handle from its path record.
    pub(super) fn make_ah(&self, dst: SocketAddr) -> Result<*mut ibv_ah, c_int> {
        let err = || super::super::error::errno();
        let mut src = self.src;
        src.set_port(0);
        let (mut s, _) = super::super::addr::sockaddr_to_c(src);
        let (mut d, _) = super::super::addr::sockaddr_to_c(dst);
        let mut id: *mut rdma_cm_id = null_mut();
        // SAFETY: a synchronous identifier, destroyed below on every path.
        if unsafe { rdma_create_id(null_mut(), &mut id, null_mut(), RDMA_PS_UDP) } != 0 {
            return Err(err());
        }
        let sp = &mut s as *mut _ as *mut libc::sockaddr;
        let dp = &mut d as *mut _ as *mut libc::sockaddr;
        // SAFETY: a live identifier and our addresses; on success `route.path_rec` points
        // at its path record, which lives until the identifier is destroyed.
        let r = unsafe {
            if rdma_resolve_addr(id, sp, dp, RESOLVE_MS) != 0
                || rdma_resolve_route(id, RESOLVE_MS) != 0
            {
                Err(err())
            } else {
                self.ah_from_route(id)
            }
        };
        // SAFETY: ours, no longer used.
        unsafe { rdma_destroy_id(id) };
        r
    }

    /// The AH of a resolved identifier's path record (global when it has more than one hop).
    unsafe fn ah_from_route(&self, id: *mut rdma_cm_id) -> Result<*mut ibv_ah, c_int> {
        // SAFETY: a resolved identifier (caller's contract).
        let (path, port) = unsafe { ((*id).route.path_rec, (*id).port_num) };
        if path.is_null() {
            return Err(libc::EHOSTUNREACH);
        }
        // SAFETY: the identifier's path record.
        let p = unsafe { &*path };
        // SAFETY: plain data, zero is valid.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        if p.hop_limit > 1 {
            attr.is_global = 1;
            attr.grh.dgid = p.dgid;
            attr.grh.flow_label = u32::from_be(p.flow_label);
            attr.grh.sgid_index = self.sgid_index(&p.sgid);
            attr.grh.hop_limit = p.hop_limit;
            attr.grh.traffic_class = p.traffic_class;
        }
        attr.dlid = u16::from_be(p.dlid);
        attr.sl = p.sl;
        attr.static_rate = p.rate;
        attr.port_num = port;
        // SAFETY: our PD and a local attribute block.
        let ah = unsafe { crate::ibv_create_ah(self.pd, &mut attr) };
        if ah.is_null() {
            Err(super::super::error::errno())
        } else {
            Ok(ah)
        }
    }

    /// `udp_svc_sgid_index`: the index of `sgid` among the port's first 16 GIDs, else 0.
    fn sgid_index(&self, sgid: &[u8; 16]) -> u8 {
        // SAFETY: the bound identifier's context and port.
        let (ctx, port) = unsafe { ((*self.id).verbs, (*self.id).port_num) };
        for i in 0..16u8 {
            let mut gid = [0u8; 16];
            // SAFETY: a live context and a writable GID.
            let ok = unsafe { crate::ibv_query_gid(ctx, port, c_int::from(i), &mut gid) } == 0;
            if ok && gid == *sgid {
                return i;
            }
        }
        0
    }
}

impl Drop for UdQp {
    fn drop(&mut self) {
        // SAFETY: each object is ours and freed once, the QP before its CQ, AH, MRs and PD.
        unsafe {
            if !self.id.is_null() && !self.qp.is_null() {
                crate::rdmacm::rdma_destroy_qp(self.id);
            }
            if !self.self_ah.is_null() {
                crate::ibv_destroy_ah(self.self_ah);
            }
            for mr in [self.smr, self.rmr] {
                if !mr.is_null() {
                    crate::ibv_dereg_mr(mr);
                }
            }
            if !self.cq.is_null() {
                crate::ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                crate::ibv_dealloc_pd(self.pd);
            }
            if !self.id.is_null() {
                rdma_destroy_id(self.id);
            }
        }
    }
}
