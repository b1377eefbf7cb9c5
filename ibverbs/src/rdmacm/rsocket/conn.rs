//! One connected stream rsocket's endpoint: its CQ, QP, the three registered buffers (send
//! buffer with its control slots, receive buffer, target SGL) and the data path over them:
//! completions, credit updates, and the copies in and out (spec-notes: rsockets.md R5, R10,
//! R11-R13). Follows rsocket.c's `rs_create_ep`, `rs_init_bufs`, `rs_poll_cq`,
//! `rs_send_credits`, `rsend` and `rrecv`, with the counters in `ring.rs`.

use std::ptr::null_mut;

use libc::c_int;

use super::proto::{
    value_to_scale, ConnData, Sge, CONN_FLAG_IOMAP, CONN_FLAG_NET, CONN_VERSION, IOMAP_LEN,
    SGE_LEN, SGL_SIZE,
};
use super::ring::{RecvRing, SendWindow};
use super::verbs::{self, ACCESS_LOCAL, ACCESS_WRITE};
use crate::ffi::*;
use crate::rdmacm::ffi::rdma_cm_id;

/// Control messages (credit updates, shutdown) in flight at once (`RS_QP_CTRL_SIZE`).
pub(super) const CTRL_SLOTS: u32 = 4;
/// The work request id of every receive (`rs_recv_wr_id`'s flag bit).
pub(super) const RECV_ID: u64 = 1 << 63;
/// First size of a message of a send; doubles to `MAX_TRANSFER` (`RS_OLAP_START_SIZE`).
pub(super) const OLAP_START: u32 = 2048;
/// Largest message (`RS_MAX_TRANSFER`).
pub(super) const MAX_TRANSFER: u32 = 65536;

/// Sizes chosen before connecting (rsetsockopt; `rs_set_qp_size`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Sizes {
    /// Send buffer bytes (`sbuf_size`).
    pub(super) sbuf: u32,
    /// Receive buffer bytes (`rbuf_size`).
    pub(super) rbuf: u32,
    /// Send queue entries.
    pub(super) sq: u16,
    /// Receive queue entries (the credits granted).
    pub(super) rq: u16,
    /// Entries of our iomap area, where the peer announces its mappings (RDMA_IOMAPSIZE).
    pub(super) iomap: u16,
}

impl Default for Sizes {
    fn default() -> Sizes {
        // def_wmem, def_mem, def_sqsize, def_rqsize (rsocket.c 139-144)
        Sizes {
            sbuf: 1 << 17,
            rbuf: 1 << 17,
            sq: 384,
            rq: 384,
            iomap: 0,
        }
    }
}

impl Sizes {
    /// `rs_set_qp_size`: no more queue entries than buffer bytes per `RS_SNDLOWAT`, at least 2.
    fn fitted(mut self) -> Sizes {
        let lowat = super::ring::SNDLOWAT;
        self.sq = self
            .sq
            .min((self.sbuf / lowat).min(u32::from(u16::MAX)) as u16)
            .max(2);
        self.rq = self
            .rq
            .min((self.rbuf / lowat).min(u32::from(u16::MAX)) as u16)
            .max(2);
        self
    }
}

/// The connection's readable/writable halves (`rs_readable`, `rs_writable`) and its error.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Flow {
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// Up until either side disconnected (`rs_connected`); shutting down one or both
    /// halves leaves it up, so that the data before the shutdown still completes.
    pub(super) up: bool,
    /// A failed completion or post: the errno the next call reports (`rs->err`).
    pub(super) err: c_int,
}

/// A connected rsocket's verbs objects and data-path state.
pub(super) struct Conn {
    pub(super) id: *mut rdma_cm_id,
    pub(super) pd: *mut ibv_pd,
    pub(super) cq: *mut ibv_cq,
    pub(super) qp: *mut ibv_qp,
    pub(super) sbuf: Vec<u8>,
    pub(super) rbuf: Vec<u8>,
    pub(super) tbuf: Vec<u8>,
    pub(super) smr: *mut ibv_mr,
    pub(super) rmr: *mut ibv_mr,
    pub(super) tmr: *mut ibv_mr,
    pub(super) sizes: Sizes,
    /// Where the next message is copied in the send buffer.
    pub(super) soff: u32,
    pub(super) win: SendWindow,
    pub(super) ring: RecvRing,
    pub(super) remote_sgl: Sge,
    pub(super) remote_sge: u32,
    pub(super) swap: bool,
    pub(super) ctrl_inflight: u32,
    pub(super) ctrl_next: u32,
    pub(super) sqe_avail: u32,
    pub(super) flow: Flow,
    /// The peer's iomap area (R2).
    pub(super) remote_iomap: Option<Sge>,
    /// Our riomap'ed buffers.
    pub(super) maps: Vec<super::iomap::IoMap>,
}

// SAFETY: the raw pointers are the shim's verbs objects and this value's own buffers; the
// shim's objects are thread-safe, and the `Conn` is only used under its rsocket's mutex.
unsafe impl Send for Conn {}

impl Conn {
    /// `rs_create_ep`: PD, CQ, QP on `id`, buffers registered, receives posted.
    ///
    /// # Safety
    /// `id` is a live, address-resolved identifier of the shim that outlives the `Conn`.
    pub(super) unsafe fn new(id: *mut rdma_cm_id, sizes: Sizes) -> Result<Conn, c_int> {
        let sizes = sizes.fitted();
        let mut c = Conn {
            id,
            pd: null_mut(),
            cq: null_mut(),
            qp: null_mut(),
            sbuf: vec![0; (sizes.sbuf + CTRL_SLOTS * SGE_LEN as u32) as usize],
            rbuf: vec![0; sizes.rbuf as usize],
            tbuf: vec![0; SGE_LEN * SGL_SIZE as usize + IOMAP_LEN * usize::from(sizes.iomap)],
            smr: null_mut(),
            rmr: null_mut(),
            tmr: null_mut(),
            sizes,
            soff: 0,
            win: SendWindow::new(Sge::default(), 0, sizes.sbuf),
            ring: RecvRing::new(sizes.rbuf, sizes.rq),
            remote_sgl: Sge::default(),
            remote_sge: 1,
            swap: false,
            ctrl_inflight: 0,
            ctrl_next: 0,
            sqe_avail: u32::from(sizes.sq).saturating_sub(CTRL_SLOTS),
            flow: Flow::default(),
            remote_iomap: None,
            maps: Vec::new(),
        };
        // rs_init_bufs: the half not granted in the private data counts as free.
        c.ring.avail = sizes.rbuf / 2;
        // SAFETY: `id` is live (caller's contract).
        unsafe { c.create(id)? };
        Ok(c)
    }

    /// The verbs objects of [`Conn::new`]; what was made is undone by `Drop` on failure.
    unsafe fn create(&mut self, id: *mut rdma_cm_id) -> Result<(), c_int> {
        let err = || super::super::error::errno();
        // SAFETY: `id` is live; its `verbs` is its device's context after resolution.
        let verbs_ctx = unsafe { (*id).verbs };
        // SAFETY: the shim's exports on a live context.
        self.pd = unsafe { crate::ibv_alloc_pd(verbs_ctx) };
        if self.pd.is_null() {
            return Err(err());
        }
        let cqe = c_int::from(self.sizes.sq) + c_int::from(self.sizes.rq);
        // SAFETY: as above; no channel.
        self.cq = unsafe { crate::ibv_create_cq(verbs_ctx, cqe, null_mut(), null_mut(), 0) };
        if self.cq.is_null() {
            return Err(err());
        }
        // SAFETY: plain data, zero is valid.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = self.cq;
        attr.recv_cq = self.cq;
        attr.qp_type = IBV_QPT_RC;
        attr.sq_sig_all = 1;
        attr.cap.max_send_wr = u32::from(self.sizes.sq);
        attr.cap.max_recv_wr = u32::from(self.sizes.rq);
        attr.cap.max_send_sge = 2;
        attr.cap.max_recv_sge = 1;
        // SAFETY: live id, our PD, a local attribute block.
        if unsafe { crate::rdmacm::rdma_create_qp(id, self.pd, &mut attr) } != 0 {
            return Err(err());
        }
        // SAFETY: rdma_create_qp set the identifier's qp.
        self.qp = unsafe { (*id).qp };
        // SAFETY: each buffer is owned by `self` and outlives its region (Drop deregisters
        // first); a Vec's heap bytes do not move when the Conn does.
        unsafe {
            let slen = self.sbuf.len();
            self.smr = verbs::reg(self.pd, self.sbuf.as_mut_ptr(), slen, ACCESS_LOCAL)?;
            let rlen = self.rbuf.len();
            self.rmr = verbs::reg(self.pd, self.rbuf.as_mut_ptr(), rlen, ACCESS_WRITE)?;
            let tlen = self.tbuf.len();
            self.tmr = verbs::reg(self.pd, self.tbuf.as_mut_ptr(), tlen, ACCESS_WRITE)?;
        }
        for _ in 0..self.sizes.rq {
            // SAFETY: our live QP.
            let e = unsafe { verbs::post_recv(self.qp, RECV_ID) };
            if e != 0 {
                return Err(e);
            }
        }
        Ok(())
    }

    /// `rs_format_conn_data` (spec-notes: rsockets.md R1).
    pub(super) fn conn_data(&self) -> ConnData {
        // SAFETY: the regions are live while `self` is.
        let (tkey, rkey) = unsafe { ((*self.tmr).rkey, (*self.rmr).rkey) };
        let net = if cfg!(target_endian = "big") {
            CONN_FLAG_NET
        } else {
            0
        };
        ConnData {
            version: CONN_VERSION,
            flags: CONN_FLAG_IOMAP | net,
            credits: self.sizes.rq,
            target_iomap_size: value_to_scale(u32::from(self.sizes.iomap), 8) as u8,
            target_sgl: Sge {
                addr: self.tbuf.as_ptr() as u64,
                key: tkey,
                length: SGL_SIZE,
            },
            data_buf: Sge {
                addr: self.rbuf.as_ptr() as u64,
                key: rkey,
                length: self.sizes.rbuf / 2,
            },
        }
    }

    /// `rs_save_conn_data` (R2): the peer's target SGL, first buffer and credits.
    pub(super) fn save(&mut self, peer: &ConnData) {
        self.remote_sgl = peer.target_sgl;
        self.remote_sge = 1;
        self.swap = peer.needs_swap();
        self.remote_iomap = peer.remote_iomap();
        self.win = SendWindow::new(peer.data_buf, peer.credits, self.sizes.sbuf);
        self.flow = Flow {
            readable: true,
            writable: true,
            up: true,
            err: 0,
        };
    }

    /// Whether the connection still counts as up (`rs_connected`).
    pub(super) fn connected(&self) -> bool {
        self.flow.up && self.flow.err == 0
    }

    /// Entries of the target SGL the peer wrote since we last looked: taken into the send
    /// window where it has used up its entry, and cleared in memory (R5).
    pub(super) fn refresh_targets(&mut self) {
        for i in 0..SGL_SIZE as usize {
            let at = self.tbuf[i * SGE_LEN..].as_mut_ptr();
            let mut b = [0u8; SGE_LEN];
            for (k, byte) in b.iter_mut().enumerate() {
                // SAFETY: inside `tbuf`; volatile because the engine writes it for the peer.
                *byte = unsafe { std::ptr::read_volatile(at.add(k)) };
            }
            let sge = Sge::from_update_bytes(&b);
            if sge.length == 0 || self.win.target[i].length != 0 {
                continue;
            }
            self.win.target[i] = sge;
            for k in 12..SGE_LEN {
                // SAFETY: inside `tbuf`.
                unsafe { std::ptr::write_volatile(at.add(k), 0) };
            }
        }
    }
}
