//! Connection parameters between C and softroce: `rdma_conn_param` both ways and the
//! `rdma_ud_param` a UD identifier's events carry.

use std::ptr;

use libc::{c_int, EINVAL};
use softroce::ib::Gid;
use softroce::rdma_cm::{ConnParam, UdParam};

use super::ffi::*;
use crate::ffi::*;

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "as many as the device allows".
const RDMA_MAX: u8 = 0xff;

/// The device's bound on RDMA READ / atomic depth (ibv_query_device's max_qp_rd_atom).
pub(super) fn max_rd_atom() -> u8 {
    softroce::ib::DeviceLimits::default()
        .max_qp_rd_atom
        .min(u8::MAX as u32 - 1) as u8
}

/// A C `rdma_conn_param` as softroce's; NULL gives rdma_cm's defaults (no READs, retry 7).
/// EINVAL for a depth above the device's, as librdmacm checks it.
///
/// # Safety
///
/// `p` is NULL or a readable rdma_conn_param whose private data is readable.
pub(super) unsafe fn param_from_c(p: *const rdma_conn_param) -> Result<ConnParam, c_int> {
    if p.is_null() {
        return Ok(ConnParam {
            private_data: Vec::new(),
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
        });
    }
    // SAFETY: by the caller's promise.
    let p = unsafe { &*p };
    let max = max_rd_atom();
    let depth = |v: u8| match v {
        RDMA_MAX => Ok(max),
        v if v > max => Err(EINVAL),
        v => Ok(v),
    };
    let data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's private data holds `private_data_len` bytes.
        unsafe {
            std::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len as usize)
        }
        .to_vec()
    };
    Ok(ConnParam {
        private_data: data,
        responder_resources: depth(p.responder_resources)?,
        initiator_depth: depth(p.initiator_depth)?,
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
    })
}

/// softroce's connection parameters as C's, with QP number `qp_num` (private data is added
/// by the channel).
pub(super) fn param_to_c(p: &ConnParam, qp_num: u32) -> rdma_conn_param {
    rdma_conn_param {
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: 1,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: 0,
        qp_num,
    }
}

/// `rdma_ud_param` as the kernel's ucma gives it on RoCE: a global AH (the peer's GID, hop
/// limit 64, source GID index 0 = the device's address, port 1, no LID), the peer's QPN and
/// Q_Key; private data is added by the channel.
pub(super) fn ud_to_c(u: &UdParam) -> rdma_ud_param {
    roce_ud_param(Gid::from_ip(u.addr).0, 0, u.qp_num, u.qkey)
}

/// A RoCE `rdma_ud_param` towards `dgid` (a peer's GID, or a multicast group's): a global AH
/// with hop limit 64 (the route's, and IPV6_DEFAULT_HOPLIMIT for a group), traffic class
/// `tos`, source GID index 0 (the device's address), port 1, no LID; QPN and Q_Key as given;
/// no private data.
pub(super) fn roce_ud_param(dgid: [u8; 16], tos: u8, qp_num: u32, qkey: u32) -> rdma_ud_param {
    rdma_ud_param {
        private_data: ptr::null(),
        private_data_len: 0,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid,
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: tos,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        },
        qp_num,
        qkey,
    }
}
