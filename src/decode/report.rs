//! One RoCEv2 packet, decoded for display: [`PacketReport`], rendered as a text line or a JSON
//! object.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::mad_report::MadDecode;
use crate::wire::aeth::rnr_timer_ns;
use crate::wire::frame::IcrcCheck;
use crate::wire::{AckSyndrome, AethRepr, BthRepr, ExtHeaders, NakCode, PacketRepr};

/// A decoded RoCEv2 packet (or one that could not be decoded), ready to be printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketReport {
    /// 1-based frame number in the capture.
    pub frame: u64,
    /// Capture timestamp, from the Unix epoch.
    pub ts: Duration,
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// The BTH, when at least its 12 bytes were captured.
    pub bth: Option<BthRepr>,
    /// The extended headers (only for a fully parsed packet).
    pub ext: Option<ExtHeaders>,
    /// Payload bytes without pad. For an unknown opcode: every byte between the BTH and the
    /// ICRC, as the headers cannot be delimited.
    pub payload_len: Option<usize>,
    /// The management datagram of a SEND to QP1 (connection management).
    pub mad: Option<MadDecode>,
    /// The ICRC check, when the packet is long enough to carry one.
    pub icrc: Option<IcrcCheck>,
    /// Why the packet could not be decoded; `None` for a good packet.
    pub error: Option<String>,
}

/// Formats an RNR NAK timer code as milliseconds with two decimals (`0.64 ms`).
pub fn rnr_timer_text(code: u8) -> String {
    let ns = rnr_timer_ns(code);
    format!("{}.{:02} ms", ns / 1_000_000, (ns % 1_000_000) / 10_000)
}

/// A NAK code as one hyphenated word (`PSN-sequence-error`).
pub fn nak_text(code: NakCode) -> String {
    match code {
        NakCode::Reserved(c) => format!("reserved-NAK-code-{c}"),
        other => other.name().replace(' ', "-"),
    }
}

/// The AETH as shown in a text line, e.g. `AETH(ACK credit=31 msn=5)`.
pub fn aeth_text(a: &AethRepr) -> String {
    match a.kind() {
        AckSyndrome::Ack { credit } => format!("AETH(ACK credit={credit} msn={})", a.msn),
        AckSyndrome::Nak(code) => format!("AETH(NAK {} msn={})", nak_text(code), a.msn),
        AckSyndrome::RnrNak { timer } => format!(
            "AETH(RNR-NAK timer={timer} ({}) msn={})",
            rnr_timer_text(timer),
            a.msn
        ),
        AckSyndrome::Reserved(s) => format!("AETH(reserved syndrome=0x{s:02x} msn={})", a.msn),
    }
}

fn aeth_json(a: &AethRepr) -> Value {
    let mut m = Map::new();
    m.insert("syndrome".into(), a.syndrome.into());
    m.insert("msn".into(), a.msn.into());
    match a.kind() {
        AckSyndrome::Ack { credit } => {
            m.insert("kind".into(), "ACK".into());
            m.insert("credit".into(), credit.into());
        }
        AckSyndrome::Nak(code) => {
            m.insert("kind".into(), "NAK".into());
            m.insert("nak_code".into(), code.to_u8().into());
            m.insert("nak".into(), nak_text(code).into());
        }
        AckSyndrome::RnrNak { timer } => {
            m.insert("kind".into(), "RNR_NAK".into());
            m.insert("rnr_timer".into(), timer.into());
            m.insert("rnr_delay_ns".into(), rnr_timer_ns(timer).into());
        }
        AckSyndrome::Reserved(_) => {
            m.insert("kind".into(), "reserved".into());
        }
    }
    Value::Object(m)
}

fn bth_json(b: &BthRepr, m: &mut Map<String, Value>) {
    m.insert("opcode".into(), b.opcode.0.into());
    m.insert("opcode_name".into(), b.opcode.to_string().into());
    m.insert("se".into(), b.solicited.into());
    m.insert("mig".into(), b.mig_req.into());
    m.insert("pad".into(), b.pad_count.into());
    m.insert("tver".into(), b.tver.into());
    m.insert("pkey".into(), b.pkey.into());
    m.insert("fecn".into(), b.fecn.into());
    m.insert("becn".into(), b.becn.into());
    m.insert("dqpn".into(), b.dest_qp.into());
    m.insert("ack_req".into(), b.ack_req.into());
    m.insert("psn".into(), b.psn.into());
}

fn bth_text(b: &BthRepr, s: &mut String) {
    let _ = write!(
        s,
        "{} se={} m={} pad={} pkey=0x{:04x}",
        b.opcode,
        u8::from(b.solicited),
        u8::from(b.mig_req),
        b.pad_count,
        b.pkey
    );
    if b.fecn {
        s.push_str(" fecn=1");
    }
    if b.becn {
        s.push_str(" becn=1");
    }
    let _ = write!(
        s,
        " dqpn=0x{:06x} ackreq={} psn=0x{:06x}",
        b.dest_qp,
        u8::from(b.ack_req),
        b.psn
    );
}

fn ext_text(e: &ExtHeaders, s: &mut String) {
    // In wire order (HeaderSet::ORDER).
    if let Some(d) = e.deth {
        let _ = write!(s, " DETH(qkey=0x{:08x} srcqp=0x{:06x})", d.qkey, d.src_qp);
    }
    if let Some(x) = e.xrceth {
        let _ = write!(s, " XRCETH(srqn=0x{:06x})", x.srqn);
    }
    if let Some(f) = e.feth {
        let _ = write!(s, " FETH(sel={} plt={})", f.selectivity, f.placement);
    }
    if let Some(r) = e.reth {
        let _ = write!(
            s,
            " RETH(va=0x{:x} rkey=0x{:08x} len={})",
            r.va, r.rkey, r.len
        );
    }
    if let Some(a) = e.atomic {
        let _ = write!(
            s,
            " AtomicETH(va=0x{:x} rkey=0x{:08x} swap_add=0x{:x} compare=0x{:x})",
            a.va, a.rkey, a.swap_add, a.compare
        );
    }
    if let Some(a) = e.aeth {
        s.push(' ');
        s.push_str(&aeth_text(&a));
    }
    if let Some(a) = e.atomic_ack {
        let _ = write!(s, " AtomicAckETH(orig=0x{:x})", a.orig);
    }
    if let Some(i) = e.imm {
        let _ = write!(s, " ImmDt(0x{:08x})", i.imm);
    }
    if let Some(i) = e.ieth {
        let _ = write!(s, " IETH(rkey=0x{:08x})", i.rkey);
    }
}

fn ext_json(e: &ExtHeaders, m: &mut Map<String, Value>) {
    if let Some(d) = e.deth {
        m.insert("deth".into(), json!({"qkey": d.qkey, "src_qp": d.src_qp}));
    }
    if let Some(x) = e.xrceth {
        m.insert("xrceth".into(), json!({"srqn": x.srqn}));
    }
    if let Some(f) = e.feth {
        m.insert(
            "feth".into(),
            json!({"selectivity": f.selectivity, "placement": f.placement}),
        );
    }
    if let Some(r) = e.reth {
        m.insert(
            "reth".into(),
            json!({"va": r.va, "rkey": r.rkey, "len": r.len}),
        );
    }
    if let Some(a) = e.atomic {
        m.insert(
            "atomic".into(),
            json!({"va": a.va, "rkey": a.rkey, "swap_add": a.swap_add, "compare": a.compare}),
        );
    }
    if let Some(a) = e.aeth {
        m.insert("aeth".into(), aeth_json(&a));
    }
    if let Some(a) = e.atomic_ack {
        m.insert("atomic_ack".into(), json!({"orig": a.orig}));
    }
    if let Some(i) = e.imm {
        m.insert("imm".into(), i.imm.into());
    }
    if let Some(i) = e.ieth {
        m.insert("ieth".into(), i.rkey.into());
    }
}

impl PacketReport {
    /// The report of a parsed packet.
    pub fn new(
        frame: u64,
        ts: Duration,
        src: SocketAddr,
        dst: SocketAddr,
        packet: &PacketRepr<'_>,
        icrc: Option<IcrcCheck>,
    ) -> PacketReport {
        PacketReport {
            frame,
            ts,
            src,
            dst,
            bth: Some(packet.bth),
            ext: Some(packet.ext),
            payload_len: Some(packet.payload.len()),
            mad: MadDecode::from_packet(packet),
            icrc,
            error: None,
        }
    }

    /// Whether the packet was decoded.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// Whether the ICRC was checked and found wrong.
    pub fn icrc_bad(&self) -> bool {
        self.icrc.is_some_and(|c| !c.ok())
    }

    /// Whether this is a packet with an opcode softroce does not know (its BTH is shown).
    pub fn is_unknown_opcode(&self) -> bool {
        self.error.is_some() && self.bth.is_some_and(|b| b.opcode.info().is_none())
    }

    /// One line of text, e.g.
    /// `12 192.0.2.11:49153 > 192.0.2.12:4791 RC_RDMA_WRITE_FIRST se=0 m=1 pad=0 pkey=0xffff
    /// dqpn=0x000011 ackreq=0 psn=0x00a1b2 RETH(va=0x7f0000001000 rkey=0x00001234 len=8192)
    /// payload=1024 icrc=ok`, or `12 src > dst MALFORMED: <reason>`.
    pub fn text_line(&self) -> String {
        let mut s = format!("{} {} > {} ", self.frame, self.src, self.dst);
        let bth = match (&self.error, self.bth) {
            (None, Some(b)) => b,
            (Some(_), Some(b)) if self.is_unknown_opcode() => b,
            (err, _) => {
                let _ = write!(s, "MALFORMED: {}", err.as_deref().unwrap_or("no BTH"));
                return s;
            }
        };
        bth_text(&bth, &mut s);
        if let Some(e) = &self.ext {
            ext_text(e, &mut s);
        }
        if let Some(n) = self.payload_len {
            let _ = write!(s, " payload={n}");
        }
        if let Some(m) = &self.mad {
            s.push_str(&m.text());
        }
        match self.icrc {
            Some(c) if c.ok() => s.push_str(" icrc=ok"),
            Some(c) => {
                let _ = write!(
                    s,
                    " icrc=bad (found 0x{:08x}, computed 0x{:08x})",
                    c.found, c.computed
                );
            }
            None => s.push_str(" icrc=n/a"),
        }
        s
    }

    /// One JSON object. A decoded packet has the BTH fields at the top level ("opcode",
    /// "opcode_name", "se", "mig", "pad", "tver", "pkey", "fecn", "becn", "dqpn", "ack_req",
    /// "psn"), "payload_len", "icrc_ok", "icrc" (the value carried) and one key per extended
    /// header present ("deth", "xrceth", "feth", "reth", "atomic", "aeth", "atomic_ack", "imm", "ieth"),
    /// and "mad" for a SEND to QP1 ([`MadDecode::to_json`]).
    /// A packet that could not be decoded has "error" instead, with the BTH (when captured)
    /// under "bth". Both have "frame", "ts" (seconds), "src" and "dst".
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("frame".into(), self.frame.into());
        m.insert("ts".into(), self.ts.as_secs_f64().into());
        m.insert("src".into(), self.src.to_string().into());
        m.insert("dst".into(), self.dst.to_string().into());
        match &self.error {
            None => {
                if let Some(b) = &self.bth {
                    bth_json(b, &mut m);
                }
                if let Some(e) = &self.ext {
                    ext_json(e, &mut m);
                }
                if let Some(n) = self.payload_len {
                    m.insert("payload_len".into(), n.into());
                }
                if let Some(mad) = &self.mad {
                    m.insert("mad".into(), mad.to_json());
                }
            }
            Some(err) => {
                m.insert("error".into(), err.clone().into());
                if let Some(b) = &self.bth {
                    let mut bm = Map::new();
                    bth_json(b, &mut bm);
                    m.insert("bth".into(), Value::Object(bm));
                }
            }
        }
        if let Some(c) = self.icrc {
            m.insert("icrc_ok".into(), c.ok().into());
            m.insert("icrc".into(), c.found.into());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AtomicAckEthRepr, ImmDtRepr, Opcode, RethRepr};

    fn addrs() -> (SocketAddr, SocketAddr) {
        (
            "192.0.2.11:49153".parse().unwrap(),
            "192.0.2.12:4791".parse().unwrap(),
        )
    }

    #[test]
    fn the_example_line() {
        let (src, dst) = addrs();
        let payload = [0u8; 1024];
        let p = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_WRITE_FIRST,
                mig_req: true,
                pkey: 0xFFFF,
                dest_qp: 0x11,
                psn: 0xA1B2,
                ..Default::default()
            },
            ext: ExtHeaders {
                reth: Some(RethRepr {
                    va: 0x7f00_0000_1000,
                    rkey: 0x1234,
                    len: 8192,
                }),
                ..Default::default()
            },
            payload: &payload,
        };
        let icrc = IcrcCheck {
            computed: 1,
            found: 1,
        };
        let r = PacketReport::new(12, Duration::ZERO, src, dst, &p, Some(icrc));
        assert_eq!(
            r.text_line(),
            "12 192.0.2.11:49153 > 192.0.2.12:4791 RC_RDMA_WRITE_FIRST se=0 m=1 pad=0 \
             pkey=0xffff dqpn=0x000011 ackreq=0 psn=0x00a1b2 RETH(va=0x7f0000001000 \
             rkey=0x00001234 len=8192) payload=1024 icrc=ok"
        );
        let j = r.to_json();
        assert_eq!(j["reth"]["va"], 0x7f00_0000_1000u64);
        assert_eq!(j["opcode"], 6);
        assert_eq!(j["mig"], true);
        assert_eq!(j["icrc_ok"], true);
        assert_eq!(j["src"], "192.0.2.11:49153");
        assert!(j.get("error").is_none());
    }

    #[test]
    fn aeth_forms() {
        assert_eq!(aeth_text(&AethRepr::ack(5)), "AETH(ACK credit=31 msn=5)");
        assert_eq!(
            aeth_text(&AethRepr::nak(NakCode::PsnSequenceError, 5)),
            "AETH(NAK PSN-sequence-error msn=5)"
        );
        assert_eq!(
            aeth_text(&AethRepr::rnr_nak(12, 5)),
            "AETH(RNR-NAK timer=12 (0.64 ms) msn=5)"
        );
        assert_eq!(rnr_timer_text(0), "655.36 ms");
        assert_eq!(rnr_timer_text(1), "0.01 ms");
        assert_eq!(
            aeth_text(&AethRepr {
                syndrome: 0x45,
                msn: 1
            }),
            "AETH(reserved syndrome=0x45 msn=1)"
        );
        assert_eq!(nak_text(NakCode::Reserved(9)), "reserved-NAK-code-9");
        assert_eq!(nak_text(NakCode::InvalidRdRequest), "invalid-RD-request");
        let j = aeth_json(&AethRepr::rnr_nak(12, 5));
        assert_eq!(j["kind"], "RNR_NAK");
        assert_eq!(j["rnr_delay_ns"], 640_000);
        assert_eq!(j["syndrome"], 0x2C);
    }

    #[test]
    fn malformed_unknown_and_bad_icrc() {
        let (src, dst) = addrs();
        let bad = PacketReport {
            frame: 3,
            ts: Duration::ZERO,
            src,
            dst,
            bth: None,
            ext: None,
            payload_len: None,
            mad: None,
            icrc: None,
            error: Some("truncated BTH: need 12 bytes, got 4".into()),
        };
        assert_eq!(
            bad.text_line(),
            "3 192.0.2.11:49153 > 192.0.2.12:4791 MALFORMED: truncated BTH: need 12 bytes, got 4"
        );
        assert_eq!(
            bad.to_json()["error"],
            "truncated BTH: need 12 bytes, got 4"
        );
        assert!(bad.to_json().get("icrc_ok").is_none());
        let unknown = PacketReport {
            bth: Some(BthRepr {
                opcode: Opcode(0x1F),
                ..Default::default()
            }),
            payload_len: Some(8),
            icrc: Some(IcrcCheck {
                computed: 1,
                found: 2,
            }),
            error: Some("unknown opcode 0x1f".into()),
            ..bad.clone()
        };
        assert!(unknown.is_unknown_opcode());
        let line = unknown.text_line();
        assert!(
            line.starts_with("3 192.0.2.11:49153 > 192.0.2.12:4791 UNKNOWN_0x1f se=0"),
            "{line}"
        );
        assert!(
            line.ends_with("payload=8 icrc=bad (found 0x00000002, computed 0x00000001)"),
            "{line}"
        );
        let j = unknown.to_json();
        assert_eq!(j["bth"]["opcode_name"], "UNKNOWN_0x1f");
        assert_eq!(j["icrc_ok"], false);
        assert!(j.get("opcode").is_none());
    }

    #[test]
    fn every_extended_header_is_shown() {
        let (src, dst) = addrs();
        let p = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_ATOMIC_ACK,
                fecn: true,
                becn: true,
                ..Default::default()
            },
            ext: ExtHeaders {
                aeth: Some(AethRepr::ack(1)),
                atomic_ack: Some(AtomicAckEthRepr { orig: 0xABCD }),
                imm: Some(ImmDtRepr { imm: 7 }),
                ..Default::default()
            },
            payload: &[],
        };
        let r = PacketReport::new(1, Duration::ZERO, src, dst, &p, None);
        let line = r.text_line();
        assert!(line.contains(" fecn=1 becn=1 "), "{line}");
        assert!(
            line.contains("AETH(ACK credit=31 msn=1) AtomicAckETH(orig=0xabcd) ImmDt(0x00000007)"),
            "{line}"
        );
        let j = r.to_json();
        assert_eq!(j["atomic_ack"]["orig"], 0xABCD);
        assert_eq!(j["imm"], 7);
        assert_eq!(j["aeth"]["msn"], 1);
    }
}
