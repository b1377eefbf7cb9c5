//! Per-device counters, named as Linux rxe names its hardware counters
//! (`/sys/class/infiniband/rxe0/ports/1/hw_counters/*`, rxe_hw_counters.c), plus softroce's own
//! for what rxe does not count. Relaxed atomics: they are statistics, read while the engine runs.
//!
//! rxe drops a packet that fails a header check (rxe_recv.c hdr_check) without counting it in
//! hw_counters, except for the port attribute `bad_pkey_cntr`. softroce counts every drop,
//! under rxe's name where one exists and otherwise under its own: `wrong_transport_pkts`
//! (check_type_state: an opcode of another transport than the QP's), `bad_state_pkts`
//! (check_type_state: the QP's state does not take that packet), `stale_resp_pkts` (rxe_comp.c
//! check_psn: a response outside the outstanding window), plus `icrc_err`, `malformed_pkts`
//! and `unknown_qp_pkts` counted by the engine.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident,)*) => {
        /// Device counters.
        #[derive(Debug, Default)]
        pub struct Counters {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        impl Counters {
            /// Every counter with its name, in declaration order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    /// Packets sent.
    sent_pkts,
    /// Packets received (valid ICRC, addressed to a known QP).
    rcvd_pkts,
    /// Requests received with a PSN already seen (re-ACKed or replayed).
    duplicate_request,
    /// Requests received ahead of the expected PSN.
    out_of_seq_request,
    /// RNR NAKs received by the requester, inside its outstanding window (others count as
    /// `stale_resp_pkts`).
    rcvd_rnr_err,
    /// RNR NAKs sent by the responder.
    send_rnr_err,
    /// PSN sequence error NAKs received by the requester.
    rcvd_seq_err,
    /// ACKs the responder coalesced into a later one.
    ack_deferred,
    /// Send WRs completed with "transport retry counter exceeded".
    retry_exceeded_err,
    /// Send WRs completed with "RNR retry counter exceeded".
    retry_rnr_exceeded_err,
    /// Retransmissions started by the completer (timeout or NAK).
    completer_retry_err,
    /// Packets the socket refused to send.
    send_err,
    /// Times the port went down (rxe's `link_downed`, counted on a netdev going down). A
    /// softroce device's link is a UDP socket with no carrier to lose, so this stays 0; it is
    /// here so that tools reading rxe's counter set find every name.
    link_downed,
    /// SEND messages sent.
    rdma_sends,
    /// SEND messages received.
    rdma_recvs,
    /// Packets dropped because their ICRC did not verify.
    icrc_err,
    /// Packets dropped because their headers did not parse.
    malformed_pkts,
    /// Packets dropped because no QP had their destination QP number, or it was not connected
    /// to the sender.
    unknown_qp_pkts,
    /// Packets dropped because their opcode belongs to another transport than the QP's (UC,
    /// UD, RD or CNP opcodes at an RC QP; rxe check_type_state).
    wrong_transport_pkts,
    /// Packets dropped because the QP's state does not take them: requests at a QP in RESET,
    /// INIT or ERROR, responses at a QP not in RTS or SQD (rxe check_type_state).
    bad_state_pkts,
    /// Packets dropped because their P_Key does not match the port's P_Key 0xFFFF (rxe
    /// check_keys / pkey_match; rxe's port attribute of the same name).
    bad_pkey_cntr,
    /// UD packets dropped because their DETH Q_Key is not the QP's (rxe check_keys and its
    /// port attribute of the same name).
    qkey_viol_cntr,
    /// UC and UD request packets the responder dropped without executing (rxe's `drop_msg`
    /// and class D errors): a PSN gap, a MIDDLE or LAST outside a message, no receive WQE, a
    /// bad length, rkey or right. The message they belong to is not completed.
    dropped_msg_pkts,
    /// Requests whose memory access failed after the rkey, right and range checks passed (the
    /// application took the region's memory back, `ibv_dereg_mr`, while the request used it):
    /// NAKed "remote access error" on RC, dropped on UC; never acknowledged.
    mem_access_err,
    /// Shared receive queue limit events raised (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    srq_limit_events,
    /// XRC requests NAKed "invalid request" because their XRCETH names no XRC SRQ of the
    /// target QP's domain (none at all, or one of another domain), or is missing.
    xrc_srq_errors,
    /// Packets to QP1 dropped because they were not a UD SEND ONLY carrying a MAD with the GSI
    /// Q_Key.
    gsi_dropped_pkts,
    /// Responses (ACK, NAK, RNR NAK, READ response, atomic ACK) dropped because their PSN lies
    /// outside the requester's outstanding window: before the oldest unacknowledged PSN
    /// (stale or duplicate) or at or beyond the next PSN never sent (rxe_comp.c check_psn).
    stale_resp_pkts,
    /// Packets retransmitted.
    retransmit_pkts,
    /// NAKs sent (all codes).
    send_nak,
    /// NAKs received (all codes but RNR), inside the outstanding window (others count as
    /// `stale_resp_pkts`).
    rcvd_nak,
    /// Retransmission timer expiries.
    timeouts,
    /// Packets for a QP of another process on a shared address that reached this one while
    /// the address's steering was being laid out anew (driver/group.rs): dropped, and the
    /// sender retransmits.
    misrouted_pkts,
    /// CM messages that arrived here for another process on a shared address and were
    /// forwarded to it.
    forwarded_mads,
    /// Notification point: CNPs sent (mlx5 `np_cnp_sent`).
    np_cnp_sent,
    /// Notification point: packets of a connected QP received with ECN CE in their IP header
    /// (mlx5 `np_ecn_marked_roce_packets`), counted whether congestion control is on or not.
    np_ecn_marked_roce_packets,
    /// Reaction point: CNPs received and acted on (mlx5 `rp_cnp_handled`).
    rp_cnp_handled,
    /// Reaction point: CNPs received and ignored: congestion control off, or a UD QP (mlx5
    /// `rp_cnp_ignored`).
    rp_cnp_ignored,
    /// Packets the impairment layer dropped (or could not hold).
    injected_drop,
    /// Packets the impairment layer duplicated.
    injected_dup,
    /// Packets the impairment layer reordered.
    injected_reorder,
    /// Packets the impairment layer corrupted.
    injected_corrupt,
    /// Packets the impairment layer delayed.
    injected_delay,
    /// Packets that went through the impairment layer's bottleneck queue (not dropped).
    bottleneck_pkts,
    /// Packets the bottleneck marked ECN CE (its queue above the marking threshold).
    bottleneck_marked,
    /// Packets the bottleneck dropped (its queue full).
    bottleneck_dropped,
    /// The sum over `bottleneck_pkts` of the bytes queued when each arrived: divided by
    /// `bottleneck_pkts`, the mean depth the packets found.
    bottleneck_queue_sum,
    /// The most bytes the bottleneck's queue held (a high-water mark, not a count).
    bottleneck_queue_max,
}

impl Counters {
    /// Adds one to a counter.
    #[inline]
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads a counter by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.snapshot()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}
