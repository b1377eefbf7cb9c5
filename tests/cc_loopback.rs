//! Congestion control through the engine and the kernel (spec-notes/congestion.md): with it
//! on, every RoCE packet a device sends arrives ECN-capable (ECT(0), read back from the
//! receiving socket through IP_RECVTOS, as the receiver's capture records it) with the address
//! vector's DSCP kept, and traffic runs as without it; with it off, the TOS stays the address
//! vector's (0), as rxe sends it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use softroce::ib::*;
use softroce::transport::cc::CcConfig;
use softroce::verbs::*;

mod common;

const FULL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

fn pcap_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("softroce-cc-{}-{tag}.pcap", std::process::id()))
}

/// Two contexts on 127.0.0.1 and 127.0.0.2, congestion control as `cc`, B capturing.
fn two(cc: CcConfig, pcap: &Path) -> (Context, Context) {
    common::two_contexts_configured(|i, cfg| {
        cfg.cc = cc;
        if i == 2 {
            cfg.pcap = Some(pcap.to_path_buf());
        }
    })
}

/// Runs a 256 KiB RDMA WRITE and a SEND from A to B with traffic class `tclass`, and returns
/// the TOS of every IPv4 packet B's capture saw arrive from 127.0.0.1.
fn run(cc: CcConfig, tclass: u8, tag: &str) -> Vec<u8> {
    let path = pcap_path(tag);
    {
        let (ca, cb) = two(cc, &path);
        let cap = common::queues(16);
        let mut ends = Vec::new();
        for ctx in [&ca, &cb] {
            let pd = ctx.alloc_pd().unwrap();
            let mr = pd.register_mr(1 << 20, FULL).unwrap();
            let cq = ctx.create_cq(64).unwrap();
            let qp = pd
                .create_qp(&QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    cap,
                    qp_type: QpType::Rc,
                    sq_sig_all: false,
                })
                .unwrap();
            qp.init(FULL).unwrap();
            ends.push((pd, mr, cq, qp));
        }
        for (i, ctx) in [&ca, &cb].into_iter().enumerate() {
            let (peer_ctx, peer) = if i == 0 {
                (&cb, &ends[1])
            } else {
                (&ca, &ends[0])
            };
            let mut c = RcConnect::new(peer.3.qp_num(), 0, peer_ctx.gid(1).unwrap(), 0);
            c.path_mtu = Mtu::Mtu1024;
            c.traffic_class = tclass;
            let _ = ctx;
            ends[i].3.ready_to_receive(&c).unwrap();
            ends[i].3.ready_to_send(&c).unwrap();
        }
        let (_, mr_b, cq_b, qp_b) = &ends[1];
        let rsge = [mr_b.sge(0, 64)];
        qp_b.post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &rsge,
        }])
        .unwrap();
        let (_, mr_a, cq_a, qp_a) = &ends[0];
        let big = [mr_a.sge(0, 256 * 1024)];
        let small = [mr_a.sge(0, 8)];
        qp_a.post_send(&[
            SendWr {
                wr_id: 1,
                sg_list: &big,
                opcode: WrOpcode::RdmaWrite {
                    remote_addr: mr_b.addr(),
                    rkey: mr_b.rkey(),
                },
                send_flags: SendFlags::SIGNALED,
            },
            SendWr {
                wr_id: 2,
                sg_list: &small,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
            },
        ])
        .unwrap();
        let mut wc = [WorkCompletion::default(); 4];
        let mut done = 0;
        while done < 2 {
            let n = cq_a
                .wait(&mut wc, Duration::from_secs(30))
                .expect("completion");
            assert!(n > 0, "completions within 30 s");
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success);
            }
            done += n;
        }
        let n = cq_b
            .wait(&mut wc, Duration::from_secs(30))
            .expect("receive");
        assert_eq!((n, wc[0].status), (1, WcStatus::Success));
        assert_eq!(ca.counter("np_cnp_sent"), Some(0), "loopback marks nothing");
        drop(ends);
    }
    let tos = common::tos_from(&path, [127, 0, 0, 1].into());
    let _ = std::fs::remove_file(&path);
    tos
}

#[test]
fn packets_leave_ect0_with_the_dscp_kept_when_cc_is_on() {
    // DSCP 24 (tclass 0x60); the capture holds only what B received from A.
    let tos = run(CcConfig::on(), 0x60, "on");
    assert!(tos.len() > 256, "{} packets", tos.len());
    assert!(tos.iter().all(|&t| t == 0x62), "{:x?}", &tos[..8]);
}

#[test]
fn packets_keep_the_traffic_class_when_cc_is_off() {
    let tos = run(CcConfig::default(), 0x60, "off");
    assert!(tos.len() > 256);
    assert!(tos.iter().all(|&t| t == 0x60), "{:x?}", &tos[..8]);
}
