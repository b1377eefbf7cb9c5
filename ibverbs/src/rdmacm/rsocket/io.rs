//! rsend and rrecv on a connected stream rsocket: the data path under the rsocket's lock,
//! and between tries a wait that lets the other direction and the engine progress
//! (`rs_get_comp`'s poll-then-wait, here a spin that backs off into short sleeps).

use std::time::Duration;

use libc::{c_int, MSG_DONTWAIT};

use super::conn::{Conn, OLAP_START};
use super::stream::Rs;

/// Tries that only yield before a wait starts sleeping.
const SPINS: u32 = 200;
/// The longest sleep between tries of a blocking call.
const MAX_NAP: Duration = Duration::from_micros(500);

/// Waits before the next try of a blocking call: yields first, then naps growing to MAX_NAP.
pub(super) fn back_off(tries: &mut u32) {
    *tries += 1;
    if *tries < SPINS {
        std::thread::yield_now();
    } else {
        let us = u64::from((*tries - SPINS).min(100)) * 5 + 5;
        std::thread::sleep(Duration::from_micros(us).min(MAX_NAP));
    }
}

impl Rs {
    /// `rsend`: bytes queued, or an errno (EAGAIN when nothing could be queued without
    /// blocking, ECONNRESET once the peer or we shut writing, ENOTCONN before connecting).
    pub(super) fn send(&self, buf: &[u8], flags: c_int) -> Result<usize, c_int> {
        let mut olen = OLAP_START;
        self.push(buf.len(), flags, |conn, done| {
            Ok((conn.send_some(&buf[done..], &mut olen)?, false))
        })
    }

    /// The loop of rsend and riowrite: under the lock, progress the completions and credits,
    /// send the iomaps queued (`rs_send_iomaps`), then let `step` queue what it can of the
    /// `total` bytes (given those done), returning them and whether it can go no further
    /// (riowrite past the peer's mappings); between passes, back off.
    pub(super) fn push(
        &self,
        total: usize,
        flags: c_int,
        mut step: impl FnMut(&mut Conn, usize) -> Result<(usize, bool), c_int>,
    ) -> Result<usize, c_int> {
        let mut done = 0usize;
        self.passes(flags, |conn, nonblock| {
            conn.update_credits();
            let stop = if conn.flow.err != 0 {
                Some(conn.flow.err)
            } else if !conn.flow.writable || !conn.flow.up {
                Some(libc::ECONNRESET)
            } else {
                None
            };
            if let Some(e) = stop {
                return Some(so_far(done, e));
            }
            if conn.send_iomaps() {
                let (n, end) = match step(conn, done) {
                    Ok(x) => x,
                    Err(e) => return Some(Err(e)),
                };
                done += n;
                if done == total || end {
                    return Some(Ok(done));
                }
            }
            nonblock.then(|| so_far(done, libc::EAGAIN))
        })
    }

    /// `rrecv`: bytes read (0 once the peer shut writing and all is read), or an errno
    /// (EAGAIN without data when not blocking, ENOTCONN before connecting).
    pub(super) fn recv(&self, buf: &mut [u8], flags: c_int) -> Result<usize, c_int> {
        let mut done = 0usize;
        self.passes(flags, |conn, nonblock| {
            if conn.readable_bytes() > 0 {
                done += conn.recv_some(&mut buf[done..]);
                conn.update_credits();
                if done == buf.len() || flags & libc::MSG_WAITALL == 0 {
                    return Some(Ok(done));
                }
            }
            conn.update_credits();
            if !conn.flow.readable || !conn.flow.up {
                return Some(Ok(done));
            }
            if conn.flow.err != 0 {
                return Some(so_far(done, conn.flow.err));
            }
            nonblock.then(|| so_far(done, libc::EAGAIN))
        })
    }

    /// Runs `pass` under the socket's lock on its connection, progressed (ENOTCONN without
    /// one), with whether this call may not block, until `pass` answers; between passes
    /// that do not, backs off.
    fn passes<T>(
        &self,
        flags: c_int,
        mut pass: impl FnMut(&mut Conn, bool) -> Option<Result<T, c_int>>,
    ) -> Result<T, c_int> {
        let mut tries = 0;
        loop {
            {
                let mut st = self.lock();
                let nonblock = st.nonblock || flags & MSG_DONTWAIT != 0;
                let conn = st.conn.as_mut().ok_or(libc::ENOTCONN)?;
                conn.poll();
                if let Some(answer) = pass(conn, nonblock) {
                    return answer;
                }
            }
            back_off(&mut tries);
        }
    }
}

/// What a call that moved `done` bytes before it met `err` returns: the bytes if any, as a
/// socket does, else the error.
fn so_far(done: usize, err: c_int) -> Result<usize, c_int> {
    if done > 0 {
        Ok(done)
    } else {
        Err(err)
    }
}
