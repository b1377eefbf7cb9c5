//! softroce: a user-space RoCEv2 (SoftRoCE) engine.
//!
//! Layers, bottom up:
//! - [`wire`]: bit-exact encoding and decoding of every RoCEv2 header, the packet codec and the
//!   invariant CRC, in the manner of smoltcp's `wire` module;
//! - [`capture`]: reading and writing pcap/pcapng captures;
//! - [`decode`]: turning captures into per-packet reports and per-connection analyses (the
//!   engine behind `softroce decode`);
//! - [`cm`]: the InfiniBand communication manager (connection setup over QP1 MADs) as a
//!   state machine without I/O, like the transport core;
//! - [`rdma_cm`]: connection management in librdmacm's shape over the CM;
//! - [`ib`]: the verbs' types, typed errors and modify-QP rules, shared by the layers above;
//! - [`memory`]: storage that the network may write while the application reads it, without
//!   undefined behaviour (the base of memory regions).
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
pub mod rdma_cm;
pub mod transport;
pub mod verbs;
pub mod wire;
