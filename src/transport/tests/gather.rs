//! RC payloads left in their region for the caller to gather (`poll_transmit_gather`): which
//! packets gather, and that the datagrams assembled from them carry the message intact.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::{pattern, post_send, Pair, IOVA};
use crate::ib::{Mtu, WcStatus, WrOpcode};
use crate::transport::{DatagramEvent, Endpoint, IpFields, OneQp, MAX_PACKET};

/// A WRITE of 3 MTUs and 100 bytes from an unaligned offset: the full-MTU packets leave their
/// payload in the region (the last, under 512 bytes, is copied), the datagrams assembled as
/// the kernel would from headers, region bytes and pad + ICRC pass the responder's endpoint,
/// and the message lands whole and completes.
#[test]
fn rc_write_payloads_are_gathered_and_arrive_whole() {
    let mut p = Pair::new(Mtu::Mtu1024);
    let len = 3 * 1024 + 100;
    let data = pattern(9, len);
    p.a.mr.storage.write(5, &data).unwrap();
    let rkey = p.b.mr.rkey;
    let ea = Endpoint::new(p.a.addr, 4791, Arc::clone(&p.a.qp.counters));
    let eb = Endpoint::new(p.b.addr, 4791, Arc::clone(&p.b.qp.counters));
    post_send(
        &mut p,
        1,
        WrOpcode::RdmaWrite {
            remote_addr: IOVA + 64,
            rkey,
        },
        5,
        len as u32,
    );
    let now = Duration::from_millis(1);
    let mut buf = vec![0u8; MAX_PACKET];
    let mut gathered = Vec::new();
    while let Some((t, g)) = ea.poll_transmit_gather(now, &mut p.a.qp, &mut buf) {
        gathered.push(g.as_ref().map(|g| (g.offset, g.len)));
        let whole = match &g {
            Some(g) => {
                let mut w = buf[..g.at].to_vec();
                w.extend(g.bytes.to_vec(g.offset, g.len).unwrap());
                w.extend_from_slice(&buf[g.at..t.len - g.len]);
                w
            }
            None => buf[..t.len].to_vec(),
        };
        assert_eq!(whole.len(), t.len);
        let src = SocketAddr::new(p.a.addr.ip(), t.src_port);
        let mut qps = OneQp {
            qp: &mut p.b.qp,
            mrs: &p.b.mrs,
        };
        let ip = IpFields::default();
        assert!(matches!(
            eb.handle(now, src, p.b.addr, ip, &whole, &mut qps),
            Some(DatagramEvent::Qp(_))
        ));
    }
    assert_eq!(
        gathered,
        [
            Some((5, 1024)),
            Some((5 + 1024, 1024)),
            Some((5 + 2048, 1024)),
            None
        ],
        "full-MTU payloads stay in the region; a short one is copied"
    );
    assert_eq!(p.b.mr.storage.to_vec(64, len).unwrap(), data);
    // B's acknowledgement completes the WRITE at A.
    let t = eb.poll_transmit(now, &mut p.b.qp, &mut buf).unwrap();
    let src = SocketAddr::new(p.b.addr.ip(), t.src_port);
    let mut qps = OneQp {
        qp: &mut p.a.qp,
        mrs: &p.a.mrs,
    };
    ea.handle(
        now,
        src,
        p.a.addr,
        IpFields::default(),
        &buf[..t.len],
        &mut qps,
    )
    .unwrap();
    let (_, wc) = p.a.qp.poll_completion().unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
}
