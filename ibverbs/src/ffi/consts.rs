//! The enum values and flag bits of `<infiniband/verbs.h>` that the shim reads or writes
//! (rdma-core 44), and the sysfs name lengths.

use libc::{c_int, c_uint};

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

/// `enum ibv_qp_attr_mask`: the bits the shim's own modify calls name.
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

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
/// `IBV_DEVICE_XRC`: XRC domains, SRQs and QPs (spec-notes/xrc.md).
pub const IBV_DEVICE_XRC: c_uint = 1 << 20;
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
