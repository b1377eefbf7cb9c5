//! The C structs and constants of rdma-core 44's `rdma/rdma_cma.h` and `infiniband/sa.h`,
//! with the layouts the compiled programs use (sizes and offsets checked below against
//! gcc's for x86_64, and by ibverbs/tests/rdmacm_layout.c).

#![allow(non_camel_case_types, missing_docs)]

use libc::{c_char, c_int, c_void, sockaddr, sockaddr_storage, socklen_t};

use crate::ffi::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp};

/// `enum rdma_cm_event_type`.
pub const RDMA_CM_EVENT_ADDR_RESOLVED: c_int = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: c_int = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: c_int = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: c_int = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: c_int = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: c_int = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: c_int = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: c_int = 7;
pub const RDMA_CM_EVENT_REJECTED: c_int = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: c_int = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: c_int = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: c_int = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: c_int = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: c_int = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: c_int = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: c_int = 15;

/// `enum rdma_port_space`.
pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013F;

/// `RDMA_UDP_QKEY`: the Q_Key rdma_cm gives the UDP port space's QPs and a group's members.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `rdma_set_option` levels and names.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `rdma_addrinfo.ai_flags`.
pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_NOROUTE: c_int = 4;
pub const RAI_FAMILY: c_int = 8;

/// `struct rdma_ib_addr`: 34 bytes, 2-aligned.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
}

/// `struct rdma_addr`: source and destination as `sockaddr_storage` unions.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: sockaddr_storage,
    pub dst: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`), which the libibverbs side declares.
pub use crate::ffi::ibv_sa_path_rec;

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub pd: *mut ibv_pd,
    pub qp_type: libc::c_uint,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

/// `rdma_cm_join_mc_attr_ex.comp_mask`: `addr` is given.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
/// `rdma_cm_join_mc_attr_ex.comp_mask`: `join_flags` is given.
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
/// The first `comp_mask` bit that means nothing.
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
/// A full member: sends to and receives from the group.
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
/// A send-only full member: its QP is not attached.
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// The first join flag value that is not one.
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// The event's `param` union.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

// gcc's layout on x86_64 (rdma-core 44's headers).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<rdma_addr>() == 296);
    assert!(offset_of!(rdma_addr, ibaddr) == 256);
    assert!(size_of::<rdma_route>() == 312);
    assert!(offset_of!(rdma_route, path_rec) == 296);
    assert!(offset_of!(rdma_route, num_paths) == 304);
    assert!(size_of::<rdma_cm_id>() == 416);
    assert!(offset_of!(rdma_cm_id, route) == 32);
    assert!(offset_of!(rdma_cm_id, ps) == 344);
    assert!(offset_of!(rdma_cm_id, port_num) == 348);
    assert!(offset_of!(rdma_cm_id, event) == 352);
    assert!(offset_of!(rdma_cm_id, qp_type) == 408);
    assert!(size_of::<rdma_cm_event>() == 80);
    assert!(offset_of!(rdma_cm_event, event) == 16);
    assert!(offset_of!(rdma_cm_event, status) == 20);
    assert!(offset_of!(rdma_cm_event, param) == 24);
    assert!(size_of::<rdma_conn_param>() == 24);
    assert!(offset_of!(rdma_conn_param, qp_num) == 16);
    assert!(size_of::<rdma_cm_join_mc_attr_ex>() == 16);
    assert!(offset_of!(rdma_cm_join_mc_attr_ex, addr) == 8);
    assert!(size_of::<rdma_ud_param>() == 56);
    assert!(offset_of!(rdma_ud_param, ah_attr) == 16);
    assert!(offset_of!(rdma_ud_param, qp_num) == 48);
    assert!(offset_of!(rdma_ud_param, qkey) == 52);
    assert!(size_of::<rdma_addrinfo>() == 96);
    assert!(size_of::<ibv_sa_path_rec>() == 64);
    assert!(offset_of!(ibv_sa_path_rec, raw_traffic) == 36);
    assert!(offset_of!(ibv_sa_path_rec, flow_label) == 40);
    assert!(offset_of!(ibv_sa_path_rec, reversible) == 48);
    assert!(offset_of!(ibv_sa_path_rec, pkey) == 54);
    assert!(offset_of!(ibv_sa_path_rec, sl) == 56);
};
