//! Connection management in librdmacm's shape: an event channel, communication identifiers,
//! address and route resolution, connect / listen / accept / reject / disconnect, and events,
//! carried as InfiniBand CM MADs over QP1 ([`crate::cm`]), so that softroce endpoints connect
//! to each other and to Linux's rdma_cm with no side channel.
//!
//! ```no_run
//! use std::time::Duration;
//! use softroce::driver::DeviceConfig;
//! use softroce::ib::*;
//! use softroce::rdma_cm::*;
//! use softroce::verbs::*;
//!
//! # fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let ctx = Context::open(&DeviceConfig::new("127.0.0.1:4791".parse()?))?;
//! let ch = EventChannel::new(&ctx)?;
//! let id = ch.create_id();
//! id.resolve_addr("127.0.0.2".parse()?, 7174)?;
//! assert_eq!(ch.get_event(Duration::from_secs(2))?.kind, EventKind::AddrResolved);
//! id.resolve_route()?;
//! assert_eq!(ch.get_event(Duration::from_secs(2))?.kind, EventKind::RouteResolved);
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16)?;
//! let qp = id.create_qp(&pd, &QpInitAttr {
//!     send_cq: &cq,
//!     recv_cq: &cq,
//!     cap: QpCap::default(),
//!     qp_type: QpType::Rc,
//!     sq_sig_all: false,
//! })?;
//! id.connect(&ConnParam::default())?;
//! let ev = ch.get_event(Duration::from_secs(10))?;
//! assert_eq!(ev.kind, EventKind::Established);
//! # let _ = qp;
//! # Ok(())
//! # }
//! ```
//!
//! What rdma_cm does to the QP, this does too: `create_qp` moves it to INIT; on the REP (active
//! side) or at `accept` (passive side) it goes to RTR and RTS with the peer's QPN and PSN; on
//! disconnection it goes to ERROR.
//!
//! A UD identifier ([`EventChannel::create_id_in`] with [`PortSpace::Udp`]) resolves its
//! peer's QP with SIDR: its QP goes to RTS with [`RDMA_UDP_QKEY`] at `create_qp`; `connect`
//! sends a SIDR_REQ and [`EventKind::Established`] carries the peer's QPN and Q_Key in
//! [`RdmaCmEvent::ud`]; `accept` and `reject` answer a connect request with a SIDR_REP.
//!
//! One event channel serves one device context: QP1 and its CM are per device.

mod channel;
mod error;
mod event;
mod id;
mod params;
mod state;

pub use channel::{CmId, EventChannel, RdmaCmEvent};
pub use error::RdmaCmError;
pub use event::EventKind;
pub use params::{
    ConnParam, PortSpace, UdParam, RDMA_UDP_QKEY, STATUS_INVALID, STATUS_TIMED_OUT,
    UD_CONNECT_PRIVATE_DATA_LEN,
};
