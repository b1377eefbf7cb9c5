//! A one-shot timer with microsecond resolution for the engine's poll loop: a Linux timerfd
//! registered with mio.
//!
//! Why not the poll timeout: mio (epoll_wait) rounds its timeout up to whole milliseconds, so a
//! retransmission timer of 65 us (timeout 4) or an RNR wait of 10 us would fire after 1 ms or
//! more. Measured before this timer: 64 KiB WRITEs at 10% loss with `-u 4` spent 0.36 s of a
//! 0.6 s run waiting out 357 timeouts that should have taken 23 ms.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

/// A non-blocking CLOCK_MONOTONIC timerfd.
pub(crate) struct Timer {
    fd: OwnedFd,
    /// When the timer is set to fire, if it is armed and has not fired yet.
    armed_at: Option<Instant>,
}

impl Timer {
    pub(crate) fn new() -> io::Result<Timer> {
        // SAFETY: timerfd_create takes no pointers; the result is checked before use.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Timer {
            // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed_at: None,
        })
    }

    /// Makes sure the timer fires at `deadline` or earlier. An earlier expiry is harmless
    /// (the engine recomputes its deadlines on every wake-up), so a timer already armed for
    /// an earlier instant is left alone, as is one whose deadline went away: the
    /// retransmission timer restarts on every ACK, and re-arming each time would cost a
    /// syscall per packet. Returns the error of timerfd_settime, if any.
    pub(crate) fn fire_by(&mut self, deadline: Option<Instant>, now: Instant) -> io::Result<()> {
        let Some(at) = deadline else {
            return Ok(());
        };
        if self.armed_at.is_some_and(|a| a <= at && a > now) {
            return Ok(());
        }
        // At least 1 ns: a zero delay would disarm a timerfd.
        let d = at
            .saturating_duration_since(now)
            .max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec for the call's duration; the old value is not
        // requested (null is allowed).
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_at = Some(at);
        Ok(())
    }

    /// Acknowledges an expiry (after the poll reported the timer readable).
    pub(crate) fn clear(&mut self) {
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a buffer of 8 bytes; a non-blocking timerfd that
        // has not expired returns EAGAIN, which is fine to ignore.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), n.as_mut_ptr().cast(), n.len()) };
        self.armed_at = None;
    }
}

impl Source for Timer {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).deregister(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};

    #[test]
    fn fires_with_sub_millisecond_resolution() {
        let mut poll = Poll::new().unwrap();
        let mut t = Timer::new().unwrap();
        poll.registry()
            .register(&mut t, Token(7), Interest::READABLE)
            .unwrap();
        let mut events = Events::with_capacity(4);
        // Best of several tries, so that a descheduled test thread does not make it flaky;
        // epoll's own timeout could not do better than 1 ms in any of them.
        let mut best = Duration::MAX;
        for _ in 0..20 {
            let start = Instant::now();
            t.fire_by(Some(start + Duration::from_micros(100)), start)
                .unwrap();
            poll.poll(&mut events, Some(Duration::from_secs(5)))
                .unwrap();
            assert!(events.iter().any(|e| e.token() == Token(7)));
            best = best.min(start.elapsed());
            t.clear();
        }
        assert!(best >= Duration::from_micros(100), "{best:?}");
        assert!(best < Duration::from_micros(900), "{best:?}");
    }

    #[test]
    fn a_later_deadline_keeps_the_earlier_expiry_and_an_earlier_one_rearms() {
        let mut poll = Poll::new().unwrap();
        let mut t = Timer::new().unwrap();
        poll.registry()
            .register(&mut t, Token(7), Interest::READABLE)
            .unwrap();
        let mut events = Events::with_capacity(4);
        let now = Instant::now();
        t.fire_by(Some(now + Duration::from_millis(300)), now)
            .unwrap();
        // Earlier: re-armed.
        t.fire_by(Some(now + Duration::from_millis(20)), now)
            .unwrap();
        // Later: ignored, the 20 ms expiry stays.
        t.fire_by(Some(now + Duration::from_secs(10)), now).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(2)))
            .unwrap();
        let waited = now.elapsed();
        assert!(events.iter().any(|e| e.token() == Token(7)));
        assert!(waited >= Duration::from_millis(20), "{waited:?}");
        assert!(waited < Duration::from_millis(250), "{waited:?}");
        t.clear();
        // Nothing armed any more: no further event.
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        assert!(events.is_empty());
    }
}
