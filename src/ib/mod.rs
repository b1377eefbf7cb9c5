//! The vocabulary of the verbs, shared by every layer above the wire: the types and values of
//! libibverbs (QP states and attributes, access flags, work requests and completions), the
//! typed errors of verbs calls, and the kernel's modify-QP rules (`ib_modify_qp_is_ok`).
//!
//! It sits below the transport core as `ib_verbs.h` and the IB core's QP state table sit below
//! the drivers in the kernel: the transport, the driver and the verbs API all speak these
//! types, so they live beneath all three and import none of them. The verbs API re-exports
//! them under `softroce::verbs`.

pub mod error;
pub mod qp_attr;
pub mod types;

pub use error::{QueueKind, Result, SgeFault, VerbsError};
pub use qp_attr::DeviceLimits;
pub use types::*;
