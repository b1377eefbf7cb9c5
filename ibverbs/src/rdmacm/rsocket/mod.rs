//! rsockets: the socket API librdmacm carries over RDMA connections. Stream rsockets
//! (blocking and non-blocking send/receive, connect/accept, options) speak rsocket.c's wire
//! protocol (spec-notes/rsockets.md); rpoll/rselect and riomap/riowrite too; datagram rsockets and the
//! msg/to/from calls are still refused with ENOSYS in `refused.rs` (issue 37).

mod api;
mod conn;
mod datapath;
mod io;
mod iomap;
mod poll;
#[allow(dead_code)] // the datagram encodings wait for that mode (issue 37)
pub(crate) mod proto;
#[allow(dead_code)] // `credit` is the update for a window not in registered memory
pub(crate) mod ring;
mod stream;
mod table;
mod verbs;

pub use api::*;
pub use poll::*;
