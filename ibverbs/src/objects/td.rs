//! The thread domain object (`ibv_td`), below the PDs that hold it; `parent_domain` allocates
//! and frees it.

use std::sync::Arc;

use super::ctx::Ctx;
use super::handle::{Obj, Object};
use crate::ffi::*;

/// A thread domain: the application's promise that one thread at a time uses the objects
/// made in it. softroce takes its locks anyway (they are uncontended then), so the promise
/// changes nothing.
pub(super) struct Td {
    pub(super) _ctx: Arc<Obj<Ctx>>,
}

impl Object for Td {
    type C = ibv_td;
    type Handle = ibv_td;
}
