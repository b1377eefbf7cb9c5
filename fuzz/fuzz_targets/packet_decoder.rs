//! Arbitrary bytes into the RoCEv2 frame and packet decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::packet_decoder(data));
