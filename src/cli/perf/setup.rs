//! Building and connecting a run: the QPs and memory ([`Test::new`]) and the key exchange and
//! barriers around connecting them, in each perftest program's order ([`Test::connect`]).

use std::sync::Arc;
use std::time::Duration;

use softroce::ib::*;
use softroce::oob::perftest::{Exchange, KeyMsg, Role};
use softroce::verbs::*;
use std::result::Result;

use super::params::{Params, Program};
use super::pattern::write_pattern;
use super::progress::Progress;
use super::render::{print_addresses, print_banner};
use super::resources::{Agreed, Conn, Layout, Test};
use super::{Connection, PerfArgs};
use crate::cli::qp_setup::{connect_rc, create_qp, create_rc_qp, Queues};
use crate::cli::CliError;

impl<'a> Test<'a> {
    /// Creates the CQ, and per QP a memory region and a QP in INIT with the keys this end
    /// will advertise; under --check of READ, the server fills what the client will read.
    pub(super) fn new(
        ctx: &'a Context,
        p: Params,
        agreed: &Agreed,
        role: Role,
        timeout: Duration,
        args: &PerfArgs,
    ) -> Result<Test<'a>, CliError> {
        let prog = p.prog;
        let layout = agreed.layout;
        let gid = ctx
            .gid(args.gid_index)
            .ok_or_else(|| CliError::Usage(format!("-x {}: no such GID index", args.gid_index)))?;
        let (tx_depth, rx_depth) = (p.tx_depth, p.rx_depth);
        let pd = ctx.alloc_pd().map_err(CliError::Verbs)?;
        // As perftest sizes its CQs: tx_depth entries per QP, and rx_depth more only for the SEND
        // programs, the only ones that post receives (ib_write_bw -q 64 fits in rxe's 32767 CQEs).
        let recv_cqes = if matches!(prog, Program::SendBw | Program::SendLat) {
            rx_depth
        } else {
            0
        };
        let cq = ctx
            .create_cq((tx_depth + recv_cqes + 2) as usize * p.num_qps as usize)
            .map_err(CliError::Verbs)?;
        let mut seed = psn_seed();
        let mut conns = Vec::new();
        for _ in 0..p.num_qps {
            // lrand48() & 0xffffff, as perftest draws its PSNs.
            seed = seed.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB) & ((1 << 48) - 1);
            let psn = ((seed >> 17) & 0xFF_FFFF) as u32;
            conns.push(new_conn(&pd, &cq, &p, agreed, gid, psn)?);
        }
        let t = Test {
            p,
            layout,
            conns,
            cq,
            ctx,
            // --reversed swaps who generates the traffic, not who listens.
            is_client: (role == Role::Client) != p.reversed,
            timeout,
            failure: None,
            verified: (0, 0),
            warm: args.perform_warm_up,
            cycle: agreed.cycle,
            line: agreed.line,
            pd,
            progress: Progress::new(args.qp_timeout),
            heard: (0, 0),
            roce_port: args.device.roce_port,
            qp_timeout: args.qp_timeout,
            retry_cnt: args.retry_cnt,
        };
        if p.check && !t.is_client && matches!(prog, Program::ReadBw | Program::ReadLat) {
            t.fill_read_sources()?;
        }
        Ok(t)
    }

    /// --check of READ: the server writes every message's pattern where the client will read
    /// it.
    fn fill_read_sources(&self) -> Result<(), CliError> {
        for c in &self.conns {
            for it in 0..self.p.iters {
                write_pattern(
                    &c.mr,
                    self.layout.half + self.layout.offset(it),
                    self.p.size,
                    it,
                )
                .map_err(CliError::Verbs)?;
            }
        }
        Ok(())
    }

    /// Exchanges the keys and connects every QP, with the barriers in the program's order
    /// (under -R, rdma_cm connects the QPs first: [`Test::connect_rdma_cm`]).
    /// Returns the first QP's keys, which the later barriers carry.
    pub(super) fn connect(
        &mut self,
        x: &mut Exchange,
        mtu: Mtu,
        args: &PerfArgs,
        cm: Option<&mut super::rdma_cm::Session>,
    ) -> Result<KeyMsg, CliError> {
        let by_cm = match cm {
            Some(s) if s.connects_qps() => {
                self.connect_rdma_cm(x, s, args)?;
                true
            }
            _ => false,
        };
        let prog = self.p.prog;
        let p = self.p;
        let k0 = self.conns[0].mine;
        let lat_rdma = matches!(
            prog,
            Program::WriteLat | Program::ReadLat | Program::AtomicLat
        );
        if lat_rdma {
            self.conns[0].remote = self.hs(x, &k0)?;
        }
        for i in 0..self.conns.len() {
            let mine = self.conns[i].mine;
            self.conns[i].remote = self.hs(x, &mine)?;
        }
        if by_cm {
            // rdma_cm connected the QPs (Test::connect_rdma_cm).
        } else if p.conn == Connection::Ud {
            self.connect_ud(args)?;
        } else {
            for c in &self.conns {
                connect(c, mtu, args)?;
            }
        }
        if args.full_report() {
            // Under -R the QPs' MTU is the one rdma_cm set, not the exchanged -m.
            let mtu_bytes = if by_cm {
                self.conns[0].qp.query().path_mtu.bytes()
            } else {
                mtu.bytes()
            };
            print_banner(&p, mtu_bytes)?;
            let mine: Vec<KeyMsg> = self.conns.iter().map(|c| c.mine).collect();
            let theirs: Vec<KeyMsg> = self.conns.iter().map(|c| c.remote).collect();
            print_addresses(p.op, &mine, &theirs)?;
        }
        let c = |name: &str| self.ctx.counter(name).unwrap_or(0);
        self.heard = (c("rcvd_pkts"), c("timeouts"));
        let send_style = matches!(prog, Program::SendBw | Program::SendLat);
        if send_style {
            self.hs(x, &k0)?;
        }
        for i in 0..self.conns.len() {
            let mine = self.conns[i].mine;
            self.hs(x, &mine)?;
        }
        if !send_style {
            self.hs(x, &k0)?;
        } else if !p.all {
            // Receives first, then a barrier, so that no SEND meets an empty queue (under -a
            // ib_send_bw does so for every size: `Test::run_bw`).
            self.post_receives()?;
            self.hs(x, &k0)?;
        }
        Ok(k0)
    }

    /// The receives a SEND program posts before its barrier: rx_depth per QP, at the
    /// receiving server of ib_send_bw and at both ends of ib_send_lat and ib_send_bw -b.
    pub(super) fn post_receives(&self) -> Result<(), CliError> {
        if self.p.prog == Program::SendLat || !self.is_client || self.p.duplex {
            let first = (self.p.rx_depth as u64).min(if self.p.duration.is_some() {
                u64::MAX
            } else {
                self.p.iters
            });
            for c in 0..self.conns.len() {
                for m in 0..first {
                    self.post_recv(c, m)?;
                }
            }
        }
        Ok(())
    }

    /// Moves to message size `size` under -a: perftest's addresses for it in the same buffers.
    /// Without -a, the layout agreed at setup stays.
    pub(super) fn set_size(&mut self, size: u64) {
        if !self.p.all {
            return;
        }
        let l = Layout::perftest(size, self.cycle, self.line);
        self.p.size = size;
        self.layout = Layout {
            half: self.layout.half,
            ..l
        };
    }
}

/// One QP of the run: its memory region (both halves, and under UD room for the GRH), the QP
/// in INIT as perftest creates it for the connection type, and the keys this end advertises.
fn new_conn(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    p: &Params,
    agreed: &Agreed,
    gid: Gid,
    psn: u32,
) -> Result<Conn, CliError> {
    let layout = agreed.layout;
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    // UD: the receives start 40 bytes before a cache line and end up to a line later.
    let tail = if p.grh_room() > 0 {
        agreed.line.max(p.grh_room())
    } else {
        0
    };
    let mr = pd
        .register_mr((2 * layout.half + tail) as usize, access)
        .map_err(CliError::Verbs)?;
    let queues = Queues {
        send_wr: p.tx_depth,
        recv_wr: p.rx_depth,
        inline: p.inline,
    };
    let qp = match p.conn {
        Connection::Rc => create_rc_qp(
            pd,
            cq,
            queues,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        )?,
        Connection::Uc => {
            // perftest's UC QP: REMOTE_WRITE only, no inline.
            let q = Queues {
                inline: 0,
                ..queues
            };
            let qp = create_qp(pd, cq, QpType::Uc, q).map_err(CliError::Verbs)?;
            qp.init(AccessFlags::REMOTE_WRITE)
                .map_err(CliError::Verbs)?;
            qp
        }
        Connection::Ud => super::ud::create_ud_qp(pd, cq, queues)?,
    };
    let mine = KeyMsg {
        lid: 0,
        out_reads: p.outs as u16,
        qpn: qp.qp_num(),
        psn,
        rkey: mr.rkey(),
        vaddr: mr.addr() + layout.half,
        gid,
        srqn: 0,
    };
    Ok(Conn {
        qp: Arc::new(qp),
        mr,
        mine,
        remote: mine,
        ah: None,
    })
}

/// A random 48-bit seed for the PSNs.
fn psn_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ ((std::process::id() as u64) << 24)) & ((1 << 48) - 1)
}

fn connect(c: &Conn, mtu: Mtu, args: &PerfArgs) -> Result<(), CliError> {
    // perftest's ctx_connect: our max_dest_rd_atomic is what we told the peer, our
    // max_rd_atomic what the peer told us; hop limit 0xFF (the route's replaces it on the wire)
    // and --tclass (every packet's IP TOS) in the address vector. UC: the AV, MTU, QPN and
    // PSNs only.
    let r = c.remote;
    let traffic_class = args.tclass.unwrap_or(0);
    if args.connection == Connection::Uc {
        let uc = RcConnect {
            path_mtu: mtu,
            hop_limit: 0xFF,
            traffic_class,
            ..RcConnect::new(r.qpn, r.psn, r.gid, c.mine.psn)
        };
        c.qp.ready_to_receive_uc(&uc)
            .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTR: {e}")))?;
        return c
            .qp
            .ready_to_send_uc(&uc)
            .map_err(|e| CliError::Failed(format!("Failed to modify QP to RTS: {e}")));
    }
    let rc = RcConnect {
        path_mtu: mtu,
        hop_limit: 0xFF,
        traffic_class,
        max_rd_atomic: r.out_reads.clamp(1, 128) as u8,
        max_dest_rd_atomic: c.mine.out_reads.clamp(1, 128) as u8,
        timeout: args.qp_timeout,
        retry_cnt: args.retry_cnt,
        ..RcConnect::new(r.qpn, r.psn, r.gid, c.mine.psn)
    };
    connect_rc(&c.qp, &rc)
}
