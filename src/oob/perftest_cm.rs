//! perftest's out-of-band exchange under -R (its `use_rdma_cm`): the same messages in the
//! same order as over TCP ([`super::perftest::Exchange`]), each one SEND on an RC QP that
//! rdma_cm connected to the peer's port (-p), and the key messages in their binary form
//! ([`super::perftest::KeyMsg::to_dest`]). perftest 4.5, src/perftest_communication.c:
//! `rdma_client_connect` / `rdma_server_connect` set the connection up, `rdma_write_data` /
//! `rdma_read_data` and `rdma_write_keys` / `rdma_read_keys` move the messages, one receive
//! of `sizeof(struct pingpong_dest)` (56) bytes posted at a time and posted again after each
//! message is read. spec-notes/perftest-rdma-cm.md has the rules.
//!
//! One rdma_cm event channel serves a device, so the channel is shared ([`CmEvents`]) with
//! whoever connects the data QPs: events that are not the exchange's wait there for it.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::perftest::{Transport, DEST_LEN};
use super::OobError;
use crate::ib::{
    AccessFlags, QpCap, QpType, RecvWr, SendFlags, SendWr, VerbsError, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use crate::rdma_cm::{CmId, ConnParam, EventChannel, EventKind, RdmaCmError, RdmaCmEvent};
use crate::verbs::{
    CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair,
};

/// perftest's retries of an rdma_cm connection (`rdma_cm_client_connection`: 10 tries,
/// 100 ms apart).
pub const RETRY_DELAY: Duration = Duration::from_millis(100);

/// The wr_id perftest gives every exchange message (`SYNC_SPEC_ID`).
const SYNC_SPEC_ID: u64 = 5;

/// Where received messages land in the exchange's memory region; sends go at `SEND_AT`.
const RECV_AT: u64 = 0;
/// See `RECV_AT`.
const SEND_AT: u64 = 256;

/// A device's rdma_cm event channel, shared by the exchange and the data connections, with
/// the events one of them took that belong to the other.
#[derive(Debug)]
pub struct CmEvents {
    ch: EventChannel,
    stash: Mutex<VecDeque<RdmaCmEvent>>,
}

impl CmEvents {
    /// Opens `ctx`'s event channel.
    pub fn new(ctx: &Context) -> Result<Arc<CmEvents>, RdmaCmError> {
        Ok(Arc::new(CmEvents {
            ch: EventChannel::new(ctx)?,
            stash: Mutex::new(VecDeque::new()),
        }))
    }

    /// The channel (to create identifiers).
    pub fn channel(&self) -> &EventChannel {
        &self.ch
    }

    /// The next event: one put aside first, else the channel's, waiting at most `timeout`.
    pub fn next(&self, timeout: Duration) -> Result<RdmaCmEvent, RdmaCmError> {
        let kept = self
            .stash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        match kept {
            Some(e) => Ok(e),
            None => self.ch.get_event(timeout),
        }
    }

    /// Puts an event aside for the next [`CmEvents::next`].
    pub fn keep(&self, e: RdmaCmEvent) {
        self.stash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(e);
    }

    /// The next event about `id`, waiting until `deadline`; others are kept.
    pub fn next_for(&self, id: &CmId, deadline: Instant) -> Result<RdmaCmEvent, OobError> {
        let mut others = Vec::new();
        let r = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Ok(e) if e.id.same(id) => break Ok(e),
                Ok(e) => others.push(e),
                Err(RdmaCmError::Timeout) => break Err(OobError::Timeout),
                Err(e) => break Err(cm_err(e)),
            }
        };
        for e in others {
            self.keep(e);
        }
        r
    }
}

fn cm_err(e: RdmaCmError) -> OobError {
    OobError::Local(format!("rdma_cm: {e}"))
}

fn verbs_err(e: VerbsError) -> OobError {
    OobError::Local(format!("rdma_cm exchange QP: {e}"))
}

/// The connection parameters of perftest's exchange QP (`rdma_client_connect`,
/// `rdma_server_connect` with the exchange's own parameters, whose verb is SEND): no READ
/// resources, retry count 7, RNR retry 7 (forever), no private data.
pub fn exchange_conn_param() -> ConnParam {
    ConnParam {
        private_data: Vec::new(),
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
    }
}

/// The exchange's transport: its identifier, QP, CQs and message buffer.
#[derive(Debug)]
pub struct CmLink {
    events: Arc<CmEvents>,
    id: CmId,
    qp: Arc<QueuePair>,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
    /// A receive completion `ready` saw and `recv` has not taken yet.
    pending: Option<WorkCompletion>,
    /// How long a send or a receive may wait for the peer.
    timeout: Duration,
}

impl CmLink {
    /// Creates the exchange QP on `id` (one SEND and one receive of at most 56 bytes at a
    /// time, as perftest's tx_depth and rx_depth of 1) and posts its receive.
    fn with_qp(
        ctx: &Context,
        events: Arc<CmEvents>,
        id: CmId,
        timeout: Duration,
    ) -> Result<CmLink, OobError> {
        let pd = ctx.alloc_pd().map_err(verbs_err)?;
        let send_cq = ctx.create_cq(4).map_err(verbs_err)?;
        let recv_cq = ctx.create_cq(4).map_err(verbs_err)?;
        let mr = pd
            .register_mr(2 * SEND_AT as usize, AccessFlags::LOCAL_WRITE)
            .map_err(verbs_err)?;
        let qp = id
            .create_qp(
                &pd,
                &QpInitAttr {
                    send_cq: &send_cq,
                    recv_cq: &recv_cq,
                    cap: QpCap {
                        max_send_wr: 2,
                        max_recv_wr: 2,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    qp_type: QpType::Rc,
                    sq_sig_all: false,
                },
            )
            .map_err(cm_err)?;
        let link = CmLink {
            events,
            id,
            qp,
            send_cq,
            recv_cq,
            mr,
            _pd: pd,
            pending: None,
            timeout,
        };
        link.post_recv()?;
        Ok(link)
    }

    /// The active side (`rdma_client_connect`): resolves `server`, connects to its rdma_cm
    /// `port` and waits for ESTABLISHED, retrying as [`connect_id`] does until `timeout`.
    pub fn connect(
        ctx: &Context,
        events: Arc<CmEvents>,
        server: IpAddr,
        port: u16,
        timeout: Duration,
    ) -> Result<CmLink, OobError> {
        let id = events.channel().create_id();
        let link = CmLink::with_qp(ctx, Arc::clone(&events), id.clone(), timeout)?;
        let deadline = Instant::now() + timeout;
        connect_id(&events, &id, server, port, &exchange_conn_param(), deadline)?;
        Ok(link)
    }

    /// The passive side (`rdma_server_connect`): waits for the first connect request on
    /// `listener` (already listening), creates the exchange QP for it and accepts. Events of
    /// other identifiers that arrive meanwhile are kept for the caller.
    pub fn accept(
        ctx: &Context,
        events: Arc<CmEvents>,
        listener: &CmId,
        timeout: Duration,
    ) -> Result<CmLink, OobError> {
        let req = loop {
            match events.next(Duration::from_secs(3600)) {
                Ok(e)
                    if e.kind == EventKind::ConnectRequest
                        && e.listen_id.as_ref().is_some_and(|l| l.same(listener)) =>
                {
                    break e
                }
                Ok(_) | Err(RdmaCmError::Timeout) => {}
                Err(e) => return Err(cm_err(e)),
            }
        };
        let link = CmLink::with_qp(ctx, Arc::clone(&events), req.id.clone(), timeout)?;
        req.id.accept(&exchange_conn_param()).map_err(cm_err)?;
        Ok(link)
    }

    /// The exchange's identifier.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    fn post_recv(&self) -> Result<(), OobError> {
        let sge = [self.mr.sge(RECV_AT, SEND_AT as u32)];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: SYNC_SPEC_ID,
                sg_list: &sge,
            }])
            .map_err(|e| OobError::Local(format!("rdma_cm exchange QP: post_recv: {e}")))
    }

    /// Looks at the channel without waiting: the exchange's own connection ending is the
    /// peer closing; other identifiers' events are kept.
    fn watch_events(&self) -> Result<(), OobError> {
        for _ in 0..64 {
            let e = match self.events.channel().get_event(Duration::ZERO) {
                Ok(e) => e,
                Err(RdmaCmError::Timeout) => return Ok(()),
                Err(e) => return Err(cm_err(e)),
            };
            if !e.id.same(&self.id) {
                self.events.keep(e);
            } else if matches!(
                e.kind,
                EventKind::Disconnected | EventKind::Rejected { .. } | EventKind::Unreachable
            ) {
                let _ = self.id.disconnect();
                return Err(OobError::PeerClosed);
            }
        }
        Ok(())
    }
}

/// Connects `id` (its QP already set) to `server`'s rdma_cm `port`: address, route, REQ,
/// and ESTABLISHED. A rejection or no answer (the server is not listening yet: perftest's
/// server listens for its data connections only after a handshake) is retried every 100 ms,
/// as perftest's `rdma_cm_client_connection` does, until `deadline`.
pub fn connect_id(
    events: &CmEvents,
    id: &CmId,
    server: IpAddr,
    port: u16,
    param: &ConnParam,
    deadline: Instant,
) -> Result<(), OobError> {
    // What the attempts met, for the error that ends them: a peer that rejects has a
    // device but nothing listening on the port; one that never answers has no device there.
    let (mut attempts, mut rejected, mut unreachable) = (0u32, 0u32, 0u32);
    let started = Instant::now();
    let told = |attempts: u32, rejected: u32, unreachable: u32, last: String| {
        let mut s = format!(
            "rdma_cm: no connection to {server} port {port} after {} s: {attempts} connection request(s) (REQ, over RoCEv2 to {server})",
            started.elapsed().as_secs()
        );
        if rejected > 0 {
            s += &format!(", {rejected} rejected (a RoCE device answers there, but nothing listened on rdma_cm port {port} yet)");
        }
        if unreachable > 0 {
            s += &format!(", {unreachable} unanswered after the CM's retries");
        }
        s + &format!("; the last {last}: is a server with -R (or -z) running at {server} -p {port}, on the same --roce-port?")
    };
    loop {
        attempts += 1;
        let explain = |e: OobError, what: &str| match e {
            OobError::Timeout => OobError::Local(told(
                attempts,
                rejected,
                unreachable,
                format!("got no answer while {what}"),
            )),
            e => e,
        };
        id.resolve_addr(server, port).map_err(cm_err)?;
        expect(events, id, EventKind::AddrResolved, deadline)
            .map_err(|e| explain(e, "resolving the address"))?;
        id.resolve_route().map_err(cm_err)?;
        expect(events, id, EventKind::RouteResolved, deadline)
            .map_err(|e| explain(e, "resolving the route"))?;
        id.connect(param).map_err(cm_err)?;
        let e = events
            .next_for(id, deadline)
            .map_err(|e| explain(e, "waiting for the reply (REP) to its REQ"))?;
        match e.kind {
            EventKind::Established => return Ok(()),
            EventKind::Rejected { .. } | EventKind::Unreachable
                if Instant::now() + RETRY_DELAY < deadline =>
            {
                if e.kind == EventKind::Unreachable {
                    unreachable += 1;
                } else {
                    rejected += 1;
                }
                std::thread::sleep(RETRY_DELAY);
            }
            other => {
                return Err(OobError::Local(told(
                    attempts,
                    rejected,
                    unreachable,
                    format!("ended in {other:?}"),
                )))
            }
        }
    }
}

/// Waits for `kind` on `id`.
fn expect(
    events: &CmEvents,
    id: &CmId,
    kind: EventKind,
    deadline: Instant,
) -> Result<(), OobError> {
    let e = events.next_for(id, deadline)?;
    if e.kind != kind {
        return Err(OobError::Local(format!(
            "rdma_cm: {:?} while waiting for {kind:?}",
            e.kind
        )));
    }
    Ok(())
}

impl Transport for CmLink {
    fn send(&mut self, msg: &[u8]) -> Result<(), OobError> {
        if msg.len() > DEST_LEN {
            return Err(OobError::Local(format!(
                "a {}-byte message: perftest receives at most {DEST_LEN} bytes over rdma_cm",
                msg.len()
            )));
        }
        self.mr.write(SEND_AT, msg).map_err(verbs_err)?;
        let sge = [self.mr.sge(SEND_AT, msg.len() as u32)];
        self.qp
            .post_send(&[SendWr {
                wr_id: SYNC_SPEC_ID,
                sg_list: &sge,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
            }])
            .map_err(|e| OobError::Local(format!("rdma_cm exchange QP: post_send: {e}")))?;
        // As rdma_write_data: wait for the SEND's completion (the peer has the message).
        let mut wc = [WorkCompletion::default(); 1];
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .send_cq
                .wait(&mut wc, left.min(Duration::from_millis(200)))
            {
                Ok(1) => break,
                Ok(_) | Err(VerbsError::Timeout) => {
                    self.watch_events()?;
                    if left.is_zero() {
                        return Err(OobError::Timeout);
                    }
                }
                Err(e) => return Err(verbs_err(e)),
            }
        }
        match wc[0].status {
            WcStatus::Success => Ok(()),
            WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr | WcStatus::WrFlushErr => {
                Err(OobError::PeerClosed)
            }
            s => Err(OobError::Local(format!(
                "rdma_cm exchange QP: SEND completed with {s:?}"
            ))),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<(), OobError> {
        let deadline = Instant::now() + self.timeout;
        while !self.ready(Duration::from_millis(200))? {
            if Instant::now() >= deadline {
                return Err(OobError::Timeout);
            }
        }
        let Some(wc) = self.pending.take() else {
            return Err(OobError::Timeout);
        };
        match wc.status {
            WcStatus::Success if wc.opcode == WcOpcode::Recv => {}
            WcStatus::WrFlushErr => return Err(OobError::PeerClosed),
            s => {
                return Err(OobError::Local(format!(
                    "rdma_cm exchange QP: receive completed with {s:?} ({:?})",
                    wc.opcode
                )))
            }
        }
        if wc.byte_len as usize != buf.len() {
            return Err(OobError::Malformed {
                what: "perftest message over rdma_cm",
                detail: format!(
                    "{} bytes where the exchange is at a {}-byte message",
                    wc.byte_len,
                    buf.len()
                ),
            });
        }
        self.mr.read(RECV_AT, buf).map_err(verbs_err)?;
        // As rdma_read_data: the next receive goes up once this message is read.
        self.post_recv()
    }

    fn ready(&mut self, within: Duration) -> Result<bool, OobError> {
        if self.pending.is_some() {
            return Ok(true);
        }
        let mut wc = [WorkCompletion::default(); 1];
        match self.recv_cq.wait(&mut wc, within) {
            Ok(1) => {
                self.pending = Some(wc[0]);
                Ok(true)
            }
            Ok(_) | Err(VerbsError::Timeout) => {
                self.watch_events()?;
                Ok(false)
            }
            Err(e) => Err(verbs_err(e)),
        }
    }

    fn binary_keys(&self) -> bool {
        true
    }

    fn finish(&mut self) -> Result<(), OobError> {
        Ok(())
    }
}
