//! The engine's transmit batch: packets taken out of QPs and not yet sent, each in a
//! `MAX_PACKET` slot, sent in `sendmmsg` batches (GSO runs where the link has them) and
//! resealed for the IPv4 identifications the kernel gives GSO segments.
//!
//! Back-pressure: a send that fails with EAGAIN or ENOBUFS keeps its packets (`Flushed::
//! Blocked`); other send errors lose the packet as the wire would, and retransmission
//! recovers it.

use std::io;
use std::time::Instant;

use super::link::{gso_run, GatherRef, GsoKey, Link, OutDatagram};
use crate::transport::{Counters, Gather, Transmit, MAX_PACKET};
use crate::wire::ICRC_LEN;

/// Packets taken out of QPs before they are sent in one batch.
pub(super) const TX_SLOTS: usize = 64;

/// What a flush did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flushed {
    /// Nothing was pending.
    Nothing,
    /// Every packet went (or was lost): the batch is empty.
    All,
    /// Back-pressure: the rest waits for send space.
    Blocked,
}

/// Packets taken out of QPs and not yet sent: one `MAX_PACKET` slot each.
pub(super) struct TxBatch {
    pub(super) buf: Vec<u8>,
    pub(super) meta: Vec<Transmit>,
    /// The IPv4 identification each packet's ICRC was computed for (0 from the transport;
    /// see `Engine::reseal`).
    pub(super) ids: Vec<u16>,
    /// Each packet's payload left in its region, if it was (`Gather`; only when the link
    /// gathers): the slot then holds the headers, the pad and the ICRC.
    pub(super) gathers: Vec<Option<Gather>>,
    /// Packets before this one are sent.
    pub(super) head: usize,
    /// An empty vector kept for its allocation: the datagram list of each flush (see
    /// `Engine::flush`).
    spare: Vec<OutDatagram<'static>>,
}

impl TxBatch {
    pub(super) fn new() -> TxBatch {
        TxBatch {
            buf: vec![0u8; TX_SLOTS * MAX_PACKET],
            meta: Vec::with_capacity(TX_SLOTS),
            ids: Vec::with_capacity(TX_SLOTS),
            gathers: Vec::with_capacity(TX_SLOTS),
            head: 0,
            spare: Vec::with_capacity(TX_SLOTS),
        }
    }

    pub(super) fn pending(&self) -> bool {
        self.head < self.meta.len()
    }

    /// How many packets wait to be sent.
    pub(super) fn waiting(&self) -> usize {
        self.meta.len() - self.head
    }

    /// Forgets every packet (all sent or lost).
    pub(super) fn clear(&mut self) {
        self.meta.clear();
        self.ids.clear();
        self.gathers.clear();
        self.head = 0;
    }

    /// The next free slot, if any.
    pub(super) fn free_slot(&mut self) -> Option<&mut [u8]> {
        let i = self.meta.len();
        (i < TX_SLOTS).then(|| &mut self.buf[i * MAX_PACKET..(i + 1) * MAX_PACKET])
    }

    /// Sends the pending packets on `link` (`gather`: payloads from their regions). Stops at
    /// EAGAIN or ENOBUFS, keeping the rest. The regions that gathered payloads come from are
    /// pinned for the send; a packet whose region the application took back meanwhile is
    /// lost (counted in `send_err`), as one the wire dropped, and its request fails on the
    /// retransmission's read. `ipv4`: the device's packets carry an IPv4 identification,
    /// which GSO runs are resealed for.
    pub(super) fn flush(
        &mut self,
        link: &mut dyn Link,
        gather: bool,
        counters: &Counters,
        ipv4: bool,
    ) -> Flushed {
        if !self.pending() {
            return Flushed::Nothing;
        }
        loop {
            if ipv4 {
                self.reseal(self.head, link.gso_max_segments());
            }
            match self.send_some(link, gather, counters) {
                // Stopped after a lost packet: send the rest, sealed for their new runs.
                None => continue,
                Some(f) => return f,
            }
        }
    }

    /// One try at sending what is pending: the outcome, or None when a packet was lost and
    /// the rest must be resealed and sent again.
    fn send_some(
        &mut self,
        link: &mut dyn Link,
        gather: bool,
        counters: &Counters,
    ) -> Option<Flushed> {
        let n = self.meta.len();
        let mut pins: [Option<crate::memory::Pinned<'_>>; TX_SLOTS] = [const { None }; TX_SLOTS];
        let mut refs: [Option<GatherRef>; TX_SLOTS] = [None; TX_SLOTS];
        // Packets from `end` on wait for the next flush: the one at `end` cannot be sent.
        let mut end = n;
        for i in self.head..n {
            let Some(g) = &self.gathers[i] else {
                continue;
            };
            let pinned = g.bytes.pin().ok();
            let Some(ptr) = pinned.as_ref().and_then(|p| p.ptr(g.offset, g.len)) else {
                end = i;
                break;
            };
            refs[i] = Some(GatherRef {
                at: g.at,
                ptr,
                len: g.len,
            });
            pins[i] = pinned;
        }
        // The datagram list borrows the batch buffer; it reuses the allocation of `spare`
        // (an empty vector of any lifetime has the same layout), so a flush allocates nothing.
        let mut ds: Vec<OutDatagram<'_>> = std::mem::take(&mut self.spare)
            .into_iter()
            .map(|_| unreachable!("spare is empty"))
            .collect();
        ds.extend(self.meta[..end].iter().enumerate().map(|(i, t)| {
            // A gathered packet's slot holds all of it but the payload.
            let len = t.len - refs[i].map_or(0, |g| g.len);
            OutDatagram {
                src_port: t.src_port,
                dst: t.dst,
                hop_limit: t.hop_limit,
                traffic_class: t.traffic_class,
                payload: &self.buf[i * MAX_PACKET..i * MAX_PACKET + len],
            }
        }));
        let at = Instant::now();
        let mut head = self.head;
        let mut blocked = false;
        while head < ds.len() {
            let (sent, err) = if gather {
                link.send_gathered(at, &ds[head..], &refs[head..ds.len()])
            } else {
                link.send_batch(at, &ds[head..])
            };
            head += sent;
            let Some(e) = err else { continue };
            if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) {
                // Back-pressure, not loss: keep the packet for when there is room.
                blocked = true;
                break;
            }
            // Lost like a packet dropped on the wire; retransmission recovers it.
            Counters::inc(&counters.send_err);
            head += 1;
            if head < ds.len() {
                // The runs after the lost packet start elsewhere: seal them for that. (The
                // datagram list borrows the buffer, so it is rebuilt: errors are rare.)
                break;
            }
        }
        ds.clear();
        self.spare = ds.into_iter().map(|_| unreachable!("cleared")).collect();
        drop(pins);
        if head == end && end < n && !blocked {
            // Everything before it went: the packet whose region is gone is lost.
            Counters::inc(&counters.send_err);
            head += 1;
        }
        if head >= n {
            self.clear();
            return Some(Flushed::All);
        }
        self.head = head;
        if blocked {
            Some(Flushed::Blocked)
        } else {
            None
        }
    }

    /// Seals the IPv4 packets from `from` on for the identifications the link's GSO sends
    /// will give them (at most `max` segments a run): segment k of a run gets k (see
    /// `Link::gso_max_segments`). Packets already sealed for their identification are left
    /// alone, so without GSO nothing is computed twice.
    pub(super) fn reseal(&mut self, from: usize, max: usize) {
        let n = self.meta.len();
        let mut i = from;
        while i < n {
            let (meta, buf) = (&self.meta, &self.buf);
            let run = gso_run(n - i, max, |k| {
                let t = &meta[i + k];
                GsoKey {
                    src_port: t.src_port,
                    dst: t.dst,
                    hop_limit: t.hop_limit,
                    traffic_class: t.traffic_class,
                    len: t.len,
                    // As `OutDatagram::gso_key` reads it: the BTH's byte 5.
                    steer: buf[(i + k) * MAX_PACKET + 5],
                }
            });
            for k in i..i + run {
                let id = (k - i) as u16;
                let t = self.meta[k];
                if self.ids[k] != id && t.dst.is_ipv4() {
                    let slot = &mut self.buf[k * MAX_PACKET..(k + 1) * MAX_PACKET];
                    match &self.gathers[k] {
                        // The ICRC ends the slot's bytes, which lack the payload.
                        Some(g) => {
                            let icrc = t.len - g.len - ICRC_LEN;
                            crate::wire::icrc::reseal_ipv4_id_of(
                                &mut slot[icrc..icrc + ICRC_LEN],
                                t.len - ICRC_LEN,
                                self.ids[k],
                                id,
                            );
                        }
                        None => {
                            crate::wire::icrc::reseal_ipv4_id(&mut slot[..t.len], self.ids[k], id)
                        }
                    }
                }
                self.ids[k] = id;
            }
            i += run;
        }
    }
}
