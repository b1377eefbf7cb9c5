//! Arbitrary bytes into the pcap/pcapng reader and the decode pipeline.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::capture_reader(data));
