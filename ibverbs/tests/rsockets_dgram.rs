//! Datagram rsockets (SOCK_DGRAM over UD QPs) under the shim: Debian's udpong server and
//! client between two processes on loopback, each under the shim's librdmacm.so.1 built by
//! this test run with its device on its own loopback address, and a C test of the datagram
//! API's data and error paths (issue 37).

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long one program may run.
const LIMIT: Duration = Duration::from_secs(60);

fn udpong() -> PathBuf {
    program("udpong", "rdmacm-utils")
}

/// Whether some UDP socket is bound to `port`, from /proc/net/udp{,6}.
fn udp_bound(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| a.ends_with(&want))
            })
        })
    })
}

/// Runs a udpong server at `ip:port` and, once its UDP socket is bound, a client from the
/// next address with `opts`; the server serves forever, so it is killed after the client.
/// Returns the client's output after checking it exited 0 in time.
fn udpong_pair(ip: &str, port: u16, opts: &[&str]) -> String {
    let p = port.to_string();
    let mut server = shimmed(&udpong(), ip, &["-b", ip, "-p", &p]);
    let mut s = server.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !udp_bound(port) {
        if Instant::now() >= deadline || s.try_wait().unwrap().is_some() {
            let _ = s.kill();
            let (so, _) = wait_for(s, Duration::ZERO);
            panic!("the server never bound {ip}:{port}:\n{}", text(&so));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (head, last) = ip.rsplit_once('.').unwrap();
    let client_ip = format!("{head}.{}", last.parse::<u8>().unwrap() + 1);
    let mut args = vec!["-s", ip, "-p", &p];
    args.extend_from_slice(opts);
    let client: Command = shimmed(&udpong(), &client_ip, &args);
    let (co, cin) = wait_for({ client }.spawn().unwrap(), LIMIT);
    let _ = s.kill();
    let (so, _) = wait_for(s, LIMIT);
    let (st, ct) = (text(&so), text(&co));
    assert!(cin && co.status.success(), "client:\n{ct}\nserver:\n{st}");
    ct
}

/// The client's result line (`custom SIZE XFERS TOTAL TIME ...`), printed only once the
/// closing message's reply came back, split into words.
fn result(out: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.starts_with("custom"))
        .unwrap_or_else(|| panic!("no result line:\n{out}"));
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn udpong_bandwidth_64_bytes() {
    let out = udpong_pair("127.0.0.171", 7571, &["-S", "64", "-C", "100"]);
    let r = result(&out);
    assert_eq!(r[1], "64", "{out}");
    received(&r[2], 100, &out);
}

/// Checks udpong's count of the datagrams its server received (`1k` for 1000): some, and no
/// more than were sent. UD drops what finds the receiver's queue (384 entries) full, as UDP
/// does, and a server on a loaded 2-core machine falls behind a client's burst, so the count
/// may be short of `sent`.
fn received(count: &str, sent: u32, out: &str) {
    let n = match count.strip_suffix('k') {
        Some(k) => k.parse::<u32>().map(|k| k * 1000),
        None => count.parse::<u32>(),
    };
    assert!(n.is_ok_and(|n| n > 0 && n <= sent), "{out}");
}

#[test]
fn udpong_bandwidth_1k_blocking() {
    let out = udpong_pair(
        "127.0.0.173",
        7573,
        &["-S", "1024", "-C", "1000", "-T", "b"],
    );
    let r = result(&out);
    assert_eq!(r[1], "1k", "{out}");
    received(&r[2], 1000, &out);
}

#[test]
fn udpong_echo_async() {
    // Echo mode: every datagram comes back; the count is both directions (2 x 200).
    let out = udpong_pair(
        "127.0.0.175",
        7575,
        &["-S", "1536", "-C", "200", "-T", "e", "-T", "a"],
    );
    let r = result(&out);
    assert_eq!((r[1].as_str(), r[2].as_str()), ("1.5k", "400"), "{out}");
}

#[test]
fn datagram_api_data_and_error_paths() {
    // With a 1024-byte MTU the largest datagram is 1016 bytes (the 8-byte header in front);
    // with 4096 the 2048-byte slot bounds it (2040). A passing check removes the program, so
    // each run builds it.
    for (ip, mtu) in [("127.0.0.179", "1024"), ("127.0.0.177", "4096")] {
        let t = CTest::build("tests/c/rsocket_dgram.c", &[], &["-lrdmacm", "-libverbs"]);
        let mut cmd = shimmed(t.exe(), ip, &[ip, mtu]);
        cmd.env("SOFTROCE_MTU", mtu);
        let out = t.check(cmd, LIMIT, 300);
        assert!(out.starts_with("ok "), "{out}");
    }
}
