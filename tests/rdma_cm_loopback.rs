//! Two softroce devices (127.0.0.1 and 127.0.0.2, same UDP port) connecting through the
//! rdma_cm-shaped API: IB CM MADs over QP1, no side channel. Each test checks the events both
//! sides see, that the QPs carry data afterwards, and how the connection ends.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use softroce::ib::*;
use softroce::rdma_cm::*;
use softroce::verbs::*;
use softroce::wire::cm::rej_reason;
use softroce::wire::Opcode;

const T: Duration = Duration::from_secs(10);
const PORT: u16 = 7174;

mod common;
use common::{qp1_packet, sealed, two_contexts};

struct Res {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn res(ctx: &Context) -> Res {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mr = pd
        .register_mr(
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    Res { pd, cq, mr }
}

fn init(r: &Res) -> QpInitAttr<'_> {
    QpInitAttr {
        send_cq: &r.cq,
        recv_cq: &r.cq,
        cap: QpCap::default(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
    }
}

fn expect(ch: &EventChannel, kind: EventKind) -> RdmaCmEvent {
    let e = ch
        .get_event(T)
        .unwrap_or_else(|e| panic!("waiting for {kind:?}: {e}"));
    assert_eq!(e.kind, kind);
    e
}

/// Connection parameters carrying `data` as private data, the rest default.
fn carrying(data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: data.to_vec(),
        ..ConnParam::default()
    }
}

/// An event channel on each device.
fn channels(a: &Context, b: &Context) -> (EventChannel, EventChannel) {
    (EventChannel::new(a).unwrap(), EventChannel::new(b).unwrap())
}

/// An identifier in port space `ps` on `ch`, listening on PORT with room for `backlog`.
fn listen(ch: &EventChannel, ps: PortSpace, backlog: usize) -> CmId {
    let id = ch.create_id_in(ps);
    id.bind_addr(PORT).unwrap();
    id.listen(backlog).unwrap();
    id
}

/// Resolves `id`'s address (`ip`, `port`), then its route, each up to its event.
fn resolve(ch: &EventChannel, id: &CmId, ip: IpAddr, port: u16) {
    id.resolve_addr(ip, port).unwrap();
    expect(ch, EventKind::AddrResolved);
    id.resolve_route().unwrap();
    expect(ch, EventKind::RouteResolved);
}

/// Posts a receive of the first 4096 bytes of `r.mr` on `qp`.
fn post_recv(qp: &QueuePair, r: &Res, wr_id: u64) {
    qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: &[r.mr.sge(0, 4096)],
    }])
    .unwrap();
}

/// The client side up to (not including) connect: address and route resolved, QP created.
fn client(ch: &EventChannel, r: &Res, dst: &Context) -> (CmId, std::sync::Arc<QueuePair>) {
    let id = ch.create_id();
    resolve(ch, &id, dst.local_addr().ip(), PORT);
    let qp = id.create_qp(&r.pd, &init(r)).unwrap();
    assert_eq!(qp.query().qp_state, QpState::Init);
    (id, qp)
}

fn wait_wc(cq: &CompletionQueue) -> WorkCompletion {
    common::wait_one(cq, T)
}

#[test]
fn connect_send_and_disconnect_through_the_cm() {
    let (ca, cb) = two_contexts();
    let (cha, chb) = channels(&ca, &cb);
    let (ra, rb) = (res(&ca), res(&cb));

    let _listener = listen(&chb, PortSpace::Tcp, 8);

    let (id_a, qp_a) = client(&cha, &ra, &cb);
    id_a.connect(&carrying(b"hello")).unwrap();

    let req = expect(&chb, EventKind::ConnectRequest);
    assert!(req.listen_id.is_some());
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.private_data.len(), 56, "92 bytes less rdma_cm's header");
    let id_b = req.id.clone();
    assert_eq!(id_b.remote_addr().unwrap().ip(), ca.local_addr().ip());
    let qp_b = id_b.create_qp(&rb.pd, &init(&rb)).unwrap();
    // The server posts its receive before accepting, as rping does.
    post_recv(&qp_b, &rb, 7);
    id_b.accept(&carrying(b"welcome")).unwrap();
    assert_eq!(qp_b.query().qp_state, QpState::Rts);

    let est = expect(&cha, EventKind::Established);
    assert_eq!(&est.private_data[..7], b"welcome");
    assert_eq!(qp_a.query().qp_state, QpState::Rts);
    assert_eq!(qp_a.query().dest_qp_num, qp_b.qp_num());
    assert_eq!(qp_b.query().dest_qp_num, qp_a.qp_num());
    expect(&chb, EventKind::Established);

    // The connection carries data.
    ra.mr.write(0, b"ping over rdma_cm").unwrap();
    let sge = [ra.mr.sge(0, 17)];
    qp_a.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    assert_eq!(wait_wc(&ra.cq).status, WcStatus::Success);
    let wc = wait_wc(&rb.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, WcStatus::Success, 17)
    );
    let mut got = [0u8; 17];
    rb.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"ping over rdma_cm");

    // The client disconnects; the server hears it and answers.
    id_a.disconnect().unwrap();
    assert_eq!(qp_a.query().qp_state, QpState::Err);
    expect(&chb, EventKind::Disconnected);
    // The peer's DREQ leaves the QP to the application (the kernel's rdma_cm and
    // librdmacm do not touch it); its own disconnect moves it to ERROR.
    assert_eq!(qp_b.query().qp_state, QpState::Rts);
    id_b.disconnect().unwrap();
    assert_eq!(qp_b.query().qp_state, QpState::Err);
    expect(&cha, EventKind::Disconnected);
    expect(&cha, EventKind::TimewaitExit);
    expect(&chb, EventKind::TimewaitExit);
    // Every MAD went out and came in through QP1 without a drop.
    for c in [&ca, &cb] {
        assert_eq!(c.counter("gsi_dropped_pkts"), Some(0));
        assert_eq!(c.counter("icrc_err"), Some(0));
    }
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_rejected() {
    let (ca, cb) = two_contexts();
    let cha = EventChannel::new(&ca).unwrap();
    let _chb = EventChannel::new(&cb).unwrap();
    let ra = res(&ca);
    let (id, _qp) = client(&cha, &ra, &cb);
    id.connect(&ConnParam::default()).unwrap();
    let e = expect(
        &cha,
        EventKind::Rejected {
            reason: rej_reason::INVALID_SERVICE_ID,
        },
    );
    assert!(std::sync::Arc::ptr_eq(
        &e.id.qp().unwrap(),
        &id.qp().unwrap()
    ));
}

#[test]
fn the_application_can_reject_with_private_data() {
    let (ca, cb) = two_contexts();
    let (cha, chb) = channels(&ca, &cb);
    let ra = res(&ca);
    let _listener = listen(&chb, PortSpace::Tcp, 8);
    let (id, _qp) = client(&cha, &ra, &cb);
    id.connect(&ConnParam::default()).unwrap();
    let req = expect(&chb, EventKind::ConnectRequest);
    req.id.reject(b"no room").unwrap();
    let e = expect(
        &cha,
        EventKind::Rejected {
            reason: rej_reason::CONSUMER_DEFINED,
        },
    );
    assert_eq!(&e.private_data[..7], b"no room");
}

#[test]
fn misuse_is_a_typed_error() {
    let (ca, cb) = two_contexts();
    let cha = EventChannel::new(&ca).unwrap();
    assert_eq!(
        EventChannel::new(&ca).unwrap_err(),
        RdmaCmError::ChannelInUse
    );
    let id = cha.create_id();
    assert!(matches!(
        id.connect(&ConnParam::default()),
        Err(RdmaCmError::WrongState { op: "connect", .. })
    ));
    assert!(matches!(
        id.resolve_route(),
        Err(RdmaCmError::WrongState { .. })
    ));
    assert_eq!(
        id.resolve_addr("::1".parse().unwrap(), PORT),
        Err(RdmaCmError::AddressFamily("::1".parse().unwrap()))
    );
    assert!(matches!(
        id.accept(&ConnParam::default()),
        Err(RdmaCmError::WrongState { .. })
    ));
    assert!(matches!(
        id.disconnect(),
        Err(RdmaCmError::WrongState { .. })
    ));
    assert_eq!(
        cha.get_event(Duration::from_millis(50)).unwrap_err(),
        RdmaCmError::Timeout
    );
    let ra = res(&ca);
    let (id, _qp) = client(&cha, &ra, &cb);
    let long = carrying(&[0; 57]);
    assert!(matches!(
        id.connect(&long),
        Err(RdmaCmError::Cm(softroce::cm::CmError::PrivateDataTooLong {
            len: 57,
            max: 56
        }))
    ));
    // Dropping the channel frees the device for another.
    drop(cha);
    assert!(EventChannel::new(&ca).is_ok());
}

/// Device B (127.0.0.2) listening on PORT with a backlog of 1, and in device A's place a raw
/// socket on 127.0.0.1's RoCE port (reads timing out after `read_timeout`) that plays a peer's
/// CM by hand. Returns the socket, B's address, B, its channel and its listener.
fn raw_peer(read_timeout: Duration) -> (UdpSocket, SocketAddr, Context, EventChannel, CmId) {
    let (ca, cb) = two_contexts();
    let port = ca.local_addr().port();
    drop(ca); // the raw socket takes 127.0.0.1's RoCE port instead
    let raw = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    raw.set_read_timeout(Some(read_timeout)).unwrap();
    let chb = EventChannel::new(&cb).unwrap();
    let listener = listen(&chb, PortSpace::Tcp, 1);
    (
        raw,
        SocketAddr::from(([127, 0, 0, 2], port)),
        cb,
        chb,
        listener,
    )
}

/// Sends `payload` from the raw socket to QP1 at `to` ([`qp1_packet`]), sealed.
fn send_raw(raw: &UdpSocket, to: SocketAddr, opcode: Opcode, qkey: u32, payload: &[u8]) {
    let pkt = qp1_packet(opcode, qkey, payload);
    let buf = sealed(&pkt, raw.local_addr().unwrap(), to);
    raw.send_to(&buf, to).unwrap();
}

/// A REQ as Linux's CM sends it, from a raw socket: the accepted QP sends from the REQ's
/// starting PSN and receives from the one in its own REP (a starting PSN names what its
/// sender expects to receive, as in tests/data/rxe/rping.pcap).
#[test]
fn starting_psns_mean_what_they_mean_to_linux() {
    use softroce::wire::cm::{rdma_tcp_service_id, CmMessage, CmPath, CmReq};
    use softroce::wire::cma::CmaHeader;
    use softroce::wire::{mad, PacketRepr};

    let (raw, to, cb, chb, _listener) = raw_peer(T);
    let rb = res(&cb);

    let mut pd = [0u8; 92];
    CmaHeader {
        src_port: 40000,
        src_addr: "127.0.0.1".parse().unwrap(),
        dst_addr: "127.0.0.2".parse().unwrap(),
    }
    .emit(&mut pd)
    .unwrap();
    let gid = |ip: &str| Gid::from_ip(ip.parse().unwrap()).0;
    let req = CmReq {
        local_comm_id: 0xa246dc8e,
        service_id: rdma_tcp_service_id(PORT),
        local_ca_guid: 0x505400fffec0020b,
        local_qkey: 0,
        local_qpn: 0x1e,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x9c0b72,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary: CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: gid("127.0.0.1"),
            remote_gid: gid("127.0.0.2"),
            hop_limit: 64,
            local_ack_timeout: 19,
            ..CmPath::default()
        },
        alternate: CmPath::default(),
        sap_supported: false,
        private_data: pd,
    };
    let mut m = [0u8; mad::LEN];
    CmMessage::Req(req).emit(0x2_8edc_46a2, &mut m).unwrap();
    send_raw(&raw, to, Opcode::UD_SEND_ONLY, 0x8001_0000, &m);

    let ev = expect(&chb, EventKind::ConnectRequest);
    let qp = ev.id.create_qp(&rb.pd, &init(&rb)).unwrap();
    ev.id.accept(&ConnParam::default()).unwrap();
    assert_eq!(
        qp.query().sq_psn,
        0x9c0b72,
        "sends from the REQ's starting PSN"
    );
    assert_eq!(qp.query().dest_qp_num, 0x1e);
    // The REP: its starting PSN is where the QP receives from.
    let mut got = [0u8; 2048];
    let rep = loop {
        let (n, _) = raw.recv_from(&mut got).expect("a REP");
        let p = PacketRepr::parse(&got[..n]).unwrap();
        if let Ok((_, CmMessage::Rep(rep))) = CmMessage::parse(p.payload) {
            break rep;
        }
    };
    assert_eq!(rep.remote_comm_id, 0xa246dc8e);
    assert_eq!(rep.local_qpn, qp.qp_num());
    assert_eq!(qp.query().rq_psn, rep.starting_psn);
}

/// Bytes to QP1 that are not a CM MAD: dropped, counted, never answered, no state kept.
#[test]
fn malformed_mads_are_counted_and_dropped() {
    use softroce::wire::mad;

    let (raw, to, cb, chb, _listener) = raw_peer(Duration::from_millis(300));
    let send =
        |opcode: Opcode, qkey: u32, payload: &[u8]| send_raw(&raw, to, opcode, qkey, payload);
    // Too short to be a MAD; the wrong Q_Key; not a SEND ONLY: dropped by QP1.
    send(Opcode::UD_SEND_ONLY, 0x8001_0000, &[0u8; 100]);
    send(Opcode::UD_SEND_ONLY, 0x1234, &[0u8; mad::LEN]);
    send(
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
        0x8001_0000,
        &[0u8; mad::LEN],
    );
    // A MAD of another class and a CM MAD with an unknown attribute: dropped by the CM.
    let mut m = [0u8; mad::LEN];
    mad::MadRepr {
        mgmt_class: 0x03,
        ..mad::MadRepr::cm_send(1, 0x10)
    }
    .emit(&mut m)
    .unwrap();
    send(Opcode::UD_SEND_ONLY, 0x8001_0000, &m);
    mad::MadRepr::cm_send(1, 0x42).emit(&mut m).unwrap();
    send(Opcode::UD_SEND_ONLY, 0x8001_0000, &m);

    // Nothing comes back, no event, and each drop is counted where it happened.
    let mut buf = [0u8; 512];
    assert!(
        raw.recv_from(&mut buf).is_err(),
        "no answer to malformed MADs"
    );
    assert_eq!(
        chb.get_event(Duration::from_millis(100)).unwrap_err(),
        RdmaCmError::Timeout
    );
    assert_eq!(cb.counter("gsi_dropped_pkts"), Some(3));
    let c = chb.cm_counters();
    assert_eq!((c.mads_received, c.bad_mads), (2, 2));
}

#[test]
fn one_listener_takes_several_connections_to_qps_the_caller_made() {
    // perftest -R's shape: one port, a connection per data QP, QPs created (with remote
    // atomics) by the application and handed to rdma_cm with set_qp.
    let (ca, cb) = two_contexts();
    let (cha, chb) = channels(&ca, &cb);
    let (ra, rb) = (res(&ca), res(&cb));
    let listener = listen(&chb, PortSpace::Tcp, 4);
    let own_qp = |r: &Res| {
        let qp = std::sync::Arc::new(r.pd.create_qp(&init(r)).unwrap());
        qp.init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
            .unwrap();
        qp
    };
    let mut pairs = Vec::new();
    for i in 0..3u8 {
        let qa = own_qp(&ra);
        let id_a = cha.create_id();
        id_a.set_qp(qa.clone()).unwrap();
        // A second QP for the same identifier is misuse.
        assert!(matches!(
            id_a.set_qp(own_qp(&ra)),
            Err(RdmaCmError::WrongState { .. })
        ));
        resolve(&cha, &id_a, cb.local_addr().ip(), PORT);
        id_a.connect(&carrying(&[i])).unwrap();
        let req = expect(&chb, EventKind::ConnectRequest);
        assert!(req.listen_id.as_ref().unwrap().same(&listener));
        assert!(!req.id.same(&listener));
        assert_eq!(req.private_data[0], i);
        let qb = own_qp(&rb);
        req.id.set_qp(qb.clone()).unwrap();
        req.id.accept(&ConnParam::default()).unwrap();
        let est = expect(&cha, EventKind::Established);
        assert!(est.id.same(&id_a));
        assert_eq!(qa.query().dest_qp_num, qb.qp_num());
        expect(&chb, EventKind::Established);
        pairs.push((id_a, qa, req.id, qb));
    }
    // Each connection carries an atomic (the QP was the caller's, with remote atomics).
    let target = rb
        .pd
        .register_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC)
        .unwrap();
    for (k, (_, qa, _, _)) in pairs.iter().enumerate() {
        let sge = [ra.mr.sge(8 * k as u64, 8)];
        qa.post_send(&[SendWr {
            wr_id: k as u64,
            sg_list: &sge,
            opcode: WrOpcode::AtomicFetchAdd {
                remote_addr: target.addr(),
                rkey: target.rkey(),
                add: 1,
            },
            send_flags: SendFlags::SIGNALED,
        }])
        .unwrap();
        let wc = wait_wc(&ra.cq);
        assert_eq!((wc.wr_id, wc.status), (k as u64, WcStatus::Success));
    }
    assert_eq!(target.load_u64(0).unwrap(), 3);
}

#[test]
fn set_qp_wants_a_qp_in_init() {
    let (ca, _cb) = two_contexts();
    let ch = EventChannel::new(&ca).unwrap();
    let r = res(&ca);
    let reset = std::sync::Arc::new(r.pd.create_qp(&init(&r)).unwrap());
    assert!(matches!(
        ch.create_id().set_qp(reset),
        Err(RdmaCmError::WrongState { .. })
    ));
}

#[test]
fn perftests_exchange_runs_over_an_rdma_cm_connection() {
    use softroce::oob::perftest::{BwReport, Exchange, KeyMsg, Role};
    use softroce::oob::perftest_cm::{CmEvents, CmLink};
    use softroce::oob::OobError;
    let (ca, cb) = two_contexts();
    let server_ip = cb.local_addr().ip();
    let keys = move |qpn: u32| KeyMsg {
        lid: 0,
        out_reads: 128,
        qpn,
        psn: 0x123456,
        rkey: 0xabcd,
        vaddr: 0x7f00_1234_5000,
        gid: Gid::from_ip(server_ip),
        srqn: 0,
    };
    let server = std::thread::spawn(move || {
        let ev = CmEvents::new(&cb).unwrap();
        let l = listen(ev.channel(), PortSpace::Tcp, 2);
        let link = CmLink::accept(&cb, ev.clone(), &l, T).unwrap();
        let mut x = Exchange::over(Box::new(link), Role::Server);
        let v = x.versions(None).unwrap();
        let sys = x.sys_data(4096, 64).unwrap();
        let mtu = x.mtu(1024).unwrap();
        let peer = x.handshake(&keys(0x22)).unwrap();
        let rep = x
            .bw_reports(&BwReport {
                size: 0,
                iters: 0,
                bw_peak: 0.0,
                bw_avg: 0.0,
                msg_rate: 0.0,
            })
            .unwrap();
        // One byte where the exchange is at a 16-byte message: a typed error.
        let odd = x.xchg(&[0u8; 16]);
        (
            v.version,
            sys,
            mtu,
            peer,
            rep,
            odd.err().map(|e| e.to_string()),
        )
    });
    let ev = CmEvents::new(&ca).unwrap();
    // The server may not listen yet: the connection is retried until it does.
    let link = CmLink::connect(&ca, ev, server_ip, PORT, Duration::from_secs(3)).unwrap();
    let mut x = Exchange::over(Box::new(link), Role::Client);
    assert_eq!(x.versions(None).unwrap().version, 6.06);
    assert_eq!(x.sys_data(8192, 32).unwrap(), (8192, 64));
    assert_eq!(x.mtu(4096).unwrap(), 1024);
    assert_eq!(x.handshake(&keys(0x11)).unwrap(), keys(0x22));
    let report = BwReport {
        size: 65536,
        iters: 200,
        bw_peak: 100.5,
        bw_avg: 99.25,
        msg_rate: 0.0016,
    };
    x.bw_reports(&report).unwrap();
    // A message longer than perftest's 56-byte receive is refused before it is sent.
    assert!(matches!(x.xchg(&[0u8; 57]), Err(OobError::Local(_))));
    x.xchg(&[1u8]).ok();
    let (v, sys, mtu, peer, rep, odd) = server.join().unwrap();
    assert_eq!(v, 6.06);
    assert_eq!(sys, (8192, 64));
    assert_eq!(mtu, 1024);
    assert_eq!(peer, keys(0x11));
    assert_eq!(rep, report);
    assert!(
        odd.unwrap().contains("1 bytes"),
        "a 1-byte message is malformed"
    );
}

fn ud_init(r: &Res) -> QpInitAttr<'_> {
    QpInitAttr {
        qp_type: QpType::Ud,
        ..init(r)
    }
}

/// A UD client up to connect: address and route resolved, its UD QP in RTS with rdma_cm's
/// Q_Key.
fn ud_client(ch: &EventChannel, r: &Res, dst: &Context) -> (CmId, std::sync::Arc<QueuePair>) {
    let id = ch.create_id_in(PortSpace::Udp);
    resolve(ch, &id, dst.local_addr().ip(), PORT);
    let qp = id.create_qp(&r.pd, &ud_init(r)).unwrap();
    assert_eq!(qp.query().qp_state, QpState::Rts);
    assert_eq!(qp.query().qkey, RDMA_UDP_QKEY);
    (id, qp)
}

/// An address handle on `r.pd` for `ip`.
fn ah_to(r: &Res, ip: IpAddr) -> AddressHandle {
    r.pd.create_ah(&AhAttr {
        dgid: Gid::from_ip(ip),
        ..Default::default()
    })
    .unwrap()
}

fn ud_send(r: &Res, qp: &QueuePair, ah: &AddressHandle, qpn: u32, qkey: u32, len: u32) {
    qp.post_send_ud(&[UdSendWr {
        wr: SendWr {
            wr_id: 1,
            sg_list: &[r.mr.sge(0, len)],
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        },
        ah,
        remote_qpn: qpn,
        remote_qkey: qkey,
    }])
    .unwrap();
}

/// udaddy's exchange through the rdma_cm API: the client's connect is a SIDR_REQ, the
/// server's accept a SIDR_REP with its QPN and RDMA_UDP_QKEY; the client's ESTABLISHED
/// carries them, and datagrams flow both ways with an AH built from it (the server answers
/// the QP its datagram came from).
#[test]
fn ud_ids_resolve_with_sidr_and_exchange_datagrams() {
    let (ca, cb) = two_contexts();
    let (cha, chb) = channels(&ca, &cb);
    let (ra, rb) = (res(&ca), res(&cb));
    let listener = listen(&chb, PortSpace::Udp, 8);
    // A TCP listener on the same port is another service: both coexist.
    let _tcp = listen(&chb, PortSpace::Tcp, 8);

    let (id_a, qp_a) = ud_client(&cha, &ra, &cb);
    id_a.connect(&carrying(b"udaddy?")).unwrap();

    let req = expect(&chb, EventKind::ConnectRequest);
    assert!(req.listen_id.unwrap().same(&listener));
    assert_eq!(&req.private_data[..7], b"udaddy?");
    assert_eq!(req.private_data.len(), UD_CONNECT_PRIVATE_DATA_LEN);
    let ud = req.ud.expect("a UD connect request carries ud params");
    assert_eq!(ud.addr, ca.local_addr().ip());
    assert_eq!((ud.qp_num, ud.qkey), (0, 0), "a SIDR_REQ names no QP");
    let id_b = req.id.clone();
    assert_eq!(id_b.port_space(), PortSpace::Udp);
    let qp_b = id_b.create_qp(&rb.pd, &ud_init(&rb)).unwrap();
    post_recv(&qp_b, &rb, 7);
    id_b.accept(&carrying(b"served")).unwrap();

    let est = expect(&cha, EventKind::Established);
    assert_eq!(est.status, 0);
    assert_eq!(&est.private_data[..6], b"served");
    let ud = est.ud.expect("ESTABLISHED on a UD id carries ud params");
    assert_eq!(
        (ud.addr, ud.qp_num, ud.qkey),
        (cb.local_addr().ip(), qp_b.qp_num(), RDMA_UDP_QKEY)
    );
    // The listener's side gets no ESTABLISHED for a UD id.
    assert!(matches!(
        chb.get_event(Duration::from_millis(200)),
        Err(RdmaCmError::Timeout)
    ));

    let ah_a = ah_to(&ra, ud.addr);
    ud_send(&ra, &qp_a, &ah_a, ud.qp_num, ud.qkey, 100);
    let wc = wait_wc(&rb.cq);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!((wc.wr_id, wc.byte_len), (7, 140), "40-byte GRH first");
    assert_eq!(wc.src_qp, qp_a.qp_num());
    assert_eq!(wait_wc(&ra.cq).status, WcStatus::Success);

    // The server answers the QP the datagram came from.
    post_recv(&qp_a, &ra, 9);
    let ah_b = ah_to(&rb, ca.local_addr().ip());
    ud_send(&rb, &qp_b, &ah_b, wc.src_qp, RDMA_UDP_QKEY, 64);
    assert_eq!(wait_wc(&rb.cq).status, WcStatus::Success);
    let back = wait_wc(&ra.cq);
    assert_eq!(
        (back.status, back.wr_id, back.src_qp),
        (WcStatus::Success, 9, qp_b.qp_num())
    );
    // SIDR leaves no connection behind on the requester; the responder keeps its reply a while.
    assert_eq!(cha.cm_counters().wrong_peer, 0);
}

/// rdma_reject on a UD connect request is a SIDR_REP with status 2 (IB_SIDR_REJECT): the
/// client sees UNREACHABLE with that status, as the kernel's cma_sidr_rep_handler reports it.
#[test]
fn a_rejected_ud_connect_is_unreachable_with_the_sidr_status() {
    let (ca, cb) = two_contexts();
    let (cha, chb) = channels(&ca, &cb);
    let (ra, _rb) = (res(&ca), res(&cb));
    let _listener = listen(&chb, PortSpace::Udp, 8);
    let (id_a, _qp_a) = ud_client(&cha, &ra, &cb);
    id_a.connect(&ConnParam::default()).unwrap();
    let req = expect(&chb, EventKind::ConnectRequest);
    // Accepting without a QP is refused; rejecting needs none.
    assert!(matches!(
        req.id.accept(&ConnParam::default()),
        Err(RdmaCmError::WrongState { .. })
    ));
    req.id.reject(b"go away").unwrap();
    let e = expect(&cha, EventKind::Unreachable);
    assert_eq!(e.status, 2);
    assert_eq!(&e.private_data[..7], b"go away");
    assert!(e.ud.is_none());

    // Nobody listens on another port: the CM itself answers "unsupported" (status 1).
    let id2 = cha.create_id_in(PortSpace::Udp);
    resolve(&cha, &id2, cb.local_addr().ip(), PORT + 1);
    id2.connect(&ConnParam::default()).unwrap();
    assert_eq!(expect(&cha, EventKind::Unreachable).status, 1);
}

#[test]
fn disconnecting_an_accepted_connection_before_it_is_established_flushes_its_qp() {
    // librdmacm's rdma_disconnect moves the QP to ERROR before it asks the kernel to
    // disconnect, whatever the connection's state (cma.c `ucma_shutdown`); the kernel may
    // then refuse. A program that accepted and gives up before the RTU (rping 44 under a REQ
    // flood) joins a CQ thread that waits for that flush (spec-notes/librdmacm.md rule 18).
    let (ca, cb) = two_contexts();
    let (cha, chb) = channels(&ca, &cb);
    let (ra, rb) = (res(&ca), res(&cb));
    let _listener = listen(&chb, PortSpace::Tcp, 8);
    let (id_a, qp_a) = client(&cha, &ra, &cb);
    id_a.connect(&ConnParam::default()).unwrap();
    let id_b = expect(&chb, EventKind::ConnectRequest).id;
    // The requester goes away: nobody will answer the REP with an RTU.
    drop((id_a, qp_a, ra, cha));
    drop(ca);
    let qp_b = id_b.create_qp(&rb.pd, &init(&rb)).unwrap();
    post_recv(&qp_b, &rb, 9);
    id_b.accept(&ConnParam::default()).unwrap();
    assert_eq!(qp_b.query().qp_state, QpState::Rts);
    // Not established: the CM refuses the disconnect, but the QP is in ERROR and the
    // receive flushed.
    assert!(id_b.disconnect().is_err());
    assert_eq!(qp_b.query().qp_state, QpState::Err);
    let wc = wait_wc(&rb.cq);
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
}
