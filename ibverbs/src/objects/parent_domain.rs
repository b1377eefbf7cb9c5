//! Thread domains and parent domains: `ibv_alloc_td`, `ibv_dealloc_td` and
//! `ibv_alloc_parent_domain` (ops of `verbs_context`, which verbs.h's inlines call). A parent
//! domain is a PD (`ibv_dealloc_pd` frees it) that stands for its protection domain everywhere
//! a PD goes, and holds it and its thread domain while it lives (spec-notes/beyond-rxe.md
//! rules 9 and 10).

use std::sync::Arc;

use libc::{c_int, EINVAL};

use super::common::fail_null;
use super::ctx::ctx_of;
use super::handle::{self, Obj};
use super::pd::{pd_of, Parent, Pd};
use super::td::Td;
use crate::ffi::*;

/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`.
const PARENT_DOMAIN_MASK_KNOWN: u32 = 0b11;
/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`.
const PARENT_DOMAIN_ALLOCATORS: u32 = 1;

/// The `alloc_td` op's C type.
pub(crate) type AllocTdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
/// The `dealloc_td` op's C type.
pub(crate) type DeallocTdFn = unsafe extern "C" fn(*mut ibv_td) -> c_int;
/// The `alloc_parent_domain` op's C type.
pub(crate) type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;

/// `verbs_context.alloc_td`: NULL and errno EINVAL for a bad context, a NULL attribute or a
/// `comp_mask` (none is defined), as mlx5.
pub(crate) unsafe extern "C" fn op_alloc_td(
    c: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    // SAFETY: a non-null attribute is the caller's readable struct.
    if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
        return fail_null(EINVAL);
    }
    handle::publish(&Obj::new(ibv_td { context: c }, Td { _ctx: ctx }))
}

/// `verbs_context.dealloc_td`: 0 or an errno value (EINVAL for a handle that is not a live
/// thread domain, EBUSY while a parent domain holds it).
pub(crate) unsafe extern "C" fn op_dealloc_td(td: *mut ibv_td) -> c_int {
    match handle::remove::<Td>(td) {
        Ok(obj) => {
            drop(obj);
            0
        }
        Err(e) => e,
    }
}

/// `verbs_context.alloc_parent_domain`: a PD that stands for `attr.pd`; NULL and errno EINVAL
/// for a bad context, a NULL attribute, a `pd` that is not a PD of the context (a parent
/// domain is not), a `td` that is not a thread domain of it, an unknown `comp_mask` bit, or
/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS` without both functions.
pub(crate) unsafe extern "C" fn op_alloc_parent_domain(
    c: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    if attr.is_null() {
        return fail_null(EINVAL);
    }
    // SAFETY: non-null; the caller's readable attribute (read field by field, not kept).
    let a = unsafe { &*attr };
    let Some(pd) = pd_of(a.pd).filter(|p| Arc::ptr_eq(&p.ctx, &ctx) && p.parent.is_none()) else {
        return fail_null(EINVAL);
    };
    let td = if a.td.is_null() {
        None
    } else {
        match handle::get::<Td>(a.td).filter(|t| Arc::ptr_eq(&t._ctx, &ctx)) {
            Some(t) => Some(t),
            None => return fail_null(EINVAL),
        }
    };
    let allocators = a.comp_mask & PARENT_DOMAIN_ALLOCATORS != 0;
    if a.comp_mask & !PARENT_DOMAIN_MASK_KNOWN != 0
        || (allocators && (a.alloc.is_none() || a.free.is_none()))
    {
        return fail_null(EINVAL);
    }
    let (alloc, free) = if allocators {
        (a.alloc, a.free)
    } else {
        (None, None)
    };
    let handle = Obj::handle(&pd);
    // SAFETY: the live PD's C struct; its handle field is written only at creation.
    let pd_handle = unsafe { (*handle).handle };
    let obj = Obj::new(
        ibv_pd {
            context: c,
            handle: pd_handle,
        },
        Pd {
            pd: pd.pd.parent_domain(),
            ctx,
            parent: Some(Parent {
                _pd: Arc::clone(&pd),
                _td: td,
                _alloc: alloc,
                _free: free,
                _pd_context: a.pd_context,
            }),
        },
    );
    handle::publish(&obj)
}
