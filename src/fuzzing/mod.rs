//! Bodies of the fuzz targets in `fuzz/`, kept in the library so that `cargo test`
//! (tests/fuzz_corpus.rs) replays their seed corpus on stable Rust through exactly the code the
//! fuzzer runs. Each takes arbitrary bytes, must never panic, and asserts the invariants that
//! hold for any input: an assertion failure is a finding, exactly like a crash.
//!
//! - [`packet_decoder`], [`capture_reader`]: the decoders ([`decoders`]);
//! - [`responder`]: arbitrary requests against a QP with registered memory;
//! - [`completer`]: arbitrary responses against a requester's outstanding work;
//! - [`pair`]: two connected cores under arbitrary verbs calls and link faults;
//! - [`engine_rx`]: arbitrary datagrams into a running engine through a real UDP socket;
//! - [`cm`]: two connection managers under arbitrary calls, MAD losses, duplicates, forgeries
//!   and time.
//!
//! [`seeds`] writes the seed corpora that come from the real captures in tests/data/rxe.

pub mod cm;
pub mod completer;
pub mod decoders;
pub mod engine_rx;
pub mod harness;
pub mod pair;
pub mod responder;
pub mod seeds;

pub use cm::cm;
pub use completer::completer;
pub use decoders::{capture_reader, packet_decoder};
pub use engine_rx::engine_rx;
pub use pair::pair;
pub use responder::responder;
