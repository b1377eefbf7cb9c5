//! The structures of `<infiniband/verbs.h>` that the basic verbs pass, with the
//! `verbs_context` that carries the extended ops and the function types of its slots.

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

use super::*;

c_struct! {
    #[repr(C)]
    pub struct ibv_device {
        pub _ops: [*mut c_void; 2],
        pub node_type: c_int,
        pub transport_type: c_int,
        pub name: [c_char; IBV_SYSFS_NAME_MAX],
        pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
        pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
        pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
    }
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut c_void, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;

c_struct! {
    /// `struct ibv_context_ops`: 36 pointers; the four data-path ones are what the inline
    /// `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send` and `ibv_post_recv` call.
    #[repr(C)]
    pub struct ibv_context_ops {
        pub _compat: [*mut c_void; 7],
        pub alloc_mw: Option<AllocMwFn>,
        pub bind_mw: Option<BindMwFn>,
        pub dealloc_mw: Option<DeallocMwFn>,
        pub _compat_create_cq: *mut c_void,
        pub poll_cq: Option<PollCqFn>,
        pub req_notify_cq: Option<ReqNotifyFn>,
        pub _compat2: [*mut c_void; 7],
        pub post_srq_recv: Option<PostSrqRecvFn>,
        pub _compat3: [*mut c_void; 4],
        pub post_send: Option<PostSendFn>,
        pub post_recv: Option<PostRecvFn>,
        pub _compat4: [*mut c_void; 5],
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_context {
        pub device: *mut ibv_device,
        pub ops: ibv_context_ops,
        pub cmd_fd: c_int,
        pub async_fd: c_int,
        pub num_comp_vectors: c_int,
        pub mutex: pthread_mutex_t,
        pub abi_compat: *mut c_void,
    }
}

/// Number of pointer-sized slots of `struct verbs_context` between `query_port` (slot 0) and
/// `sz`; `query_device_ex` is slot 27.
pub const VERBS_CONTEXT_SLOTS: usize = 39;
pub const VCTX_QUERY_PORT: usize = 0;
/// The `query_device_ex` slot of `verbs_context.ops`.
pub const VCTX_QUERY_DEVICE_EX: usize = 27;

/// The `advise_mr` slot of `verbs_context.ops` (what the inline `ibv_advise_mr` calls).
pub const VCTX_ADVISE_MR: usize = 1;

/// The `reg_dm_mr` slot of `verbs_context.ops` (the inline `ibv_reg_dm_mr`).
pub const VCTX_REG_DM_MR: usize = 7;
/// The `alloc_dm` slot (the inline `ibv_alloc_dm`).
pub const VCTX_ALLOC_DM: usize = 8;
/// The `free_dm` slot (the inline `ibv_free_dm`).
pub const VCTX_FREE_DM: usize = 9;

/// The `alloc_parent_domain` slot of `verbs_context.ops`.
pub const VCTX_ALLOC_PARENT_DOMAIN: usize = 14;
/// The `dealloc_td` slot.
pub const VCTX_DEALLOC_TD: usize = 15;
/// The `alloc_td` slot.
pub const VCTX_ALLOC_TD: usize = 16;

/// The `query_rt_values` slot of `verbs_context.ops` (the inline `ibv_query_rt_values_ex`).
pub const VCTX_QUERY_RT_VALUES: usize = 24;

c_struct! {
    /// `struct ibv_values_ex`.
    #[repr(C)]
    pub struct ibv_values_ex {
        pub comp_mask: u32,
        pub raw_clock: libc::timespec,
    }
}

c_struct! {
    /// `struct ibv_td`: a thread domain.
    #[repr(C)]
    pub struct ibv_td {
        pub context: *mut ibv_context,
    }
}

c_struct! {
    /// `struct ibv_td_init_attr`.
    #[repr(C)]
    pub struct ibv_td_init_attr {
        pub comp_mask: u32,
    }
}

/// The custom allocator of a parent domain (`ibv_parent_domain_init_attr.alloc`).
pub type PdAllocFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
/// Its free function (`ibv_parent_domain_init_attr.free`).
pub type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

c_struct! {
    /// `struct ibv_parent_domain_init_attr`.
    #[repr(C)]
    pub struct ibv_parent_domain_init_attr {
        pub pd: *mut ibv_pd,
        pub td: *mut ibv_td,
        pub comp_mask: u32,
        pub alloc: Option<PdAllocFn>,
        pub free: Option<PdFreeFn>,
        pub pd_context: *mut c_void,
    }
}

c_struct! {
    /// `struct ibv_alloc_dm_attr`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_alloc_dm_attr {
        pub length: usize,
        pub log_align_req: u32,
        pub comp_mask: u32,
    }
}

c_struct! {
    /// `struct ibv_dm`: device memory; the inline `ibv_memcpy_to_dm`/`_from_dm` call its two
    /// function pointers.
    #[repr(C)]
    pub struct ibv_dm {
        pub context: *mut ibv_context,
        pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int>,
        pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int>,
        pub comp_mask: u32,
        pub handle: u32,
    }
}

/// `IBV_ACCESS_ZERO_BASED`: a region addressed from 0 (device memory regions).
pub const IBV_ACCESS_ZERO_BASED: c_uint = 1 << 5;

/// The `create_cq_ex` slot of `verbs_context.ops` (what the inline `ibv_create_cq_ex` calls).
pub const VCTX_CREATE_CQ_EX: usize = 25;
/// The `create_qp_ex` slot of `verbs_context.ops` (what the inline `ibv_create_qp_ex` calls).
pub const VCTX_CREATE_QP_EX: usize = 33;

c_struct! {
    /// `struct verbs_context`: extended ops, in memory just before the `ibv_context` (its last
    /// member), found through `abi_compat == __VERBS_ABI_IS_EXTENDED`.
    #[repr(C)]
    pub struct verbs_context {
        pub ops: [*mut c_void; VERBS_CONTEXT_SLOTS],
        pub sz: usize,
        pub context: ibv_context,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_pd {
        pub context: *mut ibv_context,
        pub handle: u32,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_mr {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub addr: *mut c_void,
        pub length: usize,
        pub handle: u32,
        pub lkey: u32,
        pub rkey: u32,
    }
}

c_struct! {
    /// `struct ibv_mw`: a memory window; `rkey` is its current key (the provider writes it at
    /// allocation and at `ibv_bind_mw`).
    #[repr(C)]
    pub struct ibv_mw {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub rkey: u32,
        pub handle: u32,
        pub type_: c_uint,
    }
}

c_struct! {
    /// `struct ibv_mw_bind_info`: what a bind makes the window cover (a NULL `mr` with length 0
    /// unbinds).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ibv_mw_bind_info {
        pub mr: *mut ibv_mr,
        pub addr: u64,
        pub length: u64,
        pub mw_access_flags: c_uint,
    }
}

c_struct! {
    /// `struct ibv_mw_bind`: the argument of `ibv_bind_mw`.
    #[repr(C)]
    pub struct ibv_mw_bind {
        pub wr_id: u64,
        pub send_flags: c_uint,
        pub bind_info: ibv_mw_bind_info,
    }
}

/// The `alloc_mw`, `bind_mw` and `dealloc_mw` ops of `ibv_context_ops`.
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;

c_struct! {
    #[repr(C)]
    pub struct ibv_comp_channel {
        pub context: *mut ibv_context,
        pub fd: c_int,
        pub refcnt: c_int,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_cq {
        pub context: *mut ibv_context,
        pub channel: *mut ibv_comp_channel,
        pub cq_context: *mut c_void,
        pub handle: u32,
        pub cqe: c_int,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub comp_events_completed: u32,
        pub async_events_completed: u32,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_qp {
        pub context: *mut ibv_context,
        pub qp_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut c_void,
        pub handle: u32,
        pub qp_num: u32,
        pub state: c_uint,
        pub qp_type: c_uint,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ibv_wc {
        pub wr_id: u64,
        pub status: c_uint,
        pub opcode: c_uint,
        pub vendor_err: u32,
        pub byte_len: u32,
        pub imm_data: u32,
        pub qp_num: u32,
        pub src_qp: u32,
        pub wc_flags: c_uint,
        pub pkey_index: u16,
        pub slid: u16,
        pub sl: u8,
        pub dlid_path_bits: u8,
    }
}

c_struct! {
    /// Pod: read in place as softroce's `Sge`, which has this layout.
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    pub struct ibv_sge {
        pub addr: u64,
        pub length: u32,
        pub lkey: u32,
    }
}

/// The `wr` union of `ibv_send_wr` as its largest member (atomic); `rdma` overlays the first
/// 12 bytes (remote_addr, rkey), `ud` is (ah, remote_qpn, remote_qkey).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

c_struct! {
    #[repr(C)]
    pub struct ibv_send_wr {
        pub wr_id: u64,
        pub next: *mut ibv_send_wr,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
        pub opcode: c_uint,
        pub send_flags: c_uint,
        pub imm_data: u32,
        pub wr: send_wr_atomic,
        pub qp_type: u32,
        /// bind_mw (mw, rkey, bind_info {mr, addr, length, access}) or tso: 48 bytes.
        pub bind_mw: [u64; 6],
    }
}

impl ibv_send_wr {
    /// `wr.rdma.rkey` (at offset 8 of the union, where `atomic.compare_add` starts).
    pub fn rdma_rkey(&self) -> u32 {
        self.wr.compare_add as u32
    }

    /// `wr.ud.ah` (offset 0 of the union).
    pub fn ud_ah(&self) -> *mut ibv_ah {
        self.wr.remote_addr as usize as *mut ibv_ah
    }

    /// `invalidate_rkey` (the `imm_data` union member, host order) for the `*_INV` opcodes.
    pub fn invalidate_rkey(&self) -> u32 {
        self.imm_data
    }

    /// `bind_mw.mw`.
    pub fn bind_mw_mw(&self) -> *mut ibv_mw {
        self.bind_mw[0] as usize as *mut ibv_mw
    }

    /// `bind_mw.rkey`: the window's new key.
    pub fn bind_mw_rkey(&self) -> u32 {
        self.bind_mw[1] as u32
    }

    /// `bind_mw.bind_info` (at offset 16 of the union).
    pub fn bind_mw_info(&self) -> ibv_mw_bind_info {
        ibv_mw_bind_info {
            mr: self.bind_mw[2] as usize as *mut ibv_mr,
            addr: self.bind_mw[3],
            length: self.bind_mw[4],
            mw_access_flags: self.bind_mw[5] as c_uint,
        }
    }

    /// `wr.ud.remote_qpn` (offset 8).
    pub fn ud_remote_qpn(&self) -> u32 {
        self.wr.compare_add as u32
    }

    /// `wr.ud.remote_qkey` (offset 12).
    pub fn ud_remote_qkey(&self) -> u32 {
        (self.wr.compare_add >> 32) as u32
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_recv_wr {
        pub wr_id: u64,
        pub next: *mut ibv_recv_wr,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_qp_cap {
        pub max_send_wr: u32,
        pub max_recv_wr: u32,
        pub max_send_sge: u32,
        pub max_recv_sge: u32,
        pub max_inline_data: u32,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_qp_init_attr {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut c_void,
        pub cap: ibv_qp_cap,
        pub qp_type: c_uint,
        pub sq_sig_all: c_int,
    }
}

c_struct! {
    /// 8-byte aligned: `union ibv_gid` holds two `__be64`.
    #[repr(C, align(8))]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_global_route {
        pub dgid: [u8; 16],
        pub flow_label: u32,
        pub sgid_index: u8,
        pub hop_limit: u8,
        pub traffic_class: u8,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_ah_attr {
        pub grh: ibv_global_route,
        pub dlid: u16,
        pub sl: u8,
        pub src_path_bits: u8,
        pub static_rate: u8,
        pub is_global: u8,
        pub port_num: u8,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_qp_attr {
        pub qp_state: c_uint,
        pub cur_qp_state: c_uint,
        pub path_mtu: c_uint,
        pub path_mig_state: c_uint,
        pub qkey: u32,
        pub rq_psn: u32,
        pub sq_psn: u32,
        pub dest_qp_num: u32,
        pub qp_access_flags: c_uint,
        pub cap: ibv_qp_cap,
        pub ah_attr: ibv_ah_attr,
        pub alt_ah_attr: ibv_ah_attr,
        pub pkey_index: u16,
        pub alt_pkey_index: u16,
        pub en_sqd_async_notify: u8,
        pub sq_draining: u8,
        pub max_rd_atomic: u8,
        pub max_dest_rd_atomic: u8,
        pub min_rnr_timer: u8,
        pub port_num: u8,
        pub timeout: u8,
        pub retry_cnt: u8,
        pub rnr_retry: u8,
        pub alt_port_num: u8,
        pub alt_timeout: u8,
        pub rate_limit: u32,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_port_attr {
        pub state: c_uint,
        pub max_mtu: c_uint,
        pub active_mtu: c_uint,
        pub gid_tbl_len: c_int,
        pub port_cap_flags: u32,
        pub max_msg_sz: u32,
        pub bad_pkey_cntr: u32,
        pub qkey_viol_cntr: u32,
        pub pkey_tbl_len: u16,
        pub lid: u16,
        pub sm_lid: u16,
        pub lmc: u8,
        pub max_vl_num: u8,
        pub sm_sl: u8,
        pub subnet_timeout: u8,
        pub init_type_reply: u8,
        pub active_width: u8,
        pub active_speed: u8,
        pub phys_state: u8,
        pub link_layer: u8,
        pub flags: u8,
        pub port_cap_flags2: u16,
    }
}

/// The bytes of `ibv_port_attr` that the legacy exported `ibv_query_port` fills (the
/// `_compat_ibv_port_attr` of verbs.h ends before `flags`).
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ibv_device_attr {
        pub fw_ver: [c_char; 64],
        pub node_guid: u64,
        pub sys_image_guid: u64,
        pub max_mr_size: u64,
        pub page_size_cap: u64,
        pub vendor_id: u32,
        pub vendor_part_id: u32,
        pub hw_ver: u32,
        pub max_qp: c_int,
        pub max_qp_wr: c_int,
        pub device_cap_flags: c_uint,
        pub max_sge: c_int,
        pub max_sge_rd: c_int,
        pub max_cq: c_int,
        pub max_cqe: c_int,
        pub max_mr: c_int,
        pub max_pd: c_int,
        pub max_qp_rd_atom: c_int,
        pub max_ee_rd_atom: c_int,
        pub max_res_rd_atom: c_int,
        pub max_qp_init_rd_atom: c_int,
        pub max_ee_init_rd_atom: c_int,
        pub atomic_cap: c_uint,
        pub max_ee: c_int,
        pub max_rdd: c_int,
        pub max_mw: c_int,
        pub max_raw_ipv6_qp: c_int,
        pub max_raw_ethy_qp: c_int,
        pub max_mcast_grp: c_int,
        pub max_mcast_qp_attach: c_int,
        pub max_total_mcast_qp_attach: c_int,
        pub max_ah: c_int,
        pub max_fmr: c_int,
        pub max_map_per_fmr: c_int,
        pub max_srq: c_int,
        pub max_srq_wr: c_int,
        pub max_srq_sge: c_int,
        pub max_pkeys: u16,
        pub local_ca_ack_delay: u8,
        pub phys_port_cnt: u8,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_srq {
        pub context: *mut ibv_context,
        pub srq_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub handle: u32,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
    }
}

c_struct! {
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct ibv_srq_attr {
        pub max_wr: u32,
        pub max_sge: u32,
        pub srq_limit: u32,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_srq_init_attr {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_ah {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub handle: u32,
    }
}

c_struct! {
    /// `struct ibv_grh`: the 40 bytes before a UD receive's payload.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ibv_grh {
        pub version_tclass_flow: u32,
        pub paylen: u16,
        pub next_hdr: u8,
        pub hop_limit: u8,
        pub sgid: [u8; 16],
        pub dgid: [u8; 16],
    }
}

c_struct! {
    #[repr(C)]
    pub struct ibv_async_event {
        pub element: *mut c_void,
        pub event_type: c_uint,
    }
}
