//! Debian's perftest programs (ib_write_bw, ib_send_bw, ib_read_bw) unmodified under the
//! shim, two processes on loopback. They load librdmacm, libmlx5 and libefa with BIND_NOW,
//! so these tests also prove that every symbol those libraries import is there.

mod common;

use common::*;
use std::time::Duration;

/// The least message rate a bandwidth test's result row must show, in Mpps: 500 messages a
/// second (33 MB/s of 64 KiB messages). These runs measured 14,000 to 29,000 64 KiB messages
/// a second (880 to 1,830 MB/s) and 236,000 atomics on a shared two-core machine; a run whose
/// messages wait for retransmission timeouts (perftest's -u 14: 67 ms each) shows about 15,
/// and one that loses a packet every few messages a few hundred.
const MIN_MSG_RATE_MPPS: f64 = 0.0005;

/// Checks a bandwidth test's result row (`#bytes #iterations BW-peak BW-average MsgRate`):
/// a positive average and at least [`MIN_MSG_RATE_MPPS`].
fn assert_bandwidth(row: &str) {
    let cols: Vec<&str> = row.split_whitespace().collect();
    let average: f64 = cols[3].parse().unwrap();
    let rate: f64 = cols[4].parse().unwrap();
    assert!(
        average > 0.0 && rate >= MIN_MSG_RATE_MPPS,
        "bandwidth below {MIN_MSG_RATE_MPPS} Mpps: {row}"
    );
}

fn bw(prog: &str, server_ip: &str, client_ip: &str, extra: &[&str]) {
    perf(prog, "65536", server_ip, client_ip, extra, false);
}

/// Runs PROGRAM at both ends with SIZE-byte messages, 200 iterations; `passive_server`: the
/// server prints no result (ib_read_lat, ib_atomic_lat).
fn perf(
    prog: &str,
    size: &str,
    server_ip: &str,
    client_ip: &str,
    extra: &[&str],
    passive_server: bool,
) {
    perf_with(
        prog,
        size,
        (server_ip, client_ip),
        extra,
        passive_server,
        &[],
    );
}

/// [`perf`] with `env` added to both ends' environment.
fn perf_with(
    prog: &str,
    size: &str,
    (server_ip, client_ip): (&str, &str),
    extra: &[&str],
    passive_server: bool,
    env: &[(&str, &str)],
) {
    let p = program(prog, "perftest");
    let port = free_tcp_port().to_string();
    let args = ["-x", "1", "-p", &port, "-n", "200", "-s", size];
    let mut s = under_shim(&p, server_ip);
    s.args(args).args(extra).envs(env.iter().copied());
    let mut c = under_shim(&p, client_ip);
    c.args(args)
        .args(extra)
        .arg("127.0.0.1")
        .envs(env.iter().copied());
    let (st, ct) = pair(s, c, Duration::from_secs(90));
    for (t, me, server) in [(&st, server_ip, true), (&ct, client_ip, false)] {
        assert!(t.contains("Device         : softroce0"), "{t}");
        assert!(t.contains("Link type       : Ethernet"), "{t}");
        let octets: Vec<String> = me.split('.').map(|o| format!("{o:0>2}")).collect();
        assert!(t.contains(&format!("255:255:{}", octets.join(":"))), "{t}");
        assert!(!t.contains("Couldn't") && !t.contains("failed"), "{t}");
        if server && passive_server {
            continue;
        }
        // The result row: size and iterations, then the bandwidth (at least a floor) or
        // non-zero latency figures.
        let row = t
            .lines()
            .find(|l| l.split_whitespace().take(2).eq([size, "200"]))
            .unwrap_or_else(|| panic!("no result row in\n{t}"));
        if prog.ends_with("_bw") {
            assert_bandwidth(row);
        } else {
            let fig: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
            assert!(fig > 0.0, "{row}");
        }
    }
}

#[test]
fn ib_write_bw_two_processes() {
    bw("ib_write_bw", "127.0.16.30", "127.0.16.31", &[]);
}

#[test]
fn ib_send_bw_two_processes() {
    bw("ib_send_bw", "127.0.16.32", "127.0.16.33", &[]);
}

#[test]
fn ib_read_bw_two_processes() {
    bw("ib_read_bw", "127.0.16.34", "127.0.16.35", &[]);
}

#[test]
fn ib_send_bw_with_events() {
    // -e: perftest waits on the completion channel (its fd, then ibv_get_cq_event).
    bw("ib_send_bw", "127.0.16.36", "127.0.16.37", &["-e"]);
}

#[test]
fn ib_atomic_bw_two_processes() {
    perf(
        "ib_atomic_bw",
        "8",
        "127.0.16.38",
        "127.0.16.39",
        &[],
        false,
    );
}

#[test]
fn latency_programs_two_processes() {
    // Inline sends (the lat tests' default), WRITE polled in memory, READ and atomics.
    perf("ib_send_lat", "2", "127.0.16.41", "127.0.16.42", &[], false);
    perf(
        "ib_write_lat",
        "2",
        "127.0.16.43",
        "127.0.16.44",
        &[],
        false,
    );
    perf("ib_read_lat", "2", "127.0.16.45", "127.0.16.46", &[], true);
    perf(
        "ib_atomic_lat",
        "8",
        "127.0.16.47",
        "127.0.16.48",
        &[],
        true,
    );
}

#[test]
fn busy_poll_mode_runs_the_programs() {
    // SOFTROCE_BUSY_POLL=1 (`softroce run --busy-poll`): the threads that poll and post run
    // the engine; a completion channel (-e) still wakes its waiter.
    let busy = [("SOFTROCE_BUSY_POLL", "1")];
    let ips = [
        ("127.0.18.1", "127.0.18.2"),
        ("127.0.18.3", "127.0.18.4"),
        ("127.0.18.5", "127.0.18.6"),
    ];
    perf_with("ib_send_lat", "2", ips[0], &[], false, &busy);
    perf_with("ib_write_bw", "65536", ips[1], &[], false, &busy);
    perf_with("ib_send_bw", "65536", ips[2], &["-e"], false, &busy);
}

#[test]
fn two_ib_write_bw_servers_and_their_clients_on_one_address() {
    // Two perftest servers on one device address and their two clients on the same address,
    // all four at once (one rxe device serves them so): every run reports its bandwidth, above
    // the floor.
    let ip = "127.0.16.40";
    let p = program("ib_write_bw", "perftest");
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let port = free_tcp_port().to_string();
            let args = ["-x", "1", "-p", &port, "-n", "500", "-s", "65536"];
            let mut s = under_shim(&p, ip);
            s.args(args);
            let mut c = under_shim(&p, ip);
            c.args(args).arg(ip);
            std::thread::spawn(move || pair(s, c, Duration::from_secs(90)))
        })
        .collect();
    for r in runs {
        let (st, ct) = r.join().unwrap();
        for t in [&st, &ct] {
            let row = t
                .lines()
                .find(|l| l.split_whitespace().take(2).eq(["65536", "500"]))
                .unwrap_or_else(|| panic!("no result row in\n{t}"));
            assert_bandwidth(row);
        }
    }
}
