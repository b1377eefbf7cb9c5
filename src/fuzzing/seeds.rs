//! The seed corpora of the protocol targets, built from the real kernel-rxe captures in
//! tests/data/rxe and from a few hand-shaped runs. tests/fuzz_corpus.rs checks that the
//! committed files in fuzz/corpus/<target>/ are exactly what these functions produce, and
//! rewrites them when run with `SOFTROCE_REGEN_SEEDS=1`.
//!
//! Structured steps are written with [`Enc`], which produces the bytes `arbitrary` 1.x reads
//! back as a given value (integers little-endian, a bool as one byte, an enum variant as a u32
//! scaled into the variant count); the test decodes every seed, so a change in that encoding
//! shows up as a test failure, not as silently meaningless seeds.

use std::path::Path;

use super::harness::{encode_raw, RAW_TAG};
use crate::capture::CaptureReader;
use crate::wire::{Frame, PacketRepr};

/// Writes values as `arbitrary` 1.x reads them.
#[derive(Debug, Default, Clone)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// A `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Enc {
        self.0.push(v);
        self
    }
    /// A `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `bool`.
    pub fn bool(&mut self, v: bool) -> &mut Enc {
        self.0.push(v as u8);
        self
    }
    /// Variant `i` of an enum with `n` variants (derived `Arbitrary`).
    pub fn variant(&mut self, i: u32, n: u32) -> &mut Enc {
        let v = ((i as u64) << 32).div_ceil(n as u64);
        self.u32(v as u32)
    }
    /// The tag of a structured step (any byte but [`RAW_TAG`]).
    pub fn shaped(&mut self) -> &mut Enc {
        self.u8(RAW_TAG + 1)
    }
}

/// The RoCE UDP payloads (BTH .. ICRC) of every frame of a capture, with their sender.
pub fn capture_packets(pcap: &[u8]) -> Vec<(std::net::SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(mut reader) = CaptureReader::new(std::io::Cursor::new(pcap)) else {
        return out;
    };
    while let Ok(Some(f)) = reader.next_frame() {
        let Some(link) = f.link else { continue };
        if let Ok(Some(frame)) = Frame::parse(link, f.data) {
            out.push((frame.src, frame.udp_payload.to_vec()));
        }
    }
    out
}

/// Seeds for `responder`: the requests of each capture towards one QP, in capture order,
/// with the responder expecting the first one's PSN and receives posted.
pub fn responder_from_capture(pcap: &[u8]) -> Option<Vec<u8>> {
    let pkts = capture_packets(pcap);
    let mut reqs = pkts.iter().filter_map(|(src, b)| {
        let p = PacketRepr::parse(b).ok()?;
        p.info()?
            .is_request()
            .then_some((*src, p.bth.dest_qp, p.bth.psn, p.payload.len(), b))
    });
    let (src, qpn, psn, _, _) = reqs.clone().next()?;
    let chosen: Vec<_> = reqs
        .by_ref()
        .filter(|r| r.0 == src && r.1 == qpn)
        .take(64)
        .collect();
    let biggest = chosen.iter().map(|r| r.3).max().unwrap_or(0);
    let mtu = (0u8..5).find(|m| biggest <= 256 << m).unwrap_or(4);
    let setup = super::responder::Setup {
        mtu,
        rq_psn: psn,
        rd_atomic: 15,
        recvs: 16,
        xrc: 0,
    };
    let mut out = setup.encode().to_vec();
    for r in chosen {
        encode_raw(&mut out, r.4);
    }
    Some(out)
}

/// A `responder` seed in TM mode (spec-notes/beyond-rxe.md rule 13): SEND ONLY requests whose
/// payloads start with a TMH: EAGER to tag 1, EAGER to any tag (the mask-0 tag), an
/// unexpected EAGER, a NO_TAG, a rendezvous to tag 2 whose RVH names the peer's memory, and
/// one to tag 0 without its RVH.
pub fn responder_tm_shaped() -> Vec<u8> {
    use super::harness::{bth, emit};
    use crate::transport::tag_match::{Tmh, TmhOp};
    use crate::wire::{ExtHeaders, Opcode};
    let setup = super::responder::Setup {
        mtu: 0,
        rq_psn: 0,
        rd_atomic: 1,
        recvs: 4,
        xrc: 2,
    };
    let mut out = setup.encode().to_vec();
    let rvh = [
        &0x2000u64.to_be_bytes()[..],
        &0x1234u32.to_be_bytes(),
        &300u32.to_be_bytes(),
    ]
    .concat();
    let msgs: [(TmhOp, u64, &[u8]); 6] = [
        (TmhOp::Eager, 1, &[0xAB; 100]),
        (TmhOp::Eager, 0x77, &[0xCD; 40]),
        (TmhOp::Eager, 0x78, &[0xEF; 40]),
        (TmhOp::NoTag, 0, &[0x11; 20]),
        (TmhOp::Rndv, 2, &rvh),
        (TmhOp::Rndv, 0, &[]),
    ];
    for (psn, (op, tag, rest)) in msgs.into_iter().enumerate() {
        let tmh = Tmh {
            op,
            app_ctx: 7,
            tag,
        };
        let payload = [&tmh.emit()[..], rest].concat();
        let pkt = PacketRepr {
            bth: bth(Opcode::RC_SEND_ONLY, 0x11, psn as u32, true, false),
            ext: ExtHeaders::default(),
            payload: &payload,
        };
        if let Some(b) = emit(&pkt) {
            encode_raw(&mut out, &b);
        }
    }
    out
}

/// Seeds for `completer`: the responses of each capture, against a requester that has posted
/// one WR of every kind and sent its requests.
pub fn completer_from_capture(pcap: &[u8]) -> Option<Vec<u8>> {
    let pkts = capture_packets(pcap);
    let resps: Vec<&Vec<u8>> = pkts
        .iter()
        .filter(|(_, b)| {
            PacketRepr::parse(b)
                .ok()
                .and_then(|p| p.info().map(|i| i.is_response()))
                .unwrap_or(false)
        })
        .map(|(_, b)| b)
        .take(64)
        .collect();
    let first_psn = PacketRepr::parse(resps.first()?).ok()?.bth.psn;
    let setup = super::completer::Setup {
        mtu: 2,
        sq_psn: first_psn,
        timeout: 4,
        retry_cnt: 3,
        rnr_retry: 3,
        rd_atomic: 3,
    };
    let mut e = Enc(setup.encode().to_vec());
    for kind in 0..8 {
        completer_post(&mut e, kind, 300, true);
    }
    e.shaped().variant(1, 4).u8(255); // Transmit(255)
    let mut out = e.0;
    for r in resps {
        encode_raw(&mut out, r);
    }
    Some(out)
}

/// A `completer` Post step.
fn completer_post(e: &mut Enc, kind: u8, len: u16, signaled: bool) {
    e.shaped()
        .variant(0, 4)
        .u8(kind)
        .u16(len)
        .u16(64 * kind as u16)
        .bool(signaled)
        .bool(false)
        .u32(0x100 * kind as u32);
}

/// A `completer` seed: a WR of every kind, sent, then acknowledged by shaped responses (an
/// ACK of everything, a READ response, an atomic ACK), then silence.
pub fn completer_shaped() -> Vec<u8> {
    let setup = super::completer::Setup {
        mtu: 0,
        sq_psn: 0xFF_FFF0,
        timeout: 3,
        retry_cnt: 2,
        rnr_retry: 2,
        rd_atomic: 3,
    };
    let mut e = Enc(setup.encode().to_vec());
    for kind in [0u8, 2, 4, 6, 5, 1] {
        completer_post(&mut e, kind, 600, kind % 2 == 0);
    }
    e.shaped().variant(1, 4).u8(255);
    // Respond: op, psn Sent(k), ack, len, fill, header fields.
    for (op, k, ack) in [(4u8, 0u8, 0u32), (3, 3, 0), (5, 1, 0), (4, 0, 2), (4, 0, 1)] {
        e.shaped().variant(2, 4).u8(op).variant(0, 3).u8(k);
        e.variant(ack, 4);
        if ack > 0 {
            e.u8(3);
        }
        e.u16(256).u8(7);
        header_fields(&mut e);
    }
    // Wait(Deadline) twice.
    e.shaped().variant(3, 4).variant(0, 2);
    e.shaped().variant(3, 4).variant(0, 2);
    e.0
}

fn header_fields(e: &mut Enc) {
    e.u8(0)
        .u16(0)
        .u16(64)
        .u64(1)
        .u64(2)
        .u8(0x1F)
        .u32(1)
        .u64(0xAB)
        .u32(0xC0FFEE);
}

/// `pair` seeds: clean runs of every operation (post, transmit and deliver in order), and the
/// same with a drop, a duplicate, a reorder and a corruption.
pub fn pair_shaped() -> Vec<(&'static str, Vec<u8>)> {
    const N: u32 = 9; // PairStep variants
    let post = |e: &mut Enc, b: bool, kind: u8, len: u16| {
        e.shaped().variant(0, N).bool(b).u8(kind).u16(len);
    };
    let recv = |e: &mut Enc, b: bool| {
        e.shaped().variant(1, N).bool(b);
    };
    let transmit = |e: &mut Enc, b: bool, n: u8| {
        e.shaped().variant(2, N).bool(b).u8(n);
    };
    let deliver = |e: &mut Enc, i: u8| {
        e.shaped().variant(3, N).u8(i);
    };
    let base = |e: &mut Enc| {
        recv(e, true);
        recv(e, false);
        post(e, false, 0, 700);
        post(e, false, 1, 1000);
        post(e, false, 2, 513);
        post(e, false, 3, 8);
        post(e, true, 0, 3);
        post(e, true, 2, 1024);
        transmit(e, false, 4);
        transmit(e, true, 4);
    };
    let setup = super::pair::Setup {
        mtu: 0,
        psn: 0xF0,
        timeout: 2,
        retry_cnt: 3,
        rnr_retry: 3,
        rd_atomic: 2,
    };
    let mut out = Vec::new();
    let mut clean = Enc(setup.encode().to_vec());
    base(&mut clean);
    for _ in 0..8 {
        deliver(&mut clean, 0);
    }
    out.push(("clean", clean.0));
    for (name, variant) in [("drop", 4u32), ("duplicate", 5), ("reorder", 3)] {
        let mut e = Enc(setup.encode().to_vec());
        base(&mut e);
        e.shaped().variant(variant, N).u8(1);
        for _ in 0..8 {
            deliver(&mut e, 0);
        }
        // Timer on A.
        e.shaped().variant(7, N).bool(false);
        out.push((name, e.0));
    }
    let mut e = Enc(setup.encode().to_vec());
    base(&mut e);
    e.shaped().variant(6, N).u8(0).u16(20).u8(0x10);
    for _ in 0..8 {
        deliver(&mut e, 0);
    }
    out.push(("corrupt", e.0));
    // A peer that never answers: A's budget runs out.
    let mut e = Enc(setup.encode().to_vec());
    base(&mut e);
    for _ in 0..8 {
        e.shaped().variant(4, N).u8(0);
        e.shaped().variant(7, N).bool(false);
        transmit(&mut e, false, 8);
    }
    out.push(("silent_peer", e.0));
    out
}

/// `engine_rx` seeds: each capture's packets, sealed and aimed at the hostile QP, the first
/// few also raw and aimed at the good QP.
pub fn engine_from_capture(pcap: &[u8]) -> Option<Vec<u8>> {
    use super::engine_rx::{encode_datagram, SEAL, TO_GOOD_QP, TO_HOSTILE_QP};
    let pkts = capture_packets(pcap);
    if pkts.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for (i, (_, b)) in pkts.iter().take(48).enumerate() {
        let flags = match i % 4 {
            3 => SEAL | TO_GOOD_QP,
            2 => TO_HOSTILE_QP,
            _ => SEAL | TO_HOSTILE_QP,
        };
        encode_datagram(&mut out, flags, b);
    }
    Some(out)
}

/// Every generated seed: (target, file name, bytes).
pub fn all(rxe_dir: &Path) -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut caps: Vec<_> = std::fs::read_dir(rxe_dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    caps.retain(|p: &std::path::PathBuf| {
        p.extension().is_some_and(|x| x == "pcap" || x == "pcapng")
    });
    caps.sort();
    for p in caps {
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().replace('.', "_"))
            .unwrap_or_default();
        let name = format!("capture_{name}");
        if let Some(s) = responder_from_capture(&bytes) {
            out.push(("responder", name.clone(), s));
        }
        if let Some(s) = completer_from_capture(&bytes) {
            out.push(("completer", name.clone(), s));
        }
        if let Some(s) = engine_from_capture(&bytes) {
            out.push(("engine_rx", name.clone(), s));
        }
    }
    out.push(("completer", "shaped_every_kind".into(), completer_shaped()));
    out.push((
        "responder",
        "shaped_tag_matching".into(),
        responder_tm_shaped(),
    ));
    for (name, s) in pair_shaped() {
        out.push(("pair", format!("shaped_{name}"), s));
    }
    for (name, s) in cm_shaped() {
        out.push(("cm", format!("shaped_{name}"), s));
    }
    out
}

/// `cm` seeds: a whole connection (REQ, REP, RTU, DREQ, DREP, time-wait), the same with each
/// kind of loss and duplicate, and a rejected one.
pub fn cm_shaped() -> Vec<(&'static str, Vec<u8>)> {
    const N: u32 = 10; // cm::Op variants
    let connect = |e: &mut Enc| {
        e.variant(0, N).bool(false);
    };
    let answer = |e: &mut Enc, accept: bool| {
        e.variant(1, N).bool(accept);
    };
    let establish = |e: &mut Enc| {
        e.variant(2, N);
    };
    let disconnect = |e: &mut Enc, on_b: bool| {
        e.variant(3, N).bool(on_b).u8(0);
    };
    // Deliver, lose or duplicate (variants 4, 5, 6) the next MAD towards B or A.
    let mv = |e: &mut Enc, how: u32, to_b: bool| {
        e.variant(how, N).bool(to_b);
    };
    let wait = |e: &mut Enc, ms: u16| {
        e.variant(9, N).u16(ms);
    };
    let whole = |e: &mut Enc, lose: Option<usize>, dup: Option<usize>| {
        let mut step = 0;
        let mut hop = |e: &mut Enc, to_b: bool| {
            let how = if lose == Some(step) {
                5
            } else if dup == Some(step) {
                6
            } else {
                4
            };
            mv(e, how, to_b);
            if how == 5 {
                // The sender's retry comes after its timeout (about 4.8 s); a lost RTU is
                // recovered by the REP's retry and the RTU sent again, so deliver both ways.
                wait(e, 100);
                mv(e, 4, to_b);
                mv(e, 4, !to_b);
                mv(e, 4, to_b);
            }
            step += 1;
        };
        connect(e);
        hop(e, true);
        answer(e, true);
        hop(e, false);
        establish(e);
        hop(e, true);
        disconnect(e, false);
        hop(e, true);
        disconnect(e, true);
        hop(e, false);
        wait(e, 60_000);
    };
    let mut out = Vec::new();
    let mut e = Enc::default();
    whole(&mut e, None, None);
    out.push(("whole_connection", e.0));
    for (i, name) in ["lost_req", "lost_rep", "lost_rtu", "lost_dreq", "lost_drep"]
        .into_iter()
        .enumerate()
    {
        let mut e = Enc::default();
        whole(&mut e, Some(i), None);
        out.push((name, e.0));
    }
    for (i, name) in ["dup_req", "dup_rep", "dup_rtu", "dup_dreq", "dup_drep"]
        .into_iter()
        .enumerate()
    {
        let mut e = Enc::default();
        whole(&mut e, None, Some(i));
        out.push((name, e.0));
    }
    let mut e = Enc::default();
    connect(&mut e);
    mv(&mut e, 4, true);
    answer(&mut e, false);
    mv(&mut e, 4, false);
    connect(&mut e);
    mv(&mut e, 4, true);
    wait(&mut e, 60_000);
    out.push(("rejected_then_abandoned", e.0));
    out
}
