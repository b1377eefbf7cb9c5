//! `softroce rping` in two processes on loopback (127.0.0.1 client, 127.0.0.2 server, one
//! free UDP port as the RoCE port): the connection comes up through IB CM MADs on QP1, the
//! pings carry rping's data, and both ends end as rping's do.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

fn bin() -> Command {
    Command::new(common::bin())
}

fn free_port() -> u16 {
    common::ports().1
}

/// A server (with `-d`) that listens: its stdout has said "rdma_listen", which it prints once
/// the listen took effect.
fn server(roce_port: u16, extra: &[&str]) -> (Child, common::Lines) {
    let mut c = bin()
        .args(["rping", "-s", "-d", "-a", "127.0.0.2", "--roce-port"])
        .arg(roce_port.to_string())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = common::Lines::new(c.stdout.take().unwrap());
    if out
        .wait_for(Duration::from_secs(10), |l| l == "rdma_listen")
        .is_none()
    {
        let _ = c.kill();
        let o = c.wait_with_output().unwrap();
        panic!(
            "the rping server did not listen: {:?}{}",
            out.seen,
            text(&o.stderr)
        );
    }
    (c, out)
}

fn client(roce_port: u16, extra: &[&str]) -> Output {
    let c = bin()
        .args([
            "rping",
            "-c",
            "-a",
            "127.0.0.2",
            "-I",
            "127.0.0.1",
            "--roce-port",
        ])
        .arg(roce_port.to_string())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::finish(c, "rping client", Duration::from_secs(30))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn five_pings_with_data_shown_and_validated_at_both_ends() {
    let port = free_port();
    let (s, mut sout) = server(port, &["-v", "-S", "100"]);
    let c = client(port, &["-v", "-V", "-C", "5", "-S", "100"]);
    let s = common::finish(s, "rping server", Duration::from_secs(30));
    let sout: String = sout
        .rest(Duration::from_secs(5))
        .iter()
        .filter(|l| l.starts_with("server ping data"))
        .map(|l| format!("{l}\n"))
        .collect();
    let cout = text(&c.stdout);
    assert!(c.status.success(), "client: {cout}{}", text(&c.stderr));
    assert!(s.status.success(), "server: {sout}{}", text(&s.stderr));
    let pings: Vec<&str> = cout.lines().collect();
    assert_eq!(pings.len(), 5, "{cout}");
    for (i, line) in pings.iter().enumerate() {
        let data = line.strip_prefix("ping data: ").unwrap();
        assert!(data.starts_with(&format!("rdma-ping-{i}: ")), "{line}");
        // 99 characters and the NUL: every byte came back.
        assert_eq!(data.len(), 99, "{line}");
        let first = data[format!("rdma-ping-{i}: ").len()..]
            .chars()
            .next()
            .unwrap();
        assert_eq!(first, (b'A' + i as u8) as char);
    }
    let served: Vec<&str> = sout.lines().collect();
    assert_eq!(served.len(), 5, "{sout}");
    for (c, s) in pings.iter().zip(&served) {
        assert_eq!(s.strip_prefix("server "), Some(*c));
    }
    assert!(text(&s.stderr).contains("server DISCONNECT EVENT..."));
}

#[test]
fn a_port_nobody_listens_on_is_rejected_at_once_naming_the_address() {
    let port = free_port();
    // The server listens on 7174 (it said so), so the REJ for 7175 is about that port, not
    // about a server that was not listening yet.
    let (s, _out) = server(port, &["-p", "7174"]);
    let t = Instant::now();
    let c = client(port, &["-p", "7175", "-C", "1"]);
    // The server's CM answers the REQ with a REJ (invalid service ID, as Linux's cm.c does
    // for a REQ nobody listens for): no retries, no timeout.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(!c.status.success());
    let err = text(&c.stderr);
    assert!(
        err.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "connect error: 127.0.0.2 port 7175 (RoCE UDP port {port}) rejected the \
             connection: reason 8 (nobody listens on that port)"
        )),
        "{err}"
    );
    // The server still waits for its own client.
    let mut s = s;
    assert!(s.try_wait().unwrap().is_none());
    let _ = s.kill();
    let _ = s.wait();
}

#[test]
fn bad_flags_are_refused_with_rpings_wording() {
    let out = bin()
        .args(["rping", "-c", "-a", "127.0.0.2", "-S", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("Invalid size 10 (valid range is 26 to 65536)"),
        "{}",
        text(&out.stderr)
    );
    let out = bin().args(["rping", "-s", "-P"]).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("-P (persistent server) is not supported"));
    let out = bin().args(["rping", "-v"]).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("rping -s"));
    let out = bin().args(["rping", "-c"]).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("needs -a"));
}
