//! The InfiniBand communication manager (IBTA vol. 1 chapter 12) as a state machine without I/O
//! and without a clock, in the manner of the transport core: MADs and the time go in; MADs to
//! send, connection events and the next deadline come out.
//!
//! One [`CmEndpoint`] per device speaks for every connection of that device over QP1. It keeps,
//! per connection, the state of IBTA's CM state diagram (§12.9.6, and Linux's cm.c, which the
//! peers of softroce run): REQ sent / received, MRA, REP sent / received, established, DREQ sent /
//! received, time-wait. It retransmits an unanswered message after the peer's CM response
//! timeout, at most `max_cm_retries` times, answers duplicates as Linux does (the REP again
//! after a duplicate REQ's MRA, the RTU again after a duplicate REP, the DREP again in
//! time-wait), rejects REQs for services nobody listens on, and bounds the connections a REQ
//! flood can leave half-open.
//!
//! UD services are resolved with SIDR (§12.11): [`CmEndpoint::sidr_request`] sends a SIDR_REQ
//! and repeats it as a REQ until a SIDR_REP from the address it went to answers it; a listener
//! reports [`CmEvent::SidrRequest`] and answers with [`CmEndpoint::sidr_reply`].
//!
//! The layer above (the rdma_cm-shaped API) moves QPs: it reads the peer's QPN, PSN and
//! resources from [`CmEvent::ConnectRequest`] and [`CmEvent::RepReceived`], modifies its QP,
//! then calls [`CmEndpoint::accept`] or [`CmEndpoint::establish`].

mod config;
mod conn;
mod counters;
mod endpoint;
mod error;
mod params;

#[cfg(test)]
mod tests;

pub use config::EndpointConfig;
pub use conn::{ConnId, ConnState};
pub use counters::CmCounters;
pub use endpoint::{CmEndpoint, Outgoing};
pub use error::CmError;
pub use params::{
    AcceptParams, CmEvent, ConnectParams, PeerParams, RejectInfo, SidrReply, SidrRequest,
};

/// An IBA time value: 4.096 us * 2^`exponent` (the encoding of CM response timeouts, service
/// timeouts, local ACK timeouts and packet life times), saturating at 2^31 * 4.096 us.
pub fn iba_time(exponent: u8) -> std::time::Duration {
    std::time::Duration::from_nanos(4096u64 << exponent.min(31))
}
