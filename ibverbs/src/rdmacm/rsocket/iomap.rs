//! riomap, riounmap and riowrite (spec-notes: rsockets.md R9, R17): a buffer mapped for
//! writing is announced to the peer by an `rs_iomap` written into its iomap area (after its
//! target SGL) with immediate `IOMAP_SGL | index`; riowrite finds the offset among the
//! mappings the peer announced in our own area and RDMA WRITEs there, with no immediate.
//! Follows rsocket.c v44.0 `riomap` 4029, `riounmap` 4078, `rs_find_iomap` 4113, `riowrite`
//! 4125, `rs_send_iomaps` 2635.

use libc::c_int;

use super::conn::{Conn, OLAP_START};
use super::proto::{imm_encode, Op, Sge, IOMAP_LEN, SGE_LEN, SGL_SIZE};
use super::verbs::{self, Write, ACCESS_LOCAL, ACCESS_WRITE};
use crate::ffi::ibv_mr;

/// One local mapping (`struct rs_iomap_mr`).
pub(super) struct IoMap {
    pub(super) mr: *mut ibv_mr,
    offset: u64,
    /// Its entry in the peer's iomap area; `None` for a mapping not open to writes.
    index: Option<u32>,
    /// Whether the peer has been sent it.
    sent: bool,
}

/// An `rs_iomap` as the peer wrote it (host order, or swapped by the writer).
fn iomap_bytes(offset: u64, sge: Sge, swap: bool) -> [u8; IOMAP_LEN] {
    let mut b = [0u8; IOMAP_LEN];
    let o = if swap { offset.swap_bytes() } else { offset };
    b[..8].copy_from_slice(&o.to_ne_bytes());
    b[8..].copy_from_slice(&sge.to_update_bytes(swap));
    b
}

impl Conn {
    /// `riomap`: registers `len` bytes at `buf` (remote write when `writable`) and, when
    /// writable, queues it for the peer in the first free entry of its iomap area. The offset
    /// it maps to (`offset`, or the buffer's address for -1), or an errno: ENOMEM when the
    /// peer's area is full.
    ///
    /// # Safety
    /// The bytes stay allocated until riounmap.
    pub(super) unsafe fn map(
        &mut self,
        buf: *mut u8,
        len: usize,
        writable: bool,
        offset: i64,
    ) -> Result<i64, c_int> {
        let index = if writable {
            let size = self.remote_iomap.map_or(0, |r| r.length);
            let free = (0..size).find(|i| self.maps.iter().all(|m| m.index != Some(*i)));
            Some(free.ok_or(libc::ENOMEM)?)
        } else {
            None
        };
        let access = if writable { ACCESS_WRITE } else { ACCESS_LOCAL };
        // SAFETY: forwarded contract.
        let mr = unsafe { verbs::reg(self.pd, buf, len, access)? };
        let offset = if offset == -1 { buf as i64 } else { offset };
        self.maps.push(IoMap {
            mr,
            offset: offset as u64,
            index,
            sent: index.is_none(),
        });
        Ok(offset)
    }

    /// `riounmap`: forgets the mapping of exactly `buf` and `len`; EINVAL when none is.
    pub(super) fn unmap(&mut self, buf: *mut u8, len: usize) -> Result<(), c_int> {
        let at = self.maps.iter().position(|m| {
            // SAFETY: a live region of ours.
            let (a, l) = unsafe { ((*m.mr).addr, (*m.mr).length) };
            a as *mut u8 == buf && l == len
        });
        let m = self.maps.remove(at.ok_or(libc::EINVAL)?);
        // SAFETY: a region of ours, deregistered once.
        unsafe { crate::ibv_dereg_mr(m.mr) };
        Ok(())
    }

    /// `rs_send_iomaps`: sends the mappings not yet announced while the window allows; true
    /// when none is left waiting (data may follow).
    pub(super) fn send_iomaps(&mut self) -> bool {
        while let Some(i) = self.maps.iter().position(|m| !m.sent) {
            let Some(remote) = self.remote_iomap else {
                return true;
            };
            if !self.can_send() {
                return false;
            }
            if self.sizes.sbuf - self.soff < IOMAP_LEN as u32 {
                self.soff = 0;
            }
            let m = &self.maps[i];
            let index = m.index.unwrap_or(0);
            // SAFETY: a live region of ours.
            let (addr, length, key) =
                unsafe { ((*m.mr).addr as u64, (*m.mr).length, (*m.mr).rkey) };
            let sge = Sge {
                addr,
                key,
                length: length as u32,
            };
            let at = self.soff as usize;
            self.sbuf[at..at + IOMAP_LEN].copy_from_slice(&iomap_bytes(m.offset, sge, self.swap));
            self.maps[i].sent = true;
            self.win.sseq_no = self.win.sseq_no.wrapping_add(1);
            self.win.sbuf_avail -= IOMAP_LEN as u32;
            self.sqe_avail -= 1;
            let imm = imm_encode(Op::IomapSgl, index);
            // SAFETY: the region is live while `self` is.
            let lkey = unsafe { (*self.smr).lkey };
            let w = Write {
                local: (self.sbuf[at..].as_ptr() as u64, IOMAP_LEN as u32, lkey),
                remote: (
                    remote.addr + u64::from(index) * IOMAP_LEN as u64,
                    remote.key,
                ),
                imm: Some(imm),
                wr_id: u64::from(imm),
            };
            self.soff = (self.soff + IOMAP_LEN as u32) % self.sizes.sbuf;
            // SAFETY: our live QP; the bytes lie in the send region.
            let e = unsafe { verbs::post_write(self.qp, &w) };
            if e != 0 {
                self.flow.err = e;
                return false;
            }
        }
        true
    }

    /// `rs_find_iomap`: the peer's mapping covering `offset` in our iomap area, as
    /// (its offset, where it is).
    fn find_iomap(&self, offset: u64) -> Option<(u64, Sge)> {
        let base = SGE_LEN * SGL_SIZE as usize;
        (0..self.sizes.iomap as usize).find_map(|i| {
            let at = self.tbuf[base + i * IOMAP_LEN..].as_ptr();
            let mut b = [0u8; IOMAP_LEN];
            for (k, byte) in b.iter_mut().enumerate() {
                // SAFETY: inside `tbuf`; volatile because the engine writes it for the peer.
                *byte = unsafe { std::ptr::read_volatile(at.add(k)) };
            }
            let off = u64::from_ne_bytes(b[..8].try_into().unwrap_or_default());
            let sge = Sge::from_update_bytes(&b[8..].try_into().unwrap_or_default());
            let end = off.saturating_add(u64::from(sge.length));
            (sge.length > 0 && offset >= off && offset < end).then_some((off, sge))
        })
    }

    /// riowrite's loop body: RDMA WRITEs of `buf` at `offset` into the peer's mappings while
    /// the window allows; the bytes written and whether no mapping covers the next offset.
    pub(super) fn write_direct(
        &mut self,
        buf: &[u8],
        offset: u64,
        olen: &mut u32,
    ) -> Result<(usize, bool), c_int> {
        let mut done = 0usize;
        while done < buf.len() && self.can_send() {
            let at_off = offset + done as u64;
            let Some((moff, sge)) = self.find_iomap(at_off) else {
                return Ok((done, true));
            };
            let want = super::datapath::next_size(olen, buf.len() - done);
            let room = (moff + u64::from(sge.length) - at_off).min(u64::from(u32::MAX)) as u32;
            let n = want
                .min(self.win.sbuf_avail)
                .min(room)
                .min(self.sizes.sbuf - self.soff);
            let at = self.soff as usize;
            self.sbuf[at..at + n as usize].copy_from_slice(&buf[done..done + n as usize]);
            self.sqe_avail -= 1;
            self.win.sbuf_avail -= n;
            // SAFETY: the region is live while `self` is.
            let lkey = unsafe { (*self.smr).lkey };
            let w = Write {
                local: (self.sbuf[at..].as_ptr() as u64, n, lkey),
                remote: (sge.addr + (at_off - moff), sge.key),
                imm: None,
                wr_id: u64::from(imm_encode(Op::Other(2), n)),
            };
            // SAFETY: our live QP; the bytes lie in the send region.
            let e = unsafe { verbs::post_write(self.qp, &w) };
            if e != 0 {
                self.flow.err = e;
                return if done > 0 { Ok((done, false)) } else { Err(e) };
            }
            self.soff = (self.soff + n) % self.sizes.sbuf;
            done += n as usize;
        }
        Ok((done, false))
    }
}

impl super::stream::Rs {
    /// `riowrite`: bytes written into the peer's mappings from `offset` (fewer when no
    /// mapping covers the rest), or an errno as rsend's.
    pub(super) fn iowrite(&self, buf: &[u8], offset: u64, flags: c_int) -> Result<usize, c_int> {
        let mut olen = OLAP_START;
        self.push(buf.len(), flags, |conn, done| {
            conn.write_direct(&buf[done..], offset + done as u64, &mut olen)
        })
    }
}
