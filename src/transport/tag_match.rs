//! Tag matching in software (mlx5's hardware tag matching, `IBV_SRQT_TM`): the tag list of a
//! TM SRQ, the operations that edit it (`ibv_post_srq_ops`: `IBV_WR_TAG_ADD`, `_DEL`,
//! `_SYNC`), and the matching of an incoming SEND's tag matching header (`struct ibv_tmh`)
//! against it. No I/O: the SRQ holds a [`TagList`] under its lock, and the responder asks it
//! where a message goes (spec-notes/beyond-rxe.md rule 13).
//!
//! Rules:
//! - A message's first 16 payload bytes are its TMH: opcode (`IBV_TMH_NO_TAG` 0, `_RNDV` 1,
//!   `_FIN` 2, `_EAGER` 3), three reserved bytes, `app_ctx` and `tag`, big-endian.
//! - An EAGER or RNDV message whose tag matches an entry (`tmh.tag & mask == tag & mask`, the
//!   oldest matching entry first) consumes that entry: EAGER data lands in the entry's buffer
//!   without the TMH. Any other message goes to an ordinary receive of the SRQ whole; an
//!   unmatched EAGER or RNDV message is "unexpected" and counted.
//! - Phase synchronisation: an operation with `IBV_OPS_TM_SYNC` reports how many unexpected
//!   messages software has handled; while that count is behind the device's, entries added
//!   are not matched, and the operation's completion asks for a sync (`IBV_WC_TM_SYNC_REQ`).

use std::collections::VecDeque;

use super::wqe::RecvWqe;

/// Bytes of the tag matching header (`struct ibv_tmh`).
pub const TMH_LEN: usize = 16;
/// Bytes of the rendezvous header (`struct ibv_rvh`) that follows an RNDV TMH.
pub const RVH_LEN: usize = 16;
/// The largest tag list of a TM SRQ (`tm_caps.max_num_tags`).
pub const MAX_NUM_TAGS: u32 = 1024;
/// The most list operations outstanding (`tm_caps.max_ops`); operations complete at once.
pub const MAX_OPS: u32 = 1024;
/// The largest TMH and RVH an RNDV message carries (`tm_caps.max_rndv_hdr_size`).
pub const MAX_RNDV_HDR_SIZE: u32 = 64;
/// SGEs of a tag entry (`tm_caps.max_sge`).
pub const MAX_SGE: u32 = 1;

/// The TMH's opcode (`enum ibv_tmh_op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmhOp {
    /// `IBV_TMH_NO_TAG`: an ordinary message behind the header.
    NoTag = 0,
    /// `IBV_TMH_RNDV`: the data is at the sender, described by the RVH.
    Rndv = 1,
    /// `IBV_TMH_FIN`: the end of a rendezvous, sent back to its sender.
    Fin = 2,
    /// `IBV_TMH_EAGER`: the data follows the header.
    Eager = 3,
}

/// A tag matching header (`struct ibv_tmh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tmh {
    /// The opcode.
    pub op: TmhOp,
    /// Opaque user data (`app_ctx`), reported as the completion's `priv`.
    pub app_ctx: u32,
    /// The tag.
    pub tag: u64,
}

impl Tmh {
    /// The header at the start of `b`: `None` if `b` is shorter than [`TMH_LEN`] or the
    /// opcode is unknown. The reserved bytes are not looked at (as mlx5: rdma-core's
    /// test_tag_matching leaves its payload's bytes there).
    pub fn parse(b: &[u8]) -> Option<Tmh> {
        let b: &[u8; TMH_LEN] = b.get(..TMH_LEN)?.try_into().ok()?;
        let op = match b[0] {
            0 => TmhOp::NoTag,
            1 => TmhOp::Rndv,
            2 => TmhOp::Fin,
            3 => TmhOp::Eager,
            _ => return None,
        };
        Some(Tmh {
            op,
            app_ctx: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            tag: u64::from_be_bytes(b[8..16].try_into().ok()?),
        })
    }

    /// The header's bytes.
    pub fn emit(&self) -> [u8; TMH_LEN] {
        let mut b = [0u8; TMH_LEN];
        b[0] = self.op as u8;
        b[4..8].copy_from_slice(&self.app_ctx.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.to_be_bytes());
        b
    }
}

/// Whether a whole message is a rendezvous FIN (a TMH with opcode `IBV_TMH_FIN` and nothing
/// after it), which an ordinary RC receive takes as mlx5 completes it: without
/// `IBV_WC_GRH`.
pub fn is_fin(msg: &[u8]) -> bool {
    msg.len() == TMH_LEN && Tmh::parse(msg).is_some_and(|t| t.op == TmhOp::Fin)
}

/// A rendezvous header (`struct ibv_rvh`): where the sender's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rvh {
    /// The data's virtual address at the sender.
    pub va: u64,
    /// The R_Key that reads it.
    pub rkey: u32,
    /// Its length in bytes.
    pub len: u32,
}

impl Rvh {
    /// The header at the start of `b`, `None` if `b` is shorter than [`RVH_LEN`].
    pub fn parse(b: &[u8]) -> Option<Rvh> {
        let b: &[u8; RVH_LEN] = b.get(..RVH_LEN)?.try_into().ok()?;
        Some(Rvh {
            va: u64::from_be_bytes(b[0..8].try_into().ok()?),
            rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
            len: u32::from_be_bytes(b[12..16].try_into().ok()?),
        })
    }
}

/// Why a list operation failed (its completion's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmOpError {
    /// The list holds `max_num_tags` entries (`IBV_WC_TM_ERR`).
    ListFull,
    /// No entry has that handle: never added, deleted, or consumed by a message
    /// (`IBV_WC_TM_ERR`, the man page's "concurrent tag consumption").
    NoSuchTag,
}

/// One tag entry: its handle, matching parameters and buffer.
#[derive(Debug)]
struct Entry {
    handle: u32,
    tag: u64,
    mask: u64,
    /// Added while software was behind on unexpected messages: not matched until a sync.
    held: bool,
    wqe: RecvWqe,
}

/// Where an incoming TM message goes, as [`TagList::classify`] decides.
#[derive(Debug)]
pub enum Delivery {
    /// It matched an entry, whose buffer it consumed.
    Matched(Tmh),
    /// An EAGER or RNDV message no entry matched: it goes to an ordinary receive, counted.
    Unexpected,
    /// A NO_TAG message, or one without a valid header: an ordinary receive, not counted.
    NoTag,
}

/// The tag list of a TM SRQ and its phase counters.
#[derive(Debug)]
pub struct TagList {
    entries: VecDeque<Entry>,
    max_num_tags: u32,
    /// Unexpected messages the device delivered.
    unexpected: u32,
    /// Unexpected messages software last said it handled.
    handled: u32,
}

impl TagList {
    /// An empty list of at most `max_num_tags` entries.
    pub fn new(max_num_tags: u32) -> TagList {
        TagList {
            entries: VecDeque::new(),
            max_num_tags,
            unexpected: 0,
            handled: 0,
        }
    }

    /// Whether software is behind on unexpected messages (a sync is needed).
    pub fn sync_required(&self) -> bool {
        self.handled != self.unexpected
    }

    /// Records software's count of handled unexpected messages (`IBV_OPS_TM_SYNC`); once it
    /// catches up, held entries become matchable.
    pub fn sync(&mut self, unexpected_cnt: u32) {
        self.handled = unexpected_cnt;
        if !self.sync_required() {
            self.entries.iter_mut().for_each(|e| e.held = false);
        }
    }

    /// `IBV_WR_TAG_ADD`: the entry's handle.
    pub fn add(&mut self, tag: u64, mask: u64, wqe: RecvWqe) -> Result<u32, TmOpError> {
        if self.entries.len() >= self.max_num_tags as usize {
            return Err(TmOpError::ListFull);
        }
        let handle = (0..self.max_num_tags)
            .find(|h| self.entries.iter().all(|e| e.handle != *h))
            .ok_or(TmOpError::ListFull)?;
        let held = self.sync_required();
        self.entries.push_back(Entry {
            handle,
            tag,
            mask,
            held,
            wqe,
        });
        Ok(handle)
    }

    /// `IBV_WR_TAG_DEL`: removes the entry (its buffer is released without a completion).
    pub fn del(&mut self, handle: u32) -> Result<(), TmOpError> {
        let i = self
            .entries
            .iter()
            .position(|e| e.handle == handle)
            .ok_or(TmOpError::NoSuchTag)?;
        self.entries.remove(i);
        Ok(())
    }

    /// Entries in the list.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where a message whose payload starts with `head` goes, with the matched entry's
    /// receive (its `recv_wr_id` and buffer), which leaves the list; an unexpected message
    /// is counted. `has_recv` says whether an ordinary receive is there for the others:
    /// without it nothing changes and `None` is returned (receiver not ready).
    pub fn classify(&mut self, head: &[u8], has_recv: bool) -> Option<(Delivery, Option<RecvWqe>)> {
        let tmh = match Tmh::parse(head) {
            Some(t) if matches!(t.op, TmhOp::Eager | TmhOp::Rndv) => t,
            _ => return has_recv.then_some((Delivery::NoTag, None)),
        };
        let found = self
            .entries
            .iter()
            .position(|e| !e.held && tmh.tag & e.mask == e.tag & e.mask);
        match found {
            Some(i) => {
                let e = self.entries.remove(i)?;
                Some((Delivery::Matched(tmh), Some(e.wqe)))
            }
            None if has_recv => {
                self.unexpected = self.unexpected.wrapping_add(1);
                Some((Delivery::Unexpected, None))
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::wqe::LocalData;

    fn wqe(id: u64) -> RecvWqe {
        RecvWqe {
            wr_id: id,
            data: LocalData::default(),
        }
    }

    const EAGER_7: [u8; 16] = [3, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 1, 0, 7];

    #[test]
    fn tmh_parses_big_endian_and_emits_the_same_bytes() {
        let t = Tmh::parse(&EAGER_7).unwrap();
        assert_eq!(t.op, TmhOp::Eager);
        assert_eq!(t.app_ctx, 9);
        assert_eq!(t.tag, 0x1_0007);
        assert_eq!(t.emit(), EAGER_7);
    }

    #[test]
    fn tmh_refuses_short_and_unknown_and_ignores_reserved() {
        assert_eq!(Tmh::parse(&EAGER_7[..15]), None);
        let mut b = EAGER_7;
        b[0] = 4;
        assert_eq!(Tmh::parse(&b), None);
        let mut b = EAGER_7;
        b[1..4].copy_from_slice(b"ccc");
        assert_eq!(Tmh::parse(&b), Tmh::parse(&EAGER_7));
    }

    #[test]
    fn fin_is_a_tmh_alone() {
        let fin = Tmh {
            op: TmhOp::Fin,
            app_ctx: 9,
            tag: 0x1_0007,
        };
        assert!(is_fin(&fin.emit()));
        assert!(!is_fin(&EAGER_7));
        assert!(!is_fin(&[fin.emit(), fin.emit()].concat()));
    }

    #[test]
    fn rvh_parses_va_rkey_len() {
        let b = [0, 0, 0x7f, 0, 0, 0, 0x10, 0, 0, 0, 0x12, 0x34, 0, 0, 4, 0];
        let r = Rvh::parse(&b).unwrap();
        assert_eq!((r.va, r.rkey, r.len), (0x7f00_0000_1000, 0x1234, 1024));
        assert_eq!(Rvh::parse(&b[..8]), None);
    }

    #[test]
    fn eager_matches_under_the_mask_and_consumes_the_entry() {
        let mut l = TagList::new(4);
        assert_eq!(l.add(7, 0xffff, wqe(70)), Ok(0));
        assert_eq!(l.add(7, 0xffff, wqe(71)), Ok(1));
        match l.classify(&EAGER_7, false) {
            Some((Delivery::Matched(tmh), Some(wqe))) => {
                assert_eq!(tmh.tag, 0x1_0007);
                assert_eq!(wqe.wr_id, 70, "the oldest matching entry first");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(l.len(), 1);
        assert_eq!(l.del(0), Err(TmOpError::NoSuchTag));
        assert_eq!(l.del(1), Ok(()));
        assert!(l.is_empty());
    }

    #[test]
    fn unmatched_is_unexpected_and_holds_new_tags_until_sync() {
        let mut l = TagList::new(4);
        l.add(8, 0xffff, wqe(80)).unwrap();
        assert!(matches!(
            l.classify(&EAGER_7, true),
            Some((Delivery::Unexpected, None))
        ));
        assert!(l.sync_required());
        l.add(7, 0xffff, wqe(70)).unwrap();
        // Held: not matched, so unexpected again (and nothing without a receive).
        assert!(l.classify(&EAGER_7, false).is_none());
        l.sync(1);
        assert!(!l.sync_required());
        assert!(matches!(
            l.classify(&EAGER_7, false),
            Some((Delivery::Matched(_), Some(_)))
        ));
    }

    #[test]
    fn no_tag_and_headerless_messages_are_ordinary_receives() {
        let mut l = TagList::new(1);
        l.add(0, 0, wqe(1)).unwrap();
        let mut b = EAGER_7;
        b[0] = 0;
        assert!(matches!(
            l.classify(&b, true),
            Some((Delivery::NoTag, None))
        ));
        assert!(matches!(
            l.classify(&[3, 0], true),
            Some((Delivery::NoTag, None))
        ));
        assert!(l.classify(&b, false).is_none());
        assert!(!l.sync_required());
        assert_eq!(l.add(1, 1, wqe(2)), Err(TmOpError::ListFull));
    }
}
