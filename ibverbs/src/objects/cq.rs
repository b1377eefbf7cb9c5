//! Completion channels and completion queues: creation, events, and the poll/notify ops.

use std::collections::VecDeque;
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use libc::{c_int, c_uint, c_void, EINVAL, ENODEV};
use softroce::ib::WorkCompletion;
use softroce::verbs::CompletionQueue;

use super::common::{cond_init, errno_of, fail, fail_neg, fail_null, mutex_init, EVENTFD_COUNT};
use super::ctx::{ctx_of, Ctx};
use super::handle::{self, CMutexGuard, Obj, Object};
use crate::ffi::*;

/// The engine side of a completion channel: the eventfd and the CQs that have fired, as
/// `Weak`s (a CQ may be destroyed with events unread: a strong reference here would keep it
/// past its destroy; see the handle module's doc). A `Weak` is never upgraded: it pins the
/// CQ's allocation, so that its address stays its handle while the entry is queued, and
/// `ibv_get_cq_event` looks that handle up under the registry lock.
struct ChanInner {
    fd: c_int,
    fired: Mutex<VecDeque<Weak<Obj<Cq>>>>,
}

impl Drop for ChanInner {
    fn drop(&mut self) {
        // SAFETY: the fd was opened in ibv_create_comp_channel and is closed only here.
        unsafe { libc::close(self.fd) };
    }
}

/// A completion channel. Its CQs hold it (so `ibv_destroy_comp_channel` is EBUSY while they
/// live); it holds its context.
pub(super) struct Channel {
    inner: Arc<ChanInner>,
    /// Its context, whose mutex guards `refcnt` (and which must outlive the channel).
    ctx: Arc<Obj<Ctx>>,
}

impl Object for Channel {
    type C = ibv_comp_channel;
    type Handle = ibv_comp_channel;
}

/// `ibv_create_comp_channel`: its `fd` is an eventfd that becomes readable when an armed CQ
/// gets a completion (poll/epoll/select work on it). NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    // SAFETY: no memory preconditions. Semaphore mode: one read per event.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return null_mut(); // errno from eventfd
    }
    let obj = Obj::new(
        ibv_comp_channel {
            context: c,
            fd,
            refcnt: 0,
        },
        Channel {
            inner: Arc::new(ChanInner {
                fd,
                fired: Mutex::new(VecDeque::new()),
            }),
            ctx,
        },
    );
    handle::publish(&obj)
}

/// `ibv_destroy_comp_channel`: 0 or an errno value (EBUSY while CQs use it, or a call such as
/// `ibv_get_cq_event` on another thread does).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    match handle::remove::<Channel>(ch) {
        Ok(chan) => {
            drop(chan);
            0
        }
        Err(e) => fail(e),
    }
}

/// A completion queue. Its QPs hold it (so `ibv_destroy_cq` is EBUSY while they live); it
/// holds its context and channel.
pub(super) struct Cq {
    pub(super) cq: CompletionQueue,
    armed: Arc<AtomicBool>,
    channel: Option<Arc<Obj<Channel>>>,
    /// Kept so that the context outlives its CQs.
    _ctx: Arc<Obj<Ctx>>,
    /// The extended polling state (`ibv_create_cq_ex`'s CQs use it; see `cq_ex`).
    pub(super) ex: super::cq_ex_state::ExPoll,
    /// The events `ibv_get_cq_event` returned for this CQ (the kernel's
    /// `comp_events_reported`), counted under the C struct's mutex; `ibv_destroy_cq` waits
    /// until `comp_events_completed` has caught up with it.
    events_reported: AtomicU32,
}

impl Object for Cq {
    /// Every CQ is allocated as an `ibv_cq_ex` (whose start is the `ibv_cq`), as rdma-core's
    /// `verbs_cq`; only `ibv_create_cq_ex` fills in the extension.
    type C = ibv_cq_ex;
    type Handle = ibv_cq;
}

impl Obj<Cq> {
    /// The `ibv_cq` at the start of the C struct (raw: C may write its fields).
    pub(super) fn cq_c(&self) -> *mut ibv_cq {
        // SAFETY: a raw projection into this live object's C struct.
        unsafe { ptr::addr_of_mut!((*self.c()).cq) }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Some(ch) = &self.channel {
            // SAFETY: the channel's context's mutex (rdma-core takes it around `refcnt`), in
            // the live context the channel holds; `refcnt` is written only under it.
            let _g = unsafe { CMutexGuard::lock(ch.ctx.mutex()) };
            // SAFETY: a raw write to the live channel's C struct, under the lock above.
            unsafe { (*ch.c()).refcnt -= 1 };
        }
    }
}

/// The live CQ behind `p`, referenced (see [`handle::get`]).
pub(super) fn cq_of(p: *mut ibv_cq) -> Option<Arc<Obj<Cq>>> {
    handle::get::<Cq>(p)
}

/// `ibv_create_cq`: NULL and errno on failure (EINVAL for `cqe` outside 1..=max_cqe or a
/// bad channel).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let Some(ctx) = ctx_of(c) else {
        return fail_null(EINVAL);
    };
    // The kernel's create_cq: EINVAL unless comp_vector < num_comp_vectors (unsigned).
    if comp_vector as c_uint >= super::ctx::NUM_COMP_VECTORS as c_uint {
        return fail_null(EINVAL);
    }
    let chan = if channel.is_null() {
        None
    } else {
        match handle::get::<Channel>(channel) {
            Some(ch) => Some(ch),
            None => return fail_null(EINVAL),
        }
    };
    if cqe < 1 {
        return fail_null(EINVAL);
    }
    let g = match ctx.open() {
        Ok(g) => g,
        Err(e) => return fail_null(e),
    };
    let cq = match g.as_ref().map(|x| x.create_cq(cqe as usize)) {
        Some(Ok(cq)) => cq,
        Some(Err(e)) => return fail_null(errno_of(&e)),
        None => return fail_null(ENODEV),
    };
    drop(g);
    if let Some(ch) = &chan {
        // As rdma-core's verbs_init_cq: the channel's refcnt under its context's mutex.
        // SAFETY: the live channel's context's mutex; `refcnt` of the live channel is written
        // only under it (here and in Cq's Drop).
        let _g = unsafe { CMutexGuard::lock(ch.ctx.mutex()) };
        // SAFETY: a raw write to the live channel's C struct, under the lock above.
        unsafe { (*ch.c()).refcnt += 1 };
    }
    let armed = Arc::new(AtomicBool::new(false));
    let obj = Obj::new(
        super::cq_ex_state::with_base(ibv_cq {
            context: c,
            channel,
            cq_context,
            handle: 0,
            cqe,
            mutex: mutex_init(),
            cond: cond_init(),
            comp_events_completed: 0,
            async_events_completed: 0,
        }),
        Cq {
            cq,
            armed: Arc::clone(&armed),
            channel: chan,
            _ctx: ctx,
            ex: Default::default(),
            events_reported: AtomicU32::new(0),
        },
    );
    if let Some(ch) = &obj.channel {
        let inner = Arc::clone(&ch.inner);
        let me = Arc::downgrade(&obj);
        obj.cq.set_event_hook(Box::new(move || {
            if armed.swap(false, Ordering::AcqRel) {
                inner
                    .fired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back(me.clone());
                let one: u64 = 1;
                // SAFETY: writing 8 bytes from a local to our eventfd (kept open by `inner`).
                unsafe {
                    libc::write(inner.fd, &one as *const u64 as *const c_void, EVENTFD_COUNT)
                };
            }
        }));
    }
    handle::publish(&obj)
}

/// `ibv_destroy_cq`: 0 or an errno value (EBUSY while QPs use it, or a call on another thread
/// does; EINVAL for a handle that is not a live CQ).
///
/// As rdma-core over the kernel: the CQ is destroyed first (no call reaches it any more, and
/// its events not yet read are dropped), then this waits until the application has
/// acknowledged (`ibv_ack_cq_events`, from any thread) every event `ibv_get_cq_event` returned
/// for it, so that an acknowledgement never meets a freed CQ (ibv_get_cq_event(3): "destroying
/// a CQ will wait for all completion events to be acknowledged"). An application that never
/// acknowledges them blocks here for good, as with rdma-core.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(p: *mut ibv_cq) -> c_int {
    let cq = match handle::retire::<Cq>(p, |_, _| Ok(())) {
        Ok(cq) => cq,
        Err(e) => return fail(e),
    };
    if let Some(ch) = &cq.channel {
        // Events of this CQ not yet read stay counted in the eventfd; drop their queue entries
        // (ibv_get_cq_event skips a count without one, as it skips a retiring CQ's).
        ch.inner
            .fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| !ptr::eq(w.as_ptr(), &*cq));
    }
    let c = cq.cq_c();
    // SAFETY: the mutex and condition variable of the retiring CQ's C struct, kept allocated
    // by `cq`; rdma-core and the shim touch `comp_events_completed` only under that mutex, and
    // `events_reported` is final: ibv_get_cq_event counts only for a live CQ, under the
    // registry lock, which `retire` took to mark it retiring.
    unsafe {
        let m = ptr::addr_of_mut!((*c).mutex);
        let _g = CMutexGuard::lock(m);
        let reported = cq.events_reported.load(Ordering::Relaxed);
        // rdma-core waits while the two differ; waiting only while fewer were acknowledged
        // than returned is the same for a program that acknowledges what it got, and does not
        // hang one that acknowledged more.
        while (reported.wrapping_sub(ptr::addr_of!((*c).comp_events_completed).read()) as i32) > 0 {
            libc::pthread_cond_wait(ptr::addr_of_mut!((*c).cond), m);
        }
    }
    // The last reference (see `handle::Retiring::finish`): the CQ is freed here.
    drop(cq.finish());
    0
}

/// The `req_notify_cq` op: arms the CQ; its next completion fires the channel, if any. Solicited-only
/// arming fires on any completion (a superset of what it asks for, as the verbs allow for
/// spurious events).
pub(super) unsafe extern "C" fn op_req_notify_cq(p: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    if p.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (crate doc): `p` is
    // a CQ the application has not destroyed, alive for this call; no registry lock per event.
    let cq = unsafe { Obj::<Cq>::trusted(p) };
    // Without a channel the arming has no one to tell; rxe accepts it all the same.
    cq.armed.store(true, Ordering::Release);
    cq.cq.expect_event();
    0
}

/// `ibv_get_cq_event`: waits (unless the fd is non-blocking) for an event; 0, or -1 and errno.
/// The channel is referenced for the wait, so destroying it meanwhile is EBUSY, not a
/// use-after-free. The event's CQ is looked up under the registry lock, and the event counted
/// there for `ibv_destroy_cq` to wait for: a CQ whose destroy has begun is skipped (its event
/// is dropped, as the kernel drops a destroyed CQ's), so a CQ returned here is one that
/// `ibv_destroy_cq` has not reported destroyed, and cannot until this event is acknowledged.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    let Some(chan) = handle::get::<Channel>(ch) else {
        return fail_neg(EINVAL);
    };
    if cq_out.is_null() || ctx_out.is_null() {
        return fail_neg(EINVAL);
    }
    loop {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a local.
        let n = unsafe {
            libc::read(
                chan.inner.fd,
                &mut v as *mut u64 as *mut c_void,
                EVENTFD_COUNT,
            )
        };
        if n != EVENTFD_COUNT as isize {
            return -1; // errno from read (EAGAIN on a non-blocking fd)
        }
        let next = chan
            .inner
            .fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        // An event of a CQ destroyed since has no entry, or one of a CQ no longer live: wait
        // for the next.
        let Some(pin) = next else {
            continue;
        };
        // A CQ's handle is the start of its allocation (its C struct's `ibv_cq`), which the
        // `Weak` points to with the allocation's provenance.
        let h = pin.as_ptr().cast_mut().cast::<ibv_cq>();
        let reg = handle::lock();
        let Some(cq) = reg.find_live::<Cq>(h, &pin) else {
            continue;
        };
        let c = cq.cq_c();
        // SAFETY: `cq` is live while `reg` is held; its mutex guards the count ibv_destroy_cq
        // waits on; `cq_context` is read raw. The caller's out-pointers were checked non-null
        // and are writable (the API's contract).
        unsafe {
            let _g = CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex));
            cq.events_reported.fetch_add(1, Ordering::Relaxed);
            *ctx_out = ptr::addr_of!((*c).cq_context).read();
            *cq_out = h;
        }
        return 0;
    }
}

/// Counts `nevents` acknowledged events of `cq` in `comp_events_completed` under its mutex and
/// signals its condition variable, as rdma-core does (a destroy may be waiting on it).
fn ack(cq: &Obj<Cq>, nevents: c_uint) {
    let c = cq.cq_c();
    // SAFETY: the mutex and condition variable of the CQ's C struct, which the caller keeps
    // allocated, and which rdma-core and the shim only touch under that mutex.
    unsafe {
        let _g = CMutexGuard::lock(ptr::addr_of_mut!((*c).mutex));
        let n = ptr::addr_of_mut!((*c).comp_events_completed);
        n.write(n.read().wrapping_add(nevents));
        libc::pthread_cond_signal(ptr::addr_of_mut!((*c).cond));
    }
}

/// `ibv_ack_cq_events`: counts the events in `comp_events_completed` under the CQ's mutex and
/// signals its condition variable, as rdma-core does. The CQ may be in `ibv_destroy_cq`,
/// which waits for this: it is found under the registry lock without a reference, which would
/// make that destroy's object outlive it. errno EINVAL for a handle that is not a CQ (void:
/// errno is all there is to tell with).
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(p: *mut ibv_cq, nevents: c_uint) {
    if !ack_cq_events_in(&handle::lock(), p, nevents) {
        fail(EINVAL);
    }
}

/// `ibv_ack_cq_events` with the registry already locked (the 1.0 layer's acknowledges its
/// own CQ in the same critical section); false if `p` is not a live or retiring CQ.
pub(crate) fn ack_cq_events_in(reg: &handle::Locked, p: *mut ibv_cq, nevents: c_uint) -> bool {
    match reg.find::<Cq>(p) {
        Some(cq) => {
            ack(cq, nevents);
            true
        }
        None => false,
    }
}

pub(super) fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let mut flags = 0;
    if w.grh {
        flags |= IBV_WC_GRH;
    }
    if w.imm_data.is_some() {
        flags |= IBV_WC_WITH_IMM;
    }
    // `ex.invalidate_rkey` shares `imm_data`'s place, in host order (rxe's provider), and is
    // what the extended CQ's read_imm_data (ibv_wc_read_invalidated_rkey) returns.
    if let Some(t) = w.tm {
        for (on, bit) in [
            (t.sync_req, IBV_WC_TM_SYNC_REQ),
            (t.matched, IBV_WC_TM_MATCH),
            (t.data_valid, IBV_WC_TM_DATA_VALID),
        ] {
            if on {
                flags |= bit;
            }
        }
    }
    let mut imm = w.imm_data.unwrap_or(0).to_be();
    if let Some(k) = w.invalidated_rkey {
        flags |= IBV_WC_WITH_INV;
        imm = k;
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_uint,
        opcode: w.opcode as c_uint,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        // The annex A17 L3 type in mlx5's place (WorkCompletion::sl).
        sl: w.sl(),
        dlid_path_bits: 0,
    }
}

/// The `poll_cq` op: completions moved, or -1 and errno (EINVAL for bad arguments, the CQ's
/// error, as EOVERFLOW for one that overflowed).
pub(super) unsafe extern "C" fn op_poll_cq(p: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if p.is_null() || n < 0 || (wc.is_null() && n > 0) {
        return fail_neg(EINVAL);
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (crate doc): `p` is
    // a CQ the application has not destroyed, which stays alive for this call.
    let cq = unsafe { Obj::<Cq>::trusted(p) };
    let got = cq.cq.poll_each(n as usize, |i, w| {
        // SAFETY: the caller's array holds n entries, and poll_each hands out at most n
        // (i < n).
        unsafe { wc.add(i).write(wc_to_c(&w)) };
    });
    match got {
        Ok(g) => g as c_int,
        Err(e) => fail_neg(errno_of(&e)),
    }
}
