//! The bandwidth programs (ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw): the requester
//! keeps tx_depth work requests in flight per QP; the SEND server keeps rx_depth receives
//! posted; the passive RDMA server waits, verifies under --check and prints the client's report.

use std::time::Instant;

use softroce::oob::perftest::{BwReport, Exchange, KeyMsg};
use softroce::verbs::*;
use std::result::Result;

use super::ops::check_pattern;
use super::report::{BwFigures, BwRun, Outcome};
use super::setup::{Test, PREALLOCATED_TIMESTAMPS};
use super::{PerfOp, Program};
use crate::cli::CliError;

impl Test<'_> {
    /// Runs a bandwidth program after connecting, through the report exchange and the close.
    pub(super) fn run_bw(&mut self, mut x: Exchange, k0: &KeyMsg) -> Result<Outcome, CliError> {
        let p = self.p;
        Ok(match p.prog {
            Program::WriteBw | Program::ReadBw | Program::AtomicBw => {
                let mine = if self.is_client {
                    Some(self.bandwidth_client()?)
                } else {
                    None
                };
                self.hs(&mut x, k0)?;
                if p.check && !self.is_client {
                    self.verify_server();
                }
                self.verdicts(&mut x)?;
                let report = mine.as_ref().map_or(
                    BwReport {
                        size: 0,
                        iters: 0,
                        bw_peak: 0.0,
                        bw_avg: 0.0,
                        msg_rate: 0.0,
                    },
                    |m| m.report(p.size),
                );
                let theirs = x.bw_reports(&report).map_err(CliError::Oob)?;
                self.close(x, k0)?;
                mine.map_or(Outcome::Bw(BwFigures::from_report(&theirs)), |m| {
                    Outcome::Bw(m.figures(p.size))
                })
            }
            Program::SendBw => {
                let m = if self.is_client {
                    self.bandwidth_client()?
                } else {
                    self.bandwidth_server()?
                };
                self.verdicts(&mut x)?;
                self.close(x, k0)?;
                Outcome::Bw(m.figures(p.size))
            }
            other => {
                return Err(CliError::Failed(format!(
                    "{} is not a bandwidth program",
                    other.perftest_name()
                )))
            }
        })
    }

    /// The requester side of ib_{send,write,read,atomic}_bw: tx_depth WRs in flight per QP.
    pub(super) fn bandwidth_client(&mut self) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let total = self.p.iters as usize * n;
        let mut run = BwRun {
            posted: Vec::with_capacity(total.min(PREALLOCATED_TIMESTAMPS)),
            completed: Vec::with_capacity(total.min(PREALLOCATED_TIMESTAMPS)),
        };
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut posted = vec![0u64; n];
        for (c, count) in posted.iter_mut().enumerate() {
            while *count < self.p.iters && *count < self.tx_depth as u64 {
                run.posted.push(Instant::now());
                self.post_op(c, *count)?;
                *count += 1;
            }
        }
        let mut last = Instant::now();
        while run.completed.len() < total {
            let k = self.poll(&mut wcs, &mut last)?;
            let now = Instant::now();
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                run.completed.push(now);
                let r = self.check_completion(c, wc.wr_id);
                self.note(r);
                if posted[c] < self.p.iters {
                    run.posted.push(Instant::now());
                    self.post_op(c, posted[c])?;
                    posted[c] += 1;
                }
            }
        }
        Ok(run)
    }

    /// The receiving server of ib_send_bw: keeps rx_depth receives posted per QP and times
    /// from the first arrival to the last, as perftest's run_iter_bw_server.
    pub(super) fn bandwidth_server(&mut self) -> Result<BwRun, CliError> {
        let n = self.conns.len();
        let total = self.p.iters as usize * n;
        let mut run = BwRun {
            posted: Vec::with_capacity(1),
            completed: Vec::with_capacity(total.min(PREALLOCATED_TIMESTAMPS)),
        };
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut got = vec![0u64; n];
        let mut last = Instant::now();
        while run.completed.len() < total {
            let k = self.poll(&mut wcs, &mut last)?;
            let now = Instant::now();
            if k > 0 && run.posted.is_empty() {
                run.posted.push(now);
            }
            for wc in &wcs[..k] {
                let c = self.conn_of(wc)?;
                let msg = wc.wr_id;
                if self.p.check {
                    let r = if wc.byte_len as u64 != self.p.size {
                        Err(format!(
                            "message {msg}: {} bytes received, expected {}",
                            wc.byte_len, self.p.size
                        ))
                    } else {
                        self.conns[c]
                            .mr
                            .to_vec(
                                self.layout.half + self.layout.offset(msg),
                                self.p.size as usize,
                            )
                            .map_err(|e| e.to_string())
                            .and_then(|b| check_pattern(&b, msg))
                    };
                    self.note(r);
                }
                got[c] += 1;
                run.completed.push(now);
                let next = msg + self.rx_depth as u64;
                if next < self.p.iters {
                    self.post_recv(c, next)?;
                }
            }
        }
        Ok(run)
    }

    /// Under --check, the server verifies what the client wrote or what the atomics left.
    pub(super) fn verify_server(&mut self) {
        let p = self.p;
        for c in 0..self.conns.len() {
            let mr = &self.conns[c].mr;
            let r = match p.op {
                PerfOp::Write => (0..p.iters).try_for_each(|iter| {
                    let got = mr
                        .to_vec(self.layout.half + self.layout.offset(iter), p.size as usize)
                        .map_err(|e| e.to_string())?;
                    check_pattern(&got, iter)
                }),
                PerfOp::Atomic => match mr.load_u64(self.layout.half) {
                    Ok(v) if v == p.iters => Ok(()),
                    Ok(v) => Err(format!(
                        "atomic check failed: the target holds {v} after {} operations",
                        p.iters
                    )),
                    Err(e) => Err(e.to_string()),
                },
                _ => Ok(()),
            };
            self.note(r);
        }
    }
}
