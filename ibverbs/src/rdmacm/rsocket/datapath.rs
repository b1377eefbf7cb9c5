//! A connected rsocket's data path: completions (`rs_poll_cq`), credit updates
//! (`rs_send_credits`), control messages, and the copies of `rsend`/`rrecv` (spec-notes:
//! rsockets.md R5, R10, R11-R13).

use libc::c_int;

use super::conn::{Conn, Flow, MAX_TRANSFER};
use super::proto::{imm_decode, imm_encode, Op, Sge, CTRL_DISCONNECT, CTRL_SHUTDOWN, SGE_LEN};
use super::verbs::{self, Write};

impl Conn {
    /// Takes every completion (`rs_poll_cq`), then reposts the receives used.
    pub(super) fn poll(&mut self) {
        let mut used = 0u32;
        loop {
            // SAFETY: our live CQ.
            let wc = match unsafe { verbs::poll_one(self.cq) } {
                Ok(Some(wc)) => wc,
                Ok(None) => break,
                Err(e) => {
                    self.flow.err = e;
                    break;
                }
            };
            if wc.wr_id == super::conn::RECV_ID {
                if !wc.ok {
                    continue;
                }
                used += 1;
                if let Some(imm) = wc.imm {
                    self.received(imm);
                }
            } else {
                self.sent(wc.wr_id as u32);
                if !wc.ok && self.connected() {
                    self.flow.err = libc::EIO;
                }
            }
        }
        if !self.connected() {
            return;
        }
        for _ in 0..used {
            // SAFETY: our live QP.
            let e = unsafe { verbs::post_recv(self.qp, super::conn::RECV_ID) };
            if e != 0 {
                self.flow.err = e;
                return;
            }
        }
    }

    /// One received message (R3): data, a credit update, or a control message.
    fn received(&mut self, imm: u32) {
        match imm_decode(imm) {
            (Op::Data, len) => self.ring.arrived(len),
            (Op::Sgl, seq) => {
                self.refresh_targets();
                self.win.sseq_comp = seq as u16;
            }
            (Op::Ctrl, CTRL_DISCONNECT) => self.flow = Flow::default(),
            (Op::Ctrl, CTRL_SHUTDOWN) => {
                if self.flow.writable {
                    self.flow.readable = false;
                } else {
                    self.flow = Flow::default();
                }
            }
            // iomap updates, keepalives and reserved ops carry nothing to act on here
            _ => {}
        }
    }

    /// One send completion: its work request id is the immediate it carried.
    fn sent(&mut self, msg: u32) {
        match imm_decode(msg) {
            (Op::Sgl, _) => self.ctrl_inflight = self.ctrl_inflight.saturating_sub(1),
            (Op::Ctrl, what) => {
                self.ctrl_inflight = self.ctrl_inflight.saturating_sub(1);
                if what == CTRL_DISCONNECT {
                    self.flow.up = false;
                }
            }
            (Op::IomapSgl, _) => {
                self.sqe_avail += 1;
                self.win.completed(24);
            }
            (_, len) => {
                self.sqe_avail += 1;
                self.win.completed(len);
            }
        }
    }

    /// `rs_update_credits`: grants credits when due and a control slot is free.
    pub(super) fn update_credits(&mut self) {
        if self.connected()
            && self.ctrl_inflight < super::conn::CTRL_SLOTS
            && self.ring.credits_due()
        {
            self.send_credits();
        }
    }

    /// `rs_send_credits` (R5): the free half's SGE into the peer's target SGL, or the SGL
    /// immediate alone.
    fn send_credits(&mut self) {
        let (seq, half) = self.ring.grant();
        let imm = imm_encode(Op::Sgl, seq);
        let Some((off, len)) = half else {
            self.post_ctrl(imm, None);
            return;
        };
        // SAFETY: the region is live while `self` is.
        let key = unsafe { (*self.rmr).rkey };
        let sge = Sge {
            addr: self.rbuf.as_ptr() as u64 + u64::from(off),
            key,
            length: len,
        };
        let remote = (
            self.remote_sgl.addr + u64::from(self.remote_sge) * SGE_LEN as u64,
            self.remote_sgl.key,
        );
        self.post_ctrl(imm, Some((sge.to_update_bytes(self.swap), remote)));
        self.remote_sge += 1;
        if self.remote_sge >= self.remote_sgl.length {
            self.remote_sge = 0;
        }
    }

    /// Posts a control message from the next control slot, with 16 bytes to write or none.
    fn post_ctrl(&mut self, imm: u32, body: Option<([u8; SGE_LEN], (u64, u32))>) {
        self.ctrl_inflight += 1;
        let slot = self.sizes.sbuf as usize + (self.ctrl_next as usize % 4) * SGE_LEN;
        self.ctrl_next = self.ctrl_next.wrapping_add(1);
        // SAFETY: the region is live while `self` is.
        let lkey = unsafe { (*self.smr).lkey };
        let (local, remote) = match body {
            Some((bytes, remote)) => {
                self.sbuf[slot..slot + SGE_LEN].copy_from_slice(&bytes);
                let at = self.sbuf[slot..].as_ptr() as u64;
                ((at, SGE_LEN as u32, lkey), remote)
            }
            None => ((0, 0, 0), (0, 0)),
        };
        let w = Write {
            local,
            remote,
            imm: Some(imm),
            wr_id: u64::from(imm),
        };
        // SAFETY: our live QP; the slot lies in the send region.
        let e = unsafe { verbs::post_write(self.qp, &w) };
        if e != 0 {
            self.ctrl_inflight -= 1;
            self.flow.err = e;
        }
    }

    /// Sends a control message (`rshutdown`'s SHUTDOWN or DISCONNECT) when a slot is free;
    /// false when none is.
    pub(super) fn send_ctrl(&mut self, what: u32) -> bool {
        if self.ctrl_inflight >= super::conn::CTRL_SLOTS {
            return false;
        }
        self.post_ctrl(imm_encode(Op::Ctrl, what), None);
        true
    }

    /// Whether every message posted has completed, or the connection is down
    /// (`rs_conn_all_sends_done`).
    pub(super) fn all_sends_done(&self) -> bool {
        (self.ctrl_inflight == 0
            && self.sqe_avail + super::conn::CTRL_SLOTS >= u32::from(self.sizes.sq))
            || !self.connected()
    }

    /// `rs_can_send`: a free WR, send-buffer room and credits and target room.
    pub(super) fn can_send(&self) -> bool {
        self.sqe_avail > 0 && self.win.can_send()
    }

    /// Bytes that can be read now (`rs_have_rdata`).
    pub(super) fn readable_bytes(&self) -> u64 {
        self.ring.readable()
    }

    /// Writes as many messages of `buf` as the window allows (rsend's loop body); the bytes
    /// taken, with `olen` the growing message size kept across calls of one rsend.
    pub(super) fn send_some(&mut self, buf: &[u8], olen: &mut u32) -> Result<usize, c_int> {
        let mut done = 0usize;
        while done < buf.len() && self.can_send() {
            let want = next_size(olen, buf.len() - done);
            let n = self
                .win
                .chunk(want, MAX_TRANSFER)
                .min(self.sizes.sbuf - self.soff);
            let at = self.soff as usize;
            self.sbuf[at..at + n as usize].copy_from_slice(&buf[done..done + n as usize]);
            self.sqe_avail -= 1;
            let (addr, rkey) = self.win.take(n);
            // SAFETY: the region is live while `self` is.
            let lkey = unsafe { (*self.smr).lkey };
            let imm = imm_encode(Op::Data, n);
            let w = Write {
                local: (self.sbuf[at..].as_ptr() as u64, n, lkey),
                remote: (addr, rkey),
                imm: Some(imm),
                wr_id: u64::from(imm),
            };
            // SAFETY: our live QP; the bytes lie in the send region.
            let e = unsafe { verbs::post_write(self.qp, &w) };
            if e != 0 {
                self.flow.err = e;
                return if done > 0 { Ok(done) } else { Err(e) };
            }
            self.soff = (self.soff + n) % self.sizes.sbuf;
            done += n as usize;
        }
        Ok(done)
    }

    /// Copies out up to `buf.len()` received bytes in order (rrecv's loop body).
    pub(super) fn recv_some(&mut self, buf: &mut [u8]) -> usize {
        let want = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let mut done = 0usize;
        for (off, len) in self.ring.read(want) {
            let (off, len) = (off as usize, len as usize);
            buf[done..done + len].copy_from_slice(&self.rbuf[off..off + len]);
            done += len;
        }
        done
    }
}

/// The size of the next message of a send of `left` more bytes: all of them, or the growing
/// overlap size `olen` (2 KiB doubling to 64 KiB) when more remain (rsend, riowrite).
pub(super) fn next_size(olen: &mut u32, left: usize) -> u32 {
    let left = u32::try_from(left).unwrap_or(u32::MAX);
    if *olen >= left {
        return left;
    }
    let w = *olen;
    *olen = (*olen << 1).min(MAX_TRANSFER);
    w
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: each object was made by `create` (or is null) and is destroyed once, the
        // QP before the CQ and the regions before the PD.
        unsafe {
            if !self.qp.is_null() {
                crate::rdmacm::rdma_destroy_qp(self.id);
            }
            if !self.cq.is_null() {
                crate::ibv_destroy_cq(self.cq);
            }
            let maps = self.maps.iter().map(|m| m.mr);
            for mr in [self.smr, self.rmr, self.tmr].into_iter().chain(maps) {
                if !mr.is_null() {
                    crate::ibv_dereg_mr(mr);
                }
            }
            if !self.pd.is_null() {
                crate::ibv_dealloc_pd(self.pd);
            }
        }
    }
}
