//! The verbs API: the objects and calls of libibverbs (device context, protection domain,
//! memory region, completion queue, queue pair), with the same names and semantics, Rust
//! ownership, and typed errors. The values they take and return (attributes, work requests,
//! completions, errors) are [`crate::ib`]'s.
//!
//! ```no_run
//! use softroce::driver::DeviceConfig;
//! use softroce::ib::*;
//! use softroce::verbs::*;
//!
//! # fn main() -> Result<()> {
//! let ctx = Context::open(&DeviceConfig::new("127.0.0.1:4791".parse().unwrap()))?;
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.register_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let cq = ctx.create_cq(64)?;
//! let qp = pd.create_qp(&QpInitAttr {
//!     send_cq: &cq,
//!     recv_cq: &cq,
//!     cap: QpCap::default(),
//!     qp_type: QpType::Rc,
//!     sq_sig_all: false,
//! })?;
//! // modify to INIT, RTR (with the peer's QPN, PSN and GID), RTS; then post work requests:
//! let sge = [mr.sge(0, 4096)];
//! # let _ = (qp, sge);
//! # Ok(())
//! # }
//! ```

pub mod ah;
pub mod cq;
pub(crate) mod device;
pub mod foreign_mr;
pub mod mr;
pub mod mw;
pub mod post_batch;
pub mod qp;
pub mod srq;
pub mod xrc;

// Window types and states are the transport's (it keeps the windows); the verbs name them here.
pub use crate::transport::{MwState, MwType};
pub use ah::AddressHandle;
pub use cq::CompletionQueue;
pub use device::{Context, ProtectionDomain};
pub use mr::MemoryRegion;
pub use mw::{inc_rkey, MemoryWindow, MwBind};
pub use post_batch::PostBatch;
pub use qp::{PostError, QpInitAttr, QueuePair, RcConnect, UdSendWr};
pub use srq::SharedReceiveQueue;
pub use xrc::XrcDomain;
