//! rsockets: the socket API librdmacm carries over RDMA connections. Stream rsockets
//! (connect/accept, blocking and non-blocking send and receive, shutdown, options, rpoll and
//! rselect, riomap/riowrite) speak rsocket.c's wire protocol (spec-notes/rsockets.md).
//! Datagram rsockets are not implemented yet: rsocket(SOCK_DGRAM) fails with ENOSYS (issue 37).
//!
//! Files: `api` (the exports), `table` (handles), `stream` (connect, accept, shutdown,
//! close), `conn` (the endpoint), `datapath` (completions, credits, copies), `io` (the
//! blocking loops), `poll` (rpoll, rselect), `iomap` (riomap, riowrite), `verbs` (the verbs
//! calls), `proto` and `ring` (encodings and counters, without I/O).

mod api;
mod conn;
mod datapath;
mod io;
mod iomap;
mod keepalive;
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
