//! The C structures of rdma-core 44's `<infiniband/verbs.h>` that cross the ABI, laid out as
//! the header lays them out (x86-64 / aarch64 LP64), with the few kernel-ABI structs that the
//! exported `ibv_copy_*_kern` helpers convert. `tests/layout.rs` compiles a C program against
//! the installed headers and compares every size and offset with these.

#![allow(non_camel_case_types, missing_docs)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

// ---------------------------------------------------------------------------------------------
// Enum values and flag bits of verbs.h that the shim reads or writes (rdma-core 44).

/// `enum ibv_node_type`: `IBV_NODE_CA`.
pub const IBV_NODE_CA: c_int = 1;
/// `enum ibv_transport_type`: `IBV_TRANSPORT_IB` (RoCE included).
pub const IBV_TRANSPORT_IB: c_int = 0;

/// `enum ibv_qp_type`.
pub const IBV_QPT_RC: c_uint = 2;
pub const IBV_QPT_UC: c_uint = 3;
pub const IBV_QPT_UD: c_uint = 4;

/// `enum ibv_qp_state`.
pub const IBV_QPS_RESET: c_uint = 0;
pub const IBV_QPS_INIT: c_uint = 1;
pub const IBV_QPS_RTR: c_uint = 2;
pub const IBV_QPS_RTS: c_uint = 3;
pub const IBV_QPS_SQD: c_uint = 4;
pub const IBV_QPS_SQE: c_uint = 5;
pub const IBV_QPS_ERR: c_uint = 6;

/// `enum ibv_mig_state`: `IBV_MIG_MIGRATED`.
pub const IBV_MIG_MIGRATED: c_uint = 0;

/// `enum ibv_wr_opcode`.
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub const IBV_WR_SEND: c_uint = 2;
pub const IBV_WR_SEND_WITH_IMM: c_uint = 3;
pub const IBV_WR_RDMA_READ: c_uint = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_uint = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_uint = 6;
pub const IBV_WR_LOCAL_INV: c_uint = 7;
pub const IBV_WR_BIND_MW: c_uint = 8;
pub const IBV_WR_SEND_WITH_INV: c_uint = 9;

/// `enum ibv_wc_flags`.
pub const IBV_WC_GRH: c_uint = 1 << 0;
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
/// The completion of a SEND_WITH_INV: `imm_data` holds the invalidated R_Key (host order).
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;

/// `enum ibv_srq_attr_mask`.
pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

/// `enum ibv_qp_attr_mask`: the bits up to `IBV_QP_DEST_QPN` (1 << 20).
pub const IBV_QP_ATTR_MASK_BASIC: c_int = (1 << 21) - 1;

/// `enum ibv_access_flags`: LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC.
pub const IBV_ACCESS_BASIC: c_uint = 0xf;
/// `IBV_ACCESS_MW_BIND`: memory windows may be bound to the region.
pub const IBV_ACCESS_MW_BIND: c_uint = 1 << 4;
/// `IBV_ACCESS_ON_DEMAND`: an on-demand-paging region (pages need not be mapped yet).
pub const IBV_ACCESS_ON_DEMAND: c_uint = 1 << 6;
/// `IBV_ACCESS_HUGETLB`: a hint that the region is backed by huge pages.
pub const IBV_ACCESS_HUGETLB: c_uint = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_RANGE`: flags a device without them ignores (relaxed ordering...).
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

/// `enum ibv_device_cap_flags`.
pub const IBV_DEVICE_SYS_IMAGE_GUID: c_uint = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: c_uint = 1 << 12;
/// `IBV_DEVICE_SRQ_RESIZE`.
pub const IBV_DEVICE_SRQ_RESIZE: c_uint = 1 << 13;
/// `IBV_DEVICE_MEM_WINDOW`: memory windows (type 1).
pub const IBV_DEVICE_MEM_WINDOW: c_uint = 1 << 17;
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`: type 2B windows (bound to one QP).
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: c_uint = 1 << 24;

/// `enum ibv_mw_type`.
pub const IBV_MW_TYPE_1: c_uint = 1;
pub const IBV_MW_TYPE_2: c_uint = 2;
/// `enum ibv_atomic_cap`: `IBV_ATOMIC_HCA`.
pub const IBV_ATOMIC_HCA: c_uint = 1;

/// `enum ibv_port_state`: `IBV_PORT_ACTIVE`.
pub const IBV_PORT_ACTIVE: c_uint = 4;
/// `enum ibv_port_cap_flags`.
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `enum ibv_gid_type` (of `struct ibv_gid_entry`): `IBV_GID_TYPE_ROCE_V2`.
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
/// `enum ibv_gid_type_sysfs` (of `ibv_query_gid_type`): `IBV_GID_TYPE_SYSFS_ROCE_V2`.
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: c_uint = 1;

/// `enum ibv_fork_status`: `IBV_FORK_UNNEEDED`.
pub const IBV_FORK_UNNEEDED: c_int = 2;

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` of a context that has a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

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

/// `struct ibv_values_ex`.
#[repr(C)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

/// `struct ibv_td`: a thread domain.
#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// The custom allocator of a parent domain (`ibv_parent_domain_init_attr.alloc`).
pub type PdAllocFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
/// Its free function (`ibv_parent_domain_init_attr.free`).
pub type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

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

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

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

/// `IBV_ACCESS_ZERO_BASED`: a region addressed from 0 (device memory regions).
pub const IBV_ACCESS_ZERO_BASED: c_uint = 1 << 5;

/// The `create_cq_ex` slot of `verbs_context.ops` (what the inline `ibv_create_cq_ex` calls).
pub const VCTX_CREATE_CQ_EX: usize = 25;
/// The `create_qp_ex` slot of `verbs_context.ops` (what the inline `ibv_create_qp_ex` calls).
pub const VCTX_CREATE_QP_EX: usize = 33;

/// `struct verbs_context`: extended ops, in memory just before the `ibv_context` (its last
/// member), found through `abi_compat == __VERBS_ABI_IS_EXTENDED`.
#[repr(C)]
pub struct verbs_context {
    pub ops: [*mut c_void; VERBS_CONTEXT_SLOTS],
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

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

/// `struct ibv_mw_bind`: the argument of `ibv_bind_mw`.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// The `alloc_mw`, `bind_mw` and `dealloc_mw` ops of `ibv_context_ops`.
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

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

/// Pod: read in place as softroce's `Sge`, which has this layout.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
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

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

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

/// The bytes of `ibv_port_attr` that the legacy exported `ibv_query_port` fills (the
/// `_compat_ibv_port_attr` of verbs.h ends before `flags`).
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

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

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

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

#[repr(C)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: c_uint,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// The anonymous `per_transport_caps` member of `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_odp_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_per_transport_caps,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

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

/// `struct ibv_sa_path_rec` of `<infiniband/sa.h>` (8-byte aligned: it starts with two
/// `union ibv_gid`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_user_path_rec` of the kernel's `<rdma/ib_user_sa.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_uverbs_global_route` of the kernel's `<rdma/ib_user_verbs.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
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
    pub reserved: [u8; 5],
}

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

/// The `create_cq_ex` op.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
/// The `create_qp_ex` op.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
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

/// `struct ibv_rx_hash_conf` (inside `ibv_qp_init_attr_ex`; RSS, which softroce lacks).
#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

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

/// `struct ibv_data_buf`: one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

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

/// The layouts this file asserts, as (`sizeof T`, size), (`alignof T`, alignment) and
/// (`T.field`, offset), for the C comparison test.
pub fn layout_table() -> Vec<(String, usize)> {
    use core::mem::{align_of, offset_of, size_of};
    let mut v: Vec<(String, usize)> = Vec::new();
    macro_rules! size {
        ($($t:ident),*) => { $(
            v.push((format!("sizeof {}", stringify!($t)), size_of::<$t>()));
            v.push((format!("alignof {}", stringify!($t)), align_of::<$t>()));
        )* };
    }
    macro_rules! off {
        ($t:ident: $($f:ident),*) => { $( v.push((format!("{}.{}", stringify!($t), stringify!($f)), offset_of!($t, $f))); )* };
    }
    size!(
        ibv_device,
        ibv_context_ops,
        ibv_context,
        verbs_context,
        ibv_pd,
        ibv_mr,
        ibv_mw,
        ibv_mw_bind_info,
        ibv_mw_bind,
        ibv_comp_channel,
        ibv_cq,
        ibv_qp,
        ibv_wc,
        ibv_sge,
        ibv_send_wr,
        ibv_recv_wr,
        ibv_qp_cap,
        ibv_qp_init_attr,
        ibv_global_route,
        ibv_ah_attr,
        ibv_qp_attr,
        ibv_port_attr,
        ibv_device_attr,
        ibv_srq,
        ibv_srq_attr,
        ibv_srq_init_attr,
        ibv_ah,
        ibv_grh,
        ibv_async_event,
        ibv_query_device_ex_input,
        ibv_odp_caps,
        ibv_tso_caps,
        ibv_rss_caps,
        ibv_packet_pacing_caps,
        ibv_tm_caps,
        ibv_cq_moderation_caps,
        ibv_pci_atomic_caps,
        ibv_device_attr_ex,
        ibv_sa_path_rec,
        ib_user_path_rec,
        ib_uverbs_global_route,
        ib_uverbs_ah_attr,
        ib_uverbs_qp_attr,
        ibv_cq_init_attr_ex,
        ibv_poll_cq_attr,
        ibv_cq_ex,
        ibv_rx_hash_conf,
        ibv_qp_init_attr_ex,
        ibv_data_buf,
        ibv_qp_ex,
        ibv_alloc_dm_attr,
        ibv_dm,
        ibv_td,
        ibv_td_init_attr,
        ibv_parent_domain_init_attr,
        ibv_values_ex
    );
    off!(ibv_alloc_dm_attr: length, log_align_req, comp_mask);
    off!(ibv_dm: context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle);
    off!(ibv_td: context);
    off!(ibv_td_init_attr: comp_mask);
    off!(ibv_parent_domain_init_attr: pd, td, comp_mask, alloc, free, pd_context);
    off!(ibv_values_ex: comp_mask, raw_clock);
    off!(ibv_device: node_type, transport_type, name, dev_name, dev_path, ibdev_path);
    off!(ibv_context_ops: alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv);
    off!(ibv_context: device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat);
    off!(verbs_context: sz, context);
    off!(ibv_pd: context, handle);
    off!(ibv_mr: context, pd, addr, length, handle, lkey, rkey);
    off!(ibv_mw: context, pd, rkey, handle);
    v.push(("ibv_mw.type".into(), offset_of!(ibv_mw, type_)));
    off!(ibv_mw_bind_info: mr, addr, length, mw_access_flags);
    off!(ibv_mw_bind: wr_id, send_flags, bind_info);
    off!(ibv_comp_channel: context, fd, refcnt);
    off!(ibv_cq: context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed);
    off!(ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed);
    off!(ibv_wc: wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits);
    off!(ibv_sge: addr, length, lkey);
    off!(ibv_send_wr: wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type, bind_mw);
    // The bind_mw members the accessors read (ibv_send_wr::bind_mw_*), by 8-byte word.
    for (f, word) in [
        ("mw", 0),
        ("rkey", 1),
        ("bind_info.mr", 2),
        ("bind_info.addr", 3),
        ("bind_info.length", 4),
        ("bind_info.mw_access_flags", 5),
    ] {
        v.push((
            format!("ibv_send_wr.bind_mw.{f}"),
            offset_of!(ibv_send_wr, bind_mw) + 8 * word,
        ));
    }
    v.push((
        "ibv_send_wr.invalidate_rkey".into(),
        offset_of!(ibv_send_wr, imm_data),
    ));
    off!(ibv_recv_wr: wr_id, next, sg_list, num_sge);
    off!(ibv_qp_init_attr: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all);
    off!(ibv_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class);
    off!(ibv_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global, port_num);
    off!(ibv_qp_attr: qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit);
    off!(ibv_port_attr: state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2);
    off!(ibv_device_attr: fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt);
    off!(ibv_srq: context, srq_context, pd, handle, mutex, cond, events_completed);
    off!(ibv_srq_attr: max_wr, max_sge, srq_limit);
    off!(ibv_srq_init_attr: srq_context, attr);
    off!(ibv_ah: context, pd, handle);
    off!(ibv_grh: version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid);
    off!(ibv_async_event: element, event_type);
    // verbs_context.ops is one array here; the C side names the members.
    let slot = size_of::<*mut c_void>();
    v.push(("verbs_context.query_port".into(), VCTX_QUERY_PORT * slot));
    v.push((
        "verbs_context.query_device_ex".into(),
        VCTX_QUERY_DEVICE_EX * slot,
    ));
    v.push((
        "verbs_context.create_cq_ex".into(),
        VCTX_CREATE_CQ_EX * slot,
    ));
    v.push((
        "verbs_context.create_qp_ex".into(),
        VCTX_CREATE_QP_EX * slot,
    ));
    for (name, at) in [
        ("advise_mr", VCTX_ADVISE_MR),
        ("reg_dm_mr", VCTX_REG_DM_MR),
        ("alloc_dm", VCTX_ALLOC_DM),
        ("free_dm", VCTX_FREE_DM),
        ("alloc_parent_domain", VCTX_ALLOC_PARENT_DOMAIN),
        ("dealloc_td", VCTX_DEALLOC_TD),
        ("alloc_td", VCTX_ALLOC_TD),
        ("query_rt_values", VCTX_QUERY_RT_VALUES),
    ] {
        v.push((format!("verbs_context.{name}"), at * slot));
    }
    // `cq` and `qp_base` hold the base struct's fields, which C spells out (ibv_cq_ex) or
    // names qp_base (ibv_qp_ex): the members after them are checked by name.
    off!(ibv_cq_init_attr_ex: cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain);
    off!(ibv_poll_cq_attr: comp_mask);
    off!(ibv_cq_ex: comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns);
    off!(ibv_rx_hash_conf: rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask);
    off!(ibv_qp_init_attr_ex: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags);
    off!(ibv_data_buf: addr, length);
    off!(ibv_qp_ex: qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write);
    v.push((
        "ibv_cq_ex.async_events_completed".into(),
        offset_of!(ibv_cq_ex, cq) + offset_of!(ibv_cq, async_events_completed),
    ));
    // Declared with the GID queries (objects.rs), checked here with the others.
    use crate::ibv_gid_entry;
    size!(ibv_gid_entry);
    off!(ibv_gid_entry: gid, gid_index, port_num, gid_type, ndev_ifindex);
    off!(ibv_query_device_ex_input: comp_mask);
    off!(ibv_odp_caps: general_caps, per_transport_caps);
    off!(ibv_tso_caps: max_tso, supported_qpts);
    off!(ibv_rss_caps: supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function);
    off!(ibv_packet_pacing_caps: qp_rate_limit_min, qp_rate_limit_max, supported_qpts);
    off!(ibv_tm_caps: max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge);
    off!(ibv_cq_moderation_caps: max_cq_count, max_cq_period);
    off!(ibv_pci_atomic_caps: fetch_add, swap, compare_swap);
    off!(ibv_device_attr_ex: orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex);
    off!(ibv_sa_path_rec: dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector, packet_life_time, preference);
    off!(ib_user_path_rec: dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey, hop_limit, traffic_class, numb_path, sl, mtu_selector, rate_selector, rate, packet_life_time_selector, packet_life_time, preference);
    off!(ib_uverbs_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved);
    off!(ib_uverbs_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved);
    off!(ib_uverbs_qp_attr: qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, reserved);
    v
}
