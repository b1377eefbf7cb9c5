//! Replays the fuzz targets' seed corpora (fuzz/corpus/<target>/*) on stable Rust through the
//! same bodies the fuzzer runs (src/fuzzing), so that a crash or invariant failure once found
//! stays fixed, and checks that the seeds generated from the real captures are up to date
//! (`SOFTROCE_REGEN_SEEDS=1 cargo test --test fuzz_corpus` rewrites them).

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries
}

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let mut n = 0;
    for path in corpus(target) {
        let data = std::fs::read(&path).unwrap();
        body(&data);
        // Every prefix too: truncation is the commonest corruption.
        for cut in [1, 4, 13, 40, data.len() / 2, data.len().saturating_sub(1)] {
            body(&data[..cut.min(data.len())]);
        }
        n += 1;
    }
    n
}

#[test]
fn packet_decoder_corpus() {
    let n = replay("packet_decoder", softroce::fuzzing::packet_decoder);
    assert!(n >= 20, "only {n} seeds");
}

#[test]
fn capture_reader_corpus() {
    let n = replay("capture_reader", softroce::fuzzing::capture_reader);
    assert!(n >= 12, "only {n} seeds");
}

#[test]
fn responder_corpus() {
    let n = replay("responder", softroce::fuzzing::responder);
    assert!(n >= 12, "only {n} seeds");
}

#[test]
fn completer_corpus() {
    let n = replay("completer", softroce::fuzzing::completer);
    assert!(n >= 12, "only {n} seeds");
}

#[test]
fn pair_corpus() {
    let n = replay("pair", softroce::fuzzing::pair);
    assert!(n >= 6, "only {n} seeds");
}

#[test]
fn cm_corpus() {
    let n = replay("cm", softroce::fuzzing::cm);
    assert!(n >= 12, "only {n} seeds");
}

#[test]
fn engine_rx_corpus() {
    // One engine serves every input; the prefixes add nothing here but time.
    let mut n = 0;
    for path in corpus("engine_rx") {
        softroce::fuzzing::engine_rx(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 12, "only {n} seeds");
}

/// The committed seeds from tests/data/rxe are what src/fuzzing/seeds.rs generates.
#[test]
fn generated_seeds_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let seeds = softroce::fuzzing::seeds::all(&root.join("tests/data/rxe"));
    assert!(seeds.len() >= 40, "only {} generated seeds", seeds.len());
    let regen = std::env::var_os("SOFTROCE_REGEN_SEEDS").is_some();
    for (target, name, bytes) in seeds {
        let path = root.join("fuzz/corpus").join(target).join(name);
        if regen {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else {
            let have = std::fs::read(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (SOFTROCE_REGEN_SEEDS=1 writes it)", path.display())
            });
            assert!(
                have == bytes,
                "{} is stale (SOFTROCE_REGEN_SEEDS=1)",
                path.display()
            );
        }
    }
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The shaped `pair` seeds do what they are named for, so that the fuzzer starts from runs
/// that reach every operation, and the invariants are known to hold on non-trivial runs.
#[test]
fn pair_seeds_complete_their_transfers() {
    use softroce::fuzzing::pair::{pair_report, PairReport};
    let all_ok = PairReport {
        ok: [4, 2],
        failed: [0, 0],
        received: [1, 1],
    };
    for name in ["clean", "drop", "duplicate", "reorder", "corrupt"] {
        let r = pair_report(&seed("pair", &format!("shaped_{name}")));
        assert_eq!(r, all_ok, "{name}");
    }
    // Every packet of A dropped until its retry budget is spent: A fails its WRs (and B's
    // WRs, whose responses A no longer sends once in ERROR, fail too).
    let r = pair_report(&seed("pair", "shaped_silent_peer"));
    assert_eq!(r.ok[0], 0, "{r:?}");
    assert_eq!(r.failed[0], 4, "{r:?}");
}

/// Regression (found by `responder`): after a fatal NAK was queued (here for a SEND ONLY in
/// the middle of a SEND), the responder moved its expected PSN out of the way, but a peer may
/// send any PSN: a request carrying the moved PSN executed, took a new receive WQE over the
/// one the interrupted SEND was filling (lost without a completion) and completed it out of
/// posting order. Now nothing executes while a fatal NAK is pending.
#[test]
fn regress_request_after_fatal_nak() {
    softroce::fuzzing::responder(&seed("responder", "regress_request_after_fatal_nak"));
}

/// Regression (found by `completer`): an RNR NAK carrying a PSN already acknowledged (a stale
/// or forged one) rewound the requester to it, so that it resent acknowledged requests and
/// counted more PSNs acknowledged than sent. Stale RNR NAKs are now ignored, as stale NAKs
/// were.
#[test]
fn regress_stale_rnr_nak() {
    softroce::fuzzing::completer(&seed("completer", "regress_stale_rnr_nak"));
}

/// Regression (found by `completer`; an arithmetic overflow in the requester): a READ response
/// implicitly acknowledges the WQEs before it, and the completer completed them without moving
/// its position. A requester rewound (by a timeout) into one of those WQEs then resumed, after
/// the WQE left the queue, at its byte offset inside the next WQE, shorter than that offset.
/// The completer's position now moves up as an ACK would move it.
#[test]
fn regress_read_response_acks_without_advancing() {
    softroce::fuzzing::completer(&seed(
        "completer",
        "regress_read_response_acks_without_advancing",
    ));
}

/// Regression (found by `completer`): an RNR NAK naming a PSN inside a READ whose response had
/// not arrived moved the completer's position into the READ, while the requester resends a
/// READ from its first missing byte: it resumed behind the completer, which then counted more
/// PSNs acknowledged than sent. The completer's position now stops at the oldest unanswered
/// READ/atomic.
#[test]
fn regress_nak_inside_read() {
    softroce::fuzzing::completer(&seed("completer", "regress_nak_inside_read"));
}

/// Regression (found by `completer`): a PSN sequence NAK arriving with the retry budget spent
/// failed the WQE and moved the QP to ERROR, and then re-armed the retransmission timer, which
/// kept firing in ERROR. No timer is armed once the retry fails.
#[test]
fn regress_timer_after_retry_exhausted() {
    softroce::fuzzing::completer(&seed("completer", "regress_timer_after_retry_exhausted"));
}
