//! UCX 1.13 (Debian's ucx-utils) on softroce with no UCX setting beyond naming the device:
//! `ucx_info -d` lists softroce0 with rc_verbs and ud_verbs (it needs the /dev and sysfs view
//! of `softroce run`), and ucx_perftest's UCP tests, the ones UCX_TLS governs (tag_lat, tag_bw,
//! ucp_put_bw, ucp_get), run between two `softroce run` processes over rc_verbs+ud_verbs and
//! over ud_verbs alone (UD needs the packet type in wc.sl, spec-notes/ud-completion-sl.md).
//! Runs are short and each has a deadline.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_tcp_port, pair, program, shim_lib, softroce, wait_for};

/// `softroce run --bind IP [EXTRA] -- PROG ARGS` with only the device named to UCX.
fn under_run(ip: &str, extra: &[&str], prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(softroce());
    c.args(["run", "--lib"])
        .arg(shim_lib())
        .args(["--bind", ip])
        .args(extra)
        .arg("--")
        .arg(program(prog, "ucx-utils"))
        .args(args)
        .env("UCX_NET_DEVICES", "softroce0:1")
        // Whatever the caller's environment says, these tests set no UD workaround.
        .env_remove("UCX_UD_VERBS_ETH_DGID_CHECK")
        .env_remove("UCX_IB_GID_INDEX")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The transports `ucx_info -d` lists per device: (device, transport) pairs.
fn transports(out: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut tl = None;
    for l in out.lines() {
        let l = l.trim_start_matches('#').trim();
        if let Some(t) = l.strip_prefix("Transport:") {
            tl = Some(t.trim().to_string());
        } else if let (Some(d), Some(t)) = (l.strip_prefix("Device:"), tl.take()) {
            v.push((d.trim().to_string(), t));
        }
    }
    v
}

#[test]
fn ucx_info_lists_softroce0_with_rc_and_ud_verbs() {
    let info = |extra: &[&str]| {
        let c = under_run("127.0.31.1", extra, "ucx_info", &["-d"])
            .spawn()
            .unwrap();
        let (o, in_time) = wait_for(c, Duration::from_secs(60));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            in_time && o.status.success(),
            "ucx_info -d {extra:?}: {:?}, in time: {in_time}\n{out}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        (transports(&out), out)
    };
    let (tl, out) = info(&[]);
    for want in ["rc_verbs", "ud_verbs"] {
        assert!(
            tl.iter().any(|(d, t)| d == "softroce0:1" && t == want),
            "no {want} on softroce0:1 in:\n{out}"
        );
    }
    assert!(out.contains("# Memory domain: softroce0"), "{out}");
    // Without the device view UCX finds no /dev/infiniband node and skips the device: the
    // view is what the listing above depends on.
    let (tl, out) = info(&["--no-device-view"]);
    assert!(
        !tl.iter().any(|(d, _)| d.starts_with("softroce0")),
        "softroce0 listed without the device view:\n{out}"
    );
}

/// The `Final:` row of a ucx_perftest run: iterations, then the columns after it.
fn final_row(out: &str) -> Option<Vec<f64>> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Final:"))
        .map(|r| {
            r.split_whitespace()
                .filter_map(|x| x.parse::<f64>().ok())
                .collect()
        })
}

/// ucx_perftest TEST between two `softroce run` processes over `tls`; the client's Final row
/// (iterations, 50th percentile latency, average latency, overall latency, average and
/// overall bandwidth in MB/s, average and overall message rate).
fn perftest(tls: &str, test: &str, size: &str, iters: &str, ips: (&str, &str)) -> Vec<f64> {
    let port = free_tcp_port().to_string();
    let mut s = under_run(ips.0, &[], "ucx_perftest", &["-p", &port]);
    s.env("UCX_TLS", tls);
    let mut c = under_run(
        ips.1,
        &[],
        "ucx_perftest",
        &[
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            test,
            "-s",
            size,
            "-n",
            iters,
        ],
    );
    c.env("UCX_TLS", tls);
    let (_, out) = pair(s, c, Duration::from_secs(90));
    let row = final_row(&out).unwrap_or_else(|| panic!("{tls} {test}: no Final row:\n{out}"));
    assert_eq!(
        row.first().copied(),
        iters.parse::<f64>().ok(),
        "{tls} {test}: every iteration done:\n{out}"
    );
    assert!(row.len() >= 8, "{tls} {test}: a full row:\n{out}");
    eprintln!("UCX_TLS={tls} {test} -s {size} -n {iters}: {row:?}");
    row
}

/// The four ucx_perftest runs over `tls`, each pair of processes on addresses of its own in
/// 127.0.`net`.0/24: a run's devices never wait for the previous run's sockets to close.
fn the_four_tests(tls: &str, net: u8) {
    let ips = |i: u8| {
        (
            format!("127.0.{net}.{}", 2 + 2 * i),
            format!("127.0.{net}.{}", 3 + 2 * i),
        )
    };
    let (s, c) = ips(0);
    let lat = perftest(tls, "tag_lat", "8", "2000", (&s, &c));
    assert!(lat[1] > 0.0, "a median latency");
    for (i, test) in (1..).zip(["tag_bw", "ucp_put_bw", "ucp_get"]) {
        let (s, c) = ips(i);
        let bw = perftest(tls, test, "65536", "200", (&s, &c));
        assert!(bw[5] > 0.0, "{test}: data moved");
    }
}

#[test]
fn ucx_perftest_over_rc_and_ud_verbs() {
    the_four_tests("rc_verbs,ud_verbs", 31);
}

#[test]
fn ucx_perftest_over_ud_verbs_alone() {
    the_four_tests("ud_verbs", 32);
}

#[test]
fn two_ucx_perftest_servers_and_their_clients_on_one_address() {
    // Two ucx_perftest servers on one device address and their clients on the same address,
    // all at once (before the address was shared, the second process found "no usable
    // transports/devices"): each pair moves its 200 messages.
    let ip = "127.0.33.2";
    let run = |args: &[&str]| {
        let mut c = under_run(ip, &[], "ucx_perftest", args);
        c.env("UCX_TLS", "rc_verbs,ud_verbs");
        c
    };
    let pairs = [free_tcp_port().to_string(), free_tcp_port().to_string()];
    let threads: Vec<_> = pairs
        .into_iter()
        .map(|port| {
            let s = run(&["-p", &port]);
            let c = run(&[
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "tag_bw",
                "-s",
                "65536",
                "-n",
                "200",
            ]);
            std::thread::spawn(move || pair(s, c, Duration::from_secs(90)).1)
        })
        .collect();
    for t in threads {
        let out = t.join().unwrap();
        let row = final_row(&out).unwrap_or_else(|| panic!("no Final row:\n{out}"));
        assert_eq!(row.first().copied(), Some(200.0), "{out}");
        assert!(row[5] > 0.0, "{out}");
    }
}
