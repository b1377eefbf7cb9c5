//! The open device object behind an `ibv_context`: [`Ctx`], the handle's way back to it
//! ([`ctx_of`]), and the softroce engine a context opens on first need. Every object file takes
//! its context from here; the ops table that points into those files is built above them, in
//! `context`.

use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use libc::{c_int, EINVAL};
use softroce::driver::DeviceConfig;
use softroce::verbs::Context;

use super::common::{errno_of, fix_address, unfix_address, Config};
use super::handle::{self, Obj, Object};
use crate::ffi::*;

/// An open device. Its C struct is the `verbs_context` (holding `ibv_context` last), and C's
/// handle is that `ibv_context`: libibverbs' inline functions find the extended ops in memory
/// just before it.
pub(super) struct Ctx {
    /// Which device it is of (`softroceN`).
    pub(super) dev: usize,
    pub(super) cfg: Config,
    /// The softroce device context, opened when the first PD or CQ is created, and shared by
    /// every open context of the device in the process (one address, one socket, as one NIC;
    /// each device has its own).
    pub(super) inner: Mutex<Option<Arc<Context>>>,
    /// The `async_fd` of the C struct, closed when the last object referring to the context
    /// is gone.
    pub(super) async_fd: c_int,
    /// The `cmd_fd` of the C struct (see `CMD_DEVICE`), closed with `async_fd`; -1 if it
    /// could not be opened.
    pub(super) cmd_fd: c_int,
}

/// What a context's `cmd_fd` is open on. rdma-core's is the device's uverbs character device,
/// which programs only dup and hand to `ibv_import_device` (pyverbs' shared-PD test); softroce0
/// has no kernel device, so its command fd is this character device that takes no command,
/// whose device number `ibv_import_device` recognises as softroce0's.
pub(crate) const CMD_DEVICE: &std::ffi::CStr = c"/dev/zero";

impl Object for Ctx {
    type C = verbs_context;
    type Handle = ibv_context;

    unsafe fn handle_in(c: *mut verbs_context) -> *mut ibv_context {
        // SAFETY: the caller's `c` points to a live verbs_context; a raw projection.
        unsafe { ptr::addr_of_mut!((*c).context) }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the fds were opened by ibv_open_device for this context and are closed only
        // here.
        unsafe {
            libc::close(self.async_fd);
            if self.cmd_fd >= 0 {
                libc::close(self.cmd_fd);
            }
        }
    }
}

/// Whether `c` is a live context of the shim.
pub(crate) fn is_context(c: *mut ibv_context) -> bool {
    ctx_of(c).is_some()
}

/// The live context behind `c`, referenced (see [`handle::get`]).
pub(super) fn ctx_of(c: *mut ibv_context) -> Option<Arc<Obj<Ctx>>> {
    handle::get::<Ctx>(c)
}

impl Obj<Ctx> {
    /// The softroce context, opened now if needed.
    pub(super) fn open(&self) -> Result<MutexGuard<'_, Option<Arc<Context>>>, c_int> {
        // Each device's engine and the process that started it: a child after fork inherits
        // the memory but not the engine's thread, so it starts its own.
        type Shared = Vec<(std::sync::Weak<Context>, u32)>;
        static SHARED: Mutex<Shared> = Mutex::new(Vec::new());
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            let mut all = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            if all.len() <= self.dev {
                all.resize(self.dev + 1, (std::sync::Weak::new(), 0));
            }
            let shared = &mut all[self.dev];
            let me = std::process::id();
            let ctx = match shared.0.upgrade().filter(|_| shared.1 == me) {
                Some(c) => c,
                None => {
                    let c = Arc::new(
                        Context::open(&DeviceConfig {
                            // ibv_open_device refused a context without a usable one.
                            cc: self.cfg.cc.ok_or(EINVAL)?,
                            busy_poll: self.cfg.busy_poll,
                            idle_spin: self.cfg.idle_spin,
                            ..DeviceConfig::new(fix_address(self.dev))
                        })
                        .map_err(|e| {
                            unfix_address(self.dev);
                            errno_of(&e)
                        })?,
                    );
                    *shared = (Arc::downgrade(&c), me);
                    c
                }
            };
            *g = Some(ctx);
        }
        Ok(g)
    }

    /// The `ibv_context` inside the C struct (raw: C may write its fields).
    pub(super) fn ibv(&self) -> *mut ibv_context {
        // SAFETY: `self.c()` points to this live object's verbs_context.
        unsafe { Ctx::handle_in(self.c()) }
    }

    /// The context's `async_fd`, open while the object lives.
    pub(super) fn async_fd(&self) -> c_int {
        self.async_fd
    }

    /// The context's `mutex`, which rdma-core takes around a completion channel's `refcnt`.
    pub(super) fn mutex(&self) -> *mut libc::pthread_mutex_t {
        // SAFETY: a raw projection into this live object's C struct.
        unsafe { ptr::addr_of_mut!((*self.ibv()).mutex) }
    }
}

/// Completion vectors a context offers (`ibv_context::num_comp_vectors`): one, as rxe.
pub(super) const NUM_COMP_VECTORS: c_int = 1;
