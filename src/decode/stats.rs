//! What `softroce decode --analyze` keeps over the whole capture ([`Counters`]) and per
//! connection: the opcode counts, the request PSN sequence and the responses, with their rules
//! of accounting (the rules are described in `analyze.rs`, which feeds these from each packet;
//! `analysis_report.rs` shows them).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::wire::psn::packets_for;
use crate::wire::{AckSyndrome, OpKind, Position, Psn};

/// Most connections tracked individually.
pub const MAX_CONNECTIONS: usize = 65_536;

/// Frame counts over the whole capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Frames in the capture.
    pub frames: u64,
    /// RoCEv2 packets (UDP datagrams to the RoCEv2 port), malformed ones included.
    pub roce_packets: u64,
    /// RoCEv2 packets whose ICRC is wrong.
    pub bad_icrc: u64,
    /// RoCEv2 packets that could not be decoded (unknown opcodes and snapped frames included).
    pub malformed: u64,
    /// RoCEv2 frames cut short by the capture's snap length (included in `malformed`).
    pub snapped: u64,
    /// Frames that are not RoCEv2 and were skipped (including the two counts below).
    pub other: u64,
    /// Frames with a link type softroce cannot decode.
    pub unsupported_link: u64,
    /// Frames whose link, IP or UDP headers are malformed (and not RoCEv2 as far as can be seen).
    pub undecodable: u64,
    /// RoCE packets of connections beyond [`MAX_CONNECTIONS`], counted only here.
    pub untracked: u64,
}

/// Most examples kept per list (retransmitted PSNs, gaps, NAK PSNs, ...).
pub const MAX_EXAMPLES: usize = 32;
/// Most distinct UDP source ports listed per connection.
pub(super) const MAX_PORTS: usize = 8;

/// A count with the first few examples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Examples<T> {
    /// How many there were.
    pub count: u64,
    /// The first [`MAX_EXAMPLES`] of them.
    pub items: Vec<T>,
}

impl<T> Default for Examples<T> {
    fn default() -> Self {
        Examples {
            count: 0,
            items: Vec::new(),
        }
    }
}

impl<T> Examples<T> {
    pub(super) fn push(&mut self, item: T) {
        self.count += 1;
        if self.items.len() < MAX_EXAMPLES {
            self.items.push(item);
        }
    }
}

/// A jump in a PSN sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The PSN that was expected next; `None` when a READ response continued a message whose
    /// FIRST packet was not seen.
    pub expected: Option<u32>,
    /// The PSN that arrived.
    pub got: u32,
}

/// What the next request PSN should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    Unknown,
    Known(Psn),
    /// After a READ request whose PSN count depends on a path MTU not known at the time.
    AfterRead {
        psn: Psn,
        len: u32,
    },
}

/// Packet and payload byte counts of one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpcodeStats {
    /// Packets with this opcode, bad ICRC ones excluded.
    pub packets: u64,
    /// Payload bytes (without headers, pad and ICRC).
    pub bytes: u64,
}

/// The request PSN sequence of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStats {
    /// Request packets with a good ICRC.
    pub packets: u64,
    /// First request PSN seen.
    pub first_psn: Option<u32>,
    /// Highest request PSN in use (for a READ request, the last PSN it reserves, when known).
    pub highest_psn: Option<u32>,
    /// Retransmitted or duplicate request PSNs.
    pub retransmitted: Examples<u32>,
    /// Forward jumps of the request PSN.
    pub gaps: Examples<Gap>,
    /// PSNs skipped over by those jumps.
    pub missing_psns: u64,
    expected: Expected,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            packets: 0,
            first_psn: None,
            highest_psn: None,
            retransmitted: Examples::default(),
            gaps: Examples::default(),
            missing_psns: 0,
            expected: Expected::Unknown,
        }
    }
}

/// The responses (ACK, NAK, READ response, ATOMIC ACK) a connection carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResponseStats {
    /// Response packets with a good ICRC.
    pub packets: u64,
    /// First response PSN seen.
    pub first_psn: Option<u32>,
    /// Highest response PSN seen.
    pub highest_psn: Option<u32>,
    /// Positive ACKs (RC_ACKNOWLEDGE with an ACK syndrome).
    pub acks: u64,
    /// ATOMIC ACKNOWLEDGE packets.
    pub atomic_acks: u64,
    /// READ response packets.
    pub read_responses: u64,
    /// NAKs by NAK code, with example PSNs.
    pub naks: BTreeMap<u8, Examples<u32>>,
    /// RNR NAKs by timer code, with example PSNs.
    pub rnr_naks: BTreeMap<u8, Examples<u32>>,
    /// Jumps within a multi-packet READ response.
    pub read_gaps: Examples<Gap>,
    /// READ response PSNs lost in those jumps (when known).
    pub read_missing_psns: u64,
    /// READ response packets repeating a PSN already seen.
    pub read_retransmitted: Examples<u32>,
    /// PSN of the last packet of the READ response message in progress.
    read_in_progress: Option<Psn>,
    read_highest: Option<Psn>,
}

/// Everything known about one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Sender's IP address (with `dst` and `dqpn`, the connection's key).
    pub src: IpAddr,
    /// Receiver's IP address.
    pub dst: IpAddr,
    /// The BTH destination QP: the receiver's QP, 24 bits.
    pub dqpn: u32,
    /// Source QP, for UD (from the DETH).
    pub src_qp: Option<u32>,
    /// UDP source ports seen (at most 8).
    pub src_ports: Vec<u16>,
    /// First frame of the connection.
    pub first_frame: u64,
    /// Last frame of the connection.
    pub last_frame: u64,
    /// RoCE packets, all included.
    pub packets: u64,
    /// Payload bytes of decoded packets.
    pub payload_bytes: u64,
    /// Decoded packets by opcode.
    pub opcodes: BTreeMap<u8, OpcodeStats>,
    /// Packets that could not be decoded past their BTH, with example frame numbers.
    pub malformed: Examples<u64>,
    /// Packets with the BTH FECN bit.
    pub fecn: u64,
    /// Packets with the BTH BECN bit.
    pub becn: u64,
    /// The request PSN sequence.
    pub requests: RequestStats,
    /// Responses this direction returns for the other direction's requests (their PSNs are
    /// those requests').
    pub responses: ResponseStats,
    /// Path MTU inferred from this connection's own FIRST/MIDDLE packets.
    pub path_mtu: Option<u32>,
}

impl ConnectionStats {
    /// A connection first seen in frame `frame`: `src` to `dst`'s QP `dqpn` (and for UD,
    /// from QP `src_qp`).
    pub(super) fn new(
        src: IpAddr,
        dst: IpAddr,
        dqpn: u32,
        src_qp: Option<u32>,
        frame: u64,
    ) -> Self {
        ConnectionStats {
            src,
            dst,
            dqpn,
            src_qp,
            src_ports: Vec::new(),
            first_frame: frame,
            last_frame: frame,
            packets: 0,
            payload_bytes: 0,
            opcodes: BTreeMap::new(),
            malformed: Examples::default(),
            fecn: 0,
            becn: 0,
            requests: RequestStats::default(),
            responses: ResponseStats::default(),
            path_mtu: None,
        }
    }
}

impl RequestStats {
    pub(super) fn observe(&mut self, psn: Psn, read_len: Option<u32>, pmtu: Option<u32>) {
        self.packets += 1;
        // PSNs the request uses: one, or for a READ the number of response packets.
        let consumed = match read_len {
            None => Some(1u32),
            Some(len) => pmtu.map(|m| packets_for(u64::from(len), m).min(1 << 23) as u32),
        };
        if let Some(h) = self.highest_psn.map(Psn::new) {
            if !psn.is_after(h) {
                self.retransmitted.push(psn.value());
                return;
            }
            let expected = match self.expected {
                Expected::Known(e) => Some(e),
                Expected::AfterRead { psn, len } => {
                    pmtu.map(|m| psn.add(packets_for(u64::from(len), m).min(1 << 23) as u32))
                }
                Expected::Unknown => None,
            };
            if let Some(e) = expected {
                if psn.is_after(e) {
                    self.gaps.push(Gap {
                        expected: Some(e.value()),
                        got: psn.value(),
                    });
                    self.missing_psns += u64::from(psn.distance_from(e));
                }
            }
        } else {
            self.first_psn = Some(psn.value());
        }
        match (consumed, read_len) {
            (Some(n), _) => {
                self.highest_psn = Some(psn.add(n.max(1) - 1).value());
                self.expected = Expected::Known(psn.add(n.max(1)));
            }
            (None, Some(len)) => {
                self.highest_psn = Some(psn.value());
                self.expected = Expected::AfterRead { psn, len };
            }
            (None, None) => {
                self.highest_psn = Some(psn.value());
                self.expected = Expected::Unknown;
            }
        }
    }
}

impl ResponseStats {
    pub(super) fn observe(
        &mut self,
        psn: Psn,
        kind: OpKind,
        position: Position,
        aeth: Option<AckSyndrome>,
    ) {
        self.packets += 1;
        if self.first_psn.is_none() {
            self.first_psn = Some(psn.value());
        }
        match self.highest_psn.map(Psn::new) {
            Some(h) if !psn.is_after(h) => {}
            _ => self.highest_psn = Some(psn.value()),
        }
        match aeth {
            Some(AckSyndrome::Nak(code)) => {
                self.naks.entry(code.to_u8()).or_default().push(psn.value());
            }
            Some(AckSyndrome::RnrNak { timer }) => {
                self.rnr_naks.entry(timer).or_default().push(psn.value());
            }
            Some(AckSyndrome::Ack { .. }) if kind == OpKind::Ack => self.acks += 1,
            _ => {}
        }
        match kind {
            OpKind::AtomicAck => self.atomic_acks += 1,
            OpKind::ReadResponse => self.observe_read(psn, position),
            _ => {}
        }
    }

    fn observe_read(&mut self, psn: Psn, position: Position) {
        let seen_before = self.read_responses > 0;
        self.read_responses += 1;
        if let Some(h) = self.read_highest {
            if !psn.is_after(h) {
                // A repeat: the READ was retried (by the requester, after a loss or a timeout).
                self.read_retransmitted.push(psn.value());
                if position.starts_message() {
                    self.read_in_progress = (position == Position::First).then_some(psn);
                }
                return;
            }
        }
        self.read_highest = Some(psn);
        match position {
            Position::First | Position::Only => {
                self.read_in_progress = (position == Position::First).then_some(psn);
            }
            Position::Middle | Position::Last => {
                match self.read_in_progress {
                    Some(prev) => {
                        let e = prev.next();
                        if psn.is_after(e) {
                            self.read_gaps.push(Gap {
                                expected: Some(e.value()),
                                got: psn.value(),
                            });
                            self.read_missing_psns += u64::from(psn.distance_from(e));
                        }
                    }
                    None if seen_before => self.read_gaps.push(Gap {
                        expected: None,
                        got: psn.value(),
                    }),
                    None => {}
                }
                self.read_in_progress = (position == Position::Middle).then_some(psn);
            }
        }
    }
}
