//! librdmacm.so.1 (rdma-core 44's C API and symbol versions RDMACM_1.0 .. 1.3) on softroce's
//! connection manager ([`softroce::rdma_cm`] over IB CM MADs on QP1).
//!
//! # One object, two sonames
//!
//! The functions here are exported by the same shared object as the libibverbs shim, under
//! rdma-core's RDMACM_* version nodes (`librdmacm.map`); `librdmacm.so.1` is a symbolic link
//! to that file. glibc maps a file once per process (by device and inode), adds the second
//! name to the loaded object, and checks a program's RDMACM_1.x version needs against it: so a
//! program linked against both libraries gets one engine, one UDP socket and one QP1, shared
//! by the CM and by the QPs it creates through libibverbs. (spec-notes/librdmacm.md, "why".)
//!
//! # Events
//!
//! softroce's CM reports to one Rust [`EventChannel`](softroce::rdma_cm::EventChannel) per device. A dispatcher thread per
//! device, started with its engine, takes its events and turns each into a C `rdma_cm_event` on the C event
//! channel of the identifier it concerns (a process may have many); a C channel's `fd` is an
//! eventfd in semaphore mode that counts its queued events, so poll/select/epoll work on it
//! and a non-blocking fd makes `rdma_get_cm_event` fail with EAGAIN, as with the kernel's.
//! Address and route resolution need no message (the GID is the IP address), so their events
//! are queued by the call itself.
//!
//! # Files, bottom up
//!
//! Each file uses only those listed before it: `ffi` (the C declarations); `error` (errno and
//! the -1 convention), `addr` (socket addresses, the port table), `param` (connection
//! parameters both ways); `object` (the identifier and the event channel, whose types refer to
//! each other); `device` (each device's context, PD and connection manager, and the
//! dispatcher thread); `channel` (taking and acknowledging events); `locate` (which device an
//! address is on); `id` (create, destroy, bind, a synchronous identifier's wait); then the
//! calls built on them: `resolve`, `listen`, `qp`, `settings`, `multicast`, `conn`,
//! `addrinfo`; `rsocket` stands apart.

mod addr;
mod addrinfo;
mod channel;
mod conn;
mod device;
mod error;
pub mod ffi;
mod id;
mod listen;
mod locate;
mod multicast;
mod object;
mod param;
mod qp;
mod resolve;
mod rsocket;
mod settings;
mod srq;

pub use addrinfo::*;
pub use channel::*;
pub use conn::*;
pub use device::{rdma_free_devices, rdma_get_devices};
pub use id::*;
pub use listen::*;
pub use multicast::*;
pub use qp::*;
pub use resolve::*;
pub use rsocket::*;
pub use settings::*;
