//! What a child made by fork inherits of its parent's devices, and what it must not keep.
//!
//! The child has the parent's descriptors but none of its threads: no engine serves the
//! parent's devices there. Two things follow. A device context opened before the fork is
//! closed in the child (its calls fail with `DeviceClosed`, as an rxe context's would once
//! its QPs are the parent's), and closing it there touches nothing the parent uses. And the
//! child must not hold the parent's receiving sockets: a shared device's group steers
//! datagrams to a socket, not a process, so a child that outlived its parent while holding
//! the socket would keep its index in the group and swallow the datagrams sent to it. The
//! handler below, registered with `pthread_atfork`, points each such descriptor at /dev/null
//! in the child (dup2: the descriptor number stays valid for whoever closes it later, and the
//! socket loses the child's reference), with nothing but async-signal-safe calls and no lock.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Once;

/// Descriptors the child must not keep; -1 marks a free entry.
static FDS: [AtomicI32; 256] = [const { AtomicI32::new(-1) }; 256];
/// Bumped in every child: a device made in an earlier epoch belongs to an ancestor.
static EPOCH: AtomicU32 = AtomicU32::new(0);
static HANDLER: Once = Once::new();

/// The current epoch (see [`is_inherited`]).
pub fn epoch() -> u32 {
    EPOCH.load(Ordering::Relaxed)
}

/// A device made in `epoch` was made by an ancestor of this process, before a fork.
pub fn is_inherited(epoch: u32) -> bool {
    EPOCH.load(Ordering::Relaxed) != epoch
}

/// Registers `fd` to be pointed at /dev/null in children; registers the fork handler on
/// first use. A full table leaves `fd` as it is (the child then holds the socket until it
/// exits or closes the context).
pub fn register(fd: i32) {
    HANDLER.call_once(|| {
        // SAFETY: registers a handler defined here, which only calls async-signal-safe
        // functions; a failed registration leaves children holding sockets, nothing worse.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    for e in FDS.iter() {
        if e.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Forgets `fd` (before it is closed).
pub fn unregister(fd: i32) {
    for e in FDS.iter() {
        if e.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

extern "C" fn in_child() {
    EPOCH.fetch_add(1, Ordering::Relaxed);
    // SAFETY: open, dup2 and close are async-signal-safe; the path is a NUL-terminated
    // literal.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        return;
    }
    for e in FDS.iter() {
        let fd = e.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: replaces a descriptor of this process with /dev/null; the number stays
            // open, so whoever owns it closes /dev/null later.
            unsafe { libc::dup2(null, fd) };
        }
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(null) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_and_unregister_take_and_free_an_entry() {
        let fd = 1_000_007;
        register(fd);
        assert!(FDS.iter().any(|e| e.load(Ordering::Relaxed) == fd));
        unregister(fd);
        assert!(!FDS.iter().any(|e| e.load(Ordering::Relaxed) == fd));
        assert!(!is_inherited(epoch()));
    }
}
