//! Memory that RDMA operations target: sound shared storage ([`region`]) under the memory
//! regions of the verbs API.

pub mod region;

pub use region::{AccessError, SharedBytes};
