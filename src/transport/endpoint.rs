//! The device's endpoint: what happens to a datagram between the socket and the QPs, without
//! I/O (quinn-proto's `Endpoint::handle(now, remote, local, ecn, data)` shape). The driver
//! hands it the bytes with the addresses and IP fields the socket reported, and the QPs it
//! serves (through [`QpSet`]); the simulations hand it the same, so both run one demultiplexer.
//! On the way out it is where every packet gets its ICRC ([`Endpoint::seal`]): the QPs'
//! packets ([`Endpoint::poll_transmit`]) and QP1's, which it builds around the MADs of the
//! caller's communication manager ([`Endpoint::transmit_mad`]).
//!
//! The steps, in rxe's order (rxe_recv.c rxe_rcv, spec-notes/rc-transport.md rule 34): the
//! ICRC over the IP and UDP headers the datagram travelled with (`icrc_err`), the headers'
//! parse (`malformed_pkts`), the destination QP: QP1's MADs (a UD SEND ONLY with the GSI Q_Key,
//! else `gsi_dropped_pkts`) go to the caller's communication manager, any other
//! number must be a QP of the set (`unknown_qp_pkts`) that hears the sender (rxe check_addr:
//! an RC or UC QP hears only its peer; `unknown_qp_pkts`); for a UD QP the IP header as it
//! arrived becomes the GRH area of the receive buffer. Then the QP's own header checks and
//! transport run ([`QpCore::handle_datagram`]). Every drop is counted in the device's counters,
//! nothing is allocated and nothing is locked here (the set locks the one QP it lends).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::cc::{self, CcConfig};
use super::counters::Counters;
use super::keys::MrTable;
use super::qp::{rxe_hash_port, Gather, NetHeader, QpCore, Transmit};
use crate::ib::{QpType, MAX_MCAST_QP_ATTACH};
use crate::wire::bth::{DEFAULT_PKEY, MULTICAST_QPN};
use crate::wire::deth::GSI_QKEY;
use crate::wire::icrc::{self, verify_socket_datagram, SocketVerdict};
use crate::wire::{mad, BthRepr, DethRepr, ExtHeaders, Opcode, PacketRepr, ICRC_LEN};

/// The QP number of the General Services Interface (QP1), whose packets the endpoint hands
/// back to the caller's communication manager.
pub use crate::wire::deth::GSI_QPN;

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

    /// The QPs attached to the multicast group at `group` (rxe's mcg list for that MGID).
    /// By default a set has none.
    fn multicast_members(&mut self, group: IpAddr) -> Members {
        let _ = group;
        Members::default()
    }
}

/// QP numbers, as many as one multicast group may have attached: what a multicast packet
/// was delivered to, kept in place so that no packet allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Members {
    qpns: [u32; MAX_MCAST_QP_ATTACH],
    len: usize,
}

impl Default for Members {
    fn default() -> Self {
        Members {
            qpns: [0; MAX_MCAST_QP_ATTACH],
            len: 0,
        }
    }
}

impl Members {
    /// Adds `qpn`; false (and nothing added) when the list is full.
    pub fn push(&mut self, qpn: u32) -> bool {
        if self.len == MAX_MCAST_QP_ATTACH {
            return false;
        }
        self.qpns[self.len] = qpn;
        self.len += 1;
        true
    }

    /// The QP numbers, in the order added.
    pub fn as_slice(&self) -> &[u32] {
        &self.qpns[..self.len]
    }
}

/// What became of a datagram that passed the endpoint's checks.
#[derive(Debug)]
pub enum DatagramEvent<'a> {
    /// QP `qpn` took the packet: it may have packets, completions or a deadline for the
    /// caller now.
    Qp(u32),
    /// A multicast packet that these QPs, attached to its group, took (each may have
    /// completions for the caller now).
    Multicast(Members),
    /// A MAD for QP1, which belongs to the caller's communication manager. `from` is the
    /// sender's address with the port its CM answers on (the RoCEv2 port, not the packet's
    /// source port).
    Mad {
        /// Where the CM's answer goes.
        from: SocketAddr,
        /// The MAD (`mad::LEN` bytes).
        mad: &'a [u8],
    },
}

/// A device's endpoint (see the module documentation).
#[derive(Debug)]
pub struct Endpoint {
    /// The device's address (its GID): the source of every packet it seals.
    local: SocketAddr,
    /// The UDP port peers' RoCE traffic and CMs receive on.
    remote_port: u16,
    counters: Arc<Counters>,
    /// The PSN of QP1's next SEND (UD PSNs only count; nobody checks them).
    gsi_psn: u32,
    /// Congestion control (off unless [`Endpoint::set_congestion_control`] turned it on).
    cc: CcConfig,
}

impl Endpoint {
    /// The endpoint of a device at `local`, whose peers receive on UDP port `remote_port`
    /// (4791 unless configured otherwise), counting drops in `counters` (the device's).
    pub fn new(local: SocketAddr, remote_port: u16, counters: Arc<Counters>) -> Endpoint {
        Endpoint {
            local,
            remote_port,
            counters,
            gsi_psn: 0,
            cc: CcConfig::default(),
        }
    }

    /// Sets the device's congestion control (spec-notes/congestion.md): with it on, every
    /// packet leaves ECN-capable (ECT(0)), CE-marked packets of connected QPs are answered
    /// with CNPs and CNPs received pace the QP they name.
    pub fn set_congestion_control(&mut self, cc: CcConfig) {
        self.cc = cc;
    }

    /// The congestion control configuration.
    pub fn congestion_control(&self) -> &CcConfig {
        &self.cc
    }

    /// The UDP source port of QP1's packets, as rxe derives it from the QPN (0xD872).
    pub fn gsi_src_port() -> u16 {
        rxe_hash_port(GSI_QPN)
    }

    /// Writes the QP's next packet into `buf` (at least [`super::MAX_PACKET`] bytes), sealed.
    /// With congestion control on: a CNP the QP owes goes first and unpaced, other packets
    /// wait for the QP's transmit budget (the wait is a deadline of `QpCore::poll_timeout`)
    /// and leave ECN-capable.
    pub fn poll_transmit(
        &self,
        now: Duration,
        qp: &mut QpCore,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if !self.cc.enabled {
            let t = qp.poll_transmit(now, buf)?;
            self.seal(&t, buf);
            return Some(t);
        }
        if let Some(mut t) = qp.poll_cnp(buf) {
            if let Some(dscp) = self.cc.cnp_dscp {
                t.traffic_class = cc::with_ect0(dscp << 2);
            }
            self.seal(&t, buf);
            return Some(t);
        }
        if !qp.cc_may_send(now) {
            return None;
        }
        let mut t = qp.poll_transmit(now, buf)?;
        t.traffic_class = cc::with_ect0(t.traffic_class);
        qp.cc_on_sent(now, t.len);
        self.seal(&t, buf);
        Some(t)
    }

    /// As [`Endpoint::poll_transmit`], but an RC request's payload may be left in its region
    /// ([`QpCore::poll_transmit_gather`]): then `buf` holds the headers, the pad and the ICRC
    /// (the layout [`Gather`] describes), the ICRC computed over the payload where it lies,
    /// read once; the caller sends the payload from there.
    pub fn poll_transmit_gather(
        &self,
        now: Duration,
        qp: &mut QpCore,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<Gather>)> {
        if self.cc.enabled {
            // Congestion control's pacing and marking: the copying path.
            return self.poll_transmit(now, qp, buf).map(|t| (t, None));
        }
        let (t, g) = qp.poll_transmit_gather(now, buf)?;
        match &g {
            Some(g) => self.seal_gathered(&t, g, buf),
            None => self.seal(&t, buf),
        }
        Some((t, g))
    }

    /// Builds QP1's packet for a MAD the communication manager sends to `to`: a UD SEND ONLY
    /// from QP1 to QP1 with the GSI Q_Key, from UDP port `src_port`, sealed, in `buf` (at
    /// least [`super::MAX_PACKET`] bytes).
    pub fn transmit_mad(
        &mut self,
        to: SocketAddr,
        mad: &[u8],
        src_port: u16,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let pkt = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                pkey: DEFAULT_PKEY,
                dest_qp: GSI_QPN,
                // rxe sets AckReq on QP1's SENDs (tests/data/rxe/rping.pcap); UD ignores it.
                ack_req: true,
                psn: self.gsi_psn,
                ..BthRepr::default()
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: GSI_QKEY,
                    src_qp: GSI_QPN,
                }),
                ..ExtHeaders::default()
            },
            payload: mad,
        };
        self.gsi_psn = (self.gsi_psn + 1) & 0xff_ffff;
        let len = pkt.emit(buf).ok()?;
        // MADs leave with the socket's TTL (64) and TOS 0, as the CM's path record for a
        // RoCE route gives them (cma.c: the route's hop limit, traffic class 0 without -t);
        // ECT(0) with congestion control on, as every packet then.
        let t = Transmit {
            len,
            dst: to,
            src_port,
            hop_limit: 0,
            traffic_class: if self.cc.enabled { cc::with_ect0(0) } else { 0 },
        };
        self.seal(&t, buf);
        Some(t)
    }

    /// Fills in the ICRC of the packet `t` describes (`buf[..t.len]`) over the IP and UDP
    /// headers the kernel will put in front of it (IPv4: identification 0 and DF, as a
    /// socket with IP_PMTUDISC_DO sends; a GSO send's later segments are resealed for theirs
    /// by the driver, `icrc::reseal_ipv4_id`). Mixed address families cannot be sent: the
    /// ICRC is zero and a peer would drop the packet.
    pub fn seal(&self, t: &Transmit, buf: &mut [u8]) {
        let src = SocketAddr::new(self.local.ip(), t.src_port);
        let pkt = &mut buf[..t.len];
        if !icrc::seal_socket_datagram(src, t.dst, pkt) {
            pkt[t.len - ICRC_LEN..].fill(0);
        }
    }

    /// [`Endpoint::seal`] for a packet whose payload is gathered from a region (`g`): the
    /// ICRC goes in the last four bytes of the buffer's part after the headers. A region
    /// taken back since the packet was built leaves the ICRC zero (and the send fails on
    /// it, `Pinned`).
    pub fn seal_gathered(&self, t: &Transmit, g: &Gather, buf: &mut [u8]) {
        let src = SocketAddr::new(self.local.ip(), t.src_port);
        let tail = t.len - g.at - g.len;
        let (head, rest) = buf.split_at_mut(g.at);
        let tail = &mut rest[..tail];
        let crc = icrc::socket_datagram_icrc_parts(
            src,
            t.dst,
            t.len,
            head,
            |crc| g.bytes.crc(g.offset, g.len, crc).ok(),
            tail,
        );
        let n = tail.len();
        tail[n - ICRC_LEN..].copy_from_slice(&crc.unwrap_or([0; ICRC_LEN]));
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
            // QP1 takes MADs only: a UD SEND ONLY with the GSI Q_Key and a whole MAD.
            let ok = pkt.bth.opcode == Opcode::UD_SEND_ONLY
                && pkt.ext.deth.is_some_and(|d| d.qkey == GSI_QKEY)
                && pkt.payload.len() >= mad::LEN;
            if !ok {
                Counters::inc(&c.gsi_dropped_pkts);
                return None;
            }
            let from = SocketAddr::new(remote.ip(), self.remote_port);
            return Some(DatagramEvent::Mad {
                from,
                mad: &pkt.payload[..mad::LEN],
            });
        }
        if qpn == MULTICAST_QPN {
            return self.handle_multicast(now, remote, local, ip, &pkt, data.len(), qps);
        }
        let is_cnp = pkt.bth.opcode == Opcode::CNP;
        let taken = qps.with_qp(qpn, |qp, mrs| {
            // Only the connected peer may talk to an RC or UC QP; a UD QP hears anyone.
            if !qp.accepts_from(remote.ip()) {
                return false;
            }
            if is_cnp {
                // A CNP belongs to the reaction point, not to the QP's transport (rxe, which
                // has none, drops it in check_type_state).
                Counters::inc(&c.rcvd_pkts);
                qp.cc_on_cnp(now, &self.cc);
                return true;
            }
            if cc::is_ce(ip.traffic_class) {
                qp.cc_on_ce(now, &self.cc);
            }
            if qp.qp_type() == QpType::Ud {
                let net = grh_area(remote, local, ip, data.len());
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

impl Endpoint {
    /// A packet to the multicast QP (rxe_recv.c rxe_rcv_mcast_pkt): the destination address it
    /// was sent to names the group (its GID, IPv4-mapped for IPv4, is the MGID); every QP
    /// attached to that group gets a copy, through its own type, state and key checks, and a
    /// QP that refuses it does not keep the others from theirs (unreliable datagrams). Only
    /// UD SENDs may be multicast (IBTA 10.8.2: a UD QP is the only kind that attaches).
    #[allow(clippy::too_many_arguments)]
    fn handle_multicast<'a, S: QpSet>(
        &self,
        now: Duration,
        remote: SocketAddr,
        local: SocketAddr,
        ip: IpFields,
        pkt: &PacketRepr,
        len: usize,
        qps: &mut S,
    ) -> Option<DatagramEvent<'a>> {
        let c = &self.counters;
        let group = local.ip();
        let members = if group.is_multicast() {
            qps.multicast_members(group)
        } else {
            Members::default()
        };
        let mut took = Members::default();
        for &qpn in members.as_slice() {
            let ok = qps.with_qp(qpn, |qp, mrs| {
                if qp.qp_type() != QpType::Ud {
                    return false;
                }
                let net = grh_area(remote, local, ip, len);
                qp.handle_datagram(now, pkt, Some(&net), mrs);
                true
            });
            if ok == Some(true) {
                took.push(qpn);
            }
        }
        if took.as_slice().is_empty() {
            // No QP of this device is attached to the group (or it was sent to a unicast
            // address): as a packet for a QP that does not exist.
            Counters::inc(&c.unknown_qp_pkts);
            return None;
        }
        Some(DatagramEvent::Multicast(took))
    }
}

/// The GRH area of a UD receive buffer: the IP header as the datagram arrived, with the TTL
/// and TOS the socket reported (64 if it did not say), and its destination address (the
/// device's, or the multicast group's).
fn grh_area(remote: SocketAddr, local: SocketAddr, ip: IpFields, len: usize) -> NetHeader {
    let ttl = if ip.hop_limit == 0 {
        DEFAULT_TTL
    } else {
        ip.hop_limit
    };
    NetHeader::from_addrs(
        remote.ip(),
        local.ip(),
        (len + 8) as u16,
        ttl,
        ip.traffic_class,
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SharedBytes;
    use crate::wire::icrc::{reseal_ipv4_id_of, verify_socket_datagram};

    /// A packet whose payload stays in a region is sealed with the ICRC of the packet as the
    /// kernel assembles it (headers, region bytes, pad), for IPv4 and IPv6, and its ICRC
    /// resealed for a GSO identification is the one the receiver recovers.
    #[test]
    fn gathered_packets_are_sealed_over_the_bytes_the_kernel_sends() {
        let region = SharedBytes::new(8192);
        let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 1) as u8).collect();
        region.write(0, &pattern).unwrap();
        let region = Arc::new(region);
        for (local, dst) in [
            ("127.0.0.2:4791", "127.0.0.1:4791"),
            ("[::1]:4791", "[::1]:4791"),
        ] {
            let local: SocketAddr = local.parse().unwrap();
            let ep = Endpoint::new(local, 4791, Arc::new(Counters::default()));
            // RC RDMA WRITE MIDDLE: a BTH, then 1001 payload bytes (3 pad bytes), the ICRC.
            let (offset, len) = (77u64, 1001usize);
            let mut buf = [0u8; 64];
            buf[0] = 0x07;
            buf[1] = 0x30; // pad count 3
            buf[7] = 0x12;
            let at = 12;
            let t = Transmit {
                len: at + len + 3 + ICRC_LEN,
                dst: dst.parse().unwrap(),
                src_port: 0xC001,
                hop_limit: 0,
                traffic_class: 0,
            };
            let g = Gather {
                bytes: Arc::clone(&region),
                offset,
                len,
                at,
            };
            ep.seal_gathered(&t, &g, &mut buf);
            let tail = 3 + ICRC_LEN;
            let assemble = |buf: &[u8]| {
                let mut whole = buf[..at].to_vec();
                whole.extend_from_slice(&pattern[offset as usize..offset as usize + len]);
                whole.extend_from_slice(&buf[at..at + tail]);
                whole
            };
            let src = SocketAddr::new(local.ip(), t.src_port);
            let whole = assemble(&buf);
            assert_eq!(
                verify_socket_datagram(src, t.dst, &whole),
                SocketVerdict::Exact
            );
            let mut copied = whole.clone();
            ep.seal(&t, &mut copied);
            assert_eq!(copied, whole, "the same ICRC as sealing a copy");
            if local.is_ipv4() {
                let icrc = at + 3;
                reseal_ipv4_id_of(&mut buf[icrc..icrc + ICRC_LEN], t.len - ICRC_LEN, 0, 5);
                assert_eq!(
                    verify_socket_datagram(src, t.dst, &assemble(&buf)),
                    SocketVerdict::RecoveredId(5)
                );
            }
        }
    }
}
