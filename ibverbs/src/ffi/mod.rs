//! The C structures of rdma-core 44's `<infiniband/verbs.h>` that cross the ABI, laid out as
//! the header lays them out (x86-64 / aarch64 LP64), with the few kernel-ABI structs that the
//! exported `ibv_copy_*_kern` helpers convert. `tests/layout.rs` compiles a C program against
//! the installed headers and compares every size and offset with these.

#![allow(non_camel_case_types, missing_docs)]

/// Declares `#[repr(C)]` structs as written and records each one's fields for the layout
/// table ([`CLayout`]), so that every field a struct declares is compared with C's offset by
/// `tests/layout.rs` (those the table knows C has no name for excepted, see [`layout_table`]).
macro_rules! c_struct {
    ($(
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident : $ty:ty ),* $(,)?
        }
    )*) => {
        $(
            $(#[$m])*
            pub struct $name {
                $( $(#[$fm])* pub $f: $ty, )*
            }

            impl $crate::ffi::CLayout for $name {
                const FIELDS: &'static [(&'static str, usize)] =
                    &[$((stringify!($f), core::mem::offset_of!($name, $f))),*];
            }
        )*
    };
}

mod consts;
mod ex;
mod kern;
mod layout;
mod verbs;
mod xrc;

pub use consts::*;
pub use ex::*;
pub use kern::*;
pub use layout::{layout_table, CLayout};
pub use verbs::*;
pub use xrc::*;
