//! The two ends of a stream rsocket's data path as plain bookkeeping, without I/O: where the
//! sender may write next in the peer's receive buffer and when it must wait for credits, and
//! how the receiver consumes its buffer and decides to grant more (spec-notes: rsockets.md R5).
//! Mirrors the counters of rsocket.c v44.0 (`rs_write_data` 1859-1885, `rs_can_send`
//! 2366-2377, `rs_give_credits` 1984-1995, `rrecv` 2514-2583).

use std::collections::VecDeque;

use super::proto::{Sge, SGL_SIZE};

/// Below this many free send-buffer bytes a sender waits (`RS_SNDLOWAT`).
pub const SNDLOWAT: u32 = 2048;

/// The sender's view: the peer's buffers it was granted and its sequence window.
#[derive(Debug)]
pub struct SendWindow {
    /// The peer's granted buffers (`target_sgl`), written in turn.
    pub target: [Sge; SGL_SIZE as usize],
    /// The entry written next (`target_sge`).
    pub next: usize,
    /// Messages sent (`sseq_no`, 16 bits as rsocket.c keeps it).
    pub sseq_no: u16,
    /// Messages the peer allows (`sseq_comp`).
    pub sseq_comp: u16,
    /// Free bytes of our own send buffer.
    pub sbuf_avail: u32,
}

impl SendWindow {
    /// Starts from the peer's private data: its data buffer and its credits (R2).
    pub fn new(data_buf: Sge, credits: u16, sbuf_size: u32) -> SendWindow {
        SendWindow {
            target: [data_buf, Sge::default()],
            next: 0,
            sseq_no: 0,
            sseq_comp: credits,
            sbuf_avail: sbuf_size,
        }
    }

    /// Whether a data message may be written now (given a free send queue entry).
    pub fn can_send(&self) -> bool {
        self.sbuf_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target[self.next].length != 0
    }

    /// Bytes the next message may carry out of `left` wanted, at most `cap` (the growing
    /// overlap size of `rsend`).
    pub fn chunk(&self, left: u32, cap: u32) -> u32 {
        left.min(cap)
            .min(self.sbuf_avail)
            .min(self.target[self.next].length)
    }

    /// Takes `len` bytes of the current target: where to write them (addr, rkey). Moves to
    /// the next entry when this one is used up.
    pub fn take(&mut self, len: u32) -> (u64, u32) {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sbuf_avail -= len;
        let t = &mut self.target[self.next];
        let at = (t.addr, t.key);
        t.addr += u64::from(len);
        t.length -= len;
        if t.length == 0 {
            self.next = (self.next + 1) % SGL_SIZE as usize;
        }
        at
    }

    /// A credit update arrived: the SGL entry the peer wrote (at `index`) and the data of its
    /// SGL immediate.
    pub fn credit(&mut self, index: usize, sge: Option<Sge>, imm_data: u32) {
        if let (Some(s), Some(slot)) = (sge, self.target.get_mut(index)) {
            *slot = s;
        }
        self.sseq_comp = imm_data as u16;
    }

    /// A data write completed locally: its bytes of the send buffer are free again.
    pub fn completed(&mut self, len: u32) {
        self.sbuf_avail += len;
    }
}

/// The receiver's view of its buffer: messages written into it, read in order.
#[derive(Debug)]
pub struct RecvRing {
    /// Buffer size (the peer is granted halves of it).
    pub size: u32,
    /// Where the next unread byte is.
    pub offset: u32,
    /// Bytes read and not yet granted again.
    pub avail: u32,
    /// Where the next granted half starts.
    pub free_offset: u32,
    /// Messages fully read (`rseq_no`).
    pub rseq_no: u16,
    /// The sequence number at which credits are due again (`rseq_comp`).
    pub rseq_comp: u16,
    /// Receive queue size: credits granted ahead of `rseq_no`.
    pub rq_size: u16,
    /// Unread bytes of each message received.
    msgs: VecDeque<u32>,
}

impl RecvRing {
    /// A buffer whose first half was granted in the private data.
    pub fn new(size: u32, rq_size: u16) -> RecvRing {
        RecvRing {
            size,
            offset: 0,
            avail: 0,
            free_offset: size / 2,
            rseq_no: 0,
            rseq_comp: rq_size / 2,
            rq_size,
            msgs: VecDeque::new(),
        }
    }

    /// A DATA immediate arrived for `len` bytes.
    pub fn arrived(&mut self, len: u32) {
        self.msgs.push_back(len);
    }

    /// Unread bytes.
    pub fn readable(&self) -> u64 {
        self.msgs.iter().map(|&m| u64::from(m)).sum()
    }

    /// Consumes up to `want` bytes: the (offset, length) spans to copy out, in order.
    pub fn read(&mut self, mut want: u32) -> Vec<(u32, u32)> {
        let mut spans = Vec::new();
        while want > 0 {
            let Some(head) = self.msgs.front_mut() else {
                break;
            };
            let mut n = want.min(*head);
            *head -= n;
            if *head == 0 {
                self.msgs.pop_front();
                self.rseq_no = self.rseq_no.wrapping_add(1);
            }
            want -= n;
            while n > 0 {
                let part = n.min(self.size - self.offset);
                spans.push((self.offset, part));
                self.offset = (self.offset + part) % self.size;
                self.avail += part;
                n -= part;
            }
        }
        spans
    }

    /// Whether credits are due: half the buffer is free, or the peer is near its sequence
    /// limit (`rs_give_credits`, without the control-queue and state checks).
    pub fn credits_due(&self) -> bool {
        self.avail >= self.size / 2 || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0
    }

    /// Grants credits (`rs_send_credits`): the immediate's data and, when half the buffer is
    /// free, the buffer offset and length of the half to grant.
    pub fn grant(&mut self) -> (u32, Option<(u32, u32)>) {
        self.rseq_comp = self.rseq_no.wrapping_add(self.rq_size / 2);
        let imm = u32::from(self.rseq_no.wrapping_add(self.rq_size));
        if self.avail < self.size / 2 {
            return (imm, None);
        }
        let half = (self.free_offset, self.size / 2);
        self.avail -= self.size / 2;
        self.free_offset += self.size / 2;
        if self.free_offset >= self.size {
            self.free_offset = 0;
        }
        (imm, Some(half))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_walks_the_granted_halves_and_waits_for_credits() {
        let first = Sge {
            addr: 0x1000,
            key: 7,
            length: 8192,
        };
        let mut w = SendWindow::new(first, 2, 65536);
        assert!(w.can_send());
        assert_eq!(w.chunk(100_000, 65536), 8192);
        assert_eq!(w.take(4096), (0x1000, 7));
        assert_eq!(w.take(4096), (0x2000, 7));
        // the half is used up and the credits too: nothing until an update
        assert!(!w.can_send());
        assert_eq!(w.next, 1);
        w.credit(
            1,
            Some(Sge {
                addr: 0x3000,
                key: 7,
                length: 8192,
            }),
            4,
        );
        assert!(w.can_send());
        assert_eq!(w.take(10), (0x3000, 7));
        assert_eq!(w.sbuf_avail, 65536 - 8202);
        w.completed(8202);
        assert_eq!(w.sbuf_avail, 65536);
    }

    #[test]
    fn receiver_wraps_and_grants_halves() {
        let mut r = RecvRing::new(16, 4);
        r.arrived(8);
        r.arrived(8);
        assert_eq!(r.readable(), 16);
        assert_eq!(r.read(5), vec![(0, 5)]);
        assert!(!r.credits_due());
        assert_eq!(r.read(11), vec![(5, 3), (8, 8)]);
        assert_eq!((r.offset, r.avail, r.rseq_no), (0, 16, 2));
        assert!(r.credits_due());
        assert_eq!(r.grant(), (6, Some((8, 8))));
        assert_eq!(r.grant(), (6, Some((0, 8))));
        assert_eq!(r.grant(), (6, None));
        // a message written across the end of the buffer reads as two spans
        r.offset = 12;
        r.arrived(8);
        assert_eq!(r.read(100), vec![(12, 4), (0, 4)]);
    }
}
