//! Tests of `cm.rs` (moved out of it as they were).

use super::*;

/// The MADs of tests/data/rxe/rping.pcap (kernel 6.1's CM, `rping -c` on 192.0.2.11 against
/// `rping -s` on 192.0.2.12): the first 72 data bytes of each; the rest is zero except the
/// REQ's private data, given separately.
const TID: u64 = 0x0000_0002_8edc_46a2;
const REQ_HEAD: &str = "a246dc8e000000000000000001061c06505400fffec0020b000000000000000000001e0100000001000000a09c0b72a7ffff37f0ffffffff00000000000000000000ffffc000020b00000000000000000000ffffc000020c5afb7000004000980000000000000000";
const REP_HEAD: &str = "e0de89dea246dc8e0000000000001e00000000007fdafc00010178e0505400fffec0020c";
const RTU_HEAD: &str = "a246dc8ee0de89de";
const DREQ_HEAD: &str = "a246dc8ee0de89de00001e00";
const DREP_HEAD: &str = "e0de89dea246dc8e";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn mad_with(attr_id: u16, head: &str) -> [u8; mad::LEN] {
    let mut m = [0u8; mad::LEN];
    MadRepr::cm_send(TID, attr_id).emit(&mut m).unwrap();
    let h = hex(head);
    m[mad::HEADER_LEN..mad::HEADER_LEN + h.len()].copy_from_slice(&h);
    m
}

/// `N` zero bytes but for the first, `first`, and the last, `last`: an area whose ends show
/// where it landed.
fn marked<const N: usize>(first: u8, last: u8) -> [u8; N] {
    let mut a = [0u8; N];
    a[0] = first;
    a[N - 1] = last;
    a
}

fn roundtrip(m: &[u8; mad::LEN]) -> CmMessage {
    let (hdr, msg) = CmMessage::parse(m).unwrap();
    assert_eq!(hdr.tid, TID);
    let mut out = [0xEEu8; mad::LEN];
    msg.emit(TID, &mut out).unwrap();
    assert_eq!(&out[..], &m[..], "{} re-emitted differs", msg.name());
    msg
}

#[test]
fn rxe_req() {
    let m = mad_with(attr::REQ, REQ_HEAD);
    let CmMessage::Req(r) = roundtrip(&m) else {
        panic!("not a REQ")
    };
    assert_eq!(r.local_comm_id, 0xa246dc8e);
    assert_eq!(r.service_id, rdma_tcp_service_id(7174));
    assert_eq!(rdma_service_port(r.service_id), Some(7174));
    assert_eq!(r.local_ca_guid, 0x505400fffec0020b);
    assert_eq!(r.local_qkey, 0);
    assert_eq!(r.local_qpn, 0x1e);
    assert_eq!(r.responder_resources, 1);
    assert_eq!(r.initiator_depth, 1);
    assert_eq!(r.remote_cm_response_timeout, 20);
    assert_eq!(r.transport_service_type, transport_type::RC);
    assert!(!r.end_to_end_flow_control);
    assert_eq!(r.starting_psn, 0x9c0b72);
    assert_eq!(r.local_cm_response_timeout, 20);
    assert_eq!(r.retry_count, 7);
    assert_eq!(r.partition_key, 0xffff);
    assert_eq!(r.path_mtu, 3);
    assert_eq!(r.rnr_retry_count, 7);
    assert_eq!(r.max_cm_retries, 15);
    assert!(!r.srq);
    assert_eq!(r.primary.local_lid, 0xffff);
    assert_eq!(r.primary.remote_lid, 0xffff);
    assert_eq!(r.primary.local_gid[10..], [0xff, 0xff, 192, 0, 2, 11]);
    assert_eq!(r.primary.remote_gid[10..], [0xff, 0xff, 192, 0, 2, 12]);
    assert_eq!(r.primary.flow_label, 0x5afb7);
    assert_eq!(r.primary.hop_limit, 64);
    assert_eq!(r.primary.local_ack_timeout, 19);
    assert_eq!(r.alternate, CmPath::default());
}

#[test]
fn rxe_rep_rtu_dreq_drep() {
    let CmMessage::Rep(r) = roundtrip(&mad_with(attr::REP, REP_HEAD)) else {
        panic!("not a REP")
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (0xe0de89de, 0xa246dc8e)
    );
    assert_eq!(r.local_qpn, 0x1e);
    assert_eq!(r.starting_psn, 0x7fdafc);
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    assert_eq!(r.target_ack_delay, 15);
    assert_eq!(r.rnr_retry_count, 7);
    assert!(!r.srq);
    assert_eq!(r.local_ca_guid, 0x505400fffec0020c);

    let CmMessage::Rtu(r) = roundtrip(&mad_with(attr::RTU, RTU_HEAD)) else {
        panic!("not an RTU")
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (0xa246dc8e, 0xe0de89de)
    );

    let CmMessage::Dreq(d) = roundtrip(&mad_with(attr::DREQ, DREQ_HEAD)) else {
        panic!("not a DREQ")
    };
    assert_eq!(d.remote_qpn, 0x1e);

    let CmMessage::Drep(d) = roundtrip(&mad_with(attr::DREP, DREP_HEAD)) else {
        panic!("not a DREP")
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (0xe0de89de, 0xa246dc8e)
    );
}

#[test]
fn rej_mra_sidr_roundtrip_through_their_layouts() {
    let rej = CmRej {
        local_comm_id: 1,
        remote_comm_id: 0,
        message_rejected: message_ref::REQ,
        rejected_info_length: 0,
        reason: rej_reason::INVALID_SERVICE_ID,
        ari: [0; REJ_ARI_LEN],
        private_data: [7; REJ_PRIVATE_DATA_LEN],
    };
    let mut m = [0u8; mad::LEN];
    CmMessage::Rej(rej).emit(5, &mut m).unwrap();
    // Reason at data bytes 10-11, private data from data byte 84.
    assert_eq!(m[mad::HEADER_LEN + 10..mad::HEADER_LEN + 12], [0, 8]);
    assert_eq!(m[mad::HEADER_LEN + 83], 0);
    assert_eq!(m[mad::HEADER_LEN + 84], 7);
    assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::Rej(rej));
    assert_eq!(rej_reason::name(rej.reason), "invalid service ID");

    let mra = CmMra {
        local_comm_id: 2,
        remote_comm_id: 3,
        message_mraed: message_ref::REP,
        service_timeout: 31,
        private_data: [0; MRA_PRIVATE_DATA_LEN],
    };
    CmMessage::Mra(mra).emit(6, &mut m).unwrap();
    assert_eq!(m[mad::HEADER_LEN + 8], 0x40);
    assert_eq!(m[mad::HEADER_LEN + 9], 0xf8);
    assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::Mra(mra));

    let sidr = CmSidrRep {
        request_id: 9,
        status: 0,
        additional_information_length: 0,
        qpn: 0x123456,
        service_id: rdma_tcp_service_id(1),
        qkey: 0x1234_5678,
        additional_information: [0; SIDR_REP_INFO_LEN],
        private_data: [1; SIDR_REP_PRIVATE_DATA_LEN],
    };
    CmMessage::SidrRep(sidr).emit(7, &mut m).unwrap();
    assert_eq!(
        m[mad::HEADER_LEN + 8..mad::HEADER_LEN + 11],
        [0x12, 0x34, 0x56]
    );
    assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::SidrRep(sidr));
}

/// The byte offsets of Linux's `struct cm_sidr_req_msg` (include/rdma/ibta_vol1_c12.h):
/// request ID 4, partition key 2, reserved 2, service ID 8, private data 216.
#[test]
fn sidr_req_bytes_are_linuxs_layout() {
    let req = CmSidrReq {
        request_id: 0x1122_3344,
        partition_key: 0xffff,
        service_id: rdma_udp_service_id(7174),
        private_data: marked(0xa1, 0xa2),
    };
    let mut m = [0u8; mad::LEN];
    CmMessage::SidrReq(req)
        .emit(0x0102_0304_0506_0708, &mut m)
        .unwrap();
    let d = &m[mad::HEADER_LEN..];
    let hdr = MadRepr::parse(&m).unwrap();
    assert_eq!((hdr.attr_id, hdr.tid), (0x0017, 0x0102_0304_0506_0708));
    assert_eq!(d[0..4], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(d[4..6], [0xff, 0xff]);
    assert_eq!(d[6..8], [0, 0], "reserved");
    assert_eq!(d[8..16], [0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]);
    assert_eq!((d[16], d[16 + 215]), (0xa1, 0xa2));
    assert_eq!(d.len(), 232);
    assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::SidrReq(req));
}

/// `struct cm_sidr_rep_msg`: request ID 4, status 1, additional information length 1,
/// reserved 2, QPN 24 bits then 8 reserved, service ID 8, Q_Key 4, additional
/// information 72, private data 136.
#[test]
fn sidr_rep_bytes_are_linuxs_layout() {
    let rep = CmSidrRep {
        request_id: 0xdead_beef,
        status: sidr_status::REJECT,
        additional_information_length: 5,
        qpn: 0x00ab_cdef,
        service_id: rdma_udp_service_id(0x1234),
        qkey: 0x0123_4567,
        additional_information: marked(0xc1, 0xc2),
        private_data: marked(0xb1, 0xb2),
    };
    let mut m = [0u8; mad::LEN];
    CmMessage::SidrRep(rep).emit(9, &mut m).unwrap();
    let d = &m[mad::HEADER_LEN..];
    assert_eq!(MadRepr::parse(&m).unwrap().attr_id, 0x0018);
    assert_eq!(d[0..4], [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!((d[4], d[5]), (2, 5));
    assert_eq!(d[6..8], [0, 0], "reserved");
    assert_eq!(d[8..12], [0xab, 0xcd, 0xef, 0], "QPN in the top 24 bits");
    assert_eq!(d[12..20], [0, 0, 0, 0, 0x01, 0x11, 0x12, 0x34]);
    assert_eq!(d[20..24], [0x01, 0x23, 0x45, 0x67]);
    assert_eq!((d[24], d[24 + 71]), (0xc1, 0xc2));
    assert_eq!((d[96], d[96 + 135]), (0xb1, 0xb2));
    assert_eq!(CmMessage::parse(&m).unwrap().1, CmMessage::SidrRep(rep));
    // A received QPN byte's reserved low 8 bits do not leak into the QPN.
    let mut m2 = m;
    m2[mad::HEADER_LEN + 11] = 0x5a;
    let CmMessage::SidrRep(r2) = CmMessage::parse(&m2).unwrap().1 else {
        panic!("not a SIDR_REP")
    };
    assert_eq!(r2.qpn, 0x00ab_cdef);
}

#[test]
fn reserved_bits_are_ignored_on_receipt_and_zero_when_sent() {
    let mut dreq = mad_with(attr::DREQ, DREQ_HEAD);
    dreq[mad::HEADER_LEN + 11] = 0xff; // reserved byte after the 24-bit remote QPN
    let (_, msg) = CmMessage::parse(&dreq).unwrap();
    let CmMessage::Dreq(d) = msg else {
        panic!("not a DREQ")
    };
    assert_eq!(d.remote_qpn, 0x1e);
    let mut out = [0xEEu8; mad::LEN];
    msg.emit(TID, &mut out).unwrap();
    assert_eq!(out[mad::HEADER_LEN + 11], 0);
    assert_eq!(out[..], mad_with(attr::DREQ, DREQ_HEAD)[..]);
}

#[test]
fn other_classes_and_attributes_are_typed_errors() {
    let mut m = mad_with(attr::REQ, REQ_HEAD);
    m[1] = 0x81; // not the CM class
    assert!(matches!(
        CmMessage::parse(&m),
        Err(Error::UnsupportedMad {
            mgmt_class: 0x81,
            ..
        })
    ));
    let mut m = mad_with(0x0042, "");
    assert!(matches!(
        CmMessage::parse(&m),
        Err(Error::UnsupportedMad {
            attr_id: 0x0042,
            ..
        })
    ));
    m[2] = 1; // class version 1
    assert!(CmMessage::parse(&m).is_err());
    assert!(CmMessage::parse(&m[..200]).is_err());
}

/// Every message's layout, as declared once: fields within the 232 bytes of message data,
/// none overlapping another, each at most as wide as its type (and within the 64 bits a
/// `BitField` reads), and the private data running to the end of the message.
#[test]
fn layouts_fit_their_types_and_the_message_without_overlap() {
    type Occupied = fn(usize, &mut Vec<(usize, usize, usize)>);
    let layouts: [(&str, Occupied); 8] = [
        ("REQ", CmReq::occupied),
        ("MRA", CmMra::occupied),
        ("REJ", CmRej::occupied),
        ("REP", CmRep::occupied),
        ("RTU/DREP", CmIds::occupied),
        ("DREQ", CmDreq::occupied),
        ("SIDR_REQ", CmSidrReq::occupied),
        ("SIDR_REP", CmSidrRep::occupied),
    ];
    for (name, occupied) in layouts {
        let mut fields = Vec::new();
        occupied(0, &mut fields);
        fields.sort_unstable();
        for &(first, width, holds) in &fields {
            assert!(
                (1..=holds).contains(&width),
                "{name}: the field at bit {first} is {width} bits wide in a type of {holds}"
            );
            // Byte arrays (wider than any number) are copied, not read as one word.
            assert!(
                holds > 64 || first % 8 + width <= 64,
                "{name}: the bit field at bit {first} spans more than 8 bytes"
            );
        }
        for pair in fields.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                a.0 + a.1 <= b.0,
                "{name}: fields at bits {} and {} overlap",
                a.0,
                b.0
            );
        }
        let (first, width, _) = *fields.last().unwrap();
        assert_eq!(
            first + width,
            mad::DATA_LEN * 8,
            "{name}: does not end the message"
        );
    }
}
