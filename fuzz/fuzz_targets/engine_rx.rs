//! Arbitrary datagrams into a running engine through a real loopback UDP socket.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::engine_rx(data));
