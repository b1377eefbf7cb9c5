//! A `softroce perf` run that lasts more than a few seconds says how it is going on stderr,
//! at both ends (the passive server included), so that a slow run does not look hung.

mod common;

use common::*;
use std::time::Duration;

/// The "perf: N s: ..." lines of a run's stderr.
fn progress_lines(o: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("perf: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_run_of_more_than_three_seconds_reports_progress_at_both_ends() {
    // -D 5 lasts five seconds whatever the machine's speed: a line comes at 3 s.
    // The client may start before the server listens: retry while refused (bounded).
    let (server, client, _) = two_ends(
        &["perf", "write", "-D", "5", "-f", "1", "-s", "4096"],
        &[],
        &[],
        Duration::from_secs(60),
        Duration::from_secs(60),
    );
    ok(&client, "client");
    ok(&server, "server");
    let (c, sv) = (progress_lines(&client), progress_lines(&server));
    // The requester counts its completions; both ends count packets.
    let first = c
        .first()
        .unwrap_or_else(|| panic!("no progress line: {client:?}"));
    assert!(first.starts_with("perf: 3 s: "), "{first}");
    let completions: u64 = first
        .strip_prefix("perf: 3 s: ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    assert!(completions > 0, "{first}");
    assert!(first.contains("packets sent"), "{first}");
    let passive = sv
        .first()
        .unwrap_or_else(|| panic!("no server progress: {server:?}"));
    assert!(passive.contains(" received"), "{passive}");
    assert!(!passive.contains("work completions"), "{passive}");
    // Loopback may drop datagrams under load; when the transport retransmitted, the line
    // names the ACK timeout behind it.
    if first.contains("retransmitted") {
        assert!(first.contains("(67.1 ms each, -u 14)"), "{first}");
    }
}

#[test]
fn a_short_run_prints_no_progress() {
    let (server, client, _) = two_ends(
        &["perf", "write", "-n", "50"],
        &[],
        &[],
        Duration::from_secs(60),
        Duration::from_secs(60),
    );
    ok(&client, "client");
    ok(&server, "server");
    assert!(progress_lines(&client).is_empty(), "{client:?}");
    assert!(progress_lines(&server).is_empty(), "{server:?}");
}
