//! How the endpoint names a connection and its state.

/// A connection, named by the communication ID this endpoint gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// Where a connection stands in IBTA's CM state diagram (§12.9.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Active: our REQ is out, unanswered.
    ReqSent,
    /// Active: the peer MRAed our REQ; waiting longer.
    MraReqRcvd,
    /// Active: the peer's REP is here; the application moves its QP, then establishes.
    RepRcvd,
    /// Passive: a REQ is here; the application accepts or rejects.
    ReqRcvd,
    /// Passive: our REP is out, waiting for the RTU.
    RepSent,
    /// Passive: the peer MRAed our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// Our DREQ is out.
    DreqSent,
    /// The peer's DREQ is here; the application answers with a DREP.
    DreqRcvd,
    /// Disconnected; the QP must not be reused until this ends.
    TimeWait,
    /// SIDR requester: our SIDR_REQ is out, unanswered (repeated as a REQ is).
    SidrReqSent,
    /// SIDR responder: a SIDR_REQ is here; the application answers with a SIDR_REP.
    SidrReqRcvd,
    /// SIDR responder: our SIDR_REP is out; kept for a while to answer a repeated SIDR_REQ
    /// (whose requester missed the reply) with the same reply.
    SidrRepSent,
}
