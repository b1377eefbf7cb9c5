//! The extended structures of `<infiniband/verbs.h>`: `ibv_device_attr_ex` and its caps,
//! the extended CQ and QP (`ibv_cq_ex`, `ibv_qp_ex`) and what creates them.

use libc::{c_int, c_uint, c_void};

use super::*;

c_struct! {
    /// `struct ibv_query_device_ex_input`.
    #[repr(C)]
    pub struct ibv_query_device_ex_input {
        pub comp_mask: u32,
    }
}

/// The anonymous `per_transport_caps` member of `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_odp_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_odp_caps {
        pub general_caps: u64,
        pub per_transport_caps: ibv_odp_per_transport_caps,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_tso_caps {
        pub max_tso: u32,
        pub supported_qpts: u32,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_rss_caps {
        pub supported_qpts: u32,
        pub max_rwq_indirection_tables: u32,
        pub max_rwq_indirection_table_size: u32,
        pub rx_hash_fields_mask: u64,
        pub rx_hash_function: u8,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_packet_pacing_caps {
        pub qp_rate_limit_min: u32,
        pub qp_rate_limit_max: u32,
        pub supported_qpts: u32,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_tm_caps {
        pub max_rndv_hdr_size: u32,
        pub max_num_tags: u32,
        pub flags: u32,
        pub max_ops: u32,
        pub max_sge: u32,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_cq_moderation_caps {
        pub max_cq_count: u16,
        pub max_cq_period: u16,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_pci_atomic_caps {
        pub fetch_add: u16,
        pub swap: u16,
        pub compare_swap: u16,
    }
}

c_struct! {
    /// `struct ibv_device_attr_ex`: what the `query_device_ex` op of `verbs_context` fills (the
    /// inline `ibv_query_device_ex` passes its size, so that older programs pass a prefix).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ibv_device_attr_ex {
        pub orig_attr: ibv_device_attr,
        pub comp_mask: u32,
        pub odp_caps: ibv_odp_caps,
        pub completion_timestamp_mask: u64,
        pub hca_core_clock: u64,
        pub device_cap_flags_ex: u64,
        pub tso_caps: ibv_tso_caps,
        pub rss_caps: ibv_rss_caps,
        pub max_wq_type_rq: u32,
        pub packet_pacing_caps: ibv_packet_pacing_caps,
        pub raw_packet_caps: u32,
        pub tm_caps: ibv_tm_caps,
        pub cq_mod_caps: ibv_cq_moderation_caps,
        pub max_dm_size: u64,
        pub pci_atomic_caps: ibv_pci_atomic_caps,
        pub xrc_odp_caps: u32,
        pub phys_port_cnt_ex: u32,
    }
}

c_struct! {
    /// `struct ibv_cq_init_attr_ex`: what `ibv_create_cq_ex` is given.
    #[repr(C)]
    pub struct ibv_cq_init_attr_ex {
        pub cqe: u32,
        pub cq_context: *mut c_void,
        pub channel: *mut ibv_comp_channel,
        pub comp_vector: u32,
        pub wc_flags: u64,
        pub comp_mask: u32,
        pub flags: u32,
        pub parent_domain: *mut ibv_pd,
    }
}

/// The `create_cq_ex` op.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
/// The `create_qp_ex` op.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

c_struct! {
    /// `struct ibv_poll_cq_attr`.
    #[repr(C)]
    pub struct ibv_poll_cq_attr {
        pub comp_mask: u32,
    }
}

/// `start_poll` of `struct ibv_cq_ex`.
pub type StartPollFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int;
/// `next_poll`.
pub type NextPollFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int;
/// `end_poll`.
pub type EndPollFn = unsafe extern "C" fn(*mut ibv_cq_ex);
/// The `read_*` members returning 32 bits.
pub type ReadU32Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u32;
/// The `read_*` members returning 8 bits.
pub type ReadU8Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u8;
/// The `read_*` members returning 64 bits.
pub type ReadU64Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u64;
/// `read_opcode` (an `enum ibv_wc_opcode`) and `read_wc_flags` (`unsigned int`).
pub type ReadUintFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint;

c_struct! {
    /// `struct ibv_cq_ex`: an `ibv_cq` (C spells its fields out; the same layout) followed by the
    /// polling state and functions the inline `ibv_start_poll`, `ibv_wc_read_*` call directly.
    /// Every CQ of the shim is allocated as one, as rdma-core's `verbs_cq` is a union of both.
    #[repr(C)]
    pub struct ibv_cq_ex {
        pub cq: ibv_cq,
        pub comp_mask: u32,
        pub status: c_uint,
        pub wr_id: u64,
        pub start_poll: Option<StartPollFn>,
        pub next_poll: Option<NextPollFn>,
        pub end_poll: Option<EndPollFn>,
        pub read_opcode: Option<ReadUintFn>,
        pub read_vendor_err: Option<ReadU32Fn>,
        pub read_byte_len: Option<ReadU32Fn>,
        pub read_imm_data: Option<ReadU32Fn>,
        pub read_qp_num: Option<ReadU32Fn>,
        pub read_src_qp: Option<ReadU32Fn>,
        pub read_wc_flags: Option<ReadUintFn>,
        pub read_slid: Option<ReadU32Fn>,
        pub read_sl: Option<ReadU8Fn>,
        pub read_dlid_path_bits: Option<ReadU8Fn>,
        pub read_completion_ts: Option<ReadU64Fn>,
        pub read_cvlan: *mut c_void,
        pub read_flow_tag: *mut c_void,
        pub read_tm_info: *mut c_void,
        pub read_completion_wallclock_ns: Option<ReadU64Fn>,
    }
}

c_struct! {
    /// `struct ibv_rx_hash_conf` (inside `ibv_qp_init_attr_ex`; RSS, which softroce lacks).
    #[repr(C)]
    pub struct ibv_rx_hash_conf {
        pub rx_hash_function: u8,
        pub rx_hash_key_len: u8,
        pub rx_hash_key: *mut u8,
        pub rx_hash_fields_mask: u64,
    }
}

c_struct! {
    /// `struct ibv_qp_init_attr_ex`: an `ibv_qp_init_attr` (the same first members) and the
    /// extended ones.
    #[repr(C)]
    pub struct ibv_qp_init_attr_ex {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut c_void,
        pub cap: ibv_qp_cap,
        pub qp_type: c_uint,
        pub sq_sig_all: c_int,
        pub comp_mask: u32,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut c_void,
        pub create_flags: u32,
        pub max_tso_header: u16,
        pub rwq_ind_tbl: *mut c_void,
        pub rx_hash_conf: ibv_rx_hash_conf,
        pub source_qpn: u32,
        pub send_ops_flags: u64,
    }
}

c_struct! {
    /// `struct ibv_data_buf`: one buffer of `ibv_wr_set_inline_data_list`.
    #[repr(C)]
    pub struct ibv_data_buf {
        pub addr: *mut c_void,
        pub length: usize,
    }
}

c_struct! {
    /// `struct ibv_qp_ex`: an `ibv_qp` followed by the work-request builder the inline
    /// `ibv_wr_*` functions call directly. Every QP of the shim is allocated as one, as
    /// rdma-core's `verbs_qp` is a union of both.
    #[repr(C)]
    pub struct ibv_qp_ex {
        pub qp_base: ibv_qp,
        pub comp_mask: u64,
        pub wr_id: u64,
        pub wr_flags: c_uint,
        pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
        pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
        pub wr_bind_mw:
            Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
        pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
        pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
        pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
        pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
        pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
        pub wr_send_tso: *mut c_void,
        pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
        pub wr_set_xrc_srqn: *mut c_void,
        pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
        pub wr_set_inline_data_list:
            Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
        pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
        pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
        pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
        pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
        pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
        pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
    }
}

c_struct! {
    /// `struct ibv_gid_entry`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ibv_gid_entry {
        /// The GID.
        pub gid: [u8; 16],
        /// Its index.
        pub gid_index: u32,
        /// Port (1).
        pub port_num: u32,
        /// `IBV_GID_TYPE_ROCE_V2` (2).
        pub gid_type: u32,
        /// The netdev's ifindex (0: none).
        pub ndev_ifindex: u32,
    }
}
