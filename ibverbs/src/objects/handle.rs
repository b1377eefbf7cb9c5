//! The one handle type behind every C object (context, PD, MR, CQ, channel, QP, SRQ, AH), and
//! the registry that makes a handle from C safe to use from any thread.
//!
//! # Allocation and provenance
//!
//! An object is an [`Obj<T>`]: `#[repr(C)]`, the C struct first, in an `Arc`. The pointer
//! handed to C is made from [`Arc::as_ptr`] by raw-pointer casts and field projections only
//! ([`Obj::handle`]), so it carries the provenance of the whole allocation: casting it back to
//! `*const Obj<T>` (the data path does) reaches every field. No handle is ever derived from a
//! reference.
//!
//! # Fields C may change
//!
//! The C struct is inside an [`UnsafeCell`]: C code reads it, and may write fields of it that
//! belong to the application (`cq_context`, `qp_context`), at any time, so Rust never holds a
//! reference into it. The shim reads and writes it through [`Obj::c`] (a raw pointer). The
//! fields the shim changes after creation are written under the struct's own mutex, where
//! rdma-core takes it (`ibv_cq.comp_events_completed`, `ibv_comp_channel.refcnt` under the
//! context's), or under the struct's mutex although rdma-core writes them with no lock
//! (`ibv_qp.state`: so that two shim writers never race).
//!
//! # Check and reference under one lock
//!
//! The registry maps each live handle's address to the object's `Arc`. A control call turns a
//! handle into an object with [`get`], which looks it up and clones the `Arc` under the
//! registry lock: once found, the object cannot be freed until the call returns, whatever
//! other threads do. An object made from others (an MR of a PD, a QP of CQs) keeps their
//! `Arc`s for its life. So "in use" is exactly "someone besides the registry holds an `Arc`",
//! and [`remove`] unpublishes a handle, under the same lock, only when the registry's `Arc` is
//! the only one: otherwise EBUSY, as the kernel answers a destroy while the object has users
//! or a call in progress. [`remove_if`] adds a check of the destroy's own under that lock
//! (a QP attached to a multicast group), so that no call can change its answer in between.
//!
//! # Retiring: a destroy that waits for the application
//!
//! rdma-core's `ibv_destroy_cq` destroys the kernel object and then waits until the
//! application has acknowledged every completion event it got for the CQ. [`retire`] is the
//! first half: the same checks as [`remove`], after which the handle is destroyed for every
//! call ([`get`] and [`remove`] no longer see it) but the object stays in the registry, where
//! [`Locked::find`] still reaches it: the acknowledgement that the destroy waits for goes
//! through there. [`Retiring::finish`] unpublishes it; [`Retiring::restore`] makes it live
//! again (a 1.0 object whose current object refused to go).
//!
//! # After `remove`, the returned reference is the last
//!
//! [`get`] is the only way from a handle to a new strong reference, and it finds only live
//! objects; [`remove`] succeeds only while the registry's `Arc` is the only one. The event
//! path, which starts from a completion channel's queue of `Weak`s, never upgrades one: it
//! looks the CQ up with [`Locked::find_live`] and reads what it needs under the registry lock.
//! So the `Arc` that [`remove`] or [`Retiring::finish`] returns is the last, and dropping it
//! frees the object there, on the destroying thread. Objects closed with [`remove_in_use`] (a
//! context, rdmacm's identifiers and channels) are another matter: their users keep them
//! (rdmacm's per-device table upgrades its `Weak`s of identifiers, and their queued events
//! hold them), and the last of those frees them.
//!
//! # Lock order
//!
//! The registry lock comes first: a C struct's mutex (a CQ's) may be taken while it is held
//! ([`Locked`]), and nothing takes the registry lock while holding a C struct's mutex.
//!
//! The data-path calls (post, poll, notify) do not look their handle up: they trust it, as
//! rdma-core's providers do (no lock per work request). Destroying an object while another
//! thread posts to it is the application's bug there as here.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ops::Deref;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use libc::{c_int, EBUSY, EINVAL};

/// A Rust object behind a C handle.
pub(crate) trait Object: Send + Sync + Sized + 'static {
    /// The C struct at the start of the allocation.
    type C;
    /// What C holds a pointer to: the C struct itself, or (a context's `ibv_context`) a field
    /// of it.
    type Handle;

    /// The handle inside the C struct at `c`.
    ///
    /// # Safety
    ///
    /// `c` points into a live allocation holding a `Self::C`.
    unsafe fn handle_in(c: *mut Self::C) -> *mut Self::Handle {
        c.cast()
    }
}

/// A C struct and the Rust state behind it, in one allocation (see the module doc).
#[repr(C)]
pub(crate) struct Obj<T: Object> {
    /// First, so that a pointer to the object is a pointer to the C struct.
    c: UnsafeCell<T::C>,
    rust: T,
}

// SAFETY: `T` is Send + Sync. What else an Obj holds is the C struct, which is not Send or Sync
// only because it holds raw pointers (to other objects and to application data) and may be
// written by C: the shim never dereferences those pointers through it, and it reads or writes
// the struct only through raw pointers, with its post-creation writes under the struct's mutex
// (module doc). Concurrent writes by C to application-owned fields while another thread calls
// the library are the application's race, as they are with rdma-core.
unsafe impl<T: Object> Send for Obj<T> {}
// SAFETY: as for Send: shared access to the C struct is raw and synchronised as described.
unsafe impl<T: Object> Sync for Obj<T> {}

impl<T: Object> Deref for Obj<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.rust
    }
}

impl<T: Object> Obj<T> {
    /// A new object, not yet published to C.
    pub(crate) fn new(c: T::C, rust: T) -> Arc<Obj<T>> {
        Arc::new(Obj {
            c: UnsafeCell::new(c),
            rust,
        })
    }

    /// The C struct, for raw reads and writes (never turned into a reference: C may change
    /// it at any time).
    pub(crate) fn c(&self) -> *mut T::C {
        self.c.get()
    }

    /// The handle C holds, with the provenance of the whole allocation.
    pub(crate) fn handle(this: &Arc<Self>) -> *mut T::Handle {
        let obj = Arc::as_ptr(this) as *mut Obj<T>;
        // SAFETY: `obj` points to the live allocation `this` keeps; the projections are raw
        // (`addr_of_mut!` creates no reference), and `UnsafeCell<C>` has the layout of `C`.
        unsafe { T::handle_in(UnsafeCell::raw_get(ptr::addr_of_mut!((*obj).c))) }
    }

    /// The object behind a handle the data path was given, without a registry lookup (the
    /// crate doc's trust rule).
    ///
    /// # Safety
    ///
    /// `h` must be a handle of a live `Obj<T>` (from [`Obj::handle`], and its object not
    /// destroyed), and the object must outlive the returned reference. `T::handle_in` must be
    /// the identity, as for every object type but the context.
    pub(crate) unsafe fn trusted<'a>(h: *mut T::Handle) -> &'a Obj<T> {
        // SAFETY: by the caller's promise `h` is `Arc::as_ptr` of a live `Obj<T>` cast to its
        // first field (offset 0, `repr(C)`), so it carries the whole object's provenance and
        // the object is alive; its C struct is in an UnsafeCell, so a shared reference to the
        // object does not conflict with C's writes to it.
        unsafe { &*(h as *const Obj<T>) }
    }
}

/// A published object.
struct Entry {
    obj: Arc<dyn Any + Send + Sync>,
    /// Destroyed as far as C is concerned, its destroy not finished (see [`retire`]).
    retiring: bool,
}

type Registry = HashMap<usize, Entry>;

fn registry() -> MutexGuard<'static, Registry> {
    static LIVE: OnceLock<Mutex<Registry>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Publishes `obj` and returns the handle to give C.
pub(crate) fn publish<T: Object>(obj: &Arc<Obj<T>>) -> *mut T::Handle {
    let h = Obj::handle(obj);
    let entry = Entry {
        obj: obj.clone(),
        retiring: false,
    };
    registry().insert(h as usize, entry);
    h
}

/// The live object of type `T` behind `h`, referenced under the registry lock: it stays
/// allocated until the returned `Arc` is dropped. None for null, unknown, destroyed (retiring
/// included) or other-typed handles.
pub(crate) fn get<T: Object>(h: *mut T::Handle) -> Option<Arc<Obj<T>>> {
    if h.is_null() {
        return None;
    }
    let entry = registry()
        .get(&(h as usize))
        .filter(|e| !e.retiring)?
        .obj
        .clone();
    entry.downcast::<Obj<T>>().ok()
}

/// The checks of a destroy, under the registry lock: EINVAL unless `h` is a live `T`, EBUSY
/// while anything but the registry holds it, then `check`'s answer.
fn destroy_checks<T: Object>(
    reg: &Locked,
    h: *mut T::Handle,
    check: impl FnOnce(&Locked, &Obj<T>) -> Result<(), c_int>,
) -> Result<(), c_int> {
    if h.is_null() {
        return Err(EINVAL);
    }
    let entry = reg
        .0
        .get(&(h as usize))
        .filter(|e| !e.retiring)
        .ok_or(EINVAL)?;
    let obj = entry.obj.downcast_ref::<Obj<T>>().ok_or(EINVAL)?;
    if Arc::strong_count(&entry.obj) != 1 {
        return Err(EBUSY);
    }
    check(reg, obj)
}

/// Unpublishes `h` if nothing but the registry holds its object, and returns the object (the
/// last reference: dropping it frees it). EINVAL for a handle that is not a live `T`, EBUSY
/// while other objects or calls in progress use it.
pub(crate) fn remove<T: Object>(h: *mut T::Handle) -> Result<Arc<Obj<T>>, c_int> {
    remove_if::<T>(h, |_, _| Ok(()))
}

/// As [`remove`], after `check` has also passed, under the same lock: nothing uses the object
/// meanwhile (so no call can change what `check` reads through the shim) and nothing can
/// reach it afterwards. `check` runs under the registry lock, which it is given to look other
/// objects up with: it must be short, and take no lock that is held around a registry lookup.
pub(crate) fn remove_if<T: Object>(
    h: *mut T::Handle,
    check: impl FnOnce(&Locked, &Obj<T>) -> Result<(), c_int>,
) -> Result<Arc<Obj<T>>, c_int> {
    let mut reg = lock();
    destroy_checks::<T>(&reg, h, check)?;
    let entry = reg.0.remove(&(h as usize)).ok_or(EINVAL)?;
    drop(reg);
    entry.obj.downcast::<Obj<T>>().map_err(|_| EINVAL)
}

/// An object whose destroy has begun: destroyed for every call, still reachable through
/// [`Locked::find`] until [`Retiring::finish`] (or dropping this) unpublishes it.
pub(crate) struct Retiring<T: Object> {
    h: usize,
    obj: Arc<Obj<T>>,
    /// Made live again: dropping leaves the registry alone.
    restored: bool,
}

/// Begins the destroy of `h` (see the module doc): the checks of [`remove_if`], under the
/// registry lock, after which no call finds the object with [`get`], and [`Locked::find`]
/// alone reaches it. EINVAL for a handle that is not a live `T`, EBUSY while it is in use,
/// or `check`'s error.
pub(crate) fn retire<T: Object>(
    h: *mut T::Handle,
    check: impl FnOnce(&Locked, &Obj<T>) -> Result<(), c_int>,
) -> Result<Retiring<T>, c_int> {
    let mut reg = lock();
    destroy_checks::<T>(&reg, h, check)?;
    let entry = reg.0.get_mut(&(h as usize)).ok_or(EINVAL)?;
    let obj = entry.obj.clone().downcast::<Obj<T>>().map_err(|_| EINVAL)?;
    entry.retiring = true;
    Ok(Retiring {
        h: h as usize,
        obj,
        restored: false,
    })
}

impl<T: Object> Deref for Retiring<T> {
    type Target = Obj<T>;
    fn deref(&self) -> &Obj<T> {
        &self.obj
    }
}

impl<T: Object> Retiring<T> {
    /// Unpublishes the object and returns it: the last reference, as [`remove`]'s (nothing
    /// took one since [`retire`], [`get`] not seeing it).
    pub(crate) fn finish(self) -> Arc<Obj<T>> {
        let obj = Arc::clone(&self.obj);
        drop(self); // unpublishes it, and drops its own reference
        obj
    }

    /// Makes the object live again under the same handle (its destroy failed).
    pub(crate) fn restore(mut self) {
        if let Some(e) = registry().get_mut(&self.h) {
            e.retiring = false;
        }
        self.restored = true;
    }
}

impl<T: Object> Drop for Retiring<T> {
    fn drop(&mut self) {
        if !self.restored {
            let entry = registry().remove(&self.h);
            // Not the last reference (`self.obj` is one): nothing is freed under the lock.
            drop(entry);
        }
    }
}

/// Unpublishes `h` whoever uses it (closing a context that still has objects); None if it is
/// not a live `T`.
pub(crate) fn remove_in_use<T: Object>(h: *mut T::Handle) -> Option<Arc<Obj<T>>> {
    if h.is_null() {
        return None;
    }
    let mut reg = registry();
    let e = reg.get(&(h as usize)).filter(|e| !e.retiring)?;
    if !e.obj.is::<Obj<T>>() {
        return None;
    }
    reg.remove(&(h as usize))?.obj.downcast::<Obj<T>>().ok()
}

/// The registry, locked: objects found through it stay allocated while it is held, without a
/// reference being taken (so a destroy in progress is not made to fail with EBUSY, and one
/// that waits for such a call, [`retire`], can still be reached). Every control call of every
/// thread waits while it is held: keep it for a few field accesses. An object's C mutex may
/// be taken under it (the module doc's lock order).
pub(crate) struct Locked(MutexGuard<'static, Registry>);

/// Locks the registry (see [`Locked`]).
pub(crate) fn lock() -> Locked {
    Locked(registry())
}

impl Locked {
    /// The live or retiring object of type `T` behind `h`; None for null, unknown, destroyed
    /// or other-typed handles.
    pub(crate) fn find<T: Object>(&self, h: *mut T::Handle) -> Option<&Obj<T>> {
        if h.is_null() {
            return None;
        }
        self.0.get(&(h as usize))?.obj.downcast_ref::<Obj<T>>()
    }

    /// The live (published, not retiring) object behind `h`, if it is the one `w` points to.
    /// A `Weak` taken when an event was queued pins its object's allocation, so that the
    /// handle cannot meanwhile have become another object's (at the same address).
    pub(crate) fn find_live<T: Object>(
        &self,
        h: *mut T::Handle,
        w: &Weak<Obj<T>>,
    ) -> Option<&Obj<T>> {
        let e = self.0.get(&(h as usize)).filter(|e| !e.retiring)?;
        let obj = e.obj.downcast_ref::<Obj<T>>()?;
        ptr::eq(obj, w.as_ptr()).then_some(obj)
    }
}

/// How many handles are live.
#[cfg(test)]
pub(crate) fn live_count() -> usize {
    registry().len()
}

/// Locks a C struct's `pthread_mutex_t` for the life of the guard.
pub(crate) struct CMutexGuard(*mut libc::pthread_mutex_t);

impl CMutexGuard {
    /// Locks `m`.
    ///
    /// # Safety
    ///
    /// `m` is an initialised mutex inside a live object that outlives the guard.
    pub(crate) unsafe fn lock(m: *mut libc::pthread_mutex_t) -> CMutexGuard {
        // SAFETY: by the caller's promise. A default (non-robust, non-error-checking) mutex
        // fails only for a deadlock on itself, which the shim's short critical sections, taking
        // no other lock, cannot cause.
        unsafe { libc::pthread_mutex_lock(m) };
        CMutexGuard(m)
    }
}

impl Drop for CMutexGuard {
    fn drop(&mut self) {
        // SAFETY: locked by this thread in `lock`, and live (the caller's promise there).
        unsafe { libc::pthread_mutex_unlock(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Thing(u32);
    impl Object for Thing {
        type C = [u64; 2];
        type Handle = [u64; 2];
    }
    struct Other;
    impl Object for Other {
        type C = u64;
        type Handle = u64;
    }

    /// One test at a time on the process's one registry (one counts its entries).
    fn serial() -> MutexGuard<'static, ()> {
        static ONE: Mutex<()> = Mutex::new(());
        ONE.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn a_destroy_waits_for_every_other_reference() {
        let _one = serial();
        let before = live_count();
        let o = Obj::new([7, 8], Thing(5));
        let h = publish(&o);
        assert_eq!(live_count(), before + 1);
        assert!(get::<Other>(h.cast()).is_none(), "another type's handle");
        let user = get::<Thing>(h).unwrap();
        assert_eq!(user.0, 5);
        // SAFETY: `h` is the handle of the live `o`.
        assert_eq!(unsafe { (*h)[1] }, 8);
        drop(o);
        assert_eq!(remove::<Thing>(h).err(), Some(EBUSY), "a call holds it");
        assert!(remove::<Other>(h.cast()).is_err());
        drop(user);
        let last = remove::<Thing>(h).unwrap();
        assert_eq!(Arc::strong_count(&last), 1);
        assert!(get::<Thing>(h).is_none());
        assert_eq!(remove::<Thing>(h).err(), Some(EINVAL), "a double destroy");
        assert_eq!(live_count(), before);
    }

    #[test]
    fn a_retiring_object_is_reached_only_through_the_lock_and_freed_by_finish() {
        let _one = serial();
        let o = Obj::new([1, 2], Thing(9));
        let h = publish(&o);
        let w = Arc::downgrade(&o);
        assert_eq!(
            retire::<Thing>(h, |_, _| Ok(())).err(),
            Some(EBUSY),
            "`o` holds it"
        );
        drop(o);
        assert_eq!(
            retire::<Thing>(h, |_, _| Err(libc::EAGAIN)).err(),
            Some(libc::EAGAIN),
            "the check's answer"
        );
        assert!(get::<Thing>(h).is_some(), "a failed check leaves it live");
        let r = retire::<Thing>(h, |_, t| {
            assert_eq!(t.0, 9);
            Ok(())
        })
        .unwrap();
        assert!(get::<Thing>(h).is_none(), "no new reference once retiring");
        assert_eq!(remove::<Thing>(h).err(), Some(EINVAL), "destroyed for C");
        assert!(
            retire::<Thing>(h, |_, _| Ok(())).is_err(),
            "a second destroy"
        );
        assert!(remove_in_use::<Thing>(h).is_none());
        {
            let reg = lock();
            assert_eq!(
                reg.find::<Thing>(h).map(|t| t.0),
                Some(9),
                "an ack reaches it"
            );
            assert!(reg.find::<Other>(h.cast()).is_none());
            assert!(
                reg.find_live::<Thing>(h, &w).is_none(),
                "no new event for it"
            );
        }
        let last = r.finish();
        assert_eq!(Arc::strong_count(&last), 1, "the last reference");
        assert!(lock().find::<Thing>(h).is_none());
        drop(last);
        assert!(w.upgrade().is_none(), "freed with the last reference");
    }

    #[test]
    fn a_restored_object_is_live_again_and_find_live_wants_the_same_allocation() {
        let _one = serial();
        let o = Obj::new([3, 4], Thing(1));
        let h = publish(&o);
        let w = Arc::downgrade(&o);
        drop(o);
        assert!(lock().find_live::<Thing>(h, &w).is_some());
        let stranger = Arc::downgrade(&Obj::new([0, 0], Thing(2)));
        assert!(
            lock().find_live::<Thing>(h, &stranger).is_none(),
            "another allocation"
        );
        let r = retire::<Thing>(h, |_, _| Ok(())).unwrap();
        r.restore();
        assert!(lock().find_live::<Thing>(h, &w).is_some());
        assert_eq!(get::<Thing>(h).map(|t| t.0), Some(1));
        let last = remove_if::<Thing>(h, |reg, t| {
            // The check runs under the registry lock, with the object unused.
            assert!(reg.find::<Thing>(h).is_some_and(|x| ptr::eq(x, t)));
            Ok(())
        })
        .unwrap();
        assert_eq!(Arc::strong_count(&last), 1);
        assert!(lock().find_live::<Thing>(h, &w).is_none(), "removed");
    }
}
