//! Arbitrary request packets into a QP's responder against registered memory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::responder(data));
