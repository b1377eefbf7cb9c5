//! The transport core (RC, UC and UD queue pairs, shared receive queues), without I/O and without a clock (in the manner of
//! quinn-proto): packets, verbs calls and the time go in; packets, completions and the next
//! deadline come out. The driver (sockets, threads, timers) wraps it; tests drive it with
//! virtual time.
//!
//! Split as Linux rxe splits it: [`requester`](self) (WQE -> request packets), responder
//! (request packets -> memory, ACKs, READ/atomic responses) and completer (responses ->
//! completions, retransmission decisions), all operating on one [`QpCore`] per QP. The
//! device's [`Endpoint`] stands between the QPs and the datagrams: it demultiplexes what
//! arrives (ICRC, parse, QP1, QP lookup, sender check, UD GRH area) and seals what leaves, for
//! the driver and the simulations alike.

pub mod cc;
mod completer;
pub mod counters;
pub mod endpoint;
pub mod keys;
mod local_ops;
pub mod mr;
pub mod mw;
pub mod params;
mod post;
pub mod qp;
mod requester;
mod responder;
pub mod srq;
mod state;
pub mod tag_match;
mod tm_rndv;
pub mod window;
pub mod wqe;
pub mod xrc;
mod xrc_qp;

#[cfg(test)]
mod tests;

pub use counters::Counters;
pub use endpoint::{DatagramEvent, Endpoint, IpFields, Members, OneQp, QpSet, GSI_QPN};
pub use keys::{DeregFault, MrTable};
pub use mr::{Mr, MrFault};
pub use mw::{Mw, MwFault, MwState, MwType};
pub use params::{ACKREQ_EVERY, MAX_QUEUED_RESPONSES, MAX_UNACKED_PSNS};
pub use qp::{
    wire_hop_limit, CqSide, Gather, NetHeader, QpConfig, QpCore, QueueDepths, Transmit, MAX_PACKET,
};
pub use srq::Srq;
pub use xrc::{XrcDomain, XrcRole};
