//! `softroce perf -R` (and -z) in two processes on loopback (server on 127.0.0.1, client on
//! 127.0.0.2): perftest's exchange over an rdma_cm connection to the -p port, the data QPs
//! connected by rdma_cm (IB CM MADs over QP1), no TCP at all; --check verifies every byte.

use std::net::TcpListener;
use std::time::Duration;

mod common;
use common::{end_args, finish, ok, ports, s, spawn};

/// Runs `perf OP FLAGS` as server and client on one rdma_cm port; returns both stdouts.
fn pair(op: &[&str], flags: &[&str]) -> (String, String) {
    let (port, udp) = ports();
    let args = |ip: &str| {
        let mut v = s(&["perf"]);
        v.extend(s(op));
        v.extend(s(flags));
        v.extend(end_args(&["--timeout", "20"], port, udp, ip));
        v
    };
    let server = spawn(&args("127.0.0.1"));
    // No TCP: the client's REQ that arrives before the server listens is rejected, and the
    // client tries again (as perftest's rdma_cm clients do) until it gets through.
    let mut cv = args("127.0.0.2");
    cv.push("127.0.0.1".into());
    let what = format!("{op:?} {flags:?}");
    let c = finish(
        spawn(&cv),
        &format!("client {what}"),
        Duration::from_secs(60),
    );
    let sv = finish(server, &format!("server {what}"), Duration::from_secs(60));
    (
        ok(&c, &format!("client {what}")),
        ok(&sv, &format!("server {what}")),
    )
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn write_read_and_send_bw_over_rdma_cm_with_two_qps_verify_every_byte() {
    for op in ["write", "read", "send"] {
        let (c, sv) = pair(
            &[op],
            &[
                "-R", "-q", "2", "--check", "--json", "-s", "5000", "-n", "60",
            ],
        );
        let v = json(&c);
        assert_eq!(v["check"], true, "{op}: {c}");
        assert_eq!(
            (&v["qps"], &v["iters"]),
            (&2.into(), &60.into()),
            "{op}: {c}"
        );
        assert_eq!(
            v["messages"], 120,
            "{op}: 60 iterations on each of 2 QPs: {c}"
        );
        assert!(v["bw_avg_mbps"].as_f64().unwrap() > 0.0, "{op}: {c}");
        // The server's report: for WRITE and READ, the one the client sent it over the
        // rdma_cm exchange.
        assert_eq!(json(&sv)["messages"], 120, "{op}: {sv}");
    }
}

#[test]
fn latency_and_atomics_over_rdma_cm() {
    for op in [&["send", "--lat"][..], &["write", "--lat"], &["atomic"]] {
        let (c, _) = pair(op, &["-R", "--check", "--json", "-n", "40"]);
        let v = json(&c);
        assert_eq!(v["check"], true, "{op:?}: {c}");
    }
}

#[test]
fn exchange_over_rdma_cm_with_qps_connected_from_the_keys() {
    // -z: perftest's use_rdma_cm without work_rdma_cm.
    let (c, _) = pair(&["write"], &["-z", "--check", "--json", "-n", "50"]);
    assert_eq!(json(&c)["check"], true, "{c}");
}

#[test]
fn no_tcp_port_is_opened_and_uc_is_refused() {
    // The server of a -R run listens with rdma_cm only: its -p port stays free for TCP.
    let (port, udp) = ports();
    let server = spawn(&end_args(
        &["perf", "write", "-R", "--timeout", "5"],
        port,
        udp,
        "127.0.0.1",
    ));
    std::thread::sleep(Duration::from_millis(300));
    let free = TcpListener::bind(("127.0.0.1", port)).is_ok();
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    assert!(free, "a -R server must not listen on TCP");
    let o = finish(
        spawn(&s(&["perf", "write", "-R", "-c", "UC", "127.0.0.1"])),
        "-R -c UC",
        Duration::from_secs(10),
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("librdmacm"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
