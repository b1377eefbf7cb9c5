//! `softroce perf`: perftest's ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_lat,
//! ib_write_lat, ib_read_lat and ib_atomic_lat, speaking perftest 4.5's out-of-band exchange
//! (`softroce::oob::perftest`) so that either end may be perftest itself.
//!
//! Roles are perftest's: the client (given SERVER) is the requester for WRITE, READ and atomics
//! and the sender for SEND bandwidth; the server is passive there (its QP only answers) and
//! prints the report the client sends it. ib_send_lat and ib_write_lat are ping-pongs in which
//! both ends measure. The flags are perftest's (-s -n -m -p -q -t -r -o -x -u -A, -F and -c RC
//! accepted for habit's sake) and so is the memory layout each end advertises: a buffer of
//! max(size, page size) bytes, which the peer targets at offsets that step by the message size
//! rounded to a cache line (`ctx_set_send_reg_wqes`, `increase_rem_addr`).
//!
//! `--check` (softroce at both ends; the peer's version message says so): every message carries
//! a pattern that depends on its iteration and is verified byte for byte where it lands, each
//! message in its own region: WRITE at the server after the client's last completion, READ at
//! the client, SEND at the receiver, write_lat's writes at each end as they arrive, atomics at
//! the client (fetch-add returns 0, 1, 2, ...; compare-and-swap i -> i+1 returns i) and at the
//! server (the final value). The two ends exchange verdicts so that both exit non-zero on a
//! mismatch.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use softroce::oob::perftest::{BwReport, Exchange, KeyMsg, Role, TestSignature};
use softroce::oob::OobError;
use softroce::verbs::*;
use std::result::Result;

mod report;

use super::activity::PeerActivity;
use super::device::DeviceArgs;
use super::pingpong::poll_or_wait;
use super::CliError;
use report::{print_result, BwFigures, BwRun, LatStats, Outcome};

/// The operation under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PerfOp {
    /// SEND / RECV (ib_send_bw, ib_send_lat).
    Send,
    /// RDMA WRITE (ib_write_bw, ib_write_lat).
    Write,
    /// RDMA READ (ib_read_bw, ib_read_lat).
    Read,
    /// Atomics (ib_atomic_bw, ib_atomic_lat).
    Atomic,
}

/// perftest's -A.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AtomicType {
    /// Fetch-and-add (perftest's default).
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    /// Compare-and-swap.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

/// perftest's -c: only RC is implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Connection {
    /// Reliable Connected.
    #[value(name = "RC")]
    Rc,
}

/// perftest's options, with perftest's letters.
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
    /// Iterations per QP (default: 5000 for bw, 1000 for lat).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Path MTU; both ends use the smaller of their two values, as perftest does.
    #[arg(short = 'm', long = "mtu", default_value_t = 4096)]
    pub mtu: u32,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub num_qps: u32,
    /// Outstanding work requests per QP (bw tests; lat tests use 1).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Receives posted per QP (SEND tests).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub rx_depth: u32,
    /// READ/atomic requests this end accepts per QP, told to the peer (default: the device
    /// maximum, 128, for READ and atomics; 1 otherwise, as perftest).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u8>,
    /// Atomic operation (perftest's -A).
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicType::FetchAndAdd)]
    pub atomic_type: AtomicType,
    /// Same as -A CMP_AND_SWAP.
    #[arg(long)]
    pub cas: bool,
    /// Connection type (perftest's -c): RC.
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = Connection::Rc)]
    pub connection: Connection,
    /// Device name (perftest's -d; accepted for habit: softroce has one device per --bind
    /// address).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the device (perftest's -i; must be 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Accepted for perftest's habit (-F: do not fail on CPU frequency); timing uses the
    /// monotonic clock, not cycle counters.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Fill every message with an iteration-dependent pattern and verify every byte (softroce
    /// at both ends).
    #[arg(long)]
    pub check: bool,
    /// Print the result as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Local GID index (0 or 1; both are the device address).
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    pub gid_index: u8,
    /// Give up when neither the peer nor the network makes progress for this many seconds.
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

/// The eight perftest programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    SendBw,
    WriteBw,
    ReadBw,
    AtomicBw,
    SendLat,
    WriteLat,
    ReadLat,
    AtomicLat,
}

impl Program {
    fn of(op: PerfOp, lat: bool) -> Program {
        match (op, lat) {
            (PerfOp::Send, false) => Program::SendBw,
            (PerfOp::Write, false) => Program::WriteBw,
            (PerfOp::Read, false) => Program::ReadBw,
            (PerfOp::Atomic, false) => Program::AtomicBw,
            (PerfOp::Send, true) => Program::SendLat,
            (PerfOp::Write, true) => Program::WriteLat,
            (PerfOp::Read, true) => Program::ReadLat,
            (PerfOp::Atomic, true) => Program::AtomicLat,
        }
    }

    fn lat(self) -> bool {
        matches!(
            self,
            Program::SendLat | Program::WriteLat | Program::ReadLat | Program::AtomicLat
        )
    }

    /// The perftest program this one pairs with.
    fn perftest_name(self) -> &'static str {
        match self {
            Program::SendBw => "ib_send_bw",
            Program::WriteBw => "ib_write_bw",
            Program::ReadBw => "ib_read_bw",
            Program::AtomicBw => "ib_atomic_bw",
            Program::SendLat => "ib_send_lat",
            Program::WriteLat => "ib_write_lat",
            Program::ReadLat => "ib_read_lat",
            Program::AtomicLat => "ib_atomic_lat",
        }
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }
}

/// Everything both ends must agree on, resolved from the flags.
#[derive(Debug, Clone, Copy)]
struct Params {
    prog: Program,
    op: PerfOp,
    cas: bool,
    check: bool,
    size: u64,
    iters: u64,
    num_qps: u32,
}

impl Params {
    /// What a softroce peer must also be running (the version message extension).
    fn signature(&self) -> TestSignature {
        TestSignature {
            test: self.prog.code() | if self.cas { 0x80 } else { 0 },
            flags: self.check as u8 | ((self.num_qps.min(127) as u8) << 1),
            size: self.size.min(u32::MAX as u64) as u32,
            iters: self.iters.min(u32::MAX as u64) as u32,
        }
    }

    fn describe(sig: &TestSignature) -> String {
        let name = [
            "?",
            "send bw",
            "write bw",
            "read bw",
            "atomic bw",
            "send lat",
            "write lat",
            "read lat",
            "atomic lat",
        ]
        .get((sig.test & 0x7f) as usize)
        .copied()
        .unwrap_or("?");
        format!(
            "{name}{}, -s {}, -n {}, -q {}{}",
            if sig.test & 0x80 != 0 { " (CAS)" } else { "" },
            sig.size,
            sig.iters,
            sig.flags >> 1,
            if sig.flags & 1 != 0 { ", --check" } else { "" }
        )
    }
}

/// Where messages go in a QP's memory region: a local half [0, half) that this end sends from
/// and reads into, and the half [half, 2 x half) that it advertises to the peer.
#[derive(Debug, Clone, Copy)]
struct Layout {
    half: u64,
    stride: u64,
    slots: u64,
}

impl Layout {
    /// perftest's: BUFF_SIZE = max(size, cycle buffer); messages of at most half the cycle
    /// buffer step through it by the size rounded up to a cache line, larger ones all use
    /// offset 0.
    fn perftest(size: u64, cycle: u64, line: u64) -> Layout {
        let inc = size.max(1).div_ceil(line.max(1)) * line.max(1);
        let (stride, slots) = if size <= cycle / 2 {
            (inc, (cycle / inc).max(1))
        } else {
            (0, 1)
        };
        Layout {
            half: size.max(cycle),
            stride,
            slots,
        }
    }

    /// --check: a region per iteration, so that every message can be verified.
    fn check(size: u64, iters: u64) -> Result<Layout, CliError> {
        let stride = size.max(8).div_ceil(8) * 8;
        let half = stride
            .checked_mul(iters)
            .filter(|h| *h <= 2 << 30)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "--check keeps every message: {iters} messages of {size} bytes need more than 4 GiB per QP; lower -n or -s"
                ))
            })?;
        Ok(Layout {
            half,
            stride,
            slots: iters,
        })
    }

    fn offset(&self, iter: u64) -> u64 {
        (iter % self.slots) * self.stride
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

fn check_pattern(buf: &[u8], iter: u64) -> Result<(), String> {
    match buf
        .iter()
        .enumerate()
        .find(|(i, b)| **b != pattern_byte(iter, *i as u64))
    {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "data check failed: message {iter}, byte {i}: got 0x{b:02x}, expected 0x{:02x}",
            pattern_byte(iter, i as u64)
        )),
    }
}

/// One QP, its memory and both ends' keys.
struct Conn {
    qp: QueuePair,
    mr: MemoryRegion,
    mine: KeyMsg,
    remote: KeyMsg,
}

/// A test in progress: parameters, resources and the first data-check failure.
struct Test<'a> {
    p: Params,
    layout: Layout,
    conns: Vec<Conn>,
    cq: CompletionQueue,
    ctx: &'a Context,
    is_client: bool,
    timeout: Duration,
    tx_depth: u32,
    rx_depth: u32,
    /// The first --check mismatch; the test runs to its end so that the peer is not left
    /// waiting, then both ends fail.
    failure: Option<String>,
}

/// Runs `softroce perf`.
pub fn run(args: &PerfArgs) -> Result<(), CliError> {
    args.device.validate()?;
    Mtu::from_bytes(args.mtu)
        .ok_or_else(|| CliError::Usage(format!("-m {}: the MTU must be 256..4096", args.mtu)))?;
    if args.ib_port != 1 {
        return Err(CliError::Usage(format!(
            "-i {}: a softroce device has one port, port 1",
            args.ib_port
        )));
    }
    let prog = Program::of(args.op, args.lat);
    let p = Params {
        prog,
        op: args.op,
        cas: args.cas || args.atomic_type == AtomicType::CmpAndSwap,
        check: args.check,
        size: args.size.unwrap_or(match (args.op, args.lat) {
            (PerfOp::Atomic, _) => 8,
            (_, true) => 2,
            _ => 65536,
        }),
        iters: args.iters.unwrap_or(if args.lat { 1000 } else { 5000 }),
        num_qps: args.num_qps,
    };
    if p.size == 0 || p.size > (1 << 31) || p.num_qps == 0 || p.num_qps > 4096 {
        return Err(CliError::Usage("-s must be 1..2^31 and -q 1..4096".into()));
    }
    if p.iters < if prog.lat() { 5 } else { 1 } {
        return Err(CliError::Usage(
            "-n must be at least 1 (5 for latency tests, whose report drops the two largest samples)"
                .into(),
        ));
    }
    // Every message is timed (perftest's tposted/tcompleted), 32 bytes of timestamps each.
    if p.iters.saturating_mul(p.num_qps as u64) > MAX_MESSAGES {
        return Err(CliError::Usage(format!(
            "-n {} x -q {}: at most {MAX_MESSAGES} messages per run (each is timed)",
            p.iters, p.num_qps
        )));
    }
    if args.op == PerfOp::Atomic && p.size != 8 {
        return Err(CliError::Usage("atomics are 8 bytes (-s 8)".into()));
    }
    if prog.lat() && p.num_qps != 1 {
        return Err(CliError::Usage(
            "latency tests use one QP (-q 1), as perftest's".into(),
        ));
    }
    let timeout = Duration::from_secs(args.timeout.max(1));
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
    let (stream, role) = match server_addr {
        Some(addr) => (
            TcpStream::connect_timeout(&addr, timeout)
                .map_err(|e| CliError::Failed(format!("couldn't connect to {addr}: {e}")))?,
            Role::Client,
        ),
        None => {
            let l = TcpListener::bind(SocketAddr::new(ip, args.port)).map_err(|e| {
                CliError::Failed(format!("couldn't listen on port {}: {e}", args.port))
            })?;
            (l.accept().map_err(CliError::Io)?.0, Role::Server)
        }
    };
    stream
        .set_read_timeout(Some(timeout))
        .map_err(CliError::Io)?;
    let _ = stream.set_nodelay(true);
    let mut x = Exchange::new(stream, role);

    // Versions, system data and MTU (every perftest program starts so).
    let peer = x.versions(Some(p.signature())).map_err(CliError::Oob)?;
    match peer.softroce {
        Some(theirs) if theirs != p.signature() => {
            return Err(CliError::Failed(format!(
                "the peer runs another test ({}); this end runs {}: give both ends the same test and flags",
                Params::describe(&theirs),
                Params::describe(&p.signature())
            )))
        }
        None if p.check => {
            return Err(CliError::Usage(format!(
                "--check needs softroce at both ends; the peer is perftest {} (its buffers hold random bytes)",
                peer.version
            )))
        }
        _ => {}
    }
    let (cycle, line) = x.sys_data(4096, 64).map_err(CliError::Oob)?;
    let mtu_bytes = x.mtu(args.mtu).map_err(CliError::Oob)?;
    let mtu = Mtu::from_bytes(mtu_bytes).expect("agreed MTUs are valid");
    let layout = if p.check {
        Layout::check(p.size, p.iters)?
    } else {
        Layout::perftest(p.size, cycle as u64, line as u64)
    };

    let ctx = args.device.open(ip)?;
    let _report = args.device.counter_report(&ctx);
    let gid = ctx
        .gid(args.gid_index)
        .ok_or_else(|| CliError::Usage(format!("-x {}: no such GID index", args.gid_index)))?;
    let tx_depth = if prog.lat() {
        4
    } else {
        args.tx_depth.clamp(1, 8192).min(p.iters.min(8192) as u32)
    };
    let rx_depth = args.rx_depth.clamp(1, 8192).min(p.iters.min(8192) as u32);
    let outs = args.outs.unwrap_or(match args.op {
        PerfOp::Read | PerfOp::Atomic => 128,
        _ => 1,
    });
    let pd = ctx.alloc_pd().map_err(CliError::Verbs)?;
    // As perftest sizes its CQs: tx_depth entries per QP, and rx_depth more only for the SEND
    // programs, the only ones that post receives (ib_write_bw -q 64 fits in rxe's 32767 CQEs).
    let recv_cqes = if matches!(prog, Program::SendBw | Program::SendLat) {
        rx_depth
    } else {
        0
    };
    let cq = ctx
        .create_cq((tx_depth + recv_cqes + 2) as usize * p.num_qps as usize)
        .map_err(CliError::Verbs)?;
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mut seed = psn_seed();
    let mut conns = Vec::new();
    for _ in 0..p.num_qps {
        let mr = pd
            .register_mr((2 * layout.half) as usize, access)
            .map_err(CliError::Verbs)?;
        let qp = pd
            .create_qp(&QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                cap: QpCap {
                    max_send_wr: tx_depth,
                    max_recv_wr: rx_depth,
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
        // lrand48() & 0xffffff, as perftest draws its PSNs.
        seed = seed.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB) & ((1 << 48) - 1);
        let mine = KeyMsg {
            lid: 0,
            out_reads: outs as u16,
            qpn: qp.qp_num(),
            psn: ((seed >> 17) & 0xFF_FFFF) as u32,
            rkey: mr.rkey(),
            vaddr: mr.addr() + layout.half,
            gid,
            srqn: 0,
        };
        conns.push(Conn {
            qp,
            mr,
            mine,
            remote: mine,
        });
    }
    let mut t = Test {
        p,
        layout,
        conns,
        cq,
        ctx: &ctx,
        is_client: role == Role::Client,
        timeout,
        tx_depth,
        rx_depth,
        failure: None,
    };
    // What the peer will READ under --check.
    if p.check && !t.is_client && matches!(prog, Program::ReadBw | Program::ReadLat) {
        let mut buf = vec![0u8; p.size as usize];
        for c in &t.conns {
            for it in 0..p.iters {
                fill_pattern(&mut buf, it);
                c.mr.write(layout.half + layout.offset(it), &buf)
                    .map_err(CliError::Verbs)?;
            }
        }
    }

    // The keys and the barriers around connecting, in each program's order.
    let k0 = t.conns[0].mine;
    let lat_rdma = matches!(
        prog,
        Program::WriteLat | Program::ReadLat | Program::AtomicLat
    );
    if lat_rdma {
        t.conns[0].remote = t.hs(&mut x, &k0)?;
    }
    for i in 0..t.conns.len() {
        let mine = t.conns[i].mine;
        t.conns[i].remote = t.hs(&mut x, &mine)?;
    }
    for c in &t.conns {
        connect(c, mtu, args)?;
    }
    let send_style = matches!(prog, Program::SendBw | Program::SendLat);
    if send_style {
        t.hs(&mut x, &k0)?;
    }
    for i in 0..t.conns.len() {
        let mine = t.conns[i].mine;
        t.hs(&mut x, &mine)?;
    }
    if !send_style {
        t.hs(&mut x, &k0)?;
    } else {
        // Receives first, then a barrier, so that no SEND meets an empty queue.
        if prog == Program::SendLat || !t.is_client {
            for c in 0..t.conns.len() {
                for m in 0..(t.rx_depth as u64).min(p.iters) {
                    t.post_recv(c, m)?;
                }
            }
        }
        t.hs(&mut x, &k0)?;
    }

    // Traffic and what follows it.
    let result = match prog {
        Program::WriteBw | Program::ReadBw | Program::AtomicBw => {
            let mine = if t.is_client {
                Some(t.bandwidth_client()?)
            } else {
                None
            };
            t.hs(&mut x, &k0)?;
            if p.check && !t.is_client {
                t.verify_server();
            }
            t.verdicts(&mut x)?;
            let report = mine.as_ref().map_or(
                BwReport {
                    size: 0,
                    iters: 0,
                    bw_peak: 0.0,
                    bw_avg: 0.0,
                    msg_rate: 0.0,
                },
                |m| m.report(p.size),
            );
            let theirs = x.bw_reports(&report).map_err(CliError::Oob)?;
            t.close(x, &k0)?;
            mine.map_or(Outcome::Bw(BwFigures::from_report(&theirs)), |m| {
                Outcome::Bw(m.figures(p.size))
            })
        }
        Program::SendBw => {
            let m = if t.is_client {
                t.bandwidth_client()?
            } else {
                t.bandwidth_server()?
            };
            t.verdicts(&mut x)?;
            t.close(x, &k0)?;
            Outcome::Bw(m.figures(p.size))
        }
        Program::SendLat => {
            let l = t.send_lat()?;
            t.verdicts(&mut x)?;
            t.close(x, &k0)?;
            Outcome::Lat(l)
        }
        Program::WriteLat => {
            let l = t.write_lat()?;
            // perftest's ib_write_lat ends here, without closing the exchange.
            t.verdicts(&mut x)?;
            Outcome::Lat(l)
        }
        Program::ReadLat | Program::AtomicLat => {
            let l = if t.is_client {
                Some(t.rdma_lat()?)
            } else {
                None
            };
            if p.check {
                t.hs(&mut x, &k0)?;
                if !t.is_client {
                    t.verify_server();
                }
                t.verdicts(&mut x)?;
            }
            t.close(x, &k0)?;
            l.map_or(Outcome::Passive, Outcome::Lat)
        }
    };
    print_result(args.json, &p, mtu_bytes, t.is_client, &result)?;
    if let Some(f) = t.failure.take() {
        return Err(CliError::Failed(f));
    }
    Ok(())
}

/// The most messages one run times (4 GiB of timestamps).
const MAX_MESSAGES: u64 = 1 << 27;

/// Room reserved up front for per-message timestamps; more grows as the run goes.
const PREALLOCATED_TIMESTAMPS: usize = 1 << 20;

/// A random 48-bit seed for the PSNs.
fn psn_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ ((std::process::id() as u64) << 24)) & ((1 << 48) - 1)
}

fn connect(c: &Conn, mtu: Mtu, args: &PerfArgs) -> Result<(), CliError> {
    // perftest's ctx_connect: our max_dest_rd_atomic is what we told the peer, our
    // max_rd_atomic what the peer told us; hop limit 0xFF.
    let r = c.remote;
    let rc = RcConnect {
        path_mtu: mtu,
        hop_limit: 0xFF,
        max_rd_atomic: r.out_reads.clamp(1, 128) as u8,
        max_dest_rd_atomic: c.mine.out_reads.clamp(1, 128) as u8,
        timeout: args.qp_timeout,
        retry_cnt: args.retry_cnt,
        ..RcConnect::new(r.qpn, r.psn, r.gid, c.mine.psn)
    };
    c.qp.ready_to_receive(&rc).map_err(CliError::Verbs)?;
    c.qp.ready_to_send(&rc).map_err(CliError::Verbs)
}

impl Test<'_> {
    /// One key handshake, watching the network while waiting for the peer.
    fn hs(&self, x: &mut Exchange, mine: &KeyMsg) -> Result<KeyMsg, CliError> {
        x.handshake_waiting(mine, &mut |s| self.await_peer(s))
            .map_err(CliError::Oob)
    }

    fn close(&self, x: Exchange, mine: &KeyMsg) -> Result<(), CliError> {
        x.close_waiting(mine, &mut |s| self.await_peer(s))
            .map_err(CliError::Oob)
    }

    /// Waits for the peer's next message while its test may still run: gives up only when
    /// neither a message nor a RoCE packet has arrived for the timeout.
    fn await_peer(&self, s: &TcpStream) -> Result<(), OobError> {
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut peer = PeerActivity::new(self.ctx);
        loop {
            match s.peek(&mut [0u8; 1]) {
                Ok(0) => return Err(OobError::PeerClosed),
                Ok(_) => break,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if peer.silent_for(self.ctx) > self.timeout {
                        return Err(OobError::Timeout);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        s.set_read_timeout(Some(self.timeout))?;
        Ok(())
    }

    /// --check: both ends learn each other's verdict, so that both fail on a mismatch.
    fn verdicts(&mut self, x: &mut Exchange) -> Result<(), CliError> {
        if !self.p.check {
            return Ok(());
        }
        let mine = [self.failure.is_none() as u8];
        let theirs = x
            .xchg_waiting(&mine, &mut |s| self.await_peer(s))
            .map_err(CliError::Oob)?;
        if theirs[0] != 1 && self.failure.is_none() {
            self.failure = Some("the peer's data check failed".into());
        }
        Ok(())
    }

    fn note(&mut self, r: Result<(), String>) {
        if let Err(e) = r {
            self.failure.get_or_insert(e);
        }
    }

    fn post_recv(&self, c: usize, msg: u64) -> Result<(), CliError> {
        let conn = &self.conns[c];
        let sge = [conn.mr.sge(
            self.layout.half + self.layout.offset(msg),
            self.p.size as u32,
        )];
        conn.qp
            .post_recv(&[RecvWr {
                wr_id: msg,
                sg_list: &sge,
            }])
            .map_err(|e| CliError::Failed(format!("post_recv: {e}")))
    }

    /// Posts requester WR `iter` of QP `c`: perftest's addresses, or its own region under
    /// --check.
    fn post_op(&self, c: usize, iter: u64) -> Result<(), CliError> {
        let conn = &self.conns[c];
        let p = &self.p;
        let off = self.layout.offset(iter);
        let r = conn.remote;
        let local = [conn.mr.sge(off, p.size as u32)];
        // Under --check the atomics all hit one word, so that their results form a sequence.
        let atomic_addr = if p.check { r.vaddr } else { r.vaddr + off };
        let opcode = match p.op {
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
                remote_addr: atomic_addr,
                rkey: r.rkey,
                compare: if p.check { iter } else { 0 },
                swap: if p.check { iter + 1 } else { 0 },
            },
            PerfOp::Atomic => WrOpcode::AtomicFetchAdd {
                remote_addr: atomic_addr,
                rkey: r.rkey,
                add: 1,
            },
        };
        if p.check && matches!(p.op, PerfOp::Send | PerfOp::Write) {
            let mut buf = vec![0u8; p.size as usize];
            fill_pattern(&mut buf, iter);
            conn.mr.write(off, &buf).map_err(CliError::Verbs)?;
        }
        conn.qp
            .post_send(&[SendWr {
                wr_id: iter,
                sg_list: &local,
                opcode,
                send_flags: SendFlags::SIGNALED,
            }])
            .map_err(|e| CliError::Failed(format!("post_send: {e}")))
    }

    /// Under --check, what a completed READ or atomic brought back.
    fn check_completion(&self, c: usize, iter: u64) -> Result<(), String> {
        if !self.p.check {
            return Ok(());
        }
        let conn = &self.conns[c];
        let off = self.layout.offset(iter);
        match self.p.op {
            PerfOp::Read => {
                let got = conn
                    .mr
                    .to_vec(off, self.p.size as usize)
                    .map_err(|e| e.to_string())?;
                check_pattern(&got, iter)
            }
            PerfOp::Atomic => {
                let got = conn.mr.load_u64(off).map_err(|e| e.to_string())?;
                if got != iter {
                    return Err(format!(
                        "atomic check failed: operation {iter} returned {got}, expected {iter}"
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Polls one batch of completions; fails on an error completion or a stall.
    fn poll(&self, wcs: &mut [WorkCompletion], last: &mut Instant) -> Result<usize, CliError> {
        let n = poll_or_wait(&self.cq, wcs, false).map_err(CliError::Verbs)?;
        if n == 0 {
            if last.elapsed() > self.timeout {
                return Err(CliError::Failed(format!(
                    "no completion for {:?}",
                    self.timeout
                )));
            }
            return Ok(0);
        }
        *last = Instant::now();
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(CliError::Failed(format!(
                    "completion with error: {} ({:?}, wr_id {})",
                    wc.status, wc.opcode, wc.wr_id
                )));
            }
        }
        Ok(n)
    }

    fn conn_of(&self, wc: &WorkCompletion) -> Result<usize, CliError> {
        self.conns
            .iter()
            .position(|c| c.qp.qp_num() == wc.qp_num)
            .ok_or_else(|| CliError::Failed("completion for an unknown QP".into()))
    }

    /// The requester side of ib_{send,write,read,atomic}_bw: tx_depth WRs in flight per QP.
    fn bandwidth_client(&mut self) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let total = self.p.iters as usize * n;
        let mut run = BwRun {
            posted: Vec::with_capacity(total.min(PREALLOCATED_TIMESTAMPS)),
            completed: Vec::with_capacity(total.min(PREALLOCATED_TIMESTAMPS)),
        };
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut posted = vec![0u64; n];
        for (c, count) in posted.iter_mut().enumerate() {
            while *count < self.p.iters && *count < self.tx_depth as u64 {
                run.posted.push(Instant::now());
                self.post_op(c, *count)?;
                *count += 1;
            }
        }
        let mut last = Instant::now();
        while run.completed.len() < total {
            let k = self.poll(&mut wcs, &mut last)?;
            let now = Instant::now();
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                run.completed.push(now);
                let r = self.check_completion(c, wc.wr_id);
                self.note(r);
                if posted[c] < self.p.iters {
                    run.posted.push(Instant::now());
                    self.post_op(c, posted[c])?;
                    posted[c] += 1;
                }
            }
        }
        Ok(run)
    }

    /// The receiving server of ib_send_bw: keeps rx_depth receives posted per QP and times
    /// from the first arrival to the last, as perftest's run_iter_bw_server.
    fn bandwidth_server(&mut self) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let total = self.p.iters as usize * n;
        let mut run = BwRun {
            posted: Vec::with_capacity(1),
            completed: Vec::with_capacity(total.min(PREALLOCATED_TIMESTAMPS)),
        };
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut got = vec![0u64; n];
        let mut last = Instant::now();
        while run.completed.len() < total {
            let k = self.poll(&mut wcs, &mut last)?;
            let now = Instant::now();
            if k > 0 && run.posted.is_empty() {
                run.posted.push(now);
            }
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                let msg = wc.wr_id;
                if self.p.check {
                    let r = if wc.byte_len as u64 != self.p.size {
                        Err(format!(
                            "message {msg}: {} bytes received, expected {}",
                            wc.byte_len, self.p.size
                        ))
                    } else {
                        self.conns[c]
                            .mr
                            .to_vec(
                                self.layout.half + self.layout.offset(msg),
                                self.p.size as usize,
                            )
                            .map_err(|e| e.to_string())
                            .and_then(|b| check_pattern(&b, msg))
                    };
                    self.note(r);
                }
                got[c] += 1;
                run.completed.push(now);
                let next = msg + self.rx_depth as u64;
                if next < self.p.iters {
                    self.post_recv(c, next)?;
                }
            }
        }
        Ok(run)
    }

    /// ib_send_lat: the client sends first; each end answers each message it receives.
    fn send_lat(&mut self) -> Result<Option<LatStats>, CliError> {
        let iters = self.p.iters;
        let mut posted = Vec::with_capacity((iters as usize).min(PREALLOCATED_TIMESTAMPS));
        let mut wcs = vec![WorkCompletion::default(); 8];
        let mut last = Instant::now();
        let (mut sent, mut send_done, mut received) = (0u64, 0u64, 0u64);
        while sent < iters || received < iters || send_done < sent {
            let my_turn = sent < iters
                && (if self.is_client {
                    sent == received
                } else {
                    received > sent
                });
            if my_turn && sent - send_done < self.tx_depth as u64 {
                posted.push(Instant::now());
                self.post_op(0, sent)?;
                sent += 1;
                continue;
            }
            let k = self.poll(&mut wcs, &mut last)?;
            for wc in &wcs[..k] {
                if wc.opcode == WcOpcode::Recv {
                    let msg = wc.wr_id;
                    if self.p.check {
                        let r = self.conns[0]
                            .mr
                            .to_vec(
                                self.layout.half + self.layout.offset(msg),
                                self.p.size as usize,
                            )
                            .map_err(|e| e.to_string())
                            .and_then(|b| check_pattern(&b, msg));
                        self.note(r);
                    }
                    received += 1;
                    if msg + (self.rx_depth as u64) < iters {
                        self.post_recv(0, msg + self.rx_depth as u64)?;
                    }
                } else {
                    send_done += 1;
                }
            }
        }
        Ok(LatStats::from_posted(&posted, 2.0))
    }

    /// ib_write_lat: each end writes `size` bytes whose last byte counts the iterations and
    /// spins on that byte of its own buffer; the server writes first.
    fn write_lat(&mut self) -> Result<Option<LatStats>, CliError> {
        let iters = self.p.iters;
        let size = self.p.size;
        let conn_mr = &self.conns[0].mr;
        let poll_at = self.layout.half + size - 1;
        let mut posted = Vec::with_capacity((iters as usize).min(PREALLOCATED_TIMESTAMPS));
        let mut wcs = vec![WorkCompletion::default(); 8];
        let mut last = Instant::now();
        let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
        let mut local = vec![0u8; size as usize];
        while scnt < iters || rcnt < iters || ccnt < iters {
            // The server writes first: it does not wait before its first write.
            if rcnt < iters && (self.is_client || scnt >= 1) {
                rcnt += 1;
                let want = rcnt as u8;
                let mut spins = 0u32;
                let mut peer = PeerActivity::new(self.ctx);
                loop {
                    let mut b = [0u8; 1];
                    conn_mr.read(poll_at, &mut b).map_err(CliError::Verbs)?;
                    if b[0] == want {
                        break;
                    }
                    spins += 1;
                    if spins % 64 == 0 {
                        std::thread::yield_now();
                        if peer.silent_for(self.ctx) > self.timeout {
                            return Err(CliError::Failed(format!(
                                "write {rcnt} of the peer did not arrive in {:?}",
                                self.timeout
                            )));
                        }
                    }
                }
                if self.p.check {
                    let got = conn_mr
                        .to_vec(self.layout.half, size as usize - 1)
                        .map_err(CliError::Verbs)?;
                    let r = check_pattern(&got, rcnt - 1);
                    self.failure = self.failure.take().or(r.err());
                }
            }
            if scnt < iters {
                posted.push(Instant::now());
                scnt += 1;
                // Only the counter byte changes between iterations, unless --check gives every
                // message its own pattern.
                local[size as usize - 1] = scnt as u8;
                if self.p.check {
                    fill_pattern(&mut local[..size as usize - 1], scnt - 1);
                    conn_mr.write(0, &local).map_err(CliError::Verbs)?;
                } else {
                    conn_mr
                        .write(size - 1, &local[size as usize - 1..])
                        .map_err(CliError::Verbs)?;
                }
                let conn = &self.conns[0];
                conn.qp
                    .post_send(&[SendWr {
                        wr_id: scnt,
                        sg_list: &[conn.mr.sge(0, size as u32)],
                        opcode: WrOpcode::RdmaWrite {
                            remote_addr: conn.remote.vaddr,
                            rkey: conn.remote.rkey,
                        },
                        send_flags: SendFlags::SIGNALED,
                    }])
                    .map_err(|e| CliError::Failed(format!("post_send: {e}")))?;
            }
            // Reap send completions: wait for one only when the send queue is full, or at
            // the end for the last ones.
            loop {
                let must_wait = scnt - ccnt >= self.tx_depth as u64
                    || (scnt == iters && rcnt == iters && ccnt < scnt);
                let k = if must_wait {
                    self.poll(&mut wcs, &mut last)?
                } else {
                    let k = self.cq.poll(&mut wcs).map_err(CliError::Verbs)?;
                    if let Some(wc) = wcs[..k].iter().find(|wc| wc.status != WcStatus::Success) {
                        return Err(CliError::Failed(format!(
                            "completion with error: {}",
                            wc.status
                        )));
                    }
                    k
                };
                ccnt += k as u64;
                if k == 0 && !must_wait {
                    break;
                }
            }
        }
        Ok(LatStats::from_posted(&posted, 2.0))
    }

    /// ib_read_lat / ib_atomic_lat client: one operation at a time.
    fn rdma_lat(&mut self) -> Result<Option<LatStats>, CliError> {
        let mut posted = Vec::with_capacity((self.p.iters as usize).min(PREALLOCATED_TIMESTAMPS));
        let mut wcs = vec![WorkCompletion::default(); 1];
        let mut last = Instant::now();
        for iter in 0..self.p.iters {
            posted.push(Instant::now());
            self.post_op(0, iter)?;
            while self.poll(&mut wcs, &mut last)? == 0 {}
            let r = self.check_completion(0, wcs[0].wr_id);
            self.note(r);
        }
        Ok(LatStats::from_posted(&posted, 1.0))
    }

    /// Under --check, the server verifies what the client wrote or what the atomics left.
    fn verify_server(&mut self) {
        let p = self.p;
        for c in 0..self.conns.len() {
            let mr = &self.conns[c].mr;
            let r = match p.op {
                PerfOp::Write => (0..p.iters).try_for_each(|iter| {
                    let got = mr
                        .to_vec(self.layout.half + self.layout.offset(iter), p.size as usize)
                        .map_err(|e| e.to_string())?;
                    check_pattern(&got, iter)
                }),
                PerfOp::Atomic => match mr.load_u64(self.layout.half) {
                    Ok(v) if v == p.iters => Ok(()),
                    Ok(v) => Err(format!(
                        "atomic check failed: the target holds {v} after {} operations",
                        p.iters
                    )),
                    Err(e) => Err(e.to_string()),
                },
                _ => Ok(()),
            };
            self.note(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn perftest_layout_steps_by_cache_lines_within_the_page() {
        // ib_write_bw -s 100: 128-byte steps through a 4096-byte buffer, 32 slots.
        let l = Layout::perftest(100, 4096, 64);
        assert_eq!((l.half, l.stride, l.slots), (4096, 128, 32));
        assert_eq!(l.offset(0), 0);
        assert_eq!(l.offset(31), 31 * 128);
        assert_eq!(l.offset(32), 0);
        // Atomics: 8 bytes round up to one cache line.
        let a = Layout::perftest(8, 4096, 64);
        assert_eq!((a.stride, a.slots), (64, 64));
        // More than half the page: everything at offset 0, the buffer as large as a message.
        let big = Layout::perftest(65536, 4096, 64);
        assert_eq!((big.half, big.offset(7)), (65536, 0));
        let mid = Layout::perftest(2049, 4096, 64);
        assert_eq!((mid.half, mid.offset(1)), (4096, 0));
    }

    #[test]
    fn signatures_differ_for_different_tests() {
        let p = Params {
            prog: Program::WriteBw,
            op: PerfOp::Write,
            cas: false,
            check: true,
            size: 65536,
            iters: 100,
            num_qps: 2,
        };
        let q = Params {
            prog: Program::ReadBw,
            ..p
        };
        assert_ne!(p.signature(), q.signature());
        assert_ne!(p.signature(), Params { num_qps: 3, ..p }.signature());
        assert!(Params::describe(&p.signature()).contains("write bw"));
        assert!(Params::describe(&p.signature()).contains("--check"));
    }
}
