//! `softroce perf -R` and `-z`: perftest's rdma_cm modes (spec-notes/perftest-rdma-cm.md).
//!
//! -z (perftest's `use_rdma_cm`) runs the out-of-band exchange over an rdma_cm connection on
//! the -p port instead of TCP ([`CmLink`]); the QPs connect from the exchanged keys as over
//! TCP. -R (`work_rdma_cm`, which implies -z) also connects every data QP through rdma_cm, to
//! the same port, between two handshakes (`create_rdma_cm_connection`), in place of the key
//! connect; the keys still travel, for the memory (rkey, address) they describe.

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softroce::ib::*;
use softroce::oob::perftest::{Exchange, KeyMsg, Role};
use softroce::oob::perftest_cm::{connect_id, CmEvents, CmLink};
use softroce::rdma_cm::{CmId, ConnParam, EventKind, RdmaCmError};
use softroce::verbs::*;
use std::result::Result;

use super::exchange;
use super::resources::Test;
use super::{Connection, PerfArgs, PerfOp};
use crate::cli::CliError;

/// The rdma_cm side of a -R or -z run: the event channel, where to connect, and the data
/// connections made.
pub(super) struct Session {
    events: Arc<CmEvents>,
    /// Client: the server's address.
    server: Option<IpAddr>,
    /// The rdma_cm port (-p).
    port: u16,
    /// Server: the listener, kept for the data connections (perftest's server listens again
    /// on the same port; one listener serves both here).
    listener: Option<CmId>,
    /// -R: rdma_cm connects the data QPs too.
    connects_qps: bool,
    /// The data connections' identifiers.
    data: Vec<CmId>,
    /// How long a step may wait for the peer.
    timeout: Duration,
}

fn cm(e: RdmaCmError) -> CliError {
    CliError::Failed(format!("rdma_cm: {e}"))
}

/// The device: already open (rdma_cm needs it for the exchange), or its address (over TCP
/// the device opens after the exchange's agreement, as before -R existed).
pub(super) enum Device {
    /// Opened for the rdma_cm exchange.
    Open(Context),
    /// To open at this address.
    At(IpAddr),
}

impl Device {
    /// The open device.
    pub(super) fn open(self, args: &PerfArgs) -> Result<Context, CliError> {
        match self {
            Device::Open(ctx) => Ok(ctx),
            Device::At(ip) => args.device.open(ip),
        }
    }
}

/// Opens the out-of-band exchange: over TCP, or, with -R or -z, an rdma_cm connection to (or
/// from) the peer's -p port on the device, which it opens first.
pub(super) fn open(
    args: &PerfArgs,
    timeout: Duration,
) -> Result<(Exchange, Device, Option<Session>), CliError> {
    if !args.rdma_cm && !args.comm_rdma_cm {
        let (x, ip) = exchange::open_tcp(args, timeout)?;
        return Ok((x, Device::At(ip), None));
    }
    if args.rdma_cm && args.connection != Connection::Rc {
        // perftest: "UC is not supported in librdmacm"; its UD variant (the address handle
        // from the connection's events) is not implemented here.
        return Err(CliError::Usage(
            "-R connects RC QPs here (perftest: UC is not supported in librdmacm; its UD rdma_cm mode is not implemented); -z runs the exchange over rdma_cm with any -c"
                .into(),
        ));
    }
    let server = match &args.server {
        Some(h) => Some(
            (h.as_str(), args.port)
                .to_socket_addrs()
                .map_err(|e| CliError::Usage(format!("cannot resolve {h}: {e}")))?
                .next()
                .ok_or_else(|| CliError::Usage(format!("{h} has no address")))?
                .ip(),
        ),
        None => None,
    };
    let ip = args.device.local_ip(server)?;
    let ctx = args.device.open(ip)?;
    let events = CmEvents::new(&ctx).map_err(cm)?;
    let (link, listener, role) = match server {
        Some(s) => (
            CmLink::connect(&ctx, Arc::clone(&events), s, args.port, timeout)
                .map_err(CliError::Oob)?,
            None,
            Role::Client,
        ),
        None => {
            let l = events.channel().create_id();
            l.bind_addr(args.port).map_err(cm)?;
            l.listen(args.num_qps as usize + 1).map_err(cm)?;
            if args.full_report() {
                super::render::print_waiting()?;
            }
            let link =
                CmLink::accept(&ctx, Arc::clone(&events), &l, timeout).map_err(CliError::Oob)?;
            (link, Some(l), Role::Server)
        }
    };
    let s = Session {
        events,
        server,
        port: args.port,
        listener,
        connects_qps: args.rdma_cm,
        data: Vec::new(),
        timeout,
    };
    Ok((
        Exchange::over(Box::new(link), role),
        Device::Open(ctx),
        Some(s),
    ))
}

impl Session {
    /// Whether rdma_cm connects the data QPs (-R), not the exchanged keys.
    pub(super) fn connects_qps(&self) -> bool {
        self.connects_qps
    }

    /// The end of a -R run (perftest's `rdma_cm_disconnect_nodes`): the client disconnects
    /// every data connection and waits for the answers; the server answers the client's
    /// disconnections and stays until they are done (time-wait), so that the client is not
    /// left waiting for a DREP. Bounded: a peer that is gone costs a few seconds at most.
    pub(super) fn finish(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let client = self.server.is_some();
        if client {
            for id in &self.data {
                let _ = id.disconnect();
            }
        }
        let want = if client {
            EventKind::Disconnected
        } else {
            EventKind::TimewaitExit
        };
        let mut done = 0;
        let deadline = Instant::now() + self.timeout.min(Duration::from_secs(5));
        while done < self.data.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(e) = self.events.next(left) else {
                return;
            };
            if !self.data.iter().any(|d| d.same(&e.id)) {
                continue;
            }
            if e.kind == EventKind::Disconnected && !client {
                // The peer's DREQ: answer it (rdma_disconnect sends the DREP).
                let _ = e.id.disconnect();
            }
            if e.kind == want {
                done += 1;
            }
        }
    }
}

impl Test<'_> {
    /// perftest's `create_rdma_cm_connection` under -R: a handshake (of zeroed keys: the QPs'
    /// are not known yet there), every data QP connected through rdma_cm, another handshake.
    /// The client connects its QPs one after the other, so that the server (which pairs them
    /// in arrival order, as perftest's does) pairs them in index order.
    pub(super) fn connect_rdma_cm(
        &self,
        x: &mut Exchange,
        s: &mut Session,
        args: &PerfArgs,
    ) -> Result<(), CliError> {
        let zero = KeyMsg {
            lid: 0,
            out_reads: 0,
            qpn: 0,
            psn: 0,
            rkey: 0,
            vaddr: 0,
            gid: Gid([0; 16]),
            srqn: 0,
        };
        self.hs(x, &zero)?;
        // perftest's rdma_cm_route_handler / rdma_cm_connection_request_handler: READ
        // resources only for READ and atomics, retry and RNR retry both the retry count.
        let reads = match self.p.op {
            PerfOp::Read | PerfOp::Atomic => self.conns[0].mine.out_reads.clamp(1, 128) as u8,
            _ => 0,
        };
        let param = ConnParam {
            private_data: Vec::new(),
            responder_resources: reads,
            initiator_depth: reads,
            retry_count: args.retry_cnt,
            rnr_retry_count: args.retry_cnt,
        };
        let deadline = Instant::now() + s.timeout;
        match (s.server, &s.listener) {
            (Some(server), _) => {
                for c in &self.conns {
                    let id = s.events.channel().create_id();
                    id.set_qp(Arc::clone(&c.qp)).map_err(cm)?;
                    connect_id(&s.events, &id, server, s.port, &param, deadline)
                        .map_err(CliError::Oob)?;
                    s.data.push(id);
                }
            }
            (None, Some(listener)) => {
                while s.data.len() < self.conns.len() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let e = s.events.next(left).map_err(|e| match e {
                        RdmaCmError::Timeout => CliError::Failed(format!(
                            "rdma_cm: {} of {} data connections came in {} s",
                            s.data.len(),
                            self.conns.len(),
                            s.timeout.as_secs()
                        )),
                        e => cm(e),
                    })?;
                    let ours = e.listen_id.as_ref().is_some_and(|l| l.same(listener));
                    if e.kind != EventKind::ConnectRequest || !ours {
                        continue;
                    }
                    let qp = &self.conns[s.data.len()].qp;
                    e.id.set_qp(Arc::clone(qp)).map_err(cm)?;
                    e.id.accept(&param).map_err(cm)?;
                    s.data.push(e.id);
                }
            }
            (None, None) => {
                return Err(CliError::Failed("rdma_cm: no listener".into()));
            }
        }
        self.hs(x, &zero)?;
        Ok(())
    }
}
