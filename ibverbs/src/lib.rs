//! libibverbs.so.1 on softroce: the C API of rdma-core 44's libibverbs, implemented over
//! [`softroce::verbs`], so that unmodified verbs programs (ibverbs-utils, perftest, your own)
//! run RoCEv2 without an RDMA NIC, a kernel module or root.
//!
//! The device is `softroce0`; its address comes from the environment, as `softroce run` sets
//! it: `SOFTROCE_BIND` (an IP, or IP:port; default 127.0.0.1:4791) and `SOFTROCE_MTU` (the
//! port's active MTU in bytes, 256..4096; default 1024, rxe's on a 1500-byte netdev).
//!
//! Every object handed to C is a Rust struct whose first field is the C struct (`repr(C)`),
//! so the C pointer is the Rust pointer. Live objects are recorded in a registry, so that a
//! bad, foreign or already destroyed handle passed to a control call fails with `EINVAL`
//! instead of crashing (rdma-core would crash); the data-path calls reached through
//! `ibv_context_ops` (post, poll, notify) trust their handles, and the address handle of a UD
//! work request, as rdma-core's providers do: no lock on the data path.
//! Errors set `errno` and return what libibverbs returns (NULL, -1 or the errno value; see
//! each function).

#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)]

mod absent;
mod compat;
mod compat_1_0;
pub mod ffi;
mod objects;
pub mod provider_abi;
mod query_device_ex;

pub use absent::*;
pub use compat::*;
pub use objects::*;
