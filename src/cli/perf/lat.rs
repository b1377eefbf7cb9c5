//! The latency programs: ib_send_lat and ib_write_lat are ping-pongs in which both ends
//! measure; ib_read_lat and ib_atomic_lat are timed one operation at a time by the client.

use std::time::Instant;

use softroce::ib::*;
use softroce::oob::perftest::{Exchange, KeyMsg};
use std::result::Result;

use super::params::Program;
use super::pattern::{check_pattern, check_region, fill_pattern};
use super::report::{LatStats, Outcome};
use super::resources::{Test, PREALLOCATED_TIMESTAMPS};
use crate::cli::activity::PeerActivity;
use crate::cli::CliError;

impl Test<'_> {
    /// Runs a latency program after connecting, through its verdicts and the close.
    pub(super) fn run_lat(&mut self, mut x: Exchange, k0: &KeyMsg) -> Result<Outcome, CliError> {
        let p = self.p;
        let mut rows = Vec::new();
        Ok(match p.prog {
            Program::SendLat => {
                for size in p.sizes() {
                    if p.all {
                        // ib_send_lat -a: receives for the size, a barrier, the size.
                        self.set_size(size);
                        self.post_receives()?;
                        self.hs(&mut x, k0)?;
                    }
                    rows.push((size, self.send_lat()?));
                }
                self.verdicts(&mut x)?;
                self.close(x, k0)?;
                Outcome::Lat(rows)
            }
            Program::WriteLat => {
                for size in p.sizes() {
                    self.set_size(size);
                    rows.push((size, self.write_lat()?));
                }
                // perftest's ib_write_lat ends here, without closing the exchange.
                self.verdicts(&mut x)?;
                Outcome::Lat(rows)
            }
            Program::ReadLat | Program::AtomicLat => {
                if self.is_client {
                    for size in p.sizes() {
                        self.set_size(size);
                        rows.push((size, self.rdma_lat()?));
                    }
                }
                if p.check {
                    self.hs(&mut x, k0)?;
                    if !self.is_client {
                        self.verify_server();
                    }
                    self.verdicts(&mut x)?;
                }
                self.close(x, k0)?;
                if self.is_client {
                    Outcome::Lat(rows)
                } else {
                    Outcome::Passive
                }
            }
            other => {
                return Err(CliError::Failed(format!(
                    "{} is not a latency program",
                    other.perftest_name()
                )))
            }
        })
    }

    /// ib_send_lat: the client sends first; each end answers each message it receives.
    pub(super) fn send_lat(&mut self) -> Result<Option<LatStats>, CliError> {
        let iters = self.p.iters;
        let mut posted = Vec::with_capacity((iters as usize).min(PREALLOCATED_TIMESTAMPS));
        let mut wcs = vec![WorkCompletion::default(); 8];
        let mut last = Instant::now();
        let (mut sent, mut send_done, mut received) = (0u64, 0u64, 0u64);
        while sent < iters || received < iters || send_done < sent {
            let my_turn = sent < iters
                && (if self.is_client {
                    sent == received
                } else {
                    received > sent
                });
            if my_turn && sent - send_done < self.p.tx_depth as u64 {
                posted.push(Instant::now());
                self.post_op(0, sent)?;
                sent += 1;
                continue;
            }
            let k = self.poll(&mut wcs, &mut last)?;
            for wc in &wcs[..k] {
                if wc.opcode == WcOpcode::Recv {
                    let msg = wc.wr_id;
                    if self.p.check {
                        let r =
                            check_region(&self.conns[0].mr, self.payload_at(msg), self.p.size, msg)
                                .map(|()| (1, self.p.size));
                        self.note(r);
                    }
                    received += 1;
                    if msg + (self.p.rx_depth as u64) < iters {
                        self.post_recv(0, msg + self.p.rx_depth as u64)?;
                    }
                } else {
                    send_done += 1;
                }
            }
        }
        Ok(LatStats::from_posted(&posted, 2.0))
    }

    /// ib_write_lat: each end writes `size` bytes whose last byte counts the iterations and
    /// spins on that byte of its own buffer; the server writes first.
    pub(super) fn write_lat(&mut self) -> Result<Option<LatStats>, CliError> {
        let iters = self.p.iters;
        let size = self.p.size;
        let poll_at = self.layout.half + size - 1;
        let mut posted = Vec::with_capacity((iters as usize).min(PREALLOCATED_TIMESTAMPS));
        let mut wcs = vec![WorkCompletion::default(); 8];
        let mut last = Instant::now();
        let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
        let mut local = vec![0u8; size as usize];
        while scnt < iters || rcnt < iters || ccnt < iters {
            // The server writes first: it does not wait before its first write.
            if rcnt < iters && (self.is_client || scnt >= 1) {
                rcnt += 1;
                self.wait_for_write(rcnt, poll_at)?;
            }
            if scnt < iters {
                let conn_mr = &self.conns[0].mr;
                posted.push(Instant::now());
                scnt += 1;
                // Only the counter byte changes between iterations, unless --check gives every
                // message its own pattern.
                local[size as usize - 1] = scnt as u8;
                if self.p.check {
                    fill_pattern(&mut local[..size as usize - 1], scnt - 1);
                    conn_mr.write(0, &local).map_err(CliError::Verbs)?;
                } else {
                    conn_mr
                        .write(size - 1, &local[size as usize - 1..])
                        .map_err(CliError::Verbs)?;
                }
                let conn = &self.conns[0];
                conn.qp
                    .post_send(&[SendWr {
                        wr_id: scnt,
                        sg_list: &[conn.mr.sge(0, size as u32)],
                        opcode: WrOpcode::RdmaWrite {
                            remote_addr: conn.remote.vaddr,
                            rkey: conn.remote.rkey,
                        },
                        send_flags: SendFlags::SIGNALED,
                    }])
                    .map_err(|e| CliError::Failed(format!("post_send: {e}")))?;
            }
            // Reap send completions: wait for one only when the send queue is full, or at
            // the end for the last ones.
            loop {
                let must_wait = scnt - ccnt >= self.p.tx_depth as u64
                    || (scnt == iters && rcnt == iters && ccnt < scnt);
                let k = if must_wait {
                    self.poll(&mut wcs, &mut last)?
                } else {
                    let k = self.cq.poll(&mut wcs).map_err(CliError::Verbs)?;
                    if let Some(wc) = wcs[..k].iter().find(|wc| wc.status != WcStatus::Success) {
                        return Err(CliError::Failed(format!(
                            "completion with error: {}",
                            wc.status
                        )));
                    }
                    k
                };
                ccnt += k as u64;
                if k == 0 && !must_wait {
                    break;
                }
            }
        }
        Ok(LatStats::from_posted(&posted, 2.0))
    }

    /// ib_write_lat's wait for the peer's write number `rcnt`: spins on the counter byte at
    /// `poll_at` of this end's buffer until it says `rcnt`, then (under --check) verifies the
    /// pattern before it.
    fn wait_for_write(&mut self, rcnt: u64, poll_at: u64) -> Result<(), CliError> {
        let size = self.p.size;
        let conn_mr = &self.conns[0].mr;
        let want = rcnt as u8;
        let mut spins = 0u32;
        let mut peer = PeerActivity::new(self.ctx);
        loop {
            let mut b = [0u8; 1];
            conn_mr.read(poll_at, &mut b).map_err(CliError::Verbs)?;
            if b[0] == want {
                break;
            }
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
                self.progress.tick(self.ctx);
                if peer.silent_for(self.ctx) > self.timeout {
                    return Err(CliError::Failed(format!(
                        "write {rcnt} of the peer did not arrive in {:?}",
                        self.timeout
                    )));
                }
            }
        }
        if self.p.check {
            let got = conn_mr
                .to_vec(self.layout.half, size as usize - 1)
                .map_err(CliError::Verbs)?;
            // The pattern, and the counter byte that ended the wait: `size` bytes.
            // (Test::note's bookkeeping, on the fields: conn_mr borrows the QPs.)
            match check_pattern(&got, rcnt - 1) {
                Ok(()) => {
                    self.verified.0 += 1;
                    self.verified.1 += size;
                }
                Err(e) => {
                    self.failure.get_or_insert(e);
                }
            }
        }
        Ok(())
    }

    /// ib_read_lat / ib_atomic_lat client: one operation at a time.
    pub(super) fn rdma_lat(&mut self) -> Result<Option<LatStats>, CliError> {
        let mut posted = Vec::with_capacity((self.p.iters as usize).min(PREALLOCATED_TIMESTAMPS));
        let mut wcs = vec![WorkCompletion::default(); 1];
        let mut last = Instant::now();
        for iter in 0..self.p.iters {
            posted.push(Instant::now());
            self.post_op(0, iter)?;
            while self.poll(&mut wcs, &mut last)? == 0 {}
            let r = self.check_completion(0, wcs[0].wr_id);
            self.note(r);
        }
        Ok(LatStats::from_posted(&posted, 1.0))
    }
}
