//! Starting softroce's background threads (engine, stat server, rdma_cm dispatcher) so that
//! they have finished starting up before the call that needed them returns.
//!
//! Why: a shim's threads live in someone else's process, and some hosts rewrite libc's code
//! while they believe nothing else runs. libfabric's memory monitor (memhooks) patches the
//! first bytes of `mmap`, `munmap`, `madvise`, ... in place when a domain opens, right after
//! the verbs provider created the PD that started softroce's engine. A thread's first `malloc`
//! or `free` creates its malloc arena, which calls `mmap` and `munmap`: a thread still
//! starting up then executes `munmap` while it is half rewritten and dies with SIGSEGV
//! (SEGV_ACCERR at `munmap+6`, seen in a core of `fi_pingpong -e dgram`). libibverbs itself
//! starts no thread, so the host is right to expect none; softroce makes sure each of its
//! threads has made its arena (and done its own start-up allocations) before the call that
//! started it returns, so that later only an idle thread exists during such patching.

use std::io;
use std::sync::{Arc, Barrier};
use std::thread::{Builder, JoinHandle};

/// Spawns `f` on a thread named `name` and returns once that thread is running and has
/// allocated from its own malloc arena.
pub fn spawn_settled<F, T>(name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let started = Arc::new(Barrier::new(2));
    let s = Arc::clone(&started);
    let handle = Builder::new().name(name).spawn(move || {
        // The first allocation on this thread creates (or attaches) its malloc arena.
        let warm = std::hint::black_box(Box::new([0u8; 64]));
        drop(warm);
        s.wait();
        drop(s);
        f()
    })?;
    started.wait();
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn returns_once_the_thread_runs_and_joins_with_its_result() {
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        let h = spawn_settled("softroce-test".into(), move || {
            r.store(true, Ordering::SeqCst);
            7
        })
        .unwrap();
        assert_eq!(h.thread().name(), Some("softroce-test"));
        assert_eq!(h.join().unwrap(), 7);
        assert!(ran.load(Ordering::SeqCst));
    }
}
