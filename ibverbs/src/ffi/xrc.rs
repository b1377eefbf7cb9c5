//! The XRC structures and values of `<infiniband/verbs.h>`: the domain (`ibv_xrcd`), its
//! creation attributes, the extended SRQ creation attributes and the `verbs_context` slots
//! of the inline `ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_create_srq_ex`, `ibv_get_srq_num`
//! and `ibv_open_qp`.

use libc::{c_int, c_uint, c_void};

use super::*;

c_struct! {
    /// `struct ibv_xrcd`.
    #[repr(C)]
    pub struct ibv_xrcd {
        pub context: *mut ibv_context,
    }
}

c_struct! {
    /// `struct ibv_xrcd_init_attr`.
    #[repr(C)]
    pub struct ibv_xrcd_init_attr {
        pub comp_mask: u32,
        pub fd: c_int,
        pub oflags: c_int,
    }
}

c_struct! {
    /// `struct ibv_tm_cap`.
    #[repr(C)]
    pub struct ibv_tm_cap {
        pub max_num_tags: u32,
        pub max_ops: u32,
    }
}

c_struct! {
    /// `struct ibv_srq_init_attr_ex`: an `ibv_srq_init_attr` and the extended members.
    #[repr(C)]
    pub struct ibv_srq_init_attr_ex {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
        pub comp_mask: u32,
        pub srq_type: c_uint,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        pub cq: *mut ibv_cq,
        pub tm_cap: ibv_tm_cap,
    }
}

c_struct! {
    /// `struct ibv_qp_open_attr` (`ibv_open_qp`).
    #[repr(C)]
    pub struct ibv_qp_open_attr {
        pub comp_mask: u32,
        pub qp_num: u32,
        pub xrcd: *mut ibv_xrcd,
        pub qp_context: *mut c_void,
        pub qp_type: c_uint,
    }
}

/// `IBV_QPT_XRC_SEND`.
pub const IBV_QPT_XRC_SEND: c_uint = 9;
/// `IBV_QPT_XRC_RECV`.
pub const IBV_QPT_XRC_RECV: c_uint = 10;
/// `IBV_XRCD_INIT_ATTR_FD`.
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
/// `IBV_XRCD_INIT_ATTR_OFLAGS`.
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
/// `IBV_SRQT_BASIC`.
pub const IBV_SRQT_BASIC: c_uint = 0;
/// `IBV_SRQT_XRC`.
pub const IBV_SRQT_XRC: c_uint = 1;
/// `IBV_SRQ_INIT_ATTR_TYPE`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
/// `IBV_SRQ_INIT_ATTR_PD`.
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `IBV_SRQ_INIT_ATTR_XRCD`.
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
/// `IBV_SRQ_INIT_ATTR_CQ`.
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `IBV_QP_OPEN_ATTR_NUM`, `_XRCD`, `_CONTEXT`, `_TYPE`.
pub const IBV_QP_OPEN_ATTR_ALL: u32 = 0xF;

/// The `open_qp` slot of `verbs_context.ops` (the inline `ibv_open_qp`).
pub const VCTX_OPEN_QP: usize = 32;
/// The `get_srq_num` slot (the inline `ibv_get_srq_num`).
pub const VCTX_GET_SRQ_NUM: usize = 34;
/// The `create_srq_ex` slot (the inline `ibv_create_srq_ex`).
pub const VCTX_CREATE_SRQ_EX: usize = 35;
/// The `open_xrcd` slot (the inline `ibv_open_xrcd`).
pub const VCTX_OPEN_XRCD: usize = 36;
/// The `close_xrcd` slot (the inline `ibv_close_xrcd`).
pub const VCTX_CLOSE_XRCD: usize = 37;

/// `IBV_SRQT_TM`: a tag matching SRQ.
pub const IBV_SRQT_TM: c_uint = 2;
/// `IBV_SRQ_INIT_ATTR_TM`: `tm_cap` is set.
pub const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;
/// The `post_srq_ops` slot (the inline `ibv_post_srq_ops`).
pub const VCTX_POST_SRQ_OPS: usize = 18;
/// `IBV_WR_TAG_ADD`, `IBV_WR_TAG_DEL`, `IBV_WR_TAG_SYNC` (`enum ibv_ops_wr_opcode`).
pub const IBV_WR_TAG_ADD: c_uint = 0;
/// See [`IBV_WR_TAG_ADD`].
pub const IBV_WR_TAG_DEL: c_uint = 1;
/// See [`IBV_WR_TAG_ADD`].
pub const IBV_WR_TAG_SYNC: c_uint = 2;
/// `IBV_OPS_SIGNALED`.
pub const IBV_OPS_SIGNALED: c_int = 1 << 0;
/// `IBV_OPS_TM_SYNC`.
pub const IBV_OPS_TM_SYNC: c_int = 1 << 1;
/// `IBV_TM_CAP_RC`: tag matching on RC QPs.
pub const IBV_TM_CAP_RC: u32 = 1 << 0;
/// `IBV_WC_EX_WITH_TM_INFO`.
pub const IBV_WC_EX_WITH_TM_INFO: u64 = 1 << 10;
/// `IBV_WC_TM_SYNC_REQ`, `IBV_WC_TM_MATCH`, `IBV_WC_TM_DATA_VALID` (`ibv_wc_flags`).
pub const IBV_WC_TM_SYNC_REQ: c_uint = 1 << 4;
/// See [`IBV_WC_TM_SYNC_REQ`].
pub const IBV_WC_TM_MATCH: c_uint = 1 << 5;
/// See [`IBV_WC_TM_SYNC_REQ`].
pub const IBV_WC_TM_DATA_VALID: c_uint = 1 << 6;

c_struct! {
    /// `ibv_ops_wr.tm.add`.
    #[repr(C)]
    pub struct ibv_ops_wr_tm_add {
        pub recv_wr_id: u64,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
        pub tag: u64,
        pub mask: u64,
    }
}

c_struct! {
    /// `ibv_ops_wr.tm`.
    #[repr(C)]
    pub struct ibv_ops_wr_tm {
        pub unexpected_cnt: u32,
        pub handle: u32,
        pub add: ibv_ops_wr_tm_add,
    }
}

c_struct! {
    /// `struct ibv_ops_wr` (`ibv_post_srq_ops`).
    #[repr(C)]
    pub struct ibv_ops_wr {
        pub wr_id: u64,
        pub next: *mut ibv_ops_wr,
        pub opcode: c_uint,
        pub flags: c_int,
        pub tm: ibv_ops_wr_tm,
    }
}

c_struct! {
    /// `struct ibv_wc_tm_info` (`ibv_wc_read_tm_info`).
    #[repr(C)]
    pub struct ibv_wc_tm_info {
        pub tag: u64,
        pub priv_: u32,
    }
}
