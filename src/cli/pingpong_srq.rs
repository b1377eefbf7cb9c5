//! `softroce pingpong --srq`: ibv_srq_pingpong (rdma-core libibverbs/examples/srq_pingpong.c).
//!
//! NUM_QP RC QPs (default 16) share one shared receive queue of RX_DEPTH receive WRs; the
//! buffer (zeroed) is both send source and receive target. The exchange writes 256 addresses
//! each way (srq_pingpong.c's MAX_QP; those past the QPs in use are all zero), then "done".
//! Every QP connects to the peer's QP of the same index, with the GID of the peer's first
//! address (srq_pingpong.c uses `dest->gid` for all). The client sends first on every QP;
//! each QP posts its next SEND once its previous SEND and a receive on it have completed;
//! ITERS counts completions over all QPs, as srq_pingpong.c does (its usage says "per QP");
//! receives are replenished when at most NUM_QP remain posted.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use softroce::ib::*;
use softroce::oob::pingpong::{client_exchange_srq, server_exchange_srq, PingpongDest, SRQ_MAX_QP};
use softroce::verbs::*;
use std::result::Result;

use super::{
    check_status, linger, poll_or_wait, print_dest, print_rate, random_psn, resolve, silent_peer,
    PingpongArgs, PpTransport, RECV_WRID, SEND_WRID,
};
use crate::cli::CliError;

struct SrqPp {
    ctx: Context,
    mr: MemoryRegion,
    cq: CompletionQueue,
    srq: SharedReceiveQueue,
    qps: Vec<QueuePair>,
    size: u32,
}

impl SrqPp {
    fn post_recv(&self, n: u32) -> u32 {
        let sge = [self.mr.sge(0, self.size)];
        for i in 0..n {
            let wr = RecvWr {
                wr_id: RECV_WRID,
                sg_list: &sge,
            };
            if self.srq.post_recv(std::slice::from_ref(&wr)).is_err() {
                return i;
            }
        }
        n
    }

    fn post_send(&self, i: usize) -> Result<(), CliError> {
        let sge = [self.mr.sge(0, self.size)];
        let wr = SendWr {
            wr_id: SEND_WRID,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        };
        self.qps[i]
            .post_send(std::slice::from_ref(&wr))
            .map_err(|_| CliError::Failed("Couldn't post send".into()))
    }

    /// pp_connect_ctx: every QP to the peer's QP of the same index.
    fn connect(
        &self,
        args: &PingpongArgs,
        mtu: Mtu,
        my: &[PingpongDest],
        dest: &[PingpongDest],
    ) -> Result<(), CliError> {
        for (i, qp) in self.qps.iter().enumerate() {
            let c = RcConnect {
                path_mtu: mtu,
                sgid_index: args.gid_idx,
                ..RcConnect::new(dest[i].qpn, dest[i].psn, dest[0].gid, my[i].psn)
            };
            qp.ready_to_receive(&c)
                .map_err(|e| CliError::Failed(format!("Failed to modify QP[{i}] to RTR: {e}")))?;
            qp.ready_to_send(&c)
                .map_err(|e| CliError::Failed(format!("Failed to modify QP[{i}] to RTS: {e}")))?;
        }
        Ok(())
    }
}

/// Runs `softroce pingpong --srq`.
pub(super) fn run_srq(args: &PingpongArgs, mtu: Mtu) -> Result<(), CliError> {
    validate(args)?;
    let server_addr = match &args.server {
        Some(h) => Some(resolve(h, args.port)?),
        None => None,
    };
    let ip = args.device.local_ip(server_addr.map(|a| a.ip()))?;
    let pp = SrqPp::new(args, ip)?;
    let _report = args.device.counter_report(&pp.ctx);
    let routs = pp.post_recv(args.rx_depth);
    if routs < args.rx_depth {
        return Err(CliError::Failed(format!("Couldn't post receive ({routs})")));
    }
    let mut out = std::io::stdout().lock();
    let (my, rem) = exchange(args, &pp, ip, server_addr, mtu, &mut out)?;
    if server_addr.is_some() {
        pp.connect(args, mtu, &my, &rem)?;
    }
    let took = ping_pong(args, &pp, server_addr.is_some(), routs)?;
    print_rate(&mut out, args, took)?;
    linger(&pp.ctx);
    Ok(())
}

/// What ibv_srq_pingpong refuses.
fn validate(args: &PingpongArgs) -> Result<(), CliError> {
    if args.transport != PpTransport::Rc {
        return Err(CliError::Usage(
            "--srq is ibv_srq_pingpong, which runs RC QPs only".into(),
        ));
    }
    if args.chk {
        return Err(CliError::Usage(
            "-c is an ibv_rc_pingpong option (ibv_srq_pingpong has none)".into(),
        ));
    }
    let num_qp = args.num_qp;
    if num_qp == 0 || num_qp as usize > SRQ_MAX_QP {
        return Err(CliError::Usage(format!(
            "-q {num_qp}: between 1 and {SRQ_MAX_QP} QPs"
        )));
    }
    if args.size < 1 {
        return Err(CliError::Usage("-s: the size must be at least 1".into()));
    }
    if num_qp > args.rx_depth {
        return Err(CliError::Failed(format!(
            "rx_depth {} is too small for {num_qp} QPs -- must have at least one receive per QP.",
            args.rx_depth
        )));
    }
    Ok(())
}

impl SrqPp {
    /// The device, CQ, SRQ and -q RC QPs in INIT sharing it, as ibv_srq_pingpong's pp_init_ctx.
    fn new(args: &PingpongArgs, ip: IpAddr) -> Result<SrqPp, CliError> {
        let num_qp = args.num_qp;
        let ctx = args.device.open(ip)?;
        let pd = ctx.alloc_pd().map_err(CliError::Verbs)?;
        let mr = pd
            .register_mr(args.size as usize, AccessFlags::LOCAL_WRITE)
            .map_err(CliError::Verbs)?;
        let cq = ctx
            .create_cq((args.rx_depth + num_qp) as usize)
            .map_err(|_| CliError::Failed("Couldn't create CQ".into()))?;
        let srq = pd
            .create_srq(&SrqAttr {
                max_wr: args.rx_depth,
                max_sge: 1,
                srq_limit: 0,
            })
            .map_err(|e| CliError::Failed(format!("Couldn't create SRQ: {e}")))?;
        let mut qps = Vec::with_capacity(num_qp as usize);
        for i in 0..num_qp {
            let qp = pd
                .create_qp_with_srq(
                    &QpInitAttr {
                        send_cq: &cq,
                        recv_cq: &cq,
                        cap: QpCap {
                            max_send_wr: 1,
                            max_recv_wr: 0,
                            max_send_sge: 1,
                            max_recv_sge: 0,
                            max_inline_data: 0,
                        },
                        qp_type: QpType::Rc,
                        sq_sig_all: false,
                    },
                    &srq,
                )
                .map_err(|e| CliError::Failed(format!("Couldn't create QP[{i}]: {e}")))?;
            qp.init(AccessFlags::EMPTY)
                .map_err(|e| CliError::Failed(format!("Failed to modify QP[{i}] to INIT: {e}")))?;
            qps.push(qp);
        }
        let pp = SrqPp {
            ctx,
            mr,
            cq,
            srq,
            qps,
            size: args.size,
        };
        Ok(pp)
    }
}

/// Prints this end's addresses (one per QP), exchanges them with the peer over TCP and prints
/// the peer's; the server connects its QPs inside the exchange, as ibv_srq_pingpong's does.
/// Returns both ends' addresses.
fn exchange(
    args: &PingpongArgs,
    pp: &SrqPp,
    ip: IpAddr,
    server_addr: Option<SocketAddr>,
    mtu: Mtu,
    out: &mut impl Write,
) -> Result<(Vec<PingpongDest>, Vec<PingpongDest>), CliError> {
    let num_qp = args.num_qp;
    let gid = pp.ctx.gid(args.gid_idx).ok_or_else(|| {
        CliError::Usage(format!("-g {}: no such GID index (0 or 1)", args.gid_idx))
    })?;
    let mut my = Vec::with_capacity(num_qp as usize);
    for (i, qp) in pp.qps.iter().enumerate() {
        let d = PingpongDest {
            lid: 0,
            qpn: qp.qp_num(),
            psn: random_psn() ^ (i as u32).wrapping_mul(0x9E37_79B1) & 0xFF_FFFF,
            gid,
        };
        print_dest(out, "local", &d, PpTransport::Rc)?;
        my.push(d);
    }
    out.flush().map_err(CliError::Output)?;
    let io_timeout = Duration::from_secs(args.timeout.max(1));
    let rem = match server_addr {
        Some(addr) => {
            let mut s = TcpStream::connect_timeout(&addr, io_timeout)
                .map_err(|e| CliError::Failed(format!("Couldn't connect to {addr}: {e}")))?;
            client_exchange_srq(&mut s, &my, io_timeout).map_err(CliError::Oob)?
        }
        None => {
            let listener = TcpListener::bind(SocketAddr::new(ip, args.port)).map_err(|e| {
                CliError::Failed(format!("Couldn't listen to port {}: {e}", args.port))
            })?;
            let (mut s, _) = listener.accept().map_err(CliError::Io)?;
            let mut connect_err = None;
            server_exchange_srq(&mut s, &my, io_timeout, |rem| {
                pp.connect(args, mtu, &my, rem).map_err(|e| {
                    let msg = e.to_string();
                    connect_err = Some(e);
                    msg
                })
            })
            .map_err(|e| connect_err.take().unwrap_or(CliError::Oob(e)))?
        }
    };
    for d in &rem[..num_qp as usize] {
        print_dest(out, "remote", d, PpTransport::Rc)?;
    }
    out.flush().map_err(CliError::Output)?;
    Ok((my, rem))
}

/// The ping-pong over every QP: each QP sends once its previous SEND and its peer's next
/// message have both completed; receives come from the shared queue, reposted as they run
/// low. Returns how long it took from the first SENDs.
fn ping_pong(
    args: &PingpongArgs,
    pp: &SrqPp,
    is_client: bool,
    mut routs: u32,
) -> Result<Duration, CliError> {
    let num_qp = args.num_qp;
    let io_timeout = Duration::from_secs(args.timeout.max(1));
    let mut pending = vec![RECV_WRID; num_qp as usize];
    if is_client {
        for (i, p) in pending.iter_mut().enumerate() {
            pp.post_send(i)?;
            *p = SEND_WRID | RECV_WRID;
        }
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wcs = vec![WorkCompletion::default(); (num_qp + args.rx_depth) as usize];
    let mut idle_since = Instant::now();
    while rcnt < args.iters || scnt < args.iters {
        let n = poll_or_wait(&pp.cq, &mut wcs, args.events).map_err(CliError::Verbs)?;
        if n == 0 {
            if idle_since.elapsed() > io_timeout {
                return Err(silent_peer(args.timeout, rcnt, scnt));
            }
            continue;
        }
        idle_since = Instant::now();
        for wc in &wcs[..n] {
            check_status(wc)?;
            let Some(qi) = pp.qps.iter().position(|q| q.qp_num() == wc.qp_num) else {
                return Err(CliError::Failed(format!(
                    "Couldn't find QPN {:06x}",
                    wc.qp_num
                )));
            };
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= num_qp {
                        routs += pp.post_recv(args.rx_depth - routs);
                        if routs < args.rx_depth {
                            return Err(CliError::Failed(format!(
                                "Couldn't post receive ({routs})"
                            )));
                        }
                    }
                    rcnt += 1;
                }
                other => {
                    return Err(CliError::Failed(format!(
                        "Completion for unknown wr_id {other}"
                    )));
                }
            }
            pending[qi] &= !wc.wr_id;
            if scnt < args.iters && pending[qi] == 0 {
                pp.post_send(qi)?;
                pending[qi] = RECV_WRID | SEND_WRID;
            }
        }
    }
    Ok(start.elapsed())
}
