//! The IBVERBS_1.0 C structures: the 1.0 objects' old layouts, each pointing at the current
//! object (`real_*`), and the 1.0 data-path ops table.

use libc::{c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

use crate::ffi::*;

/// `struct ibv_device_1_0`.
#[repr(C)]
pub struct ibv_device_1_0 {
    pub obsolete_sysfs_dev: *mut c_void,
    pub obsolete_sysfs_ibdev: *mut c_void,
    pub real_device: *mut ibv_device,
    pub _ops: [*mut c_void; 2],
}

type PollCq10 = unsafe extern "C" fn(*mut ibv_cq_1_0, c_int, *mut ibv_wc) -> c_int;
type ReqNotify10 = unsafe extern "C" fn(*mut ibv_cq_1_0, c_int) -> c_int;
type PostSend10 =
    unsafe extern "C" fn(*mut ibv_qp_1_0, *mut ibv_send_wr_1_0, *mut *mut ibv_send_wr_1_0) -> c_int;
type PostRecv10 =
    unsafe extern "C" fn(*mut ibv_qp_1_0, *mut ibv_recv_wr_1_0, *mut *mut ibv_recv_wr_1_0) -> c_int;
type PostSrqRecv10 = unsafe extern "C" fn(
    *mut ibv_srq_1_0,
    *mut ibv_recv_wr_1_0,
    *mut *mut ibv_recv_wr_1_0,
) -> c_int;

/// `struct ibv_context_ops_1_0`: 27 pointers, of which the 1.0 inline verbs call the five
/// data-path ones; the others stay NULL, as in rdma-core.
#[repr(C)]
pub struct ibv_context_ops_1_0 {
    pub _control: [*mut c_void; 7],
    pub poll_cq: Option<PollCq10>,
    pub req_notify_cq: Option<ReqNotify10>,
    pub _cq: [*mut c_void; 7],
    pub post_srq_recv: Option<PostSrqRecv10>,
    pub _qp: [*mut c_void; 4],
    pub post_send: Option<PostSend10>,
    pub post_recv: Option<PostRecv10>,
    pub _ah_mcast: [*mut c_void; 4],
}

/// `struct ibv_context_1_0`.
#[repr(C)]
pub struct ibv_context_1_0 {
    pub device: *mut ibv_device_1_0,
    pub ops: ibv_context_ops_1_0,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub real_context: *mut ibv_context,
}

/// `struct ibv_pd_1_0`.
#[repr(C)]
pub struct ibv_pd_1_0 {
    pub context: *mut ibv_context_1_0,
    pub handle: u32,
    pub real_pd: *mut ibv_pd,
}

/// `struct ibv_mr_1_0`.
#[repr(C)]
pub struct ibv_mr_1_0 {
    pub context: *mut ibv_context_1_0,
    pub pd: *mut ibv_pd_1_0,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub real_mr: *mut ibv_mr,
}

/// `struct ibv_srq_1_0`.
#[repr(C)]
pub struct ibv_srq_1_0 {
    pub context: *mut ibv_context_1_0,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd_1_0,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub real_srq: *mut ibv_srq,
}

/// `struct ibv_qp_init_attr_1_0`.
#[repr(C)]
pub struct ibv_qp_init_attr_1_0 {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq_1_0,
    pub recv_cq: *mut ibv_cq_1_0,
    pub srq: *mut ibv_srq_1_0,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_send_wr_1_0`: `next` first, and no `qp_type`/`bind_mw` after the `wr` union
/// (here its largest member, atomic; `ud.ah` is its first word, a 1.0 AH).
#[repr(C)]
pub struct ibv_send_wr_1_0 {
    pub next: *mut ibv_send_wr_1_0,
    pub wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_int,
    pub imm_data: u32,
    pub wr: send_wr_atomic,
}

/// `struct ibv_recv_wr_1_0`.
#[repr(C)]
pub struct ibv_recv_wr_1_0 {
    pub next: *mut ibv_recv_wr_1_0,
    pub wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_qp_1_0`.
#[repr(C)]
pub struct ibv_qp_1_0 {
    pub context: *mut ibv_context_1_0,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd_1_0,
    pub send_cq: *mut ibv_cq_1_0,
    pub recv_cq: *mut ibv_cq_1_0,
    pub srq: *mut ibv_srq_1_0,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub real_qp: *mut ibv_qp,
}

/// `struct ibv_cq_1_0`.
#[repr(C)]
pub struct ibv_cq_1_0 {
    pub context: *mut ibv_context_1_0,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub real_cq: *mut ibv_cq,
}

/// `struct ibv_ah_1_0`.
#[repr(C)]
pub struct ibv_ah_1_0 {
    pub context: *mut ibv_context_1_0,
    pub pd: *mut ibv_pd_1_0,
    pub handle: u32,
    pub real_ah: *mut ibv_ah,
}
