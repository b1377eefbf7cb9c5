//! rpoll and rselect: readiness of rsockets from their connection state, of other fds from
//! the kernel, in one bounded wait. A connected rsocket is readable with data queued or once
//! the peer shut writing, writable when `rs_can_send` holds or writing is shut (so that the
//! call returns the error); a listening rsocket is readable when its event channel (its
//! handle) holds a connect request, as rdma-core's `rs_poll_rs` checks its accept queue
//! (spec-notes: rsockets.md R13).

use std::time::{Duration, Instant};

use libc::{c_int, nfds_t, pollfd, POLLERR, POLLHUP, POLLIN, POLLOUT};

use super::stream::Rs;
use super::table;

/// Readiness of one rsocket for `events` (after progressing its completions).
fn rs_revents(rs: &Rs, events: i16) -> i16 {
    let mut st = rs.lock();
    if st.listening {
        drop(st);
        return kernel_revents(rs.fd, events & POLLIN);
    }
    let Some(conn) = st.conn.as_mut() else {
        return 0;
    };
    conn.poll();
    conn.update_credits();
    let mut r = 0;
    if conn.readable_bytes() > 0 || !conn.flow.readable || !conn.flow.up {
        r |= POLLIN;
    }
    if conn.can_send() || !conn.flow.writable || !conn.flow.up {
        r |= POLLOUT;
    }
    let mut always = 0;
    // rs_poll_rs reports POLLHUP as soon as the DISCONNECT is processed, even with data
    // still unread, so a program that treats HUP as fatal (rstream's do_poll) loses the
    // tail of a stream whose peer closed right after sending it; as TCP's poll, HUP waits
    // until the data is read (spec-notes: rsockets.md R13).
    if !conn.flow.up && conn.readable_bytes() == 0 {
        always |= POLLHUP;
    }
    if conn.flow.err != 0 {
        always |= POLLERR;
    }
    (r & events) | always
}

/// A kernel fd's readiness now.
fn kernel_revents(fd: c_int, events: i16) -> i16 {
    let mut p = pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd of ours, no wait.
    if unsafe { libc::poll(&mut p, 1, 0) } < 0 {
        return 0;
    }
    p.revents
}

/// One pass over `fds`: sets each revents, returns how many are ready.
fn scan(fds: &mut [pollfd]) -> c_int {
    let mut n = 0;
    for p in fds.iter_mut() {
        p.revents = if p.fd < 0 {
            0
        } else if let Some(rs) = table::lookup(p.fd) {
            rs_revents(&rs, p.events)
        } else if let Some(r) = super::dgram_api::revents(p.fd, p.events) {
            r
        } else {
            kernel_revents(p.fd, p.events)
        };
        if p.revents != 0 {
            n += 1;
        }
    }
    n
}

/// `rpoll`: the ready count, 0 after `timeout` ms (negative: no limit), or -1 and EINVAL
/// for a null array with entries.
///
/// # Safety
/// `fds` points at `nfds` pollfd entries.
#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() && nfds > 0 {
        return super::super::error::fail(libc::EFAULT);
    }
    let fds: &mut [pollfd] = if nfds == 0 {
        &mut []
    } else {
        // SAFETY: the caller's array of `nfds` entries.
        unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
    };
    wait(fds, timeout)
}

/// Scans until something is ready or the timeout passes, backing off between scans.
fn wait(fds: &mut [pollfd], timeout: c_int) -> c_int {
    let end = u64::try_from(timeout)
        .ok()
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let mut tries = 0;
    loop {
        let n = scan(fds);
        if n > 0 || end.is_some_and(|e| Instant::now() >= e) {
            return n;
        }
        super::io::back_off(&mut tries);
    }
}

/// `rselect`: rpoll over the fds of the three sets; the ready count, the sets rewritten.
///
/// # Safety
/// Each set pointer is null or a valid fd_set; `timeout` null or a valid timeval.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        return super::super::error::fail(libc::EINVAL);
    }
    let sets = [(readfds, POLLIN), (writefds, POLLOUT), (exceptfds, POLLERR)];
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut events = 0;
        for &(set, ev) in &sets {
            // SAFETY: a valid fd_set (caller's contract) and fd < FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, set) } {
                events |= ev;
            }
        }
        if events != 0 {
            fds.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: a valid timeval (caller's contract).
        let t = unsafe { *timeout };
        (t.tv_sec.max(0) * 1000 + t.tv_usec.max(0) / 1000).min(c_int::MAX as i64) as c_int
    };
    wait(&mut fds, ms);
    let mut n = 0;
    for &(set, _) in &sets {
        if !set.is_null() {
            // SAFETY: a valid fd_set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    for p in &fds {
        for &(set, ev) in &sets {
            let hit = p.revents & (ev | if ev == POLLIN { POLLHUP } else { 0 }) != 0;
            if !set.is_null() && p.events & ev != 0 && hit {
                // SAFETY: a valid fd_set and fd < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                n += 1;
            }
        }
    }
    n
}
