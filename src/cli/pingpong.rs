//! `softroce pingpong`: ibv_rc_pingpong's behaviour, flags, out-of-band exchange and output,
//! so that it runs against ibv_rc_pingpong on a kernel rxe peer in either role; with
//! `--transport uc` or `--transport ud`, ibv_uc_pingpong's and ibv_ud_pingpong's.
//!
//! uc_pingpong.c is rc_pingpong.c with a UC QP (RTR takes the AV, path MTU, destination QP and
//! receive PSN only; RTS the send PSN only) and without `-c`. ud_pingpong.c: a UD QP with Q_Key
//! 0x11111111, no `-m` (the port's MTU bounds the message size: "Requested size larger than
//! port MTU"), a buffer of SIZE + 40 bytes whose first 40 receive the GRH area, SENDs of SIZE
//! bytes from offset 40 through an address handle (hop limit 1) made after the exchange, and a
//! local-address line with ": GID" where the others print ", GID".
//!
//! As rdma-core's libibverbs/examples/rc_pingpong.c: one buffer of SIZE bytes (filled with
//! 0x7b) is both the send source and the receive target; the client sends first; each side
//! posts the next SEND once its previous SEND and a RECEIVE have completed; ITERS messages go
//! each way; receives are replenished when fewer than two remain posted.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::Args;
use softroce::ib::*;
use softroce::oob::pingpong::{client_exchange, server_exchange, PingpongDest};
use softroce::verbs::*;
use std::result::Result;

use super::activity::PeerActivity;
use super::device::DeviceArgs;
use super::qp_setup::{connect_rc, create_qp, create_rc_qp, Queues};
use super::CliError;

#[path = "pingpong_srq.rs"]
mod srq;

const RECV_WRID: u64 = 1;
/// CQ polls before blocking (see [`poll_or_wait`]).
const SPIN_POLLS: u32 = 50;
const SEND_WRID: u64 = 2;

/// The transport of `softroce pingpong`: which of the rdma-core pingpong programs it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PpTransport {
    /// ibv_rc_pingpong.
    Rc,
    /// ibv_uc_pingpong.
    Uc,
    /// ibv_ud_pingpong.
    Ud,
}

/// ud_pingpong.c's Q_Key.
const UD_QKEY: u32 = 0x1111_1111;
/// Bytes in front of a UD receive buffer that hold the GRH area.
const GRH: u32 = 40;

/// ibv_rc_pingpong's options.
#[derive(Debug, Clone, Args)]
pub struct PingpongArgs {
    /// Transport: rc (ibv_rc_pingpong), uc (ibv_uc_pingpong) or ud (ibv_ud_pingpong).
    #[arg(long = "transport", value_enum, default_value = "rc")]
    pub transport: PpTransport,
    /// Run as ibv_srq_pingpong: NUM_QP RC QPs sharing one shared receive queue.
    #[arg(long = "srq")]
    pub srq: bool,
    /// Number of QPs with --srq (ibv_srq_pingpong -q).
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    pub num_qp: u32,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Device name (accepted for compatibility; softroce has one device per --bind address).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the device (must be 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    pub size: u32,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// Service level.
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local GID index (softroce's GID table has the device address at 0 and 1).
    #[arg(short = 'g', long = "gid-idx", default_value_t = 1)]
    pub gid_idx: u8,
    /// Validate the received buffer (as ibv_rc_pingpong -c: the client zeroes the first byte
    /// of every page; at the end softroce checks every byte of the buffer, on either side).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Give up when no completion arrives for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Device options.
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Server to connect to; without it, act as the server.
    pub server: Option<String>,
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, CliError> {
    use std::net::ToSocketAddrs;
    (host, port)
        .to_socket_addrs()
        .map_err(|e| CliError::Usage(format!("cannot resolve {host}: {e}")))?
        .next()
        .ok_or_else(|| CliError::Usage(format!("{host} has no address")))
}

/// The two result lines of rdma-core's pingpong programs: bytes both ways and the time per
/// iteration.
pub(super) fn print_rate(
    out: &mut impl Write,
    args: &PingpongArgs,
    elapsed: std::time::Duration,
) -> Result<(), CliError> {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = args.size as u64 * args.iters as u64 * 2;
    writeln!(
        out,
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        bytes,
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    )
    .map_err(CliError::Output)?;
    writeln!(
        out,
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        args.iters,
        usec / 1e6,
        usec / args.iters as f64
    )
    .map_err(CliError::Output)
}

/// The PSN ibv_rc_pingpong draws (`lrand48() & 0xffffff`): different for every run.
pub(super) fn random_psn() -> u32 {
    softroce::wire::psn::random_start().value()
}

struct Pp {
    ctx: Context,
    pd: ProtectionDomain,
    mr: MemoryRegion,
    cq: CompletionQueue,
    qp: QueuePair,
    size: u32,
    rx_depth: u32,
    transport: PpTransport,
    /// UD: the address handle of the peer and its QP number (set by `connect`).
    ud_dest: std::cell::RefCell<Option<(AddressHandle, u32)>>,
}

impl Pp {
    fn new(args: &PingpongArgs, ip: IpAddr) -> Result<Pp, CliError> {
        let ctx = args.device.open(ip)?;
        let ud = args.transport == PpTransport::Ud;
        if ud {
            // ud_pingpong.c pp_init_ctx: the message must fit the port's active MTU.
            let mtu = ctx.limits().max_mtu.bytes();
            if args.size > mtu {
                return Err(CliError::Failed(format!(
                    "Requested size larger than port MTU ({mtu})"
                )));
            }
        }
        let buf = args.size as u64 + if ud { GRH as u64 } else { 0 };
        let pd = ctx.alloc_pd().map_err(CliError::Verbs)?;
        let mr = pd
            .register_mr(buf.max(1) as usize, AccessFlags::LOCAL_WRITE)
            .map_err(CliError::Verbs)?;
        mr.fill(0, buf, 0x7b).map_err(CliError::Verbs)?;
        let cq = ctx
            .create_cq(args.rx_depth as usize + 1)
            .map_err(CliError::Verbs)?;
        let qp = match args.transport {
            PpTransport::Rc => create_rc_qp(
                &pd,
                &cq,
                Queues {
                    send_wr: 1,
                    recv_wr: args.rx_depth,
                    inline: 0,
                },
                AccessFlags::EMPTY,
            )?,
            t => {
                let qp_type = if t == PpTransport::Uc {
                    QpType::Uc
                } else {
                    QpType::Ud
                };
                let q = Queues {
                    send_wr: 1,
                    recv_wr: args.rx_depth,
                    inline: 0,
                };
                let qp = create_qp(&pd, &cq, qp_type, q)
                    .map_err(|e| CliError::Failed(format!("Couldn't create QP: {e}")))?;
                let init = if t == PpTransport::Uc {
                    qp.init(AccessFlags::EMPTY)
                } else {
                    qp.modify(
                        &QpAttr {
                            qp_state: QpState::Init,
                            pkey_index: 0,
                            port_num: 1,
                            qkey: UD_QKEY,
                            ..Default::default()
                        },
                        QpAttrMask::STATE
                            | QpAttrMask::PKEY_INDEX
                            | QpAttrMask::PORT
                            | QpAttrMask::QKEY,
                    )
                };
                init.map_err(|e| CliError::Failed(format!("Failed to modify QP to INIT: {e}")))?;
                qp
            }
        };
        Ok(Pp {
            ctx,
            pd,
            mr,
            cq,
            qp,
            size: args.size,
            rx_depth: args.rx_depth,
            transport: args.transport,
            ud_dest: std::cell::RefCell::new(None),
        })
    }

    fn post_recv(&self, n: u32) -> Result<u32, CliError> {
        let len = if self.transport == PpTransport::Ud {
            self.size + GRH
        } else {
            self.size
        };
        let sge = [self.mr.sge(0, len)];
        for i in 0..n {
            let wr = RecvWr {
                wr_id: RECV_WRID,
                sg_list: &sge,
            };
            if self.qp.post_recv(std::slice::from_ref(&wr)).is_err() {
                return Ok(i);
            }
        }
        Ok(n)
    }

    fn post_send(&self) -> Result<(), CliError> {
        let fail = |e: PostError| CliError::Failed(format!("couldn't post send: {e}"));
        if self.transport == PpTransport::Ud {
            let dest = self.ud_dest.borrow();
            let Some((ah, qpn)) = dest.as_ref() else {
                return Err(CliError::Failed(
                    "couldn't post send: no address handle".into(),
                ));
            };
            let sge = [self.mr.sge(GRH as u64, self.size)];
            let wr = UdSendWr {
                wr: SendWr {
                    wr_id: SEND_WRID,
                    sg_list: &sge,
                    opcode: WrOpcode::Send,
                    send_flags: SendFlags::SIGNALED,
                },
                ah,
                remote_qpn: *qpn,
                remote_qkey: UD_QKEY,
            };
            return self
                .qp
                .post_send_ud(std::slice::from_ref(&wr))
                .map_err(fail);
        }
        let sge = [self.mr.sge(0, self.size)];
        let wr = SendWr {
            wr_id: SEND_WRID,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        };
        self.qp.post_send(std::slice::from_ref(&wr)).map_err(fail)
    }

    /// pp_connect_ctx: RTR then RTS with ibv_rc_pingpong's attributes.
    fn connect(
        &self,
        args: &PingpongArgs,
        my_psn: u32,
        dest: &PingpongDest,
        mtu: Mtu,
    ) -> Result<(), CliError> {
        let c = RcConnect {
            path_mtu: mtu,
            sgid_index: args.gid_idx,
            ..RcConnect::new(dest.qpn, dest.psn, dest.gid, my_psn)
        };
        match self.transport {
            PpTransport::Rc => connect_rc(&self.qp, &c),
            PpTransport::Uc => {
                self.qp
                    .ready_to_receive_uc(&c)
                    .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTR: {e}")))?;
                self.qp
                    .ready_to_send_uc(&c)
                    .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTS: {e}")))
            }
            PpTransport::Ud => {
                self.qp
                    .modify(
                        &QpAttr {
                            qp_state: QpState::Rtr,
                            ..Default::default()
                        },
                        QpAttrMask::STATE,
                    )
                    .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTR: {e}")))?;
                self.qp
                    .modify(
                        &QpAttr {
                            qp_state: QpState::Rts,
                            sq_psn: my_psn,
                            ..Default::default()
                        },
                        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
                    )
                    .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTS: {e}")))?;
                let ah = self
                    .pd
                    .create_ah(&AhAttr {
                        dgid: dest.gid,
                        sgid_index: args.gid_idx,
                        hop_limit: 1,
                        sl: args.sl,
                        ..Default::default()
                    })
                    .map_err(|e| CliError::Failed(format!("Failed to create AH: {e}")))?;
                *self.ud_dest.borrow_mut() = Some((ah, dest.qpn));
                Ok(())
            }
        }
    }
}

fn print_dest(
    out: &mut impl Write,
    which: &str,
    d: &PingpongDest,
    transport: PpTransport,
) -> Result<(), CliError> {
    writeln!(
        out,
        // rc_pingpong aligns the two lines: "local address:  LID" / "remote address: LID";
        // ud_pingpong's local line has ": GID" where every other line has ", GID".
        "  {which} address:{}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{} GID {}",
        if which == "local" { "  " } else { " " },
        d.lid,
        d.qpn,
        d.psn,
        if which == "local" && transport == PpTransport::Ud {
            ":"
        } else {
            ","
        },
        std::net::Ipv6Addr::from(d.gid.0)
    )
    .map_err(CliError::Output)
}

/// Runs `softroce pingpong`.
pub fn run(args: &PingpongArgs) -> Result<(), CliError> {
    let mtu = validate(args)?;
    if args.srq {
        return srq::run_srq(args, mtu);
    }
    let server_addr = match &args.server {
        Some(h) => Some(resolve(h, args.port)?),
        None => None,
    };
    let ip = args.device.local_ip(server_addr.map(|a| a.ip()))?;
    let pp = Pp::new(args, ip)?;
    let _report = args.device.counter_report(&pp.ctx);
    let routs = pp.post_recv(pp.rx_depth)?;
    if routs < pp.rx_depth {
        return Err(CliError::Failed(format!("Couldn't post receive ({routs})")));
    }
    let mut out = std::io::stdout().lock();
    exchange_and_connect(args, &pp, ip, server_addr, mtu, &mut out)?;
    let (took, unconfirmed) = ping_pong(args, &pp, server_addr.is_some(), routs)?;
    print_rate(&mut out, args, took)?;
    if args.chk {
        check_buffer(&pp, args.size, &mut out)?;
    }
    if unconfirmed {
        return Err(CliError::Unconfirmed(
            "our last SEND was never acknowledged and the client went silent: ibv_rc_pingpong \
             exits once it has received it, so a lost final ACK leaves its delivery \
             unconfirmed (the client's own report says whether it arrived)"
                .into(),
        ));
    }
    linger(&pp.ctx);
    Ok(())
}

/// The flags ibv_rc_pingpong (and its UC/UD siblings) would refuse; the path MTU.
fn validate(args: &PingpongArgs) -> Result<Mtu, CliError> {
    args.device.validate()?;
    let mtu = Mtu::from_bytes(args.mtu).ok_or_else(|| {
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
    // The largest RC message is 2^31 bytes (IBTA 9.4: DMA length is 31 bits for RC).
    if args.size > 1 << 31 {
        return Err(CliError::Usage(format!(
            "-s {}: a message is at most 2^31 bytes",
            args.size
        )));
    }
    if args.srq {
        return Ok(mtu);
    }
    if args.chk && args.transport != PpTransport::Rc {
        return Err(CliError::Usage(
            "-c is an ibv_rc_pingpong option (ibv_uc_pingpong and ibv_ud_pingpong have none)"
                .into(),
        ));
    }
    if args.rx_depth == 0 || args.iters == 0 {
        return Err(CliError::Usage(
            "rx-depth and iters must be positive".into(),
        ));
    }
    Ok(mtu)
}

/// Prints this end's address, exchanges addresses with the peer over TCP (connecting to
/// `server_addr`, or listening), connects the QP and prints the peer's address, as
/// ibv_rc_pingpong does.
fn exchange_and_connect(
    args: &PingpongArgs,
    pp: &Pp,
    ip: IpAddr,
    server_addr: Option<SocketAddr>,
    mtu: Mtu,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let gid = pp.ctx.gid(args.gid_idx).ok_or_else(|| {
        CliError::Usage(format!("-g {}: no such GID index (0 or 1)", args.gid_idx))
    })?;
    let my = PingpongDest {
        lid: 0,
        qpn: pp.qp.qp_num(),
        psn: random_psn(),
        gid,
    };
    print_dest(out, "local", &my, args.transport)?;
    let io_timeout = Duration::from_secs(args.timeout.max(1));
    let rem = match server_addr {
        Some(addr) => {
            let mut s = TcpStream::connect_timeout(&addr, io_timeout)
                .map_err(|e| CliError::Failed(format!("Couldn't connect to {addr}: {e}")))?;
            let rem = client_exchange(&mut s, &my, io_timeout).map_err(CliError::Oob)?;
            pp.connect(args, my.psn, &rem, mtu)?;
            rem
        }
        None => {
            let listener = TcpListener::bind(SocketAddr::new(ip, args.port)).map_err(|e| {
                CliError::Failed(format!("Couldn't listen to port {}: {e}", args.port))
            })?;
            let (mut s, _) = listener.accept().map_err(CliError::Io)?;
            let mut connect_err = None;
            server_exchange(&mut s, &my, io_timeout, |rem| {
                pp.connect(args, my.psn, rem, mtu).map_err(|e| {
                    let msg = e.to_string();
                    connect_err = Some(e);
                    msg
                })
            })
            .map_err(|e| connect_err.take().unwrap_or(CliError::Oob(e)))?
        }
    };
    print_dest(out, "remote", &rem, args.transport)?;
    out.flush().map_err(CliError::Output)
}

/// The ping-pong itself: the client sends first; each end sends once its previous SEND and
/// the peer's next message have both completed, -n times, reposting receives as they run low.
/// `routs` receives are posted. Returns how long it took (from the first SEND, as
/// ibv_rc_pingpong times it) and whether our last SEND stayed unconfirmed (the server's case
/// of [`FinalAckWait`]).
fn ping_pong(
    args: &PingpongArgs,
    pp: &Pp,
    is_client: bool,
    mut routs: u32,
) -> Result<(Duration, bool), CliError> {
    let mut pending = RECV_WRID;
    if is_client {
        if args.chk {
            // As ibv_rc_pingpong -c: the client zeroes the first byte of every page before
            // the first send; the buffer then travels back and forth unchanged.
            for page in 0..(args.size as u64).div_ceil(PAGE_SIZE) {
                pp.mr
                    .fill(page * PAGE_SIZE, 1, 0)
                    .map_err(CliError::Verbs)?;
            }
        }
        pp.post_send()?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let io_timeout = Duration::from_secs(args.timeout.max(1));
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wcs = [WorkCompletion::default(); 2];
    let mut idle_since = Instant::now();
    // Once every message has arrived, only our last SEND may be outstanding (see
    // `final_ack_lost`).
    let mut last_ack: Option<FinalAckWait> = None;
    let mut unconfirmed = false;
    while rcnt < args.iters || scnt < args.iters {
        let n = poll_or_wait(&pp.cq, &mut wcs, args.events).map_err(CliError::Verbs)?;
        if n == 0 {
            if rcnt == args.iters && scnt + 1 == args.iters {
                let wait = last_ack.get_or_insert_with(|| FinalAckWait::new(&pp.ctx));
                match wait.verdict(&pp.ctx, is_client) {
                    Some(FinalAck::Delivered) => {
                        // The server answers message k only after receiving it: its last
                        // answer, which we hold, proves our last SEND arrived.
                        eprintln!(
                            "note: the server's ACK of our last SEND never came; its last reply \
                             (sent after receiving that SEND) proves delivery"
                        );
                        scnt += 1;
                        continue;
                    }
                    Some(FinalAck::Unconfirmed) => {
                        scnt += 1;
                        unconfirmed = true;
                        continue;
                    }
                    None => {}
                }
            }
            if idle_since.elapsed() > io_timeout {
                return Err(silent_peer(args.timeout, rcnt, scnt));
            }
            continue;
        }
        idle_since = Instant::now();
        for wc in &wcs[..n] {
            check_status(wc)?;
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += pp.post_recv(pp.rx_depth - routs)?;
                        if routs < pp.rx_depth {
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
            pending &= !wc.wr_id;
            if scnt < args.iters && pending == 0 {
                pp.post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    Ok((start.elapsed(), unconfirmed))
}

/// How the wait for the ACK of our last SEND ended.
enum FinalAck {
    /// The peer's last message proves ours arrived (we are the client).
    Delivered,
    /// The peer went silent and nothing proves ours arrived (we are the server).
    Unconfirmed,
}

/// The wait for the ACK of our last SEND after every message has arrived. ibv_rc_pingpong
/// exits as soon as its counts are reached; if its ACK of our last SEND is lost, our
/// retransmissions meet a destroyed QP and, with retry_cnt 7 (unlimited in rxe, which we
/// follow), would go on until --timeout. Seen in the interop suite at 5% loss.
struct FinalAckWait {
    since: Instant,
    peer: PeerActivity,
}

/// How long we wait for the ACK of our last SEND before concluding: many of ibv_rc_pingpong's
/// 67 ms retransmission timeouts.
const FINAL_ACK_GRACE: Duration = Duration::from_secs(2);

impl FinalAckWait {
    fn new(ctx: &Context) -> FinalAckWait {
        FinalAckWait {
            since: Instant::now(),
            peer: PeerActivity::new(ctx),
        }
    }

    /// `None` while it is worth waiting.
    fn verdict(&mut self, ctx: &Context, is_client: bool) -> Option<FinalAck> {
        if self.since.elapsed() < FINAL_ACK_GRACE || self.peer.silent_for(ctx) < FINAL_ACK_GRACE {
            return None;
        }
        Some(if is_client {
            FinalAck::Delivered
        } else {
            FinalAck::Unconfirmed
        })
    }
}

/// Keeps the QP alive after the last completion until the peer has been quiet for
/// `LINGER_QUIET` (at most `LINGER_MAX`). Our last ACK may be lost; the peer then retransmits
/// its last SEND and needs a live QP to ACK it again. ibv_rc_pingpong exits at once, and with
/// retry_cnt 7 (unlimited in rxe) a peer whose final ACK was lost retransmits forever: seen in
/// the interop suite at 5% loss. Like TCP's TIME_WAIT, lingering answers those duplicates.
fn linger(ctx: &Context) {
    let start = Instant::now();
    let mut peer = PeerActivity::new(ctx);
    while start.elapsed() < LINGER_MAX && peer.silent_for(ctx) < LINGER_QUIET {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long the peer must be silent before `linger` lets the QP go: a few of ibv_rc_pingpong's
/// 67 ms retransmission timeouts.
const LINGER_QUIET: Duration = Duration::from_millis(300);
/// The most `linger` waits.
const LINGER_MAX: Duration = Duration::from_secs(3);

/// The page size ibv_rc_pingpong's -c works in (sysconf(_SC_PAGESIZE) on x86-64 Linux).
const PAGE_SIZE: u64 = 4096;

/// The end-of-run check of `-c`. ibv_rc_pingpong's server checks that the first byte of every
/// page is 0 and prints "invalid data in page N" otherwise (its exit status stays 0). softroce
/// checks every byte, on both sides (the client gets the server's echo back): the first byte
/// of each page 0, every other byte the 0x7b both tools fill with; a mismatch prints the same
/// message and is an error (exit 1).
fn check_buffer(pp: &Pp, size: u32, out: &mut impl Write) -> Result<(), CliError> {
    let got = pp.mr.to_vec(0, size as usize).map_err(CliError::Verbs)?;
    let mut bad = 0;
    for (page, chunk) in got.chunks(PAGE_SIZE as usize).enumerate() {
        let ok = chunk[0] == 0 && chunk[1..].iter().all(|&b| b == 0x7b);
        if !ok {
            writeln!(out, "invalid data in page {page}").map_err(CliError::Output)?;
            bad += 1;
        }
    }
    if bad > 0 {
        return Err(CliError::Failed(format!(
            "-c: {bad} page(s) of the received buffer differ from what the client sent"
        )));
    }
    Ok(())
}

/// Polls the CQ; without `events`, spins briefly first (ibv_rc_pingpong busy-polls), then
/// blocks for at most 10 ms so that a lost peer is noticed. The spin is short because here the
/// "NIC" is the engine thread: on a machine with few cores, a long spin steals the CPU that
/// would produce the completion (measured on 2 cores: 184 us/iter with a 2000-poll spin, 117
/// when blocking at once).
pub fn poll_or_wait(
    cq: &CompletionQueue,
    out: &mut [WorkCompletion],
    events: bool,
) -> Result<usize, VerbsError> {
    if !events {
        for _ in 0..SPIN_POLLS {
            let n = cq.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
    }
    match cq.wait(out, Duration::from_millis(10)) {
        Ok(n) => Ok(n),
        Err(VerbsError::Timeout) => Ok(0),
        Err(e) => Err(e),
    }
}

/// rdma-core's "Failed status" error for a completion that did not succeed.
pub(super) fn check_status(wc: &WorkCompletion) -> Result<(), CliError> {
    if wc.status == WcStatus::Success {
        return Ok(());
    }
    Err(CliError::Failed(format!(
        "Failed status {} ({}) for wr_id {}",
        wc.status, wc.status as u32, wc.wr_id
    )))
}

/// The error of a run whose completions stopped for `--timeout` seconds.
pub(super) fn silent_peer(timeout: u64, rcnt: u32, scnt: u32) -> CliError {
    CliError::Failed(format!(
        "no completion for {timeout} s (rcnt={rcnt}, scnt={scnt})"
    ))
}
