//! The threads that run a device's engine when no application thread does: the engine thread
//! of a device in the default mode, which waits in the poll set between passes, and the
//! background thread of a busy-polling device.
//!
//! In both modes the engine sits in the device (`Device::engine`), and whoever holds its lock
//! runs a pass: the engine thread, or an application thread as it posts (`Device::drive`):
//! the thread that posts sends what it posted, as rxe's `post_send` runs the requester in the
//! caller's system call, and the engine thread is woken only when nobody else is running the
//! engine (BENCHMARKS.md, "the posting thread sends"). The engine thread therefore waits
//! without the lock: what it needs from the engine to wait (whether work is ready, when the
//! next deadline falls) is read under the lock, with the deadline timer armed for it; a pass
//! run meanwhile by another thread re-arms the timer for an earlier deadline and rings the
//! doorbell for work it leaves (`Engine::pass_after_post`), so the wait never oversleeps.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

use super::device::{Device, WaitPlan};
use super::engine::TIMER;
use super::standby::{PARK_FIRST, PARK_MAX};

/// A wait that ended within this many `idle_spin`s of its start means spinning pays: the
/// next wait spins first (see `Waiter::wait`).
const SPIN_PAYS_WITHIN: u32 = 4;
/// How often the background thread of a busy-polling device runs a pass.
const BUSY_BACKGROUND_PERIOD: Duration = Duration::from_micros(50);
/// How long it sleeps while application threads run passes themselves, at first; the sleep
/// doubles while they keep doing so, up to `BUSY_BACKGROUND_IDLE_MAX`.
const BUSY_BACKGROUND_IDLE: Duration = Duration::from_micros(500);
/// The longest sleep of the background thread while application threads run passes and
/// leave nothing for it.
const BUSY_BACKGROUND_IDLE_MAX: Duration = Duration::from_millis(4);

/// How an engine's spin before sleeping ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spin {
    /// An event in the poll set, or a doorbell.
    Found,
    /// Nothing within the spin: sleep.
    Idle,
    /// The poll set broke (the device is closed).
    Broken,
}

/// The engine thread's side of the poll set: what it waits on between passes.
struct Waiter {
    poll: Poll,
    events: Events,
    /// How long a wait may spin before it sleeps (`DeviceConfig::idle_spin`).
    idle_spin: Duration,
    /// The last wait ended soon enough after it began that spinning would have caught it:
    /// the next wait spins.
    spin_pays: bool,
    /// The deadline timer fired during the last wait: the next pass clears it.
    timer_fired: bool,
}

/// The engine thread of a device in the default mode: passes under the engine's lock, waits
/// in the poll set without it, until the device is closed (`Device::shut_down` then runs the
/// engine's last pass).
pub(crate) fn run(dev: Arc<Device>, poll: Poll, idle_spin: Duration) {
    let mut w = Waiter {
        poll,
        events: Events::with_capacity(64),
        idle_spin: idle_spin.min(super::MAX_IDLE_SPIN),
        spin_pays: true,
        timer_fired: false,
    };
    let mut park = PARK_FIRST;
    let mut standing_by = false;
    let mut seen = dev.standby.passes();
    while !dev.closed.load(Ordering::Acquire) {
        let now = dev.standby.passes();
        let moved = now != seen;
        seen = now;
        if standing_by || moved || dev.standby.driven() {
            // Threads waiting on CQs run the passes (standby.rs): stand by, longer while they
            // keep running them, until the last one goes to sleep or they stop.
            let woken = dev.standby.park(park);
            let now = dev.standby.passes();
            let moved = now != seen;
            seen = now;
            if !woken && moved {
                standing_by = true;
                park = (park * 2).min(PARK_MAX);
                continue;
            }
            standing_by = false;
            park = PARK_FIRST;
        }
        let plan = {
            let mut g = dev.engine.lock().unwrap_or_else(|e| e.into_inner());
            let Some(e) = g.as_mut() else { break };
            if std::mem::take(&mut w.timer_fired) {
                e.clear_timer();
            }
            e.pass();
            e.plan_wait()
        };
        if !w.wait(&dev, plan) {
            break;
        }
    }
}

impl Waiter {
    /// Waits in poll until there is something to do; returns false if the poll set broke.
    ///
    /// With nothing ready, the engine first spins for up to `idle_spin` (never past its next
    /// deadline), looking at the poll set without sleeping and at the doorbell's flag,
    /// yielding the CPU between looks to any other thread that wants it. A sleeping engine
    /// costs every packet that finds it asleep a wake-up (a context switch: 10-20 us on this
    /// kind of machine), which is what bounded a blocking ping-pong's latency and a
    /// window-limited message rate. It spins only while that pays: after a wait that lasted
    /// longer than `SPIN_PAYS_WITHIN` spins, the next one sleeps at once, so an idle device,
    /// or one whose peer answers in milliseconds (rxe in an emulated guest), takes no CPU for
    /// it.
    fn wait(&mut self, dev: &Device, plan: WaitPlan) -> bool {
        if plan.ready {
            return self.poll_once(dev, Some(Duration::ZERO));
        }
        let began = Instant::now();
        if self.spin_pays && !self.idle_spin.is_zero() {
            match self.spin(dev, began, plan.next_wake) {
                Spin::Found => return true,
                Spin::Broken => return false,
                Spin::Idle => {}
            }
        }
        let r = self.sleep(dev, plan.sleep);
        self.spin_pays = began.elapsed() <= self.idle_spin * SPIN_PAYS_WITHIN;
        r
    }

    /// Spins for up to `idle_spin` from `began` (and not past `next_wake`) until the poll set
    /// has an event or the doorbell was rung.
    fn spin(&mut self, dev: &Device, began: Instant, next_wake: Option<Instant>) -> Spin {
        let mut until = began + self.idle_spin;
        if let Some(at) = next_wake {
            until = until.min(at);
        }
        loop {
            if dev.rung.load(Ordering::Acquire) || dev.standby.driven() {
                return Spin::Found;
            }
            if !self.poll_once(dev, Some(Duration::ZERO)) {
                return Spin::Broken;
            }
            if !self.events.is_empty() {
                return Spin::Found;
            }
            if Instant::now() >= until {
                return Spin::Idle;
            }
            std::thread::yield_now();
        }
    }

    /// Sleeps in poll until a datagram, a doorbell or the timer (or `timeout`, where the
    /// timer could not be armed).
    fn sleep(&mut self, dev: &Device, timeout: Option<Duration>) -> bool {
        // From here on, a doorbell wakes us (see Device::ring); look at it once more.
        dev.engine_sleeping.store(true, Ordering::SeqCst);
        let rung = !dev
            .doorbell
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        let r = self.poll_once(dev, if rung { Some(Duration::ZERO) } else { timeout });
        dev.engine_sleeping.store(false, Ordering::SeqCst);
        r
    }

    /// One poll of the poll set; returns false if it broke (then the device is closed, so
    /// that callers get DeviceClosed instead of hanging).
    fn poll_once(&mut self, dev: &Device, timeout: Option<Duration>) -> bool {
        if let Err(e) = self.poll.poll(&mut self.events, timeout) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                // The poll set is broken; nothing can make progress.
                dev.closed.store(true, Ordering::Release);
                return false;
            }
        }
        if self.events.iter().any(|e| e.token() == TIMER) {
            self.timer_fired = true;
        }
        true
    }
}

/// The engine thread of a busy-polling device: the application threads drive the engine
/// as they poll their CQs and post (`Device::drive`), as a user-space RDMA provider does;
/// this thread only makes sure that timers fire and packets are taken in while no
/// application thread polls. It sleeps between passes so as not to take a CPU from the
/// threads that poll; while they run passes themselves it sleeps longer, from
/// `BUSY_BACKGROUND_IDLE` doubling up to `BUSY_BACKGROUND_IDLE_MAX` as long as they leave
/// nothing for it (`Engine::left_behind`: what an application pass left for later, which it
/// then sends, and sleeps short again). On a machine with as many polling threads as cores
/// each of its wake-ups preempts one of them: at 0.5 ms, one round trip in 25 of a
/// busy-poll ping-pong, which was its p99.
pub(crate) fn run_busy(dev: Arc<Device>) {
    let mut seen = dev.app_passes.load(Ordering::Relaxed);
    let mut idle = BUSY_BACKGROUND_IDLE;
    while !dev.closed.load(Ordering::Acquire) {
        let now = dev.app_passes.load(Ordering::Relaxed);
        let apps_drive = now != seen;
        seen = now;
        let mut left_behind = false;
        if let Ok(mut e) = dev.engine.try_lock() {
            if let Some(e) = e.as_mut() {
                left_behind = e.left_behind();
                if !apps_drive || left_behind {
                    e.pass();
                }
            }
        }
        let sleep = if !apps_drive {
            idle = BUSY_BACKGROUND_IDLE;
            BUSY_BACKGROUND_PERIOD
        } else if left_behind {
            idle = BUSY_BACKGROUND_IDLE;
            idle
        } else {
            let s = idle;
            idle = (idle * 2).min(BUSY_BACKGROUND_IDLE_MAX);
            s
        };
        std::thread::sleep(sleep);
    }
}
