//! The General Services Interface (QP1) of a device: the UD queue pair that carries management
//! datagrams, here the communication manager's. Received SENDs to QP1 go to the device's
//! [`cm::Endpoint`]; the MADs it wants sent leave as UD SEND ONLY packets from QP1 to QP1.
//!
//! QP1 is not a [`crate::transport::QpCore`]: it has no work requests, receive buffers or
//! completions of its own, as in Linux, where the MAD layer owns QP1 and no application posts
//! to it. The engine hands it packets and asks it for packets; the rdma_cm-shaped API above
//! calls the endpoint under this module's lock and waits for its events on a condition
//! variable.

use std::net::SocketAddr;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cm::{CmEvent, Endpoint, EndpointConfig};
use crate::transport::counters::Counters;
use crate::transport::qp::rxe_hash_port;
use crate::transport::Transmit;
use crate::wire::deth::GSI_QKEY;
use crate::wire::{icrc, mad, BthRepr, DethRepr, ExtHeaders, Opcode, PacketRepr};

/// QP1's number (the transport's endpoint hands its packets back to the driver).
pub use crate::transport::GSI_QPN;
/// The P_Key of the default partition, which every MAD here is sent on.
const DEFAULT_PKEY: u16 = 0xffff;

/// The device's QP1: its CM endpoint, its send PSN and the time base the endpoint runs on.
#[derive(Debug)]
pub(crate) struct Gsi {
    pub(crate) cm: Endpoint,
    /// An rdma_cm event channel takes this device's CM events (one at a time).
    pub(crate) channel_open: bool,
    /// The PSN of QP1's next SEND (UD PSNs only count; nobody checks them).
    psn: u32,
    origin: Instant,
}

/// QP1 and the condition variable that the API waits on for CM events.
#[derive(Debug)]
pub(crate) struct GsiShared {
    state: Mutex<Gsi>,
    /// Notified whenever the endpoint may have new events.
    pub(crate) events: Condvar,
}

impl GsiShared {
    pub(crate) fn new(_local: SocketAddr) -> GsiShared {
        GsiShared {
            state: Mutex::new(Gsi {
                // Communication and transaction IDs from the kernel's random generator (the
                // default), so that no device's IDs follow from another's or from the clock.
                cm: Endpoint::new(EndpointConfig::default()),
                channel_open: false,
                psn: 0,
                origin: Instant::now(),
            }),
            events: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Gsi> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits up to `timeout` for a CM event and takes it.
    pub(crate) fn wait_event(&self, timeout: Duration) -> Option<CmEvent> {
        let end = Instant::now() + timeout;
        let mut g = self.lock();
        loop {
            if let Some(e) = g.cm.poll_event() {
                return Some(e);
            }
            let now = Instant::now();
            if now >= end {
                return None;
            }
            g = self
                .events
                .wait_timeout(g, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The device's node GUID, which its CM messages carry as the CA GUID: the EUI-64 of a
/// locally administered MAC address 02:00:a:b:c:d made from the device's IPv4 address (the
/// last four bytes of an IPv6 one), with the universal/local bit inverted as EUI-64 does
/// (rxe derives its GUID the same way from the netdev's MAC).
pub(crate) fn node_guid(ip: std::net::IpAddr) -> u64 {
    let o = match ip {
        std::net::IpAddr::V4(v4) => v4.octets(),
        std::net::IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    const MAC_FIRST: u8 = 0x02;
    const UNIVERSAL_LOCAL: u8 = 0x02;
    u64::from_be_bytes([
        MAC_FIRST ^ UNIVERSAL_LOCAL,
        0x00,
        o[0],
        0xff,
        0xfe,
        o[1],
        o[2],
        o[3],
    ])
}

impl Gsi {
    /// The endpoint's clock: time since this QP1 was made.
    pub(crate) fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// When the endpoint next needs the engine, as an instant.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.cm.poll_timeout().map(|t| self.origin + t)
    }

    /// The UDP source port of QP1's packets, as rxe derives it from the QPN (0xD872).
    pub(crate) fn src_port() -> u16 {
        rxe_hash_port(GSI_QPN)
    }

    /// Takes a packet addressed to QP1: a UD SEND ONLY with the GSI Q_Key whose payload is a
    /// MAD. Anything else is dropped and counted.
    /// `from` is the sender's address with the port its CM answers on.
    pub(crate) fn handle_packet(&mut self, from: SocketAddr, pkt: &PacketRepr, c: &Counters) {
        let ok = pkt.bth.opcode == Opcode::UD_SEND_ONLY
            && pkt.ext.deth.is_some_and(|d| d.qkey == GSI_QKEY)
            && pkt.payload.len() >= mad::LEN;
        if !ok {
            Counters::inc(&c.gsi_dropped_pkts);
            return;
        }
        let now = self.now();
        self.cm.handle_mad(now, from, &pkt.payload[..mad::LEN]);
    }

    /// Runs the endpoint's timers if due.
    pub(crate) fn handle_timeout(&mut self) {
        let now = self.now();
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm.handle_timeout(now);
        }
    }

    /// Writes the next MAD to send as a UD SEND ONLY packet from UDP port `src_port` into `buf`
    /// (at least [`crate::transport::MAX_PACKET`] bytes), its ICRC sealed for that port.
    pub(crate) fn poll_transmit(
        &mut self,
        local: SocketAddr,
        src_port: u16,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let out = self.cm.poll_transmit()?;
        let pkt = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                pkey: DEFAULT_PKEY,
                dest_qp: GSI_QPN,
                // rxe sets AckReq on QP1's SENDs (tests/data/rxe/rping.pcap); UD ignores it.
                ack_req: true,
                psn: self.psn,
                ..BthRepr::default()
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: GSI_QKEY,
                    src_qp: GSI_QPN,
                }),
                ..ExtHeaders::default()
            },
            payload: &out.mad,
        };
        self.psn = (self.psn + 1) & 0xff_ffff;
        let len = pkt.emit(buf).ok()?;
        let src = SocketAddr::new(local.ip(), src_port);
        icrc::seal_socket_datagram(src, out.to, &mut buf[..len]);
        // MADs leave with the socket's TTL (64) and TOS 0, as the CM's path record for a
        // RoCE route gives them (cma.c: the route's hop limit, traffic class 0 without -t).
        Some(Transmit {
            len,
            dst: out.to,
            src_port,
            hop_limit: 0,
            traffic_class: 0,
        })
    }
}
