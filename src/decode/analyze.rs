//! Per-connection analysis of a RoCEv2 capture: what `softroce decode --analyze` counts and
//! why (what it keeps per connection is in `stats.rs`, how it is shown in
//! `analysis_report.rs`).
//!
//! A *connection* here is one direction of traffic to one queue pair: (source IP, destination
//! IP, destination QP, and for UD the source QP from the DETH). The UDP source port is not part
//! of the key, as RoCEv2 uses it only for ECMP entropy; the ports seen are listed.
//!
//! Such a direction carries two independent PSN sequences: the *requests* its sender issues
//! (SEND, WRITE, READ request, atomics, FLUSH, ATOMIC WRITE), and the *responses* its sender
//! returns for the requests of the other direction (ACK, READ response, ATOMIC ACK), whose PSNs
//! are those of that other direction's requests.
//!
//! - Requests: a PSN that is not after the highest request PSN already seen is a
//!   retransmission (or duplicate); a PSN after the next expected one is a gap (the PSNs in
//!   between were lost before the capture point, or not captured). A READ request for `len`
//!   bytes reserves `packets_for(len, pmtu)` PSNs; the path MTU is inferred from FIRST/MIDDLE
//!   payload sizes (which are exactly one MTU) seen on the connection or, failing that, between
//!   the same two addresses in either direction. While it is unknown, no gap is reported after a
//!   READ request.
//! - Responses: counted by kind; NAKs by NAK code and RNR NAKs by timer code, with example
//!   PSNs. ACKs may be coalesced, so only READ responses, which must be contiguous within a
//!   message, are checked for gaps and repeats.
//! - A packet with a bad ICRC, which a receiver drops, belongs to no connection: any of its
//!   fields may be what was corrupted (a flipped bit in the destination QPN would otherwise
//!   make a connection of its own), so it is only counted and listed by frame for the whole
//!   capture.
//!
//! Memory is bounded: every list keeps at most [`MAX_EXAMPLES`](super::stats::MAX_EXAMPLES) examples next to its full
//! count, and at most [`MAX_CONNECTIONS`] connections are tracked (packets of further ones are
//! only counted).

use std::collections::HashMap;
use std::net::IpAddr;

use super::analysis_report::AnalysisReport;
use super::stats::MAX_PORTS;
use super::stats::{ConnectionStats, Examples};
pub use super::stats::{Counters, MAX_CONNECTIONS};
use crate::wire::{BthRepr, Frame, OpKind, PacketRepr, Position, Psn, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ConnKey {
    src: IpAddr,
    dst: IpAddr,
    dqpn: u32,
    src_qp: Option<u32>,
}

fn ip_pair(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// The IBTA path MTUs; FIRST and MIDDLE packets carry exactly one of these.
fn is_ib_mtu(n: usize) -> bool {
    matches!(n, 256 | 512 | 1024 | 2048 | 4096)
}

/// Accumulates per-connection statistics over a capture; see the [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct Analyzer {
    counters: Counters,
    /// Frames whose ICRC is wrong (in no connection).
    bad_icrc: Examples<u64>,
    conns: Vec<ConnectionStats>,
    index: HashMap<ConnKey, usize>,
    pair_mtu: HashMap<(IpAddr, IpAddr), u32>,
}

impl Analyzer {
    /// An empty analyzer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The frame counts so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counts a frame that is not RoCEv2.
    pub fn observe_other(&mut self) {
        self.counters.frames += 1;
        self.counters.other += 1;
    }

    /// Counts a frame whose link type is not supported.
    pub fn observe_unsupported_link(&mut self) {
        self.observe_other();
        self.counters.unsupported_link += 1;
    }

    /// Counts a frame whose link, IP or UDP headers cannot be parsed.
    pub fn observe_undecodable(&mut self) {
        self.observe_other();
        self.counters.undecodable += 1;
    }

    /// Counts a RoCEv2 frame whose encapsulation cannot be parsed (typically one cut short by
    /// the snap length), so that no BTH is available.
    pub fn observe_broken(&mut self, snapped: bool) {
        self.counters.frames += 1;
        self.counters.roce_packets += 1;
        self.counters.malformed += 1;
        if snapped {
            self.counters.snapped += 1;
        }
    }

    fn conn(&mut self, key: ConnKey, frame_no: u64) -> Option<&mut ConnectionStats> {
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                if self.conns.len() >= MAX_CONNECTIONS {
                    self.counters.untracked += 1;
                    return None;
                }
                self.conns.push(ConnectionStats::new(
                    key.src, key.dst, key.dqpn, key.src_qp, frame_no,
                ));
                self.index.insert(key, self.conns.len() - 1);
                self.conns.len() - 1
            }
        };
        self.conns.get_mut(i)
    }

    /// Accounts for one RoCEv2 packet: `packet` is the result of parsing it, `icrc_ok` whether
    /// its ICRC matched (`None` when the packet is too short to carry one).
    pub fn observe(
        &mut self,
        frame_no: u64,
        frame: &Frame<'_>,
        packet: Result<&PacketRepr<'_>>,
        icrc_ok: Option<bool>,
    ) {
        self.counters.frames += 1;
        self.counters.roce_packets += 1;
        if packet.is_err() {
            self.counters.malformed += 1;
        }
        if icrc_ok == Some(false) {
            // No field of it can be trusted, the connection's key included.
            self.counters.bad_icrc += 1;
            self.bad_icrc.push(frame_no);
            return;
        }
        let icrc_ok = icrc_ok == Some(true);
        let bth = match &packet {
            Ok(p) => Some(p.bth),
            Err(_) => BthRepr::parse(frame.udp_payload).ok(),
        };
        let Some(bth) = bth else { return };
        let src_qp = match &packet {
            Ok(p) => p.ext.deth.map(|d| d.src_qp),
            Err(_) => None,
        };
        let key = ConnKey {
            src: frame.src.ip(),
            dst: frame.dst.ip(),
            dqpn: bth.dest_qp,
            src_qp,
        };
        let pair = ip_pair(key.src, key.dst);
        // Learn the path MTU from FIRST/MIDDLE packets before using it.
        let mut learned = None;
        if let (Ok(p), true) = (&packet, icrc_ok) {
            if let Some(info) = p.info() {
                if matches!(info.position, Position::First | Position::Middle)
                    && is_ib_mtu(p.payload.len())
                {
                    learned = Some(p.payload.len() as u32);
                    self.pair_mtu.insert(pair, p.payload.len() as u32);
                }
            }
        }
        let pair_mtu = self.pair_mtu.get(&pair).copied();
        let Some(c) = self.conn(key, frame_no) else {
            return;
        };
        c.packets += 1;
        c.last_frame = frame_no;
        let port = frame.src.port();
        if !c.src_ports.contains(&port) && c.src_ports.len() < MAX_PORTS {
            c.src_ports.push(port);
        }
        if bth.fecn {
            c.fecn += 1;
        }
        if bth.becn {
            c.becn += 1;
        }
        let p = match packet {
            Ok(p) => p,
            Err(_) => {
                c.malformed.push(frame_no);
                return;
            }
        };
        if let Some(m) = learned {
            c.path_mtu = Some(m);
        }
        let op = c.opcodes.entry(p.bth.opcode.0).or_default();
        op.packets += 1;
        op.bytes += p.payload.len() as u64;
        c.payload_bytes += p.payload.len() as u64;
        if !icrc_ok {
            return;
        }
        let Some(info) = p.info() else { return };
        let psn = Psn::new(p.bth.psn);
        if info.is_request() {
            let read_len =
                (info.kind == OpKind::ReadRequest).then(|| p.ext.reth.map(|r| r.len).unwrap_or(0));
            let pmtu = c.path_mtu.or(pair_mtu);
            c.requests.observe(psn, read_len, pmtu);
        } else if info.is_response() {
            c.responses
                .observe(psn, info.kind, info.position, p.ext.aeth.map(|a| a.kind()));
        }
    }

    /// The analysis so far.
    pub fn report(&self) -> AnalysisReport {
        let mut connections = self.conns.clone();
        for c in &mut connections {
            if c.path_mtu.is_none() {
                c.path_mtu = self.pair_mtu.get(&ip_pair(c.src, c.dst)).copied();
            }
        }
        AnalysisReport {
            counters: self.counters,
            connections,
            bad_icrc: self.bad_icrc.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::stats::{Gap, MAX_EXAMPLES};
    use crate::wire::{DethRepr, ExtHeaders, FrameBuilder, LinkType, Opcode, RethRepr};

    const A: &str = "192.0.2.1:1000";
    const B: &str = "192.0.2.2:4791";
    const B_SRC: &str = "192.0.2.2:1000";
    const A_DST: &str = "192.0.2.1:4791";

    /// Feeds one packet, built and parsed back through the wire layer.
    fn feed(an: &mut Analyzer, n: u64, src: &str, dst: &str, p: &PacketRepr<'_>) {
        let b = FrameBuilder::new(src.parse().unwrap(), dst.parse().unwrap());
        let mut buf = vec![0u8; b.buffer_len(p)];
        b.emit(p, &mut buf).unwrap();
        let f = Frame::parse(LinkType::RawIp, &buf).unwrap().unwrap();
        let icrc = f.icrc().map(|c| c.ok()).ok();
        let parsed = f.packet();
        an.observe(n, &f, parsed.as_ref().map_err(|e| *e), icrc);
    }

    fn pkt(op: Opcode, psn: u32, payload: &[u8]) -> PacketRepr<'_> {
        let info = op.info().unwrap();
        PacketRepr {
            bth: BthRepr {
                opcode: op,
                dest_qp: 7,
                psn,
                ..Default::default()
            },
            ext: ExtHeaders {
                reth: info
                    .headers
                    .contains(crate::wire::HeaderSet::RETH)
                    .then_some(RethRepr::default()),
                aeth: info
                    .headers
                    .contains(crate::wire::HeaderSet::AETH)
                    .then_some(crate::wire::AethRepr::ack(0)),
                deth: info
                    .headers
                    .contains(crate::wire::HeaderSet::DETH)
                    .then_some(DethRepr::default()),
                ..Default::default()
            },
            payload,
        }
    }

    fn read(psn: u32, len: u32) -> PacketRepr<'static> {
        let mut p = pkt(Opcode::RC_RDMA_READ_REQUEST, psn, &[]);
        p.ext.reth = Some(RethRepr {
            va: 0,
            rkey: 1,
            len,
        });
        p
    }

    #[test]
    fn psn_wraps_around() {
        let mut an = Analyzer::new();
        for (i, psn) in [0xFF_FFFE, 0xFF_FFFF, 0, 1, 0xFF_FFFF, 3]
            .iter()
            .enumerate()
        {
            feed(
                &mut an,
                i as u64 + 1,
                A,
                B,
                &pkt(Opcode::RC_SEND_ONLY, *psn, b"x"),
            );
        }
        let r = an.report();
        let req = &r.connections[0].requests;
        assert_eq!(req.packets, 6);
        assert_eq!(req.first_psn, Some(0xFF_FFFE));
        assert_eq!(req.highest_psn, Some(3));
        assert_eq!(req.retransmitted.items, vec![0xFF_FFFF]);
        assert_eq!(
            req.gaps.items,
            vec![Gap {
                expected: Some(2),
                got: 3
            }]
        );
        assert_eq!(req.missing_psns, 1);
    }

    #[test]
    fn read_gap_resolved_once_the_mtu_is_learned() {
        let mut an = Analyzer::new();
        let mtu = [0u8; 512];
        // READ at 10 for 2048 bytes: unknown MTU yet.
        feed(&mut an, 1, A, B, &read(10, 2048));
        // Its responses reveal a 512-byte MTU: PSNs 10..13.
        feed(
            &mut an,
            2,
            B_SRC,
            A_DST,
            &pkt(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 10, &mtu),
        );
        feed(
            &mut an,
            3,
            B_SRC,
            A_DST,
            &pkt(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 11, &mtu),
        );
        feed(
            &mut an,
            4,
            B_SRC,
            A_DST,
            &pkt(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 12, &mtu),
        );
        feed(
            &mut an,
            5,
            B_SRC,
            A_DST,
            &pkt(Opcode::RC_RDMA_READ_RESPONSE_LAST, 13, &mtu),
        );
        // 15 instead of 14: a gap of one.
        feed(&mut an, 6, A, B, &pkt(Opcode::RC_SEND_ONLY, 15, b"x"));
        // A retried READ at 12 is a retransmission.
        feed(&mut an, 7, A, B, &read(12, 1024));
        let r = an.report();
        let req = &r.connections[0].requests;
        assert_eq!(
            req.gaps.items,
            vec![Gap {
                expected: Some(14),
                got: 15
            }]
        );
        assert_eq!(req.retransmitted.items, vec![12]);
        assert_eq!(r.connections[0].path_mtu, Some(512));
        let rsp = &r.connections[1].responses;
        assert_eq!(rsp.read_responses, 4);
        assert_eq!(rsp.read_gaps.count, 0);
        assert_eq!(rsp.acks, 0);
    }

    #[test]
    fn read_without_mtu_reports_no_gap() {
        let mut an = Analyzer::new();
        feed(&mut an, 1, A, B, &read(10, 1 << 20));
        feed(&mut an, 2, A, B, &pkt(Opcode::RC_SEND_ONLY, 5000, b"x"));
        feed(&mut an, 3, A, B, &pkt(Opcode::RC_SEND_ONLY, 5002, b"x"));
        let r = an.report();
        let req = &r.connections[0].requests;
        assert_eq!(req.gaps.count, 1, "only the SEND-to-SEND jump counts");
        assert_eq!(r.connections[0].path_mtu, None);
    }

    #[test]
    fn read_response_repeats_and_orphans() {
        let mut an = Analyzer::new();
        let mtu = [0u8; 256];
        let seq = [
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 1),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 5), // FIRST not seen
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 6),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 6), // repeat
        ];
        for (i, (op, psn)) in seq.iter().enumerate() {
            let payload: &[u8] = if *op == Opcode::RC_RDMA_READ_RESPONSE_ONLY {
                b"abcd"
            } else {
                &mtu
            };
            feed(&mut an, i as u64, B_SRC, A_DST, &pkt(*op, *psn, payload));
        }
        let rsp = &an.report().connections[0].responses;
        assert_eq!(
            rsp.read_gaps.items,
            vec![Gap {
                expected: None,
                got: 5
            }]
        );
        assert_eq!(rsp.read_retransmitted.items, vec![6]);
    }

    #[test]
    fn examples_are_bounded() {
        let mut an = Analyzer::new();
        feed(&mut an, 0, A, B, &pkt(Opcode::RC_SEND_ONLY, 1000, b"x"));
        for i in 0..100 {
            feed(&mut an, i + 1, A, B, &pkt(Opcode::RC_SEND_ONLY, 10, b"x"));
        }
        let req = &an.report().connections[0].requests;
        assert_eq!(req.retransmitted.count, 100);
        assert_eq!(req.retransmitted.items.len(), MAX_EXAMPLES);
        let j = an.report().connections[0].to_json();
        assert_eq!(j["requests"]["retransmitted"]["count"], 100);
        assert!(an.report().text().contains(" ...)"));
    }

    #[test]
    fn ud_source_qps_are_separate_and_cnps_are_not_sequenced() {
        let mut an = Analyzer::new();
        for (i, (src_qp, psn)) in [(1u32, 100u32), (2, 5), (1, 101), (2, 6)]
            .iter()
            .enumerate()
        {
            let mut p = pkt(Opcode::UD_SEND_ONLY, *psn, b"abcd");
            p.ext.deth = Some(DethRepr {
                qkey: 0x11,
                src_qp: *src_qp,
            });
            feed(&mut an, i as u64, A, B, &p);
        }
        feed(&mut an, 9, A, B, &pkt(Opcode::CNP, 0, &[]));
        let r = an.report();
        assert_eq!(r.connections.len(), 3);
        for c in &r.connections[..2] {
            assert_eq!(c.requests.retransmitted.count, 0);
            assert_eq!(c.requests.gaps.count, 0);
            assert_eq!(c.requests.packets, 2);
        }
        assert_eq!(
            r.connections[0].title(),
            "192.0.2.1 > 192.0.2.2 dqpn=0x000007 srcqp=0x000001"
        );
        assert_eq!(r.connections[2].requests.packets, 0);
        assert_eq!(r.connections[2].opcodes[&0x81].packets, 1);
        assert_eq!(r.counters.roce_packets, 5);
        assert_eq!(r.counters.frames, 5);
    }

    #[test]
    fn counters_and_summary() {
        let mut an = Analyzer::new();
        an.observe_other();
        an.observe_unsupported_link();
        an.observe_undecodable();
        an.observe_broken(true);
        let c = an.counters();
        assert_eq!(
            c.summary_line(),
            "4 frames, 1 RoCEv2 packets (0 bad ICRC, 1 malformed), 3 other frames skipped \
             (1 with an unsupported link type, 1 undecodable, 1 RoCEv2 frames cut short by the \
             snap length)"
        );
        let j = an.report().to_json();
        assert_eq!(j.len(), 1);
        assert_eq!(j[0]["summary"]["other"], 3);
    }
}
