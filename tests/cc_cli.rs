//! Congestion control as users switch it: `--cc dcqcn|none` and `--cc-param NAME=VALUE` on
//! every subcommand that opens a device, and `softroce run`'s, which it passes to the shim.
//! Bad values fail before any connection with a message naming the flag and what it takes;
//! `--cc dcqcn` on a real two-process run makes every packet leave ECN-capable and `none`
//! leaves the traffic class alone.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{bin, finish, ok, ports, spawn};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Runs softroce with `args`, which must fail within 5 s (no peer listens: the error must come
/// from the flag check); returns the exit status and stderr.
fn fails(args: &[&str]) -> (i32, String) {
    let t = Instant::now();
    let o: Output = Command::new(bin()).args(args).output().unwrap();
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{args:?} took {:?} to fail",
        t.elapsed()
    );
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The arguments of each subcommand that opens a device, as a client of a port nobody
/// listens on, followed by `extra`.
fn each_subcommand(extra: &[&str]) -> Vec<Vec<String>> {
    // Port 1 on loopback: nothing listens, so only a flag check can stop the run early, and a
    // connection attempt would fail with a different message.
    [
        &["perf", "write", "-p", "1"][..],
        &["pingpong", "-p", "1"][..],
        &["rping", "-c", "-a", "127.0.0.1", "-p", "1"][..],
    ]
    .iter()
    .map(|sub| {
        let mut v = s(sub);
        v.extend(s(extra));
        if v[0] != "rping" {
            v.push("127.0.0.1".into());
        }
        v
    })
    .collect()
}

#[test]
fn an_unknown_mode_is_a_usage_error_of_every_subcommand() {
    for args in each_subcommand(&["--cc", "reno"]) {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, e) = fails(&a);
        assert_eq!(code, 2, "{a:?}: {e}");
        assert!(
            e.contains("invalid value 'reno' for '--cc <CC>'"),
            "{a:?}: {e}"
        );
        assert!(e.contains("[possible values: none, dcqcn]"), "{a:?}: {e}");
    }
}

#[test]
fn bad_parameters_name_the_parameter_before_any_connection() {
    for (extra, want) in [
        (
            &["--cc", "dcqcn", "--cc-param", "rpg_ai_rat=5"][..],
            "--cc-param: unknown congestion control parameter 'rpg_ai_rat' (known: rpg_max_rate,",
        ),
        (
            &["--cc", "dcqcn", "--cc-param", "dce_tcp_g=2000"][..],
            "--cc-param: dce_tcp_g=2000: dce_tcp_g must be 0..1023 (in 1/1024)",
        ),
        (
            &["--cc", "dcqcn", "--cc-param", "rpg_threshold"][..],
            "--cc-param: congestion control parameter 'rpg_threshold': not NAME=VALUE",
        ),
        (
            // Both flags' entries are checked together.
            &[
                "--cc",
                "dcqcn",
                "--cc-param",
                "rpg_max_rate=100",
                "--cc-param",
                "rpg_min_rate=200",
            ][..],
            "--cc-param: rpg_min_rate 200 Mb/s is above rpg_max_rate 100 Mb/s",
        ),
        (
            &["--cc-param", "rpg_ai_rate=5"][..],
            "--cc-param: congestion control parameters need congestion control on (dcqcn)",
        ),
    ] {
        for args in each_subcommand(extra) {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, e) = fails(&a);
            assert_eq!(code, 1, "{a:?}: {e}");
            assert!(
                e.contains(&format!("softroce: error: {want}")),
                "{a:?}: {e}"
            );
        }
    }
}

#[test]
fn run_checks_its_cc_flags_before_starting_the_program() {
    // The program would succeed: the failure must be the flag's, and come before it runs.
    let (code, e) = fails(&[
        "run",
        "--cc",
        "dcqcn",
        "--cc-param",
        "cnp_dscp=64",
        "--",
        "true",
    ]);
    assert_eq!(code, 1, "{e}");
    assert!(
        e.contains("softroce: error: --cc-param: cnp_dscp=64: cnp_dscp must be a DSCP of 0..63"),
        "{e}"
    );
}

/// The TOS of every IPv4 packet a capture saw arrive from `src`.
fn tos_from(pcap: &std::path::Path, src: std::net::Ipv4Addr) -> Vec<u8> {
    let f = std::fs::File::open(pcap).unwrap();
    let mut r = softroce::capture::CaptureReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(fr) = r.next_frame().unwrap() {
        let ip = &fr.data[14..];
        if ip[0] >> 4 == 4 && ip[12..16] == src.octets() {
            v.push(ip[1]);
        }
    }
    v
}

/// A server and a client `perf write` with `extra` on both; the server captures. Returns the
/// TOS of what the server received from the client.
fn perf_tos(extra: &[&str], tag: &str) -> Vec<u8> {
    let pcap =
        std::env::temp_dir().join(format!("softroce-cc-cli-{}-{tag}.pcap", std::process::id()));
    let (tcp, udp) = ports();
    let args = |ip: &str| {
        let mut v = s(&[
            "perf",
            "write",
            "-s",
            "8192",
            "-n",
            "50",
            "--tclass",
            "96",
            "-p",
            &tcp.to_string(),
            "--roce-port",
            &udp.to_string(),
            "--bind",
            ip,
        ]);
        v.extend(s(extra));
        v
    };
    let mut sv = args("127.0.0.1");
    sv.extend(s(&["--pcap", pcap.to_str().unwrap()]));
    let server = spawn(&sv);
    let mut cv = args("127.0.0.2");
    cv.push("127.0.0.1".into());
    // The client fails at once while the server is not listening yet; start it again then.
    let t = Instant::now();
    let c = loop {
        let out = finish(spawn(&cv), "client", Duration::from_secs(60));
        let refused = String::from_utf8_lossy(&out.stderr).contains("connect to");
        if out.status.success() || !refused || t.elapsed() > Duration::from_secs(10) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    ok(&c, tag);
    ok(&finish(server, "server", Duration::from_secs(30)), tag);
    let tos = tos_from(&pcap, "127.0.0.2".parse().unwrap());
    let _ = std::fs::remove_file(&pcap);
    tos
}

#[test]
fn cc_dcqcn_on_the_command_line_marks_every_packet_ect0() {
    // --tclass 96: DSCP 24. With dcqcn the ECN bits become ECT(0) (0x62), parameters taken.
    let on = perf_tos(
        &[
            "--cc",
            "dcqcn",
            "--cc-param",
            "rpg_ai_rate=5,min_time_between_cnps=4",
        ],
        "on",
    );
    assert!(on.len() >= 100, "{} packets", on.len());
    assert!(on.iter().all(|&t| t == 0x62), "{on:x?}");
    let off = perf_tos(&["--cc", "none"], "off");
    assert!(off.len() >= 100, "{} packets", off.len());
    assert!(off.iter().all(|&t| t == 0x60), "{off:x?}");
}
