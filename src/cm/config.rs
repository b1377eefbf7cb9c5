//! The endpoint's settings.

use std::time::Duration;

/// Settings of an endpoint. The defaults are rdma_cm's on RoCE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// How long our CM may take to answer, as an IBA time exponent, advertised in REQs
    /// (rdma_cm's CMA_CM_RESPONSE_TIMEOUT: 20, about 4.3 s).
    pub cm_response_timeout: u8,
    /// Retransmissions of an unanswered message (rdma_cm's CMA_MAX_CM_RETRIES: 15).
    pub max_cm_retries: u8,
    /// Packet life time on the path, as an IBA time exponent (rdma_cm on RoCE: 16, about 268 ms).
    pub packet_life_time: u8,
    /// How long a disconnected connection stays in time-wait.
    pub timewait: Duration,
    /// Connections this endpoint holds at once (each costs a few hundred bytes).
    pub max_connections: usize,
    /// Undecided connect requests (REQ received, not yet accepted or rejected) one source
    /// address may hold at once, over all listeners (or the backlog of the listener a REQ is
    /// for, if larger); past it a REQ from that address is rejected with "no resources", so
    /// that one host cannot fill every listener's backlog.
    pub max_half_open_per_source: usize,
    /// The longest an undecided connect request is kept, whatever the requester's REQ says
    /// about its own patience (its timeouts are the sender's to choose, up to days).
    pub max_half_open_time: Duration,
    /// Where communication and transaction IDs come from. `None` (the default): the
    /// kernel's random generator, so that nobody can derive one ID from another. `Some(seed)`:
    /// a fixed pseudo-random sequence, for tests and fuzzing that must replay exactly; never
    /// for an endpoint on a network.
    pub comm_id_seed: Option<u64>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            timewait: Duration::from_secs(1),
            max_connections: 4096,
            max_half_open_per_source: 64,
            max_half_open_time: Duration::from_secs(120),
            comm_id_seed: None,
        }
    }
}
