//! What `softroce perf` and `softroce plot` say about bad flags and files: each message names
//! the flag or path that is wrong and what would be right, and comes before any work.

mod common;

use common::*;

/// Runs softroce with `args` (no peer needed: each must fail before connecting); its stderr.
fn fails(args: &[&str]) -> String {
    String::from_utf8_lossy(&fails_fast(args).stderr).into_owned()
}

#[test]
fn the_mtu_message_lists_the_five_mtus() {
    let e = fails(&["perf", "write", "-m", "3000", "127.0.0.1"]);
    assert!(
        e.contains("-m 3000: the MTU must be 256, 512, 1024, 2048 or 4096"),
        "{e}"
    );
}

#[test]
fn size_and_qp_count_errors_name_their_own_flag() {
    for (args, want, not) in [
        (
            &["-q", "100000"][..],
            "-q 100000: the number of QPs must be 1..4096",
            "-s",
        ),
        (
            &["-q", "0"][..],
            "-q 0: the number of QPs must be 1..4096",
            "-s",
        ),
        (&["-s", "0"][..], "-s 0: the message size must be 1..", "-q"),
    ] {
        let mut a = vec!["perf", "write"];
        a.extend_from_slice(args);
        a.push("127.0.0.1");
        let e = fails(&a);
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!e.contains(&format!("and {not}")), "{args:?}: {e}");
    }
}

#[test]
fn an_unknown_flag_gets_no_far_fetched_suggestion() {
    let e = fails(&["perf", "write", "--bogus"]);
    assert!(e.contains("unexpected argument '--bogus'"), "{e}");
    assert!(!e.contains("--no-gso"), "{e}");
    assert!(
        e.contains("Usage: softroce perf [OPTIONS] <OP> [SERVER]"),
        "{e}"
    );
    // A near miss keeps clap's tip.
    let e = fails(&["perf", "write", "--tx_depth", "4"]);
    assert!(e.contains("a similar argument exists: '--tx-depth'"), "{e}");
}

#[test]
fn a_plot_into_a_missing_directory_fails_before_the_run() {
    // No server listens on this port: the error must come from the path check, before any
    // connection attempt.
    let e = fails(&[
        "perf",
        "write",
        "--plot",
        "/nonexistent-dir/x.svg",
        "-p",
        "1",
        "127.0.0.1",
    ]);
    assert!(
        e.contains("cannot write the plot to /nonexistent-dir/x.svg: the directory /nonexistent-dir does not exist"),
        "{e}"
    );
    assert!(!e.contains("connect"), "{e}");
    let dir = std::env::temp_dir().join(format!("softroce-msg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = dir.join("run.jsonl");
    std::fs::write(
        &run,
        "{\"bytes\":2,\"bw_avg_mibps\":1.0,\"msg_rate_mpps\":0.5}\n",
    )
    .unwrap();
    let e = fails(&[
        "plot",
        "-o",
        "/nonexistent-dir/x.svg",
        run.to_str().unwrap(),
    ]);
    assert!(
        e.contains("the directory /nonexistent-dir does not exist"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plot_says_what_a_file_that_is_not_perf_output_is() {
    let dir = std::env::temp_dir().join(format!("softroce-plotin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin_file = dir.join("garbage.bin");
    std::fs::write(&bin_file, [0xffu8, 0xfe, 0x00, 0x81]).unwrap();
    let text_file = dir.join("notes.txt");
    std::fs::write(&text_file, "hello\n").unwrap();
    let out = dir.join("o.svg");
    for f in [&bin_file, &text_file] {
        let e = fails(&["plot", "-o", out.to_str().unwrap(), f.to_str().unwrap()]);
        assert!(
            e.contains(&format!(
                "{}: not a JSON-lines file of `softroce perf --json` results",
                f.display()
            )),
            "{e}"
        );
        assert!(!e.contains("UTF-8"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_idle_spin_beyond_a_second_is_refused_with_its_range() {
    for sub in [&["perf", "write", "127.0.0.1"][..], &["run", "true"][..]] {
        let mut args = vec![sub[0], "--idle-spin-us", "1000001"];
        args.extend_from_slice(&sub[1..]);
        let e = fails(&args);
        assert!(
            e.contains("--idle-spin-us") && e.contains("0..=1000000"),
            "{args:?}: {e}"
        );
    }
}
