//! Arbitrary responses into a requester with outstanding work.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::completer(data));
