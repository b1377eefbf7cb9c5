//! Debian's perftest programs (ib_write_bw, ib_send_bw, ib_read_bw) unmodified under the
//! shim, two processes on loopback. They load librdmacm, libmlx5 and libefa with BIND_NOW,
//! so these tests also prove that every symbol those libraries import is there.

mod common;

use common::*;
use std::time::Duration;

fn bw(prog: &str, server_ip: &str, client_ip: &str, extra: &[&str]) {
    let p = program(prog, "perftest");
    let port = free_tcp_port().to_string();
    let args = ["-x", "1", "-p", &port, "-n", "200", "-s", "65536"];
    let mut s = under_shim(&p, server_ip);
    s.args(args).args(extra);
    let mut c = under_shim(&p, client_ip);
    c.args(args).args(extra).arg("127.0.0.1");
    let (st, ct) = pair(s, c, Duration::from_secs(90));
    for (t, me) in [(&st, server_ip), (&ct, client_ip)] {
        assert!(t.contains("Device         : softroce0"), "{t}");
        assert!(t.contains("Link type       : Ethernet"), "{t}");
        let octets: Vec<String> = me.split('.').map(|o| format!("{o:0>2}")).collect();
        assert!(t.contains(&format!("255:255:{}", octets.join(":"))), "{t}");
        // The result row: size and iterations, then non-zero average bandwidth.
        let row = t
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["65536", "200"]))
            .unwrap_or_else(|| panic!("no result row in\n{t}"));
        let avg: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(avg > 0.0, "{row}");
        assert!(!t.contains("Couldn't") && !t.contains("failed"), "{t}");
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
