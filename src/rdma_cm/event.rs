//! What an event says happened.

/// rdma_cm's event types (`enum rdma_cm_event_type`) that softroce produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// `rdma_resolve_addr` finished.
    AddrResolved,
    /// `rdma_resolve_route` finished.
    RouteResolved,
    /// A peer wants to connect to a listening identifier: the event's `id` is the new
    /// connection's, `listen_id` the listener's.
    ConnectRequest,
    /// The connection is up.
    Established,
    /// The REP came for a connect whose QP the application moves itself
    /// ([`super::CmId::connect_external`]): it takes the QP to RTR and RTS with
    /// [`super::CmId::rc_connect`]'s attributes, then calls [`super::CmId::establish`].
    ConnectResponse,
    /// The peer refused, with IBTA's reason ([`crate::wire::cm::rej_reason`]).
    Rejected {
        /// The REJ's reason.
        reason: u16,
    },
    /// The peer's CM never answered.
    Unreachable,
    /// The connection was disconnected (by either side).
    Disconnected,
    /// The connection's time-wait ended; its QP may be destroyed or reused.
    TimewaitExit,
}
