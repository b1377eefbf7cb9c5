//! The vocabulary of the verbs, shared by every layer above the wire: the types and values of
//! libibverbs (QP states and attributes, access flags, work requests and completions), the
//! typed errors of verbs calls, and the kernel's modify-QP rules (`ib_modify_qp_is_ok`).
//!
//! It sits below the transport core as `ib_verbs.h` and the IB core's QP state table sit below
//! the drivers in the kernel: the transport, the driver and the verbs API all speak these
//! types, so they live beneath all three and import none of them. They have this one path
//! (`softroce::ib::QpState`); `softroce::verbs` holds only the verbs' objects and calls.

mod error;
mod qp_attr;
mod tm;
mod types;

pub use error::{QueueKind, Result, SgeFault, VerbsError};
pub use qp_attr::{
    apply_modify, check_cap, check_modify, check_sqd_exit, sized_as_rxe, DeviceLimits,
    GID_TABLE_CAPACITY, MAX_MCAST_GROUPS, MAX_MCAST_QP_ATTACH,
};
pub use tm::{TmInfo, TmOp, TmOpKind};
pub use types::*;
