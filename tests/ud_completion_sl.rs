//! A UD receive completion says which L3 header the datagram had (IPv4 or IPv6), and reports
//! it in `sl` as mlx5 does (2 = IPv4, 1 = IPv6): UCX's UD transport finds the destination GID
//! in the GRH area by it (spec-notes/ud-completion-sl.md). Send completions keep 0.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use softroce::driver::DeviceConfig;
use softroce::ib::*;
use softroce::verbs::*;

mod common;
use common::{contexts, wait_one, End, EndSpec};

const QKEY: u32 = 0x1111_1111;

fn ud_end(ctx: Context) -> End {
    let e = End::open(
        ctx,
        &EndSpec {
            mr_len: 1 << 14,
            mr_access: AccessFlags::LOCAL_WRITE,
            cq_len: 64,
            qp_type: QpType::Ud,
            cap: common::queues(8),
            sq_sig_all: false,
        },
    );
    e.qp.ready_ud(QKEY, 0x4321).unwrap();
    e
}

fn wait(cq: &CompletionQueue) -> WorkCompletion {
    let wc = wait_one(cq, Duration::from_secs(30));
    assert_eq!(wc.status, WcStatus::Success);
    wc
}

/// One datagram from `s` to `r`; the sender's and the receiver's completions.
fn datagram(s: &End, r: &End) -> (WorkCompletion, WorkCompletion, [u8; 40]) {
    r.qp.post_recv(&[RecvWr {
        wr_id: 7,
        sg_list: &[r.mr.sge(0, 1024)],
    }])
    .unwrap();
    let ah = s.ah_to(r);
    s.qp.post_send_ud(&[UdSendWr {
        wr: SendWr {
            wr_id: 1,
            sg_list: &[s.mr.sge(0, 100)],
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        },
        ah: &ah,
        remote_qpn: r.qp.qp_num(),
        remote_qkey: QKEY,
    }])
    .unwrap();
    let sent = wait(&s.cq);
    let got = wait(&r.cq);
    let mut grh = [0u8; 40];
    r.mr.read(0, &mut grh).unwrap();
    (sent, got, grh)
}

#[test]
fn an_ipv4_datagram_completes_with_packet_type_2() {
    let mut c = contexts(2);
    let r = ud_end(c.pop().unwrap());
    let s = ud_end(c.pop().unwrap());
    let (sent, got, grh) = datagram(&s, &r);
    assert_eq!(got.network_hdr_type, Some(NetworkHdrType::Ipv4));
    assert_eq!(got.sl(), 2);
    // What UCX does with it: type 2 means the destination address is the GRH area's last
    // four bytes, and they are the receiver's.
    assert_eq!(&grh[36..], &[127, 0, 0, 2]);
    assert_eq!(sent.network_hdr_type, None);
    assert_eq!(sent.sl(), 0, "a send completion has no packet type");
}

#[test]
fn an_ipv6_datagram_completes_with_packet_type_1() {
    // ::1 is the only IPv6 loopback address: the two devices differ by UDP port.
    let (a_port, b_port) = loop {
        let p = || {
            UdpSocket::bind("[::1]:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (p1, p2) = (p(), p());
        if p1 != p2 {
            break (p1, p2);
        }
    };
    let open = |port: u16, peer: u16| {
        let mut cfg = DeviceConfig::new(SocketAddr::new("::1".parse::<IpAddr>().unwrap(), port));
        cfg.remote_port = Some(peer);
        Context::open(&cfg).expect("IPv6 loopback device")
    };
    let s = ud_end(open(a_port, b_port));
    let r = ud_end(open(b_port, a_port));
    let (_, got, grh) = datagram(&s, &r);
    assert_eq!(got.network_hdr_type, Some(NetworkHdrType::Ipv6));
    assert_eq!(got.sl(), 1);
    // Type 1: the GRH area is the IPv6 header, its last 16 bytes the destination GID.
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(&grh[24..], &r.ctx.gid(0).unwrap().0);
}
