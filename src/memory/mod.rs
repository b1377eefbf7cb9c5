//! Memory that RDMA operations target: sound shared storage ([`region`]) under the memory
//! regions of the verbs API, and the application's own memory behind the libibverbs shim
//! ([`foreign`], the one module that accesses memory through raw pointers).

pub mod foreign;
pub mod region;

pub use region::{AccessError, SharedBytes};
