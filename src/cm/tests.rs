//! The CM state machine between two endpoints in virtual time, with MADs lost and duplicated.

use std::net::SocketAddr;
use std::time::Duration;

use super::*;
use crate::wire::cm::{attr, rdma_tcp_service_id, rej_reason, CmMessage, CmReq};
use crate::wire::mad::{self, MadRepr};

mod security;
mod sidr;
mod xrc;

const SERVICE: u64 = rdma_tcp_service_id(7174);

fn addr(last: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, last], 4791))
}

/// Which side sent a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// Two endpoints, A (active, 127.0.0.1) and B (passive, 127.0.0.2), a wire between them that a
/// test may make drop or repeat MADs, and a log of what crossed it.
struct Pair {
    a: CmEndpoint,
    b: CmEndpoint,
    now: Duration,
    /// (sender, CM message name) of every MAD put on the wire, delivered or not.
    log: Vec<(Side, &'static str)>,
    /// Decides per MAD (sender, name, how many of that name that side sent before) whether
    /// it is lost.
    drop: Box<dyn FnMut(Side, &'static str, usize) -> bool>,
    /// Delivers every MAD twice.
    duplicate: bool,
    events_a: Vec<CmEvent>,
    events_b: Vec<CmEvent>,
    /// Accept REQs (else leave them undecided) and establish on REP, as rdma_cm does.
    auto: bool,
}

fn cfg(seed: u32) -> EndpointConfig {
    EndpointConfig {
        comm_id_seed: Some(seed.into()),
        ..EndpointConfig::default()
    }
}

/// What B answers a REQ with: QPN 0x22, PSN 0x200, 4 bytes of private data.
fn accept_params() -> AcceptParams {
    AcceptParams {
        qpn: 0x22,
        starting_psn: 0x200,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        ca_guid: 0xb,
        private_data: vec![9; 4],
    }
}

fn name_of(m: &[u8]) -> &'static str {
    let hdr = MadRepr::parse(m).unwrap();
    crate::wire::cm::attr_name(hdr.attr_id).unwrap_or("?")
}

impl Pair {
    fn new() -> Pair {
        let a = CmEndpoint::new(cfg(1));
        let mut b = CmEndpoint::new(cfg(2));
        b.listen(SERVICE, 16).unwrap();
        Pair {
            a,
            b,
            now: Duration::from_secs(1000),
            log: Vec::new(),
            drop: Box::new(|_, _, _| false),
            duplicate: false,
            events_a: Vec::new(),
            events_b: Vec::new(),
            auto: true,
        }
    }

    fn connect(&mut self) -> ConnId {
        let p = ConnectParams::rc(SERVICE, 0x11, 0x100, [1; 16], [2; 16]);
        self.a.connect(self.now, addr(2), &p).unwrap()
    }

    fn sent(&self, side: Side, name: &str) -> usize {
        self.log
            .iter()
            .filter(|(s, n)| *s == side && *n == name)
            .count()
    }

    /// Moves MADs and events until nothing is in flight, then advances time to the next
    /// deadline; stops when nothing is left to do or `limit` has passed.
    fn run_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        for _ in 0..100_000 {
            let mut moved = false;
            while let Some(o) = self.a.poll_transmit() {
                moved = true;
                self.wire(Side::A, o);
            }
            while let Some(o) = self.b.poll_transmit() {
                moved = true;
                self.wire(Side::B, o);
            }
            while let Some(e) = self.a.poll_event() {
                moved = true;
                if let (true, CmEvent::RepReceived { conn, .. }) = (self.auto, &e) {
                    self.a.establish(*conn).unwrap();
                }
                self.events_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                moved = true;
                if let (true, CmEvent::ConnectRequest { conn, peer }) = (self.auto, &e) {
                    assert_eq!(peer.qpn, 0x11);
                    self.b.accept(self.now, *conn, &accept_params()).unwrap();
                }
                self.events_b.push(e);
            }
            if moved {
                continue;
            }
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.a.handle_timeout(self.now);
                    self.b.handle_timeout(self.now);
                }
                _ => return,
            }
        }
        panic!("the CM pair did not settle");
    }

    fn wire(&mut self, from: Side, o: Outgoing) {
        let name = name_of(&o.mad);
        let nth = self.sent(from, name);
        self.log.push((from, name));
        if (self.drop)(from, name, nth) {
            return;
        }
        let copies = if self.duplicate { 2 } else { 1 };
        for _ in 0..copies {
            match from {
                Side::A => {
                    assert_eq!(o.to, addr(2));
                    self.b.handle_mad(self.now, addr(1), &o.mad);
                }
                Side::B => {
                    assert_eq!(o.to, addr(1));
                    self.a.handle_mad(self.now, addr(2), &o.mad);
                }
            }
        }
    }

    fn b_conn(&self) -> ConnId {
        self.events_b
            .iter()
            .find_map(|e| match e {
                CmEvent::ConnectRequest { conn, .. } => Some(*conn),
                _ => None,
            })
            .expect("B saw a connect request")
    }
}

fn established(events: &[CmEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, CmEvent::Established { .. }))
        .count()
}

#[test]
fn req_rep_rtu_establishes_both_sides() {
    let mut p = Pair::new();
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    let names: Vec<_> = p.log.iter().map(|(s, n)| (*s, *n)).collect();
    assert_eq!(
        names,
        [(Side::A, "REQ"), (Side::B, "REP"), (Side::A, "RTU")]
    );
    assert_eq!(p.a.state(a), Some(ConnState::Established));
    let b = p.b_conn();
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    // What each side learned of the other.
    let CmEvent::RepReceived { peer, .. } = &p.events_a[0] else {
        panic!("{:?}", p.events_a)
    };
    assert_eq!((peer.qpn, peer.starting_psn), (0x22, 0x200));
    assert_eq!(peer.private_data[..5], [9, 9, 9, 9, 0]);
    let CmEvent::ConnectRequest { peer, .. } = &p.events_b[0] else {
        panic!("{:?}", p.events_b)
    };
    assert_eq!(
        (peer.qpn, peer.starting_psn, peer.path_mtu),
        (0x11, 0x100, 3)
    );
    assert_eq!((peer.gid, peer.local_gid), ([1; 16], [2; 16]));
    assert_eq!(established(&p.events_a), 1);
    assert_eq!(established(&p.events_b), 1);
    assert_eq!(p.a.counters().retransmits + p.b.counters().retransmits, 0);
}

/// A server handing its port from one listener to the next (perftest -R) loses no REQ that
/// comes in between: it waits for the new listener. Without one it is refused after the grace.
#[test]
fn a_req_between_two_listeners_waits_for_the_second() {
    let mut p = Pair::new();
    p.b.unlisten(SERVICE);
    let a = p.connect();
    p.run_for(Duration::from_millis(50));
    assert!(
        p.events_a.is_empty() && p.events_b.is_empty(),
        "parked, not refused"
    );
    p.b.listen(SERVICE, 4).unwrap();
    p.run_for(Duration::from_secs(1));
    assert_eq!(established(&p.events_a), 1, "{:?}", p.events_a);
    assert_eq!(established(&p.events_b), 1, "{:?}", p.events_b);
    assert!(p.a.state(a).is_some());
    assert_eq!(p.b.counters().rej_no_listener, 0);

    // The listener goes for good: the next REQ waits its grace, then is refused, and the
    // service is no longer waited for.
    let mut p = Pair::new();
    p.b.unlisten(SERVICE);
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    assert!(matches!(
        p.events_a.as_slice(),
        [CmEvent::Rejected { conn, reason: rej_reason::INVALID_SERVICE_ID, .. }] if *conn == a
    ));
    assert_eq!(p.b.counters().rej_no_listener, 1);
}

#[test]
fn req_for_a_service_nobody_listens_on_is_rejected_with_invalid_service_id() {
    let mut p = Pair::new();
    p.b.unlisten(SERVICE);
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    assert_eq!(
        p.events_a,
        [CmEvent::Rejected {
            conn: a,
            reason: rej_reason::INVALID_SERVICE_ID,
            private_data: vec![0; crate::wire::cm::REJ_PRIVATE_DATA_LEN],
        }]
    );
    assert_eq!(p.a.state(a), None);
    assert_eq!(p.a.connections() + p.b.connections(), 0);
    assert_eq!(p.b.counters().rej_no_listener, 1);
}

#[test]
fn application_reject_carries_reason_and_private_data() {
    let mut p = Pair::new();
    p.auto = false;
    let a = p.connect();
    p.run_for(Duration::from_millis(1));
    let b = p.b_conn();
    p.b.reject(
        b,
        &RejectInfo {
            reason: rej_reason::CONSUMER_DEFINED,
            private_data: b"busy".to_vec(),
        },
    )
    .unwrap();
    p.run_for(Duration::from_millis(1));
    let CmEvent::Rejected {
        conn,
        reason,
        private_data,
    } = &p.events_a[0]
    else {
        panic!("{:?}", p.events_a)
    };
    assert_eq!((*conn, *reason), (a, rej_reason::CONSUMER_DEFINED));
    assert_eq!(&private_data[..4], b"busy");
    assert_eq!(p.a.connections() + p.b.connections(), 0);
}

#[test]
fn lost_req_rep_and_rtu_are_recovered() {
    for lost in ["REQ", "REP", "RTU"] {
        let mut p = Pair::new();
        p.drop = Box::new(move |_, name, nth| name == lost && nth == 0);
        let a = p.connect();
        p.run_for(Duration::from_secs(60));
        let b = p.b_conn();
        assert_eq!(p.a.state(a), Some(ConnState::Established), "lost {lost}");
        assert_eq!(p.b.state(b), Some(ConnState::Established), "lost {lost}");
        assert_eq!(established(&p.events_a), 1, "lost {lost}");
        assert_eq!(established(&p.events_b), 1, "lost {lost}");
        match lost {
            "REQ" => assert_eq!(p.a.counters().retransmits, 1),
            "REP" => assert_eq!(p.b.counters().retransmits, 1),
            // The responder repeats its REP; the requester, already established, repeats
            // its RTU.
            _ => {
                assert_eq!(p.b.counters().retransmits, 1);
                assert_eq!(p.sent(Side::A, "RTU"), 2);
                assert_eq!(p.a.counters().duplicates, 1);
            }
        }
    }
}

#[test]
fn the_retransmission_waits_for_the_peers_response_timeout() {
    let mut p = Pair::new();
    p.drop = Box::new(|_, name, nth| name == "REQ" && nth == 0);
    let start = p.now;
    p.connect();
    p.run_for(Duration::from_secs(60));
    // rdma_cm's defaults: response timeout 2^20 * 4.096 us and twice a 2^16 * 4.096 us
    // packet life time.
    let wait = iba_time(20) + 2 * iba_time(16);
    assert_eq!(p.now - start, wait);
}

#[test]
fn a_silent_peer_is_unreachable_after_every_retry() {
    let mut p = Pair::new();
    p.drop = Box::new(|from, _, _| from == Side::A);
    let start = p.now;
    let a = p.connect();
    p.run_for(Duration::from_secs(600));
    assert_eq!(p.events_a, [CmEvent::Unreachable { conn: a }]);
    assert_eq!(p.sent(Side::A, "REQ"), 16, "the REQ and 15 retries");
    assert_eq!(p.a.counters().timeouts, 1);
    let wait = iba_time(20) + 2 * iba_time(16);
    assert_eq!(p.now - start, wait * 16);
    assert_eq!(p.a.connections(), 0);
    // B never heard of it.
    assert_eq!(p.b.connections(), 0);
}

#[test]
fn a_repeated_req_while_the_application_decides_is_ignored_until_it_answers() {
    let mut p = Pair::new();
    p.auto = false;
    let a = p.connect();
    // Let A's first timeout pass: its REQ is repeated, and B, still deciding, ignores it.
    p.run_for(iba_time(20) + 2 * iba_time(16));
    assert_eq!(p.sent(Side::A, "REQ"), 2);
    assert_eq!(p.sent(Side::B, "MRA") + p.sent(Side::B, "REP"), 0);
    assert_eq!(p.a.state(a), Some(ConnState::ReqSent));
    let b = p.b_conn();
    assert_eq!(p.b.state(b), Some(ConnState::ReqRcvd));
    assert_eq!(p.b.counters().duplicates, 1);
    // Only one connect request reached the application.
    assert_eq!(p.events_b.len(), 1);
    p.auto = true;
    let acc = AcceptParams {
        qpn: 0x22,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        ca_guid: 0,
        private_data: vec![],
    };
    p.b.accept(p.now, b, &acc).unwrap();
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.a.state(a), Some(ConnState::Established));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
}

#[test]
fn an_mra_makes_the_requester_wait_longer() {
    let mut p = Pair::new();
    p.auto = false;
    let a = p.connect();
    p.run_for(Duration::from_millis(1));
    let b = p.b_conn();
    // B's application asks for more time the way Linux's ib_send_cm_mra does.
    let mra = CmMessage::Mra(crate::wire::cm::CmMra {
        local_comm_id: b.0,
        remote_comm_id: a.0,
        message_mraed: crate::wire::cm::message_ref::REQ,
        service_timeout: 24,
        private_data: [0; crate::wire::cm::MRA_PRIVATE_DATA_LEN],
    });
    let mut m = [0u8; mad::LEN];
    mra.emit(1, &mut m).unwrap();
    p.a.handle_mad(p.now, addr(2), &m);
    assert_eq!(p.a.state(a), Some(ConnState::MraReqRcvd));
    // The REQ is repeated only after the MRA's service timeout and the path's delays (not
    // after the 4.8 s it would have waited), and every later retry waits as long (Linux's
    // ib_modify_mad changes the MAD's timeout for good).
    // (`run_for` leaves the clock at the last thing that happened.)
    let wait = iba_time(24) + 2 * iba_time(16);
    p.run_for(iba_time(24));
    assert_eq!(p.sent(Side::A, "REQ"), 1);
    p.run_for(wait);
    assert_eq!(p.sent(Side::A, "REQ"), 2);
    p.run_for(iba_time(24));
    assert_eq!(p.sent(Side::A, "REQ"), 2);
    p.run_for(wait);
    assert_eq!(p.sent(Side::A, "REQ"), 3);
}

#[test]
fn every_mad_delivered_twice_still_gives_one_connection_and_one_disconnection() {
    let mut p = Pair::new();
    p.duplicate = true;
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    let b = p.b_conn();
    assert_eq!(established(&p.events_a), 1);
    assert_eq!(established(&p.events_b), 1);
    assert_eq!(p.b.connections(), 1);
    assert!(p.b.counters().duplicates >= 1);
    p.a.disconnect(p.now, a).unwrap();
    p.run_for(Duration::from_millis(1));
    p.b.disconnect(p.now, b).unwrap();
    p.run_for(Duration::from_secs(5));
    for ev in [&p.events_a, &p.events_b] {
        let disc = ev
            .iter()
            .filter(|e| matches!(e, CmEvent::Disconnected { .. }))
            .count();
        assert_eq!(disc, 1, "{ev:?}");
    }
    assert_eq!(p.a.connections() + p.b.connections(), 0);
}

#[test]
fn dreq_drep_then_timewait_exit_on_both_sides() {
    let mut p = Pair::new();
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    let b = p.b_conn();
    p.a.disconnect(p.now, a).unwrap();
    p.run_for(Duration::from_millis(1));
    assert_eq!(p.a.state(a), Some(ConnState::DreqSent));
    assert_eq!(p.b.state(b), Some(ConnState::DreqRcvd));
    assert_eq!(p.events_b.last(), Some(&CmEvent::Disconnected { conn: b }));
    p.b.disconnect(p.now, b).unwrap();
    p.run_for(Duration::from_millis(1));
    assert_eq!(p.a.state(a), Some(ConnState::TimeWait));
    assert_eq!(p.b.state(b), Some(ConnState::TimeWait));
    assert_eq!(p.events_a.last(), Some(&CmEvent::Disconnected { conn: a }));
    p.run_for(Duration::from_secs(5));
    assert_eq!(p.events_a.last(), Some(&CmEvent::TimewaitExit { conn: a }));
    assert_eq!(p.events_b.last(), Some(&CmEvent::TimewaitExit { conn: b }));
    assert_eq!(p.a.connections() + p.b.connections(), 0);
    assert_eq!(p.sent(Side::A, "DREQ"), 1);
    assert_eq!(p.sent(Side::B, "DREP"), 1);
}

#[test]
fn a_lost_drep_is_answered_again_from_timewait() {
    let mut p = Pair::new();
    p.drop = Box::new(|_, name, nth| name == "DREP" && nth == 0);
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    let b = p.b_conn();
    p.a.disconnect(p.now, a).unwrap();
    p.run_for(Duration::from_millis(1));
    p.b.disconnect(p.now, b).unwrap();
    // B's time-wait (1 s) is shorter than A's DREQ timeout (about 4.8 s).
    p.run_for(Duration::from_millis(900));
    assert_eq!(p.a.state(a), Some(ConnState::DreqSent));
    // B left time-wait before A repeated its DREQ: a DREQ for a connection B no longer has is
    // still answered with a DREP (as Linux's CM does).
    p.run_for(Duration::from_secs(10));
    assert_eq!(p.sent(Side::A, "DREQ"), 2);
    assert_eq!(p.sent(Side::B, "DREP"), 2);
    assert!(p.events_a.contains(&CmEvent::Disconnected { conn: a }));
    assert_eq!(p.events_a.last(), Some(&CmEvent::TimewaitExit { conn: a }));
    assert_eq!(p.a.connections() + p.b.connections(), 0);
}

#[test]
fn simultaneous_disconnects_both_end_in_timewait() {
    let mut p = Pair::new();
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    let b = p.b_conn();
    p.a.disconnect(p.now, a).unwrap();
    p.b.disconnect(p.now, b).unwrap();
    p.run_for(Duration::from_millis(1));
    assert_eq!(p.a.state(a), Some(ConnState::TimeWait));
    assert_eq!(p.b.state(b), Some(ConnState::TimeWait));
    p.run_for(Duration::from_secs(5));
    assert_eq!(p.a.connections() + p.b.connections(), 0);
    assert_eq!(p.a.counters().retransmits + p.b.counters().retransmits, 0);
}

fn flood_req(i: u32) -> [u8; mad::LEN] {
    let mut p = ConnectParams::rc(SERVICE, i, 0, [1; 16], [2; 16]);
    p.ca_guid = 0xf100d;
    let mut e = CmEndpoint::new(cfg(1000 + i));
    e.connect(Duration::ZERO, addr(9), &p).unwrap();
    e.poll_transmit().unwrap().mad
}

#[test]
fn a_req_flood_is_bounded_by_the_backlog_and_leaves_no_state_behind() {
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 4).unwrap();
    let now = Duration::from_secs(1);
    for i in 0..100 {
        b.handle_mad(now, addr(9), &flood_req(i));
    }
    let mut requests = 0;
    while let Some(e) = b.poll_event() {
        assert!(matches!(e, CmEvent::ConnectRequest { .. }));
        requests += 1;
    }
    assert_eq!(requests, 4);
    // The rest are dropped unanswered, as the kernel's CM drops them: no REJ goes back.
    assert_eq!(b.counters().req_dropped, 96);
    assert_eq!(b.poll_transmit(), None);
    // Nobody accepts: once the requesters would have given up, the half-open connections go.
    let t = b.poll_timeout().expect("half-open connections expire");
    // The requester's patience: 16 tries of 2^20 * 4.096 us plus two packet life times.
    assert_eq!(t - now, (iba_time(20) + 2 * iba_time(16)) * 16);
    b.handle_timeout(t);
    assert_eq!(b.connections(), 0);
    assert_eq!(b.counters().timeouts, 4);
    let mut gone = 0;
    while let Some(e) = b.poll_event() {
        assert!(matches!(e, CmEvent::Unreachable { .. }), "{e:?}");
        gone += 1;
    }
    assert_eq!(gone, 4);
    // And the backlog is free again.
    b.handle_mad(t, addr(9), &flood_req(500));
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
    assert_eq!(b.connections(), 1);
}

#[test]
fn malformed_and_stray_mads_are_counted_and_dropped() {
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 4).unwrap();
    let now = Duration::ZERO;
    b.handle_mad(now, addr(9), &[0u8; 10]);
    let mut other = [0u8; mad::LEN];
    MadRepr {
        mgmt_class: 0x03,
        ..MadRepr::cm_send(1, attr::REQ)
    }
    .emit(&mut other)
    .unwrap();
    b.handle_mad(now, addr(9), &other);
    assert_eq!(b.counters().bad_mads, 2);
    // An RTU, REP and DREP for connections that do not exist.
    for m in [
        CmMessage::Rtu(crate::wire::cm::CmIds {
            local_comm_id: 5,
            remote_comm_id: 6,
            private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
        }),
        CmMessage::Drep(crate::wire::cm::CmIds {
            local_comm_id: 5,
            remote_comm_id: 6,
            private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
        }),
    ] {
        let mut buf = [0u8; mad::LEN];
        m.emit(1, &mut buf).unwrap();
        b.handle_mad(now, addr(9), &buf);
    }
    assert_eq!(b.counters().unmatched, 2);
    assert_eq!(b.poll_transmit(), None);
    assert_eq!(b.poll_event(), None);
    assert_eq!(b.connections(), 0);
}

#[test]
fn reqs_with_a_bad_transport_or_mtu_are_rejected() {
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 4).unwrap();
    let mut buf = flood_req(1);
    let (hdr, msg) = CmMessage::parse(&buf).unwrap();
    let CmMessage::Req(req) = msg else { panic!() };
    for (bad, reason) in [
        (
            CmReq {
                transport_service_type: 3,
                ..req
            },
            rej_reason::INVALID_TRANSPORT_TYPE,
        ),
        (CmReq { path_mtu: 7, ..req }, rej_reason::INVALID_MTU),
    ] {
        CmMessage::Req(bad).emit(hdr.tid, &mut buf).unwrap();
        b.handle_mad(Duration::ZERO, addr(9), &buf);
        let (_, m) = CmMessage::parse(&b.poll_transmit().unwrap().mad).unwrap();
        let CmMessage::Rej(r) = m else { panic!() };
        assert_eq!(r.reason, reason);
        assert_eq!(r.remote_comm_id, req.local_comm_id);
    }
    assert_eq!(b.counters().rej_invalid, 2);
    assert_eq!(b.connections(), 0);
}

#[test]
fn api_misuse_is_a_typed_error() {
    let mut p = Pair::new();
    p.auto = false;
    let a = p.connect();
    assert_eq!(
        p.a.establish(a),
        Err(CmError::WrongState {
            op: "establish",
            state: ConnState::ReqSent
        })
    );
    assert_eq!(
        p.a.disconnect(p.now, ConnId(12345)),
        Err(CmError::UnknownConnection(ConnId(12345)))
    );
    let mut long = ConnectParams::rc(SERVICE, 1, 1, [0; 16], [0; 16]);
    long.private_data = vec![0; 93];
    assert_eq!(
        p.a.connect(p.now, addr(2), &long),
        Err(CmError::PrivateDataTooLong { len: 93, max: 92 })
    );
    assert_eq!(
        p.b.listen(SERVICE, 1),
        Err(CmError::AlreadyListening(SERVICE))
    );
    p.run_for(Duration::from_millis(1));
    let b = p.b_conn();
    assert!(matches!(
        p.b.disconnect(p.now, b),
        Err(CmError::WrongState { .. })
    ));
    let mut e = CmEndpoint::new(EndpointConfig {
        max_connections: 1,
        ..cfg(3)
    });
    let c = ConnectParams::rc(SERVICE, 1, 1, [0; 16], [0; 16]);
    e.connect(Duration::ZERO, addr(2), &c).unwrap();
    assert_eq!(
        e.connect(Duration::ZERO, addr(2), &c),
        Err(CmError::TooManyConnections)
    );
}

#[test]
fn the_backlog_counts_unread_requests_and_a_read_one_waits_for_its_answer_outside_it() {
    // The kernel's ucma bounds a listener's connect-request events not yet read; a request
    // the application has read may wait for its answer without holding a slot, so that a
    // server that reads every request but answers later (or never) still hears new ones.
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 1).unwrap();
    let now = Duration::from_secs(1);
    let request = |b: &mut CmEndpoint, from: u8, i: u32| {
        b.handle_mad(now, addr(from), &flood_req(i));
        assert_eq!(
            b.poll_transmit(),
            None,
            "a REQ is never answered on its own"
        );
        match b.poll_event() {
            Some(CmEvent::ConnectRequest { conn, .. }) => Some(conn),
            None => None,
            Some(e) => panic!("{e:?}"),
        }
    };
    let first = request(&mut b, 9, 0).expect("the first request is taken");
    // Not read yet: the backlog of one is full, whatever the source; the REQ is dropped
    // unanswered (its requester tries again later).
    assert_eq!(request(&mut b, 10, 1), None);
    assert_eq!(b.counters().req_dropped, 1);
    // Read and left undecided: it no longer counts (and reading it twice frees one slot).
    b.request_read(first);
    b.request_read(first);
    let second = request(&mut b, 10, 2).expect("a read request leaves the backlog");
    assert_eq!(b.state(first), Some(ConnState::ReqRcvd));
    assert_eq!(request(&mut b, 11, 3), None);
    assert_eq!(b.counters().req_dropped, 2);
    // An unread request answered (here by a reject on its listener's behalf) frees its slot.
    b.reject(
        second,
        &RejectInfo {
            reason: rej_reason::CONSUMER_DEFINED,
            private_data: Vec::new(),
        },
    )
    .unwrap();
    assert!(b.poll_transmit().is_some(), "the REJ");
    let third = request(&mut b, 11, 4).expect("a rejected request leaves the backlog");
    // One that expires unread frees it too.
    let t = b.poll_timeout().unwrap();
    b.handle_timeout(t + Duration::from_secs(300));
    assert_eq!(b.state(third), None);
    while b.poll_event().is_some() {}
    assert!(request(&mut b, 12, 5).is_some());
}
