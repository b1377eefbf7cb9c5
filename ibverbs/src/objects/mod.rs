//! The exported functions and the objects behind the C handles, one file per object kind (as
//! `softroce::verbs` is split), all built on the one handle type of [`handle`]. The extended
//! verbs are files of their own here (`cq_ex`, `qp_ex`, `dm`, `td`, `parent_domain`, ...);
//! the librdmacm half of the shim (`crate::rdmacm`) builds its own objects on [`handle`] and
//! reaches these through their exported functions and [`cm_hooks`].

mod ah;
mod async_event;
pub(crate) mod cm_hooks;
mod common;
mod context;
mod cq;
mod cq_ex;
mod cq_ex_state;
mod cq_resize;
mod ctx;
mod device;
mod dm;
mod dm_mr;
pub(crate) mod handle;
mod mr;
mod mw;
mod odp;
mod parent_domain;
mod pd;
mod port;
mod post;
mod qp;
mod qp_ex;
mod qp_ex_state;
mod query_device_ex;
mod rereg;
mod srq;
mod srq_ex;
mod strings;
mod td;
mod wr;
mod xrcd;

pub use ah::*;
pub use async_event::*;
pub use context::*;
pub use cq::*;
pub use cq_resize::ibv_resize_cq;
pub(crate) use ctx::CMD_DEVICE;
pub use device::*;
pub use mr::*;
pub use pd::*;
pub use port::*;
pub use qp::*;
pub use query_device_ex::ibv_query_device;
pub use rereg::*;
pub use srq::*;
pub use strings::*;
