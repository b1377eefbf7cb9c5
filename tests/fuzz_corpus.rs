//! Replays the fuzz targets' seed corpus (fuzz/corpus/<target>/*) on stable Rust through the
//! same bodies the fuzzer runs (src/fuzzing.rs), so a crash once found stays fixed.

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
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
