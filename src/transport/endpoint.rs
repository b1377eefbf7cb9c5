//! The device's endpoint: what happens to a received datagram before a QP sees it, without
//! I/O (quinn-proto's `Endpoint::handle(now, remote, local, ecn, data)` shape). The driver
//! hands it the bytes with the addresses and IP fields the socket reported, and the QPs it
//! serves (through [`QpSet`]); the simulations hand it the same, so both run one demultiplexer.
//!
//! The steps, in rxe's order (rxe_recv.c rxe_rcv, spec-notes/rc-transport.md rule 34): the
//! ICRC over the IP and UDP headers the datagram travelled with (`icrc_err`), the headers'
//! parse (`malformed_pkts`), the destination QP: QP1 goes to the caller's GSI, any other
//! number must be a QP of the set (`unknown_qp_pkts`) that hears the sender (rxe check_addr:
//! an RC or UC QP hears only its peer; `unknown_qp_pkts`); for a UD QP the IP header as it
//! arrived becomes the GRH area of the receive buffer. Then the QP's own header checks and
//! transport run ([`QpCore::handle_datagram`]). Every drop is counted in the device's counters,
//! nothing is allocated and nothing is locked here (the set locks the one QP it lends).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::counters::Counters;
use super::mr::MrTable;
use super::qp::{NetHeader, QpCore};
use crate::ib::QpType;
use crate::wire::icrc::{verify_socket_datagram, SocketVerdict};
use crate::wire::PacketRepr;

/// The QP number of the General Services Interface (QP1), whose packets the endpoint hands
/// back to the caller's communication manager.
pub const GSI_QPN: u32 = 1;

/// The TTL an IPv4 datagram gets from a socket by default, and the hop limit assumed for a
/// received datagram whose socket did not report it (Linux ip_default_ttl).
pub const DEFAULT_TTL: u8 = 64;

/// The IP header fields a datagram arrived with, as the socket reported them (the `ecn` of
/// quinn-proto's `handle`, widened to what RoCE uses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpFields {
    /// IPv4 TTL or IPv6 hop limit; 0 when the socket did not say.
    pub hop_limit: u8,
    /// IPv4 TOS or IPv6 traffic class (DSCP and ECN bits).
    pub traffic_class: u8,
}

/// The QPs an endpoint serves, as the caller keeps them (the driver: each behind its own
/// lock, shared with the application; a simulation: plain values).
pub trait QpSet {
    /// Runs `f` on QP `qpn` with the memory regions its requests may reach, if the set has
    /// that QP, and returns what `f` returned.
    fn with_qp<R>(&mut self, qpn: u32, f: impl FnOnce(&mut QpCore, &MrTable) -> R) -> Option<R>;
}

/// What became of a datagram that passed the endpoint's checks.
#[derive(Debug)]
pub enum DatagramEvent<'a> {
    /// QP `qpn` took the packet: it may have packets, completions or a deadline for the
    /// caller now.
    Qp(u32),
    /// A packet for QP1, which belongs to the caller's communication manager. `from` is the
    /// sender's address with the port its CM answers on (the RoCEv2 port, not the packet's
    /// source port).
    Gsi {
        /// Where the CM's answer goes.
        from: SocketAddr,
        /// The packet.
        pkt: PacketRepr<'a>,
    },
}

/// A device's demultiplexer (see the module documentation).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The UDP port peers' RoCE traffic and CMs receive on.
    remote_port: u16,
    counters: Arc<Counters>,
}

impl Endpoint {
    /// An endpoint whose peers receive on UDP port `remote_port` (4791 unless configured
    /// otherwise), counting drops in `counters` (the device's).
    pub fn new(remote_port: u16, counters: Arc<Counters>) -> Endpoint {
        Endpoint {
            remote_port,
            counters,
        }
    }

    /// Handles one received datagram: `data` (BTH .. ICRC) from `remote` to `local` with the IP
    /// fields `ip`, at `now` on the QPs' clock. Returns what became of it, or `None` when it
    /// was dropped (and counted).
    pub fn handle<'a, S: QpSet>(
        &self,
        now: Duration,
        remote: SocketAddr,
        local: SocketAddr,
        ip: IpFields,
        data: &'a [u8],
        qps: &mut S,
    ) -> Option<DatagramEvent<'a>> {
        let c = &self.counters;
        if verify_socket_datagram(remote, local, data) == SocketVerdict::Bad {
            Counters::inc(&c.icrc_err);
            return None;
        }
        let Ok(pkt) = PacketRepr::parse(data) else {
            Counters::inc(&c.malformed_pkts);
            return None;
        };
        let qpn = pkt.bth.dest_qp;
        if qpn == GSI_QPN {
            let from = SocketAddr::new(remote.ip(), self.remote_port);
            return Some(DatagramEvent::Gsi { from, pkt });
        }
        let taken = qps.with_qp(qpn, |qp, mrs| {
            // Only the connected peer may talk to an RC or UC QP; a UD QP hears anyone.
            if !qp.accepts_from(remote.ip()) {
                return false;
            }
            if qp.qp_type() == QpType::Ud {
                // The GRH area of the receive buffer: the IP header as it arrived, with the
                // TTL and TOS the socket reported (64 if it did not say).
                let ttl = if ip.hop_limit == 0 {
                    DEFAULT_TTL
                } else {
                    ip.hop_limit
                };
                let net = NetHeader::from_addrs(
                    remote.ip(),
                    local.ip(),
                    (data.len() + 8) as u16,
                    ttl,
                    ip.traffic_class,
                );
                qp.handle_datagram(now, &pkt, Some(&net), mrs);
            } else {
                qp.handle_datagram(now, &pkt, None, mrs);
            }
            true
        });
        if taken == Some(true) {
            Some(DatagramEvent::Qp(qpn))
        } else {
            Counters::inc(&c.unknown_qp_pkts);
            None
        }
    }
}

/// A set of one QP and its memory regions: a simulation's node, or any caller that keeps a
/// single [`QpCore`] as a plain value.
#[derive(Debug)]
pub struct OneQp<'a> {
    /// The QP.
    pub qp: &'a mut QpCore,
    /// The memory regions its requests may reach.
    pub mrs: &'a MrTable,
}

impl QpSet for OneQp<'_> {
    fn with_qp<R>(&mut self, qpn: u32, f: impl FnOnce(&mut QpCore, &MrTable) -> R) -> Option<R> {
        (qpn == self.qp.qpn()).then(|| f(self.qp, self.mrs))
    }
}
