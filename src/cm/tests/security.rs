//! What a third host can and cannot do to the CM (issues 21 and 26): its IDs are drawn afresh
//! from the kernel, and a message for a connection counts only when both communication IDs are
//! the connection's and it comes from the connection's peer.

use std::collections::HashSet;

use super::*;
use crate::random::tests::affine;
use crate::wire::cm::{message_ref, CmDreq, CmIds, CmRej, CmRep};

/// An established connection between the pair: (A's ID, B's ID).
fn established_pair() -> (Pair, ConnId, ConnId) {
    let mut p = Pair::new();
    let a = p.connect();
    p.run_for(Duration::from_secs(1));
    let b = p.b_conn();
    assert_eq!(p.a.state(a), Some(ConnState::Established));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    p.events_a.clear();
    p.events_b.clear();
    (p, a, b)
}

fn mad_of(m: &CmMessage) -> [u8; mad::LEN] {
    let mut buf = [0u8; mad::LEN];
    m.emit(7, &mut buf).unwrap();
    buf
}

fn dreq(from: ConnId, to: ConnId, qpn: u32) -> [u8; mad::LEN] {
    mad_of(&CmMessage::Dreq(CmDreq {
        local_comm_id: from.0,
        remote_comm_id: to.0,
        remote_qpn: qpn,
        private_data: [0; crate::wire::cm::DREQ_PRIVATE_DATA_LEN],
    }))
}

fn rej(from: ConnId, to: ConnId) -> [u8; mad::LEN] {
    mad_of(&CmMessage::Rej(CmRej {
        local_comm_id: from.0,
        remote_comm_id: to.0,
        message_rejected: message_ref::REP,
        rejected_info_length: 0,
        reason: rej_reason::CONSUMER_DEFINED,
        ari: [0; crate::wire::cm::REJ_ARI_LEN],
        private_data: [0; crate::wire::cm::REJ_PRIVATE_DATA_LEN],
    }))
}

#[test]
fn comm_and_transaction_ids_are_fresh_draws_never_reused_while_held() {
    let n = 100_000;
    let mut e = CmEndpoint::new(EndpointConfig {
        max_connections: n + 1,
        ..EndpointConfig::default()
    });
    let p = ConnectParams::rc(SERVICE, 1, 1, [1; 16], [2; 16]);
    let mut ids = Vec::with_capacity(n);
    let mut tids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(u64::from(e.connect(Duration::ZERO, addr(2), &p).unwrap().0));
        let out = e.poll_transmit().unwrap();
        tids.push(MadRepr::parse(&out.mad).unwrap().tid);
    }
    // Every connection is still held: no ID may repeat (the endpoint checks), and none is 0.
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), n);
    assert!(!ids.contains(&0));
    // 64-bit transaction IDs: a repeat in 10^5 random ones has probability 3e-10.
    assert_eq!(tids.iter().collect::<HashSet<_>>().len(), n);
    // Neither follows from the previous one (the old IDs were x' = 0x9E3779B1 x + 0x7F4A7C15).
    assert!(!affine(&ids, 32), "comm IDs follow x' = a x + c");
    assert!(!affine(&tids, 64), "TIDs follow x' = a x + c");
    // The low and high halves are both spread: every bit is set in about half of them.
    for bit in 0..32 {
        let ones = ids.iter().filter(|&&x| x >> bit & 1 == 1).count();
        assert!((48_500..=51_500).contains(&ones), "bit {bit}: {ones}");
    }
}

#[test]
fn two_endpoints_started_together_draw_unrelated_ids() {
    let p = ConnectParams::rc(SERVICE, 1, 1, [1; 16], [2; 16]);
    let mut a = CmEndpoint::new(EndpointConfig::default());
    let mut b = CmEndpoint::new(EndpointConfig::default());
    let xa: Vec<u32> = (0..64)
        .map(|_| a.connect(Duration::ZERO, addr(2), &p).unwrap().0)
        .collect();
    let xb: Vec<u32> = (0..64)
        .map(|_| b.connect(Duration::ZERO, addr(2), &p).unwrap().0)
        .collect();
    let shared = xa.iter().filter(|x| xb.contains(x)).count();
    assert_eq!(shared, 0, "{xa:x?} {xb:x?}");
}

#[test]
fn a_dreq_or_rej_with_the_right_ids_from_another_address_changes_nothing() {
    let (mut p, a, b) = established_pair();
    let stranger = addr(66);
    // B's QPN, as a DREQ to B must name it.
    p.b.handle_mad(p.now, stranger, &dreq(a, b, 0x22));
    p.b.handle_mad(p.now, stranger, &rej(a, b));
    p.a.handle_mad(p.now, stranger, &dreq(b, a, 0x11));
    p.a.handle_mad(p.now, stranger, &rej(b, a));
    assert_eq!(p.a.state(a), Some(ConnState::Established));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    assert_eq!(p.a.counters().wrong_peer, 2);
    assert_eq!(p.b.counters().wrong_peer, 2);
    // Unanswered: a reply would tell the stranger it guessed right.
    assert_eq!(p.a.poll_transmit(), None);
    assert_eq!(p.b.poll_transmit(), None);
    assert_eq!(p.a.poll_event(), None);
    assert_eq!(p.b.poll_event(), None);
}

#[test]
fn one_id_is_not_enough_even_from_the_peers_address() {
    let (mut p, a, b) = established_pair();
    let wrong = ConnId(a.0 ^ 1);
    // The REJ names B's connection but not A's ID: dropped.
    p.b.handle_mad(p.now, addr(1), &rej(wrong, b));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    // The DREQ likewise; Linux answers it with a DREP for the IDs it names, which ends nothing.
    p.b.handle_mad(p.now, addr(1), &dreq(wrong, b, 0x22));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    assert_eq!(p.b.counters().unmatched, 2);
    let (_, m) = CmMessage::parse(&p.b.poll_transmit().unwrap().mad).unwrap();
    let CmMessage::Drep(d) = m else {
        panic!("{m:?}")
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (b.0, wrong.0));
    // An RTU or DREP with a wrong half does nothing either.
    let ids = CmIds {
        local_comm_id: wrong.0,
        remote_comm_id: b.0,
        private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
    };
    p.b.handle_mad(p.now, addr(1), &mad_of(&CmMessage::Drep(ids)));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    assert_eq!(p.b.poll_event(), None);
}

#[test]
fn the_same_dreq_from_the_peers_address_ends_the_connection() {
    let (mut p, a, b) = established_pair();
    p.b.handle_mad(p.now, addr(66), &dreq(a, b, 0x22));
    assert_eq!(p.b.state(b), Some(ConnState::Established));
    p.b.handle_mad(p.now, addr(1), &dreq(a, b, 0x22));
    assert_eq!(p.b.state(b), Some(ConnState::DreqRcvd));
    assert_eq!(p.b.poll_event(), Some(CmEvent::Disconnected { conn: b }));
    // And a REJ from the peer ends the other side's.
    p.a.handle_mad(p.now, addr(2), &rej(b, a));
    assert_eq!(p.a.state(a), Some(ConnState::TimeWait));
    assert_eq!(p.a.poll_event(), Some(CmEvent::Disconnected { conn: a }));
}

#[test]
fn a_rep_from_another_address_does_not_complete_a_connect() {
    let mut p = Pair::new();
    p.auto = false;
    let a = p.connect();
    // A forged REP naming A's (random) ID, as if from an off-path host that guessed it.
    let rep = CmMessage::Rep(CmRep {
        local_comm_id: 0xdead_beef,
        remote_comm_id: a.0,
        local_qkey: 0,
        local_qpn: 0x99,
        local_eecn: 0,
        starting_psn: 0,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x666,
        private_data: [0; crate::wire::cm::REP_PRIVATE_DATA_LEN],
    });
    p.a.handle_mad(p.now, addr(66), &mad_of(&rep));
    assert_eq!(p.a.state(a), Some(ConnState::ReqSent));
    assert_eq!(p.a.poll_event(), None);
    assert_eq!(p.a.counters().wrong_peer, 1);
    // The real one still completes it.
    p.auto = true;
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.a.state(a), Some(ConnState::Established));
}

#[test]
fn a_repeated_req_from_another_address_is_not_a_duplicate() {
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 4).unwrap();
    let req = flood_req(1);
    b.handle_mad(Duration::ZERO, addr(9), &req);
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
    b.handle_mad(Duration::ZERO, addr(66), &req);
    assert_eq!(b.counters().wrong_peer, 1);
    assert_eq!(b.counters().duplicates, 0);
    assert_eq!(b.poll_transmit(), None);
    assert_eq!(b.poll_event(), None);
    assert_eq!(b.connections(), 1);
}

#[test]
fn one_source_cannot_fill_every_listeners_backlog() {
    let services = [
        SERVICE,
        rdma_tcp_service_id(7175),
        rdma_tcp_service_id(7176),
    ];
    let mut b = CmEndpoint::new(EndpointConfig {
        max_half_open_per_source: 6,
        ..cfg(2)
    });
    // Three listeners with room for 12 undecided requests in all.
    for s in services {
        b.listen(s, 4).unwrap();
    }
    let now = Duration::from_secs(1);
    for i in 0..20 {
        let mut m = flood_req(i);
        // Spread over the three listeners.
        let (hdr, msg) = CmMessage::parse(&m).unwrap();
        let CmMessage::Req(r) = msg else { panic!() };
        CmMessage::Req(CmReq {
            service_id: services[i as usize % 3],
            ..r
        })
        .emit(hdr.tid, &mut m)
        .unwrap();
        b.handle_mad(now, addr(9), &m);
    }
    let mut requests = Vec::new();
    while let Some(e) = b.poll_event() {
        let CmEvent::ConnectRequest { conn, .. } = e else {
            panic!("{e:?}")
        };
        requests.push(conn);
    }
    assert_eq!(requests.len(), 6);
    assert_eq!(b.counters().req_dropped, 14);
    // Another host still gets through.
    b.handle_mad(now, addr(10), &flood_req(100));
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
    // Deciding one frees a place for its source.
    b.reject(
        requests[0],
        &RejectInfo {
            reason: rej_reason::CONSUMER_DEFINED,
            private_data: Vec::new(),
        },
    )
    .unwrap();
    while b.poll_transmit().is_some() {}
    b.handle_mad(now, addr(9), &flood_req(101));
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
}

#[test]
fn a_req_cannot_hold_a_backlog_slot_longer_than_the_bound() {
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 1).unwrap();
    let (hdr, msg) = CmMessage::parse(&flood_req(1)).unwrap();
    let CmMessage::Req(r) = msg else { panic!() };
    let mut m = [0u8; mad::LEN];
    // The longest patience a REQ can claim: 2^31 * 4.096 us (2.4 h) per try, 16 tries.
    CmMessage::Req(CmReq {
        remote_cm_response_timeout: 31,
        max_cm_retries: 15,
        ..r
    })
    .emit(hdr.tid, &mut m)
    .unwrap();
    let now = Duration::from_secs(1);
    b.handle_mad(now, addr(9), &m);
    assert!(b.poll_event().is_some());
    let bound = EndpointConfig::default().max_half_open_time;
    assert_eq!(b.poll_timeout(), Some(now + bound));
    b.handle_timeout(now + bound);
    assert_eq!(b.connections(), 0);
}

#[test]
fn a_listener_with_a_larger_backlog_takes_that_many_from_one_source() {
    // perftest -R connects all its QPs from one address at once, to a backlog it sized.
    let mut b = CmEndpoint::new(EndpointConfig {
        max_half_open_per_source: 2,
        ..cfg(2)
    });
    b.listen(SERVICE, 5).unwrap();
    for i in 0..6 {
        b.handle_mad(Duration::ZERO, addr(9), &flood_req(i));
    }
    let requests = std::iter::from_fn(|| b.poll_event()).count();
    assert_eq!(requests, 5);
    assert_eq!(b.counters().req_dropped, 1);
}
