//! Tag matching's vocabulary (`IBV_SRQT_TM`): what a completion says about a tagged message
//! or a tag list operation, and the operations `ibv_post_srq_ops` posts.

use super::Sge;

/// The tag matching part of a work completion: `ibv_wc_read_tm_info`'s tag and `priv`, and
/// the `IBV_WC_TM_*` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TmInfo {
    /// The message's tag (matched messages; 0 otherwise).
    pub tag: u64,
    /// The TMH's `app_ctx` (matched messages; 0 otherwise).
    pub app_ctx: u32,
    /// `IBV_WC_TM_SYNC_REQ`: software must post an `IBV_WR_TAG_SYNC` with its count of
    /// handled unexpected messages.
    pub sync_req: bool,
    /// `IBV_WC_TM_MATCH`: the message matched a tag.
    pub matched: bool,
    /// `IBV_WC_TM_DATA_VALID`: the tag's buffer holds the message's data.
    pub data_valid: bool,
}

/// A tag list operation's kind (`enum ibv_ops_wr_opcode`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TmOpKind<'a> {
    /// `IBV_WR_TAG_ADD`: a tag entry with its buffer; the completion's `wr_id` is the
    /// operation's, a matched message's is `recv_wr_id`.
    Add {
        /// The id the matched message's completion carries.
        recv_wr_id: u64,
        /// The buffer.
        sg_list: &'a [Sge],
        /// The tag.
        tag: u64,
        /// Which bits of the tag are compared.
        mask: u64,
    },
    /// `IBV_WR_TAG_DEL`: removes the entry an ADD returned this handle for.
    Del {
        /// The entry's handle.
        handle: u32,
    },
    /// `IBV_WR_TAG_SYNC`: only updates the unexpected count.
    Sync,
}

/// A tag list operation (`struct ibv_ops_wr`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TmOp<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub kind: TmOpKind<'a>,
    /// `IBV_OPS_SIGNALED`: a completion on the SRQ's CQ (failures complete anyway).
    pub signaled: bool,
    /// `IBV_OPS_TM_SYNC`: `unexpected_cnt` is software's count of handled unexpected
    /// messages.
    pub sync: Option<u32>,
}
