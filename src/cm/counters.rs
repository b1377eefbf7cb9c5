//! What the endpoint counted.

/// What the endpoint counted: everything it dropped or answered on its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs received.
    pub mads_received: u64,
    /// MADs that were not CM messages this endpoint handles (dropped).
    pub bad_mads: u64,
    /// Messages naming a connection we do not have, or arriving in a state that takes none
    /// of them (dropped, or answered as Linux answers them).
    pub unmatched: u64,
    /// Duplicates of a message already handled.
    pub duplicates: u64,
    /// Messages sent again after their timeout.
    pub retransmits: u64,
    /// REQs rejected because nobody listens on their service ID.
    pub rej_no_listener: u64,
    /// REQs dropped unanswered because the listener's backlog of unread requests, their
    /// source's bound on undecided ones or the endpoint is full: the kernel's CM drops such a
    /// REQ rather than reject it, so that the requester's retry may find room (cm.c
    /// `cm_destroy_id` on -ENOMEM, which ucma returns for a full backlog).
    pub req_dropped: u64,
    /// SIDR_REQs refused ("no QP") because the listener's backlog, their source's bound or
    /// the endpoint is full (the kernel's CM answers a failed SIDR_REQ, `cm_reject_sidr_req`).
    pub rej_no_resources: u64,
    /// REQs rejected for an invalid transport type or MTU.
    pub rej_invalid: u64,
    /// Connections given up after every retry, or half-open ones whose requester went away.
    pub timeouts: u64,
    /// Messages naming one of our connections with both its communication IDs but sent from
    /// another address than the connection's peer (dropped unanswered: a third host does not
    /// steer a connection it is not part of).
    pub wrong_peer: u64,
}

impl CmCounters {
    /// Every counter with its name.
    pub fn snapshot(&self) -> [(&'static str, u64); 11] {
        [
            ("cm_mads_received", self.mads_received),
            ("cm_bad_mads", self.bad_mads),
            ("cm_unmatched", self.unmatched),
            ("cm_duplicates", self.duplicates),
            ("cm_retransmits", self.retransmits),
            ("cm_rej_no_listener", self.rej_no_listener),
            ("cm_req_dropped", self.req_dropped),
            ("cm_rej_no_resources", self.rej_no_resources),
            ("cm_rej_invalid", self.rej_invalid),
            ("cm_timeouts", self.timeouts),
            ("cm_wrong_peer", self.wrong_peer),
        ]
    }
}
