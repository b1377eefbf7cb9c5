//! Setting a perftest run up: the flags checked and resolved ([`Params::from_args`]), the
//! out-of-band connection and the agreement on test, buffer layout and MTU ([`open_exchange`],
//! [`agree`]), the QPs and memory ([`Test::new`]) and the key exchange and barriers around
//! connecting them, in each perftest program's order ([`Test::connect`]).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use softroce::oob::perftest::{Exchange, KeyMsg, Role};
use softroce::verbs::*;
use std::result::Result;

use super::ops::fill_pattern;
use super::progress::Progress;
use super::report::{print_addresses, print_banner, print_waiting};
use super::{AtomicType, Connection, OutputOnly, Params, PerfArgs, PerfOp, Program};
use crate::cli::qp_setup::{connect_rc, create_qp, create_rc_qp, Queues};
use crate::cli::CliError;

impl Params {
    /// Resolves perftest's defaults and refuses what cannot run.
    pub(super) fn from_args(args: &PerfArgs) -> Result<Params, CliError> {
        args.refused.check()?;
        args.device.validate()?;
        Mtu::from_bytes(args.mtu).ok_or_else(|| {
            CliError::Usage(format!(
                "-m {}: the MTU must be 256, 512, 1024, 2048 or 4096",
                args.mtu
            ))
        })?;
        if args.ib_port != 1 {
            return Err(CliError::Usage(format!(
                "-i {}: a softroce device has one port, port 1",
                args.ib_port
            )));
        }
        // --run_infinitely reports every -D seconds, perftest's DEF_DURATION (5) by default.
        let duration = args
            .duration
            .or(args.run_infinitely.then_some(5))
            .map(Duration::from_secs);
        // perftest: the margin defaults to a quarter of the duration.
        let margin = Duration::from_secs(args.margin.unwrap_or(args.duration.unwrap_or(0) / 4));
        let p = Params {
            all: args.all,
            duration,
            margin,
            duplex: args.bidirectional,
            // perftest: no peak under -N, in duration mode, and above 20000 iterations.
            no_peak: args.no_peak
                || args.duration.is_some()
                || (!args.lat && args.iters.unwrap_or(5000) > 20000),
            gbits: args.report_gbits,
            reversed: args.reversed,
            forever: args.run_infinitely,
            cpu_util: args.cpu_util,
            prog: Program::of(args.op, args.lat),
            op: args.op,
            cas: args.cas || args.atomic_type == AtomicType::CmpAndSwap,
            check: args.check,
            // perftest's -a sets the size (the buffer's) to MAX_SIZE whatever -s says.
            size: match (args.op, args.lat, args.size) {
                (PerfOp::Atomic, _, s) => s.unwrap_or(8),
                (_, _, _) if args.all => MAX_SIZE,
                (_, true, s) => s.unwrap_or(2),
                (_, false, s) => s.unwrap_or(65536),
            },
            iters: args.iters.unwrap_or(if args.lat { 1000 } else { 5000 }),
            num_qps: args.num_qps,
            conn: args.connection,
        };
        if p.conn == Connection::Uc && matches!(args.op, PerfOp::Read | PerfOp::Atomic) {
            // perftest: "Read and Atomic verbs are not supported on UC" (perftest_parameters.c).
            return Err(CliError::Usage(
                "-c UC: READ and atomics need an RC QP (UC carries SEND and WRITE)".into(),
            ));
        }
        if p.size == 0 || p.size > (1 << 31) {
            return Err(CliError::Usage(format!(
                "-s {}: the message size must be 1..2147483648 (2^31) bytes",
                p.size
            )));
        }
        if p.num_qps == 0 || p.num_qps > 4096 {
            return Err(CliError::Usage(format!(
                "-q {}: the number of QPs must be 1..4096",
                p.num_qps
            )));
        }
        if p.iters < if p.prog.lat() { 5 } else { 1 } {
            return Err(CliError::Usage(
                "-n must be at least 1 (5 for latency tests, whose report drops the two largest samples)"
                    .into(),
            ));
        }
        // Every message is timed (perftest's tposted/tcompleted), 32 bytes of timestamps each.
        if p.duration.is_none() && p.iters.saturating_mul(p.num_qps as u64) > MAX_MESSAGES {
            return Err(CliError::Usage(format!(
                "-n {} x -q {}: at most {MAX_MESSAGES} messages per run (each is timed)",
                p.iters, p.num_qps
            )));
        }
        if args.op == PerfOp::Atomic && p.size != 8 {
            return Err(CliError::Usage("atomics are 8 bytes (-s 8)".into()));
        }
        if p.prog.lat() && p.num_qps != 1 {
            return Err(CliError::Usage(
                "latency tests use one QP (-q 1), as perftest's".into(),
            ));
        }
        p.check_modes()?;
        p.check_ud()?;
        match (args.output, p.prog.lat()) {
            (Some(OutputOnly::Latency), false) => {
                return Err(CliError::Usage(
                    "--output: the bandwidth tests print bandwidth or message_rate".into(),
                ))
            }
            (Some(OutputOnly::Bandwidth | OutputOnly::MessageRate), true) => {
                return Err(CliError::Usage(
                    "--output: the latency tests print latency".into(),
                ))
            }
            _ => {}
        }
        // perftest 4.5 (perftest_parameters.c): -L other than its default is for raw Ethernet
        // QPs only; its QPs' address vectors say 0xFF whatever -L says.
        if args.hop_limit.is_some_and(|h| h != PERFTEST_HOP_LIMIT) {
            return Err(CliError::Usage(
                "-L/--hop_limit: hop limit only valid for RawEth QP (as perftest's: RC, UC and UD QPs send with the route's hop limit)"
                    .into(),
            ));
        }
        if args.inline_size > MAX_INLINE {
            return Err(CliError::Usage(format!(
                "-I {}: the device's max_inline_data is {MAX_INLINE}",
                args.inline_size
            )));
        }
        if args.post_list == 0 || args.cq_mod == Some(0) {
            return Err(CliError::Usage("-l and -Q must be at least 1".into()));
        }
        if (args.post_list > 1 || args.cq_mod.is_some()) && p.prog.lat() {
            return Err(CliError::Usage(
                "-l and -Q apply to the bandwidth tests".into(),
            ));
        }
        Ok(p)
    }

    /// Refuses -a, -D and -b where perftest refuses them or softroce does not run them.
    fn check_modes(&self) -> Result<(), CliError> {
        let usage = |s: &str| Err(CliError::Usage(s.into()));
        if let Some(d) = self.duration {
            if self.all {
                return usage("-D: duration mode does not run all sizes (-a), as perftest's");
            }
            if d <= 2 * self.margin && !self.forever {
                return usage(
                    "-D/-f: the duration must be more than twice the margin (DURATION > 2*MARGIN)",
                );
            }
        }
        if self.prog.lat() && (self.duration.is_some() || self.duplex) {
            return usage(
                "-D, -b and --run_infinitely run the bandwidth tests here; the latency tests run -s/-n or -a",
            );
        }
        if self.forever && self.duplex {
            return usage("--run_infinitely runs one direction (no -b)");
        }
        if self.cpu_util && self.duration.is_none() {
            return usage("--cpu_util works only in duration mode (-D), as perftest's");
        }
        if self.duplex && self.prog == Program::SendBw && self.duration.is_some() {
            return usage("-b with -D: bidirectional SEND runs -n iterations here");
        }
        if self.check && (self.all || self.duration.is_some() || self.duplex) {
            return usage(
                "--check verifies fixed -s/-n runs; it does not combine with -a, -D or -b",
            );
        }
        Ok(())
    }

    /// The message sizes a bandwidth run measures: 2..2^23 under -a (atomics stay 8 bytes, as
    /// perftest's ib_atomic_bw), else -s.
    pub(super) fn sizes(&self) -> Vec<u64> {
        if self.all && self.op != PerfOp::Atomic {
            // Under UD, `size` is the MTU by now: ib_send_bw -c UD -a runs 2 .. MTU.
            (1..24)
                .map(|i| 1u64 << i)
                .filter(|s| self.conn != Connection::Ud || *s <= self.size)
                .collect()
        } else {
            vec![self.size]
        }
    }
}

/// perftest's DEF_HOP_LIMIT: the only -L its RC, UC and UD tests accept.
pub(super) const PERFTEST_HOP_LIMIT: u8 = 64;

/// The largest -I: softroce's max_inline_data.
pub(super) const MAX_INLINE: u32 = 400;

/// perftest's MAX_SIZE: the largest -a size, and the buffer -a allocates.
pub(super) const MAX_SIZE: u64 = 1 << 23;

/// Opens the out-of-band TCP connection: connects to SERVER, or listens and accepts one peer.
/// Returns the exchange and this end's device address.
pub(super) fn open_exchange(
    args: &PerfArgs,
    timeout: Duration,
) -> Result<(Exchange, IpAddr), CliError> {
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
            if args.full_report() {
                print_waiting()?;
            }
            (l.accept().map_err(CliError::Io)?.0, Role::Server)
        }
    };
    stream
        .set_read_timeout(Some(timeout))
        .map_err(CliError::Io)?;
    let _ = stream.set_nodelay(true);
    let x = Exchange::new(stream, role);
    Ok((x, ip))
}

/// What the two ends agreed on before any QP exists.
pub(super) struct Agreed {
    /// Where messages go in each QP's memory.
    pub(super) layout: Layout,
    /// The smaller of the two ends' -m.
    pub(super) mtu: Mtu,
    /// `mtu` in bytes, for the report.
    pub(super) mtu_bytes: u32,
    /// The peer's cycle buffer and cache line, for per-size layouts under -a.
    pub(super) cycle: u64,
    /// See `cycle`.
    pub(super) line: u64,
}

/// Versions (and, between softroce ends, the test signature), system data and MTU: every
/// perftest program starts so.
pub(super) fn agree(x: &mut Exchange, p: &mut Params, args: &PerfArgs) -> Result<Agreed, CliError> {
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
    p.fit_ud_size(args, mtu_bytes)?;
    let layout = if p.check {
        // Under UD each receive also holds the GRH room.
        Layout::check(p.size + p.grh_room(), p.iters)?
    } else {
        Layout::perftest(p.size, cycle as u64, line as u64)
    };
    Ok(Agreed {
        layout,
        mtu,
        mtu_bytes,
        cycle: cycle as u64,
        line: line as u64,
    })
}

/// Where messages go in a QP's memory region: a local half [0, half) that this end sends from
/// and reads into, and the half [half, 2 x half) that it advertises to the peer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Bytes in each half of the region.
    pub(super) half: u64,
    /// Bytes between consecutive messages.
    pub(super) stride: u64,
    /// Messages before the offsets wrap.
    pub(super) slots: u64,
}

impl Layout {
    /// perftest's: BUFF_SIZE = max(size, cycle buffer); messages of at most half the cycle
    /// buffer step through it by the size rounded up to a cache line, larger ones all use
    /// offset 0.
    pub(super) fn perftest(size: u64, cycle: u64, line: u64) -> Layout {
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
    pub(super) fn check(size: u64, iters: u64) -> Result<Layout, CliError> {
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

    /// Where message `iter` sits within a half.
    pub(super) fn offset(&self, iter: u64) -> u64 {
        (iter % self.slots) * self.stride
    }
}

/// One QP, its memory and both ends' keys.
pub(super) struct Conn {
    pub(super) qp: Arc<QueuePair>,
    pub(super) mr: MemoryRegion,
    /// What this end told the peer.
    pub(super) mine: KeyMsg,
    /// What the peer told this end.
    pub(super) remote: KeyMsg,
    /// UD: the address handle of the peer, at an end that sends.
    pub(super) ah: Option<AddressHandle>,
}

/// A test in progress: parameters, resources and the first data-check failure.
pub(super) struct Test<'a> {
    pub(super) p: Params,
    pub(super) layout: Layout,
    pub(super) conns: Vec<Conn>,
    pub(super) cq: CompletionQueue,
    pub(super) ctx: &'a Context,
    pub(super) is_client: bool,
    /// How long the peer and the network may both be silent.
    pub(super) timeout: Duration,
    pub(super) tx_depth: u32,
    pub(super) rx_depth: u32,
    /// The first --check mismatch; the test runs to its end so that the peer is not left
    /// waiting, then both ends fail.
    pub(super) failure: Option<String>,
    /// --check: the messages and bytes this end verified.
    pub(super) verified: (u64, u64),
    /// -Q: a completion every this many WRs.
    pub(super) cq_mod: u32,
    /// -l: WRs per post_send.
    pub(super) post_list: u32,
    /// -I: messages of at most this many bytes go inline.
    pub(super) inline: u64,
    /// --perform_warm_up.
    pub(super) warm: bool,
    /// The cycle buffer and cache line agreed with the peer (for [`Test::set_size`]).
    cycle: u64,
    /// See `cycle`.
    pub(super) line: u64,
    /// The QPs' protection domain (UD makes its address handles in it).
    pub(super) pd: ProtectionDomain,
    /// The progress line of a run that lasts.
    pub(super) progress: Progress,
    /// The device's `rcvd_pkts` and `timeouts` once the QPs were connected: whether the peer
    /// has answered since ([`Test::poll`]'s dead-peer rule).
    pub(super) heard: (u64, u64),
    /// The RoCE UDP port the QPs send to (the peer's, the same as this end's).
    pub(super) roce_port: u16,
    /// -u and --retry-cnt, for the failure messages.
    pub(super) qp_timeout: u8,
    /// See `qp_timeout`.
    pub(super) retry_cnt: u8,
}

impl<'a> Test<'a> {
    /// Creates the CQ, and per QP a memory region and a QP in INIT with the keys this end
    /// will advertise; under --check of READ, the server fills what the client will read.
    pub(super) fn new(
        ctx: &'a Context,
        p: Params,
        agreed: &Agreed,
        role: Role,
        timeout: Duration,
        args: &PerfArgs,
    ) -> Result<Test<'a>, CliError> {
        let prog = p.prog;
        let layout = agreed.layout;
        let gid = ctx
            .gid(args.gid_index)
            .ok_or_else(|| CliError::Usage(format!("-x {}: no such GID index", args.gid_index)))?;
        let tx_depth = if prog.lat() {
            4
        } else {
            args.tx_depth.clamp(1, 8192).min(p.iters.min(8192) as u32)
        };
        let rx_depth = if matches!(p.conn, Connection::Ud | Connection::Uc) {
            super::ud::rx_depth(args, &p, ctx.limits().max_cqe)
        } else {
            args.rx_depth.clamp(1, 8192).min(p.iters.min(8192) as u32)
        };
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
            // UD: the receives start 40 bytes before a cache line and end up to a line later.
            let tail = if p.grh_room() > 0 {
                agreed.line.max(p.grh_room())
            } else {
                0
            };
            let mr = pd
                .register_mr((2 * layout.half + tail) as usize, access)
                .map_err(CliError::Verbs)?;
            let qp = match p.conn {
                Connection::Rc => create_rc_qp(
                    &pd,
                    &cq,
                    Queues {
                        send_wr: tx_depth,
                        recv_wr: rx_depth,
                        inline: args.inline_size,
                    },
                    AccessFlags::REMOTE_WRITE
                        | AccessFlags::REMOTE_READ
                        | AccessFlags::REMOTE_ATOMIC,
                )?,
                Connection::Uc => {
                    // perftest's UC QP: REMOTE_WRITE only, no inline.
                    let q = Queues {
                        send_wr: tx_depth,
                        recv_wr: rx_depth,
                        inline: 0,
                    };
                    let qp = create_qp(&pd, &cq, QpType::Uc, q).map_err(CliError::Verbs)?;
                    qp.init(AccessFlags::REMOTE_WRITE)
                        .map_err(CliError::Verbs)?;
                    qp
                }
                Connection::Ud => super::ud::create_ud_qp(
                    &pd,
                    &cq,
                    Queues {
                        send_wr: tx_depth,
                        recv_wr: rx_depth,
                        inline: args.inline_size,
                    },
                )?,
            };
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
                qp: Arc::new(qp),
                mr,
                mine,
                remote: mine,
                ah: None,
            });
        }
        let t = Test {
            p,
            layout,
            conns,
            cq,
            ctx,
            // --reversed swaps who generates the traffic, not who listens.
            is_client: (role == Role::Client) != p.reversed,
            timeout,
            tx_depth,
            rx_depth,
            failure: None,
            verified: (0, 0),
            // perftest: with a post list, the list's last WR is the signaled one.
            cq_mod: args
                .cq_mod
                .unwrap_or(args.post_list)
                .clamp(1, tx_depth.max(1)),
            post_list: args.post_list.min(tx_depth.max(1)),
            inline: args.inline_size as u64,
            warm: args.perform_warm_up,
            cycle: agreed.cycle,
            line: agreed.line,
            pd,
            progress: Progress::new(args.qp_timeout),
            heard: (0, 0),
            roce_port: args.device.roce_port,
            qp_timeout: args.qp_timeout,
            retry_cnt: args.retry_cnt,
        };
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
        Ok(t)
    }

    /// Exchanges the keys and connects every QP, with the barriers in the program's order
    /// (under -R, rdma_cm connects the QPs first: [`Test::connect_rdma_cm`]).
    /// Returns the first QP's keys, which the later barriers carry.
    pub(super) fn connect(
        &mut self,
        x: &mut Exchange,
        mtu: Mtu,
        args: &PerfArgs,
        cm: Option<&mut super::rdma_cm::Session>,
    ) -> Result<KeyMsg, CliError> {
        let by_cm = match cm {
            Some(s) if s.connects_qps() => {
                self.connect_rdma_cm(x, s, args)?;
                true
            }
            _ => false,
        };
        let prog = self.p.prog;
        let p = self.p;
        let k0 = self.conns[0].mine;
        let lat_rdma = matches!(
            prog,
            Program::WriteLat | Program::ReadLat | Program::AtomicLat
        );
        if lat_rdma {
            self.conns[0].remote = self.hs(x, &k0)?;
        }
        for i in 0..self.conns.len() {
            let mine = self.conns[i].mine;
            self.conns[i].remote = self.hs(x, &mine)?;
        }
        if by_cm {
            // rdma_cm connected the QPs (Test::connect_rdma_cm).
        } else if p.conn == Connection::Ud {
            self.connect_ud(args)?;
        } else {
            for c in &self.conns {
                connect(c, mtu, args)?;
            }
        }
        if args.full_report() {
            // Under -R the QPs' MTU is the one rdma_cm set, not the exchanged -m.
            let mtu_bytes = if by_cm {
                self.conns[0].qp.query().path_mtu.bytes()
            } else {
                mtu.bytes()
            };
            print_banner(&p, mtu_bytes)?;
            let mine: Vec<KeyMsg> = self.conns.iter().map(|c| c.mine).collect();
            let theirs: Vec<KeyMsg> = self.conns.iter().map(|c| c.remote).collect();
            print_addresses(p.op, &mine, &theirs)?;
        }
        let c = |name: &str| self.ctx.counter(name).unwrap_or(0);
        self.heard = (c("rcvd_pkts"), c("timeouts"));
        let send_style = matches!(prog, Program::SendBw | Program::SendLat);
        if send_style {
            self.hs(x, &k0)?;
        }
        for i in 0..self.conns.len() {
            let mine = self.conns[i].mine;
            self.hs(x, &mine)?;
        }
        if !send_style {
            self.hs(x, &k0)?;
        } else if !p.all {
            // Receives first, then a barrier, so that no SEND meets an empty queue (under -a
            // ib_send_bw does so for every size: `Test::run_bw`).
            self.post_receives()?;
            self.hs(x, &k0)?;
        }
        Ok(k0)
    }

    /// The receives a SEND program posts before its barrier: rx_depth per QP, at the
    /// receiving server of ib_send_bw and at both ends of ib_send_lat and ib_send_bw -b.
    pub(super) fn post_receives(&self) -> Result<(), CliError> {
        if self.p.prog == Program::SendLat || !self.is_client || self.p.duplex {
            let first = (self.rx_depth as u64).min(if self.p.duration.is_some() {
                u64::MAX
            } else {
                self.p.iters
            });
            for c in 0..self.conns.len() {
                for m in 0..first {
                    self.post_recv(c, m)?;
                }
            }
        }
        Ok(())
    }

    /// Moves to message size `size` under -a: perftest's addresses for it in the same buffers.
    /// Without -a, the layout agreed at setup stays.
    pub(super) fn set_size(&mut self, size: u64) {
        if !self.p.all {
            return;
        }
        let l = Layout::perftest(size, self.cycle, self.line);
        self.p.size = size;
        self.layout = Layout {
            half: self.layout.half,
            ..l
        };
    }
}

/// The most messages one run times (4 GiB of timestamps).
pub(super) const MAX_MESSAGES: u64 = 1 << 27;

/// Room reserved up front for per-message timestamps; more grows as the run goes.
pub(super) const PREALLOCATED_TIMESTAMPS: usize = 1 << 20;

/// A random 48-bit seed for the PSNs.
fn psn_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ ((std::process::id() as u64) << 24)) & ((1 << 48) - 1)
}

fn connect(c: &Conn, mtu: Mtu, args: &PerfArgs) -> Result<(), CliError> {
    // perftest's ctx_connect: our max_dest_rd_atomic is what we told the peer, our
    // max_rd_atomic what the peer told us; hop limit 0xFF (the route's replaces it on the wire)
    // and --tclass (every packet's IP TOS) in the address vector. UC: the AV, MTU, QPN and
    // PSNs only.
    let r = c.remote;
    let traffic_class = args.tclass.unwrap_or(0);
    if args.connection == Connection::Uc {
        let uc = RcConnect {
            path_mtu: mtu,
            hop_limit: 0xFF,
            traffic_class,
            ..RcConnect::new(r.qpn, r.psn, r.gid, c.mine.psn)
        };
        c.qp.ready_to_receive_uc(&uc)
            .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTR: {e}")))?;
        return c
            .qp
            .ready_to_send_uc(&uc)
            .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTS: {e}")));
    }
    let rc = RcConnect {
        path_mtu: mtu,
        hop_limit: 0xFF,
        traffic_class,
        max_rd_atomic: r.out_reads.clamp(1, 128) as u8,
        max_dest_rd_atomic: c.mine.out_reads.clamp(1, 128) as u8,
        timeout: args.qp_timeout,
        retry_cnt: args.retry_cnt,
        ..RcConnect::new(r.qpn, r.psn, r.gid, c.mine.psn)
    };
    connect_rc(&c.qp, &rc)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
