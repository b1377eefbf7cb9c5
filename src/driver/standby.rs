//! The default mode's hand-over between the engine thread and an application thread that
//! waits for a completion (`CqInner::wait`): while a thread waits, it runs the engine's
//! passes itself, and the engine thread stands by, asleep, instead of waking for every
//! datagram.
//!
//! Why: a message that crosses from the engine thread to the waiting thread costs a wake-up
//! (a futex system call on one side, a context switch on the other, and on a virtual machine
//! an inter-processor interrupt), and on a machine with fewer cores than busy threads the
//! two threads of one process take turns on a core: a 64 KiB WRITE stream cost 0.4-0.55
//! context switches per message per process, a blocking ping-pong 9.5 per round trip
//! (BENCHMARKS.md, issue #35). rxe's `post_send` and `poll_cq` have no such hand-over: the
//! requester runs in the caller's system call, and a TCP socket's receive runs in the
//! caller's `recv`. The waiting thread is the one that needs the next completion, so it is
//! the one that receives.
//!
//! The rules (spec-notes/beyond-rxe.md rule 14):
//! - A waiter drives (`begin`) only for `window` (the device's `idle_spin`, 50 us by
//!   default): after that without a completion it stops driving, wakes the engine thread if
//!   it stands by (`end(true)`) and sleeps on the CQ as before, so an idle program takes no
//!   CPU and a slow peer's answer is received by the engine thread.
//! - The engine thread stands by while a waiter drives (`park`), for `PARK_FIRST`, doubling
//!   up to `PARK_MAX` as long as application threads keep running passes
//!   (`note_pass`). A waiter that returns with its completion does not wake it (that would
//!   be the wake-up saved). While it stands by, the first post since the waiters' last pass
//!   is sent by the posting thread (`Device::posted`, `take_post_turn`) and later ones go
//!   with the next waiter's pass; what arrives while no thread waits is received within
//!   `PARK_MAX` by the engine thread, or at once by the next wait. Deadlines are served by
//!   whichever pass runs first: a retransmission timer is milliseconds.
//! - `SOFTROCE_WAIT_DRIVES=0`, or an `idle_spin` of zero, leaves every pass to the engine
//!   thread, as before (for comparison).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The engine thread's first stand-by while a waiter drives.
pub(crate) const PARK_FIRST: Duration = Duration::from_micros(100);
/// Its longest: what a datagram that arrives while nobody waits (the program is busy between
/// waits, or polls without waiting) may wait for the engine thread.
pub(crate) const PARK_MAX: Duration = Duration::from_millis(1);

/// The hand-over's state, in the device.
#[derive(Debug)]
pub(crate) struct Standby {
    /// How long a waiter drives before it sleeps; zero: waiters never drive.
    window: Duration,
    /// Application threads driving now.
    drivers: AtomicU32,
    /// The engine thread stands by (in `park`): a post is sent by the posting thread.
    parked: AtomicBool,
    /// Passes the waiters ran: while they move, the engine thread keeps standing by.
    passes: AtomicU64,
    /// A posting thread sent its post itself since the waiters' last pass (`take_post_turn`).
    post_sent: AtomicBool,
    /// A wake was asked for (`wake`): `park` returns at once.
    woken: Mutex<bool>,
    wake_up: Condvar,
}

impl Standby {
    /// A hand-over whose waiters drive for `window` (zero: never).
    pub(crate) fn new(window: Duration) -> Standby {
        let off = std::env::var_os("SOFTROCE_WAIT_DRIVES").is_some_and(|v| v == "0");
        Standby {
            window: if off { Duration::ZERO } else { window },
            ..Standby::off()
        }
    }

    /// A hand-over whose waiters never drive (busy-poll devices, and a device until `open`
    /// sets its own), without looking at the environment.
    pub(crate) fn off() -> Standby {
        Standby {
            window: Duration::ZERO,
            drivers: AtomicU32::new(0),
            parked: AtomicBool::new(false),
            passes: AtomicU64::new(0),
            post_sent: AtomicBool::new(false),
            woken: Mutex::new(false),
            wake_up: Condvar::new(),
        }
    }

    /// A waiting thread starts to drive: returns how long it may, or None if waiters do not
    /// drive on this device (then it must not call `end`).
    pub(crate) fn begin(&self) -> Option<Duration> {
        if self.window.is_zero() {
            return None;
        }
        self.drivers.fetch_add(1, Ordering::SeqCst);
        Some(self.window)
    }

    /// A waiting thread stops driving. The last one, if it is going to sleep (`sleeps`),
    /// wakes the engine thread, which from then on receives for it: at once if it stands
    /// by, or at its next `park` if it is about to.
    pub(crate) fn end(&self, sleeps: bool) {
        let last = self.drivers.fetch_sub(1, Ordering::SeqCst) == 1;
        if sleeps && last {
            self.wake();
        }
    }

    /// A waiter ran a pass.
    pub(crate) fn note_pass(&self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.post_sent.store(false, Ordering::Relaxed);
    }

    /// Passes the waiters have run.
    pub(crate) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// While the engine thread stands by, whether a posting thread sends its post itself:
    /// the first post since the waiters' last pass does (the reply of a ping-pong leaves at
    /// once); later ones only ring the doorbell and go with the next waiter's pass, in one
    /// `sendmmsg` (a post's own send is a system call per message: 64-byte UD SENDs fell
    /// from 1.0-1.6 to 0.33 Mpps that way, BENCHMARKS.md).
    pub(crate) fn take_post_turn(&self) -> bool {
        !self.post_sent.swap(true, Ordering::Relaxed)
    }

    /// Whether an application thread drives now.
    pub(crate) fn driven(&self) -> bool {
        self.drivers.load(Ordering::SeqCst) > 0
    }

    /// Whether the engine thread stands by now.
    pub(crate) fn parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }

    /// The engine thread stands by for up to `timeout`; returns true if it was woken
    /// (`wake`: the last driver went to sleep, or the device closes, since it last stood by)
    /// rather than timed out.
    pub(crate) fn park(&self, timeout: Duration) -> bool {
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        self.parked.store(true, Ordering::SeqCst);
        if !*woken {
            woken = self
                .wake_up
                .wait_timeout(woken, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        self.parked.store(false, Ordering::SeqCst);
        std::mem::take(&mut *woken)
    }

    /// Ends the engine thread's stand-by now, if it stands by or is about to.
    pub(crate) fn wake(&self) {
        *self.woken.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake_up.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_zero_window_never_lets_a_waiter_drive() {
        for s in [Standby::new(Duration::ZERO), Standby::off()] {
            assert_eq!(s.begin(), None);
            assert!(!s.driven());
        }
    }

    #[test]
    fn park_times_out_unless_woken() {
        let s = Standby::new(Duration::from_micros(50));
        assert_eq!(s.begin(), Some(Duration::from_micros(50)));
        let t = Instant::now();
        assert!(!s.park(Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(20));
        s.end(false);
        assert!(!s.driven());
    }

    #[test]
    fn a_wake_before_the_park_ends_the_next_park_at_once() {
        let s = Standby::new(Duration::from_micros(50));
        s.begin().unwrap();
        s.end(true);
        let t = Instant::now();
        assert!(s.park(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1));
        // Taken: the park after it times out.
        assert!(!s.park(Duration::from_millis(1)));
    }

    #[test]
    fn the_last_driver_going_to_sleep_wakes_the_parked_engine() {
        let s = Arc::new(Standby::new(Duration::from_micros(50)));
        s.begin().unwrap();
        let s2 = Arc::clone(&s);
        let engine = std::thread::spawn(move || {
            let t = Instant::now();
            let woken = s2.park(Duration::from_secs(10));
            (woken, t.elapsed())
        });
        let limit = Instant::now() + Duration::from_secs(5);
        while !s.parked() && Instant::now() < limit {
            std::thread::yield_now();
        }
        assert!(s.parked(), "the engine thread never parked");
        s.end(true);
        let (woken, took) = engine.join().unwrap();
        assert!(woken);
        assert!(took < Duration::from_secs(5), "woken after {took:?}");
    }

    #[test]
    fn only_the_last_driver_going_to_sleep_wakes_the_engine() {
        let s = Standby::new(Duration::from_micros(50));
        s.begin().unwrap();
        s.begin().unwrap();
        // One of two drivers goes to sleep: the other still drives, nobody is woken.
        s.end(true);
        assert!(!*s.woken.lock().unwrap());
        // The other returns with its completion: still no wake (it will be back).
        s.end(false);
        assert!(!*s.woken.lock().unwrap());
        // A driver that goes to sleep as the last one does wake it.
        s.begin().unwrap();
        s.end(true);
        assert!(*s.woken.lock().unwrap());
    }
}
