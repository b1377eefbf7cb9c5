//! What every perftest program does per message and between phases: post a work request,
//! poll completions, verify --check patterns, and talk to the peer over the out-of-band
//! exchange while the network keeps the test alive.

use std::time::{Duration, Instant};

use softroce::ib::*;
use softroce::oob::perftest::{Exchange, KeyMsg, Transport};
use softroce::oob::OobError;
use std::result::Result;

use super::pattern::{check_region, write_pattern};
use super::progress::ack_timeout_text;
use super::resources::Test;
use super::{Connection, PerfOp};
use crate::cli::activity::PeerActivity;
use crate::cli::pingpong::poll_or_wait;
use crate::cli::CliError;

impl Test<'_> {
    /// One key handshake, watching the network while waiting for the peer.
    pub(super) fn hs(&self, x: &mut Exchange, mine: &KeyMsg) -> Result<KeyMsg, CliError> {
        x.handshake_waiting(mine, &mut |s| self.await_peer(s))
            .map_err(CliError::Oob)
    }

    /// The closing handshake, watching the network while waiting for the peer.
    pub(super) fn close(&self, x: Exchange, mine: &KeyMsg) -> Result<(), CliError> {
        x.close_waiting(mine, &mut |s| self.await_peer(s))
            .map_err(CliError::Oob)
    }

    /// Waits for the peer's next message while its test may still run: gives up only when
    /// neither a message nor a RoCE packet has arrived for the timeout.
    pub(super) fn await_peer(&self, link: &mut dyn Transport) -> Result<(), OobError> {
        let mut peer = PeerActivity::new(self.ctx);
        while !link.ready(Duration::from_millis(200))? {
            // A passive end waits here for the whole of the peer's test.
            self.progress.tick(self.ctx);
            if peer.silent_for(self.ctx) > self.timeout {
                return Err(OobError::Timeout);
            }
        }
        Ok(())
    }

    /// --check: both ends learn each other's verdict, so that both fail on a mismatch.
    pub(super) fn verdicts(&mut self, x: &mut Exchange) -> Result<(), CliError> {
        if !self.p.check {
            return Ok(());
        }
        let mine = [self.failure.is_none() as u8];
        let theirs = x
            .xchg_waiting(&mine, &mut |s| self.await_peer(s))
            .map_err(CliError::Oob)?;
        if theirs[0] != 1 && self.failure.is_none() {
            self.failure = Some("the peer's data check failed".into());
        }
        Ok(())
    }

    /// Counts what a --check verified (messages, bytes) or keeps its first failure.
    pub(super) fn note(&mut self, r: Result<(u64, u64), String>) {
        match r {
            Ok((messages, bytes)) => {
                self.verified.0 += messages;
                self.verified.1 += bytes;
            }
            Err(e) => {
                self.failure.get_or_insert(e);
            }
        }
    }

    /// Posts receive `msg` of QP `c` into its slot of the advertised half.
    pub(super) fn post_recv(&self, c: usize, msg: u64) -> Result<(), CliError> {
        if self.p.conn == Connection::Ud {
            return self.post_recv_ud(c, msg);
        }
        let conn = &self.conns[c];
        let sge = [conn.mr.sge(
            self.layout.half + self.layout.offset(msg),
            self.p.size as u32,
        )];
        conn.qp
            .post_recv(&[RecvWr {
                wr_id: msg,
                sg_list: &sge,
            }])
            .map_err(|e| CliError::Failed(format!("post_recv: {e}")))
    }

    /// Posts requester WR `iter` of QP `c`, signaled: perftest's addresses, or its own region
    /// under --check.
    pub(super) fn post_op(&self, c: usize, iter: u64) -> Result<(), CliError> {
        self.post_ops(c, iter, 1, false)
    }

    /// Posts requester WRs `first..first + count` of QP `c` in one post_send (perftest's -l
    /// post list). With `moderated`, only every cq_mod-th WR, the last of a post list and the
    /// run's last WR ask for a completion (-Q); otherwise every WR does.
    pub(super) fn post_ops(
        &self,
        c: usize,
        first: u64,
        count: u64,
        moderated: bool,
    ) -> Result<(), CliError> {
        let conn = &self.conns[c];
        let p = &self.p;
        let last_of_run = if p.duration.is_some() {
            u64::MAX
        } else {
            p.iters - 1
        };
        let inline =
            (self.p.inline as u64) >= p.size && matches!(p.op, PerfOp::Send | PerfOp::Write);
        let flags = |iter: u64| {
            let signaled = !moderated
                || (iter + 1) % self.p.cq_mod as u64 == 0
                || iter == last_of_run
                || iter + 1 == first + count && self.p.post_list > 1;
            let mut f = if signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::EMPTY
            };
            if inline {
                f |= SendFlags::INLINE;
            }
            f
        };
        let post = |wrs: &[SendWr]| {
            if p.conn == Connection::Ud {
                return self.post_send_ud(c, wrs);
            }
            conn.qp
                .post_send(wrs)
                .map_err(|e| CliError::Failed(format!("post_send: {e}")))
        };
        if count == 1 {
            let sge = [conn.mr.sge(self.layout.offset(first), p.size as u32)];
            return post(&[SendWr {
                wr_id: first,
                sg_list: &sge,
                opcode: self.opcode(c, first)?,
                send_flags: flags(first),
            }]);
        }
        let sges: Vec<[Sge; 1]> = (first..first + count)
            .map(|iter| [conn.mr.sge(self.layout.offset(iter), p.size as u32)])
            .collect();
        let mut wrs = Vec::with_capacity(count as usize);
        for (iter, sge) in (first..first + count).zip(&sges) {
            wrs.push(SendWr {
                wr_id: iter,
                sg_list: sge,
                opcode: self.opcode(c, iter)?,
                send_flags: flags(iter),
            });
        }
        post(&wrs)
    }

    /// The operation of requester WR `iter` of QP `c`; under --check of SEND and WRITE it
    /// also writes the message's pattern where the WR reads it.
    fn opcode(&self, c: usize, iter: u64) -> Result<WrOpcode, CliError> {
        let conn = &self.conns[c];
        let p = &self.p;
        let off = self.layout.offset(iter);
        let r = conn.remote;
        // Under --check the atomics all hit one word, so that their results form a sequence.
        let atomic_addr = if p.check { r.vaddr } else { r.vaddr + off };
        if p.check && matches!(p.op, PerfOp::Send | PerfOp::Write) {
            write_pattern(&conn.mr, off, p.size, iter).map_err(CliError::Verbs)?;
        }
        Ok(match p.op {
            PerfOp::Send => WrOpcode::Send,
            PerfOp::Write => WrOpcode::RdmaWrite {
                remote_addr: r.vaddr + off,
                rkey: r.rkey,
            },
            PerfOp::Read => WrOpcode::RdmaRead {
                remote_addr: r.vaddr + off,
                rkey: r.rkey,
            },
            PerfOp::Atomic if p.cas => WrOpcode::AtomicCmpSwap {
                remote_addr: atomic_addr,
                rkey: r.rkey,
                compare: if p.check { iter } else { 0 },
                swap: if p.check { iter + 1 } else { 0 },
            },
            PerfOp::Atomic => WrOpcode::AtomicFetchAdd {
                remote_addr: atomic_addr,
                rkey: r.rkey,
                add: 1,
            },
        })
    }

    /// Under --check, what a completed READ or atomic brought back: the messages and bytes
    /// verified (none for the other operations, checked where they land).
    pub(super) fn check_completion(&self, c: usize, iter: u64) -> Result<(u64, u64), String> {
        if !self.p.check {
            return Ok((0, 0));
        }
        let conn = &self.conns[c];
        let off = self.layout.offset(iter);
        match self.p.op {
            PerfOp::Read => {
                check_region(&conn.mr, off, self.p.size, iter).map(|()| (1, self.p.size))
            }
            PerfOp::Atomic => {
                let got = conn.mr.load_u64(off).map_err(|e| e.to_string())?;
                if got != iter {
                    return Err(format!(
                        "atomic check failed: operation {iter} returned {got}, expected {iter}"
                    ));
                }
                Ok((1, 8))
            }
            _ => Ok((0, 0)),
        }
    }

    /// Polls one batch of completions; fails on an error completion or a stall.
    pub(super) fn poll(
        &self,
        wcs: &mut [WorkCompletion],
        last: &mut Instant,
    ) -> Result<usize, CliError> {
        let n = poll_or_wait(&self.cq, wcs, false).map_err(CliError::Verbs)?;
        self.progress.completed(n);
        self.progress.tick(self.ctx);
        if n == 0 {
            if let Some(e) = self.never_answered() {
                return Err(e);
            }
            if last.elapsed() > self.timeout {
                return Err(CliError::Failed(format!(
                    "no completion for {} s (--timeout); {}",
                    self.timeout.as_secs(),
                    self.link_story()
                )));
            }
            return Ok(0);
        }
        *last = Instant::now();
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                // perftest: " Completion with error at client" / " Failed status 12: wr_id 0".
                return Err(CliError::Failed(format!(
                    "Completion with error at {}: Failed status {} ({}): wr_id {} ({:?}); {}",
                    self.role_name(),
                    wc.status as u32,
                    wc.status,
                    wc.wr_id,
                    wc.opcode,
                    self.link_story()
                )));
            }
        }
        Ok(n)
    }

    /// A receiver that has heard nothing from its sender since the QPs connected, and whose
    /// sender has closed the exchange, will hear nothing more: the sender failed (its own
    /// error says why). A sender that is still there, or has sent anything, is waited for.
    pub(super) fn sender_gone(&self, x: &mut Exchange) -> Option<CliError> {
        let rcvd = self.ctx.counter("rcvd_pkts").unwrap_or(0);
        if rcvd != self.heard.0 || !x.peer_closed() {
            return None;
        }
        Some(CliError::Failed(format!(
            "the peer closed the exchange before any of its messages arrived (its error says why); {}",
            self.link_story()
        )))
    }

    /// "client" or "server", as perftest names the end in its errors.
    fn role_name(&self) -> &'static str {
        if self.is_client != self.p.reversed {
            "client"
        } else {
            "server"
        }
    }

    /// Where this end's packets go and what came back: the counters that tell a dead or
    /// misaddressed peer from a lossy one.
    pub(super) fn link_story(&self) -> String {
        let c = |name: &str| self.ctx.counter(name).unwrap_or(0);
        let to = self
            .conns
            .first()
            .map(|c| std::net::SocketAddr::new(c.remote.gid.to_ip(), self.roce_port));
        let mut s = match to {
            Some(to) => format!("the QPs send to {to} (RoCEv2 over UDP)"),
            None => "no QP".to_string(),
        };
        s += &format!(
            ": {} packets sent, {} received",
            c("sent_pkts"),
            c("rcvd_pkts").saturating_sub(self.heard.0)
        );
        let (resent, timeouts) = (c("retransmit_pkts"), c("timeouts"));
        if resent + timeouts > 0 {
            s += &format!(
                ", {resent} retransmitted after {timeouts} ACK timeouts ({} each, -u {})",
                ack_timeout_text(self.qp_timeout),
                self.qp_timeout
            );
        }
        s
    }

    /// The retry count's verdict on a peer that never answered: every request timed out
    /// `retry_cnt` + 1 times over and not one RoCE packet arrived since the QPs connected (a
    /// peer that is not there, or listens on another RoCE port). IBTA's retry count ends such
    /// a QP with "transport retry counter exceeded" after retry_cnt retries; rxe retries
    /// forever at retry_cnt 7 (perftest's), so this end applies the count itself there, only
    /// to a peer never heard from (one that has answered once keeps rxe's patience). Below 7
    /// the transport ends the QP itself.
    fn never_answered(&self) -> Option<CliError> {
        let (rcvd0, timeouts0) = self.heard;
        let rcvd = self.ctx.counter("rcvd_pkts").unwrap_or(0);
        let timeouts = self
            .ctx
            .counter("timeouts")
            .unwrap_or(0)
            .saturating_sub(timeouts0);
        if self.p.conn != Connection::Rc
            || self.retry_cnt != 7
            || rcvd != rcvd0
            || timeouts <= self.retry_cnt as u64
        {
            return None;
        }
        Some(CliError::Failed(format!(
            "Completion with error at {}: Failed status {} ({}): not one RoCE packet back since the QPs connected; {}: is the peer running, and is its RoCE port {} (--roce-port)?",
            self.role_name(),
            WcStatus::RetryExcErr as u32,
            WcStatus::RetryExcErr,
            self.link_story(),
            self.roce_port
        )))
    }

    /// The index of the QP a completion belongs to.
    pub(super) fn conn_of(&self, wc: &WorkCompletion) -> Result<usize, CliError> {
        self.conns
            .iter()
            .position(|c| c.qp.qp_num() == wc.qp_num)
            .ok_or_else(|| CliError::Failed("completion for an unknown QP".into()))
    }
}
