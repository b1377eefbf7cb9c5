//! End-to-end tests of `softroce decode`: captures are built in a temporary directory with
//! softroce's own frame builder and pcap writer (and a hand-written pcapng), and the binary's
//! text and JSON outputs are checked field by field.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;
use softroce::capture::PcapWriter;
use softroce::wire::frame::EthAddrs;
use softroce::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr,
    FrameBuilder, HeaderSet, IethRepr, ImmDtRepr, LinkType, NakCode, Opcode, PacketRepr, RethRepr,
    XrcEthRepr,
};

const A: &str = "192.0.2.11:49153";
const B: &str = "192.0.2.12:4791";
const B_SRC: &str = "192.0.2.12:49153";
const A_DST: &str = "192.0.2.11:4791";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A fresh temporary directory for one test, removed when the test ends.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "softroce-decode-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn softroce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(args)
        .output()
        .expect("run softroce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

/// Checks a failed run: exit status 1, a `softroce: error:` message containing `needle`, no
/// panic.
fn assert_fails(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{err}",
        stdout(o)
    );
    assert!(err.starts_with("softroce: error: "), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A packet of opcode `op` whose fields are derived from `i`, so that every frame differs.
fn packet_for(op: Opcode, i: u32, payload: &[u8]) -> PacketRepr<'_> {
    let info = op.info().unwrap();
    let on = |h: HeaderSet| info.headers.contains(h);
    let k = u64::from(i);
    PacketRepr {
        bth: BthRepr {
            opcode: op,
            solicited: i % 2 == 0,
            mig_req: i % 4 == 1,
            pkey: 0xFFFF - i as u16,
            dest_qp: 0x11 + i * 7,
            ack_req: i % 3 == 0,
            psn: (0xFF_FFF0 + i * 3) & 0xFF_FFFF,
            ..Default::default()
        },
        ext: ExtHeaders {
            deth: on(HeaderSet::DETH).then_some(DethRepr {
                qkey: 0x8001_0000 + i,
                src_qp: 0x40 + i,
            }),
            xrceth: on(HeaderSet::XRCETH).then_some(XrcEthRepr { srqn: 0x50 + i }),
            feth: on(HeaderSet::FETH).then_some(FethRepr {
                selectivity: 1,
                placement: 2,
            }),
            reth: on(HeaderSet::RETH).then_some(RethRepr {
                va: 0x7f00_0000_1000 + k,
                rkey: 0x1234 + i,
                len: 8192 + i,
            }),
            atomic: on(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
                va: 0x7f00_0000_2000 + k,
                rkey: 0x5678 + i,
                swap_add: 0x1111_2222_3333_4444 + k,
                compare: 0xFFFF_FFFF_FFFF_FFF0 + k % 8,
            }),
            aeth: on(HeaderSet::AETH).then_some(AethRepr::ack(i)),
            atomic_ack: on(HeaderSet::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr {
                orig: 0xDEAD_BEEF_0000_0000 + k,
            }),
            imm: on(HeaderSet::IMMDT).then_some(ImmDtRepr {
                imm: 0xA0B0_C000 + i,
            }),
            ieth: on(HeaderSet::IETH).then_some(IethRepr { rkey: 0x9000 + i }),
        },
        payload: if info.payload { payload } else { &[] },
    }
}

fn builder(src: &str, dst: &str) -> FrameBuilder {
    FrameBuilder::new(src.parse().unwrap(), dst.parse().unwrap()).with_eth(EthAddrs {
        src: [2, 0, 0, 0, 0, 1],
        dst: [2, 0, 0, 0, 0, 2],
    })
}

fn frame(b: &FrameBuilder, p: &PacketRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; b.buffer_len(p)];
    let n = b.emit(p, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn ts(i: usize) -> Duration {
    Duration::new(1_700_000_000 + i as u64, (i as u32 % 1000) * 1000)
}

fn write_pcap(path: &Path, link: LinkType, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(std::io::BufWriter::new(f), link).unwrap();
    for (i, fr) in frames.iter().enumerate() {
        w.write_frame(ts(i), fr).unwrap();
    }
    w.into_inner().unwrap().flush().unwrap();
}

fn pcapng_block(btype: u32, body: &[u8]) -> Vec<u8> {
    let padded = body.len().div_ceil(4) * 4;
    let total = (12 + padded) as u32;
    let mut b = btype.to_le_bytes().to_vec();
    b.extend(total.to_le_bytes());
    b.extend(body);
    b.resize(8 + padded, 0);
    b.extend(total.to_le_bytes());
    b
}

/// A little-endian pcapng file: SHB, one IDB (microsecond timestamps), one EPB per frame, with
/// the same timestamps as [`write_pcap`].
fn write_pcapng(path: &Path, link: LinkType, frames: &[Vec<u8>]) {
    let mut f = Vec::new();
    let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
    shb.extend(1u16.to_le_bytes());
    shb.extend(0u16.to_le_bytes());
    shb.extend((-1i64).to_le_bytes());
    f.extend(pcapng_block(0x0A0D_0D0A, &shb));
    let mut idb = (link.to_pcap() as u16).to_le_bytes().to_vec();
    idb.extend([0, 0]);
    idb.extend(0u32.to_le_bytes());
    f.extend(pcapng_block(1, &idb));
    for (i, fr) in frames.iter().enumerate() {
        let t = ts(i);
        let micros = t.as_secs() * 1_000_000 + u64::from(t.subsec_micros());
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend(((micros >> 32) as u32).to_le_bytes());
        epb.extend((micros as u32).to_le_bytes());
        epb.extend((fr.len() as u32).to_le_bytes());
        epb.extend((fr.len() as u32).to_le_bytes());
        epb.extend(fr);
        f.extend(pcapng_block(6, &epb));
    }
    std::fs::write(path, f).unwrap();
}

/// An ARP request.
fn arp_frame() -> Vec<u8> {
    let mut f = vec![0xFF; 6];
    f.extend([2, 0, 0, 0, 0, 1]);
    f.extend([0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend([2, 0, 0, 0, 0, 1, 192, 0, 2, 11]);
    f.extend([0, 0, 0, 0, 0, 0, 192, 0, 2, 12]);
    f
}

/// A UDP datagram to port 53 (it happens to carry a RoCE-shaped payload).
fn dns_frame() -> Vec<u8> {
    let p = packet_for(Opcode::RC_SEND_ONLY, 0, b"abcd");
    frame(&builder(A, "192.0.2.53:53"), &p)
}

fn payload_for(i: usize) -> Vec<u8> {
    (0..(i * 7) % 50 + 1).map(|b| b as u8).collect()
}

/// Frames: one packet of every known opcode (A -> B), then an ARP frame and a DNS datagram.
fn all_opcode_frames() -> (Vec<Vec<u8>>, Vec<Opcode>) {
    let ops: Vec<Opcode> = Opcode::all_known().collect();
    let mut frames = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let payload = payload_for(i);
        let p = packet_for(*op, i as u32, &payload);
        frames.push(frame(&builder(A, B), &p));
    }
    frames.push(arp_frame());
    frames.push(dns_frame());
    (frames, ops)
}

fn hex6(v: u32) -> String {
    format!("0x{v:06x}")
}

// ---------------------------------------------------------------------------------------------
// Decoding every opcode
// ---------------------------------------------------------------------------------------------

#[test]
fn every_opcode_in_text() {
    let dir = temp_dir("text");
    let path = dir.join("all.pcap");
    let (frames, ops) = all_opcode_frames();
    write_pcap(&path, LinkType::Ethernet, &frames);
    let o = softroce(&["decode", path.to_str().unwrap()]);
    assert_ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), ops.len() + 1, "{out}");
    assert_eq!(ops.len(), 63);
    for (i, op) in ops.iter().enumerate() {
        let payload = payload_for(i);
        let p = packet_for(*op, i as u32, &payload);
        let info = op.info().unwrap();
        let line = lines[i];
        let b = &p.bth;
        let pad = if info.payload {
            (4 - payload.len() % 4) % 4
        } else {
            0
        };
        let head = format!(
            "{} {A} > {B} {} se={} m={} pad={pad} pkey=0x{:04x} dqpn={} ackreq={} psn={}",
            i + 1,
            info.name,
            u8::from(b.solicited),
            u8::from(b.mig_req),
            b.pkey,
            hex6(b.dest_qp),
            u8::from(b.ack_req),
            hex6(b.psn),
        );
        assert!(line.starts_with(&head), "\n{line}\n{head}");
        let plen = if info.payload { payload.len() } else { 0 };
        assert!(
            line.ends_with(&format!(" payload={plen} icrc=ok")),
            "{line}"
        );
        let e = &p.ext;
        let mut want = Vec::new();
        if let Some(d) = e.deth {
            want.push(format!(
                "DETH(qkey=0x{:08x} srcqp={})",
                d.qkey,
                hex6(d.src_qp)
            ));
        }
        if let Some(x) = e.xrceth {
            want.push(format!("XRCETH(srqn={})", hex6(x.srqn)));
        }
        if e.feth.is_some() {
            want.push("FETH(sel=1 plt=2)".to_string());
        }
        if let Some(r) = e.reth {
            want.push(format!(
                "RETH(va=0x{:x} rkey=0x{:08x} len={})",
                r.va, r.rkey, r.len
            ));
        }
        if let Some(a) = e.atomic {
            want.push(format!(
                "AtomicETH(va=0x{:x} rkey=0x{:08x} swap_add=0x{:x} compare=0x{:x})",
                a.va, a.rkey, a.swap_add, a.compare
            ));
        }
        if let Some(a) = e.aeth {
            want.push(format!(
                "AETH(ACK credit={} msn={})",
                a.syndrome & 0x1F,
                a.msn
            ));
        }
        if let Some(a) = e.atomic_ack {
            want.push(format!("AtomicAckETH(orig=0x{:x})", a.orig));
        }
        if let Some(m) = e.imm {
            want.push(format!("ImmDt(0x{:08x})", m.imm));
        }
        if let Some(r) = e.ieth {
            want.push(format!("IETH(rkey=0x{:08x})", r.rkey));
        }
        let hdrs = format!("{head} {}", want.join(" "));
        let hdrs = hdrs.trim_end();
        assert!(line.starts_with(hdrs), "\n{line}\n{hdrs}");
    }
    assert_eq!(
        lines[ops.len()],
        "65 frames, 63 RoCEv2 packets (0 bad ICRC, 0 malformed), 2 other frames skipped"
    );
}

fn check_packet_json(v: &Value, frame_no: u64, p: &PacketRepr<'_>) {
    let b = &p.bth;
    assert_eq!(v["frame"], frame_no);
    assert_eq!(v["src"], A);
    assert_eq!(v["dst"], B);
    assert_eq!(v["opcode"], b.opcode.0);
    assert_eq!(v["opcode_name"], b.opcode.name().unwrap());
    assert_eq!(v["dqpn"], b.dest_qp);
    assert_eq!(v["psn"], b.psn);
    assert_eq!(v["ack_req"], b.ack_req);
    assert_eq!(v["se"], b.solicited);
    assert_eq!(v["mig"], b.mig_req);
    assert_eq!(v["pkey"], b.pkey);
    assert_eq!(v["fecn"], false);
    assert_eq!(v["becn"], false);
    let pad = (4 - p.payload.len() % 4) % 4;
    assert_eq!(v["pad"], pad);
    assert_eq!(v["icrc_ok"], true);
    assert_eq!(v["payload_len"], p.payload.len());
    assert!(v.get("error").is_none());
    let e = &p.ext;
    let present = |k: &str| v.get(k).is_some();
    assert_eq!(present("reth"), e.reth.is_some());
    assert_eq!(present("aeth"), e.aeth.is_some());
    assert_eq!(present("atomic"), e.atomic.is_some());
    assert_eq!(present("atomic_ack"), e.atomic_ack.is_some());
    assert_eq!(present("imm"), e.imm.is_some());
    assert_eq!(present("ieth"), e.ieth.is_some());
    assert_eq!(present("deth"), e.deth.is_some());
    assert_eq!(present("feth"), e.feth.is_some());
    if let Some(r) = e.reth {
        assert_eq!(v["reth"]["va"], r.va);
        assert_eq!(v["reth"]["rkey"], r.rkey);
        assert_eq!(v["reth"]["len"], r.len);
    }
    if let Some(a) = e.aeth {
        assert_eq!(v["aeth"]["syndrome"], a.syndrome);
        assert_eq!(v["aeth"]["msn"], a.msn);
    }
    if let Some(a) = e.atomic {
        assert_eq!(v["atomic"]["va"], a.va);
        assert_eq!(v["atomic"]["rkey"], a.rkey);
        assert_eq!(v["atomic"]["swap_add"], a.swap_add);
        assert_eq!(v["atomic"]["compare"], a.compare);
    }
    if let Some(a) = e.atomic_ack {
        assert_eq!(v["atomic_ack"]["orig"], a.orig);
    }
    if let Some(m) = e.imm {
        assert_eq!(v["imm"], m.imm);
    }
    if let Some(r) = e.ieth {
        assert_eq!(v["ieth"], r.rkey);
    }
    if let Some(d) = e.deth {
        assert_eq!(v["deth"]["qkey"], d.qkey);
        assert_eq!(v["deth"]["src_qp"], d.src_qp);
    }
    if let Some(f) = e.feth {
        assert_eq!(v["feth"]["selectivity"], f.selectivity);
        assert_eq!(v["feth"]["placement"], f.placement);
    }
}

#[test]
fn every_opcode_in_json() {
    let dir = temp_dir("json");
    let path = dir.join("all.pcap");
    let (frames, ops) = all_opcode_frames();
    write_pcap(&path, LinkType::Ethernet, &frames);
    let o = softroce(&["decode", "--json", path.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    assert_eq!(
        objs.len(),
        ops.len(),
        "only packet objects without --analyze"
    );
    for (i, op) in ops.iter().enumerate() {
        let payload = payload_for(i);
        let p = packet_for(*op, i as u32, &payload);
        let p = PacketRepr {
            payload: if op.info().unwrap().payload {
                &payload
            } else {
                &[]
            },
            ..p
        };
        check_packet_json(&objs[i], i as u64 + 1, &p);
        let t = objs[i]["ts"].as_f64().unwrap();
        assert!((t - ts(i).as_secs_f64()).abs() < 1e-5, "{t}");
    }
}

#[test]
fn pcapng_decodes_like_pcap() {
    let dir = temp_dir("pcapng");
    let (frames, _) = all_opcode_frames();
    let pcap = dir.join("all.pcap");
    let ng = dir.join("all.pcapng");
    write_pcap(&pcap, LinkType::Ethernet, &frames);
    write_pcapng(&ng, LinkType::Ethernet, &frames);
    for flags in [
        &[][..],
        &["--json"][..],
        &["--analyze"][..],
        &["--json", "--analyze"][..],
    ] {
        let run = |p: &Path| {
            let mut args = vec!["decode"];
            args.extend_from_slice(flags);
            args.push(p.to_str().unwrap());
            let o = softroce(&args);
            assert_ok(&o);
            stdout(&o)
        };
        let a = run(&pcap);
        assert!(a.lines().count() >= 40);
        assert_eq!(a, run(&ng), "flags {flags:?}");
    }
}

#[test]
fn raw_ip_and_ipv6_captures() {
    let dir = temp_dir("rawip");
    let p = packet_for(Opcode::RC_RDMA_WRITE_ONLY, 3, b"hello");
    let v4 = FrameBuilder::new(A.parse().unwrap(), B.parse().unwrap());
    let v6 = FrameBuilder::new(
        "[2001:db8::1]:50000".parse().unwrap(),
        "[2001:db8::2]:4791".parse().unwrap(),
    );
    let path = dir.join("raw.pcap");
    write_pcap(&path, LinkType::RawIp, &[frame(&v4, &p), frame(&v6, &p)]);
    let o = softroce(&["decode", path.to_str().unwrap()]);
    assert_ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(&format!("1 {A} > {B} RC_RDMA_WRITE_ONLY ")),
        "{out}"
    );
    assert!(
        lines[1].starts_with("2 [2001:db8::1]:50000 > [2001:db8::2]:4791 RC_RDMA_WRITE_ONLY "),
        "{out}"
    );
    assert!(lines[1].ends_with("payload=5 icrc=ok"), "{out}");
    assert_eq!(
        lines[2],
        "2 frames, 2 RoCEv2 packets (0 bad ICRC, 0 malformed), 0 other frames skipped"
    );
}

#[test]
fn standard_input_and_other_ports() {
    let dir = temp_dir("stdin");
    let p = packet_for(Opcode::RC_SEND_ONLY, 0, b"abcd");
    let frames = vec![frame(&builder(A, "192.0.2.12:4792"), &p)];
    let path = dir.join("port.pcap");
    write_pcap(&path, LinkType::Ethernet, &frames);
    let o = softroce(&["decode", path.to_str().unwrap()]);
    assert_ok(&o);
    assert_eq!(
        stdout(&o),
        "1 frames, 0 RoCEv2 packets (0 bad ICRC, 0 malformed), 1 other frames skipped\n"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(["decode", "--port", "4792", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&path).unwrap())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_ok(&o);
    assert!(
        stdout(&o).starts_with(&format!("1 {A} > 192.0.2.12:4792 RC_SEND_ONLY ")),
        "{}",
        stdout(&o)
    );
}

// ---------------------------------------------------------------------------------------------
// Bad packets
// ---------------------------------------------------------------------------------------------

#[test]
fn corrupted_icrc_is_reported_and_counted() {
    let dir = temp_dir("icrc");
    let payload = [7u8; 64];
    let mut frames = Vec::new();
    for i in 0..3u32 {
        let mut p = packet_for(Opcode::RC_SEND_ONLY, 0, &payload);
        p.bth.psn = 100 + i;
        p.bth.dest_qp = 0x11;
        frames.push(frame(&builder(A, B), &p));
    }
    let n = frames[1].len();
    frames[1][n - 10] ^= 0x40; // a payload byte
    let path = dir.join("icrc.pcap");
    write_pcap(&path, LinkType::Ethernet, &frames);

    let o = softroce(&["decode", path.to_str().unwrap()]);
    assert_ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("icrc=ok"));
    assert!(lines[1].contains(" payload=64 icrc=bad (found 0x"), "{out}");
    assert!(lines[2].ends_with("icrc=ok"));
    assert_eq!(
        lines.last().unwrap(),
        &"3 frames, 3 RoCEv2 packets (1 bad ICRC, 0 malformed), 0 other frames skipped"
    );

    let o = softroce(&["decode", "--json", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    assert_eq!(objs.len(), 3 + 1 + 1);
    assert_eq!(objs[1]["icrc_ok"], false);
    assert_eq!(objs[0]["icrc_ok"], true);
    let conn = &objs[3];
    assert_eq!(conn["connection"]["dqpn"], 0x11);
    // The bad packet belongs to no connection: it is not among the connection's packets and
    // takes no part in the PSN accounting (100 and 102 leave a gap of one).
    assert!(conn.get("bad_icrc").is_none(), "{conn}");
    assert_eq!(conn["packets"], 2);
    assert_eq!(conn["requests"]["packets"], 2);
    assert_eq!(conn["requests"]["gaps"]["count"], 1);
    assert_eq!(conn["requests"]["gaps"]["missing"], 1);
    assert_eq!(objs[4]["summary"]["bad_icrc"], 1);
    assert_eq!(
        objs[4]["summary"]["bad_icrc_frames"],
        serde_json::json!([2])
    );
    assert_eq!(objs[4]["summary"]["roce_packets"], 3);

    let o = softroce(&["decode", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    assert!(
        stdout(&o).contains("bad ICRC: 1 packets, in no connection")
            && stdout(&o).contains(": frames 2\n"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_bit_flipped_in_the_destination_qpn_makes_no_connection() {
    // perf --corrupt flips bits anywhere: a flipped QPN bit once made a "connection" of one
    // packet per corrupted QPN (22 connections in a capture with two).
    let dir = temp_dir("qpnflip");
    let payload = [7u8; 64];
    let mut frames = Vec::new();
    for i in 0..6u32 {
        let mut p = packet_for(Opcode::RC_SEND_ONLY, 0, &payload);
        p.bth.psn = 100 + i;
        p.bth.dest_qp = 0x11;
        frames.push(frame(&builder(A, B), &p));
    }
    // The BTH's destination QP is bytes 5..8 of the UDP payload; the UDP payload ends the
    // frame, ICRC included. Flip a different QPN bit in three packets.
    for (i, bit) in [(1usize, 0x10u8), (3, 0x01), (4, 0x80)] {
        let n = frames[i].len();
        let bth_at = n - 4 - payload.len() - 12;
        frames[i][bth_at + 5] ^= bit;
    }
    let path = dir.join("qpnflip.pcap");
    write_pcap(&path, LinkType::Ethernet, &frames);
    let o = softroce(&["decode", "--json", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    let conns: Vec<&serde_json::Value> = objs
        .iter()
        .filter(|v| v.get("connection").is_some())
        .collect();
    assert_eq!(conns.len(), 1, "{objs:?}");
    assert_eq!(conns[0]["connection"]["dqpn"], 0x11);
    assert_eq!(conns[0]["packets"], 3);
    let summary = &objs.last().unwrap()["summary"];
    assert_eq!(summary["bad_icrc"], 3, "{summary}");
    assert_eq!(summary["bad_icrc_frames"], serde_json::json!([2, 4, 5]));
    let o = softroce(&["decode", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    assert!(
        stdout(&o).contains("analysis: 1 connections"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn malformed_unknown_and_snapped_packets() {
    let dir = temp_dir("malformed");
    // A datagram to 4791 too short for a BTH.
    let mut short = frame(
        &builder(A, B),
        &packet_for(Opcode::RC_SEND_ONLY, 0, b"abcd"),
    );
    // Keep Ethernet + IPv4 + UDP + 8 bytes, and fix the IP and UDP lengths.
    short.truncate(14 + 20 + 8 + 8);
    short[16..18].copy_from_slice(&36u16.to_be_bytes());
    short[38..40].copy_from_slice(&16u16.to_be_bytes());
    // An unknown opcode: a good RC SEND ONLY, opcode byte changed, ICRC recomputed.
    let good = packet_for(Opcode::RC_SEND_ONLY, 0, b"abcdefgh");
    let mut roce = vec![0u8; good.buffer_len()];
    good.emit(&mut roce).unwrap();
    roce[0] = 0x1F;
    let b = builder(A, B);
    let mut unknown = vec![0u8; 14 + 20 + 8 + roce.len()];
    let n = b.emit_udp_payload(&roce, &mut unknown).unwrap();
    unknown.truncate(n);
    // A good packet whose capture was cut short by the snap length.
    let full = frame(&b, &packet_for(Opcode::RC_SEND_ONLY, 1, &[5u8; 200]));

    let path = dir.join("bad.pcap");
    // Classic pcap written by hand so that the snapped record can have orig_len > caplen.
    let mut f = Vec::new();
    f.extend(0xA1B2_C3D4u32.to_le_bytes());
    f.extend(2u16.to_le_bytes());
    f.extend(4u16.to_le_bytes());
    f.extend([0; 8]);
    f.extend(96u32.to_le_bytes());
    f.extend(1u32.to_le_bytes());
    for (data, orig) in [
        (&short[..], short.len()),
        (&unknown[..], unknown.len()),
        (&full[..96], full.len()),
    ] {
        f.extend(1u32.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        f.extend((data.len() as u32).to_le_bytes());
        f.extend((orig as u32).to_le_bytes());
        f.extend(data);
    }
    std::fs::write(&path, f).unwrap();

    let o = softroce(&["decode", path.to_str().unwrap()]);
    assert_ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(&format!("1 {A} > {B} MALFORMED: truncated")),
        "{out}"
    );
    assert!(
        lines[1].starts_with(&format!("2 {A} > {B} UNKNOWN_0x1f se=1 ")),
        "{out}"
    );
    assert!(lines[1].ends_with("payload=8 icrc=ok"), "{out}");
    assert!(
        lines[2].starts_with(&format!("3 {A} > {B} MALFORMED: frame cut short by the")),
        "{out}"
    );
    assert!(lines[2].contains("(96 of 258 bytes captured)"), "{out}");
    assert_eq!(
        lines[3],
        "3 frames, 3 RoCEv2 packets (0 bad ICRC, 3 malformed), 0 other frames skipped \
         (1 RoCEv2 frames cut short by the snap length)"
    );

    let o = softroce(&["decode", "--json", path.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    assert_eq!(objs.len(), 3);
    for (i, v) in objs.iter().enumerate() {
        assert_eq!(v["frame"], i + 1);
        assert!(v["error"].is_string(), "{v}");
        assert!(v.get("opcode").is_none());
    }
    assert_eq!(objs[1]["error"], "unknown opcode 0x1f");
    assert_eq!(objs[1]["bth"]["opcode"], 0x1F);
    assert_eq!(objs[1]["bth"]["opcode_name"], "UNKNOWN_0x1f");
    assert_eq!(objs[1]["icrc_ok"], true);
}

#[test]
fn unsupported_link_types_are_skipped() {
    let dir = temp_dir("linktype");
    let path = dir.join("usb.pcap");
    let p = packet_for(Opcode::RC_SEND_ONLY, 0, b"abcd");
    write_pcap(&path, LinkType::Ethernet, &[frame(&builder(A, B), &p)]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20..24].copy_from_slice(&189u32.to_le_bytes()); // LINKTYPE_USB_LINUX
    std::fs::write(&path, bytes).unwrap();
    let o = softroce(&["decode", path.to_str().unwrap()]);
    assert_ok(&o);
    assert_eq!(
        stdout(&o),
        "1 frames, 0 RoCEv2 packets (0 bad ICRC, 0 malformed), 1 other frames skipped \
         (1 with an unsupported link type)\n"
    );
}

// ---------------------------------------------------------------------------------------------
// Analysis
// ---------------------------------------------------------------------------------------------

fn send(psn: u32, dqpn: u32) -> Vec<u8> {
    let mut p = packet_for(Opcode::RC_SEND_ONLY, 0, b"data");
    p.bth.psn = psn;
    p.bth.dest_qp = dqpn;
    frame(&builder(A, B), &p)
}

fn ack(aeth: AethRepr, psn: u32, dqpn: u32) -> Vec<u8> {
    let mut p = packet_for(Opcode::RC_ACK, 0, &[]);
    p.bth.psn = psn;
    p.bth.dest_qp = dqpn;
    p.ext.aeth = Some(aeth);
    frame(&builder(B_SRC, A_DST), &p)
}

fn conn<'a>(objs: &'a [Value], src: &str, dqpn: u32) -> &'a Value {
    objs.iter()
        .find(|v| v["connection"]["src"] == src && v["connection"]["dqpn"] == dqpn)
        .unwrap_or_else(|| panic!("no connection {src} {dqpn}"))
}

#[test]
fn retransmission_gap_nak_and_rnr_nak() {
    let dir = temp_dir("analyze");
    let frames = vec![
        send(100, 0x11),
        ack(AethRepr::ack(1), 100, 0x22),
        send(101, 0x11),
        send(102, 0x11),
        send(104, 0x11), // gap: 103 lost
        ack(AethRepr::nak(NakCode::PsnSequenceError, 3), 103, 0x22),
        send(103, 0x11), // go-back-N: retransmission of 103 and 104
        send(104, 0x11),
        ack(AethRepr::rnr_nak(12, 4), 104, 0x22),
        send(104, 0x11), // after the RNR NAK
        ack(AethRepr::nak(NakCode::RemoteAccessError, 5), 104, 0x22),
        arp_frame(),
        dns_frame(),
    ];
    let path = dir.join("analyze.pcap");
    write_pcap(&path, LinkType::Ethernet, &frames);

    let o = softroce(&["decode", "--json", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    let packets: Vec<&Value> = objs.iter().filter(|v| v.get("frame").is_some()).collect();
    assert_eq!(packets.len(), 11);
    let conns: Vec<Value> = objs
        .iter()
        .filter(|v| v.get("connection").is_some())
        .cloned()
        .collect();
    assert_eq!(conns.len(), 2);
    let req = conn(&conns, "192.0.2.11", 0x11);
    assert_eq!(req["packets"], 7);
    assert_eq!(req["opcodes"]["RC_SEND_ONLY"]["packets"], 7);
    assert_eq!(req["opcodes"]["RC_SEND_ONLY"]["bytes"], 28);
    let r = &req["requests"];
    assert_eq!(r["packets"], 7);
    assert_eq!(r["first_psn"], 100);
    assert_eq!(r["highest_psn"], 104);
    assert_eq!(r["retransmitted"]["count"], 3);
    assert_eq!(
        r["retransmitted"]["psns"],
        serde_json::json!([103, 104, 104])
    );
    assert_eq!(r["gaps"]["count"], 1);
    assert_eq!(r["gaps"]["missing"], 1);
    assert_eq!(
        r["gaps"]["examples"],
        serde_json::json!([{"expected": 103, "got": 104}])
    );
    let rsp = conn(&conns, "192.0.2.12", 0x22);
    let q = &rsp["responses"];
    assert_eq!(q["packets"], 4);
    assert_eq!(q["acks"], 1);
    assert_eq!(q["naks"]["PSN-sequence-error"]["count"], 1);
    assert_eq!(q["naks"]["PSN-sequence-error"]["code"], 0);
    assert_eq!(
        q["naks"]["PSN-sequence-error"]["psns"],
        serde_json::json!([103])
    );
    assert_eq!(q["naks"]["remote-access-error"]["count"], 1);
    assert_eq!(q["rnr_naks"][0]["timer"], 12);
    assert_eq!(q["rnr_naks"][0]["count"], 1);
    assert_eq!(q["rnr_naks"][0]["delay_ns"], 640_000);
    assert_eq!(q["rnr_naks"][0]["psns"], serde_json::json!([104]));
    // Response PSNs are not checked for gaps.
    assert_eq!(rsp["requests"]["packets"], 0);
    let summary = objs.last().unwrap();
    assert_eq!(summary["summary"]["frames"], 13);
    assert_eq!(summary["summary"]["roce_packets"], 11);
    assert_eq!(summary["summary"]["other"], 2);

    let o = softroce(&["decode", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.contains("analysis: 2 connections"), "{out}");
    assert!(
        out.contains("connection 192.0.2.11 > 192.0.2.12 dqpn=0x000011 (udp src port 49153)"),
        "{out}"
    );
    assert!(
        out.contains(
            "requests 7: PSN 0x000064..0x000068, retransmitted 3 (0x000067 0x000068 0x000068), \
             gaps 1 (1 PSNs missing: 0x000067->0x000068)"
        ),
        "{out}"
    );
    assert!(
        out.contains("NAK PSN-sequence-error: 1 (PSN 0x000067)"),
        "{out}"
    );
    assert!(
        out.contains("NAK remote-access-error: 1 (PSN 0x000068)"),
        "{out}"
    );
    assert!(
        out.contains("RNR NAK timer=12 (0.64 ms): 1 (PSN 0x000068)"),
        "{out}"
    );
    assert!(out
        .lines()
        .any(|l| l.contains("AETH(NAK PSN-sequence-error msn=3)")));
    assert!(out
        .lines()
        .any(|l| l.contains("AETH(RNR-NAK timer=12 (0.64 ms) msn=4)")));
    assert!(out.ends_with(
        "13 frames, 11 RoCEv2 packets (0 bad ICRC, 0 malformed), 2 other frames skipped\n"
    ));
}

fn read_request(src: &str, dst: &str, psn: u32, len: u32) -> Vec<u8> {
    let mut p = packet_for(Opcode::RC_RDMA_READ_REQUEST, 0, &[]);
    p.bth.psn = psn;
    p.bth.dest_qp = 0x11;
    p.ext.reth = Some(RethRepr {
        va: 0x1000,
        rkey: 0x42,
        len,
    });
    frame(&builder(src, dst), &p)
}

fn read_response(src: &str, dst: &str, op: Opcode, psn: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = packet_for(op, 0, payload);
    p.bth.psn = psn;
    p.bth.dest_qp = 0x22;
    frame(&builder(src, dst), &p)
}

#[test]
fn read_requests_use_the_inferred_path_mtu() {
    use Opcode as O;
    let dir = temp_dir("read");
    let mtu = [0xAAu8; 1024];
    let frames = vec![
        // READ of 3000 bytes at PSN 10: three responses of a 1024-byte path MTU (10, 11, 12).
        read_request(A, B, 10, 3000),
        read_response(B_SRC, A_DST, O::RC_RDMA_READ_RESPONSE_FIRST, 10, &mtu),
        read_response(B_SRC, A_DST, O::RC_RDMA_READ_RESPONSE_MIDDLE, 11, &mtu),
        read_response(B_SRC, A_DST, O::RC_RDMA_READ_RESPONSE_LAST, 12, &[1; 952]),
        // The next request follows at 13: no gap.
        send(13, 0x11),
        // A READ of 4096 bytes at 14 (PSNs 14..17); its responses lose PSN 16.
        read_request(A, B, 14, 4096),
        read_response(B_SRC, A_DST, O::RC_RDMA_READ_RESPONSE_FIRST, 14, &mtu),
        read_response(B_SRC, A_DST, O::RC_RDMA_READ_RESPONSE_MIDDLE, 15, &mtu),
        read_response(B_SRC, A_DST, O::RC_RDMA_READ_RESPONSE_LAST, 17, &mtu),
        // Then a SEND at 20: a gap of two (18, 19).
        send(20, 0x11),
    ];
    // Between two other hosts, whose path MTU is never seen: no gap after the READ.
    let c = "198.51.100.1:5000";
    let d = "198.51.100.2:4791";
    let mut unknown = vec![read_request(c, d, 50, 1 << 20)];
    let mut p = packet_for(O::RC_SEND_ONLY, 0, b"data");
    p.bth.psn = 60;
    p.bth.dest_qp = 0x11;
    unknown.push(frame(&builder(c, d), &p));
    let mut all = frames;
    all.extend(unknown);
    let path = dir.join("read.pcap");
    write_pcap(&path, LinkType::Ethernet, &all);
    let o = softroce(&["decode", "--json", "--analyze", path.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    let conns: Vec<Value> = objs
        .iter()
        .filter(|v| v.get("connection").is_some())
        .cloned()
        .collect();
    let req = conn(&conns, "192.0.2.11", 0x11);
    assert_eq!(req["path_mtu"], 1024);
    assert_eq!(req["requests"]["gaps"]["count"], 1, "{req}");
    assert_eq!(
        req["requests"]["gaps"]["examples"],
        serde_json::json!([{"expected": 18, "got": 20}])
    );
    assert_eq!(req["requests"]["retransmitted"]["count"], 0);
    let rsp = conn(&conns, "192.0.2.12", 0x22);
    assert_eq!(rsp["responses"]["read_responses"], 6);
    assert_eq!(rsp["responses"]["read_gaps"]["count"], 1);
    assert_eq!(rsp["responses"]["read_gaps"]["missing"], 1);
    assert_eq!(
        rsp["responses"]["read_gaps"]["examples"],
        serde_json::json!([{"expected": 16, "got": 17}])
    );
    assert_eq!(rsp["path_mtu"], 1024);
    let other = conn(&conns, "198.51.100.1", 0x11);
    assert_eq!(other["path_mtu"], Value::Null);
    assert_eq!(other["requests"]["gaps"]["count"], 0);
    assert_eq!(other["requests"]["packets"], 2);
}

// ---------------------------------------------------------------------------------------------
// Broken files
// ---------------------------------------------------------------------------------------------

#[test]
fn broken_files_fail_cleanly() {
    let dir = temp_dir("broken");
    let (frames, _) = all_opcode_frames();
    let good = dir.join("good.pcap");
    write_pcap(&good, LinkType::Ethernet, &frames);
    let bytes = std::fs::read(&good).unwrap();

    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let o = softroce(&["decode", empty.to_str().unwrap()]);
    assert_fails(&o, "empty");

    let random = dir.join("random.pcap");
    let mut x: u32 = 0x1234_5678;
    let junk: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    std::fs::write(&random, &junk).unwrap();
    let o = softroce(&["decode", random.to_str().unwrap()]);
    assert_fails(&o, "not a pcap or pcapng capture");
    assert!(stdout(&o).is_empty());

    let header = dir.join("header.pcap");
    std::fs::write(&header, &bytes[..10]).unwrap();
    let o = softroce(&["decode", header.to_str().unwrap()]);
    assert_fails(&o, "truncated in the file header");

    // Cut in the middle of the third record: two packets are printed first.
    let rec1 = 16 + frames[0].len();
    let rec2 = 16 + frames[1].len();
    let cut = 24 + rec1 + rec2 + 16 + 5;
    let middle = dir.join("middle.pcap");
    std::fs::write(&middle, &bytes[..cut]).unwrap();
    let o = softroce(&["decode", middle.to_str().unwrap()]);
    assert_fails(&o, "truncated in a record");
    assert!(stderr(&o).contains("after frame 2"), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("1 "), "{out}");
    assert!(out.lines().nth(1).unwrap().starts_with("2 "), "{out}");
    assert!(out.ends_with(
        "2 frames, 2 RoCEv2 packets (0 bad ICRC, 0 malformed), 0 other frames skipped\n"
    ));
    // Cut in a record header, in JSON mode.
    let header2 = dir.join("middle2.pcap");
    std::fs::write(&header2, &bytes[..24 + rec1 + 3]).unwrap();
    let o = softroce(&["decode", "--json", header2.to_str().unwrap()]);
    assert_fails(&o, "truncated in a record header");
    assert_eq!(json_lines(&o).len(), 1);

    // Every prefix fails or succeeds cleanly, and never panics.
    for n in (0..bytes.len()).step_by(97) {
        let p = dir.join("prefix.pcap");
        std::fs::write(&p, &bytes[..n]).unwrap();
        let o = softroce(&["decode", "--analyze", p.to_str().unwrap()]);
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        assert!(o.status.code() == Some(0) || o.status.code() == Some(1));
    }

    let o = softroce(&["decode", dir.join("missing.pcap").to_str().unwrap()]);
    assert_fails(&o, "cannot open");
    assert!(stderr(&o).contains("missing.pcap"));

    let o = softroce(&["decode", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!stderr(&o).contains("panicked"));

    let o = softroce(&["decode", "--bogus", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let o = softroce(&["decode", "--port", "70000", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let o = softroce(&["decode"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn garbage_frames_never_panic() {
    // Records full of random bytes (some with a UDP/4791-looking prefix) decode without panic.
    let dir = temp_dir("garbage");
    let template = send(1, 0x11);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut frames = Vec::new();
    for i in 0..400 {
        let mut f = template.clone();
        let n = (rnd() as usize) % f.len();
        f.truncate(n.max(1));
        for _ in 0..(i % 5) {
            let at = (rnd() as usize) % f.len();
            f[at] = rnd() as u8;
        }
        frames.push(f);
    }
    let path = dir.join("garbage.pcap");
    write_pcap(&path, LinkType::Ethernet, &frames);
    for flags in [&["--analyze"][..], &["--json", "--analyze"][..]] {
        let mut args = vec!["decode"];
        args.extend_from_slice(flags);
        args.push(path.to_str().unwrap());
        let o = softroce(&args);
        assert_ok(&o);
    }
}

#[test]
fn closed_pipe_is_not_an_error() {
    let dir = temp_dir("pipe");
    let frames: Vec<Vec<u8>> = (0..20_000).map(|i| send(i, 0x11)).collect();
    let path = dir.join("big.pcap");
    write_pcap(&path, LinkType::Ethernet, &frames);
    let mut child = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .args(["decode", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("1 "));
    drop(out);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------------
// Real captures (Linux rxe, ibv_rc_pingpong) against tshark's dissection
// ---------------------------------------------------------------------------------------------

/// Compares the JSON output with the tab-separated tshark fields stored next to the capture.
fn check_against_tshark(capture: &str, tsv: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rxe");
    let (cap, txt) = (root.join(capture), root.join(tsv));
    assert!(
        cap.exists() && txt.exists(),
        "fixture {} missing",
        cap.display()
    );
    let o = softroce(&["decode", "--json", cap.to_str().unwrap()]);
    assert_ok(&o);
    let objs = json_lines(&o);
    let table = std::fs::read_to_string(&txt).unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), objs.len());
    let num = |s: &str| -> u64 {
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => s.parse().unwrap(),
        }
    };
    for (row, v) in rows.iter().zip(&objs) {
        assert_eq!(v["frame"], num(row[col("frame.number")]));
        assert_eq!(v["opcode"], num(row[col("infiniband.bth.opcode")]));
        assert_eq!(v["dqpn"], num(row[col("infiniband.bth.destqp")]));
        assert_eq!(v["psn"], num(row[col("infiniband.bth.psn")]));
        assert_eq!(v["ack_req"], row[col("infiniband.bth.a")] == "1");
        assert_eq!(v["se"], row[col("infiniband.bth.se")] == "1");
        assert_eq!(v["pad"], num(row[col("infiniband.bth.padcnt")]));
        assert_eq!(v["pkey"], num(row[col("infiniband.bth.p_key")]));
        assert_eq!(v["icrc_ok"], true);
        let syn = row[col("infiniband.aeth.syndrome")];
        if !syn.is_empty() {
            assert_eq!(v["aeth"]["syndrome"], num(syn));
            assert_eq!(v["aeth"]["msn"], num(row[col("infiniband.aeth.msn")]));
        }
        let opt = |name: &str| {
            header
                .iter()
                .position(|h| *h == name)
                .map(|i| row[i])
                .filter(|s| !s.is_empty())
        };
        // Extended headers where tshark has them (the first value when it lists several).
        let first = |s: &str| num(s.split(',').next().unwrap());
        if let Some(va) = opt("infiniband.reth.va") {
            // Wireshark files the AtomicETH's VA and R_Key under the RETH field names.
            let key = if v["reth"].is_null() {
                "atomic"
            } else {
                "reth"
            };
            assert_eq!(v[key]["va"], first(va), "frame {}", v["frame"]);
            assert_eq!(v[key]["rkey"], first(opt("infiniband.reth.r_key").unwrap()));
            if let Some(len) = opt("infiniband.reth.dmalen") {
                assert_eq!(v["reth"]["len"], first(len));
            }
        }
        if let Some(q) = opt("infiniband.deth.q_key") {
            assert_eq!(v["deth"]["qkey"], first(q));
            assert_eq!(
                v["deth"]["src_qp"],
                first(opt("infiniband.deth.srcqp").unwrap())
            );
        }
        if let Some(sw) = opt("infiniband.atomiceth.swapdt") {
            assert_eq!(v["atomic"]["swap_add"], first(sw));
            assert_eq!(
                v["atomic"]["compare"],
                first(opt("infiniband.atomiceth.cmpdt").unwrap())
            );
        }
        if let Some(o) = opt("infiniband.atomicacketh.origremdt") {
            assert_eq!(v["atomic_ack"]["orig"], first(o));
        }
        // tshark shows the ICRC as a big-endian number; it travels little-endian.
        let icrc = num(row[col("infiniband.invariant.crc")]) as u32;
        assert_eq!(v["icrc"], icrc.swap_bytes());
    }
}

#[test]
fn rxe_captures_agree_with_tshark() {
    // Every capture of real kernel rxe traffic in tests/data/rxe (README.md there says how
    // each was made) against the tshark table made from it: same fields, every ICRC valid.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rxe");
    let mut checked = 0;
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .expect("tests/data/rxe")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap") || n.ends_with(".pcapng"))
        .collect();
    names.sort();
    for cap in names {
        let stem = cap.rsplit_once('.').unwrap().0;
        let txt = format!("{stem}.txt");
        if root.join(&txt).exists() {
            check_against_tshark(&cap, &txt);
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} rxe captures compared");
}

#[test]
fn softroce_captures_of_kernel_rxe_interop_verify() {
    // softroce's own captures of ibv_rc_pingpong runs against a kernel rxe peer (both roles):
    // every packet, sent or received, decodes as RoCEv2 with a valid ICRC.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/interop");
    for (name, frames) in [
        ("rxe_client_softroce_server.pcap", 100),
        ("softroce_client_rxe_server.pcap", 800),
    ] {
        let o = softroce(&["decode", "--json", root.join(name).to_str().unwrap()]);
        assert_ok(&o);
        let objs = json_lines(&o);
        assert_eq!(objs.len(), frames, "{name}");
        assert!(
            objs.iter().all(|v| v["icrc_ok"] == true),
            "{name}: a bad ICRC"
        );
        assert!(objs
            .iter()
            .any(|v| v["src"].as_str().unwrap().starts_with("192.0.2.11")));
        assert!(objs
            .iter()
            .any(|v| v["src"].as_str().unwrap().starts_with("192.0.2.1:")));
    }
}

/// Kernel rxe's rdma_cm handshake in tests/data/rxe/rping.pcap: every MAD to QP1 is named with
/// its CM message and fields, in text and JSON.
#[test]
fn rping_capture_names_every_cm_message() {
    let cap = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/rxe/rping.pcap");
    let o = softroce(&["decode", "--json", cap]);
    assert_ok(&o);
    let mads: Vec<Value> = json_lines(&o)
        .into_iter()
        .filter_map(|v| v.get("mad").cloned())
        .collect();
    let names: Vec<&str> = mads.iter().map(|m| m["cm"].as_str().unwrap()).collect();
    assert_eq!(names, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    let req = &mads[0]["fields"];
    assert_eq!(req["service_id"], 0x0106_1c06u64);
    assert_eq!(req["local_qpn"], 0x1e);
    assert_eq!(req["starting_psn"], 0x9c0b72);
    assert_eq!(req["path_mtu"], 1024);
    assert_eq!(req["primary_path"]["remote_gid"], "::ffff:192.0.2.12");
    assert_eq!(req["rdma_cm"]["src"], "192.0.2.11");
    assert_eq!(req["rdma_cm"]["src_port"], 45615);
    assert_eq!(mads[1]["fields"]["remote_comm_id"], req["local_comm_id"]);
    assert_eq!(mads[3]["fields"]["remote_qpn"], 0x1e);

    let text = stdout(&softroce(&["decode", cap]));
    assert!(
        text.contains(
            "MAD(CM REQ tid=0x28edc46a2 lcid=0xa246dc8e sid=0x1061c06 (port 7174) RC qpn=0x00001e"
        ),
        "{text}"
    );
    assert!(text.contains("MAD(CM DREP tid=0x28edc46a2 lcid=0xe0de89de rcid=0xa246dc8e)"));
}
