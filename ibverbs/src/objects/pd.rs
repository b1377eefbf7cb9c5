//! Protection domains.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use libc::{c_int, EINVAL, ENODEV};
use softroce::verbs::ProtectionDomain;

use super::common::{errno_of, fail, fail_null};
use super::ctx::{ctx_of, Ctx};
use super::handle::{self, Obj, Object};
use crate::ffi::*;

/// A protection domain. Its MRs, MWs, QPs, SRQs and AHs hold it (so `ibv_dealloc_pd` is EBUSY while
/// they live), and it holds its context.
pub(super) struct Pd {
    pub(super) pd: ProtectionDomain,
    pub(super) ctx: Arc<Obj<Ctx>>,
    /// What a parent domain (`ibv_alloc_parent_domain`) holds; None for a plain PD.
    pub(super) parent: Option<Parent>,
}

/// A parent domain's parts: the PD it stands for and its thread domain, held while it lives,
/// and the application's allocators. softroce never calls them: rdma-core's providers call
/// them for the queue buffers and doorbells their hardware reads by DMA, and softroce's
/// queues are the engine's own Rust memory, which no device reads and the application never
/// sees (spec-notes/beyond-rxe.md rule 10).
pub(super) struct Parent {
    pub(super) _pd: Arc<Obj<Pd>>,
    pub(super) _td: Option<Arc<Obj<super::td::Td>>>,
    pub(super) _alloc: Option<PdAllocFn>,
    pub(super) _free: Option<PdFreeFn>,
    pub(super) _pd_context: *mut libc::c_void,
}

// SAFETY: the raw pointer and functions are the application's, kept and never used (see
// `Parent`).
unsafe impl Send for Parent {}
// SAFETY: as for Send.
unsafe impl Sync for Parent {}

impl Object for Pd {
    type C = ibv_pd;
    type Handle = ibv_pd;
}

/// The live PD behind `p`, referenced (see [`handle::get`]): while the caller holds it, the
/// PD counts as in use and cannot be deallocated.
pub(super) fn pd_of(p: *mut ibv_pd) -> Option<Arc<Obj<Pd>>> {
    handle::get::<Pd>(p)
}

/// Whether `p` is a live parent domain of the context `c`.
pub(super) fn is_parent_domain_of(p: *mut ibv_pd, c: *mut ibv_context) -> bool {
    pd_of(p).is_some_and(|pd| pd.parent.is_some() && pd.ctx.ibv() == c)
}

impl Obj<Pd> {
    /// The `context` C gave for it (a field written only at creation).
    pub(super) fn context(&self) -> *mut ibv_context {
        self.ctx.ibv()
    }
}

/// `ibv_alloc_pd`: NULL and errno on failure (the first PD or CQ of a context binds its UDP
/// socket: EADDRINUSE when another process holds the address).
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    let g = match ctx.open() {
        Ok(g) => g,
        Err(e) => return fail_null(e),
    };
    let pd = match g.as_ref().map(|x| x.alloc_pd()) {
        Some(Ok(pd)) => pd,
        Some(Err(e)) => return fail_null(errno_of(&e)),
        None => return fail_null(ENODEV),
    };
    drop(g);
    static HANDLES: AtomicUsize = AtomicUsize::new(1);
    let obj = Obj::new(
        ibv_pd {
            context: c,
            handle: HANDLES.fetch_add(1, Ordering::Relaxed) as u32,
        },
        Pd {
            pd,
            ctx,
            parent: None,
        },
    );
    handle::publish(&obj)
}

/// `ibv_dealloc_pd`: 0 or an errno value (EBUSY while MRs, MWs, QPs, SRQs or AHs use it, or a call
/// on another thread does).
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    match handle::remove::<Pd>(p) {
        Ok(pd) => {
            drop(pd);
            0
        }
        Err(e) => fail(e),
    }
}
