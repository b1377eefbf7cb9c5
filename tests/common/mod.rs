//! Helpers shared by the integration tests: device contexts over real sockets and one end's
//! verbs objects on them, QP1 datagrams built and sealed by hand, and the `softroce` binary run
//! as a child process (a server and its client, flag checks that must fail fast).
// Each test binary uses a subset.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use softroce::driver::DeviceConfig;
use softroce::ib::{AccessFlags, AhAttr, QpCap, QpType, WorkCompletion};
use softroce::verbs::{
    AddressHandle, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair,
    RcConnect,
};
use softroce::wire::{icrc, BthRepr, DethRepr, ExtHeaders, ImmDtRepr, Opcode, PacketRepr};

/// Opens `n` contexts on one free UDP port of 127.0.0.1, 127.0.0.2, ... (the same port, as
/// RoCE devices on different hosts all use 4791), each with its own engine and its
/// configuration as `configure` leaves it (given the last byte of the address). Retries with
/// another port if one of the addresses has it taken.
pub fn contexts_configured(n: u8, configure: impl Fn(u8, &mut DeviceConfig)) -> Vec<Context> {
    for _ in 0..50 {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let all: Vec<_> = (1..=n)
            .map(|i| {
                let mut cfg =
                    DeviceConfig::new(SocketAddr::new(IpAddr::from([127, 0, 0, i]), port));
                configure(i, &mut cfg);
                Context::open(&cfg)
            })
            .collect();
        if all.iter().all(|c| c.is_ok()) {
            return all.into_iter().map(|c| c.unwrap()).collect();
        }
    }
    panic!("no free UDP port for {n} contexts");
}

/// [`contexts_configured`] for `n` contexts, busy-polling or not.
pub fn contexts_with(n: u8, busy_poll: bool) -> Vec<Context> {
    contexts_configured(n, |_, cfg| cfg.busy_poll = busy_poll)
}

/// [`contexts_with`] for `n` blocking contexts.
pub fn contexts(n: u8) -> Vec<Context> {
    contexts_with(n, false)
}

/// Two contexts, on 127.0.0.1 and 127.0.0.2, configured as [`contexts_configured`] says.
pub fn two_contexts_configured(configure: impl Fn(u8, &mut DeviceConfig)) -> (Context, Context) {
    let mut v = contexts_configured(2, configure);
    let b = v.pop().unwrap();
    let a = v.pop().unwrap();
    (a, b)
}

/// Two contexts, on 127.0.0.1 and 127.0.0.2, busy-polling or not.
pub fn two_contexts_with(busy_poll: bool) -> (Context, Context) {
    two_contexts_configured(|_, cfg| cfg.busy_poll = busy_poll)
}

/// Two blocking contexts, on 127.0.0.1 and 127.0.0.2.
pub fn two_contexts() -> (Context, Context) {
    two_contexts_with(false)
}

/// One device's objects in a verbs test: its context, a PD, an MR on it, one CQ for both of
/// the QP's queues, and the QP.
pub struct End {
    /// The device.
    pub ctx: Context,
    /// The protection domain the MR and the QP belong to.
    pub pd: ProtectionDomain,
    /// The end's buffer.
    pub mr: MemoryRegion,
    /// The CQ of both queues.
    pub cq: CompletionQueue,
    /// The QP, in RESET as [`End::open`] leaves it.
    pub qp: QueuePair,
}

/// What [`End::open`] makes.
pub struct EndSpec {
    /// Bytes of the MR.
    pub mr_len: usize,
    /// The MR's access rights.
    pub mr_access: AccessFlags,
    /// Entries of the CQ.
    pub cq_len: usize,
    /// The QP's transport.
    pub qp_type: QpType,
    /// The QP's queue sizes.
    pub cap: QpCap,
    /// Whether every send is signaled.
    pub sq_sig_all: bool,
}

impl End {
    /// Makes an end on `ctx` as `spec` says; its QP stays in RESET.
    pub fn open(ctx: Context, spec: &EndSpec) -> End {
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd.register_mr(spec.mr_len, spec.mr_access).unwrap();
        let cq = ctx.create_cq(spec.cq_len).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                cap: spec.cap,
                qp_type: spec.qp_type,
                sq_sig_all: spec.sq_sig_all,
            })
            .unwrap();
        End {
            ctx,
            pd,
            mr,
            cq,
            qp,
        }
    }

    /// Connects this end's RC QP to `a_peer`'s and `a_peer`'s to this one's (INIT with
    /// `access` for the remote side, RTR, RTS; PSN 100 both ways, the peers' GID 1).
    pub fn connect_rc(&self, a_peer: &End, access: AccessFlags) {
        for (e, peer) in [(self, a_peer), (a_peer, self)] {
            e.qp.init(access).unwrap();
            let c = RcConnect::new(peer.qp.qp_num(), 100, peer.ctx.gid(1).unwrap(), 100);
            e.qp.ready_to_receive(&c).unwrap();
            e.qp.ready_to_send(&c).unwrap();
        }
    }

    /// An address handle on this end's PD for `peer`'s GID 0, hop limit 64: where a UD QP
    /// sends to reach `peer`.
    pub fn ah_to(&self, peer: &End) -> AddressHandle {
        self.pd
            .create_ah(&AhAttr {
                dgid: peer.ctx.gid(0).unwrap(),
                hop_limit: 64,
                ..Default::default()
            })
            .unwrap()
    }
}

/// QP queues `wr` deep (both), with one SGE per WR and no inline data.
pub fn queues(wr: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// The next completion on `cq`, which must come within `limit`.
pub fn wait_one(cq: &CompletionQueue, limit: Duration) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let n = cq
        .wait(&mut wc, limit)
        .unwrap_or_else(|e| panic!("a completion within {limit:?}: {e}"));
    assert_eq!(n, 1);
    wc[0]
}

/// `len` bytes of a pattern that differs with `seed` and along its length, so that a byte
/// placed at the wrong offset or taken from the wrong message shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(131).wrapping_add(seed * 17) >> 2) as u8)
        .collect()
}

/// The `softroce` binary this test build made.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_softroce")
}

/// The arguments `v` as owned strings, for a command line being built.
pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// One end's command line in a two-process run: `head`, then the flags that put it on `ip`
/// with its out-of-band exchange on TCP port `tcp` and RoCE on UDP port `udp`.
pub fn end_args(head: &[&str], tcp: u16, udp: u16, ip: &str) -> Vec<String> {
    let mut v = s(head);
    v.extend(s(&[
        "-p",
        &tcp.to_string(),
        "--roce-port",
        &udp.to_string(),
        "--bind",
        ip,
    ]));
    v
}

/// Runs `softroce` with `args`, which must fail within 5 s: the callers' runs have no peer, so
/// only a check of their flags or files can end them that soon. Returns the output.
pub fn fails_fast(args: &[&str]) -> Output {
    let t = Instant::now();
    let o = Command::new(bin()).args(args).output().unwrap();
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{args:?} took {:?} to fail",
        t.elapsed()
    );
    o
}

/// Runs the client command line `args` (each run given `limit`) until it gets past
/// connecting: a client started before its server listens fails at once with "connect to",
/// and is started again then, as a user would, for up to 10 s. Returns the last run's output.
pub fn client_until_connected(args: &[String], limit: Duration) -> Output {
    let t = Instant::now();
    loop {
        let out = finish(spawn(args), "client", limit);
        let refused = String::from_utf8_lossy(&out.stderr).contains("connect to");
        if out.status.success() || !refused || t.elapsed() > Duration::from_secs(10) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a server with `sv`, then its client with `cv` until it gets past connecting
/// ([`client_until_connected`], each run given `client_limit`), then waits up to
/// `server_limit` for the server. Returns the server's output and the client's.
pub fn server_then_client(
    sv: &[String],
    cv: &[String],
    client_limit: Duration,
    server_limit: Duration,
) -> (Output, Output) {
    let server = spawn(sv);
    let client = client_until_connected(cv, client_limit);
    (finish(server, "server", server_limit), client)
}

/// Runs the two-process command line `head` on fresh ports ([`ports`], [`end_args`]): its
/// server on 127.0.0.1 with `server_extra`, then its client on 127.0.0.2 with `client_extra`
/// and the server's address, as [`server_then_client`] does (each client run given
/// `client_limit`, the server `server_limit`). Returns the server's output, the client's and
/// the UDP port RoCE used.
pub fn two_ends(
    head: &[&str],
    server_extra: &[&str],
    client_extra: &[&str],
    client_limit: Duration,
    server_limit: Duration,
) -> (Output, Output, u16) {
    let (tcp, udp) = ports();
    let mut sv = end_args(head, tcp, udp, "127.0.0.1");
    sv.extend(s(server_extra));
    let mut cv = end_args(head, tcp, udp, "127.0.0.2");
    cv.extend(s(client_extra));
    cv.push("127.0.0.1".into());
    let (sv, c) = server_then_client(&sv, &cv, client_limit, server_limit);
    (sv, c, udp)
}

/// A free TCP port (for the out-of-band exchange) and a UDP port free on both 127.0.0.1 and
/// 127.0.0.2 (the RoCE port of two devices).
pub fn ports() -> (u16, u16) {
    let tcp = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for _ in 0..100 {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.2", port)).is_ok() {
            return (tcp, port);
        }
    }
    panic!("no UDP port free on both addresses");
}

/// Runs `softroce` with `args`, its output captured.
pub fn spawn(args: &[String]) -> Child {
    Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run softroce")
}

/// Waits for a child with a deadline; kills it (and fails) if it hangs.
pub fn finish(mut c: Child, what: &str, limit: Duration) -> Output {
    let t = Instant::now();
    loop {
        if c.try_wait().unwrap().is_some() {
            return c.wait_with_output().unwrap();
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "{what} hung; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child's stdout, after checking that it succeeded.
pub fn ok(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The `--counters` line of a run's stderr, by counter name.
pub fn counters(o: &Output) -> std::collections::HashMap<String, u64> {
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("counters:"))
        .unwrap_or_else(|| panic!("no counters line in:\n{err}"));
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("name=value");
            (k.to_string(), v.parse().expect("a count"))
        })
        .collect()
}

/// `softroce decode --json --port PORT PCAP`: one JSON value per packet (the run must succeed).
pub fn decode_json(pcap: &std::path::Path, port: u16) -> Vec<serde_json::Value> {
    let d = Command::new(bin())
        .args(["decode", "--json", "--port", &port.to_string()])
        .arg(pcap)
        .output()
        .unwrap();
    ok(&d, "decode")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A child's output read line by line as it comes, so that a test can wait for a line that
/// announces a state (a server's "listening") instead of sleeping.
pub struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    /// Every line received so far.
    pub seen: Vec<String>,
}

impl Lines {
    /// Reads `out` (a child's piped stdout or stderr) on a thread of its own.
    pub fn new(out: impl std::io::Read + Send + 'static) -> Lines {
        use std::io::BufRead;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits up to `limit` for a line for which `want` holds; returns it.
    pub fn wait_for(&mut self, limit: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
        let end = Instant::now() + limit;
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            let line = self.rx.recv_timeout(left).ok()?;
            self.seen.push(line.clone());
            if want(&line) {
                return Some(line);
            }
        }
    }

    /// Every line up to the end of the output (the child must have exited or be exiting),
    /// waiting at most `limit`.
    pub fn rest(&mut self, limit: Duration) -> &[String] {
        let end = Instant::now() + limit;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
        &self.seen
    }
}

/// The TOS of every IPv4 packet the capture `pcap` (Ethernet frames) saw arrive from `src`.
pub fn tos_from(pcap: &std::path::Path, src: std::net::Ipv4Addr) -> Vec<u8> {
    let f = std::io::BufReader::new(std::fs::File::open(pcap).unwrap());
    let mut r = softroce::capture::CaptureReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(fr) = r.next_frame().unwrap() {
        let ip = &fr.data[14..];
        if ip[0] >> 4 == 4 && ip[12..16] == src.octets() {
            v.push(ip[1]);
        }
    }
    v
}

/// The libibverbs shim (which is also librdmacm.so.1) this build made, for `softroce run
/// --lib`. `cargo test` from the workspace root builds it into target/<profile>/deps/ and
/// copies it up to target/<profile>/ only on `cargo build`, so the copy in deps/ is the
/// current one.
pub fn shim_lib() -> std::path::PathBuf {
    let dir = std::path::Path::new(bin()).parent().unwrap();
    let fresh = dir.join("deps").join("libibverbs.so");
    if fresh.is_file() {
        return fresh;
    }
    let built = dir.join("libibverbs.so");
    assert!(
        built.is_file(),
        "the shim is not built ({} nor {}): run the tests from the workspace root (cargo test), which builds it",
        fresh.display(),
        built.display()
    );
    built
}

/// `name` on PATH; a failure naming the Debian package that has it otherwise.
pub fn program(name: &str, package: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found: install {package} (scripts/setup.sh does)"))
}

/// A UD SEND ONLY (with immediate data 1 if `opcode` is UD_SEND_ONLY_WITH_IMMEDIATE) from QP1
/// to QP1 with Q_Key `qkey`, carrying `payload`: a MAD as a peer's CM sends it, or a broken one.
pub fn qp1_packet(opcode: Opcode, qkey: u32, payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: 0xffff,
            dest_qp: 1,
            ..BthRepr::default()
        },
        ext: ExtHeaders {
            deth: Some(DethRepr { qkey, src_qp: 1 }),
            imm: (opcode == Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).then_some(ImmDtRepr { imm: 1 }),
            ..ExtHeaders::default()
        },
        payload,
    }
}

/// `pkt`'s bytes as the UDP payload of a datagram from `from` to `to`, with the ICRC the
/// receiver will check (for the IPv4 and UDP headers the kernel builds for that datagram).
pub fn sealed(pkt: &PacketRepr, from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let mut buf = vec![0u8; pkt.buffer_len()];
    let n = pkt.emit(&mut buf).unwrap();
    buf.truncate(n);
    assert!(icrc::seal_socket_datagram(from, to, &mut buf));
    buf
}
