//! Completion queues (`ibv_cq`): a handle on the driver's queue that the engine pushes work
//! completions into (see `driver/cq.rs` for its locking and busy-poll behaviour).

use std::sync::Arc;
use std::time::Duration;

use crate::driver::CqInner;
pub use crate::driver::{clock_ns, Stamp};
use crate::ib::{VerbsError, WorkCompletion};

/// A completion queue.
#[derive(Debug, Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
    /// The device it was created on (weak: the device's QP table holds the CQ), which a QP
    /// that completes into it must be of.
    pub(crate) dev: std::sync::Weak<crate::driver::device::Device>,
}

impl CompletionQueue {
    /// Capacity given at creation.
    pub fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out`, oldest first; returns how
    /// many. Fails once the CQ has overflowed (completions were lost).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        self.inner.poll(out)
    }

    /// Like [`poll`](Self::poll), but hands each completion to `put` with its index (0, 1, ...)
    /// instead of into a slice, for up to `max`: the caller writes them where it wants them
    /// (the libibverbs shim: into the application's `ibv_wc` array) with no buffer between.
    /// `put` runs while the CQ is held; it must not use the CQ.
    pub fn poll_each(
        &self,
        max: usize,
        put: impl FnMut(usize, WorkCompletion),
    ) -> Result<usize, VerbsError> {
        self.inner.poll_each(max, put)
    }

    /// Says that the application will sleep until this CQ's next completion event (the shim's
    /// `ibv_req_notify_cq`): a device whose engine thread stood by while threads spun on
    /// CQs (driver/standby.rs) has it receive again at once rather than after its stand-by.
    pub fn expect_event(&self) {
        self.inner.expect_event();
    }

    /// Polls one completion.
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>, VerbsError> {
        self.inner.poll_one()
    }

    /// From now on, records when the engine adds each completion (extended CQs created with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` or `_WALLCLOCK`; spec-notes/beyond-rxe.md rule
    /// 11); completions already waiting get the time of this call.
    pub fn enable_timestamps(&self) {
        self.inner.enable_timestamps()
    }

    /// [`poll_one`](Self::poll_one) with the time the completion was added (zeroes unless
    /// [`enable_timestamps`](Self::enable_timestamps) was called before it was).
    pub fn poll_one_stamped(&self) -> Result<Option<(WorkCompletion, Stamp)>, VerbsError> {
        self.inner.poll_one_stamped()
    }

    /// Blocks until at least one completion is available or `timeout` passes, then polls like
    /// [`poll`](Self::poll). Returns `Err(Timeout)` when nothing arrived in time. On a device
    /// opened in busy-poll mode this spins instead of sleeping.
    pub fn wait(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize, VerbsError> {
        self.inner.wait(out, timeout)
    }

    /// `ibv_resize_cq`: room for `capacity` completions from now on, those waiting kept.
    /// Fails (the CQ unchanged) for 0, more than the device's `max_cqe`, or fewer than the
    /// completions waiting (as rxe).
    pub fn resize(&self, capacity: usize) -> Result<(), VerbsError> {
        self.inner.resize(capacity)
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
}
