//! rsockets: the socket API librdmacm carries over RDMA connections. Stream rsockets
//! (blocking and non-blocking send/receive, connect/accept, options) speak rsocket.c's wire
//! protocol (spec-notes/rsockets.md); rpoll, rselect, datagram rsockets and the iomap calls
//! are still refused with ENOSYS in `refused.rs` (issue 37).

mod api;
mod conn;
mod datapath;
mod io;
mod poll;
#[allow(dead_code)] // the datagram and iomap encodings wait for those modes (issue 37)
pub(crate) mod proto;
#[allow(dead_code)] // `credit` is the update for a window not in registered memory
pub(crate) mod ring;
mod stream;
mod table;
mod verbs;

pub use api::*;
pub use poll::*;
