//! Congestion control as users switch it: `--cc dcqcn|none` and `--cc-param NAME=VALUE` on
//! every subcommand that opens a device, and `softroce run`'s, which it passes to the shim.
//! Bad values fail before any connection with a message naming the flag and what it takes;
//! `--cc dcqcn` on a real two-process run makes every packet leave ECN-capable and `none`
//! leaves the traffic class alone. Through the impairment layer's marking bottleneck, CE marks
//! cross the kernel to the receiver, which answers with CNPs.

use std::collections::HashMap;
use std::process::Output;
use std::time::Duration;

mod common;
use common::{counters, fails_fast, ok, s, tos_from, two_ends};

/// Runs softroce with `args`, which must fail within 5 s (no peer listens: the error must come
/// from the flag check); returns the exit status and stderr.
fn fails(args: &[&str]) -> (i32, String) {
    let o = fails_fast(args);
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

/// Runs each subcommand with `extra` ([`each_subcommand`]), each of which must fail
/// ([`fails`]): its arguments, exit status and stderr.
fn each_subcommand_fails(extra: &[&str]) -> Vec<(Vec<String>, i32, String)> {
    each_subcommand(extra)
        .into_iter()
        .map(|args| {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, e) = fails(&a);
            (args, code, e)
        })
        .collect()
}

#[test]
fn an_unknown_mode_is_a_usage_error_of_every_subcommand() {
    for (a, code, e) in each_subcommand_fails(&["--cc", "reno"]) {
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
        for (a, code, e) in each_subcommand_fails(extra) {
            assert_eq!(code, 1, "{a:?}: {e}");
            assert!(
                e.contains(&format!("softroce: error: {want}")),
                "{a:?}: {e}"
            );
        }
    }
}

#[test]
fn bad_bottleneck_flags_are_refused_before_any_connection() {
    for (extra, want) in [
        (
            &["--bottleneck", "0"][..],
            "--bottleneck 0: the rate must be above 0 and at most 1000000 Mb/s",
        ),
        (
            &["--bottleneck", "NaN"][..],
            "--bottleneck NaN: the rate must be above 0",
        ),
        (
            &["--bottleneck", "100", "--bottleneck-queue", "1000"][..],
            "--bottleneck-queue 1000: the queue must hold at least 4208 bytes",
        ),
        (
            &["--bottleneck", "100", "--bottleneck-mark", "2000000"][..],
            "--bottleneck-mark 2000000: the marking threshold must be below --bottleneck-queue 1048576",
        ),
        (
            &["--bottleneck", "100", "--bottleneck-mark-max", "1000"][..],
            "--bottleneck-mark-max 1000: RED's Kmax must lie between --bottleneck-mark 65536 and --bottleneck-queue 1048576",
        ),
        (
            &["--bottleneck", "100", "--bottleneck-mark-max", "100000", "--bottleneck-mark-prob", "1.5"][..],
            "--bottleneck-mark-prob 1.5: must be a probability in 0..1",
        ),
    ] {
        for (a, code, e) in each_subcommand_fails(extra) {
            assert_eq!(code, 1, "{a:?}: {e}");
            assert!(e.contains(&format!("softroce: error: {want}")), "{a:?}: {e}");
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

/// `perf write` with `flags` and `extra` as a server (also `server_extra`) and its client (also
/// `client_extra`) on fresh ports ([`two_ends`]), each client run given `limit` and the server
/// half that; returns the client's output and the server's, each checked to have succeeded
/// (`what` names the run).
fn perf_pair(
    flags: &[&str],
    extra: &[&str],
    server_extra: &[&str],
    client_extra: &[&str],
    limit: Duration,
    what: &str,
) -> (Output, Output) {
    let head: Vec<&str> = ["perf", "write"]
        .iter()
        .chain(flags)
        .chain(extra)
        .copied()
        .collect();
    let (sv, c, _) = two_ends(&head, server_extra, client_extra, limit, limit / 2);
    ok(&c, what);
    ok(&sv, what);
    (c, sv)
}

/// A server and a client `perf write` with `extra` on both; the server captures. Returns the
/// TOS of what the server received from the client.
fn perf_tos(extra: &[&str], tag: &str) -> Vec<u8> {
    let pcap =
        std::env::temp_dir().join(format!("softroce-cc-cli-{}-{tag}.pcap", std::process::id()));
    perf_pair(
        &["-s", "8192", "-n", "50", "--tclass", "96"],
        extra,
        &["--pcap", pcap.to_str().unwrap()],
        &[],
        Duration::from_secs(60),
        tag,
    );
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

/// A `perf write` pair through a bottleneck on the client's sends (`extra` on both ends);
/// returns the client's and the server's `--counters`.
fn through_bottleneck(extra: &[&str]) -> (HashMap<String, u64>, HashMap<String, u64>) {
    // 200 Mb/s with a 256 KiB queue: 13 MB take about 0.5 s at the bottleneck's rate, and a
    // window of 2 x 128 x 64 KiB overflows the queue at once without a reaction.
    let (c, sv) = perf_pair(
        &["-q", "2", "-s", "65536", "-n", "100", "--counters"],
        extra,
        &[],
        &[
            "--bottleneck",
            "200",
            "--bottleneck-queue",
            "262144",
            "--bottleneck-mark",
            "32768",
        ],
        Duration::from_secs(120),
        "perf through the bottleneck",
    );
    (counters(&c), counters(&sv))
}

fn n(c: &HashMap<String, u64>, name: &str) -> u64 {
    c.get(name).copied().unwrap_or(0)
}

#[test]
fn the_bottleneck_marks_ce_across_the_kernel_and_dcqcn_answers() {
    // With DCQCN: packets leave ECT(0), the bottleneck marks some CE, the kernel carries the
    // mark to the server (np_ecn_marked_roce_packets), whose CNPs reach the client's reaction
    // point. Every message completes (perf succeeded).
    let (cl, sv) = through_bottleneck(&["--cc", "dcqcn"]);
    let marked = n(&cl, "bottleneck_marked");
    assert!(marked > 0, "{cl:?}");
    // 100 messages of 64 KiB are at least 1600 packets at any MTU.
    assert!(n(&cl, "bottleneck_pkts") >= 1600, "{cl:?}");
    // Every mark the client's queue made arrived as one (a dropped retransmission aside, the
    // loopback path loses none).
    let seen = n(&sv, "np_ecn_marked_roce_packets");
    assert!(seen > 0 && seen <= marked, "marked {marked}, seen {seen}");
    assert!(n(&sv, "np_cnp_sent") > 0, "{sv:?}");
    assert_eq!(
        n(&cl, "rp_cnp_handled"),
        n(&sv, "np_cnp_sent"),
        "{cl:?} {sv:?}"
    );
    assert!(n(&cl, "bottleneck_queue_max") <= 262_144);

    // Without congestion control nothing is ECN-capable: no marks, and the queue overflows.
    let (cl, sv) = through_bottleneck(&[]);
    assert_eq!(n(&cl, "bottleneck_marked"), 0, "{cl:?}");
    assert_eq!(n(&sv, "np_ecn_marked_roce_packets"), 0, "{sv:?}");
    assert!(n(&cl, "bottleneck_dropped") > 0, "{cl:?}");
    assert!(n(&cl, "retransmit_pkts") > 0, "{cl:?}");
}
