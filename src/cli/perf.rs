//! `softroce perf`: bandwidth and latency tests in the manner of perftest's ib_*_bw and
//! ib_*_lat, with an end-to-end data check.
//!
//! Roles: the client (given SERVER) is the requester for WRITE, READ and atomics and the sender
//! for SEND; the server is the passive side (and the receiver for SEND). Both print the result.
//!
//! `--check`: every message carries a pattern that depends on its iteration and is verified
//! byte for byte where it lands: WRITE at the server (each iteration writes its own region,
//! checked when the client says it is done), READ at the client (the server's region holds
//! one pattern per iteration), SEND at the server as each receive completes, and atomics at
//! the client (fetch-add must return 0, a, 2a, ...; compare-and-swap i -> i+1 must return i)
//! and at the server (the final value). Any mismatch makes the command exit non-zero.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use softroce::verbs::*;
use std::result::Result;

use super::device::DeviceArgs;
use super::pingpong::poll_or_wait;
use super::CliError;

/// The operation under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PerfOp {
    /// SEND / RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomic fetch-and-add (or compare-and-swap with --cas).
    Atomic,
}

/// perftest-like options.
#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// The operation.
    #[arg(value_enum)]
    pub op: PerfOp,
    /// Latency test (ib_*_lat) instead of bandwidth (ib_*_bw).
    #[arg(long)]
    pub lat: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes (default: 65536 for bw, 2 for lat, 8 for atomics).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Iterations (messages per QP).
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u64,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 4096)]
    pub mtu: u32,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub num_qps: u32,
    /// Outstanding work requests per QP (bw tests).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Outstanding READs/atomics per QP.
    #[arg(short = 'o', long = "outs", default_value_t = 16)]
    pub outs: u8,
    /// Use compare-and-swap instead of fetch-and-add for `atomic`.
    #[arg(long)]
    pub cas: bool,
    /// Fill every message with an iteration-dependent pattern and verify every byte.
    #[arg(long)]
    pub check: bool,
    /// Print the result as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Local GID index (0 or 1; both are the device address).
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    pub gid_index: u8,
    /// Give up when no progress is made for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// QP local ACK timeout exponent: 4.096 us x 2^N (perftest's -u; 0 = never).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// Transport retries before "retry exceeded" (0..7; 7 retries forever, as rxe treats it).
    #[arg(long = "retry-cnt", default_value_t = 7, value_parser = clap::value_parser!(u8).range(0..=7))]
    pub retry_cnt: u8,
    /// Device options.
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Server to connect to; without it, act as the server.
    pub server: Option<String>,
}

/// What each side tells the other about one QP (the fields of perftest's key message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dest {
    qpn: u32,
    psn: u32,
    rkey: u32,
    vaddr: u64,
    gid: Gid,
}

impl Dest {
    const LEN: usize = 4 + 4 + 4 + 8 + 16;

    fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.vaddr.to_be_bytes());
        b[20..36].copy_from_slice(&self.gid.0);
        b
    }

    fn from_bytes(b: &[u8; Self::LEN]) -> Dest {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut va = [0u8; 8];
        va.copy_from_slice(&b[12..20]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[20..36]);
        Dest {
            qpn: u32_at(0) & 0xFF_FFFF,
            psn: u32_at(4) & 0xFF_FFFF,
            rkey: u32_at(8),
            vaddr: u64::from_be_bytes(va),
            gid: Gid(gid),
        }
    }
}

/// The parameters both sides must agree on, sent by the client first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    op: u8,
    lat: bool,
    cas: bool,
    check: bool,
    size: u64,
    iters: u64,
    num_qps: u32,
    mtu: u32,
}

impl Params {
    const LEN: usize = 8 + 8 + 8 + 4 + 4 + 4;
    const MAGIC: &'static [u8; 4] = b"SRP1";

    fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(Self::MAGIC);
        b[4] = self.op;
        b[5] = self.lat as u8;
        b[6] = self.cas as u8;
        b[7] = self.check as u8;
        b[8..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..24].copy_from_slice(&self.iters.to_be_bytes());
        b[24..28].copy_from_slice(&self.num_qps.to_be_bytes());
        b[28..32].copy_from_slice(&self.mtu.to_be_bytes());
        b
    }

    fn from_bytes(b: &[u8; Self::LEN]) -> Result<Params, CliError> {
        if &b[0..4] != Self::MAGIC {
            return Err(CliError::Failed(
                "the peer is not a softroce perf of this version (parameter exchange mismatch)"
                    .into(),
            ));
        }
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(x)
        };
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok(Params {
            op: b[4],
            lat: b[5] != 0,
            cas: b[6] != 0,
            check: b[7] != 0,
            size: u64_at(8),
            iters: u64_at(16),
            num_qps: u32_at(24),
            mtu: u32_at(28),
        })
    }
}

fn op_code(op: PerfOp) -> u8 {
    match op {
        PerfOp::Send => 0,
        PerfOp::Write => 1,
        PerfOp::Read => 2,
        PerfOp::Atomic => 3,
    }
}

/// The byte at `offset` of message `iter` under --check.
fn pattern_byte(iter: u64, offset: u64) -> u8 {
    (iter
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(offset.wrapping_mul(31))
        >> 3) as u8
}

fn fill_pattern(buf: &mut [u8], iter: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(iter, i as u64);
    }
}

fn check_pattern(buf: &[u8], iter: u64) -> Result<(), CliError> {
    match buf
        .iter()
        .enumerate()
        .find(|(i, b)| **b != pattern_byte(iter, *i as u64))
    {
        None => Ok(()),
        Some((i, b)) => Err(CliError::Failed(format!(
            "data check failed: message {iter}, byte {i}: got 0x{b:02x}, expected 0x{:02x}",
            pattern_byte(iter, i as u64)
        ))),
    }
}

fn read_exact<const N: usize>(s: &mut TcpStream) -> Result<[u8; N], CliError> {
    let mut b = [0u8; N];
    s.read_exact(&mut b)
        .map_err(|e| CliError::Failed(format!("out-of-band exchange: {e}")))?;
    Ok(b)
}

fn write_all(s: &mut TcpStream, b: &[u8]) -> Result<(), CliError> {
    s.write_all(b)
        .map_err(|e| CliError::Failed(format!("out-of-band exchange: {e}")))
}

/// One QP and its memory.
struct Conn {
    qp: QueuePair,
    mr: MemoryRegion,
    psn: u32,
    remote: Option<Dest>,
}

/// Memory per QP: under --check a region per iteration (so every message can be verified),
/// else a ring of tx_depth messages as perftest uses.
fn region_len(p: &Params, tx_depth: u32) -> Result<u64, CliError> {
    let slots = if p.check {
        p.iters
    } else {
        tx_depth.max(1) as u64
    };
    let size = p.size.max(8);
    let total = size
        .checked_mul(slots)
        .filter(|t| *t <= 4 << 30)
        .ok_or_else(|| {
            CliError::Usage(format!(
                "{} messages of {} bytes need more than 4 GiB of memory per QP; lower -n or -s",
                slots, size
            ))
        })?;
    Ok(total)
}

/// Runs `softroce perf`.
pub fn run(args: &PerfArgs) -> Result<(), CliError> {
    args.device.validate()?;
    let mtu = Mtu::from_bytes(args.mtu)
        .ok_or_else(|| CliError::Usage(format!("-m {}: the MTU must be 256..4096", args.mtu)))?;
    let io_timeout = Duration::from_secs(args.timeout.max(1));
    let server_addr = match &args.server {
        Some(h) => {
            use std::net::ToSocketAddrs;
            Some(
                (h.as_str(), args.port)
                    .to_socket_addrs()
                    .map_err(|e| CliError::Usage(format!("cannot resolve {h}: {e}")))?
                    .next()
                    .ok_or_else(|| CliError::Usage(format!("{h} has no address")))?,
            )
        }
        None => None,
    };
    let ip = args.device.local_ip(server_addr.map(|a| a.ip()))?;
    // The out-of-band connection first: the client's parameters rule.
    let (mut stream, params) = match server_addr {
        Some(addr) => {
            let mut s = TcpStream::connect_timeout(&addr, io_timeout)
                .map_err(|e| CliError::Failed(format!("couldn't connect to {addr}: {e}")))?;
            let size = args.size.unwrap_or(match (args.op, args.lat) {
                (PerfOp::Atomic, _) => 8,
                (_, true) => 2,
                _ => 65536,
            });
            let p = Params {
                op: op_code(args.op),
                lat: args.lat,
                cas: args.cas,
                check: args.check,
                size,
                iters: args.iters,
                num_qps: args.num_qps,
                mtu: args.mtu,
            };
            write_all(&mut s, &p.to_bytes())?;
            (s, p)
        }
        None => {
            let l = TcpListener::bind(SocketAddr::new(ip, args.port)).map_err(|e| {
                CliError::Failed(format!("couldn't listen on port {}: {e}", args.port))
            })?;
            let (mut s, _) = l.accept().map_err(CliError::Io)?;
            s.set_read_timeout(Some(io_timeout)).map_err(CliError::Io)?;
            let p = Params::from_bytes(&read_exact(&mut s)?)?;
            if p.op != op_code(args.op) || p.lat != args.lat {
                return Err(CliError::Failed(format!(
                    "the client runs another test (op {}, lat {})",
                    p.op, p.lat
                )));
            }
            (s, p)
        }
    };
    stream.set_read_timeout(None).map_err(CliError::Io)?;
    if params.size > (1 << 31) || params.iters == 0 || params.num_qps == 0 || params.num_qps > 4096
    {
        return Err(CliError::Usage(
            "size must be <= 2^31, iters and qps positive (qps <= 4096)".into(),
        ));
    }
    if args.op == PerfOp::Atomic && params.size != 8 {
        return Err(CliError::Usage("atomics are 8 bytes (-s 8)".into()));
    }
    let is_client = server_addr.is_some();

    let ctx = args.device.open(ip)?;
    let _report = args.device.counter_report(&ctx);
    let pd = ctx.alloc_pd().map_err(CliError::Verbs)?;
    let depth = if params.lat { 1 } else { args.tx_depth.max(1) };
    let cq = ctx
        .create_cq((depth as usize + 1) * params.num_qps as usize * 2)
        .map_err(CliError::Verbs)?;
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let gid = ctx
        .gid(args.gid_index)
        .ok_or_else(|| CliError::Usage(format!("-x {}: no such GID index", args.gid_index)))?;
    let mut conns = Vec::new();
    for i in 0..params.num_qps {
        let len = region_len(&params, depth)?;
        let mr = pd
            .register_mr(len as usize, access)
            .map_err(CliError::Verbs)?;
        let qp = pd
            .create_qp(&QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                cap: QpCap {
                    max_send_wr: depth,
                    max_recv_wr: depth.max(2),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .map_err(CliError::Verbs)?;
        qp.init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
            .map_err(CliError::Verbs)?;
        conns.push(Conn {
            qp,
            mr,
            psn: (0x10_0000 + i * 0x1000) & 0xFF_FFFF,
            remote: None,
        });
    }
    // Patterns the peer will read (READ) or that --check compares against.
    if params.check && !is_client && args.op == PerfOp::Read {
        for c in &conns {
            let mut buf = vec![0u8; params.size as usize];
            for it in 0..params.iters {
                fill_pattern(&mut buf, it);
                c.mr.write(it * params.size, &buf)
                    .map_err(CliError::Verbs)?;
            }
        }
    }
    // Exchange one Dest per QP: client writes first, server reads first (perftest's order).
    let mine: Vec<Dest> = conns
        .iter()
        .map(|c| Dest {
            qpn: c.qp.qp_num(),
            psn: c.psn,
            rkey: c.mr.rkey(),
            vaddr: c.mr.addr(),
            gid,
        })
        .collect();
    let mut remote = Vec::new();
    if is_client {
        for d in &mine {
            write_all(&mut stream, &d.to_bytes())?;
        }
        for _ in &mine {
            remote.push(Dest::from_bytes(&read_exact(&mut stream)?));
        }
    } else {
        for _ in &mine {
            remote.push(Dest::from_bytes(&read_exact(&mut stream)?));
        }
        for d in &mine {
            write_all(&mut stream, &d.to_bytes())?;
        }
    }
    for (c, r) in conns.iter_mut().zip(&remote) {
        connect(c, r, mtu, args)?;
        c.remote = Some(*r);
    }
    // Receives for SEND tests, posted before the barrier so that no SEND meets an empty queue.
    if args.op == PerfOp::Send && !is_client && !params.lat {
        for c in &conns {
            for slot in 0..depth.max(2) as u64 {
                post_recv_slot(c, &params, slot, depth)?;
            }
        }
    }
    if args.op == PerfOp::Send && params.lat {
        for c in &conns {
            post_recv_slot(c, &params, 0, 1)?;
        }
    }
    // Barrier: both sides are at RTS with receives posted.
    write_all(&mut stream, b"R")?;
    read_exact::<1>(&mut stream)?;

    let result = if params.lat {
        latency(args.op, is_client, &params, &conns, &cq, io_timeout)?
    } else {
        bandwidth(args.op, is_client, &params, &conns, &cq, depth, io_timeout)?
    };

    // End: the client reports it is done, with its measurements (as perftest's report
    // exchange: the passive side of WRITE, READ and atomics measures nothing itself); the
    // server verifies what landed in its memory.
    let mut result = result;
    if is_client {
        write_all(&mut stream, &encode_report(&result))?;
    } else {
        let report = decode_report(&read_exact::<REPORT_LEN>(&mut stream)?)?;
        // Only a SEND bandwidth server measures anything itself.
        if args.op != PerfOp::Send || params.lat {
            result = report;
        }
    }
    let mut failure = None;
    if params.check && !is_client {
        if let Err(e) = verify_server(args.op, &params, &conns) {
            failure = Some(e.to_string());
        }
    }
    // Exchange the verdicts so that both sides exit non-zero on a mismatch.
    let mine_ok = [failure.is_none() as u8];
    write_all(&mut stream, &mine_ok)?;
    let peer_ok = read_exact::<1>(&mut stream)?[0] == 1;
    print_result(args, &params, &result)?;
    if let Some(f) = failure {
        return Err(CliError::Failed(f));
    }
    if !peer_ok {
        return Err(CliError::Failed("the peer's data check failed".into()));
    }
    drop(conns);
    drop(ctx);
    Ok(())
}

fn connect(c: &Conn, r: &Dest, mtu: Mtu, args: &PerfArgs) -> Result<(), CliError> {
    // perftest's attributes: hop limit 0xFF, out_reads READ/atomic credits both ways.
    let rc = RcConnect {
        path_mtu: mtu,
        hop_limit: 0xFF,
        max_rd_atomic: args.outs,
        max_dest_rd_atomic: args.outs,
        timeout: args.qp_timeout,
        retry_cnt: args.retry_cnt,
        ..RcConnect::new(r.qpn, r.psn, r.gid, c.psn)
    };
    c.qp.ready_to_receive(&rc).map_err(CliError::Verbs)?;
    c.qp.ready_to_send(&rc).map_err(CliError::Verbs)
}

fn slot_offset(p: &Params, iter: u64, depth: u32) -> u64 {
    let slots = if p.check {
        p.iters
    } else {
        depth.max(1) as u64
    };
    (iter % slots) * p.size.max(8)
}

fn post_recv_slot(c: &Conn, p: &Params, slot: u64, depth: u32) -> Result<(), CliError> {
    let off = slot_offset(p, slot, depth.max(2));
    let sge = [c.mr.sge(off, p.size as u32)];
    c.qp.post_recv(&[RecvWr {
        wr_id: slot,
        sg_list: &sge,
    }])
    .map_err(|e| CliError::Failed(format!("post_recv: {e}")))
}

/// Measured times.
struct PerfResult {
    elapsed: Duration,
    messages: u64,
    /// Latency statistics (latency tests, measured by the client).
    lat: Option<LatStats>,
}

/// Latency statistics in microseconds.
#[derive(Debug, Clone, Copy)]
struct LatStats {
    min: f64,
    p50: f64,
    p99: f64,
    max: f64,
    avg: f64,
}

impl LatStats {
    fn from_samples(samples: &[Duration]) -> Option<LatStats> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort();
        let avg = sorted.iter().map(|d| d.as_secs_f64()).sum::<f64>() / sorted.len() as f64 * 1e6;
        Some(LatStats {
            min: percentile(&sorted, 0.0),
            p50: percentile(&sorted, 0.5),
            p99: percentile(&sorted, 0.99),
            max: percentile(&sorted, 1.0),
            avg,
        })
    }
}

/// The end-of-test report: 'D', then elapsed nanoseconds, messages, and the latency
/// statistics (min, median, 99th percentile, max, mean) in nanoseconds, all big-endian u64;
/// the statistics are all zero when there are none.
const REPORT_LEN: usize = 1 + 7 * 8;

fn encode_report(r: &PerfResult) -> [u8; REPORT_LEN] {
    let ns = |us: f64| (us * 1e3) as u64;
    let l = r.lat;
    let fields = [
        r.elapsed.as_nanos() as u64,
        r.messages,
        l.map_or(0, |l| ns(l.min)),
        l.map_or(0, |l| ns(l.p50)),
        l.map_or(0, |l| ns(l.p99)),
        l.map_or(0, |l| ns(l.max)),
        l.map_or(0, |l| ns(l.avg)),
    ];
    let mut b = [0u8; REPORT_LEN];
    b[0] = b'D';
    for (i, f) in fields.iter().enumerate() {
        b[1 + 8 * i..9 + 8 * i].copy_from_slice(&f.to_be_bytes());
    }
    b
}

/// Rebuilds the client's result from its report.
fn decode_report(b: &[u8; REPORT_LEN]) -> Result<PerfResult, CliError> {
    if b[0] != b'D' {
        return Err(CliError::Failed(
            "malformed end-of-test report from the client".into(),
        ));
    }
    let f = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[1 + 8 * i..9 + 8 * i]);
        u64::from_be_bytes(x)
    };
    let us = |i: usize| f(i) as f64 / 1e3;
    let lat = (f(5) > 0).then(|| LatStats {
        min: us(2),
        p50: us(3),
        p99: us(4),
        max: us(5),
        avg: us(6),
    });
    Ok(PerfResult {
        elapsed: Duration::from_nanos(f(0)),
        messages: f(1),
        lat,
    })
}

/// Posts one requester WR for message `iter` of QP `c`.
fn post_op(
    op: PerfOp,
    p: &Params,
    c: &Conn,
    iter: u64,
    depth: u32,
    signaled: bool,
) -> Result<(), CliError> {
    let r = c.remote.expect("connected");
    let off = slot_offset(p, iter, depth);
    let local = [c.mr.sge(off, p.size as u32)];
    let opcode = match op {
        PerfOp::Send => WrOpcode::Send,
        PerfOp::Write => WrOpcode::RdmaWrite {
            remote_addr: r.vaddr + off,
            rkey: r.rkey,
        },
        PerfOp::Read => WrOpcode::RdmaRead {
            remote_addr: r.vaddr + off,
            rkey: r.rkey,
        },
        PerfOp::Atomic if p.cas => WrOpcode::AtomicCmpSwap {
            remote_addr: r.vaddr,
            rkey: r.rkey,
            compare: iter,
            swap: iter + 1,
        },
        PerfOp::Atomic => WrOpcode::AtomicFetchAdd {
            remote_addr: r.vaddr,
            rkey: r.rkey,
            add: 1,
        },
    };
    if p.check && matches!(op, PerfOp::Send | PerfOp::Write) {
        let mut buf = vec![0u8; p.size as usize];
        fill_pattern(&mut buf, iter);
        c.mr.write(off, &buf).map_err(CliError::Verbs)?;
    }
    c.qp.post_send(&[SendWr {
        wr_id: iter,
        sg_list: &local,
        opcode,
        send_flags: if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::EMPTY
        },
    }])
    .map_err(|e| CliError::Failed(format!("post_send: {e}")))
}

/// Verifies a completed requester WR under --check (READ data, atomic original values).
fn check_completion(
    op: PerfOp,
    p: &Params,
    c: &Conn,
    iter: u64,
    depth: u32,
) -> Result<(), CliError> {
    if !p.check {
        return Ok(());
    }
    let off = slot_offset(p, iter, depth);
    match op {
        PerfOp::Read => check_pattern(
            &c.mr.to_vec(off, p.size as usize).map_err(CliError::Verbs)?,
            iter,
        ),
        PerfOp::Atomic => {
            let got = u64::from_ne_bytes(
                c.mr.to_vec(off, 8)
                    .map_err(CliError::Verbs)?
                    .try_into()
                    .expect("8 bytes"),
            );
            if got != iter {
                return Err(CliError::Failed(format!(
                    "atomic check failed: operation {iter} returned {got}, expected {iter}"
                )));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn bandwidth(
    op: PerfOp,
    is_client: bool,
    p: &Params,
    conns: &[Conn],
    cq: &CompletionQueue,
    depth: u32,
    timeout: Duration,
) -> Result<PerfResult, CliError> {
    let mut wcs = vec![blank_wc(); 64];
    let start = Instant::now();
    if is_client {
        // Every WR is signaled so that each one's data can be checked in order.
        let mut posted = vec![0u64; conns.len()];
        let mut done = vec![0u64; conns.len()];
        for (i, c) in conns.iter().enumerate() {
            while posted[i] < p.iters && posted[i] < depth as u64 {
                post_op(op, p, c, posted[i], depth, true)?;
                posted[i] += 1;
            }
        }
        let mut last = Instant::now();
        while done.iter().any(|d| *d < p.iters) {
            let n = poll_or_wait(cq, &mut wcs, false).map_err(CliError::Verbs)?;
            if n == 0 {
                if last.elapsed() > timeout {
                    return Err(CliError::Failed(format!("no completion for {timeout:?}")));
                }
                continue;
            }
            last = Instant::now();
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    return Err(CliError::Failed(format!(
                        "completion with error: {} (wr_id {})",
                        wc.status, wc.wr_id
                    )));
                }
                let i = conns
                    .iter()
                    .position(|c| c.qp.qp_num() == wc.qp_num)
                    .ok_or_else(|| CliError::Failed("completion for an unknown QP".into()))?;
                check_completion(op, p, &conns[i], wc.wr_id, depth)?;
                done[i] += 1;
                if posted[i] < p.iters {
                    post_op(op, p, &conns[i], posted[i], depth, true)?;
                    posted[i] += 1;
                }
            }
        }
    } else if op == PerfOp::Send {
        let mut got = vec![0u64; conns.len()];
        let mut last = Instant::now();
        while got.iter().any(|g| *g < p.iters) {
            let n = poll_or_wait(cq, &mut wcs, false).map_err(CliError::Verbs)?;
            if n == 0 {
                if last.elapsed() > timeout {
                    return Err(CliError::Failed(format!("no message for {timeout:?}")));
                }
                continue;
            }
            last = Instant::now();
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    return Err(CliError::Failed(format!(
                        "receive completion with error: {}",
                        wc.status
                    )));
                }
                let i = conns
                    .iter()
                    .position(|c| c.qp.qp_num() == wc.qp_num)
                    .ok_or_else(|| CliError::Failed("completion for an unknown QP".into()))?;
                let iter = got[i];
                let c = &conns[i];
                if p.check {
                    let off = slot_offset(p, wc.wr_id, depth.max(2));
                    if wc.byte_len as u64 != p.size {
                        return Err(CliError::Failed(format!(
                            "message {iter}: {} bytes received, expected {}",
                            wc.byte_len, p.size
                        )));
                    }
                    check_pattern(
                        &c.mr.to_vec(off, p.size as usize).map_err(CliError::Verbs)?,
                        iter,
                    )?;
                }
                got[i] += 1;
                // Re-post the slot for the message depth places later.
                if iter + (depth.max(2) as u64) < p.iters {
                    post_recv_slot(c, p, wc.wr_id + depth.max(2) as u64, depth)?;
                }
            }
        }
    }
    Ok(PerfResult {
        elapsed: start.elapsed(),
        messages: p.iters * conns.len() as u64,
        lat: None,
    })
}

fn latency(
    op: PerfOp,
    is_client: bool,
    p: &Params,
    conns: &[Conn],
    cq: &CompletionQueue,
    timeout: Duration,
) -> Result<PerfResult, CliError> {
    let c = &conns[0];
    let mut wcs = vec![blank_wc(); 4];
    let mut samples = Vec::with_capacity(p.iters as usize);
    let start = Instant::now();
    let wait_one = |wcs: &mut [WorkCompletion]| -> Result<WorkCompletion, CliError> {
        let t = Instant::now();
        loop {
            let n = poll_or_wait(cq, &mut wcs[..1], false).map_err(CliError::Verbs)?;
            if n == 1 {
                let wc = wcs[0];
                if wc.status != WcStatus::Success {
                    return Err(CliError::Failed(format!(
                        "completion with error: {}",
                        wc.status
                    )));
                }
                return Ok(wc);
            }
            if t.elapsed() > timeout {
                return Err(CliError::Failed(format!("no completion for {timeout:?}")));
            }
        }
    };
    match op {
        PerfOp::Send => {
            // Ping-pong: the client sends first; each side answers every message.
            for iter in 0..p.iters {
                let t = Instant::now();
                if is_client {
                    post_op(op, p, c, 0, 1, true)?;
                    let mut got_recv = false;
                    let mut got_send = false;
                    while !(got_recv && got_send) {
                        let wc = wait_one(&mut wcs)?;
                        if wc.opcode == WcOpcode::Recv {
                            if p.check {
                                check_pattern(
                                    &c.mr.to_vec(0, p.size as usize).map_err(CliError::Verbs)?,
                                    iter,
                                )?;
                            }
                            if iter + 1 < p.iters {
                                post_recv_slot(c, p, 0, 1)?;
                            }
                            got_recv = true;
                        } else {
                            got_send = true;
                        }
                    }
                } else {
                    loop {
                        let wc = wait_one(&mut wcs)?;
                        if wc.opcode == WcOpcode::Recv {
                            if p.check {
                                check_pattern(
                                    &c.mr.to_vec(0, p.size as usize).map_err(CliError::Verbs)?,
                                    iter,
                                )?;
                            }
                            break;
                        }
                    }
                    if iter + 1 < p.iters {
                        post_recv_slot(c, p, 0, 1)?;
                    }
                    post_op(op, p, c, iter, 1, true)?;
                    // Its send completion is consumed with the next receive.
                }
                // perftest's ib_send_lat reports one-way latency: half the round trip.
                samples.push(t.elapsed() / 2);
            }
            if !is_client {
                // The last send's completion.
                while wait_one(&mut wcs)?.opcode == WcOpcode::Recv {}
            }
        }
        _ => {
            // WRITE, READ and atomics: the client issues one operation at a time and times
            // its completion; the server is passive.
            if is_client {
                for iter in 0..p.iters {
                    let t = Instant::now();
                    post_op(op, p, c, iter, 1, true)?;
                    let wc = wait_one(&mut wcs)?;
                    samples.push(t.elapsed());
                    check_completion(op, p, c, wc.wr_id, 1)?;
                }
            }
        }
    }
    Ok(PerfResult {
        elapsed: start.elapsed(),
        messages: p.iters,
        lat: LatStats::from_samples(&samples),
    })
}

/// Under --check, the server verifies what the client wrote or what the atomics left.
fn verify_server(op: PerfOp, p: &Params, conns: &[Conn]) -> Result<(), CliError> {
    for c in conns {
        match op {
            PerfOp::Write if !p.lat => {
                for iter in 0..p.iters {
                    let got =
                        c.mr.to_vec(iter * p.size, p.size as usize)
                            .map_err(CliError::Verbs)?;
                    check_pattern(&got, iter)?;
                }
            }
            PerfOp::Write => {
                // Latency writes all land in slot 0: the last one must be there.
                let got = c.mr.to_vec(0, p.size as usize).map_err(CliError::Verbs)?;
                check_pattern(&got, p.iters - 1)?;
            }
            PerfOp::Atomic => {
                let v = c.mr.load_u64(0).map_err(CliError::Verbs)?;
                if v != p.iters {
                    return Err(CliError::Failed(format!(
                        "atomic check failed: the target holds {v} after {} operations",
                        p.iters
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn blank_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
        src_qp: 0,
        solicited: false,
    }
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn print_result(args: &PerfArgs, p: &Params, r: &PerfResult) -> Result<(), CliError> {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let bytes = p.size * r.messages;
    let bw = bytes as f64 / secs / 1e6;
    let rate = r.messages as f64 / secs / 1e6;
    let mut out = std::io::stdout().lock();
    let line = "-".repeat(87);
    let name = match args.op {
        PerfOp::Send => "Send",
        PerfOp::Write => "RDMA_Write",
        PerfOp::Read => "RDMA_Read",
        PerfOp::Atomic if p.cas => "Atomic CMP_AND_SWAP",
        PerfOp::Atomic => "Atomic FETCH_AND_ADD",
    };
    let w =
        |out: &mut std::io::StdoutLock, s: String| writeln!(out, "{s}").map_err(CliError::Output);
    if args.json {
        let mut v = serde_json::json!({
            "test": format!("{:?}", args.op).to_lowercase(),
            "lat": p.lat,
            "bytes": p.size,
            "iters": p.iters,
            "qps": p.num_qps,
            "mtu": p.mtu,
            "seconds": secs,
            "bw_avg_mbps": bw,
            "msg_rate_mpps": rate,
            "check": p.check,
        });
        if let Some(l) = r.lat {
            v["lat_us"] = serde_json::json!({
                "min": l.min,
                "p50": l.p50,
                "p99": l.p99,
                "max": l.max,
                "avg": l.avg,
            });
        }
        return w(&mut out, v.to_string());
    }
    w(&mut out, line.clone())?;
    w(
        &mut out,
        format!(
            "                    {name} {} Test",
            if p.lat { "Latency" } else { "BW" }
        ),
    )?;
    w(
        &mut out,
        format!(
            " Number of qps   : {}\t\tTransport type : IB (RoCEv2, softroce)",
            p.num_qps
        ),
    )?;
    w(
        &mut out,
        format!(
            " Mtu             : {}[B]\t\tData check     : {}",
            p.mtu,
            if p.check { "ON" } else { "OFF" }
        ),
    )?;
    w(&mut out, line.clone())?;
    if p.lat {
        match r.lat {
            None => w(&mut out, " (no latency was measured)".into())?,
            Some(l) => {
                w(&mut out, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    99% percentile[usec]".into())?;
                w(
                    &mut out,
                    format!(
                        " {:<6} {:<11} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:.2}",
                        p.size, p.iters, l.min, l.max, l.p50, l.avg, l.p99
                    ),
                )?;
            }
        }
    } else {
        w(
            &mut out,
            " #bytes     #iterations    BW average[MB/sec]   MsgRate[Mpps]".into(),
        )?;
        w(
            &mut out,
            format!(" {:<10} {:<14} {:<20.2} {:.6}", p.size, p.iters, bw, rate),
        )?;
    }
    w(&mut out, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_and_params_round_trip() {
        let d = Dest {
            qpn: 0x123456,
            psn: 0xABCDEF,
            rkey: 0xDEAD_BEEF,
            vaddr: 0x7F00_1234_5678,
            gid: Gid::from_ip("127.0.0.2".parse::<std::net::IpAddr>().unwrap()),
        };
        assert_eq!(Dest::from_bytes(&d.to_bytes()), d);
        let p = Params {
            op: 2,
            lat: true,
            cas: false,
            check: true,
            size: 1 << 30,
            iters: 7,
            num_qps: 3,
            mtu: 4096,
        };
        assert_eq!(Params::from_bytes(&p.to_bytes()).unwrap(), p);
        let mut bad = p.to_bytes();
        bad[0] = b'X';
        assert!(Params::from_bytes(&bad).is_err());
    }

    #[test]
    fn pattern_depends_on_iteration_and_offset() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        fill_pattern(&mut a, 1);
        fill_pattern(&mut b, 2);
        assert_ne!(a, b);
        assert!(check_pattern(&a, 1).is_ok());
        assert!(check_pattern(&a, 2).is_err());
    }
}
