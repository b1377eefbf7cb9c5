//! The state a device context's handles share with its engine thread: the QP table the
//! engine serves, the MR table, the doorbell and its waker, the counters. The verbs API
//! (above) holds an `Arc<Device>`; the engine (beside it) reads the same.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::cq::{CqDevice, CqInner};
use super::gsi::GsiShared;
use super::multicast::{GroupChange, Groups};
use super::standby::Standby;
use crate::ib::DeviceLimits;
use crate::ib::VerbsError;
use crate::transport::{Counters, MrTable, QpCore};

type Result<T> = core::result::Result<T, VerbsError>;

/// What the device and the threads that run its engine ask of the engine (engine.rs
/// implements it), so that this file does not import the engine, which serves the device.
/// Whoever holds `Device::engine`'s lock calls these.
pub(crate) trait Passes: Send + std::fmt::Debug {
    /// A whole pass: receive, serve, send everything.
    fn pass(&mut self);
    /// Busy-poll: an application thread's pass as it posts (sends may wait for its poll).
    fn pass_for_post(&mut self);
    /// Busy-poll: an application thread's pass as it polls a CQ.
    fn pass_for_application(&mut self);
    /// The default mode: a posting thread sends what it posted (no receive).
    fn pass_after_post(&mut self);
    /// Between the engine thread's passes: what its wait needs, the timer armed for it.
    fn plan_wait(&mut self) -> WaitPlan;
    /// Acknowledges the deadline timer's expiry.
    fn clear_timer(&mut self);
    /// Busy-poll: an application pass left packets for later.
    fn left_behind(&self) -> bool;
    /// The last pass before the engine stops, sending what it holds.
    fn finish(&mut self);
}

/// What the engine thread needs to know to wait between passes (engine_thread.rs), read
/// under the engine's lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitPlan {
    /// Work is ready now: poll without waiting.
    pub(crate) ready: bool,
    /// The earliest deadline: a spin does not go past it.
    pub(crate) next_wake: Option<std::time::Instant>,
    /// The poll's timeout when sleeping: None when the deadline timer is armed for
    /// `next_wake` (it wakes the poll), else until `next_wake`.
    pub(crate) sleep: Option<std::time::Duration>,
}

/// What the engine needs to know about a QP.
#[derive(Debug, Clone)]
pub(crate) struct QpEntry {
    pub(crate) core: Arc<Mutex<QpCore>>,
    pub(crate) send_cq: Arc<CqInner>,
    pub(crate) recv_cq: Arc<CqInner>,
}

/// State shared by the context's handles and its engine thread.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) local: SocketAddr,
    pub(crate) remote_port: u16,
    pub(crate) limits: DeviceLimits,
    pub(crate) counters: Arc<Counters>,
    pub(crate) mrs: RwLock<MrTable>,
    pub(crate) qps: RwLock<HashMap<u32, QpEntry>>,
    /// Bumped whenever `qps` changes, so that the engine refreshes its own copy of the table
    /// only then and looks QPs up without a lock on the packet path.
    pub(crate) qps_generation: AtomicU64,
    /// QPs with new work for the engine; the engine takes the whole list on each pass.
    pub(crate) doorbell: Mutex<Vec<u32>>,
    /// The engine is about to wait or waiting in poll: a doorbell must wake it. While it
    /// runs, it reads the doorbell before it next waits, so no wake (a system call) is needed.
    pub(crate) engine_sleeping: AtomicBool,
    /// The doorbell may have entries the engine has not taken: set by every ring, cleared by
    /// the engine before it takes the list, so that its spin before sleeping (engine_thread.rs `Waiter::wait`)
    /// notices a post with one load instead of the list's lock or the waker's system call.
    pub(crate) rung: AtomicBool,
    pub(crate) waker: mio::Waker,
    pub(crate) closed: AtomicBool,
    /// Busy-poll mode: the application threads drive the engine as they poll and post.
    pub(crate) busy_poll: bool,
    /// Posting threads send what they post (`posted`); off with `SOFTROCE_POST_SENDS=0`.
    pub(crate) post_sends: bool,
    /// The engine: whoever holds the lock runs a pass (the engine thread, a posting thread,
    /// or with busy-poll a polling one). Emptied when the context closes, which breaks the
    /// engine's reference back to the device.
    pub(crate) engine: Mutex<Option<Box<dyn Passes>>>,
    /// QP1: the connection manager's MADs.
    pub(crate) gsi: GsiShared,
    /// Engine passes completed (see `settle`).
    pub(crate) passes: AtomicU64,
    /// Passes application threads ran as they posted or (busy-poll) polled: in busy-poll
    /// mode, while they move, the background thread stays out of their way
    /// (engine_thread.rs `run_busy`). Waiters' passes in the default mode count in
    /// `standby` instead.
    pub(crate) app_passes: AtomicU64,
    /// The default mode's hand-over between the engine thread and a thread that waits on a
    /// CQ, which runs the engine meanwhile (standby.rs).
    pub(crate) standby: Standby,
    /// The multicast groups QPs are attached to (multicast.rs).
    pub(crate) groups: RwLock<Groups>,
    /// Sockets to start or stop receiving groups on, for the engine's link.
    group_changes: Mutex<Vec<GroupChange>>,
    /// `group_changes` has entries: the engine looks at it only then.
    pub(crate) groups_changed: AtomicBool,
    next_qpn: AtomicU32,
    next_handle: AtomicU32,
    /// The CQ of each XRC SRQ, by SRQ number: where an XRC target QP's receive completions go
    /// (`CqSide::Srq`).
    xrc_cqs: RwLock<HashMap<u32, Arc<CqInner>>>,
    /// The device's membership of its address's group (driver/group.rs), if it shares the
    /// address with other contexts; its slot is every QPN's top byte.
    pub(crate) member: Option<Arc<super::group::Member>>,
    /// The receiving socket's descriptor, which fork children must not keep (fork.rs).
    pub(crate) rx_fd: Option<i32>,
    /// The fork epoch the device was made in (fork.rs): in a child it is closed.
    epoch: u32,
}

impl Device {
    pub(crate) fn new(
        local: SocketAddr,
        remote_port: u16,
        waker: mio::Waker,
        busy_poll: bool,
    ) -> Device {
        Device {
            local,
            remote_port,
            limits: DeviceLimits::default(),
            counters: Arc::new(Counters::default()),
            mrs: RwLock::new(MrTable::new()),
            qps: RwLock::new(HashMap::new()),
            qps_generation: AtomicU64::new(0),
            doorbell: Mutex::new(Vec::new()),
            engine_sleeping: AtomicBool::new(false),
            rung: AtomicBool::new(false),
            waker,
            closed: AtomicBool::new(false),
            busy_poll,
            post_sends: !std::env::var_os("SOFTROCE_POST_SENDS").is_some_and(|v| v == "0"),
            passes: AtomicU64::new(0),
            app_passes: AtomicU64::new(0),
            standby: Standby::off(),
            groups: RwLock::new(Groups::default()),
            group_changes: Mutex::new(Vec::new()),
            groups_changed: AtomicBool::new(false),
            engine: Mutex::new(None),
            gsi: GsiShared::new(local),
            // rxe hands out QPNs from 17 (0x11) upwards; 0 and 1 are the special QPs.
            next_qpn: AtomicU32::new(0x11),
            next_handle: AtomicU32::new(1),
            xrc_cqs: RwLock::new(HashMap::new()),
            member: None,
            rx_fd: None,
            epoch: super::fork::epoch(),
        }
    }

    /// Makes the device a member of its address's group: its QPNs and communication IDs are
    /// numbered in the member's slot.
    pub(crate) fn set_member(&mut self, m: Arc<super::group::Member>, rx_fd: i32) {
        self.gsi.lock().cm.set_comm_id_tag(m.slot);
        self.member = Some(m);
        self.rx_fd = Some(rx_fd);
        super::fork::register(rx_fd);
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) || super::fork::is_inherited(self.epoch) {
            Err(VerbsError::DeviceClosed)
        } else {
            Ok(())
        }
    }

    /// Tells the engine that QP `qpn` has work.
    pub(crate) fn ring(&self, qpn: u32) {
        let was_empty = {
            let mut d = self.doorbell.lock().unwrap_or_else(|e| e.into_inner());
            let e = d.is_empty();
            d.push(qpn);
            e
        };
        if was_empty {
            self.rung.store(true, Ordering::Release);
        }
        // The engine sets `engine_sleeping` before it last looks at the doorbell and then
        // waits; SeqCst on both sides means that either it saw our entry or we see the flag.
        // A non-empty list was rung by someone who made the same check.
        if was_empty && self.engine_sleeping.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }

    /// After a post of QP `qpn` (a batch of WRs; `send` for send WRs). When the engine thread
    /// sleeps, the posting thread sends what it posted itself, as rxe's `post_send` runs the
    /// requester in the caller's system call, instead of waking it: a wake-up is a system
    /// call here and a context switch there (on a virtual machine an inter-processor
    /// interrupt as well), on the way of every reply of a ping-pong and of every request that
    /// waits for its answer. While the engine thread is awake (in a pass, or spinning for
    /// more work, `DeviceConfig::idle_spin`) the doorbell is as cheap and leaves the sends to
    /// it, which sends the posts of a stream in batches of `sendmmsg`: on the posting thread
    /// each post would be a system call (64-byte UD SENDs: 0.33 against 1.0-1.6 Mpps when
    /// every post sent its own, BENCHMARKS.md). Busy-poll: the ring and the busy-poll post
    /// pass (`drive`). `SOFTROCE_POST_SENDS=0` leaves every send to the engine thread (for
    /// comparison).
    pub(crate) fn posted(&self, qpn: u32, send: bool) {
        let engine_away = || {
            self.engine_sleeping.load(Ordering::SeqCst)
                || (self.standby.parked() && self.standby.take_post_turn())
        };
        if send && self.post_sends && !self.busy_poll && engine_away() {
            if let Ok(mut g) = self.engine.try_lock() {
                if let Some(e) = g.as_mut() {
                    // Taken by the pass below; nobody need be woken for it.
                    self.doorbell
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(qpn);
                    e.pass_after_post();
                    self.app_passes.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
        self.ring(qpn);
        if send {
            self.drive();
        }
    }

    /// In busy-poll mode, runs one engine pass on the calling (application) thread unless
    /// another thread is running one, and sends what it produced: for a post (a pass that does
    /// not receive, `Engine::pass_for_post`). Without busy-poll, nothing (the engine thread
    /// does the work).
    pub(crate) fn drive(&self) {
        self.drive_with(|e| e.pass_for_post());
    }

    /// [`drive`](Self::drive) for a CQ poll: packets produced along with completions go with
    /// the next pass (see `Engine::pass_for_application`).
    pub(crate) fn drive_for_poll(&self) {
        self.drive_with(|e| e.pass_for_application());
    }

    /// The default mode: a whole engine pass on a thread that waits on a CQ
    /// (`CqInner::wait`, standby.rs), unless another thread is running one.
    pub(crate) fn drive_for_wait(&self) {
        if let Ok(mut e) = self.engine.try_lock() {
            if let Some(e) = e.as_mut() {
                e.pass();
                self.standby.note_pass();
            }
        }
    }

    fn drive_with(&self, pass: fn(&mut dyn Passes)) {
        if !self.busy_poll {
            return;
        }
        if let Ok(mut e) = self.engine.try_lock() {
            if let Some(e) = e.as_mut() {
                pass(&mut **e);
                self.app_passes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Returns once the engine has run a whole pass begun after the call, or after `limit`:
    /// the work posted before the call has then been taken in and served as rxe's
    /// `post_send` serves it inline (a UD send is sent and completed). The pass in progress
    /// at the call may have taken the doorbell before that work was rung, hence two.
    pub(crate) fn settle(&self, limit: std::time::Duration) {
        let start = self.passes.load(Ordering::Acquire);
        let deadline = std::time::Instant::now() + limit;
        let mut seen = u64::MAX;
        loop {
            let now_at = self.passes.load(Ordering::Acquire);
            if now_at.wrapping_sub(start) >= 2
                || self.closed.load(Ordering::Acquire)
                || std::time::Instant::now() >= deadline
            {
                return;
            }
            if now_at != seen {
                // Once per pass seen: the engine may be asleep until a doorbell.
                seen = now_at;
                if self.busy_poll {
                    // A whole pass, which sends all it produced (a post's may hold some).
                    self.drive_with(|e| e.pass());
                } else {
                    let _ = self.waker.wake();
                    self.standby.wake();
                }
            }
            std::thread::yield_now();
        }
    }

    /// Stops the engine: marks the device closed, wakes the engine thread and waits for it,
    /// then sends what a busy-poll engine still holds and drops it.
    ///
    /// In a fork child, a device its parent opened has no engine here (fork.rs): it is only
    /// marked closed, and its engine, sockets and membership are left as they are.
    pub(crate) fn shut_down(&self, engine_thread: Option<std::thread::JoinHandle<()>>) {
        if super::fork::is_inherited(self.epoch) {
            self.closed.store(true, Ordering::Release);
            std::mem::forget(engine_thread);
            return;
        }
        if let Some(fd) = self.rx_fd {
            super::fork::unregister(fd);
        }
        self.closed.store(true, Ordering::Release);
        let _ = self.waker.wake();
        self.standby.wake();
        if let Some(h) = engine_thread {
            let _ = h.join();
        }
        let engine = self.engine.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut e) = engine {
            e.finish();
        }
        // The receiving socket is closed now (the engine owned it): the group is laid out
        // for those who stay.
        if let Some(m) = &self.member {
            m.leave();
        }
    }

    /// Adds a QP to the table the engine serves.
    pub(crate) fn add_qp(&self, qpn: u32, entry: QpEntry) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qpn, entry);
        self.qps_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Records the CQ of the XRC SRQ numbered `srqn`.
    pub(crate) fn add_xrc_cq(&self, srqn: u32, cq: Arc<CqInner>) {
        self.xrc_cqs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(srqn, cq);
    }

    /// Forgets the CQ of the XRC SRQ numbered `srqn` (its destroy).
    pub(crate) fn remove_xrc_cq(&self, srqn: u32) {
        self.xrc_cqs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&srqn);
    }

    /// Delivers an XRC target QP's receive completion to the CQ of the XRC SRQ numbered
    /// `srqn`; false if that SRQ is gone (the completion is then lost with it, as its WQE).
    pub(crate) fn push_xrc_wc(&self, srqn: u32, wc: crate::ib::WorkCompletion) -> bool {
        let cq = self
            .xrc_cqs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&srqn)
            .cloned();
        cq.map(|cq| cq.push_all([wc])).is_some()
    }

    /// Removes a QP from the table the engine serves.
    pub(crate) fn remove_qp(&self, qpn: u32) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
        self.qps_generation.fetch_add(1, Ordering::AcqRel);
        // The engine drops its copy of the entry on its next pass.
        self.ring(qpn);
    }

    /// Attaches QP `qpn` to the multicast group at `group` (multicast.rs): the group's
    /// first QP opens its socket, which the engine's link receives from from its next pass.
    pub(crate) fn attach_mcast(&self, qpn: u32, group: IpAddr) -> Result<()> {
        let port = self.local.port();
        let local = self.local.ip();
        let change = self
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .attach(&self.limits, group, qpn, || {
                super::udp::group_socket(group, port, local)
            })?;
        self.apply_group_changes(qpn, change);
        Ok(())
    }

    /// Detaches QP `qpn` from the multicast group at `group`; NotFound if it is not attached.
    pub(crate) fn detach_mcast(&self, qpn: u32, group: IpAddr) -> Result<()> {
        let change = self
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .detach(group, qpn)?;
        self.apply_group_changes(qpn, change);
        Ok(())
    }

    /// Detaches QP `qpn` from every group it is attached to.
    pub(crate) fn detach_all_mcast(&self, qpn: u32) {
        let changes = self
            .groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .detach_all(qpn);
        self.apply_group_changes(qpn, changes);
    }

    /// Hands group changes to the engine and wakes it (through QP `qpn`'s doorbell).
    fn apply_group_changes(&self, qpn: u32, changes: impl IntoIterator<Item = GroupChange>) {
        let mut q = self.group_changes.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        q.extend(changes);
        if q.len() > before {
            self.groups_changed.store(true, Ordering::Release);
            drop(q);
            self.ring(qpn);
        }
    }

    /// The group changes not yet taken by the engine.
    pub(crate) fn take_group_changes(&self) -> Vec<GroupChange> {
        self.groups_changed.store(false, Ordering::Release);
        std::mem::take(&mut *self.group_changes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A QP number not in use (rxe's scheme: counting up from 0x11), in the member's slot
    /// if the device shares its address: the slot is the QPN's top byte, by which the
    /// group's program steers the QP's packets here.
    pub(crate) fn alloc_qpn(&self) -> Result<u32> {
        let qps = self.qps.read().unwrap_or_else(|e| e.into_inner());
        let (base, span) = match &self.member {
            Some(m) => (u32::from(m.slot) << 16, 0x1_0000),
            None => (0, 0x100_0000),
        };
        for _ in 0..span {
            let n = base | (self.next_qpn.fetch_add(1, Ordering::Relaxed) & (span - 1));
            if n >= 2 && !qps.contains_key(&n) {
                return Ok(n);
            }
        }
        Err(VerbsError::ExceedsDeviceLimit {
            what: "queue pairs",
            requested: u64::from(span),
            limit: u64::from(span) - 2,
        })
    }

    /// Listens on CM service `service_id` (at most `backlog` requests undecided). On a shared
    /// address the group's table says which member listens, so that REQs for the service
    /// reach this process; AlreadyListening if another process listens on it.
    pub(crate) fn listen(
        &self,
        service_id: u64,
        backlog: usize,
    ) -> core::result::Result<(), crate::cm::CmError> {
        // The CM first: once the table names this member, a REQ that reaches it must find the
        // listener. The table after, without QP1's lock: the engine takes that lock for every
        // MAD, and the table's lock may be a while coming (another process holds it).
        self.gsi.lock().cm.listen(service_id, backlog)?;
        if let Some(m) = &self.member {
            if m.listen(service_id).is_err() {
                self.gsi.lock().cm.unlisten(service_id);
                return Err(crate::cm::CmError::AlreadyListening(service_id));
            }
        }
        Ok(())
    }

    /// Stops listening on CM service `service_id`.
    pub(crate) fn unlisten(&self, service_id: u64) {
        // The table first (see `listen`): a REQ the table still sends here finds the CM's
        // listener, or the CM's grace for a listener that went away.
        if let Some(m) = &self.member {
            m.unlisten(service_id);
        }
        self.gsi.lock().cm.unlisten(service_id);
    }

    /// A new PD handle.
    pub(crate) fn alloc_handle(&self) -> u32 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }
}

impl CqDevice for Device {
    fn busy_poll(&self) -> bool {
        self.busy_poll
    }
    fn max_cqe(&self) -> u32 {
        self.limits.max_cqe
    }
    fn drive_for_poll(&self) {
        Device::drive_for_poll(self);
    }
    fn settle(&self, limit: std::time::Duration) {
        Device::settle(self, limit);
    }
    fn begin_wait_drive(&self) -> Option<std::time::Duration> {
        self.standby.begin()
    }
    fn drive_for_wait(&self) {
        Device::drive_for_wait(self);
    }
    fn end_wait_drive(&self, sleeps: bool) {
        self.standby.end(sleeps);
    }
    fn posts_waiting(&self) -> bool {
        self.rung.load(Ordering::Acquire)
    }
    fn hand_back(&self) {
        if self.standby.parked() {
            self.standby.wake();
        }
    }
}

/// The device's node GUID: the EUI-64 of a locally administered MAC address 02:00:a:b:c:d
/// made from the device's IPv4 address (the last four bytes of an IPv6 one), with the
/// universal/local bit inverted as EUI-64 does (rxe derives its GUID the same way from the
/// netdev's MAC). CM messages carry it as the CA GUID; the shim's `ibv_get_device_guid` and
/// `ibv_query_device` report it.
pub fn node_guid(ip: std::net::IpAddr) -> u64 {
    let o = match ip {
        std::net::IpAddr::V4(v4) => v4.octets(),
        std::net::IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    const MAC_FIRST: u8 = 0x02;
    const UNIVERSAL_LOCAL: u8 = 0x02;
    u64::from_be_bytes([
        MAC_FIRST ^ UNIVERSAL_LOCAL,
        0x00,
        o[0],
        0xff,
        0xfe,
        o[1],
        o[2],
        o[3],
    ])
}

#[cfg(test)]
mod tests {
    use super::node_guid;

    #[test]
    fn node_guid_is_the_eui64_of_the_address_mac() {
        // MAC 02:00:0a:00:00:01 -> EUI-64 00:00:0a:ff:fe:00:00:01 (U/L bit flipped, ff:fe in
        // the middle), as rxe derives it for a netdev with that MAC.
        assert_eq!(
            node_guid("10.0.0.1".parse().unwrap()),
            0x0000_0aff_fe00_0001
        );
        assert_eq!(
            node_guid("fd00::c0a8:102".parse().unwrap()),
            0x0000_c0ff_fea8_0102
        );
    }
}
