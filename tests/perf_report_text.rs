//! `softroce perf`'s text report as perftest prints it: the server's "Waiting for client to
//! connect..." banner while it waits, and the local and remote address lines of every QP
//! (perftest's ctx_print_pingpong_data), which --json leaves out.

mod common;

use common::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// " local address: LID 0000 QPN 0x0011 PSN 0x1a2b3c RKey 0x000101 VAddr 0x007f..." and the
/// GID line after it, checked field by field in perftest's formats.
fn check_address(line: &str, gid: &str, side: &str, read: bool, rdma: bool, ip: [u8; 4]) {
    let rest = line
        .strip_prefix(&format!(" {side} address: LID 0000 QPN 0x"))
        .unwrap_or_else(|| panic!("{line:?}"));
    let f: Vec<&str> = rest.split(' ').collect();
    assert_eq!(f[0].len(), 4, "QPN %#06x: {line:?}");
    assert!(u32::from_str_radix(f[0], 16).is_ok(), "{line:?}");
    assert_eq!(f[1], "PSN", "{line:?}");
    assert!(f[2].starts_with("0x") || f[2] == "000000", "{line:?}");
    let mut i = 3;
    if read {
        assert_eq!(&f[i..i + 2], ["OUT", "0x80"], "{line:?}");
        i += 2;
    }
    if rdma {
        assert_eq!(f[i], "RKey", "{line:?}");
        assert_eq!(f[i + 1].len(), 8, "RKey %#08x: {line:?}");
        assert_eq!(f[i + 2], "VAddr", "{line:?}");
        assert_eq!(f[i + 3].len(), 16, "VAddr %#016llx: {line:?}");
        i += 4;
    }
    assert_eq!(f.len(), i, "{line:?}");
    let want = format!(
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:{:02}:{:02}:{:02}:{:02}",
        ip[0], ip[1], ip[2], ip[3]
    );
    assert_eq!(gid, want);
}

#[test]
fn the_server_says_it_waits_and_both_ends_print_every_qps_addresses() {
    for (op, read, rdma) in [
        ("read", true, true),
        ("write", false, true),
        ("send", false, false),
    ] {
        let (tcp, udp) = ports();
        let common = |ip: &str| end_args(&["perf", op, "-q", "2", "-n", "20"], tcp, udp, ip);
        let mut server = Command::new(bin())
            .args(common("127.0.0.1"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The banner comes while nobody has connected yet: read it before starting the client.
        let mut out = server.stdout.take().unwrap();
        let mut seen = Vec::new();
        let t = Instant::now();
        let banner = "* Waiting for client to connect... *\n";
        while !String::from_utf8_lossy(&seen).contains(banner) {
            let mut b = [0u8; 256];
            let n = out.read(&mut b).unwrap();
            assert!(n > 0, "server ended without a banner");
            seen.extend_from_slice(&b[..n]);
            assert!(t.elapsed() < Duration::from_secs(10), "no banner");
        }
        let mut cv = common("127.0.0.2");
        cv.push("127.0.0.1".into());
        let client = finish(spawn(&cv), "client", Duration::from_secs(60));
        let c = ok(&client, "client");
        out.read_to_end(&mut seen).unwrap();
        let server = finish(server, "server", Duration::from_secs(60));
        assert!(server.status.success(), "{server:?}");
        let sv = String::from_utf8_lossy(&seen).into_owned();
        assert!(!c.contains("Waiting for client"), "{c}");
        for (text, me, peer) in [
            (&sv, [127, 0, 0, 1], [127, 0, 0, 2]),
            (&c, [127, 0, 0, 2], [127, 0, 0, 1]),
        ] {
            let lines: Vec<&str> = text.lines().collect();
            let mut n = 0;
            for (side, ip) in [("local", me), ("remote", peer)] {
                for (i, l) in lines.iter().enumerate() {
                    if l.starts_with(&format!(" {side} address:")) {
                        check_address(l, lines[i + 1], side, read, rdma, ip);
                        n += 1;
                    }
                }
            }
            assert_eq!(n, 4, "two QPs, two sides:\n{text}");
            // Before the result table, after the test's banner, as perftest prints them.
            let addr = text.find(" local address:").unwrap();
            assert!(text.find(" Number of qps").unwrap() < addr, "{text}");
            assert!(text.find(" #bytes").unwrap() > addr, "{text}");
        }
        // The local lines of one end are the remote lines of the other.
        let locals = |t: &str| -> Vec<String> {
            t.lines()
                .filter_map(|l| l.strip_prefix(" local address:").map(str::to_string))
                .collect()
        };
        let remotes = |t: &str| -> Vec<String> {
            t.lines()
                .filter_map(|l| l.strip_prefix(" remote address:").map(str::to_string))
                .collect()
        };
        assert_eq!(locals(&sv), remotes(&c));
        assert_eq!(remotes(&sv), locals(&c));
    }
}

#[test]
fn json_output_has_neither_banner_nor_address_lines() {
    // The client retries until the server listens (no banner to wait for under --json).
    let (server, client, _) = two_ends(
        &["perf", "write", "--json", "-n", "20"],
        &[],
        &[],
        Duration::from_secs(60),
        Duration::from_secs(60),
    );
    for o in [&client, &server] {
        let text = ok(o, "--json end");
        for l in text.lines() {
            serde_json::from_str::<serde_json::Value>(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}"));
        }
    }
}
