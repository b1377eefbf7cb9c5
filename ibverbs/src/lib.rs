//! libibverbs.so.1 on softroce: the C API of rdma-core 44's libibverbs, implemented over
//! [`softroce::verbs`], so that unmodified verbs programs (ibverbs-utils, perftest, your own)
//! run RoCEv2 without an RDMA NIC, a kernel module or root.
//!
//! The device is `softroce0`; its address comes from the environment, as `softroce run` sets
//! it: `SOFTROCE_BIND` (an IP, or IP:port; default 127.0.0.1:4791) and `SOFTROCE_MTU` (the
//! port's active MTU in bytes, 256..4096; by default rxe's for the address's interface: 4096
//! on loopback, 1024 on a 1500-byte link). Several addresses, comma-separated, are one device
//! each (`softroce0`, `softroce1`, ... in that order, each with its own engine), and
//! `SOFTROCE_MTU` then takes one value for all or one per device, also comma-separated.
//! Congestion control: `SOFTROCE_CC` (`dcqcn`, or `none`, the default, as kernel rxe) and
//! `SOFTROCE_CC_PARAMS` (`name=value,...` under mlx5's names, as `softroce --cc-param` takes
//! them); values that are not usable make `ibv_open_device` fail with EINVAL after one line on
//! stderr.
//!
//! Every object handed to C, of the current ABI or of IBVERBS_1.0 (`compat_1_0`), is one
//! allocation holding the C struct first and the Rust state after it (`objects::handle`), so
//! the C pointer is the object's pointer. Live objects are recorded in a registry, and a
//! control call looks its handle up and takes a reference under the registry's lock: a bad,
//! foreign or already destroyed handle fails with `EINVAL` instead of crashing (rdma-core
//! would crash), and an object in use by another object or by a call on another thread is not
//! freed (its destroy fails with `EBUSY`). What a destroy must check besides (a QP's multicast
//! attachments) is checked under that lock too, and the completion event path takes no
//! reference at all: it finds its CQ under the lock. So the control calls, of both ABIs, hold
//! with any number of threads (ibverbs/tests/stress.rs races them against their objects'
//! destroys, the 1.0 ones in c/race_compat_1_0.c). The data-path calls reached through `ibv_context_ops` (post, poll, notify, and
//! the 1.0 context's ops) trust their handles, and the address handle of a UD work request, as
//! rdma-core's providers do: no lock on the data path, and destroying an object while another
//! thread posts to it is the application's bug.
//! Every failure sets `errno` and returns what libibverbs returns (NULL, -1 or the errno value;
//! see each function). Nothing aborts the process the shim lives in, and nothing blocks it for
//! good but what rdma-core blocks on: a read of a blocking fd (`ibv_get_cq_event`,
//! `ibv_get_async_event`), and `ibv_destroy_cq`, which waits until the application has
//! acknowledged every completion event it got for the CQ (ibv_get_cq_event(3)).

#![deny(missing_docs)]
#![allow(clippy::missing_safety_doc)]

mod absent;
mod compat;
mod compat_1_0;
pub mod ffi;
mod objects;
pub mod provider_abi;
pub mod rdmacm;

pub use absent::*;
pub use compat::*;
pub use objects::*;
