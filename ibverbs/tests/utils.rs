//! Debian's own binaries (ibverbs-utils) run unmodified under the shim: the device list,
//! ibv_devinfo, and ibv_rc_pingpong two processes on loopback (polling and event mode, with
//! the data check), without root.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn ibv_devices_lists_softroce0() {
    let out = under_shim(&program("ibv_devices", "ibverbs-utils"), "127.0.16.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // node GUID: the EUI-64 made from 127.0.16.1.
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().eq(["softroce0", "00007ffffe001001"])),
        "{text}"
    );
}

#[test]
fn ibv_devinfo_shows_an_active_ethernet_port() {
    let out = under_shim(&program("ibv_devinfo", "ibverbs-utils"), "127.0.16.1")
        .env("SOFTROCE_MTU", "2048")
        .arg("-v")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "hca_id:\tsoftroce0",
        "PORT_ACTIVE (4)",
        "max_mtu:\t\t4096 (5)",
        "active_mtu:\t\t2048 (4)",
        "link_layer:\t\tEthernet",
        "max_qp_wr:\t\t\t16384",
        "GID[  1]:\t\t::ffff:127.0.16.1, RoCE v2",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

fn rc_pingpong(extra: &[&str], server_ip: &str, client_ip: &str) {
    pingpong("ibv_rc_pingpong", extra, server_ip, client_ip);
}

fn pingpong(name: &str, extra: &[&str], server_ip: &str, client_ip: &str) {
    let prog = program(name, "ibverbs-utils");
    let port = free_tcp_port().to_string();
    let mut s = under_shim(&prog, server_ip);
    s.args(["-g", "1", "-p", &port, "-n", "200", "-c"])
        .args(extra);
    let mut c = under_shim(&prog, client_ip);
    c.args(["-g", "1", "-p", &port, "-n", "200", "-c"])
        .args(extra)
        .arg("127.0.0.1");
    let (st, ct) = pair(s, c, Duration::from_secs(60));
    for (t, me, peer) in [(&st, server_ip, client_ip), (&ct, client_ip, server_ip)] {
        assert!(t.contains("local address:  LID 0x0000"), "{t}");
        assert!(t.contains(&format!("GID ::ffff:{me}")), "{t}");
        assert!(t.contains(&format!("GID ::ffff:{peer}")), "{t}");
        assert!(t.contains("200 iters in"), "{t}");
    }
}

#[test]
fn ibv_rc_pingpong_two_processes_polling() {
    rc_pingpong(&[], "127.0.16.2", "127.0.16.3");
}

#[test]
fn ibv_rc_pingpong_two_processes_events_multi_packet() {
    // -e: completion channel (req_notify, get_cq_event on the eventfd, ack); 8 KiB messages
    // over a 1024-byte MTU.
    rc_pingpong(
        &["-e", "-s", "8192", "-m", "1024"],
        "127.0.16.4",
        "127.0.16.5",
    );
}

#[test]
fn ibv_uc_pingpong_two_processes() {
    pingpong(
        "ibv_uc_pingpong",
        &["-s", "3000"],
        "127.0.16.6",
        "127.0.16.7",
    );
}

#[test]
fn ibv_ud_pingpong_two_processes() {
    // UD: address handles, the GRH area in receive buffers, one MTU per message.
    pingpong(
        "ibv_ud_pingpong",
        &["-s", "1000"],
        "127.0.16.8",
        "127.0.16.9",
    );
}

#[test]
fn ibv_srq_pingpong_two_processes() {
    // 16 RC QPs on one shared receive queue.
    pingpong("ibv_srq_pingpong", &[], "127.0.16.14", "127.0.16.15");
}
