//! Accesses to the application's memory that fail instead of faulting.
//!
//! rxe pins a registered region's pages, so the kernel's accesses to them never fault, whatever
//! the application does to its mappings meanwhile. softroce cannot pin: when an application
//! unmaps (or `mprotect`s) memory that is still registered and a peer then writes into it, a
//! plain store from the engine would raise SIGSEGV and end the process. Every access the engine
//! makes to application memory goes through this module instead, and one that finds no page
//! (or no permission) returns [`Fault`]; the transport answers it as an on-demand-paging device
//! answers an access it cannot resolve: a remote access error NAK for a peer's request, a local
//! protection error for the application's own post (spec-notes/memory-placement.md rule 15).
//!
//! # How (x86_64)
//!
//! Each access is a small assembly routine whose one memory instruction (`rep movsb` for a
//! copy; `lock cmpxchg`, `lock xadd` and an 8-byte `mov` for the atomics) is labelled. A
//! SIGSEGV/SIGBUS handler, installed once for the process when the first region of application
//! memory is made ([`install`]), looks at the faulting instruction: if it is one of those
//! labels and the signal is a real fault (`si_code > 0`, not a `kill`), it makes the routine
//! return 1 to its caller (the routines touch no stack before the access, so the return
//! address is at the stack pointer), as the kernel's exception table makes `copy_to_user`
//! return the bytes it could not copy. Any other signal goes to the handler that was there
//! before, or to the default action, exactly as if this handler did not exist. An application
//! that installs its own SIGSEGV handler after registering memory without chaining to the
//! previous one takes this back: a fault in the engine then reaches its handler, as before this
//! module. The routines' symbols are weak and hidden: a test binary that links two copies of
//! the crate (the crate and its dev-dependency on itself) uses one definition of each.
//!
//! Cost: nothing measurable on the data path. The copy is the processor's string move, as fast
//! as the word loop it replaces for a packet's payload (4 KiB: 0.23-0.27 us either way on this
//! machine; 64 bytes: 7 ns more, for the string move's start), and the atomics are one
//! instruction each, as `AtomicU64`'s. Through the shim, `ib_write_bw -s 65536` gave a median
//! of 1,857 MiB/s against 1,853 before, and `-s 64` 0.90 against 0.80 Mpps, within this shared
//! machine's noise (spec-notes/memory-placement.md rule 15 has the runs). A system call per
//! access instead (below) costs 1.3 us for 64 bytes and 1.8 us for 4 KiB: about a packet's
//! whole budget at 4 GB/s.
//!
//! # Elsewhere, or without the handler
//!
//! Each access is a system call that reports EFAULT instead of faulting: `process_vm_readv` /
//! `process_vm_writev` on the process itself, and the RDMA atomics a read and a write of the
//! word under one process-wide lock, atomic with respect to every other RDMA atomic as rxe's
//! `atomic_ops_lock` makes its own (the device reports `IBV_ATOMIC_HCA`). About 1.3 us per
//! access on this machine (1.8 us for 4 KiB, where the string move takes 0.2 us): correct, and
//! used only where the handler cannot be installed.
//!
//! # Memory model
//!
//! The routines are outside Rust's abstract machine, as the kernel's copies are (rule 4 of
//! [`crate::memory`]): each atomic is a single aligned 8-byte locked or plain `mov` instruction,
//! which the processor performs atomically (what `AtomicU64`'s operations compile to), and the
//! copy's stores and loads are byte-sized, a byte-wise atomic copy, so an engine thread never
//! tears another's access below a byte and never touches a byte outside the range it was given
//! (no read-modify-write of the neighbours, unlike a word loop at the edges).

/// The application's memory was not there (unmapped, or without the permission the access
/// needs) when the engine reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault;

/// Installs the fault handler once for the process (x86_64; elsewhere a no-op: the system-call
/// accesses need none). Called before the first region of application memory is used.
pub fn install() {
    #[cfg(target_arch = "x86_64")]
    x86::install();
}

/// Whether accesses use the processor's instructions under the fault handler (true once
/// [`install`] succeeded on x86_64), rather than system calls.
pub fn fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::installed()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Copies `src` into the application's memory at `dst`.
///
/// # Safety
///
/// `dst .. dst + src.len()` is application memory the engine may write (a registered region,
/// not revoked): it may be unmapped or protected by now (then [`Fault`]), but it is not memory
/// that Rust code of this process owns.
pub unsafe fn copy_in(dst: *mut u8, src: &[u8]) -> Result<(), Fault> {
    if src.is_empty() {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if x86::installed() {
        // SAFETY: the caller's contract; the routine writes exactly src.len() bytes at dst
        // and reads src, a live slice, returning 1 instead of faulting on dst.
        return ok(unsafe { x86::softroce_guarded_copy(dst, src.as_ptr(), 0, src.len()) });
    }
    // SAFETY: the caller's contract (the kernel checks dst and reports EFAULT).
    unsafe { syscall::copy(dst, src.as_ptr(), src.len(), true) }
}

/// Copies the application's memory at `src` into `dst`.
///
/// # Safety
///
/// As [`copy_in`], for reading `src .. src + dst.len()`.
pub unsafe fn copy_out(src: *const u8, dst: &mut [u8]) -> Result<(), Fault> {
    if dst.is_empty() {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if x86::installed() {
        // SAFETY: the caller's contract; the routine reads exactly dst.len() bytes at src and
        // writes dst, a live exclusive slice, returning 1 instead of faulting on src.
        return ok(unsafe { x86::softroce_guarded_copy(dst.as_mut_ptr(), src, 0, dst.len()) });
    }
    // SAFETY: the caller's contract.
    unsafe { syscall::copy(dst.as_mut_ptr(), src, dst.len(), false) }
}

/// IBTA CmpSwap on the application's 8-byte-aligned word at `p`: the original value.
///
/// # Safety
///
/// As [`copy_in`] for the 8 bytes at `p`, which is 8-byte aligned.
pub unsafe fn compare_swap(p: *mut u64, compare: u64, swap: u64) -> Result<u64, Fault> {
    let mut out = 0u64;
    #[cfg(target_arch = "x86_64")]
    if x86::installed() {
        // SAFETY: the caller's contract; `out` is a live local the routine stores to.
        let r = unsafe { x86::softroce_guarded_cas(p, compare, swap, &mut out) };
        return ok(r).map(|()| out);
    }
    // SAFETY: the caller's contract.
    unsafe { syscall::atomic(p, |v| if v == compare { swap } else { v }) }
}

/// IBTA FetchAdd (wrapping) on the application's aligned word at `p`: the original value.
///
/// # Safety
///
/// As [`compare_swap`].
pub unsafe fn fetch_add(p: *mut u64, add: u64) -> Result<u64, Fault> {
    let mut out = 0u64;
    #[cfg(target_arch = "x86_64")]
    if x86::installed() {
        // SAFETY: the caller's contract; `out` is a live local the routine stores to.
        let r = unsafe { x86::softroce_guarded_xadd(p, add, &mut out) };
        return ok(r).map(|()| out);
    }
    // SAFETY: the caller's contract.
    unsafe { syscall::atomic(p, |v| v.wrapping_add(add)) }
}

/// Loads the application's aligned word at `p` (acquire: x86's plain load).
///
/// # Safety
///
/// As [`compare_swap`], for reading.
pub unsafe fn load(p: *const u64) -> Result<u64, Fault> {
    let mut out = 0u64;
    #[cfg(target_arch = "x86_64")]
    if x86::installed() {
        // SAFETY: the caller's contract; `out` is a live local the routine stores to.
        let r = unsafe { x86::softroce_guarded_load(p, &mut out) };
        return ok(r).map(|()| out);
    }
    let mut b = [0u8; 8];
    // SAFETY: the caller's contract.
    unsafe { syscall::copy(b.as_mut_ptr(), p.cast(), 8, false)? };
    Ok(u64::from_ne_bytes(b))
}

/// Stores `value` in the application's aligned word at `p` (release: x86's plain store; IBTA
/// ATOMIC WRITE).
///
/// # Safety
///
/// As [`compare_swap`].
pub unsafe fn store(p: *mut u64, value: u64) -> Result<(), Fault> {
    #[cfg(target_arch = "x86_64")]
    if x86::installed() {
        // SAFETY: the caller's contract.
        return ok(unsafe { x86::softroce_guarded_store(p, value) });
    }
    let _g = syscall::lock();
    let b = value.to_ne_bytes();
    // SAFETY: the caller's contract.
    unsafe { syscall::copy(p.cast(), b.as_ptr(), 8, true) }
}

#[cfg(target_arch = "x86_64")]
fn ok(status: u32) -> Result<(), Fault> {
    if status == 0 {
        Ok(())
    } else {
        Err(Fault)
    }
}

/// The portable accesses: system calls that report EFAULT (module doc).
pub(crate) mod syscall {
    use super::Fault;
    use std::sync::{Mutex, MutexGuard};

    /// Serialises the read-modify-write atomics (and ATOMIC WRITE) with one another.
    static ATOMICS: Mutex<()> = Mutex::new(());

    pub(super) fn lock() -> MutexGuard<'static, ()> {
        ATOMICS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies `len` bytes from `src` to `dst`, one of which (`dst` when `to_app`, else `src`)
    /// is the application's memory, by process_vm_writev / process_vm_readv on this process.
    ///
    /// # Safety
    ///
    /// The side that is not the application's is `len` valid bytes of the caller's; the
    /// application's side is as [`super::copy_in`] says.
    pub(crate) unsafe fn copy(
        dst: *mut u8,
        src: *const u8,
        len: usize,
        to_app: bool,
    ) -> Result<(), Fault> {
        let mut done = 0;
        while done < len {
            let local = libc::iovec {
                iov_base: if to_app {
                    src.wrapping_add(done) as *mut libc::c_void
                } else {
                    dst.wrapping_add(done).cast()
                },
                iov_len: len - done,
            };
            let remote = libc::iovec {
                iov_base: if to_app {
                    dst.wrapping_add(done).cast()
                } else {
                    src.wrapping_add(done) as *mut libc::c_void
                },
                iov_len: len - done,
            };
            // SAFETY: the kernel reads (or writes) the caller's valid local bytes and checks
            // the application's side itself, answering EFAULT (or a short count) for a page
            // that is not there instead of faulting.
            let n = unsafe {
                let pid = libc::getpid();
                if to_app {
                    libc::process_vm_writev(pid, &local, 1, &remote, 1, 0)
                } else {
                    libc::process_vm_readv(pid, &local, 1, &remote, 1, 0)
                }
            };
            if n <= 0 {
                return Err(Fault);
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Replaces the application's word at `p` by `f` of it under the lock; the old value.
    ///
    /// # Safety
    ///
    /// As [`super::compare_swap`].
    pub(super) unsafe fn atomic(p: *mut u64, f: impl FnOnce(u64) -> u64) -> Result<u64, Fault> {
        let _g = lock();
        let mut b = [0u8; 8];
        // SAFETY: the caller's contract (compare_swap / fetch_add): `p` is the application's.
        unsafe { copy(b.as_mut_ptr(), p.cast(), 8, false)? };
        let old = u64::from_ne_bytes(b);
        let new = f(old).to_ne_bytes();
        // SAFETY: as above.
        unsafe { copy(p.cast(), new.as_ptr(), 8, true)? };
        Ok(old)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::cell::UnsafeCell;
    use std::mem::MaybeUninit;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Once;

    // Each routine: System V arguments, 0 in eax on success; its memory instruction is
    // labelled `*_at` for the fault handler, which makes it return 1 instead. Nothing is
    // pushed before that instruction, so the return address is at the stack pointer when it
    // faults. The direction flag is clear at every call (System V ABI).
    std::arch::global_asm!(
        ".pushsection .text.softroce_guarded,\"ax\",@progbits",
        // copy(dst rdi, src rsi, unused rdx, len rcx): rep movsb takes its count in rcx.
        ".p2align 4",
        ".weak softroce_guarded_copy",
        ".hidden softroce_guarded_copy",
        ".type softroce_guarded_copy, @function",
        "softroce_guarded_copy:",
        ".weak softroce_guarded_copy_at",
        ".hidden softroce_guarded_copy_at",
        "softroce_guarded_copy_at:",
        "rep movsb",
        "xor eax, eax",
        "ret",
        ".size softroce_guarded_copy, . - softroce_guarded_copy",
        // cas(p rdi, compare rsi, swap rdx, out rcx)
        ".p2align 4",
        ".weak softroce_guarded_cas",
        ".hidden softroce_guarded_cas",
        ".type softroce_guarded_cas, @function",
        "softroce_guarded_cas:",
        "mov rax, rsi",
        ".weak softroce_guarded_cas_at",
        ".hidden softroce_guarded_cas_at",
        "softroce_guarded_cas_at:",
        "lock cmpxchg qword ptr [rdi], rdx",
        "mov qword ptr [rcx], rax",
        "xor eax, eax",
        "ret",
        ".size softroce_guarded_cas, . - softroce_guarded_cas",
        // xadd(p rdi, add rsi, out rdx)
        ".p2align 4",
        ".weak softroce_guarded_xadd",
        ".hidden softroce_guarded_xadd",
        ".type softroce_guarded_xadd, @function",
        "softroce_guarded_xadd:",
        ".weak softroce_guarded_xadd_at",
        ".hidden softroce_guarded_xadd_at",
        "softroce_guarded_xadd_at:",
        "lock xadd qword ptr [rdi], rsi",
        "mov qword ptr [rdx], rsi",
        "xor eax, eax",
        "ret",
        ".size softroce_guarded_xadd, . - softroce_guarded_xadd",
        // load(p rdi, out rsi)
        ".p2align 4",
        ".weak softroce_guarded_load",
        ".hidden softroce_guarded_load",
        ".type softroce_guarded_load, @function",
        "softroce_guarded_load:",
        ".weak softroce_guarded_load_at",
        ".hidden softroce_guarded_load_at",
        "softroce_guarded_load_at:",
        "mov rax, qword ptr [rdi]",
        "mov qword ptr [rsi], rax",
        "xor eax, eax",
        "ret",
        ".size softroce_guarded_load, . - softroce_guarded_load",
        // store(p rdi, value rsi)
        ".p2align 4",
        ".weak softroce_guarded_store",
        ".hidden softroce_guarded_store",
        ".type softroce_guarded_store, @function",
        "softroce_guarded_store:",
        ".weak softroce_guarded_store_at",
        ".hidden softroce_guarded_store_at",
        "softroce_guarded_store_at:",
        "mov qword ptr [rdi], rsi",
        "xor eax, eax",
        "ret",
        ".size softroce_guarded_store, . - softroce_guarded_store",
        ".popsection",
    );

    extern "C" {
        pub(super) fn softroce_guarded_copy(
            dst: *mut u8,
            src: *const u8,
            unused: usize,
            len: usize,
        ) -> u32;
        pub(super) fn softroce_guarded_cas(
            p: *mut u64,
            compare: u64,
            swap: u64,
            out: *mut u64,
        ) -> u32;
        pub(super) fn softroce_guarded_xadd(p: *mut u64, add: u64, out: *mut u64) -> u32;
        pub(super) fn softroce_guarded_load(p: *const u64, out: *mut u64) -> u32;
        pub(super) fn softroce_guarded_store(p: *mut u64, value: u64) -> u32;
        // Labels inside the routines, never called: only their addresses are used.
        fn softroce_guarded_copy_at();
        fn softroce_guarded_cas_at();
        fn softroce_guarded_xadd_at();
        fn softroce_guarded_load_at();
        fn softroce_guarded_store_at();
    }

    /// The labelled instructions.
    fn guarded_at() -> [usize; 5] {
        [
            softroce_guarded_copy_at as *const () as usize,
            softroce_guarded_cas_at as *const () as usize,
            softroce_guarded_xadd_at as *const () as usize,
            softroce_guarded_load_at as *const () as usize,
            softroce_guarded_store_at as *const () as usize,
        ]
    }

    /// A signal's previous action, written once before the handler is installed and read by
    /// the handler.
    struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);

    // SAFETY: written only inside INSTALL's call_once, before the handler that reads it is
    // installed (and again, with the same kind of value, right after); read only by the
    // handler.
    unsafe impl Sync for Previous {}

    static PREV_SEGV: Previous = Previous(UnsafeCell::new(MaybeUninit::zeroed()));
    static PREV_BUS: Previous = Previous(UnsafeCell::new(MaybeUninit::zeroed()));
    static INSTALL: Once = Once::new();
    static INSTALLED: AtomicBool = AtomicBool::new(false);

    pub(super) fn installed() -> bool {
        INSTALLED.load(Ordering::Acquire)
    }

    pub(super) fn install() {
        INSTALL.call_once(|| {
            // SAFETY: the statics are written here only, before the handler is installed.
            let ok = unsafe {
                install_for(libc::SIGSEGV, &PREV_SEGV) && install_for(libc::SIGBUS, &PREV_BUS)
            };
            INSTALLED.store(ok, Ordering::Release);
        });
    }

    /// Installs the handler for `sig`, keeping the action it replaces in `prev`.
    ///
    /// # Safety
    ///
    /// Called once per signal, inside INSTALL.
    unsafe fn install_for(sig: libc::c_int, prev: &'static Previous) -> bool {
        // SAFETY: sigaction with valid pointers; `prev` is written before the new handler can
        // read it (first the current action, then, atomically with the installation, the
        // action replaced, the same unless another thread changed it meanwhile).
        unsafe {
            let slot = prev.0.get().cast::<libc::sigaction>();
            if libc::sigaction(sig, std::ptr::null(), slot) != 0 {
                return false;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_fault as *const () as usize;
            // ONSTACK: a thread with an alternate stack (Rust's overflow guard) keeps using it.
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &new, &mut old) != 0 {
                return false;
            }
            slot.write(old);
        }
        true
    }

    /// The handler (module doc): a fault at a labelled instruction returns 1 from its routine;
    /// anything else goes where it would have gone without this handler.
    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes the signal's siginfo and ucontext (SA_SIGINFO). Reading
        // the return address at the interrupted stack pointer is reading the interrupted
        // routine's caller's live stack. Only async-signal-safe calls are made (sigaction,
        // raise, or the previous handler itself).
        unsafe {
            let uc = ctx.cast::<libc::ucontext_t>();
            let fault = !info.is_null() && (*info).si_code > 0;
            if fault && !uc.is_null() {
                let g = &mut (*uc).uc_mcontext.gregs;
                let rip = g[libc::REG_RIP as usize] as usize;
                if guarded_at().contains(&rip) {
                    let rsp = g[libc::REG_RSP as usize] as usize;
                    g[libc::REG_RIP as usize] = *(rsp as *const usize) as i64;
                    g[libc::REG_RSP as usize] = (rsp + 8) as i64;
                    g[libc::REG_RAX as usize] = 1;
                    return;
                }
            }
            let prev = if sig == libc::SIGBUS {
                &PREV_BUS
            } else {
                &PREV_SEGV
            };
            let prev = &*prev.0.get().cast::<libc::sigaction>();
            match prev.sa_sigaction {
                libc::SIG_DFL | libc::SIG_IGN => {
                    // Back to what was there; a fault then happens again as the instruction
                    // is retried and takes the default action, a signal sent by another
                    // process is sent again (it is blocked until this handler returns).
                    libc::sigaction(sig, prev, std::ptr::null_mut());
                    if !fault {
                        libc::raise(sig);
                    }
                }
                h if prev.sa_flags & libc::SA_SIGINFO != 0 => {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(h);
                    f(sig, info, ctx);
                }
                h => {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                    f(sig);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three fresh pages: [0, 4096) read-write, [4096, 8192) read-only, [8192, 12288) with no
    /// access (PROT_NONE, so that no other test's mapping can take its place meanwhile, as it
    /// could an unmapped hole's; truly unmapped memory is the null page's, below).
    fn layout() -> *mut u8 {
        // SAFETY: a fresh anonymous mapping, no address asked for; then its own pages.
        unsafe {
            let m = libc::mmap(
                std::ptr::null_mut(),
                3 * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            let m = m.cast::<u8>();
            assert_eq!(libc::mprotect(m.add(4096).cast(), 4096, libc::PROT_READ), 0);
            assert_eq!(libc::mprotect(m.add(8192).cast(), 4096, libc::PROT_NONE), 0);
            m
        }
    }

    /// The null page: never mapped (vm.mmap_min_addr is at least 4096).
    const UNMAPPED: usize = 64;

    fn unmap(m: *mut u8) {
        // SAFETY: the mapping `layout` made, no longer used.
        assert_eq!(unsafe { libc::munmap(m.cast(), 3 * 4096) }, 0);
    }

    #[test]
    fn accesses_to_missing_or_protected_memory_fail_instead_of_faulting() {
        install();
        #[cfg(target_arch = "x86_64")]
        assert!(fast(), "the fault handler is installed on x86_64");
        let m = layout();
        let data = [0xA5u8; 100];
        let mut back = [0u8; 100];
        // SAFETY: m is laid out as `layout` says; every access below either stays inside the
        // page whose permission it needs or is expected to fail.
        unsafe {
            assert_eq!(copy_in(m.add(10), &data), Ok(()));
            assert_eq!(copy_out(m.add(10), &mut back), Ok(()));
            assert_eq!(back, data);
            assert_eq!(*m.add(9), 0, "no byte before the range is touched");
            assert_eq!(*m.add(110), 0, "no byte after the range is touched");
            // Across into the read-only page: written up to it, then the fault.
            assert_eq!(copy_in(m.add(4096 - 50), &data), Err(Fault));
            assert_eq!(*m.add(4095), 0xA5);
            assert_eq!(copy_out(m.add(4096 - 50), &mut back), Ok(()));
            assert_eq!(copy_out(m.add(8192 - 50), &mut back), Err(Fault));
            assert_eq!(copy_out(m.add(8192), &mut back), Err(Fault));
            assert_eq!(copy_in(m.add(9000), &data), Err(Fault));
            assert_eq!(copy_in(UNMAPPED as *mut u8, &data), Err(Fault));
            assert_eq!(copy_out(UNMAPPED as *const u8, &mut back), Err(Fault));
            assert_eq!(copy_in(m.add(9000), &[]), Ok(()));
            let w = m.add(64).cast::<u64>();
            assert_eq!(store(w, 5), Ok(()));
            assert_eq!(load(w), Ok(5));
            assert_eq!(fetch_add(w, 3), Ok(5));
            assert_eq!(compare_swap(w, 8, 1), Ok(8));
            assert_eq!(compare_swap(w, 8, 2), Ok(1));
            assert_eq!(load(w), Ok(1));
            assert_eq!(fetch_add(w, u64::MAX), Ok(1));
            assert_eq!(load(w), Ok(0));
            let ro = m.add(4096).cast::<u64>();
            assert_eq!(load(ro), Ok(0));
            assert_eq!(store(ro, 1), Err(Fault));
            assert_eq!(fetch_add(ro, 1), Err(Fault));
            assert_eq!(compare_swap(ro, 0, 1), Err(Fault));
            assert_eq!(load(ro), Ok(0));
            for gone in [m.add(8192).cast::<u64>(), (UNMAPPED * 2) as *mut u64] {
                assert_eq!(load(gone), Err(Fault));
                assert_eq!(store(gone, 1), Err(Fault));
                assert_eq!(fetch_add(gone, 1), Err(Fault));
                assert_eq!(compare_swap(gone, 0, 1), Err(Fault));
            }
        }
        unmap(m);
    }

    #[test]
    fn the_system_call_accesses_answer_alike() {
        let m = layout();
        let data = [7u8; 64];
        let mut back = [0u8; 64];
        // SAFETY: as in the test above.
        unsafe {
            assert_eq!(syscall::copy(m.add(8), data.as_ptr(), 64, true), Ok(()));
            assert_eq!(
                syscall::copy(back.as_mut_ptr(), m.add(8), 64, false),
                Ok(())
            );
            assert_eq!(back, data);
            assert_eq!(
                syscall::copy(m.add(4096), data.as_ptr(), 64, true),
                Err(Fault)
            );
            assert_eq!(
                syscall::copy(back.as_mut_ptr(), m.add(4096), 64, false),
                Ok(())
            );
            assert_eq!(
                syscall::copy(back.as_mut_ptr(), m.add(8192 - 8), 64, false),
                Err(Fault)
            );
            assert_eq!(
                syscall::copy(back.as_mut_ptr(), UNMAPPED as *const u8, 8, false),
                Err(Fault)
            );
            let w = m.add(128).cast::<u64>();
            assert_eq!(syscall::atomic(w, |v| v + 2), Ok(0));
            assert_eq!(syscall::atomic(w, |v| v * 10), Ok(2));
            assert_eq!(*w, 20);
            assert_eq!(syscall::atomic(m.add(4096).cast(), |v| v + 1), Err(Fault));
            assert_eq!(syscall::atomic(m.add(8192).cast(), |v| v + 1), Err(Fault));
        }
        unmap(m);
    }

    #[test]
    fn a_fault_on_another_thread_is_answered_there() {
        install();
        let m = layout() as usize;
        let t = std::thread::spawn(move || {
            let mut b = [0u8; 16];
            // SAFETY: page 2 of the layout has no access: the copy must fail, not fault.
            unsafe { copy_out((m + 8192) as *const u8, &mut b) }
        });
        assert_eq!(t.join().unwrap(), Err(Fault));
        unmap(m as *mut u8);
    }
}
