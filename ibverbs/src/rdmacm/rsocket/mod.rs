//! rsockets: the socket API librdmacm carries over RDMA connections. Stream rsockets
//! (connect/accept, blocking and non-blocking send and receive, shutdown, options, rpoll and
//! rselect, riomap/riowrite) speak rsocket.c's wire protocol (spec-notes/rsockets.md).
//! Datagram rsockets (UD QPs, the UDP service that learns a peer's QPN, rsendto/rrecvfrom,
//! rpoll) follow rsocket.c's `ds_*` and `udp_svc_*` functions.
//!
//! Files: `api` (the exports), `status` (their -1-and-errno returns), `table` (handles),
//! `stream` (connect, accept, shutdown, close), `conn` (the endpoint), `datapath`
//! (completions, credits, copies), `io` (the blocking loops), `poll` (rpoll, rselect),
//! `iomap` (riomap, riowrite), `verbs` (the verbs calls), `proto` and `ring` (encodings and
//! counters, without I/O); for datagram rsockets `dgram` (the socket, its destinations and
//! datagram queue), `ud` (a UD QP per source address), `udp_svc` (the UDP service thread)
//! and `dgram_api` (the exports' datagram branches).

mod api;
mod conn;
mod datapath;
mod dgram;
mod dgram_api;
mod io;
mod iomap;
mod keepalive;
mod poll;
#[allow(dead_code)] // `imm_wire`, the ImmDt bytes, is checked by tests and spec-notes R3 only
pub(crate) mod proto;
#[allow(dead_code)] // `credit` is the update for a window not in registered memory
pub(crate) mod ring;
mod status;
mod stream;
mod table;
mod ud;
mod udp_svc;
mod verbs;

pub use api::*;
pub use poll::*;
