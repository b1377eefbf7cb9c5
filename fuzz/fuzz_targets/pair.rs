//! Two connected cores under arbitrary verbs calls, link faults and timer expiries.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::pair(data));
