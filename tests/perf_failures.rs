//! How `softroce perf` fails when the peer is not where the flags say: at once where the
//! protocol can tell (a peer that never answers a packet: the retry count, as perftest
//! reports it), and always saying what was tried towards which address.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn a_roce_port_mismatch_ends_in_the_retry_count_error_within_seconds() {
    for op in ["write", "send"] {
        let (tcp, udp) = ports();
        let end = |ip: &str, roce: u16| end_args(&["perf", op, "-n", "100"], tcp, roce, ip);
        // The client sends to a RoCE port nobody listens on (its own, one above the server's).
        let server = spawn(&end("127.0.0.1", udp));
        let mut cv = end("127.0.0.2", udp + 1);
        cv.push("127.0.0.1".into());
        let t = Instant::now();
        let client = client_until_connected(&cv, Duration::from_secs(60));
        let client_took = t.elapsed();
        let server = finish(server, "server", Duration::from_secs(60));
        let server_took = t.elapsed();
        assert!(!client.status.success() && !server.status.success());
        let e = String::from_utf8_lossy(&client.stderr);
        assert!(
            e.contains("Completion with error at client: Failed status 12 (transport retry counter exceeded)"),
            "{op}: {e}"
        );
        assert!(
            e.contains(&format!("the QPs send to 127.0.0.1:{}", udp + 1)),
            "{op}: {e}"
        );
        assert!(e.contains(" 0 received"), "{op}: {e}");
        // 8 ACK timeouts of 67 ms, not the 30 s --timeout.
        assert!(
            client_took < Duration::from_secs(10),
            "{op}: {client_took:?}"
        );
        // The server, whose client went away, does not wait out its --timeout either.
        assert!(
            server_took < Duration::from_secs(15),
            "{op}: {server_took:?}"
        );
        let se = String::from_utf8_lossy(&server.stderr);
        assert!(
            se.contains("the peer closed the exchange") || se.contains("peer closed"),
            "{op}: {se}"
        );
    }
}

#[test]
fn an_rdma_cm_client_with_no_server_says_what_it_tried_and_where() {
    let (tcp, udp) = ports();
    let mut client = end_args(
        &["perf", "write", "-R", "--timeout", "2"],
        tcp,
        udp,
        "127.0.0.2",
    );
    client.push("127.0.0.1".into());
    let t = Instant::now();
    let o = finish(spawn(&client), "client", Duration::from_secs(30));
    assert!(!o.status.success());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains(&format!("no connection to 127.0.0.1 port {tcp}")),
        "{e}"
    );
    assert!(e.contains("connection request(s) (REQ"), "{e}");
    assert!(!e.contains("did not answer in time"), "{e}");
}
