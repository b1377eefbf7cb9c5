//! `softroce rping`: librdmacm's rping, connecting through the connection manager (IB CM MADs
//! over QP1) instead of a side channel, with rping's flags, exchange and output, so that
//! either end may be rping on kernel rxe.
//!
//! Each ping (rping.c): the client SENDs the address, rkey and size of its source buffer
//! (16 bytes, big-endian); the server RDMA-READs that buffer, SENDs a go-ahead, receives the
//! client's sink buffer the same way, RDMA-WRITEs what it read there and SENDs a go-ahead
//! again. `-v` prints the data at both ends, `-V` makes the client compare source and sink.

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use softroce::ib::*;
use softroce::rdma_cm::{CmId, ConnParam, EventChannel, EventKind, RdmaCmError, RdmaCmEvent};
use softroce::verbs::*;
use softroce::wire::cm::rej_reason;
use std::result::Result;

use super::device::DeviceArgs;
use super::CliError;

/// rping's largest buffer (RPING_BUFSIZE) and smallest ("rdma-ping-%d: " and INT_MAX).
const BUFSIZE: usize = 64 * 1024;
const MIN_BUFSIZE: usize = 26;
/// RPING_SQ_DEPTH.
const SQ_DEPTH: u32 = 16;
/// How long a step may wait for the peer before rping gives up (rping itself waits forever;
/// a bound keeps scripts and tests from hanging on a vanished peer). Connecting waits for the
/// CM instead, which reports a silent server as unreachable after its REQ retries.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// Beyond the CM's own patience, how long a connect waits for the CM's verdict.
const CM_VERDICT_MARGIN: Duration = Duration::from_secs(5);

/// `softroce rping` flags: rping's.
#[derive(Debug, Args)]
pub struct RpingArgs {
    /// Server side.
    #[arg(short = 's', conflicts_with = "client")]
    pub server: bool,
    /// Client side.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address: the server's to connect to (client), or the one to listen on (server).
    #[arg(short = 'a', value_name = "ADDR")]
    pub addr: Option<String>,
    /// Source address to bind to (client).
    #[arg(short = 'I', value_name = "ADDR")]
    pub source: Option<IpAddr>,
    /// Port (rdma_cm's TCP port space).
    #[arg(short = 'p', value_name = "PORT", default_value_t = 7174)]
    pub port: u16,
    /// Ping count (0: forever).
    #[arg(short = 'C', value_name = "COUNT", default_value_t = 0)]
    pub count: u32,
    /// Ping data size.
    #[arg(short = 'S', value_name = "SIZE", default_value_t = 64)]
    pub size: usize,
    /// Display ping data to stdout.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    pub validate: bool,
    /// Debug printfs.
    #[arg(short = 'd')]
    pub debug: bool,
    /// Persistent server mode (refused: one connection per run).
    #[arg(short = 'P')]
    pub persistent: bool,
    /// Use a self-created, self-modified QP (refused: the CM moves the QP).
    #[arg(short = 'q')]
    pub self_create_qp: bool,
    /// The softroce device.
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// rping_rdma_info: where a buffer is, big-endian on the wire.
fn info_bytes(addr: u64, rkey: u32, size: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&size.to_be_bytes());
    b
}

fn parse_info(b: &[u8]) -> (u64, u32, u32) {
    let addr = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
    let rkey = u32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
    let size = u32::from_be_bytes(b[12..16].try_into().unwrap_or_default());
    (addr, rkey, size)
}

/// The client's ping `ping`: "rdma-ping-N: " then letters from `start`, cycling A..z, NUL
/// terminated (rping_test_client).
fn ping_text(ping: u32, start: u8, size: usize) -> Vec<u8> {
    let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
    buf.truncate(size.saturating_sub(1));
    let mut c = start;
    while buf.len() < size {
        buf.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    buf[size - 1] = 0;
    buf
}

/// The bytes before the first NUL, as text.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn resolve(host: &str) -> Result<IpAddr, CliError> {
    if let Ok(ip) = host.parse() {
        return Ok(ip);
    }
    (host, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| a.ip())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "getaddrinfo failed - invalid hostname or IP address: {host}"
            ))
        })
}

fn cm(e: RdmaCmError) -> CliError {
    CliError::Failed(e.to_string())
}

/// The rdma_cm event name rping prints (`rdma_event_str`).
fn event_name(k: &EventKind) -> &'static str {
    match k {
        EventKind::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
        EventKind::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        EventKind::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
        EventKind::Established => "RDMA_CM_EVENT_ESTABLISHED",
        EventKind::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
        EventKind::Rejected { .. } => "RDMA_CM_EVENT_REJECTED",
        EventKind::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
        EventKind::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
        EventKind::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    }
}

/// One end's verbs resources (rping_setup_qp, rping_setup_buffers).
struct Ping {
    side: &'static str,
    debug: bool,
    ch: EventChannel,
    id: CmId,
    cq: CompletionQueue,
    qp: Arc<QueuePair>,
    recv_mr: MemoryRegion,
    send_mr: MemoryRegion,
    rdma_mr: MemoryRegion,
    /// The client's source buffer.
    start_mr: Option<MemoryRegion>,
    disconnected: bool,
}

/// What a wait ended with.
enum Step {
    Completion,
    Disconnected,
}

impl Ping {
    fn setup(
        ctx: &Context,
        ch: EventChannel,
        id: CmId,
        size: usize,
        side: &'static str,
        debug: bool,
    ) -> Result<Ping, CliError> {
        let pd = ctx.alloc_pd().map_err(CliError::Verbs)?;
        let cq = ctx
            .create_cq(SQ_DEPTH as usize * 2)
            .map_err(CliError::Verbs)?;
        let qp = id
            .create_qp(
                &pd,
                &QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    cap: QpCap {
                        max_send_wr: SQ_DEPTH,
                        max_recv_wr: 2,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    qp_type: QpType::Rc,
                    sq_sig_all: false,
                },
            )
            .map_err(cm)?;
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let reg = |len, access| pd.register_mr(len, access).map_err(CliError::Verbs);
        let p = Ping {
            side,
            debug,
            recv_mr: reg(16, AccessFlags::LOCAL_WRITE)?,
            send_mr: reg(16, AccessFlags::empty())?,
            rdma_mr: reg(size, rw)?,
            start_mr: if side == "client" {
                Some(reg(size, rw)?)
            } else {
                None
            },
            ch,
            id,
            cq,
            qp,
            disconnected: false,
        };
        p.post_recv()?;
        Ok(p)
    }

    fn post_recv(&self) -> Result<(), CliError> {
        let sge = [self.recv_mr.sge(0, 16)];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &sge,
            }])
            .map_err(|e| CliError::Failed(format!("post recv error: {e}")))
    }

    fn post(&self, sge: Sge, opcode: WrOpcode) -> Result<(), CliError> {
        let sges = [sge];
        self.qp
            .post_send(&[SendWr {
                wr_id: 0,
                sg_list: &sges,
                opcode,
                send_flags: SendFlags::SIGNALED,
            }])
            .map_err(|e| CliError::Failed(format!("post send error {e}")))
    }

    /// SENDs the 16-byte buffer description of `mr` (rping_format_send).
    fn send_info(&self, mr: Option<&MemoryRegion>, size: usize) -> Result<(), CliError> {
        let info = match mr {
            Some(m) => info_bytes(m.addr(), m.rkey(), size as u32),
            // The server's go-ahead carries its send buffer as it is: never formatted.
            None => [0u8; 16],
        };
        self.send_mr.write(0, &info).map_err(CliError::Verbs)?;
        self.post(self.send_mr.sge(0, 16), WrOpcode::Send)
    }

    /// Reports a CM event as rping's event handler does; true if it ends the connection.
    fn on_event(&mut self, e: &RdmaCmEvent) -> bool {
        if self.debug {
            println!("cma_event type {}", event_name(&e.kind));
        }
        match e.kind {
            EventKind::Disconnected => {
                eprintln!("{} DISCONNECT EVENT...", self.side);
                self.disconnected = true;
                true
            }
            EventKind::Rejected { reason } => {
                eprintln!("cma event {}, error {reason}", event_name(&e.kind));
                true
            }
            EventKind::Unreachable => {
                eprintln!("cma event {}, error -110", event_name(&e.kind));
                true
            }
            _ => false,
        }
    }

    /// Waits for the next successful completion (SEND completions are consumed on the way),
    /// watching the CM for a disconnection.
    fn wait_for(&mut self, want: WcOpcode) -> Result<Step, CliError> {
        let start = Instant::now();
        let mut wc = [WorkCompletion::default(); 1];
        loop {
            // The CM first, at every turn: a disconnection ends the wait at once, whatever the
            // CQ still holds (librdmacm's rping handles CM events on their own thread and
            // wakes the pinging one on DISCONNECTED).
            match self.ch.get_event(Duration::ZERO) {
                Ok(e) => {
                    if self.on_event(&e) {
                        return Ok(Step::Disconnected);
                    }
                }
                Err(RdmaCmError::Timeout) => {}
                Err(e) => return Err(cm(e)),
            }
            let n = match self.cq.wait(&mut wc, Duration::from_millis(5)) {
                Ok(n) => n,
                Err(VerbsError::Timeout) => 0,
                Err(e) => return Err(CliError::Verbs(e)),
            };
            if n == 1 {
                let w = wc[0];
                if w.status == WcStatus::WrFlushErr {
                    continue;
                }
                if w.status != WcStatus::Success {
                    return Err(CliError::Failed(format!(
                        "cq completion failed status {}",
                        w.status as u32
                    )));
                }
                if w.opcode == WcOpcode::Recv {
                    if w.byte_len != 16 {
                        return Err(CliError::Failed(format!(
                            "Received bogus data, size {}",
                            w.byte_len
                        )));
                    }
                    self.post_recv()?;
                }
                if w.opcode == want {
                    return Ok(Step::Completion);
                }
                if w.opcode == WcOpcode::Send {
                    continue;
                }
                return Err(CliError::Failed(format!(
                    "unexpected completion {:?} while waiting for {want:?}",
                    w.opcode
                )));
            }
            if start.elapsed() > STEP_TIMEOUT {
                return Err(CliError::Failed(format!(
                    "no {want:?} completion from the peer in {} s",
                    STEP_TIMEOUT.as_secs()
                )));
            }
        }
    }

    /// Waits for a CM event of `kind`, reporting others as rping does.
    fn wait_event(&mut self, kind: EventKind) -> Result<RdmaCmEvent, CliError> {
        let end = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let e = self.ch.get_event(left).map_err(cm)?;
            if e.kind == kind {
                if self.debug {
                    println!("cma_event type {}", event_name(&e.kind));
                }
                return Ok(e);
            }
            if self.on_event(&e) {
                return Err(CliError::Failed(format!(
                    "wait for {} got {}",
                    event_name(&kind),
                    event_name(&e.kind)
                )));
            }
        }
    }

    /// With `-d`: the connection's communication IDs and QPN, which any CM message about it
    /// must name (and which a third host would have to learn: spec-notes/security.md).
    fn debug_ids(&self) {
        if let (true, Some((local, remote))) = (self.debug, self.id.comm_ids()) {
            println!(
                "cm_id local comm ID 0x{local:08x} remote comm ID 0x{remote:08x} qpn 0x{:06x}",
                self.qp.qp_num()
            );
        }
    }

    /// The CM's counters as one line (nonzero ones), for `--counters`.
    fn cm_counter_line(&self) -> String {
        let mut line = String::from("cm counters:");
        for (name, v) in self.ch.cm_counters().snapshot() {
            if v != 0 {
                line.push_str(&format!(" {name}={v}"));
            }
        }
        line
    }

    /// rping_disconnect, then a wait for the CM to finish (the DREQ answered, or our DREP
    /// sent and time-wait over) so that the peer hears of it before we exit.
    fn disconnect(&mut self) {
        let _ = self.id.disconnect();
        let end = Instant::now() + Duration::from_secs(3);
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.ch.get_event(left) {
                Ok(e) if e.kind == EventKind::TimewaitExit => return,
                Ok(e) => {
                    self.on_event(&e);
                }
                Err(_) => return,
            }
        }
    }
}

/// Runs `softroce rping`.
pub fn run(args: &RpingArgs) -> Result<(), CliError> {
    if args.persistent {
        return Err(CliError::Usage(
            "-P (persistent server) is not supported: softroce rping serves one connection per run"
                .into(),
        ));
    }
    if args.self_create_qp {
        return Err(CliError::Usage(
            "-q (self-created QP) is not supported: the connection manager moves the QP".into(),
        ));
    }
    if !(MIN_BUFSIZE..BUFSIZE).contains(&args.size) {
        return Err(CliError::Usage(format!(
            "Invalid size {} (valid range is {MIN_BUFSIZE} to {BUFSIZE})",
            args.size
        )));
    }
    args.device.validate()?;
    match (args.server, args.client) {
        (true, _) => server(args),
        (false, true) => client(args),
        _ => Err(CliError::Usage(
            "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n\
             rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]"
                .into(),
        )),
    }
}

fn server(args: &RpingArgs) -> Result<(), CliError> {
    let ip = match &args.addr {
        Some(a) => resolve(a)?,
        None => args.device.local_ip(None)?,
    };
    let ctx = args.device.open(ip)?;
    let _report = args.device.counter_report(&ctx);
    let ch = EventChannel::new(&ctx).map_err(cm)?;
    let listener = ch.create_id();
    listener.bind_addr(args.port).map_err(cm)?;
    listener.listen(3).map_err(cm)?;
    if args.debug {
        // rping's debug line, printed once the listen took effect (rping prints it just
        // before), so that a script may start its client on seeing it.
        println!("rdma_listen");
    }
    // Wait for a connect request (as rping, without a bound: a server waits for its client).
    let req = loop {
        match ch.get_event(Duration::from_secs(3600)) {
            Ok(e) if e.kind == EventKind::ConnectRequest => break e,
            Ok(_) | Err(RdmaCmError::Timeout) => continue,
            Err(e) => return Err(cm(e)),
        }
    };
    let mut p = Ping::setup(&ctx, ch, req.id.clone(), args.size, "server", args.debug)?;
    p.id.accept(&ConnParam::default()).map_err(cm)?;
    p.wait_event(EventKind::Established)?;
    p.debug_ids();
    let result = serve(&mut p, args);
    if !p.disconnected {
        if let Err(e) = &result {
            eprintln!("rping server failed: {e}");
        }
    }
    p.disconnect();
    if args.device.counters {
        eprintln!("{}", p.cm_counter_line());
    }
    result
}

fn serve(p: &mut Ping, args: &RpingArgs) -> Result<(), CliError> {
    loop {
        // The client's source buffer.
        let Step::Completion = p.wait_for(WcOpcode::Recv)? else {
            return Ok(());
        };
        let mut info = [0u8; 16];
        p.recv_mr.read(0, &mut info).map_err(CliError::Verbs)?;
        let (addr, rkey, len) = parse_info(&info);
        let len = (len as usize).min(args.size) as u32;
        p.post(
            p.rdma_mr.sge(0, len),
            WrOpcode::RdmaRead {
                remote_addr: addr,
                rkey,
            },
        )?;
        let Step::Completion = p.wait_for(WcOpcode::RdmaRead)? else {
            return Ok(());
        };
        let data = p.rdma_mr.to_vec(0, args.size).map_err(CliError::Verbs)?;
        if args.verbose {
            println!("server ping data: {}", c_str(&data));
        }
        p.send_info(None, args.size)?;
        // The client's sink buffer.
        let Step::Completion = p.wait_for(WcOpcode::Recv)? else {
            return Ok(());
        };
        p.recv_mr.read(0, &mut info).map_err(CliError::Verbs)?;
        let (addr, rkey, _) = parse_info(&info);
        let text_len = data.iter().position(|&b| b == 0).unwrap_or(data.len() - 1) + 1;
        p.post(
            p.rdma_mr.sge(0, text_len as u32),
            WrOpcode::RdmaWrite {
                remote_addr: addr,
                rkey,
            },
        )?;
        let Step::Completion = p.wait_for(WcOpcode::RdmaWrite)? else {
            return Ok(());
        };
        p.send_info(None, args.size)?;
    }
}

fn client(args: &RpingArgs) -> Result<(), CliError> {
    let Some(addr) = &args.addr else {
        return Err(CliError::Usage(
            "the client needs -a ADDR (the server)".into(),
        ));
    };
    let server_ip = resolve(addr)?;
    let ip = match args.source {
        Some(ip) => ip,
        None => args.device.local_ip(Some(server_ip))?,
    };
    let ctx = args.device.open(ip)?;
    let _report = args.device.counter_report(&ctx);
    let ch = EventChannel::new(&ctx).map_err(cm)?;
    let id = ch.create_id();
    id.resolve_addr(server_ip, args.port).map_err(cm)?;
    let mut p = Ping::setup(&ctx, ch, id, args.size, "client", args.debug)?;
    p.wait_event(EventKind::AddrResolved)?;
    p.id.resolve_route().map_err(cm)?;
    p.wait_event(EventKind::RouteResolved)?;
    p.id.connect(&ConnParam::default()).map_err(cm)?;
    connected(&mut p, server_ip, args)?;
    p.debug_ids();
    let result = pings(&mut p, args);
    if let Err(e) = &result {
        eprintln!("rping client failed: {e}");
    }
    p.disconnect();
    if args.device.counters {
        eprintln!("{}", p.cm_counter_line());
    }
    result
}

/// Waits for the connection to come up, or for the CM's verdict on it: a REJ from the server
/// (at once), or no answer to any of the CM's REQ retransmissions (unreachable, as Linux's CM
/// reports it). The error names the address tried and what the CM heard.
fn connected(p: &mut Ping, server: IpAddr, args: &RpingArgs) -> Result<(), CliError> {
    let patience = p.id.connect_patience();
    let whom = format!(
        "{server} port {} (RoCE UDP port {})",
        args.port, args.device.roce_port
    );
    let end = Instant::now() + patience + CM_VERDICT_MARGIN;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let e = match p.ch.get_event(left) {
            Ok(e) => e,
            Err(RdmaCmError::Timeout) => {
                return Err(CliError::Failed(format!(
                    "connect error: no answer from {whom} and no verdict from the CM in {} s",
                    (patience + CM_VERDICT_MARGIN).as_secs()
                )))
            }
            Err(e) => return Err(CliError::Failed(format!("connect error: {whom}: {e}"))),
        };
        if p.debug {
            println!("cma_event type {}", event_name(&e.kind));
        }
        match e.kind {
            EventKind::Established => return Ok(()),
            EventKind::Rejected { reason } => {
                eprintln!("cma event {}, error {reason}", event_name(&e.kind));
                let why = if reason == rej_reason::INVALID_SERVICE_ID {
                    "nobody listens on that port"
                } else {
                    rej_reason::name(reason)
                };
                return Err(CliError::Failed(format!(
                    "connect error: {whom} rejected the connection: reason {reason} ({why})"
                )));
            }
            EventKind::Unreachable => {
                eprintln!("cma event {}, error -110", event_name(&e.kind));
                return Err(CliError::Failed(format!(
                    "connect error: {whom} is unreachable: no answer to the CM's connect \
                     request in {} s of retries",
                    patience.as_secs()
                )));
            }
            _ => {}
        }
    }
}

fn pings(p: &mut Ping, args: &RpingArgs) -> Result<(), CliError> {
    let Some(start_mr) = p.start_mr.take() else {
        return Err(CliError::Failed("the client has no source buffer".into()));
    };
    let mut start = 65u8;
    let mut ping = 0u32;
    while args.count == 0 || ping < args.count {
        let text = ping_text(ping, start, args.size);
        start = if start >= 122 { 65 } else { start + 1 };
        start_mr.write(0, &text).map_err(CliError::Verbs)?;
        p.send_info(Some(&start_mr), args.size)?;
        let Step::Completion = p.wait_for(WcOpcode::Recv)? else {
            return Err(CliError::Failed(
                "disconnected in the middle of a ping".into(),
            ));
        };
        p.send_info(Some(&p.rdma_mr), args.size)?;
        let Step::Completion = p.wait_for(WcOpcode::Recv)? else {
            return Err(CliError::Failed(
                "disconnected in the middle of a ping".into(),
            ));
        };
        let sink = p.rdma_mr.to_vec(0, args.size).map_err(CliError::Verbs)?;
        if args.validate && sink != text {
            return Err(CliError::Failed("data mismatch!".into()));
        }
        if args.verbose {
            println!("ping data: {}", c_str(&sink));
        }
        ping += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings() {
        let t = ping_text(0, 65, 64);
        assert_eq!(t.len(), 64);
        assert_eq!(
            c_str(&t),
            "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        // The letters wrap from 'z' back to 'A'.
        let t = ping_text(12, 121, 30);
        assert_eq!(c_str(&t), "rdma-ping-12: yzABCDEFGHIJKLM");
    }

    #[test]
    fn info_is_big_endian() {
        let b = info_bytes(0x0102_0304_0506_0708, 0x1125, 64);
        assert_eq!(b[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[8..12], [0, 0, 0x11, 0x25]);
        assert_eq!(parse_info(&b), (0x0102_0304_0506_0708, 0x1125, 64));
    }
}
