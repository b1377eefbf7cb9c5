//! Service ID resolution (IBTA §12.11) between two endpoints: the request, its answer or
//! refusal, its retries, and replies that do not come from the address the request went to.

use super::*;
use crate::wire::cm::{rdma_udp_service_id, sidr_status, CmSidrRep, SIDR_REP_INFO_LEN};

const UD_SERVICE: u64 = rdma_udp_service_id(7174);
const QKEY: u32 = 0x0123_4567;

fn ud_pair() -> Pair {
    let mut p = Pair::new();
    p.b.listen(UD_SERVICE, 4).unwrap();
    p
}

fn sidr_requests(events: &[CmEvent]) -> Vec<(ConnId, SidrRequest)> {
    events
        .iter()
        .filter_map(|e| match e {
            CmEvent::SidrRequest { conn, req } => Some((*conn, (**req).clone())),
            _ => None,
        })
        .collect()
}

fn sidr_replies(events: &[CmEvent]) -> Vec<(ConnId, SidrReply)> {
    events
        .iter()
        .filter_map(|e| match e {
            CmEvent::SidrReply { conn, rep } => Some((*conn, (**rep).clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn sidr_req_rep_gives_the_requester_the_qpn_qkey_and_private_data() {
    let mut p = ud_pair();
    let a =
        p.a.sidr_request(p.now, addr(2), UD_SERVICE, b"hello")
            .unwrap();
    assert_eq!(p.a.state(a), Some(ConnState::SidrReqSent));
    p.run_for(Duration::from_millis(1));
    let reqs = sidr_requests(&p.events_b);
    assert_eq!(reqs.len(), 1);
    let (b, req) = &reqs[0];
    assert_eq!(
        (req.addr, req.request_id, req.service_id),
        (addr(1), a.0, UD_SERVICE)
    );
    assert_eq!(req.partition_key, 0xffff);
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.private_data.len(), 216);
    p.b.sidr_reply(p.now, *b, sidr_status::SUCCESS, 0x33, QKEY, b"world")
        .unwrap();
    p.run_for(Duration::from_millis(1));
    let reps = sidr_replies(&p.events_a);
    assert_eq!(reps.len(), 1);
    let (conn, rep) = &reps[0];
    assert_eq!(*conn, a);
    assert_eq!(
        (rep.addr, rep.status, rep.qpn, rep.qkey, rep.service_id),
        (addr(2), 0, 0x33, QKEY, UD_SERVICE)
    );
    assert_eq!(&rep.private_data[..5], b"world");
    // The requester is done at once; the responder forgets the reply after a while, silently.
    assert_eq!(p.a.connections(), 0);
    assert_eq!(p.b.state(*b), Some(ConnState::SidrRepSent));
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.b.connections(), 0);
    assert_eq!(p.events_b.len(), 1, "{:?}", p.events_b);
    assert_eq!(p.events_a.len(), 1, "{:?}", p.events_a);
    // Answering again is a typed error.
    assert!(matches!(
        p.b.sidr_reply(p.now, *b, 0, 1, 1, &[]),
        Err(CmError::UnknownConnection(_))
    ));
}

#[test]
fn a_refused_sidr_req_gets_its_status_and_no_qp() {
    let mut p = ud_pair();
    let a = p.a.sidr_request(p.now, addr(2), UD_SERVICE, &[]).unwrap();
    p.run_for(Duration::from_millis(1));
    let (b, _) = sidr_requests(&p.events_b)[0].clone();
    p.b.sidr_reply(p.now, b, sidr_status::REJECT, 0x33, QKEY, b"no")
        .unwrap();
    p.run_for(Duration::from_millis(1));
    let (conn, rep) = sidr_replies(&p.events_a)[0].clone();
    assert_eq!(conn, a);
    assert_eq!((rep.status, rep.qpn, rep.qkey), (sidr_status::REJECT, 0, 0));
    assert_eq!(&rep.private_data[..2], b"no");
    assert_eq!(p.a.connections(), 0);
}

#[test]
fn a_sidr_req_for_a_service_nobody_listens_on_is_answered_unsupported() {
    let mut p = Pair::new();
    let a =
        p.a.sidr_request(p.now, addr(2), rdma_udp_service_id(9), &[])
            .unwrap();
    p.run_for(Duration::from_millis(1));
    assert!(p.events_b.is_empty());
    let (conn, rep) = sidr_replies(&p.events_a)[0].clone();
    assert_eq!((conn, rep.status), (a, sidr_status::UNSUPPORTED));
    assert_eq!(p.b.counters().rej_no_listener, 1);
    assert_eq!(p.b.connections(), 0);
}

#[test]
fn an_unanswered_sidr_req_is_repeated_then_unreachable() {
    let mut p = ud_pair();
    p.drop = Box::new(|side, name, _| side == Side::A && name == "SIDR_REQ");
    let a = p.a.sidr_request(p.now, addr(2), UD_SERVICE, &[]).unwrap();
    let start = p.now;
    p.run_for(Duration::from_secs(600));
    // The first and max_cm_retries (15) retransmissions, each after the response timeout.
    assert_eq!(p.sent(Side::A, "SIDR_REQ"), 16);
    assert_eq!(p.events_a, vec![CmEvent::Unreachable { conn: a }]);
    assert_eq!(p.now - start, p.a.connect_patience());
    assert_eq!(p.a.connections(), 0);
    assert_eq!(p.a.counters().timeouts, 1);
}

#[test]
fn a_lost_sidr_rep_is_sent_again_when_the_request_is_repeated() {
    let mut p = ud_pair();
    p.drop = Box::new(|side, name, nth| side == Side::B && name == "SIDR_REP" && nth == 0);
    let a = p.a.sidr_request(p.now, addr(2), UD_SERVICE, &[]).unwrap();
    p.run_for(Duration::from_millis(1));
    let (b, _) = sidr_requests(&p.events_b)[0].clone();
    p.b.sidr_reply(p.now, b, sidr_status::SUCCESS, 0x44, QKEY, &[])
        .unwrap();
    p.run_for(Duration::from_secs(30));
    assert_eq!(p.sent(Side::A, "SIDR_REQ"), 2);
    assert_eq!(p.sent(Side::B, "SIDR_REP"), 2);
    // One request for the application, one answer for the requester.
    assert_eq!(sidr_requests(&p.events_b).len(), 1);
    let reps = sidr_replies(&p.events_a);
    assert_eq!(reps.len(), 1);
    assert_eq!((reps[0].0, reps[0].1.qpn), (a, 0x44));
    assert_eq!(p.b.counters().duplicates, 1);
}

/// Takes A's SIDR_REQ off the wire: its request ID and transaction ID.
fn sidr_req_sent(p: &mut Pair) -> (u32, u64) {
    let o = p.a.poll_transmit().expect("A sent its SIDR_REQ");
    assert_eq!(o.to, addr(2));
    let (hdr, msg) = CmMessage::parse(&o.mad).unwrap();
    let CmMessage::SidrReq(r) = msg else {
        panic!("not a SIDR_REQ")
    };
    (r.request_id, hdr.tid)
}

fn sidr_rep_mad(request_id: u32, tid: u64, qpn: u32) -> [u8; mad::LEN] {
    let rep = CmSidrRep {
        request_id,
        status: sidr_status::SUCCESS,
        additional_information_length: 0,
        qpn,
        service_id: UD_SERVICE,
        qkey: QKEY,
        additional_information: [0; SIDR_REP_INFO_LEN],
        private_data: [0; crate::wire::cm::SIDR_REP_PRIVATE_DATA_LEN],
    };
    let mut m = [0u8; mad::LEN];
    CmMessage::SidrRep(rep).emit(tid, &mut m).unwrap();
    m
}

#[test]
fn a_sidr_rep_from_a_third_address_or_another_transaction_is_ignored() {
    let mut p = ud_pair();
    let a = p.a.sidr_request(p.now, addr(2), UD_SERVICE, &[]).unwrap();
    let (request_id, tid) = sidr_req_sent(&mut p);
    assert_eq!(request_id, a.0);
    // Right request ID and transaction, wrong sender.
    p.a.handle_mad(p.now, addr(3), &sidr_rep_mad(request_id, tid, 0x66));
    assert_eq!(p.a.counters().wrong_peer, 1);
    // Right sender and request ID, another transaction.
    p.a.handle_mad(p.now, addr(2), &sidr_rep_mad(request_id, tid ^ 1, 0x66));
    // A request ID nobody asked with.
    p.a.handle_mad(p.now, addr(2), &sidr_rep_mad(request_id ^ 1, tid, 0x66));
    assert_eq!(p.a.counters().unmatched, 2);
    assert!(p.a.poll_event().is_none());
    assert_eq!(p.a.state(a), Some(ConnState::SidrReqSent));
    // The real one counts.
    p.a.handle_mad(p.now, addr(2), &sidr_rep_mad(request_id, tid, 0x77));
    match p.a.poll_event() {
        Some(CmEvent::SidrReply { conn, rep }) => {
            assert_eq!((conn, rep.qpn, rep.addr), (a, 0x77, addr(2)))
        }
        e => panic!("expected the SIDR reply, got {e:?}"),
    }
    // Once answered, a second reply is a stranger.
    p.a.handle_mad(p.now, addr(2), &sidr_rep_mad(request_id, tid, 0x88));
    assert!(p.a.poll_event().is_none());
    assert_eq!(p.a.counters().unmatched, 3);
}

#[test]
fn a_sidr_rep_naming_a_connection_does_not_touch_it() {
    let mut p = ud_pair();
    let a = p.connect();
    p.run_for(Duration::from_millis(1));
    assert_eq!(p.a.state(a), Some(ConnState::Established));
    p.events_a.clear();
    p.a.handle_mad(p.now, addr(2), &sidr_rep_mad(a.0, 7, 0x66));
    assert_eq!(p.a.state(a), Some(ConnState::Established));
    assert!(p.a.poll_event().is_none());
    assert_eq!(p.a.counters().unmatched, 1);
}

#[test]
fn undecided_sidr_requests_are_bounded_by_the_backlog_and_expire() {
    let mut p = ud_pair();
    for _ in 0..6 {
        p.a.sidr_request(p.now, addr(2), UD_SERVICE, &[]).unwrap();
    }
    p.run_for(Duration::from_millis(1));
    // Backlog 4: the other two are told there is no QP for them.
    assert_eq!(sidr_requests(&p.events_b).len(), 4);
    let refused: Vec<u8> = sidr_replies(&p.events_a)
        .iter()
        .map(|(_, r)| r.status)
        .collect();
    assert_eq!(refused, vec![sidr_status::NO_QP; 2]);
    assert_eq!(p.b.counters().rej_no_resources, 2);
    // Nobody answers: the responder gives the four up within its patience, and its requester
    // its own.
    p.run_for(Duration::from_secs(600));
    assert_eq!(p.b.connections(), 0);
    assert_eq!(p.a.connections(), 0);
    let b_unreachable = p
        .events_b
        .iter()
        .filter(|e| matches!(e, CmEvent::Unreachable { .. }))
        .count();
    assert_eq!(b_unreachable, 4);
}
