//! `softroce perf send -c UD` and `perf send --lat -c UD` against themselves: two processes on
//! loopback (a server on 127.0.0.1, a client on 127.0.0.2), perftest's exchange over TCP and UD
//! datagrams over UDP. The rules are perftest 4.5's (spec-notes/uc-ud-srq.md "perftest UD").

use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::{bin, counters, ok, two_ends};

/// Runs `softroce perf send -c UD` as a server with `sv` and as a client with `cv` (each after
/// the flags both share, `both`); returns both outputs.
fn pair(both: &[&str], sv: &[&str], cv: &[&str]) -> (Output, Output) {
    let head: Vec<&str> = ["perf", "send", "-c", "UD"]
        .iter()
        .chain(both)
        .copied()
        .collect();
    let (sv, cl, _) = two_ends(
        &head,
        sv,
        cv,
        Duration::from_secs(90),
        Duration::from_secs(30),
    );
    (sv, cl)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The `--json` lines of a run's stdout.
fn json(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The whitespace-separated fields of the result row of `size` in a text report.
fn row(text: &str, size: u64) -> Vec<String> {
    let lead = format!(" {size} ");
    text.lines()
        .find(|l| l.starts_with(&lead))
        .unwrap_or_else(|| panic!("no {size}-byte row in:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn send_bw_over_ud_delivers_every_datagram_checked() {
    let (sv, cl) = pair(
        &["--check", "-n", "300", "-s", "1000", "--counters"],
        &[],
        &[],
    );
    let (st, ct) = (ok(&sv, "server"), ok(&cl, "client"));
    for t in [&st, &ct] {
        assert!(t.contains(" Connection type : UD"), "{t}");
        assert!(t.contains(" Mtu             : 4096[B]"), "{t}");
        let r = row(t, 1000);
        assert_eq!(r[1], "300", "{t}");
        assert!(r[3].parse::<f64>().unwrap() > 0.0, "{t}");
    }
    // Every SEND went out as one datagram and every one found a receive at the server, which
    // also verified each message's bytes (--check).
    let (c, sc) = (counters(&cl), counters(&sv));
    assert_eq!(c["rdma_sends"], 300, "{c:?}");
    assert_eq!(c["sent_pkts"], 300, "{c:?}");
    assert_eq!(sc["rdma_recvs"], 300, "{sc:?}");
    assert_eq!(sc.get("dropped_msg_pkts"), None, "{sc:?}");
}

#[test]
fn send_lat_over_ud_measures_at_both_ends() {
    let (sv, cl) = pair(
        &["--lat", "--check", "-n", "200", "-s", "700", "--counters"],
        &[],
        &[],
    );
    for (o, what) in [(&sv, "server"), (&cl, "client")] {
        let t = ok(o, what);
        assert!(t.contains("Send Latency Test"), "{t}");
        assert!(t.contains(" Connection type : UD"), "{t}");
        let r = row(&t, 700);
        assert_eq!(r[1], "200", "{t}");
        // t_min <= t_typical <= t_max, all positive.
        let f: Vec<f64> = r[2..].iter().map(|x| x.parse().unwrap()).collect();
        assert!(f[0] > 0.0 && f[0] <= f[2] && f[2] <= f[1], "{t}");
        // A ping-pong: 200 each way.
        let n = counters(o);
        assert_eq!(
            (n["rdma_sends"], n["rdma_recvs"]),
            (200, 200),
            "{what}: {n:?}"
        );
    }
}

#[test]
fn all_sizes_stop_at_the_mtu_under_ud() {
    // ib_send_bw -a -c UD: 2 .. MTU, at both ends, with perftest's notice.
    let (sv, cl) = pair(&["-a", "-n", "20", "-m", "1024", "--json"], &[], &[]);
    let want: Vec<u64> = (1..=10).map(|i| 1u64 << i).collect();
    for (o, what) in [(&sv, "server"), (&cl, "client")] {
        let rows = json(&ok(o, what));
        let sizes: Vec<u64> = rows.iter().map(|v| v["bytes"].as_u64().unwrap()).collect();
        assert_eq!(sizes, want, "{what}");
        assert!(rows.iter().all(|v| v["iters"] == 20 && v["mtu"] == 1024));
        assert!(
            stderr(o).contains(" Max msg size in UD is MTU 1024\n Changing to this MTU"),
            "{what}: {}",
            stderr(o)
        );
    }
    // ib_send_lat -a -c UD likewise, here to the smaller of the two ends' MTUs.
    let (sv, cl) = pair(&["--lat", "-a", "-n", "10", "--json"], &["-m", "512"], &[]);
    let want: Vec<u64> = (1..=9).map(|i| 1u64 << i).collect();
    for (o, what) in [(&sv, "lat server"), (&cl, "lat client")] {
        let sizes: Vec<u64> = json(&ok(o, what))
            .iter()
            .map(|v| v["bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(sizes, want, "{what}");
    }
}

#[test]
fn messages_over_the_mtu_shrink_or_are_refused_as_perftest_does() {
    // -s over this end's MTU shrinks to it, silently (perftest's check_link).
    let (sv, cl) = pair(&["-s", "2048", "-m", "1024", "-n", "50"], &[], &[]);
    for (o, what) in [(&sv, "server"), (&cl, "client")] {
        let t = ok(o, what);
        assert_eq!(row(&t, 1024)[1], "50", "{t}");
        assert!(!t.contains(" 2048 "), "{t}");
    }
    // Without -s the default 65536 shrinks to the MTU the two ends agree on, with the notice.
    let (sv, cl) = pair(&["-n", "50"], &["-m", "512"], &[]);
    let t = ok(&cl, "client");
    assert_eq!(row(&t, 512)[1], "50", "{t}");
    assert!(stderr(&cl).contains(" Max msg size in UD is MTU 512"));
    ok(&sv, "server");
    // An explicit -s within this end's MTU but over the agreed one is refused (check_mtu).
    let (sv, cl) = pair(&["-s", "2048", "-n", "50"], &["-m", "1024"], &[]);
    assert!(!cl.status.success());
    assert!(
        stderr(&cl).contains("Max message size in UD cannot be greater than MTU"),
        "{}",
        stderr(&cl)
    );
    assert!(!sv.status.success(), "the server is left without a peer");
}

#[test]
fn a_lost_datagram_is_not_recovered_and_the_receiver_says_how_many_arrived() {
    let (sv, cl) = pair(
        &["-n", "100", "-s", "256", "--timeout", "2", "--counters"],
        &[],
        &["--drop", "0.1", "--seed", "7"],
    );
    let dropped = counters(&cl)["injected_drop"];
    assert!(dropped > 0);
    assert!(!sv.status.success());
    let want = format!(
        "received {} of 100 messages (UD does not recover",
        100 - dropped
    );
    assert!(stderr(&sv).contains(&want), "{want}:\n{}", stderr(&sv));
    assert_eq!(counters(&sv)["rdma_recvs"], 100 - dropped);
}

#[test]
fn ud_refuses_write_read_and_atomics_by_name() {
    for op in ["write", "read", "atomic"] {
        for lat in [false, true] {
            let mut c = Command::new(bin());
            c.args(["perf", op, "-c", "UD", "--bind", "127.0.0.1", "-p", "1"]);
            if lat {
                c.arg("--lat");
            }
            let o = c.output().unwrap();
            assert!(!o.status.success(), "{op}");
            let e = stderr(&o);
            assert!(e.contains("-c UD: only SEND runs on UD"), "{op}: {e}");
        }
    }
}

#[test]
fn runs_of_small_datagrams_all_arrive_one_way_and_both_ways() {
    // Thousands of tiny datagrams reach the receiver as UDP GRO runs of 64; every one must
    // find its way to a receive (a batch once kept only 512 packets and lost the rest).
    let (sv, cl) = pair(&["-n", "8000", "-s", "2", "--counters"], &[], &[]);
    let t = ok(&sv, "server");
    assert_eq!(row(&t, 2)[1], "8000", "{t}");
    ok(&cl, "client");
    assert_eq!(counters(&sv)["rdma_recvs"], 8000);
    // -b: both ends send 1000 and receive 1000; the row is the sum of both directions.
    let (sv, cl) = pair(&["-b", "-n", "1000", "-s", "512", "--counters"], &[], &[]);
    for (o, what) in [(&sv, "server"), (&cl, "client")] {
        let t = ok(o, what);
        assert!(t.contains("Bidirectional"), "{t}");
        assert_eq!(row(&t, 512)[1], "1000", "{t}");
        let n = counters(o);
        assert_eq!(
            (n["rdma_sends"], n["rdma_recvs"]),
            (1000, 1000),
            "{what}: {n:?}"
        );
    }
}
