//! The `softroce` tools as users run them: two processes on loopback (a server on 127.0.0.1,
//! a client on 127.0.0.2), exchanging over TCP and running RoCEv2 over UDP.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{
    bin, counters, decode_json, end_args, ok, ports, server_then_client, spawn, two_ends,
};

/// A `softroce` process whose stdout and stderr are read as they come, so that a test can wait
/// for the state a line announces (a server's "Waiting for client" banner, a progress line, a
/// report row) instead of sleeping and hoping.
struct Watched {
    child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<String>>,
    err: std::sync::Arc<std::sync::Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Watched {
    fn start(args: &[String]) -> Watched {
        use std::io::BufRead;
        let mut child = spawn(args);
        let mut readers = Vec::new();
        let mut pipe = |r: Box<dyn std::io::Read + Send>| {
            let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            let t = std::sync::Arc::clone(&text);
            readers.push(std::thread::spawn(move || {
                for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                    let mut t = t.lock().unwrap();
                    t.push_str(&line);
                    t.push('\n');
                }
            }));
            text
        };
        let out = pipe(Box::new(child.stdout.take().unwrap()));
        let err = pipe(Box::new(child.stderr.take().unwrap()));
        Watched {
            child,
            out,
            err,
            readers,
        }
    }

    /// Waits (at most `limit`) until `state(stdout, stderr)` holds; fails naming `what`.
    fn wait_for(&mut self, what: &str, limit: Duration, state: impl Fn(&str, &str) -> bool) {
        let t = Instant::now();
        loop {
            let (o, e) = (
                self.out.lock().unwrap().clone(),
                self.err.lock().unwrap().clone(),
            );
            if state(&o, &e) {
                return;
            }
            let ended = self.child.try_wait().unwrap();
            assert!(
                ended.is_none() && t.elapsed() < limit,
                "no {what} (exit {ended:?} after {:?}); stdout:\n{o}\nstderr:\n{e}",
                t.elapsed()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits for the end (killing it after `limit`): exit status, stdout, stderr.
    fn end(mut self, limit: Duration) -> (std::process::ExitStatus, String, String) {
        let t = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                let st = self.child.wait().unwrap();
                panic!("hung, killed ({st}); stderr:\n{}", self.err.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let o = self.out.lock().unwrap().clone();
        let e = self.err.lock().unwrap().clone();
        (status, o, e)
    }
}

/// The server's banner: it listens from then on.
fn listening(out: &str, _: &str) -> bool {
    out.contains("* Waiting for client to connect... *")
}

/// Runs a server and a client with the same extra arguments; returns both outputs.
/// Also returns the UDP port RoCE used.
fn run_pair(
    sub: &[&str],
    extra: &[&str],
    server_extra: &[&str],
    client_extra: &[&str],
) -> (Output, Output, u16) {
    let head: Vec<&str> = sub.iter().chain(extra).copied().collect();
    two_ends(
        &head,
        server_extra,
        client_extra,
        Duration::from_secs(120),
        Duration::from_secs(30),
    )
}

/// Starts a server with `sv`, then a client with `cv`; returns both outputs.
fn run_server_then_client(sv: &[String], cv: &[String]) -> (Output, Output) {
    server_then_client(sv, cv, Duration::from_secs(120), Duration::from_secs(30))
}

#[test]
fn perf_check_every_operation_at_every_mtu() {
    for mtu in ["256", "512", "1024", "2048", "4096"] {
        for (op, size) in [
            ("write", "20000"),
            ("read", "20000"),
            ("send", "20000"),
            ("atomic", "8"),
        ] {
            let (sv, cl, _) = run_pair(
                &["perf", op],
                &[
                    "--check", "--json", "-m", mtu, "-s", size, "-n", "40", "-t", "8",
                ],
                &[],
                &[],
            );
            let c = ok(&cl, &format!("client {op} mtu {mtu}"));
            ok(&sv, &format!("server {op} mtu {mtu}"));
            let v: serde_json::Value = serde_json::from_str(c.trim()).expect("one JSON line");
            assert_eq!(v["iters"], 40);
            assert_eq!(v["check"], true);
            assert!(v["bw_avg_mbps"].as_f64().unwrap() > 0.0);
            assert!(v["msg_rate_mpps"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn perf_latency_reports_percentiles() {
    for op in ["send", "write", "read", "atomic"] {
        let (sv, cl, _) = run_pair(&["perf", op, "--lat"], &["--json", "-n", "50"], &[], &[]);
        let c = ok(&cl, op);
        ok(&sv, op);
        let v: serde_json::Value = serde_json::from_str(c.trim()).unwrap();
        let l = &v["lat_us"];
        let (min, p50, p99, max) = (
            l["min"].as_f64().unwrap(),
            l["p50"].as_f64().unwrap(),
            l["p99"].as_f64().unwrap(),
            l["max"].as_f64().unwrap(),
        );
        assert!(
            0.0 < min && min <= p50 && p50 <= p99 && p99 <= max,
            "{op}: {l}"
        );
    }
}

#[test]
fn pingpong_runs_as_ibv_rc_pingpong_does_and_its_capture_verifies() {
    let dir = std::env::temp_dir().join(format!("softroce-pp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("client.pcap");
    let (sv, cl, udp) = run_pair(
        &["pingpong"],
        &["-n", "200", "-s", "3000", "-m", "1024", "-c"],
        &[],
        &["--pcap", pcap.to_str().unwrap()],
    );
    for (o, who) in [(&sv, "server"), (&cl, "client")] {
        let out = ok(o, who);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{who}: {out}");
        assert!(
            lines[0].starts_with("  local address:  LID 0x0000, QPN 0x"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains(", GID ::ffff:127.0.0."), "{}", lines[0]);
        assert!(
            lines[1].starts_with("  remote address: LID 0x0000, QPN 0x"),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with("1200000 bytes in "), "{}", lines[2]);
        assert!(lines[2].ends_with(" Mbit/sec"), "{}", lines[2]);
        assert!(
            lines[3].starts_with("200 iters in ") && lines[3].ends_with(" usec/iter"),
            "{}",
            lines[3]
        );
    }
    // The capture decodes, every ICRC verifies, and it holds 200 three-packet SENDs each way
    // plus the ACKs.
    let pkts = decode_json(&pcap, udp);
    assert!(pkts.len() >= 1200, "{} packets", pkts.len());
    assert!(
        pkts.iter().all(|p| p["icrc_ok"] == true),
        "a bad ICRC in the capture"
    );
    let sends = pkts
        .iter()
        .filter(|p| {
            p["opcode_name"]
                .as_str()
                .unwrap_or("")
                .starts_with("RC_SEND")
        })
        .count();
    assert_eq!(sends, 1200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The counters an endpoint printed with `--counters` (the `counters:` line on stderr; a
/// counter it does not list is zero).

#[test]
fn perf_check_survives_loss_duplication_reordering_and_corruption() {
    let imp = [
        "--drop",
        "0.05",
        "--dup",
        "0.01",
        "--reorder",
        "0.01",
        "--corrupt",
        "0.01",
        "--counters",
    ];
    // Sums over both ends and every operation, for the faults too rare to show in each run.
    let mut total = std::collections::HashMap::<String, u64>::new();
    for (op, size) in [
        ("write", "16384"),
        ("read", "16384"),
        ("send", "16384"),
        ("atomic", "8"),
    ] {
        let mut extra = vec!["--check", "--json", "-n", "100", "-t", "16", "-s", size];
        extra.extend(imp);
        let (sv, cl, _) = run_pair(&["perf", op], &extra, &["--seed", "11"], &["--seed", "12"]);
        ok(&cl, &format!("lossy client {op}"));
        ok(&sv, &format!("lossy server {op}"));
        let (c, s) = (counters(&cl), counters(&sv));
        let both = |name: &str| c.get(name).unwrap_or(&0) + s.get(name).unwrap_or(&0);
        // The faults were injected (a --drop that did nothing would pass the data check)...
        assert!(
            both("injected_drop") > 0,
            "{op}: no packet dropped: {c:?} {s:?}"
        );
        // ... and the transport recovered from them by retransmitting: the client, the
        // requester, went back (after a timeout or a NAK) and resent packets.
        assert!(
            c.get("completer_retry_err").unwrap_or(&0) > &0,
            "{op}: no retry: {c:?}"
        );
        assert!(
            c.get("retransmit_pkts").unwrap_or(&0) > &0,
            "{op}: nothing resent: {c:?}"
        );
        for (k, v) in c.iter().chain(s.iter()) {
            *total.entry(k.clone()).or_default() += v;
        }
    }
    let t = |name: &str| *total.get(name).unwrap_or(&0);
    assert!(t("injected_dup") > 0, "{total:?}");
    assert!(t("injected_reorder") > 0, "{total:?}");
    assert!(t("injected_corrupt") > 0, "{total:?}");
    // A corrupted packet fails its ICRC at the other end; a duplicated request is seen again.
    assert!(t("icrc_err") > 0, "corruption detected: {total:?}");
    assert!(
        t("duplicate_request") + t("stale_resp_pkts") > 0,
        "duplicates seen: {total:?}"
    );
}

#[test]
fn bad_flags_and_unreachable_peers_fail_cleanly() {
    let o = Command::new(bin())
        .args(["perf", "write", "-m", "1500"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("MTU") && !e.contains("panicked"), "{e}");
    for sub in ["perf", "pingpong"] {
        let mut args = vec![sub];
        if sub == "perf" {
            args.push("write");
        }
        args.extend(["-d", "rxe0", "-i", "2"]);
        let o = Command::new(bin()).args(&args).output().unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("one port") && !e.contains("panicked"),
            "{sub}: {e}"
        );
    }
    let o = Command::new(bin())
        .args(["perf", "write", "-n", "1000000000000"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("messages per run") && !e.contains("panicked"),
        "{e}"
    );
    let o = Command::new(bin())
        .args(["perf", "write", "--drop", "2"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("probability"));
    // Nobody listens on this port: a clear error, not a hang.
    let (tcp, udp) = ports();
    let o = Command::new(bin())
        .args([
            "pingpong",
            "-p",
            &tcp.to_string(),
            "--roce-port",
            &udp.to_string(),
            "--timeout",
            "2",
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("connect") && !e.contains("panicked"), "{e}");
}

#[test]
fn perf_check_with_several_qps() {
    for op in ["write", "send", "read"] {
        let (sv, cl, _) = run_pair(
            &["perf", op],
            &[
                "--check", "--json", "-q", "4", "-n", "30", "-s", "9000", "-t", "4",
            ],
            &[],
            &[],
        );
        let c = ok(&cl, &format!("client {op} -q 4"));
        ok(&sv, &format!("server {op} -q 4"));
        let v: serde_json::Value = serde_json::from_str(c.trim()).unwrap();
        assert_eq!(v["qps"], 4);
    }
}

#[test]
fn perf_write_with_64_qps_at_the_default_depths() {
    // perftest sizes the CQ by tx_depth per QP for WRITE (no receives are posted); counting
    // the default rx_depth of 512 as well asked for 41088 CQEs, over rxe's limit of 32767.
    let (sv, cl, _) = run_pair(
        &["perf", "write"],
        &["--json", "-q", "64", "-n", "20", "-s", "64"],
        &[],
        &[],
    );
    let c = ok(&cl, "client write -q 64");
    ok(&sv, "server write -q 64");
    let v: serde_json::Value = serde_json::from_str(c.trim()).unwrap();
    assert_eq!(v["qps"], 64);
    assert_eq!(
        v["iters"], 20,
        "iterations per QP, as perftest reports them"
    );
}

#[test]
fn a_peer_killed_mid_transfer_ends_in_retry_exceeded_not_a_hang() {
    let (tcp, udp) = ports();
    let common = |ip: &str| {
        end_args(
            &[
                "perf",
                "write",
                "-n",
                "1000000",
                "-s",
                "65536",
                "-u",
                "12",
                "--retry-cnt",
                "3",
                "--timeout",
                "20",
            ],
            tcp,
            udp,
            ip,
        )
    };
    let mut server = Watched::start(&common("127.0.0.1"));
    server.wait_for("listening server", Duration::from_secs(10), listening);
    let mut cv = common("127.0.0.2");
    cv.push("--counters".into());
    cv.push("127.0.0.1".into());
    let mut client = Watched::start(&cv);
    // Mid-transfer: the client's progress line (after 3 s) counts completed WRITEs, and the
    // run (64 GB) is far from its end.
    let mid_transfer = |_: &str, err: &str| {
        err.lines().any(|l| {
            l.starts_with("perf: ")
                && l.split(": ")
                    .nth(2)
                    .and_then(|r| r.split(' ').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n > 0)
        })
    };
    client.wait_for("progress line", Duration::from_secs(20), mid_transfer);
    assert!(client.running(), "the client finished too early");
    server.kill();
    let _ = server.end(Duration::from_secs(5));
    let killed = Instant::now();
    let (status, _, err) = client.end(Duration::from_secs(15));
    let out = Output {
        status,
        stdout: Vec::new(),
        stderr: err.into_bytes(),
    };
    let took = killed.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("transport retry counter exceeded"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The failure came by the timer: retry_cnt 3 allows three retries, the fourth expiry fails
    // the WR.
    let c = counters(&out);
    assert!(c.get("timeouts").copied().unwrap_or(0) >= 4, "{c:?}");
    assert_eq!(c.get("retry_exceeded_err"), Some(&1), "{c:?}");
    // Budget: 4 timeouts of 16.8 ms; allow generously for process scheduling.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn perf_latency_check_every_operation() {
    for (op, extra) in [
        ("send", &["-s", "3000"][..]),
        ("write", &["-s", "100"][..]),
        ("write", &["-s", "1"][..]),
        ("read", &["-s", "5000"][..]),
        ("atomic", &[][..]),
        ("atomic", &["-A", "CMP_AND_SWAP"][..]),
    ] {
        let mut args = vec!["--lat", "--check", "--json", "-n", "60"];
        args.extend(extra);
        let (sv, cl, _) = run_pair(&["perf", op], &args, &[], &[]);
        let c = ok(&cl, &format!("client {op} --lat {extra:?}"));
        ok(&sv, &format!("server {op} --lat {extra:?}"));
        let v: serde_json::Value = serde_json::from_str(c.trim()).unwrap();
        assert_eq!(v["check"], true);
        assert!(v["lat_us"]["p50"].as_f64().unwrap() > 0.0, "{v}");
        // The client verifies every answer (ping-pongs, READs and atomics alike).
        assert_eq!(v["check_verified_messages"], 60, "{v}");
    }
}

#[test]
fn perf_check_prints_what_it_verified() {
    // The verifying end names the messages and bytes it checked; the other end says the
    // peer's check passed. WRITE and SEND land at the server, READ and atomics at the client.
    for (op, size, verifier_is_server, bytes) in [
        ("write", "4000", true, 100 * 4000),
        ("send", "4000", true, 100 * 4000),
        ("read", "4000", false, 100 * 4000),
        ("atomic", "8", false, 100 * 8),
    ] {
        let (sv, cl, _) = run_pair(
            &["perf", op],
            &["--check", "-n", "100", "-s", size],
            &[],
            &[],
        );
        let (s_out, c_out) = (ok(&sv, "server"), ok(&cl, "client"));
        let (verifier, other) = if verifier_is_server {
            (&s_out, &c_out)
        } else {
            (&c_out, &s_out)
        };
        let want = format!(
            " Data check      : passed: 100 messages ({bytes} bytes) verified here, and the peer's check passed"
        );
        assert!(verifier.contains(&want), "{op}: {verifier}");
        if op != "atomic" {
            // (The atomic server checks the final value too.)
            assert!(
                other.contains(" Data check      : passed: the peer verified every message"),
                "{op}: {other}"
            );
        }
    }
}

#[test]
fn perf_refuses_a_peer_that_runs_another_test() {
    let (tcp, udp) = ports();
    let common =
        |op: &str, ip: &str| end_args(&["perf", op, "-n", "10", "--timeout", "5"], tcp, udp, ip);
    let mut cv = common("read", "127.0.0.2");
    cv.push("127.0.0.1".into());
    let (sv, c) = run_server_then_client(&common("write", "127.0.0.1"), &cv);
    for (o, who) in [(&c, "client"), (&sv, "server")] {
        assert!(!o.status.success(), "{who} succeeded");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("another test") && !e.contains("panicked"),
            "{who}: {e}"
        );
    }
}

#[test]
fn pingpong_carries_messages_of_several_4096_byte_mtus() {
    // Regression: -m 4096 with any size was refused (the size bound overflowed 32 bits).
    let (sv, cl, _) = run_pair(
        &["pingpong"],
        &["-s", "20000", "-m", "4096", "-n", "20", "-c"],
        &[],
        &[],
    );
    ok(&sv, "server -m 4096");
    let c = ok(&cl, "client -m 4096");
    assert!(c.contains("20 iters in"), "{c}");
}

/// The JSON lines of a run's stdout.
fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A fresh directory for one test's files.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("softroce-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a pair with the same flags at both ends; returns the client's stdout (both must
/// succeed).
fn client_text(sub: &[&str], extra: &[&str], what: &str) -> String {
    let (sv, cl, _) = run_pair(sub, extra, &[], &[]);
    ok(&sv, &format!("server {what}"));
    ok(&cl, &format!("client {what}"))
}

/// The whitespace-separated fields of the first report row of `size` in a text report.
fn row_fields(text: &str, size: u64) -> Vec<String> {
    let lead = format!(" {size} ");
    let row = text
        .lines()
        .find(|l| l.starts_with(&lead))
        .unwrap_or_else(|| panic!("no {size}-byte row in:\n{text}"));
    row.split_whitespace().map(str::to_string).collect()
}

/// Runs a `--json` pair (both ends must succeed); returns the client's and the server's lines.
fn json_pair(
    sub: &[&str],
    extra: &[&str],
    client_extra: &[&str],
    what: &str,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let mut all = extra.to_vec();
    all.push("--json");
    let (sv, cl, _) = run_pair(sub, &all, &[], client_extra);
    (
        json_lines(&ok(&cl, &format!("client {what}"))),
        json_lines(&ok(&sv, &format!("server {what}"))),
    )
}

#[test]
fn perf_all_sizes_prints_one_row_per_size_from_2_to_8_mib() {
    let want: Vec<u64> = (1..24).map(|i| 1u64 << i).collect();
    let svg = std::env::temp_dir().join(format!("softroce-sweep-{}.svg", std::process::id()));
    let svg_arg = svg.to_str().unwrap();
    for op in ["write", "send", "read"] {
        let (c, s) = json_pair(
            &["perf", op],
            &["-a", "-n", "4"],
            &["--plot", svg_arg, "--plot-label", "sweep"],
            &format!("{op} -a"),
        );
        let sizes: Vec<u64> = c.iter().map(|v| v["bytes"].as_u64().unwrap()).collect();
        assert_eq!(sizes, want, "{op}: the client's rows");
        for v in &c {
            assert_eq!(v["iters"], 4);
            assert!(v["bw_avg_mibps"].as_f64().unwrap() > 0.0, "{v}");
        }
        if op == "send" {
            // ib_send_bw's receiving server measures every size too.
            assert_eq!(s.len(), 23, "{op}: the server's rows");
        } else {
            // The passive WRITE/READ server prints the client's last report, as perftest's.
            assert_eq!(s.len(), 1);
            assert_eq!(s[0]["bytes"], 1 << 23);
        }
        // --plot: the run's sweep as a picture with its label.
        let picture = std::fs::read_to_string(&svg).unwrap();
        assert_eq!(
            picture
                .lines()
                .filter(|l| l.contains("stroke-width=\"2\" points=") && l.matches(',').count() > 2)
                .count(),
            2,
            "{op}"
        );
        assert!(picture.contains("sweep"));
        let _ = std::fs::remove_file(&svg);
    }
    // Atomics stay at 8 bytes under -a, as ib_atomic_bw.
    let (_, cl, _) = run_pair(&["perf", "atomic"], &["-a", "-n", "4", "--json"], &[], &[]);
    let c = json_lines(&ok(&cl, "client atomic -a"));
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["bytes"], 8);
}

#[test]
fn perf_duration_runs_for_its_seconds_and_counts_between_the_margins() {
    for op in ["write", "send"] {
        let t = Instant::now();
        let (sv, cl, _) = run_pair(
            &["perf", op],
            &["-D", "3", "-f", "1", "-s", "1024", "--json"],
            &[],
            &[],
        );
        let took = t.elapsed();
        let c = json_lines(&ok(&cl, &format!("client {op} -D")));
        ok(&sv, &format!("server {op} -D"));
        assert!(took >= Duration::from_secs(3), "{op}: ended after {took:?}");
        assert!(took < Duration::from_secs(20), "{op}: ran {took:?}");
        // The sampled window is D - 2f = 1 s; only its completions count, without a peak.
        assert_eq!(c[0]["seconds"], 1.0);
        assert!(c[0]["messages"].as_u64().unwrap() > 0);
        assert_eq!(c[0]["bw_peak_mibps"], 0.0);
    }
}

#[test]
fn perf_bidirectional_reports_both_directions() {
    for op in ["write", "read", "atomic", "send"] {
        let (c, s) = json_pair(
            &["perf", op],
            &["-b", "-n", "300", "--report-both"],
            &[],
            &format!("{op} -b"),
        );
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
        for v in [&c[0], &s[0]] {
            assert!(f(v, "local_bw_avg_mibps") > 0.0 && f(v, "remote_bw_avg_mibps") > 0.0);
            assert!(close(
                f(v, "bw_avg_mibps"),
                f(v, "local_bw_avg_mibps") + f(v, "remote_bw_avg_mibps")
            ));
        }
        // Each end's local figures are the other's remote ones.
        assert!(close(
            f(&c[0], "local_bw_avg_mibps"),
            f(&s[0], "remote_bw_avg_mibps")
        ));
        assert!(close(
            f(&s[0], "local_bw_avg_mibps"),
            f(&c[0], "remote_bw_avg_mibps")
        ));
    }
    // The text report prints both sections under --report-both.
    let c = client_text(
        &["perf", "write"],
        &["-b", "-n", "50", "--report-both"],
        "write -b text",
    );
    assert!(c.contains("Bidirectional BW Test"), "{c}");
    assert!(
        c.contains("Local results") && c.contains("Remote results"),
        "{c}"
    );
}

#[test]
fn perf_out_json_writes_perftests_report() {
    let dir = scratch("outjson");
    let file = dir.join("report.json");
    let f = file.to_str().unwrap();
    let (_, cl, _) = run_pair(
        &["perf", "write"],
        &["-s", "4096", "-n", "50"],
        &[],
        &["--out_json", "--out_json_file", f],
    );
    ok(&cl, "client --out_json");
    // Standard JSON (perftest since PR #239), with perftest's keys.
    let read = || -> serde_json::Value {
        let text = std::fs::read_to_string(&file).unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    };
    let j = read();
    let (info, res) = (&j["test_info"], &j["results"]);
    assert_eq!(info["test"], "RDMA_Write_BW_Test", "{j}");
    assert_eq!(info["Number_of_qps"], 1, "{j}");
    assert_eq!(info["Connection_type"], "RC", "{j}");
    assert_eq!(info["TX_depth"], 50, "{j}");
    assert_eq!(info["Mtu"], 4096, "{j}");
    assert_eq!(res["MsgSize"], 4096, "{j}");
    assert_eq!(res["n_iterations"], 50, "{j}");
    for k in ["BW_peak", "BW_average", "MsgRate"] {
        assert!(res[k].as_f64().is_some_and(|v| v > 0.0), "{k} in {j}");
    }
    // The latency tests write print_report_lat's fields.
    let (_, cl, _) = run_pair(
        &["perf", "send"],
        &["--lat", "-n", "50"],
        &[],
        &["--out_json", "--out_json_file", f],
    );
    ok(&cl, "client --lat --out_json");
    let j = read();
    let (info, res) = (&j["test_info"], &j["results"]);
    assert_eq!(info["test"], "Send_Latency_Test", "{j}");
    assert_eq!(res["MsgSize"], 2, "{j}");
    assert_eq!(res["n_iterations"], 50, "{j}");
    for k in ["t_min", "t_typical", "percentile_99.9"] {
        assert!(res[k].as_f64().is_some_and(|v| v > 0.0), "{k} in {j}");
    }
    assert!(info.get("CQ_Moderation").is_none(), "{j}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perf_refuses_flags_it_cannot_honour_by_name() {
    for (flags, named) in [
        (&["--odp"][..], "--odp"),
        (&["-O"][..], "--dualport"),
        (&["--aes_xts"][..], "--aes_xts"),
        (&["--use_hugepages"][..], "--use_hugepages"),
        (&["--mmap", "/tmp/x"][..], "--mmap"),
        (&["-a", "-D", "4"][..], "-D"),
        (&["-D", "2", "-f", "1"][..], "MARGIN"),
        (&["--cpu_util"][..], "--cpu_util"),
        (&["--run_infinitely", "-b"][..], "--run_infinitely"),
        (&["-L", "3"][..], "--hop_limit"),
    ] {
        let mut args = vec!["perf", "write", "--bind", "127.0.0.1", "-p", "1"];
        args.extend_from_slice(flags);
        let out = Command::new(bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} accepted");
        assert!(err.contains(named), "{flags:?}: {err}");
    }
}

/// The (TTL, TOS) of the IPv4 packets one end sent to `dst`, from its --pcap capture.
fn sent_ttl_tos(pcap: &std::path::Path, dst: std::net::Ipv4Addr) -> Vec<(u8, u8)> {
    let f = std::fs::File::open(pcap).unwrap();
    let mut r = softroce::capture::CaptureReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(fr) = r.next_frame().unwrap() {
        let Ok(p) = etherparse::SlicedPacket::from_ethernet(fr.data) else {
            continue;
        };
        if let Some(etherparse::NetSlice::Ipv4(ip)) = p.net {
            let h = ip.header().slice();
            if ip.header().destination_addr() == dst {
                v.push((h[8], h[1]));
            }
        }
    }
    v
}

#[test]
fn perf_tclass_reaches_every_packet_and_the_ttl_is_the_routes() {
    let dir = scratch("tclass");
    let (cp, sp) = (dir.join("client.pcap"), dir.join("server.pcap"));
    // --tclass 98: DSCP 24 and ECT(0); -L 64 is perftest's default and accepted.
    let (sv, cl, _) = run_pair(
        &["perf", "write"],
        &[
            "-s", "8192", "-n", "40", "--json", "--tclass", "98", "-L", "64",
        ],
        &["--pcap", sp.to_str().unwrap()],
        &["--pcap", cp.to_str().unwrap()],
    );
    assert_eq!(json_lines(&ok(&cl, "client --tclass"))[0]["messages"], 40);
    ok(&sv, "server --tclass");
    // The client's WRITEs and the server's ACKs alike carry the class; the TTL is the route's
    // (64), not perftest's hop limit 255, as the kernel sets it for rxe.
    let requests = sent_ttl_tos(&cp, "127.0.0.1".parse().unwrap());
    let acks = sent_ttl_tos(&sp, "127.0.0.2".parse().unwrap());
    // 40 WRITEs of two 4096-byte packets each (retransmissions may add some).
    assert!(requests.len() >= 40 * 2, "{}", requests.len());
    assert!(!acks.is_empty());
    assert!(
        requests.iter().chain(&acks).all(|f| *f == (64, 98)),
        "{requests:?} {acks:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The UDP payload lengths of the packets one end sent to `dst`, from its --pcap capture.
fn sent_lengths(pcap: &std::path::Path, dst: std::net::Ipv4Addr) -> Vec<usize> {
    let f = std::fs::File::open(pcap).unwrap();
    let mut r = softroce::capture::CaptureReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(fr) = r.next_frame().unwrap() {
        let p = if fr.linktype == 1 {
            etherparse::SlicedPacket::from_ethernet(fr.data)
        } else {
            etherparse::SlicedPacket::from_ip(fr.data)
        };
        let Ok(p) = p else { continue };
        if let (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Udp(u))) =
            (p.net, p.transport)
        {
            if ip.header().destination_addr() == dst {
                v.push(u.payload().len());
            }
        }
    }
    v
}

#[test]
fn perf_inline_sends_post_lists_and_cq_moderation_deliver_every_message() {
    let dir = scratch("inline");
    let pcap = dir.join("client.pcap");
    // 32-byte SENDs inline (-I 64), 4 per post_send, a completion every 8.
    let (c, s) = json_pair(
        &["perf", "send"],
        &["-I", "64", "-s", "32", "-n", "100", "-l", "4", "-Q", "8"],
        &["--pcap", pcap.to_str().unwrap()],
        "send -I -l -Q",
    );
    assert_eq!(c[0]["messages"], 100);
    assert_eq!(s[0]["messages"], 100, "every inline SEND arrived");
    // On the wire: 100 SEND-only packets of 32 bytes (12 BTH + 32 data + 4 ICRC = 48 bytes of
    // UDP payload).
    let sent = sent_lengths(&pcap, "127.0.0.1".parse().unwrap());
    assert_eq!(
        sent.iter().filter(|len| **len == 48).count(),
        100,
        "{sent:?}"
    );
    // Inline WRITEs too, and -I above max_inline_data is refused by name.
    let (_, cl, _) = run_pair(
        &["perf", "write"],
        &["-I", "256", "-s", "200", "-n", "50", "--json", "-l", "5"],
        &[],
        &[],
    );
    assert_eq!(json_lines(&ok(&cl, "client write -I"))[0]["messages"], 50);
    let out = Command::new(bin())
        .args([
            "perf",
            "write",
            "-I",
            "4096",
            "--bind",
            "127.0.0.1",
            "-p",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-I 4096"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perf_output_units_peak_and_latency_samples_follow_perftest() {
    // --output=bandwidth: one number per row; --report_gbits: Gb/s headers; -N: no peak.
    let c = client_text(
        &["perf", "write"],
        &["-n", "200", "-s", "4096", "--output", "bandwidth"],
        "--output",
    );
    assert_eq!(c.lines().count(), 1, "{c}");
    assert!(c.trim().parse::<f64>().unwrap() > 0.0);
    let (_, cl, _) = run_pair(
        &["perf", "read"],
        &["-a", "-n", "3", "--output", "message_rate"],
        &[],
        &[],
    );
    assert_eq!(ok(&cl, "client -a --output").lines().count(), 23);
    let c = client_text(
        &["perf", "write"],
        &["-n", "200", "--report_gbits", "-N", "--perform_warm_up"],
        "--report_gbits",
    );
    assert!(c.contains("BW average[Gb/sec]"), "{c}");
    let f = row_fields(&c, 65536);
    assert_eq!(f[2], "0.00", "-N: no peak: {f:?}");
    // -U and -H: every sample, then the sorted ones kept (n - 1 - 2 of them), then the table.
    let c = client_text(
        &["perf", "send"],
        &["--lat", "-n", "50", "-U", "-H"],
        "--lat -U -H",
    );
    assert_eq!(c.matches("#, usec").count(), 2, "{c}");
    let samples: Vec<&str> = c
        .lines()
        .filter(|l| l.contains(", ") && !l.starts_with('#') && !l.contains(':'))
        .collect();
    assert_eq!(samples.len(), 49 + 47, "{c}");
    assert!(c.contains("t_typical[usec]"));
    let c = client_text(
        &["perf", "write"],
        &["--lat", "-n", "50", "--output", "latency"],
        "--lat --output latency",
    );
    assert!(c.trim().parse::<f64>().unwrap() > 0.0, "{c}");
}

#[test]
fn perf_reversed_cpu_util_and_run_infinitely() {
    // --reversed: the listening end generates the WRITEs and measures them.
    let (c, sj) = json_pair(
        &["perf", "write"],
        &["--reversed", "-n", "100"],
        &[],
        "--reversed",
    );
    assert_eq!(sj[0]["role"], "client", "the server drives the traffic");
    assert_eq!(sj[0]["messages"], 100);
    assert_eq!(
        c[0]["bw_avg_mibps"], sj[0]["bw_avg_mibps"],
        "the passive end prints its report"
    );
    // --cpu_util in duration mode: a CPU_Util column with a percentage.
    let c = client_text(
        &["perf", "write"],
        &["-D", "3", "-f", "1", "--cpu_util"],
        "--cpu_util",
    );
    assert!(c.contains("CPU_Util[%]"), "{c}");
    let f = row_fields(&c, 65536);
    let cpu: f64 = f.last().unwrap().parse().unwrap();
    assert!((0.0..=100.0).contains(&cpu), "{f:?}");
    // --run_infinitely -D 1: a row every second until killed.
    let (tcp, udp) = ports();
    let args = |ip: &str| {
        end_args(
            &["perf", "write", "--run_infinitely", "-D", "1", "-s", "4096"],
            tcp,
            udp,
            ip,
        )
    };
    let mut server = Watched::start(&args("127.0.0.1"));
    server.wait_for("listening server", Duration::from_secs(10), listening);
    let mut cv = args("127.0.0.2");
    cv.push("127.0.0.1".into());
    let mut client = Watched::start(&cv);
    // Two rows, then the client is still running: it prints a row per interval, not a report
    // at an end.
    let rows = |out: &str| out.lines().filter(|l| l.starts_with(" 4096")).count();
    let t = Instant::now();
    client.wait_for("two rows", Duration::from_secs(20), |o, _| rows(o) >= 2);
    let two_rows_after = t.elapsed();
    assert!(client.running(), "the client stopped on its own");
    client.kill();
    server.kill();
    let (_, text, _) = client.end(Duration::from_secs(5));
    let _ = server.end(Duration::from_secs(5));
    // -D 1: a row a second, so two rows take at least two seconds.
    assert!(
        two_rows_after >= Duration::from_secs(2),
        "two rows after {two_rows_after:?}:\n{text}"
    );
    // Each row is perftest's: size, iterations of the interval, peak, average, rate.
    for l in text.lines().filter(|l| l.starts_with(" 4096")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 5, "{l}");
        assert!(f[3].parse::<f64>().unwrap() > 0.0, "{l}");
    }
}

#[test]
fn perf_latency_all_sizes_prints_one_row_per_size() {
    let want: Vec<u64> = (1..24).map(|i| 1u64 << i).collect();
    for op in ["send", "write", "read"] {
        let (c, s) = json_pair(
            &["perf", op],
            &["--lat", "-a", "-n", "5"],
            &[],
            &format!("{op} --lat -a"),
        );
        let sizes: Vec<u64> = c.iter().map(|v| v["bytes"].as_u64().unwrap()).collect();
        assert_eq!(sizes, want, "{op}");
        assert!(c.iter().all(|v| v["lat_us"]["p50"].as_f64().unwrap() > 0.0));
        // ib_send_lat and ib_write_lat measure at both ends; ib_read_lat's server does not.
        assert_eq!(s.len(), if op == "read" { 1 } else { 23 }, "{op}");
    }
}
