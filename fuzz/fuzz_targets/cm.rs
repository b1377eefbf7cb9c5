//! Two connection managers under arbitrary calls, MAD faults, forgeries and time.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::cm(data));
