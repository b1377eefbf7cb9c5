//! An XRC connection's CM messages, as the kernel's CM sends them (spec-notes/xrc.md rule 13).

use super::*;
use crate::wire::cm::transport_type;

#[test]
fn an_xrc_connection_is_marked_and_answered_as_the_kernels_cm_does() {
    let mut a = CmEndpoint::new(cfg(1));
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 4).unwrap();
    let now = Duration::from_secs(1);
    let mut p = ConnectParams::rc(SERVICE, 0x11, 0x100, [1; 16], [2; 16]);
    p.transport = transport_type::EXTENDED;
    let conn = a.connect(now, addr(2), &p).unwrap();
    // The REQ: transport 3, extended transport 1; what only a responder or a target has is
    // left at 0 (cm_format_req for IB_QPT_XRC_INI).
    let req = a.poll_transmit().unwrap().mad;
    let (_, m) = CmMessage::parse(&req).unwrap();
    let CmMessage::Req(r) = m else {
        panic!("not a REQ: {m:?}")
    };
    assert_eq!(
        (r.transport_service_type, r.extended_transport_type),
        (3, 1)
    );
    assert_eq!(
        (
            r.responder_resources,
            r.retry_count,
            r.rnr_retry_count,
            r.srq
        ),
        (0, 0, 0, false)
    );
    assert_eq!((r.local_qpn, r.initiator_depth), (0x11, 1));
    // The target takes it as XRC and answers with its QPN as the local EE context number.
    b.handle_mad(now, addr(1), &req);
    let Some(CmEvent::ConnectRequest { conn: bc, peer }) = b.poll_event() else {
        panic!("no connect request")
    };
    assert_eq!((peer.transport, peer.qpn), (transport_type::EXTENDED, 0x11));
    b.accept(now, bc, &accept_params()).unwrap();
    let rep = b.poll_transmit().unwrap().mad;
    let (_, m) = CmMessage::parse(&rep).unwrap();
    let CmMessage::Rep(r) = m else {
        panic!("not a REP: {m:?}")
    };
    assert_eq!((r.local_qpn, r.local_eecn, r.srq), (0, 0x22, true));
    assert_eq!(r.initiator_depth, 0);
    // The initiator learns the target's QPN from there.
    a.handle_mad(now, addr(2), &rep);
    let Some(CmEvent::RepReceived { conn: ac, peer }) = a.poll_event() else {
        panic!("no REP event")
    };
    assert_eq!((ac, peer.qpn), (conn, 0x22));
    a.establish(ac).unwrap();
    b.handle_mad(now, addr(1), &a.poll_transmit().unwrap().mad);
    assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
}

#[test]
fn an_extended_transport_other_than_xrc_is_refused() {
    let mut b = CmEndpoint::new(cfg(2));
    b.listen(SERVICE, 4).unwrap();
    let mut buf = flood_req(1);
    let (hdr, msg) = CmMessage::parse(&buf).unwrap();
    let CmMessage::Req(req) = msg else { panic!() };
    let bad = CmReq {
        transport_service_type: transport_type::EXTENDED,
        extended_transport_type: 2,
        ..req
    };
    CmMessage::Req(bad).emit(hdr.tid, &mut buf).unwrap();
    b.handle_mad(Duration::ZERO, addr(9), &buf);
    let (_, m) = CmMessage::parse(&b.poll_transmit().unwrap().mad).unwrap();
    let CmMessage::Rej(r) = m else { panic!() };
    assert_eq!(r.reason, rej_reason::INVALID_TRANSPORT_TYPE);
    assert_eq!(b.connections(), 0);
}
