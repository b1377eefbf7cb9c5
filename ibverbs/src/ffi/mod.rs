//! The C structures of rdma-core 44's `<infiniband/verbs.h>` that cross the ABI, laid out as
//! the header lays them out (x86-64 / aarch64 LP64), with the few kernel-ABI structs that the
//! exported `ibv_copy_*_kern` helpers convert. `tests/layout.rs` compiles a C program against
//! the installed headers and compares every size and offset with these.

#![allow(non_camel_case_types, missing_docs)]

mod consts;
mod ex;
mod kern;
mod layout;
mod verbs;

pub use consts::*;
pub use ex::*;
pub use kern::*;
pub use layout::layout_table;
pub use verbs::*;
