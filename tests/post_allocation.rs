//! The per-message path allocates nothing: posting a one-SGE WRITE (inline or not), and (in
//! busy-poll mode, where the application's own thread runs the engine's passes) sending it,
//! taking its ACK and polling its completion, make no heap allocation once the QP's queues
//! have grown to the depth they are used at; nor do both devices' engine threads while WRITEs
//! and SENDs go through. Counted by a global allocator that counts the thread under test's
//! allocations, or every thread's.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use softroce::ib::*;

mod common;
use common::{queues, two_contexts_with, End, EndSpec};

/// The system allocator, counting the calls made on threads that asked to be counted.
struct Counting;

/// Whether every thread's allocations are counted (the engines' too), and how many there were.
static EVERY_THREAD: AtomicBool = AtomicBool::new(false);
static EVERY_THREAD_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread's allocations are counted, and how many there were.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    if EVERY_THREAD.load(Ordering::Relaxed) {
        EVERY_THREAD_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
    // try_with: a thread's allocations during its own teardown are not counted.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counting touches
// only const-initialised thread-locals, which never allocate.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract is System's.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations this thread made while running `f`.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    f();
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(|n| n.get())
}

/// Allocations on every thread of the process while running `f`.
fn every_threads_allocations_in(f: impl FnOnce()) -> u64 {
    EVERY_THREAD_ALLOCATIONS.store(0, Ordering::SeqCst);
    EVERY_THREAD.store(true, Ordering::SeqCst);
    f();
    EVERY_THREAD.store(false, Ordering::SeqCst);
    EVERY_THREAD_ALLOCATIONS.load(Ordering::SeqCst)
}

fn connected(busy_poll: bool) -> (End, End) {
    let (ca, cb) = two_contexts_with(busy_poll);
    let spec = EndSpec {
        mr_len: 1 << 16,
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        cq_len: 256,
        qp_type: QpType::Rc,
        cap: QpCap {
            max_inline_data: 64,
            ..queues(128)
        },
        sq_sig_all: false,
    };
    let (a, b) = (End::open(ca, &spec), End::open(cb, &spec));
    a.connect_rc(&b, AccessFlags::REMOTE_WRITE);
    (a, b)
}

/// Posts WR `wr_id` from `a`: a one-SGE WRITE of `a`'s first 64 bytes into slot
/// `wr_id % 512` of `b`'s region, with `flags`.
fn post_write(a: &End, b: &End, wr_id: u64, flags: SendFlags) {
    a.qp.post_send(&[SendWr {
        wr_id,
        sg_list: &[a.mr.sge(0, 64)],
        opcode: WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr() + 64 * (wr_id % 512),
            rkey: b.mr.rkey(),
        },
        send_flags: flags,
    }])
    .unwrap();
}

/// Posts `n` signaled 64-byte WRITEs from `a` to `b` one at a time, each polled to its
/// completion before the next.
fn write_and_complete(a: &End, b: &End, n: u64) {
    let mut wc = [WorkCompletion::default(); 4];
    for i in 0..n {
        post_write(a, b, i, SendFlags::SIGNALED);
        let got = a.cq.wait(&mut wc, Duration::from_secs(30)).unwrap();
        assert_eq!(got, 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(wc[0].wr_id, i);
    }
}

/// Posts 64 unsignaled one-SGE WRITEs from `a` to `b` at once, with `flags`.
fn post_burst(a: &End, b: &End, flags: SendFlags) {
    for i in 0..64u64 {
        post_write(a, b, i, flags);
    }
}

/// Runs `round` (which returns the allocations it counted) until one makes none, at most 10
/// times; panics with the counts if none did. Queues grow (amortised, by doubling) to the depth
/// they are used at, which depends on how far the engine lags the application: on a loaded
/// machine a later round may go deeper than the first. A round makes no allocation once they
/// are deep enough; an allocation made per message would show in every round.
fn settles_at_no_allocation(what: &str, mut round: impl FnMut() -> u64) {
    let mut counts = Vec::new();
    for _ in 0..10 {
        let n = round();
        if n == 0 {
            return;
        }
        counts.push(n);
    }
    panic!("{what}: every round allocated: {counts:?}");
}

fn posting_a_one_sge_write_allocates_nothing() {
    for flags in [SendFlags::EMPTY, SendFlags::INLINE] {
        let (a, b) = connected(false);
        // Warm-up: completed inline WRs leave their buffers for the next.
        post_burst(&a, &b, flags);
        write_and_complete(&a, &b, 1);
        settles_at_no_allocation(&format!("64 posts with {flags:?}"), || {
            let n = allocations_in(|| post_burst(&a, &b, flags));
            // They all went through: a signaled one after them completes.
            write_and_complete(&a, &b, 1);
            n
        });
    }
}

fn a_busy_poll_round_trip_allocates_nothing_once_warm() {
    let (a, b) = connected(true);
    write_and_complete(&a, &b, 200);
    settles_at_no_allocation(
        "200 WRITEs posted, sent, acknowledged and polled on this thread",
        || allocations_in(|| write_and_complete(&a, &b, 200)),
    );
}

/// SENDs of 64 bytes from `a` to `b`, one at a time: `b` posts a receive, `a` sends, both
/// poll their completion.
fn send_and_receive(a: &End, b: &End, n: u64) {
    let sge = [a.mr.sge(0, 64)];
    let rsge = [b.mr.sge(4096, 64)];
    let mut wc = [WorkCompletion::default(); 4];
    for i in 0..n {
        b.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &rsge,
        }])
        .unwrap();
        a.qp.post_send(&[SendWr {
            wr_id: i,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        }])
        .unwrap();
        for (cq, opcode) in [(&a.cq, WcOpcode::Send), (&b.cq, WcOpcode::Recv)] {
            assert_eq!(cq.wait(&mut wc, Duration::from_secs(30)).unwrap(), 1);
            assert_eq!(
                (wc[0].status, wc[0].opcode, wc[0].wr_id),
                (WcStatus::Success, opcode, i)
            );
        }
    }
}

fn both_engines_carry_writes_and_sends_without_allocating_once_warm() {
    for busy_poll in [false, true] {
        let (a, b) = connected(busy_poll);
        write_and_complete(&a, &b, 300);
        send_and_receive(&a, &b, 300);
        settles_at_no_allocation(
            &format!("300 WRITEs and 300 SENDs (busy_poll {busy_poll}) on the process's threads"),
            || {
                every_threads_allocations_in(|| {
                    write_and_complete(&a, &b, 300);
                    send_and_receive(&a, &b, 300);
                })
            },
        );
    }
}

/// One test, so that no other test (nor the harness starting one) allocates on another thread
/// while every thread's allocations are counted.
#[test]
fn the_per_message_path_allocates_nothing_once_warm() {
    posting_a_one_sge_write_allocates_nothing();
    a_busy_poll_round_trip_allocates_nothing_once_warm();
    both_engines_carry_writes_and_sends_without_allocating_once_warm();
}
