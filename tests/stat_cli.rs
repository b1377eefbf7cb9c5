//! `softroce stat` on a live `softroce perf` run (two processes on loopback): the counters
//! of a running device, by PID and for every process, rise between two snapshots while the
//! run goes on; `--qp` shows the connected RC QP; a PID without softroce devices is a clear
//! error. With DCQCN on and the impairment layer's marking bottleneck on the client's sends,
//! the congestion counters move live at both ends (marks, CE-marked packets received, CNPs sent
//! and handled) and the client's QP shows a DCQCN rate. Each run uses its own stat directory
//! (SOFTROCE_STAT_DIR), so parallel tests and other users' processes do not show up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{bin, end_args, finish, ports};

/// The counter names `softroce stat` must show, as rxe's hw_counters and mlx5 name them.
const NAMES: [&str; 18] = [
    "sent_pkts",
    "rcvd_pkts",
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rcvd_seq_err",
    "ack_deferred",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "completer_retry_err",
    "send_err",
    "link_downed",
    "rdma_sends",
    "rdma_recvs",
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
];

fn softroce(dir: &Path, args: &[String]) -> Child {
    Command::new(bin())
        .args(args)
        .env("SOFTROCE_STAT_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run softroce")
}

fn stat(dir: &Path, args: &[&str]) -> Output {
    let args: Vec<String> = std::iter::once("stat")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    finish(softroce(dir, &args), "stat", Duration::from_secs(30))
}

/// The device lines of `stat` output: (pid, link) -> counters.
fn devices(out: &str) -> HashMap<(u32, String), HashMap<String, u64>> {
    let mut m = HashMap::new();
    for l in out.lines().filter(|l| !l.contains(" qpn ")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        assert_eq!((f[0], f[2]), ("pid", "link"), "{l}");
        let c = f[4..]
            .chunks(2)
            .map(|kv| (kv[0].to_string(), kv[1].parse().expect("a count")))
            .collect();
        m.insert((f[1].parse().unwrap(), f[3].to_string()), c);
    }
    m
}

#[test]
fn stat_watches_a_live_perf_run() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("softroce-stat-test-{}", std::process::id()));
    let (server, client) = live_pair(&dir, &["-s", "4096"], &[]);
    let cpid = client.id();
    // Wait for the run itself: the client's device sending.
    let t = Instant::now();
    loop {
        let o = stat(&dir, &[&cpid.to_string()]);
        if o.status.success() {
            let d = devices(&String::from_utf8_lossy(&o.stdout));
            if d.values().any(|c| c["sent_pkts"] > 100) {
                break;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the client never sent"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Two snapshots while it runs: the counters move, every name is there.
    let o = stat(
        &dir,
        &[
            &cpid.to_string(),
            "--watch",
            "--count",
            "2",
            "--interval",
            "0.5",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let snaps: Vec<&str> = text
        .split("\n\n")
        .filter(|s| !s.trim().is_empty())
        .collect();
    assert_eq!(snaps.len(), 2, "{text}");
    let (a, b) = (devices(snaps[0]), devices(snaps[1]));
    assert_eq!(a.len(), 1, "one device in the client: {text}");
    let key = a.keys().next().unwrap().clone();
    assert_eq!(key.0, cpid);
    assert!(key.1.starts_with("127.0.0.2:"), "{}", key.1);
    for n in NAMES {
        assert!(a[&key].contains_key(n), "counter {n} missing");
    }
    assert!(
        b[&key]["sent_pkts"] > a[&key]["sent_pkts"],
        "sent_pkts moves while the run goes on"
    );
    // --qp: the perf QP, RC in RTS.
    let o = stat(&dir, &[&cpid.to_string(), "--qp"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let qp = text
        .lines()
        .find(|l| l.contains(" qpn "))
        .unwrap_or_else(|| panic!("no QP line in:\n{text}"));
    assert!(qp.contains(" type Rc state Rts "), "{qp}");
    // Every process: both ends of the run.
    let o = stat(&dir, &["--all"]);
    let all = devices(&String::from_utf8_lossy(&o.stdout));
    let pids: std::collections::BTreeSet<u32> = all.keys().map(|k| k.0).collect();
    assert!(
        pids.contains(&cpid) && pids.contains(&server.id()),
        "{pids:?}"
    );
    let spid = server.id();
    let cl = finish(client, "client", Duration::from_secs(60));
    let sv = finish(server, "server", Duration::from_secs(60));
    assert!(
        cl.status.success(),
        "{}",
        String::from_utf8_lossy(&cl.stderr)
    );
    assert!(
        sv.status.success(),
        "{}",
        String::from_utf8_lossy(&sv.stderr)
    );
    // Gone: a clear error, not an empty answer.
    let o = stat(&dir, &[&spid.to_string()]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("no softroce process {spid}")),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a `perf write -D 4` server on 127.0.0.1 and its client on 127.0.0.2, each with
/// `extra` and the client also with `client_extra`; returns them once the client's stat socket
/// exists (the client is restarted while the server is not listening yet).
fn live_pair(dir: &Path, extra: &[&str], client_extra: &[&str]) -> (Child, Child) {
    let (tcp, udp) = ports();
    let args = |ip: &str| -> Vec<String> {
        let mut v = end_args(&["perf", "write", "-D", "4"], tcp, udp, ip);
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let server = softroce(dir, &args("127.0.0.1"));
    let mut c = args("127.0.0.2");
    c.extend(client_extra.iter().map(|s| s.to_string()));
    c.push("127.0.0.1".into());
    let t = Instant::now();
    let client = loop {
        let mut client = softroce(dir, &c);
        let sock = dir.join(format!("{}.sock", client.id()));
        let started = loop {
            if sock.exists() {
                break true;
            }
            if client.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the client's stat socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if started {
            break client;
        }
        let out = client.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("connect to"), "client failed: {err}");
        std::thread::sleep(Duration::from_millis(50));
    };
    (server, client)
}

/// One snapshot of `pid`'s only device, if it answers.
fn counters_of(dir: &Path, pid: u32) -> Option<HashMap<String, u64>> {
    let o = stat(dir, &[&pid.to_string()]);
    if !o.status.success() {
        return None;
    }
    devices(&String::from_utf8_lossy(&o.stdout))
        .into_values()
        .next()
}

#[test]
fn stat_shows_the_congestion_counters_move_through_a_marking_bottleneck() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("softroce-stat-cc-test-{}", std::process::id()));
    // 200 Mb/s with marks above 16 KiB: the client's 64 KiB WRITEs keep it marking.
    let (server, client) = live_pair(
        &dir,
        &["-s", "65536", "--cc", "dcqcn"],
        &[
            "--bottleneck",
            "200",
            "--bottleneck-mark",
            "16384",
            "--bottleneck-queue",
            "524288",
        ],
    );
    let (cpid, spid) = (client.id(), server.id());
    // Wait (bounded) until the client's first CNP has been handled, then take two snapshots
    // of each end a while apart: every congestion counter must rise between them.
    let t = Instant::now();
    let first = loop {
        if let (Some(c), Some(s)) = (counters_of(&dir, cpid), counters_of(&dir, spid)) {
            if c["rp_cnp_handled"] > 0 {
                break (c, s);
            }
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no CNP handled");
        std::thread::sleep(Duration::from_millis(50));
    };
    // And meanwhile the client's QP shows a DCQCN rate instead of the line rate.
    let t = Instant::now();
    loop {
        let o = stat(&dir, &[&cpid.to_string(), "--qp"]);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let limited = text
            .lines()
            .filter(|l| l.contains(" qpn "))
            .any(|l| !l.ends_with(" rate_mbps line"));
        if limited {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "no QP ever rate-limited:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    let (c1, s1) = (first.0, first.1);
    let (c2, s2) = loop {
        let (c, s) = (counters_of(&dir, cpid), counters_of(&dir, spid));
        let (Some(c), Some(s)) = (c, s) else {
            panic!("an end went away before its counters moved")
        };
        if c["rp_cnp_handled"] > c1["rp_cnp_handled"] && s["np_cnp_sent"] > s1["np_cnp_sent"] {
            break (c, s);
        }
        assert!(t.elapsed() < Duration::from_secs(3), "no new CNPs");
        std::thread::sleep(Duration::from_millis(50));
    };
    for (end, a, b, name) in [
        ("client", &c1, &c2, "bottleneck_marked"),
        ("client", &c1, &c2, "bottleneck_pkts"),
        ("client", &c1, &c2, "rp_cnp_handled"),
        ("server", &s1, &s2, "np_ecn_marked_roce_packets"),
        ("server", &s1, &s2, "np_cnp_sent"),
    ] {
        assert!(
            b[name] > a[name],
            "{end} {name}: {} -> {}",
            a[name],
            b[name]
        );
    }
    // The counters are the ends' own: the client's CNPs are the server's.
    assert_eq!(c2["np_cnp_sent"], 0);
    assert_eq!(s2["rp_cnp_handled"], 0);
    let cl = finish(client, "client", Duration::from_secs(60));
    let sv = finish(server, "server", Duration::from_secs(60));
    assert!(
        cl.status.success(),
        "{}",
        String::from_utf8_lossy(&cl.stderr)
    );
    assert!(
        sv.status.success(),
        "{}",
        String::from_utf8_lossy(&sv.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
