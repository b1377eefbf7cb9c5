//! The completion queue the engine writes into and the application reads: the engine pushes
//! work completions, the application polls them in batches or waits for them with a timeout
//! (the verbs `CompletionQueue` is a handle on it).
//!
//! The lock is held only to move completions in or out (the engine pushes all of one QP
//! service at once), and the engine signals the condition variable (a system call) only when
//! an application thread waits on it. In busy-poll mode polling an empty queue runs an engine
//! pass on the polling thread, and a wait spins on that instead of sleeping.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::ib::{VerbsError, WorkCompletion};

/// What a completion queue needs from the device it belongs to. The device implements it
/// (device.rs), so that this file does not import the device, which holds the CQs through
/// its QP table.
pub(crate) trait CqDevice: Send + Sync {
    /// Whether the device was opened in busy-poll mode.
    fn busy_poll(&self) -> bool;
    /// The device's `max_cqe`.
    fn max_cqe(&self) -> u32;
    /// In busy-poll mode, runs an engine pass for a CQ poll on the calling thread.
    fn drive_for_poll(&self);
    /// Returns once the engine has served the work posted before the call, or after `limit`.
    fn settle(&self, limit: Duration);
    /// The default mode: a thread that is about to wait starts to run the engine itself;
    /// how long it may (None: it does not, and must not call `end_wait_drive`).
    fn begin_wait_drive(&self) -> Option<Duration>;
    /// One engine pass on the waiting thread (none if another thread runs one).
    fn drive_for_wait(&self);
    /// The waiting thread stops running the engine; `sleeps`: it sleeps on the CQ next.
    fn end_wait_drive(&self, sleeps: bool);
    /// An application thread will sleep until a CQ event: the engine thread, if it stands
    /// by, receives again.
    fn hand_back(&self);
    /// Posts rang the doorbell that no pass has taken yet.
    fn posts_waiting(&self) -> bool;
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct CqInner {
    /// Changed only by `resize`, under the state lock (so a push sees the old or the new
    /// capacity for a whole batch).
    capacity: AtomicUsize,
    busy_poll: bool,
    /// The device whose engine a busy-polling CQ drives (weak: the device's QP table holds
    /// the CQ).
    device: std::sync::Weak<dyn CqDevice>,
    state: Mutex<CqState>,
    /// `queue.len()`, plus one once overflowed: what a poll has to report, kept by every
    /// change under the state lock, so that polling an empty queue (perftest spins on
    /// `ibv_poll_cq`) reads one shared word instead of taking the lock the engine pushes under.
    pending: AtomicUsize,
    /// Empty polls in a row (non-busy-poll mode): every `YIELD_EVERY`th yields the CPU.
    empty_polls: AtomicUsize,
    ready: Condvar,
    /// Called after completions are added (the shim's completion channel).
    event_hook: std::sync::OnceLock<EventHook>,
}

/// A completion-event callback (see `CqInner::set_event_hook`).
struct EventHook(Box<dyn Fn() + Send + Sync>);

impl core::fmt::Debug for EventHook {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EventHook")
    }
}

/// When the engine added a completion to its CQ, for a CQ that asks
/// (`CqInner::enable_timestamps`; `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` and `_WALLCLOCK`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    /// Nanoseconds of `CLOCK_MONOTONIC` (the free-running clock).
    pub monotonic_ns: u64,
    /// Nanoseconds of `CLOCK_REALTIME` since the epoch (the wall clock).
    pub realtime_ns: u64,
}

impl Stamp {
    /// Both clocks now.
    pub fn now() -> Stamp {
        Stamp {
            monotonic_ns: clock_ns(libc::CLOCK_MONOTONIC),
            realtime_ns: clock_ns(libc::CLOCK_REALTIME),
        }
    }
}

/// Nanoseconds of `clock` (0 if it cannot be read).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own and pass.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[derive(Debug, Default)]
struct CqState {
    queue: VecDeque<WorkCompletion>,
    /// The time each completion of `queue` was added, in step with it, once
    /// [`CqInner::enable_timestamps`] has been called.
    stamps: Option<VecDeque<Stamp>>,
    overflowed: bool,
    /// Threads blocked in `wait`.
    waiters: usize,
}

impl CqInner {
    /// A queue of `capacity` completions; in busy-poll mode waits spin.
    pub(crate) fn new<D: CqDevice + 'static>(
        capacity: usize,
        device: &std::sync::Arc<D>,
    ) -> CqInner {
        let weak: std::sync::Weak<dyn CqDevice> = std::sync::Arc::downgrade(device) as _;
        CqInner {
            capacity: AtomicUsize::new(capacity),
            busy_poll: device.busy_poll(),
            device: weak,
            state: Mutex::new(CqState::default()),
            pending: AtomicUsize::new(0),
            empty_polls: AtomicUsize::new(0),
            ready: Condvar::new(),
            event_hook: std::sync::OnceLock::new(),
        }
    }

    /// Adds completions; beyond the capacity the CQ is marked overflowed (IBTA 11.4.2.1: a CQ
    /// overrun is an asynchronous error) and the excess is dropped.
    pub(crate) fn push_all(&self, wcs: impl IntoIterator<Item = WorkCompletion>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let before = st.queue.len();
        let capacity = self.capacity.load(Ordering::Relaxed);
        // One reading for the batch: the completions of one push are added at once.
        let now = st.stamps.is_some().then(Stamp::now);
        for wc in wcs {
            if st.queue.len() >= capacity {
                st.overflowed = true;
                continue;
            }
            st.queue.push_back(wc);
            if let (Some(stamps), Some(now)) = (st.stamps.as_mut(), now) {
                stamps.push_back(now);
            }
        }
        let added = st.queue.len() != before;
        self.publish(&st);
        if added && st.waiters > 0 {
            self.ready.notify_all();
        }
        drop(st);
        if added {
            if let Some(hook) = self.event_hook.get() {
                (hook.0)();
            }
        }
    }

    /// From now on, records when each completion is added ([`poll_one_stamped`]
    /// gives it); completions already waiting get the time of this call.
    ///
    /// [`poll_one_stamped`]: Self::poll_one_stamped
    pub(crate) fn enable_timestamps(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.stamps.is_none() {
            let now = Stamp::now();
            st.stamps = Some(st.queue.iter().map(|_| now).collect());
        }
    }

    /// Sets the callback run after completions are added; false if one was set already.
    pub(crate) fn set_event_hook(&self, f: Box<dyn Fn() + Send + Sync>) -> bool {
        self.event_hook.set(EventHook(f)).is_ok()
    }
}

/// An application spinning on an empty CQ yields the CPU every this many polls: on a small
/// machine the engine thread that would fill the queue may be waiting for that CPU (perftest's
/// poll loop otherwise takes a core from the engine; see BENCHMARKS.md, issue #23).
const YIELD_EVERY: usize = 16;
/// A thread that runs the engine while it waits (`drive_until`) yields the CPU every this
/// many passes.
const DRIVE_YIELD_EVERY: u32 = 8;
/// Empty polls in a row after which a polling thread runs engine passes itself (the default
/// mode): it spins on the CQ rather than drains it.
const DRIVE_AFTER_EMPTY_POLLS: usize = 16;

impl CqInner {
    /// Mirrors the state into `pending` (called with the state lock held, after a change).
    fn publish(&self, st: &CqState) {
        self.pending.store(
            st.queue.len() + usize::from(st.overflowed),
            Ordering::Release,
        );
    }

    /// Drops the completions of QP `qpn` not yet polled, as libmlx5's `mlx5_cq_clean` does
    /// when a QP goes to RESET (spec-notes/beyond-rxe.md rule 5): they name work requests the
    /// reset forgot. Returns how many were dropped.
    pub(crate) fn remove_qp(&self, qpn: u32) -> usize {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let before = st.queue.len();
        let CqState { queue, stamps, .. } = &mut *st;
        if let Some(stamps) = stamps.as_mut() {
            let mut keep = queue.iter().map(|wc| wc.qp_num != qpn);
            stamps.retain(|_| keep.next().unwrap_or(true));
        }
        queue.retain(|wc| wc.qp_num != qpn);
        let dropped = before - st.queue.len();
        self.publish(&st);
        dropped
    }

    /// Capacity given at creation.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// `ibv_resize_cq`: the capacity becomes `capacity`, the completions waiting stay. As
    /// rxe (`rxe_cq_chk_attr`): refused when it is 0, above the device's `max_cqe`, or below
    /// the number of completions waiting.
    pub(crate) fn resize(&self, capacity: usize) -> Result<(), VerbsError> {
        let dev = self.device.upgrade().ok_or(VerbsError::DeviceClosed)?;
        let max = dev.max_cqe() as usize;
        if capacity == 0 || capacity > max {
            return Err(VerbsError::ExceedsDeviceLimit {
                what: "CQ entries",
                requested: capacity as u64,
                limit: max as u64,
            });
        }
        // rxe counts the completions of the work posted before the resize, which its
        // post_send served inline; softroce's engine serves it asynchronously, so let it.
        dev.settle(Duration::from_secs(1));
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if capacity < st.queue.len() {
            return Err(VerbsError::InvalidAttribute {
                attr: "cqe",
                reason: "fewer than the completions waiting in the CQ",
            });
        }
        self.capacity.store(capacity, Ordering::Relaxed);
        Ok(())
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out`, oldest first; returns how
    /// many. Fails once the CQ has overflowed (completions were lost).
    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        self.poll_each(out.len(), |i, wc| out[i] = wc)
    }

    /// [`poll`](Self::poll) handing each completion to `put` with its index (0, 1, ...)
    /// instead of into a slice: the shim writes them straight into the application's array,
    /// and an empty poll, what a spinning program mostly makes, prepares no buffer.
    pub(crate) fn poll_each(
        &self,
        max: usize,
        mut put: impl FnMut(usize, WorkCompletion),
    ) -> Result<usize, VerbsError> {
        if self.busy_poll {
            let n = self.take(max, &mut put)?;
            if n > 0 || max == 0 {
                return Ok(n);
            }
            // Nothing yet: run an engine pass on this thread (busy-poll mode), then look again.
            if let Some(dev) = self.device.upgrade() {
                dev.drive_for_poll();
            }
            return self.take(max, &mut put);
        }
        if self.pending.load(Ordering::Acquire) == 0 && max > 0 {
            let n = self.empty_polls.fetch_add(1, Ordering::Relaxed);
            // A thread that spins on the CQ runs the engine itself, as a waiter does
            // (standby.rs): perftest, UCX and MPI spin on ibv_poll_cq. A drain loop's last,
            // empty poll does not, unless posts wait for a pass (the engine thread may stand
            // by, and the posts of a window are what the spinning thread waits on).
            if self.drive_once(n + 1 >= DRIVE_AFTER_EMPTY_POLLS) {
                self.empty_polls.store(0, Ordering::Relaxed);
                return self.take(max, &mut put);
            }
            // Nothing to report: leave the CPU now and then to the thread that would fill
            // the queue, rather than spin on a lock it needs.
            if n % YIELD_EVERY == YIELD_EVERY - 1 {
                std::thread::yield_now();
            }
            return Ok(0);
        }
        self.empty_polls.store(0, Ordering::Relaxed);
        self.take(max, &mut put)
    }

    /// Moves up to `max` completions out to `put`, without driving the engine.
    fn take(
        &self,
        max: usize,
        put: &mut impl FnMut(usize, WorkCompletion),
    ) -> Result<usize, VerbsError> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.overflowed {
            return Err(VerbsError::QueueFull {
                queue: crate::ib::QueueKind::Completion,
                depth: self.capacity.load(Ordering::Relaxed) as u32,
            });
        }
        let n = max.min(st.queue.len());
        for (i, wc) in st.queue.drain(..n).enumerate() {
            put(i, wc);
        }
        if let Some(stamps) = st.stamps.as_mut() {
            stamps.drain(..n);
        }
        self.publish(&st);
        Ok(n)
    }

    /// Polls one completion.
    pub(crate) fn poll_one(&self) -> Result<Option<WorkCompletion>, VerbsError> {
        Ok(self.poll_one_stamped()?.map(|(wc, _)| wc))
    }

    /// Polls one completion with the time it was added (a default [`Stamp`] of zeroes unless
    /// [`enable_timestamps`](Self::enable_timestamps) was called before it was).
    pub(crate) fn poll_one_stamped(&self) -> Result<Option<(WorkCompletion, Stamp)>, VerbsError> {
        if self.busy_poll && self.is_empty() {
            if let Some(dev) = self.device.upgrade() {
                dev.drive_for_poll();
            }
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.overflowed {
            return Err(VerbsError::QueueFull {
                queue: crate::ib::QueueKind::Completion,
                depth: self.capacity.load(Ordering::Relaxed) as u32,
            });
        }
        let wc = st.queue.pop_front();
        let stamp = st.stamps.as_mut().and_then(|s| s.pop_front());
        self.publish(&st);
        Ok(wc.map(|wc| (wc, stamp.unwrap_or_default())))
    }

    /// Blocks until at least one completion is available or `timeout` passes, then polls like
    /// [`poll`](Self::poll). Returns `Err(Timeout)` when nothing arrived in time.
    ///
    /// On a device opened in busy-poll mode this spins (yielding the CPU now and then, for
    /// the engine thread may need it) instead of sleeping.
    pub(crate) fn wait(
        &self,
        out: &mut [WorkCompletion],
        timeout: Duration,
    ) -> Result<usize, VerbsError> {
        let deadline = Instant::now() + timeout;
        if self.busy_poll {
            let mut spins = 0u32;
            loop {
                let n = self.poll(out)?;
                if n > 0 {
                    return Ok(n);
                }
                spins = spins.wrapping_add(1);
                if spins % 64 == 0 {
                    if Instant::now() >= deadline {
                        return Err(VerbsError::Timeout);
                    }
                    // Let other work on a busy machine have the CPU now and then.
                    std::thread::yield_now();
                }
            }
        }
        if self.pending.load(Ordering::Acquire) == 0 {
            if let Some(dev) = self.device.upgrade() {
                if let Some(window) = dev.begin_wait_drive() {
                    let got = self.drive_until(&*dev, deadline, window);
                    dev.end_wait_drive(!got);
                }
            }
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.queue.is_empty() && !st.overflowed {
            let now = Instant::now();
            if now >= deadline {
                return Err(VerbsError::Timeout);
            }
            st.waiters += 1;
            st = self
                .ready
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            st.waiters -= 1;
        }
        drop(st);
        self.poll(out)
    }

    /// The default mode: one engine pass on this thread, as a waiter's, if it has been
    /// `spinning` or posts wait for a pass (nothing if waiters do not drive on this device, or
    /// another thread runs a pass). Returns whether the CQ has something to report.
    fn drive_once(&self, spinning: bool) -> bool {
        if let Some(dev) = self.device.upgrade() {
            if (spinning || dev.posts_waiting()) && dev.begin_wait_drive().is_some() {
                dev.drive_for_wait();
                dev.end_wait_drive(false);
            }
        }
        self.pending.load(Ordering::Acquire) > 0
    }

    /// The application is about to sleep until this CQ's next event (it armed the CQ:
    /// `ibv_req_notify_cq`): the engine thread receives from now on, if it stood by for
    /// threads that spun on CQs (standby.rs).
    pub(crate) fn expect_event(&self) {
        if let Some(dev) = self.device.upgrade() {
            dev.hand_back();
        }
    }

    /// The default mode's wait before it sleeps: runs engine passes on this thread until
    /// the CQ has something to report (true), or `window` passes or `deadline` comes (false).
    /// standby.rs says why; the engine thread stands by meanwhile.
    fn drive_until(&self, dev: &dyn CqDevice, deadline: Instant, window: Duration) -> bool {
        let until = (Instant::now() + window).min(deadline);
        let mut looks = 0u32;
        loop {
            dev.drive_for_wait();
            if self.pending.load(Ordering::Acquire) > 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            looks = looks.wrapping_add(1);
            if looks % DRIVE_YIELD_EVERY == 0 {
                // Another thread of the machine may need this CPU (the peer's engine, on a
                // small machine): let it run now and then.
                std::thread::yield_now();
            }
        }
    }

    /// Completions waiting to be polled.
    pub(crate) fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queue
            .len()
    }

    /// Whether no completion is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
