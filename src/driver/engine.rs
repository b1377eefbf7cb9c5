//! The engine of a device context: owns the link (socket stack), the clock and the timers,
//! and runs the transport core of every QP. It sits in the device behind a lock, and
//! whoever holds the lock runs a pass: the device's engine thread (engine_thread.rs), which
//! waits in the poll set between passes; or an application thread, which sends the first
//! WRs posted to an idle QP itself (`pass_after_post`), as rxe's `post_send` runs the
//! requester in the caller's system call.
//!
//! One pass: receive a batch of datagrams and hand each to the transport's endpoint (which
//! checks it and feeds it to its QP, or gives back QP1's MADs for the CM), take the doorbell
//! list, pop due deadlines, and visit only the QPs so marked: each one's packets are taken out
//! (sealed by the endpoint) into the transmit batch and its completions delivered to its CQs,
//! and the batch is sent after the QP lock is released.
//!
//! Locks: a QP's mutex is shared with the application thread, which takes it to post and
//! query. The engine holds it only to feed one received packet or to copy at most one batch
//! of packets out of the QP, never across a system call, so a post waits at most for that.
//! The engine keeps its own copy of the QP table, refreshed only when the device's table
//! changed (a generation counter says so), so that the packet path takes no table lock.
//!
//! Busy-poll mode: the application threads run every pass as they poll and post
//! (`Device::drive`), so that a message crosses no thread on its way: as on a raw
//! busy-polling UDP socket, the one thread that waits for the answer is the one that
//! receives it. A background thread runs a pass every 50 us for timers and for packets that
//! arrive while nobody polls.
//!
//! Unreliable sends (UD, UC) complete when their last packet is made, as on rxe; the engine
//! holds those completions until the packets have been handed to the kernel, so that an
//! application that sees its last send complete and exits at once does not take the datagram
//! with it (rxe's datagram is in the kernel when the completion is written). Closing the
//! device sends what is still in the batch.
//!
//! Back-pressure: a send that fails with EAGAIN or ENOBUFS keeps its packets; the engine stops
//! taking packets out of QPs and waits until a transmit socket is writable again. Other send
//! errors lose the packet as the wire would, and retransmission recovers it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};

use super::cq::CqInner;
use super::device::{Device, Passes, WaitPlan};
use super::group::{Control, MadRoute, Member};
use super::gsi::GSI_QPN;
use super::link::{Link, RxBatch};
use super::multicast::GroupChange;
use super::qp_table::{lock, sync_table, EngineQps, QpTable};
use super::timer::Timer;
use super::tx::{Flushed, TxBatch};
use crate::ib::{QpType, WorkCompletion};
use crate::transport::{Counters, CqSide, DatagramEvent, Endpoint, IpFields};
use crate::wire::bth::MULTICAST_QPN;

/// How long a shared device holds a REQ for a service no member listens on (see
/// `Engine::retry_unclaimed`), and how often it looks for the listener meanwhile.
const UNCLAIMED_GRACE: Duration = Duration::from_millis(200);
const UNCLAIMED_RECHECK: Duration = Duration::from_millis(2);
/// REQs held so at most; more are refused at once (a flood of REQs for nothing).
const MAX_UNCLAIMED: usize = 32;

/// Token of the link's sockets in the poll set (readable: datagrams; writable: send space).
pub(crate) const SOCKET: Token = Token(0);
/// Token of the waker (doorbell).
pub(crate) const WAKER: Token = Token(1);
/// Token of the deadline timer.
pub(crate) const TIMER: Token = Token(2);
/// How long an application thread's passes may leave the packets of a completion (its ACK)
/// for the application's next post.
const DEFER_LIMIT: Duration = Duration::from_micros(20);
/// Who runs a pass, which decides what it receives and what it may leave unsent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// The engine's own thread (or the background thread of a busy-polling device): receives
    /// and sends everything.
    Engine,
    /// An application thread polling a CQ (busy-poll): receives; leaves the packets of what it
    /// completed (their ACKs) for the reply the application posts next, up to DEFER_LIMIT.
    Poll,
    /// An application thread posting (busy-poll): does not receive; leaves fewer than
    /// POST_BATCH packets for its next poll or post, up to DEFER_LIMIT.
    Post,
    /// An application thread posting in the default mode: does not receive, sends all it
    /// produced (no poll of its follows to send what it would leave).
    Send,
}

/// A busy-poll post's pass sends once this many packets wait, and otherwise leaves them for
/// the thread's next poll (or post): a program posting a burst sends it in a few `sendmmsg`
/// instead of one per post, and one that posts and then polls sends at its poll.
const POST_BATCH: usize = 16;

/// Datagrams received per pass before timers and transmission get a turn.
const RX_BATCH: usize = 32;
/// Room for a received datagram: the largest UDP payload, since with UDP GRO one datagram
/// carries up to 64 KiB of coalesced packets.
const RX_SLOT: usize = 65536;
/// Packets per received batch: enough for every slot to hold a coalesced datagram of as many
/// packets as UDP GRO puts in one (the kernel's UDP_GRO_CNT_MAX, 64), whatever their size.
/// With room for 16 per slot (enough only for 4 KiB packets), a batch of runs of smaller
/// packets lost every packet past the 512th without a counter; RC retransmitted them, UD and
/// UC could not.
const RX_PACKETS: usize = RX_BATCH * 64;
/// Packets one QP may produce per visit, so that one busy QP cannot starve the others.
const TX_BUDGET: usize = 256;
/// After EAGAIN, the longest wait for a writability event before trying again anyway.
const BACKPRESSURE_RETRY: Duration = Duration::from_micros(500);
/// How long closing the device waits for send space to send what is left in the batch.
const CLOSE_FLUSH_LIMIT: Duration = Duration::from_millis(200);

pub(crate) struct Engine {
    dev: Arc<Device>,
    /// Wakes the loop at the next deadline with microsecond resolution (timer.rs says why
    /// the poll timeout cannot).
    timer: Timer,
    link: Box<dyn Link + Send>,
    origin: Instant,
    /// When the current pass began: its one reading of the clock, for everything it does
    /// (timers are in milliseconds; a pass takes microseconds).
    pass_at: Instant,
    rx: RxBatch,
    /// The transport's demultiplexer for received datagrams.
    endpoint: Endpoint,
    tx: TxBatch,
    /// The engine's copy of the device's QP table, as of `generation`.
    qps: QpTable,
    generation: u64,
    /// QPs to visit: rung, received packets, deadline due, or not finished last time.
    work: VecDeque<u32>,
    /// QP deadlines, earliest first. An entry is live while it equals its QP's `armed`.
    deadlines: BinaryHeap<Reverse<(Duration, u32)>>,
    /// The doorbell list, swapped with the device's on each pass to keep both allocations.
    bell: Vec<u32>,
    send_wc: Vec<WorkCompletion>,
    recv_wc: Vec<WorkCompletion>,
    /// Send completions of UD and UC QPs whose packets are still in the transmit batch:
    /// delivered once the batch has gone to the kernel (see the module's comment).
    held_wc: Vec<(Arc<CqInner>, WorkCompletion)>,
    /// The last send hit EAGAIN or ENOBUFS: wait for send space before taking more packets.
    blocked: bool,
    /// The last receive filled the batch: more may be waiting.
    more_rx: bool,
    /// The current pass delivered completions.
    delivered: bool,
    /// When an application thread's pass first left its packets for a later one
    /// (`pass_for_application`); None when nothing waits.
    deferred_at: Option<Instant>,
    /// Whether the packets held (`deferred_at`) include a busy-poll post's: the next poll
    /// sends them first.
    post_held: bool,
    /// QP1 has received MADs or been given some to send.
    gsi_due: bool,
    /// QP1's next deadline, as of the last time the engine served it (only the engine moves
    /// it, except through calls that ring the doorbell).
    gsi_deadline: Option<Instant>,
    /// The UDP source port QP1 sends from, once the link has prepared it.
    gsi_port: Option<u16>,
    /// A shared device's REQs for services no member listens on yet, each with when it is
    /// given up and handed to this member's CM (see `retry_unclaimed`).
    unclaimed: Vec<(Instant, SocketAddr, [u8; crate::wire::mad::LEN])>,
    /// When `unclaimed` is looked at next.
    unclaimed_check: Option<Instant>,
    /// The link sends payloads from their regions (`Link::gathers`): RC payloads are not
    /// copied into the transmit batch.
    gather: bool,
    /// The device's membership of a shared address's group (driver/group.rs).
    member: Option<Arc<Member>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("local", &self.dev.local)
            .field("qps", &self.qps.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(crate) fn new(
        dev: Arc<Device>,
        registry: &Registry,
        link: Box<dyn Link + Send>,
    ) -> io::Result<Engine> {
        let mut timer = Timer::new()?;
        registry.register(&mut timer, TIMER, Interest::READABLE)?;
        let endpoint = Endpoint::new(dev.local, dev.remote_port, Arc::clone(&dev.counters));
        let gather = link.gathers();
        Ok(Engine {
            member: dev.member.clone(),
            dev,
            timer,
            link,
            origin: Instant::now(),
            pass_at: Instant::now(),
            rx: RxBatch::new(RX_BATCH, RX_SLOT, RX_PACKETS),
            endpoint,
            tx: TxBatch::new(),
            qps: QpTable::default(),
            generation: u64::MAX,
            work: VecDeque::new(),
            deadlines: BinaryHeap::new(),
            bell: Vec::new(),
            send_wc: Vec::new(),
            recv_wc: Vec::new(),
            held_wc: Vec::new(),
            blocked: false,
            more_rx: false,
            delivered: false,
            deferred_at: None,
            post_held: false,
            gsi_due: false,
            gsi_deadline: None,
            gsi_port: None,
            unclaimed: Vec::new(),
            unclaimed_check: None,
            gather,
        })
    }

    /// Sets the device's congestion control (the endpoint applies it to every QP).
    pub(crate) fn set_congestion_control(&mut self, cc: crate::transport::cc::CcConfig) {
        self.endpoint.set_congestion_control(cc);
    }

    /// The current pass's time since the engine's origin (see `pass_at`).
    fn now(&self) -> Duration {
        self.pass_at.saturating_duration_since(self.origin)
    }

    /// Before the engine stops: one last pass, so that work requests posted before the
    /// device was closed are sent (rxe's post_send runs the requester before it returns, so a
    /// datagram posted and then closed on still leaves), then what is left in the transmit
    /// batch, waiting a bounded while for send space; and the completions held for it.
    pub(crate) fn finish(&mut self) {
        self.pass();
        let give_up = Instant::now() + CLOSE_FLUSH_LIMIT;
        loop {
            self.blocked = false;
            self.flush();
            if !self.tx.pending() || Instant::now() >= give_up {
                break;
            }
            std::thread::sleep(BACKPRESSURE_RETRY);
        }
        self.release_held();
    }

    /// One pass without waiting: send what back-pressure held, receive a batch, take the
    /// doorbell, fire due deadlines, visit the QPs with work, send.
    pub(crate) fn pass(&mut self) {
        self.pass_inner(Pass::Engine);
    }

    /// A pass run by an application thread in busy-poll mode as it posts: what the post rang is
    /// served and sent (with any ACK a poll left for it), but nothing is received. On the way
    /// from a completion to its reply that would be one more `recvmmsg` before the reply
    /// leaves, almost always finding nothing; the thread's next poll receives.
    pub(crate) fn pass_for_post(&mut self) {
        self.pass_inner(Pass::Post);
    }

    /// A pass run by an application thread in busy-poll mode. If it delivered completions,
    /// the packets it produced (typically the ACK of what just completed) are not sent yet:
    /// the thread returns to the application with the completion at once, and the packets go
    /// with the pass of the application's next post, in the same system call as its reply, or
    /// with the first application pass after 20 us, or from the background thread.
    pub(crate) fn pass_for_application(&mut self) {
        self.pass_inner(Pass::Poll);
    }

    fn pass_inner(&mut self, kind: Pass) {
        self.pass_at = Instant::now();
        // What a post left is sent before anything else the poll does (its receive first of
        // all): it is the reply the program is waiting on.
        if kind == Pass::Poll && self.post_held {
            self.post_held = false;
            self.deferred_at = None;
            self.flush();
        }
        if self.blocked && self.tx.pending() {
            self.blocked = false;
            self.flush();
        }
        // After a wait: a QP created meanwhile may already be rung or addressed.
        self.sync_qps();
        if self.dev.groups_changed.load(Ordering::Acquire) {
            self.change_groups();
        }
        if kind != Pass::Post {
            self.more_rx = self.receive();
        }
        self.take_doorbell();
        self.fire_deadlines();
        self.delivered = false;
        self.service_work();
        self.retry_unclaimed();
        self.service_gsi();
        // An application pass that delivered completions leaves its packets (the ACK of what
        // completed) for the reply the application posts next, which sends them in the same
        // system call; so do the passes that follow it (the application often polls once more
        // before it posts), for at most DEFER_LIMIT from the first.
        let within_limit = self.deferred_at.map_or(true, |t| t.elapsed() < DEFER_LIMIT);
        let keep = match kind {
            Pass::Poll => {
                self.tx.pending() && (self.delivered || self.deferred_at.is_some()) && within_limit
            }
            Pass::Post => self.tx.pending() && self.tx.waiting() < POST_BATCH && within_limit,
            Pass::Engine | Pass::Send => false,
        };
        if keep {
            self.deferred_at.get_or_insert_with(Instant::now);
            self.post_held |= kind == Pass::Post;
        } else {
            self.deferred_at = None;
            self.post_held = false;
            self.flush();
        }
        self.dev.passes.fetch_add(1, Ordering::Release);
    }

    /// How long poll may sleep: until the earliest deadline (the timerfd wakes us; without
    /// it, the poll timeout does with millisecond resolution), or a short while when sends
    /// are blocked.
    fn sleep_timeout(&mut self) -> Option<Duration> {
        let now = Instant::now();
        let next = self.next_wake(now);
        if self.timer.fire_by(next, now).is_err() {
            next.map(|at| at.saturating_duration_since(now))
        } else {
            None
        }
    }

    /// When the engine must run next with nothing arriving: its earliest deadline, the
    /// link's (an impairment's delayed packet), QP1's, or a retry of blocked sends.
    fn next_wake(&self, now: Instant) -> Option<Instant> {
        let mut next = self.link.poll_timeout();
        if let Some(Reverse((t, _))) = self.deadlines.peek() {
            let at = self.origin + *t;
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        if let Some(at) = self.gsi_deadline {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        if let Some(at) = self.unclaimed_check {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        if self.blocked {
            let at = now + BACKPRESSURE_RETRY;
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        next
    }

    /// Refreshes the engine's copy of the QP table if the device's changed.
    fn sync_qps(&mut self) {
        let g = self.dev.qps_generation.load(Ordering::Acquire);
        if g == self.generation {
            return;
        }
        sync_table(&self.dev, &mut self.generation, &mut self.qps);
    }

    /// Puts `qpn` on the work list unless it is there already.
    fn enqueue(qps: &mut QpTable, work: &mut VecDeque<u32>, qpn: u32) {
        if let Some(q) = qps.get_mut(&qpn) {
            if !q.queued {
                q.queued = true;
                work.push_back(qpn);
            }
        }
    }

    fn take_doorbell(&mut self) {
        // Cleared before the list is taken: a ring after this sets it again (Device::ring),
        // one before it at worst leaves it set for an empty look.
        self.dev.rung.store(false, Ordering::Release);
        std::mem::swap(
            &mut *self.dev.doorbell.lock().unwrap_or_else(|e| e.into_inner()),
            &mut self.bell,
        );
        // A QP is added to the table before anyone can ring it, so after taking the doorbell
        // the table holds every QP rung: refresh the copy, or the first ring of a QP created
        // since the pass began would find no entry and be lost (its work never served).
        self.sync_qps();
        for &qpn in &self.bell {
            if qpn == GSI_QPN {
                self.gsi_due = true;
            }
            Self::enqueue(&mut self.qps, &mut self.work, qpn);
        }
        self.bell.clear();
    }

    fn fire_deadlines(&mut self) {
        let now = self.now();
        while let Some(&Reverse((t, qpn))) = self.deadlines.peek() {
            if t > now {
                break;
            }
            self.deadlines.pop();
            if let Some(q) = self.qps.get_mut(&qpn) {
                if q.armed == Some(t) {
                    q.armed = None;
                    Self::enqueue(&mut self.qps, &mut self.work, qpn);
                }
            }
        }
    }

    /// Starts and stops receiving the multicast groups that QPs were attached to or detached
    /// from since the last pass. A link that cannot receive a group (a test's) drops its
    /// socket: the group's datagrams then reach nobody here, as on a device without
    /// multicast.
    fn change_groups(&mut self) {
        for c in self.dev.take_group_changes() {
            match c {
                GroupChange::Join(group, socket) => {
                    let _ = self.link.join_group(group, socket);
                }
                GroupChange::Leave(group) => self.link.leave_group(group),
            }
        }
    }

    /// Receives a batch and hands each datagram to the transport's endpoint, which checks it
    /// and feeds it to its QP (or gives back QP1's). Returns true if the batch was full (more
    /// may be waiting).
    fn receive(&mut self) -> bool {
        if self.link.recv_batch(self.pass_at, &mut self.rx).is_err() {
            return false;
        }
        let now = self.now();
        let mut qps = EngineQps {
            dev: &self.dev,
            generation: &mut self.generation,
            qps: &mut self.qps,
        };
        // The QP the last datagram was queued for, while the table has not been refreshed:
        // a burst to one QP looks it up to queue it once, not once per datagram.
        let mut queued: Option<(u32, u64)> = None;
        for i in 0..self.rx.len() {
            let (d, payload) = self.rx.get(i);
            // A shared device's own datagrams (probes, forwarded MADs) carry the group's
            // secret; anything else that starts as they do goes to the transport, which counts
            // it.
            let mut foreign = None;
            if let Some(m) = &self.member {
                match m.control(payload) {
                    Control::Answered => continue,
                    Control::Mad(from, mad) => {
                        self.dev.gsi.lock().handle_mad(from, mad);
                        self.gsi_due = true;
                        continue;
                    }
                    Control::NotOurs => {}
                }
                foreign = foreign_qpn(m, payload).map(|qpn| {
                    (
                        qpn,
                        self.dev.counters.unknown_qp_pkts.load(Ordering::Relaxed),
                    )
                });
            }
            let ip = IpFields {
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            };
            match self
                .endpoint
                .handle(now, d.src, d.dst, ip, payload, &mut qps)
            {
                Some(DatagramEvent::Qp(qpn)) => {
                    let key = (qpn, *qps.generation);
                    if queued != Some(key) {
                        Self::enqueue(qps.qps, &mut self.work, qpn);
                        queued = Some(key);
                    }
                }
                Some(DatagramEvent::Multicast(members)) => {
                    for &qpn in members.as_slice() {
                        Self::enqueue(qps.qps, &mut self.work, qpn);
                    }
                }
                None => {
                    // A valid packet for another member's QP reached this one: the group's
                    // program steers by a stale layout (a member left without laying the
                    // group out anew: killed). Counted (a subset of unknown_qp_pkts) and
                    // reported; the sender retransmits once the group is laid out anew.
                    if let (Some((qpn, before)), Some(m)) = (foreign, &self.member) {
                        let c = &self.dev.counters;
                        if c.unknown_qp_pkts.load(Ordering::Relaxed) > before {
                            Counters::inc(&c.misrouted_pkts);
                            m.misrouted(qpn);
                        }
                    }
                }
                Some(DatagramEvent::Mad { from, mad }) => {
                    // A shared device's CM messages go to the member they are for.
                    if let Some(m) = &self.member {
                        match m.route(mad) {
                            MadRoute::Member(slot) if m.forward(slot, from, mad) => {
                                Counters::inc(&self.dev.counters.forwarded_mads);
                                continue;
                            }
                            MadRoute::Nobody if self.unclaimed.len() < MAX_UNCLAIMED => {
                                if let Ok(copy) = mad.try_into() {
                                    let at = Instant::now() + UNCLAIMED_GRACE;
                                    self.unclaimed.push((at, from, copy));
                                    self.unclaimed_check.get_or_insert(Instant::now());
                                    continue;
                                }
                            }
                            _ => {}
                        }
                    }
                    self.dev.gsi.lock().handle_mad(from, mad);
                    self.gsi_due = true;
                }
            }
        }
        self.rx.is_full()
    }

    /// Visits the QPs on the work list once each (those that still have work go to the back
    /// for the next pass). What is left in the batch is for the caller to send.
    fn service_work(&mut self) {
        for _ in 0..self.work.len() {
            if self.blocked {
                break;
            }
            let Some(qpn) = self.work.pop_front() else {
                break;
            };
            let Some(q) = self.qps.get_mut(&qpn) else {
                continue;
            };
            q.queued = false;
            if self.service_qp(qpn) {
                Self::enqueue(&mut self.qps, &mut self.work, qpn);
            }
        }
    }

    /// Fires the QP's timer if due, takes its packets out into the transmit batch (sending
    /// the batch whenever it fills, with the QP unlocked), delivers its completions and arms
    /// its next deadline. Returns true when the QP has more to send than its budget allowed
    /// or than send space took.
    fn service_qp(&mut self, qpn: u32) -> bool {
        let mut budget = TX_BUDGET;
        loop {
            let now = self.now();
            let Some(q) = self.qps.get_mut(&qpn) else {
                return false;
            };
            let mut full = false;
            let unreliable;
            let deadline = {
                let mut core = lock(&q.entry.core);
                unreliable = matches!(core.qp_type(), QpType::Ud | QpType::Uc);
                if core.poll_timeout().is_some_and(|t| t <= now) {
                    core.handle_timeout(now);
                }
                if core.sends() {
                    let want = core.src_port();
                    if q.port != Some(want) {
                        match self.link.prepare_source_port(want) {
                            Ok(got) => {
                                core.set_src_port(got);
                                q.port = Some(got);
                            }
                            Err(_) => Counters::inc(&self.dev.counters.send_err),
                        }
                    }
                    while budget > 0 {
                        let Some(slot) = self.tx.free_slot() else {
                            full = true;
                            break;
                        };
                        let (t, g) = if self.gather {
                            match self.endpoint.poll_transmit_gather(now, &mut core, slot) {
                                Some(tg) => tg,
                                None => break,
                            }
                        } else {
                            match self.endpoint.poll_transmit(now, &mut core, slot) {
                                Some(t) => (t, None),
                                None => break,
                            }
                        };
                        self.tx.meta.push(t);
                        self.tx.ids.push(0);
                        self.tx.gathers.push(g);
                        budget -= 1;
                    }
                }
                while let Some((side, wc)) = core.poll_completion() {
                    match side {
                        CqSide::Send => self.send_wc.push(wc),
                        CqSide::Recv => self.recv_wc.push(wc),
                        CqSide::Srq(n) => self.delivered |= self.dev.push_xrc_wc(n, wc),
                    }
                }
                core.poll_timeout()
            };
            if !self.send_wc.is_empty() {
                if unreliable && self.tx.pending() {
                    let cq = &q.entry.send_cq;
                    self.held_wc
                        .extend(self.send_wc.drain(..).map(|wc| (Arc::clone(cq), wc)));
                } else {
                    q.entry.send_cq.push_all(self.send_wc.drain(..));
                    self.delivered = true;
                }
            }
            if !self.recv_wc.is_empty() {
                q.entry.recv_cq.push_all(self.recv_wc.drain(..));
                self.delivered = true;
            }
            if let Some(t) = deadline {
                if q.armed.map_or(true, |a| t < a) {
                    q.armed = Some(t);
                    self.deadlines.push(Reverse((t, qpn)));
                }
            }
            if budget == 0 {
                return true;
            }
            if !full {
                return false;
            }
            self.flush();
            if self.blocked {
                return true;
            }
            // A full batch's send took real time: what the QP sends next (a paced QP's
            // tokens) is reckoned from after it.
            self.pass_at = Instant::now();
        }
    }

    /// Routes again the REQs that found no listener in the group (`unclaimed`), every
    /// `UNCLAIMED_RECHECK`: one whose listener has registered meanwhile goes to it; one still
    /// unclaimed after `UNCLAIMED_GRACE` goes to this member's CM, which refuses it. The
    /// kernel's CM refuses a REQ that comes before the listen at once; a shared device's listen
    /// (the group's table, under its lock) takes longer than the kernel's, and a server that
    /// tells its client its port before it listens (Debian's qperf 0.4.11) must not lose the
    /// race for that.
    fn retry_unclaimed(&mut self) {
        let (Some(m), Some(check)) = (&self.member, self.unclaimed_check) else {
            return;
        };
        let now = Instant::now();
        if now < check {
            return;
        }
        let mut i = 0;
        while i < self.unclaimed.len() {
            let (until, from, mad) = self.unclaimed[i];
            let done = match m.route(&mad) {
                MadRoute::Member(slot) if m.forward(slot, from, &mad) => {
                    Counters::inc(&self.dev.counters.forwarded_mads);
                    true
                }
                MadRoute::Nobody if now < until => false,
                _ => {
                    self.dev.gsi.lock().handle_mad(from, &mad);
                    self.gsi_due = true;
                    true
                }
            };
            if done {
                self.unclaimed.swap_remove(i);
            } else {
                i += 1;
            }
        }
        self.unclaimed_check = (!self.unclaimed.is_empty()).then(|| now + UNCLAIMED_RECHECK);
    }

    /// Serves QP1 when it received MADs, was given some to send, or has a deadline due: runs
    /// the CM's timers, takes its MADs into the transmit batch and wakes API calls waiting for
    /// CM events.
    fn service_gsi(&mut self) {
        let due = self.gsi_deadline.is_some_and(|d| d <= self.pass_at);
        if !(self.gsi_due || due) {
            return;
        }
        self.gsi_due = false;
        let port = match self.gsi_port {
            Some(p) => p,
            None => match self.link.prepare_source_port(Endpoint::gsi_src_port()) {
                Ok(p) => *self.gsi_port.insert(p),
                Err(_) => {
                    Counters::inc(&self.dev.counters.send_err);
                    Endpoint::gsi_src_port()
                }
            },
        };
        let mut g = self.dev.gsi.lock();
        g.handle_timeout();
        loop {
            let Some(slot) = self.tx.free_slot() else {
                self.gsi_due = true;
                break;
            };
            let Some(out) = g.cm.poll_transmit() else {
                break;
            };
            let Some(t) = self.endpoint.transmit_mad(out.to, &out.mad, port, slot) else {
                continue;
            };
            self.tx.meta.push(t);
            self.tx.ids.push(0);
            self.tx.gathers.push(None);
        }
        self.gsi_deadline = g.deadline();
        drop(g);
        self.dev.gsi.events.notify_all();
    }

    /// Sends the batch's pending packets (tx.rs); stops at back-pressure, keeping the rest,
    /// and delivers the held completions once everything left.
    fn flush(&mut self) {
        let ipv4 = self.dev.local.is_ipv4();
        match self
            .tx
            .flush(&mut *self.link, self.gather, &self.dev.counters, ipv4)
        {
            Flushed::All => self.release_held(),
            Flushed::Blocked => self.blocked = true,
            Flushed::Nothing => {}
        }
    }

    /// Delivers the send completions held until their packets left (consecutive ones of the
    /// same CQ in one push).
    fn release_held(&mut self) {
        if self.held_wc.is_empty() {
            return;
        }
        // The run buffer borrows `send_wc`'s allocation (empty outside `service_qp`).
        let mut run = std::mem::take(&mut self.send_wc);
        let mut held = self.held_wc.drain(..).peekable();
        while let Some((cq, wc)) = held.next() {
            run.push(wc);
            while let Some((_, wc)) = held.next_if(|(next, _)| Arc::ptr_eq(next, &cq)) {
                run.push(wc);
            }
            cq.push_all(run.drain(..));
        }
        drop(held);
        self.send_wc = run;
    }
}

impl Passes for Engine {
    fn pass(&mut self) {
        Engine::pass(self)
    }
    fn pass_for_post(&mut self) {
        Engine::pass_for_post(self)
    }
    fn pass_for_application(&mut self) {
        Engine::pass_for_application(self)
    }
    /// A pass run by an application thread in the default mode as it posts: serves what the
    /// post rang and sends it all, on the posting thread, without receiving (the engine
    /// thread receives). The engine thread may be waiting meanwhile with a plan made before
    /// this pass: the deadline timer is moved earlier for a deadline this pass set (the first
    /// packet's retransmission timer), and work this pass left (a QP past its budget) rings
    /// the doorbell, which wakes it.
    fn pass_after_post(&mut self) {
        self.pass_inner(Pass::Send);
        let now = Instant::now();
        let next = self.next_wake(now);
        if next.is_some() && self.timer.fire_by(next, now).is_err() {
            let _ = self.dev.waker.wake();
        }
        if let Some(&qpn) = self.work.front() {
            self.dev.ring(qpn);
        }
    }

    /// Under the engine's lock, between passes: what the engine thread's wait needs
    /// (engine_thread.rs), with the deadline timer armed for the earliest deadline.
    fn plan_wait(&mut self) -> WaitPlan {
        WaitPlan {
            ready: self.more_rx || (!self.work.is_empty() && !self.blocked),
            next_wake: self.next_wake(Instant::now()),
            sleep: self.sleep_timeout(),
        }
    }

    /// Acknowledges the deadline timer's expiry (the engine thread's poll reported it).
    fn clear_timer(&mut self) {
        self.timer.clear();
    }

    /// Whether an application thread's pass left packets for later (busy-poll).
    fn left_behind(&self) -> bool {
        self.deferred_at.is_some()
    }

    fn finish(&mut self) {
        Engine::finish(self)
    }
}

/// The destination QPN of `payload` if it names another member's slot of `m`'s group (not
/// QP1 or the multicast QPN, which are every member's).
fn foreign_qpn(m: &Member, payload: &[u8]) -> Option<u32> {
    let q = payload.get(5..8)?;
    let qpn = u32::from_be_bytes([0, q[0], q[1], q[2]]);
    let ours = qpn == GSI_QPN || qpn == MULTICAST_QPN || super::steering::qpn_slot(qpn) == m.slot;
    (!ours).then_some(qpn)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
