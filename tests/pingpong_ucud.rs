//! `softroce pingpong --transport uc|ud` and `--srq` as users run them: two processes on
//! loopback (a server on 127.0.0.1, a client on 127.0.0.2), the exchange over TCP, RoCEv2 over
//! UDP, output in the shape of ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong, and the
//! client's capture decoded with every ICRC valid.

use std::process::Command;
use std::time::Duration;

mod common;
use common::{bin, decode_json, end_args, ok, ports, server_then_client};

/// Runs a pingpong pair with `extra` flags; the client writes a capture. Returns the server's
/// and client's stdout and the capture's packets as decoded JSON.
fn run(extra: &[&str]) -> (String, String, Vec<serde_json::Value>) {
    run_sub("pingpong", extra)
}

/// [`run`] for any subcommand.
fn run_sub(sub: &str, extra: &[&str]) -> (String, String, Vec<serde_json::Value>) {
    let (tcp, udp) = ports();
    let dir = std::env::temp_dir().join(format!("softroce-ppucud-{}-{}", std::process::id(), tcp));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("client.pcap");
    let args = |ip: &str| {
        let mut v: Vec<String> = vec![sub.to_string()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v.extend(end_args(&[], tcp, udp, ip));
        v
    };
    let mut cv = args("127.0.0.2");
    cv.extend(["--pcap".to_string(), pcap.to_str().unwrap().to_string()]);
    cv.push("127.0.0.1".into());
    let (sv, client) = server_then_client(
        &args("127.0.0.1"),
        &cv,
        Duration::from_secs(60),
        Duration::from_secs(30),
    );
    let s = ok(&sv, "server");
    let c = ok(&client, "client");
    let pkts = decode_json(&pcap, udp);
    let _ = std::fs::remove_dir_all(&dir);
    (s, c, pkts)
}

fn names(pkts: &[serde_json::Value]) -> Vec<String> {
    pkts.iter()
        .map(|p| p["opcode_name"].as_str().unwrap_or("").to_string())
        .collect()
}

fn check_report(out: &str, who: &str, bytes: u64, iters: u32) {
    let lines: Vec<&str> = out.lines().collect();
    let n = lines.len();
    assert!(
        lines[n - 2].starts_with(&format!("{bytes} bytes in ")),
        "{who}: {out}"
    );
    assert!(lines[n - 2].ends_with(" Mbit/sec"), "{who}: {out}");
    assert!(
        lines[n - 1].starts_with(&format!("{iters} iters in "))
            && lines[n - 1].ends_with(" usec/iter"),
        "{who}: {out}"
    );
}

#[test]
fn uc_pingpong_runs_as_ibv_uc_pingpong() {
    let (s, c, pkts) = run(&["--transport", "uc", "-n", "100", "-s", "3000", "-m", "1024"]);
    for (out, who) in [(&s, "server"), (&c, "client")] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{who}: {out}");
        assert!(
            lines[0].starts_with("  local address:  LID 0x0000, QPN 0x"),
            "{out}"
        );
        assert!(lines[0].contains(", GID ::ffff:127.0.0."), "{out}");
        assert!(
            lines[1].starts_with("  remote address: LID 0x0000, QPN 0x"),
            "{out}"
        );
        check_report(out, who, 600_000, 100);
    }
    assert!(pkts.iter().all(|p| p["icrc_ok"] == true), "a bad ICRC");
    let n = names(&pkts);
    // 100 three-packet SENDs each way, nothing else: UC has no ACKs.
    assert_eq!(n.len(), 600, "{n:?}");
    assert!(n.iter().all(|o| o.starts_with("UC_SEND_")), "{n:?}");
    assert_eq!(n.iter().filter(|o| *o == "UC_SEND_FIRST").count(), 200);
}

#[test]
fn ud_pingpong_runs_as_ibv_ud_pingpong() {
    let (s, c, pkts) = run(&["--transport", "ud", "-n", "100", "-s", "2048"]);
    for (out, who) in [(&s, "server"), (&c, "client")] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{who}: {out}");
        // ud_pingpong prints ": GID" on its local line only.
        assert!(
            lines[0].starts_with("  local address:  LID 0x0000, QPN 0x"),
            "{out}"
        );
        assert!(lines[0].contains(": GID ::ffff:127.0.0."), "{out}");
        assert!(lines[1].contains(", GID ::ffff:127.0.0."), "{out}");
        check_report(out, who, 409_600, 100);
    }
    assert!(pkts.iter().all(|p| p["icrc_ok"] == true), "a bad ICRC");
    let n = names(&pkts);
    assert_eq!(n.len(), 200, "{n:?}");
    assert!(n.iter().all(|o| o == "UD_SEND_ONLY"), "{n:?}");
}

#[test]
fn ud_pingpong_refuses_a_size_over_the_port_mtu() {
    let o = Command::new(bin())
        .args([
            "pingpong",
            "--transport",
            "ud",
            "-s",
            "5000",
            "--bind",
            "127.0.0.1",
            "--roce-port",
            "0",
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Requested size larger than port MTU (4096)"),
        "{err}"
    );
}

#[test]
fn srq_pingpong_runs_as_ibv_srq_pingpong() {
    let (s, c, pkts) = run(&["--srq", "-q", "4", "-n", "200", "-s", "3000"]);
    for (out, who) in [(&s, "server"), (&c, "client")] {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 10, "{who}: {out}");
        for l in &lines[..4] {
            assert!(
                l.starts_with("  local address:  LID 0x0000, QPN 0x"),
                "{out}"
            );
        }
        for l in &lines[4..8] {
            assert!(
                l.starts_with("  remote address: LID 0x0000, QPN 0x"),
                "{out}"
            );
        }
        check_report(out, who, 1_200_000, 200);
    }
    assert!(pkts.iter().all(|p| p["icrc_ok"] == true), "a bad ICRC");
    let n = names(&pkts);
    assert!(
        n.iter().filter(|o| *o == "RC_SEND_FIRST").count() >= 200,
        "{n:?}"
    );
}

#[test]
fn perf_with_connection_uc_checks_every_byte_and_refuses_read() {
    for (op, lat) in [
        ("write", false),
        ("send", false),
        ("write", true),
        ("send", true),
    ] {
        let mut extra = vec![op, "-c", "UC", "--json", "-n", "60", "-s", "2000"];
        if lat {
            extra.push("--lat");
        } else {
            extra.push("--check");
        }
        let (s, c, pkts) = run_sub("perf", &extra);
        for out in [&s, &c] {
            let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
            assert_eq!(v["iters"], 60, "{op}: {out}");
        }
        assert!(pkts.iter().all(|p| p["icrc_ok"] == true), "a bad ICRC");
        let n = names(&pkts);
        assert!(n.iter().any(|o| o.starts_with("UC_")), "{op}: {n:?}");
        assert!(n.iter().all(|o| !o.starts_with("RC_")), "{op}: {n:?}");
    }
    let o = Command::new(bin())
        .args(["perf", "read", "-c", "UC", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("-c UC"));
}
