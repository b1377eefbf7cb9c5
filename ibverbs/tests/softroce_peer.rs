//! Debian's ibv_rc_pingpong under the shim, started by `softroce run`, against softroce's own
//! `softroce pingpong`, in both roles. Needs the `softroce` binary next to the shim (a
//! workspace build: `cargo test` at the repository root builds both).

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn cmd(prog: &std::path::Path) -> Command {
    let mut c = Command::new(prog);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// `softroce run --bind IP -- ibv_rc_pingpong ARGS`.
fn shim_pingpong(ip: &str, args: &[&str]) -> Command {
    let mut c = cmd(&softroce());
    c.args(["run", "--lib"])
        .arg(shim_lib())
        .args(["--bind", ip, "--"])
        .arg(program("ibv_rc_pingpong", "ibverbs-utils"))
        .args(args);
    c
}

#[test]
fn shim_server_softroce_client() {
    let port = free_tcp_port().to_string();
    let common = ["-g", "1", "-p", &port, "-n", "100", "-c", "-s", "3000"];
    let s = shim_pingpong("127.0.16.10", &common);
    let mut c = cmd(&softroce());
    c.arg("pingpong")
        .args(["--bind", "127.0.16.11"])
        .args(common)
        .arg("127.0.0.1");
    let (st, ct) = pair(s, c, Duration::from_secs(60));
    assert!(st.contains("100 iters in"), "{st}");
    assert!(ct.contains("100 iters in"), "{ct}");
    assert!(st.contains("GID ::ffff:127.0.16.11"), "{st}");
}

#[test]
fn softroce_server_shim_client_with_events() {
    let port = free_tcp_port().to_string();
    let common = ["-g", "1", "-p", &port, "-n", "100", "-c", "-e"];
    let mut s = cmd(&softroce());
    s.arg("pingpong")
        .args(["--bind", "127.0.16.12"])
        .args(common);
    // softroce pingpong's server listens on its --bind address.
    let mut args = common.to_vec();
    args.push("127.0.16.12");
    let c = shim_pingpong("127.0.16.13", &args);
    let (st, ct) = pair(s, c, Duration::from_secs(60));
    assert!(st.contains("100 iters in"), "{st}");
    assert!(ct.contains("100 iters in"), "{ct}");
    assert!(ct.contains("GID ::ffff:127.0.16.12"), "{ct}");
}

#[test]
fn run_passes_the_exit_status_and_refuses_bad_flags() {
    let st = cmd(&softroce())
        .args(["run", "--lib"])
        .arg(shim_lib())
        .args([
            "--",
            "sh",
            "-c",
            // The MTU by default: rxe's on lo's 65536 bytes.
            "test \"$SOFTROCE_BIND\" = 127.0.0.1:4791 && test \"$SOFTROCE_MTU\" = 4096 && exit 7",
        ])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    for bad in [["--mtu", "1500"], ["--bind", "nowhere"]] {
        let out = cmd(&softroce())
            .arg("run")
            .args(bad)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(bad[0]),
            "{bad:?}"
        );
    }
}

/// `softroce run -- PROG ARGS` (perftest under the shim).
fn shim_perftest(ip: &str, prog: &str, args: &[&str]) -> Command {
    let mut c = cmd(&softroce());
    c.args(["run", "--lib"])
        .arg(shim_lib())
        .args(["--bind", ip, "--"])
        .arg(program(prog, "perftest"))
        .args(args);
    c
}

/// perftest's result row (size and iterations first) with a non-zero third figure.
fn has_result(text: &str, size: &str) -> bool {
    text.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 4 && f[0] == size && f[1] == "200" && f[3].parse::<f64>().is_ok_and(|v| v > 0.0)
    })
}

#[test]
fn perftest_under_the_shim_against_softroce_perf_both_roles() {
    for (prog, op, shim_serves, ips) in [
        ("ib_write_bw", "write", true, ("127.0.16.50", "127.0.16.51")),
        (
            "ib_write_bw",
            "write",
            false,
            ("127.0.16.52", "127.0.16.53"),
        ),
        ("ib_send_bw", "send", true, ("127.0.16.54", "127.0.16.55")),
        ("ib_read_bw", "read", false, ("127.0.16.56", "127.0.16.57")),
    ] {
        let port = free_tcp_port().to_string();
        let args = ["-x", "1", "-p", &port, "-n", "200", "-s", "65536"];
        let (sip, cip) = ips;
        let (s, c) = if shim_serves {
            let s = shim_perftest(sip, prog, &args);
            let mut c = cmd(&softroce());
            c.args(["perf", op, "--bind", cip]).args(args).arg(sip);
            (s, c)
        } else {
            let mut s = cmd(&softroce());
            s.args(["perf", op, "--bind", sip]).args(args);
            let mut cargs = args.to_vec();
            cargs.push(sip);
            (s, shim_perftest(cip, prog, &cargs))
        };
        let (st, ct) = pair(s, c, Duration::from_secs(90));
        // The WRITE and READ servers are passive and print the client's report, as perftest's.
        assert!(
            has_result(&ct, "65536"),
            "{prog} shim_serves={shim_serves}\n{ct}"
        );
        assert!(
            has_result(&st, "65536"),
            "{prog} shim_serves={shim_serves}\n{st}"
        );
    }
}

#[test]
fn perftest_ud_under_the_shim_against_softroce_perf_both_roles() {
    // ib_send_bw / ib_send_lat -c UD: 1024-byte datagrams (the shim's active MTU), both roles.
    for (prog, lat, shim_serves, ips) in [
        ("ib_send_bw", false, true, ("127.0.16.70", "127.0.16.71")),
        ("ib_send_bw", false, false, ("127.0.16.72", "127.0.16.73")),
        ("ib_send_lat", true, true, ("127.0.16.74", "127.0.16.75")),
        ("ib_send_lat", true, false, ("127.0.16.76", "127.0.16.77")),
    ] {
        let port = free_tcp_port().to_string();
        let args = [
            "-c", "UD", "-x", "1", "-p", &port, "-n", "200", "-s", "1024",
        ];
        let (sip, cip) = ips;
        let softroce_perf = |bind: &str| {
            let mut c = cmd(&softroce());
            c.args(["perf", "send", "--bind", bind]).args(args);
            if lat {
                c.arg("--lat");
            }
            c
        };
        let (s, c) = if shim_serves {
            let mut c = softroce_perf(cip);
            c.arg(sip);
            (shim_perftest(sip, prog, &args), c)
        } else {
            let mut cargs = args.to_vec();
            cargs.push(sip);
            (softroce_perf(sip), shim_perftest(cip, prog, &cargs))
        };
        let (st, ct) = pair(s, c, Duration::from_secs(90));
        for (t, end) in [(&st, "server"), (&ct, "client")] {
            assert!(
                has_result(t, "1024") && t.contains("Connection type : UD"),
                "{prog} shim_serves={shim_serves} {end}:\n{t}"
            );
        }
    }
}
