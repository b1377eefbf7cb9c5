//! softroce: a user-space RoCEv2 (SoftRoCE) engine.
//!
//! Layers, bottom up; each module uses only modules listed before it:
//! - [`random`]: the kernel's random generator (getrandom), for keys, PSNs and IDs;
//! - [`wire`]: bit-exact encoding and decoding of every RoCEv2 header, the packet codec, the
//!   invariant CRC and the CM MADs, in the manner of smoltcp's `wire` module;
//! - [`memory`]: storage that the network may write while the application reads it, without
//!   undefined behaviour (the base of memory regions), and the application's own memory
//!   behind the libibverbs shim;
//! - [`ib`]: the verbs' types, typed errors and modify-QP rules, shared by the layers above;
//! - [`transport`]: the RC, UC and UD queue pairs and shared receive queues as cores without
//!   I/O and without a clock (packets, verbs calls and the time in; packets, completions and
//!   the next deadline out), split into requester, responder and completer as rxe is;
//! - [`capture`]: reading and writing pcap/pcapng captures;
//! - [`cm`]: the InfiniBand communication manager (connection setup over QP1 MADs) as a
//!   state machine without I/O, like the transport core;
//! - [`driver`]: the UDP socket, the engine thread that runs the transport and CM cores, their
//!   timers, the link wrappers (capture, impairment), the device state shared with the verbs
//!   API, QP1 (`gsi`), multicast, live counters (`stats`), and the address shared by every
//!   process that opens it (`group`, `steering`, `fork`);
//! - [`verbs`]: libibverbs' objects and calls (device context, protection domain, memory
//!   region, completion queue, queue pair, address handle, shared receive queue) over the
//!   driver, with Rust ownership and typed errors;
//! - [`rdma_cm`]: connection management in librdmacm's shape over the CM;
//! - [`oob`]: the out-of-band exchanges (over TCP, and perftest's over rdma_cm) with which
//!   ibv_*_pingpong and perftest set up their connections, so that softroce's tools
//!   interoperate with them;
//! - `decode` (feature `decode`): turning captures into per-packet reports and per-connection
//!   analyses, as text or JSON (the engine behind `softroce decode`).
//!
//! Beside the library: the `softroce` binary's commands (src/cli, feature `cli`, on by
//! default, which brings `decode`) and the libibverbs.so.1 shim (ibverbs/, which builds this
//! crate without default features). The fuzz targets' bodies (`fuzzing`, feature `fuzzing`)
//! serve fuzz/ and tests/fuzz_corpus.rs.
#![deny(missing_docs)]
#![forbid(unsafe_op_in_unsafe_fn)]

pub mod capture;
pub mod cm;
#[cfg(feature = "decode")]
pub mod decode;
pub mod driver;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod ib;
pub mod memory;
pub mod oob;
pub mod random;
pub mod rdma_cm;
pub mod transport;
pub mod verbs;
pub mod wire;
