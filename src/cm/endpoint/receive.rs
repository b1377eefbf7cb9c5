//! What the endpoint does with each CM message it receives (IBTA §12.9.6's transitions on
//! receipt, and Linux's answers to duplicates and strangers).

use super::*;

/// What [`CmEndpoint::lookup`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// A connection of ours, both IDs matching, from its peer.
    Ours,
    /// No connection with both IDs.
    Unknown,
    /// The IDs match, the sender is not the connection's peer.
    WrongPeer,
}

impl CmEndpoint {
    /// The connection a message from `from` names by our communication ID `ours` and the
    /// sender's `theirs`. It is ours to act on only when both IDs are the connection's (the
    /// sender's is unknown to us until its REP, and then any goes) and it comes from the
    /// connection's peer: Linux's cm.c checks the IDs alone, but on RoCE the source address is
    /// what a third host cannot choose without also spoofing it, and a connection has one
    /// peer (spec-notes/security.md).
    fn lookup(&mut self, from: SocketAddr, ours: u32, theirs: u32) -> Lookup {
        let Some(c) = self.conns.get(&ours) else {
            self.counters.unmatched += 1;
            return Lookup::Unknown;
        };
        if c.remote_comm_id != 0 && c.remote_comm_id != theirs {
            self.counters.unmatched += 1;
            return Lookup::Unknown;
        }
        if c.peer != from {
            self.counters.wrong_peer += 1;
            return Lookup::WrongPeer;
        }
        Lookup::Ours
    }

    /// Handles the payload of a SEND that QP1 received from `from`.
    pub fn handle_mad(&mut self, now: Duration, from: SocketAddr, payload: &[u8]) {
        self.counters.mads_received += 1;
        let Ok((hdr, msg)) = CmMessage::parse(payload) else {
            self.counters.bad_mads += 1;
            return;
        };
        match msg {
            CmMessage::Req(r) => self.on_req(now, from, hdr.tid, &r),
            CmMessage::Mra(m) => self.on_mra(now, from, &m),
            CmMessage::Rej(r) => self.on_rej(now, from, &r),
            CmMessage::Rep(r) => self.on_rep(from, &r),
            CmMessage::Rtu(r) => self.on_rtu(from, &r),
            CmMessage::Dreq(d) => self.on_dreq(now, from, hdr.tid, &d),
            CmMessage::Drep(d) => self.on_drep(now, from, &d),
            CmMessage::SidrReq(r) => self.on_sidr_req(now, from, hdr.tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(from, hdr.tid, &r),
        }
    }

    pub(super) fn reject_req(&mut self, to: SocketAddr, tid: u64, req: &CmReq, reason: u16) {
        let rej = CmRej {
            local_comm_id: 0,
            remote_comm_id: req.local_comm_id,
            message_rejected: message_ref::REQ,
            rejected_info_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; crate::wire::cm::REJ_PRIVATE_DATA_LEN],
        };
        self.send(to, tid, &CmMessage::Rej(rej));
    }

    pub(super) fn on_req(&mut self, now: Duration, from: SocketAddr, tid: u64, r: &CmReq) {
        if let Some(&id) = self.by_remote.get(&(r.local_comm_id, r.local_ca_guid)) {
            if self.conns.get(&id).is_some_and(|c| c.peer != from) {
                // Another host names a requester's connection: not a duplicate, and not
                // something to answer.
                self.counters.wrong_peer += 1;
                return;
            }
            self.counters.duplicates += 1;
            self.on_duplicate_req(id, from, tid, r);
            return;
        }
        if !self.listeners.contains_key(&r.service_id) {
            if self.park_req(now, from, tid, r) {
                return;
            }
            self.counters.rej_no_listener += 1;
            self.reject_req(from, tid, r, rej_reason::INVALID_SERVICE_ID);
            return;
        }
        // RC, UC, or XRC as the kernel's CM marks it (cm_req_get_qp_type); RD, and another
        // extended type, are refused.
        let xrc = (r.transport_service_type, r.extended_transport_type)
            == (transport_type::EXTENDED, transport_type::EXTENDED_XRC);
        if !xrc
            && !matches!(
                r.transport_service_type,
                transport_type::RC | transport_type::UC
            )
        {
            self.counters.rej_invalid += 1;
            self.reject_req(from, tid, r, rej_reason::INVALID_TRANSPORT_TYPE);
            return;
        }
        if !(1..=5).contains(&r.path_mtu) {
            self.counters.rej_invalid += 1;
            self.reject_req(from, tid, r, rej_reason::INVALID_MTU);
            return;
        }
        let Some(id) = self.admit_half_open(from.ip(), r.service_id) else {
            // Dropped, not rejected: the requester's next try may find room (the kernel's CM
            // on -ENOMEM, "do not reject to allow future retries"); a flood gets no answers.
            self.counters.req_dropped += 1;
            return;
        };
        // The requester repeats its REQ for this long before it gives up; a connection the
        // application has not answered by then is one nobody waits for.
        let peer_response = iba_time(r.local_cm_response_timeout);
        // The REQ's own figures are the sender's to choose: a bound keeps a hostile one from
        // holding a backlog slot for days.
        let requester_patience = ((self.wait_for_peer(iba_time(r.remote_cm_response_timeout)))
            * (u32::from(r.max_cm_retries) + 1))
            .min(self.cfg.max_half_open_time);
        self.conns.insert(
            id,
            Conn {
                state: ConnState::ReqRcvd,
                peer: from,
                tid,
                remote_comm_id: r.local_comm_id,
                remote_ca_guid: r.local_ca_guid,
                local_qpn: 0,
                remote_qpn: r.local_qpn,
                xrc,
                peer_response,
                pending: None,
                last: None,
                expires: Some(now + requester_patience),
                listener: Some(r.service_id),
                unread: Some(r.service_id),
            },
        );
        self.by_remote
            .insert((r.local_comm_id, r.local_ca_guid), id);
        self.events.push_back(CmEvent::ConnectRequest {
            conn: ConnId(id),
            peer: Box::new(PeerParams::from_req(from, r)),
        });
    }

    /// A REQ we already have: the requester did not hear from us in time, or the network
    /// repeated it. As Linux's CM (cm_dup_req_handler): ignored while the application decides
    /// (the requester keeps retrying until it does) and after our REP (which our own timer
    /// repeats); rejected as stale for a connection in time-wait.
    fn on_duplicate_req(&mut self, id: u32, from: SocketAddr, tid: u64, r: &CmReq) {
        if self
            .conns
            .get(&id)
            .is_some_and(|c| c.state == ConnState::TimeWait)
        {
            self.reject_req(from, tid, r, rej_reason::STALE_CONN);
        }
    }

    fn on_mra(&mut self, now: Duration, from: SocketAddr, m: &CmMra) {
        let wait = self.wait_for_peer(iba_time(m.service_timeout));
        if self.lookup(from, m.remote_comm_id, m.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&m.remote_comm_id) else {
            return;
        };
        let next = match (c.state, m.message_mraed) {
            (ConnState::ReqSent, message_ref::REQ) => ConnState::MraReqRcvd,
            (ConnState::RepSent, message_ref::REP) => ConnState::MraRepRcvd,
            (ConnState::MraReqRcvd | ConnState::MraRepRcvd, _) => {
                self.counters.duplicates += 1;
                return;
            }
            _ => {
                self.counters.unmatched += 1;
                return;
            }
        };
        c.state = next;
        if let Some(p) = c.pending.as_mut() {
            p.timeout = wait;
            p.deadline = now + wait;
        }
    }

    fn on_rej(&mut self, now: Duration, from: SocketAddr, r: &CmRej) {
        let timewait = self.cfg.timewait;
        if self.lookup(from, r.remote_comm_id, r.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            return;
        };
        let conn = ConnId(r.remote_comm_id);
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::RepRcvd
            | ConnState::RepSent
            | ConnState::MraRepRcvd => {
                self.events.push_back(CmEvent::Rejected {
                    conn,
                    reason: r.reason,
                    private_data: r.private_data.to_vec(),
                });
                self.remove(conn.0);
            }
            // A REJ on a live connection ends it, as a DREQ would, without an answer.
            ConnState::Established | ConnState::DreqSent | ConnState::DreqRcvd => {
                c.state = ConnState::TimeWait;
                c.pending = None;
                c.expires = Some(now + timewait);
                self.events.push_back(CmEvent::Disconnected { conn });
            }
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_rep(&mut self, from: SocketAddr, r: &CmRep) {
        if self.lookup(from, r.remote_comm_id, r.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            return;
        };
        let conn = ConnId(r.remote_comm_id);
        match c.state {
            ConnState::ReqSent | ConnState::MraReqRcvd => {
                c.state = ConnState::RepRcvd;
                c.pending = None;
                c.remote_comm_id = r.local_comm_id;
                c.remote_ca_guid = r.local_ca_guid;
                // An XRC target sends its QPN as the local EE context number (the kernel's
                // cm_rep_get_qpn).
                let qpn = if c.xrc { r.local_eecn } else { r.local_qpn };
                c.remote_qpn = qpn;
                self.events.push_back(CmEvent::RepReceived {
                    conn,
                    peer: Box::new(PeerParams::from_rep(from, r, qpn)),
                });
            }
            ConnState::RepRcvd => self.counters.duplicates += 1,
            // Our RTU was lost: the responder repeats its REP; repeat the RTU.
            ConnState::Established => {
                self.counters.duplicates += 1;
                if let Some(m) = c.last {
                    let to = c.peer;
                    self.out.push_back(Outgoing { to, mad: m });
                }
            }
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_rtu(&mut self, from: SocketAddr, r: &CmIds) {
        if self.lookup(from, r.remote_comm_id, r.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&r.remote_comm_id) else {
            return;
        };
        match c.state {
            ConnState::RepSent | ConnState::MraRepRcvd => {
                c.state = ConnState::Established;
                c.pending = None;
                self.events.push_back(CmEvent::Established {
                    conn: ConnId(r.remote_comm_id),
                });
            }
            ConnState::Established => self.counters.duplicates += 1,
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_dreq(&mut self, now: Duration, from: SocketAddr, tid: u64, d: &CmDreq) {
        let timewait = self.cfg.timewait;
        match self.lookup(from, d.remote_comm_id, d.local_comm_id) {
            Lookup::Ours => {}
            // Linux answers a DREQ for a connection it no longer has (or whose IDs do not
            // match) with a DREP, so that the peer need not retry until it gives up.
            Lookup::Unknown => {
                self.send(from, tid, &drep(d.remote_comm_id, d.local_comm_id));
                return;
            }
            // Both IDs right, the address wrong: no answer, which would confirm a guess.
            Lookup::WrongPeer => return,
        }
        let Some(c) = self.conns.get_mut(&d.remote_comm_id) else {
            return;
        };
        if c.local_qpn != d.remote_qpn {
            self.counters.unmatched += 1;
            return;
        }
        let conn = ConnId(d.remote_comm_id);
        match c.state {
            ConnState::Established | ConnState::RepSent | ConnState::MraRepRcvd => {
                c.state = ConnState::DreqRcvd;
                c.pending = None;
                self.events.push_back(CmEvent::Disconnected { conn });
            }
            // Both ends disconnected at once: answer, and wait.
            ConnState::DreqSent => {
                c.state = ConnState::TimeWait;
                c.pending = None;
                c.expires = Some(now + timewait);
                let (peer, tid, remote) = (c.peer, c.tid, c.remote_comm_id);
                let m = self.send(peer, tid, &drep(conn.0, remote));
                if let Some(c) = self.conns.get_mut(&conn.0) {
                    c.last = Some(m);
                }
                self.events.push_back(CmEvent::Disconnected { conn });
            }
            // Our DREP was lost.
            ConnState::TimeWait => {
                self.counters.duplicates += 1;
                if let Some(m) = c.last {
                    let to = c.peer;
                    self.out.push_back(Outgoing { to, mad: m });
                }
            }
            ConnState::DreqRcvd => self.counters.duplicates += 1,
            _ => self.counters.unmatched += 1,
        }
    }

    fn on_drep(&mut self, now: Duration, from: SocketAddr, d: &CmIds) {
        let timewait = self.cfg.timewait;
        if self.lookup(from, d.remote_comm_id, d.local_comm_id) != Lookup::Ours {
            return;
        }
        let Some(c) = self.conns.get_mut(&d.remote_comm_id) else {
            return;
        };
        match c.state {
            ConnState::DreqSent => {
                c.state = ConnState::TimeWait;
                c.pending = None;
                c.expires = Some(now + timewait);
                self.events.push_back(CmEvent::Disconnected {
                    conn: ConnId(d.remote_comm_id),
                });
            }
            ConnState::TimeWait => self.counters.duplicates += 1,
            _ => self.counters.unmatched += 1,
        }
    }

    /// A SIDR_REP that answers nothing of ours: status "unsupported" for a service nobody
    /// listens on (Linux's cm_sidr_req_handler), "no QP" when the backlog is full.
    fn refuse_sidr(&mut self, to: SocketAddr, tid: u64, r: &CmSidrReq, status: u8) {
        let rep = CmSidrRep {
            request_id: r.request_id,
            status,
            additional_information_length: 0,
            qpn: 0,
            service_id: r.service_id,
            qkey: 0,
            additional_information: [0; SIDR_REP_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        };
        self.send(to, tid, &CmMessage::SidrRep(rep));
    }

    fn on_sidr_req(&mut self, now: Duration, from: SocketAddr, tid: u64, r: &CmSidrReq) {
        if let Some(&id) = self.sidr_by_remote.get(&(from, r.request_id)) {
            self.counters.duplicates += 1;
            // Answered already: the requester missed the reply; undecided: it is coming.
            if let Some(c) = self.conns.get(&id) {
                if let (ConnState::SidrRepSent, Some(m)) = (c.state, c.last) {
                    self.out.push_back(Outgoing { to: from, mad: m });
                }
            }
            return;
        }
        if !self.listeners.contains_key(&r.service_id) {
            self.counters.rej_no_listener += 1;
            self.refuse_sidr(from, tid, r, sidr_status::UNSUPPORTED);
            return;
        }
        let Some(id) = self.admit_half_open(from.ip(), r.service_id) else {
            self.counters.rej_no_resources += 1;
            self.refuse_sidr(from, tid, r, sidr_status::NO_QP);
            return;
        };
        // A SIDR_REQ says nothing of its sender's patience: ours bounds the wait.
        let patience = self.connect_patience().min(self.cfg.max_half_open_time);
        self.conns.insert(
            id,
            Conn {
                state: ConnState::SidrReqRcvd,
                peer: from,
                tid,
                remote_comm_id: r.request_id,
                remote_ca_guid: 0,
                local_qpn: 0,
                remote_qpn: 0,
                xrc: false,
                peer_response: iba_time(self.cfg.cm_response_timeout),
                pending: None,
                last: None,
                expires: Some(now + patience),
                listener: Some(r.service_id),
                unread: Some(r.service_id),
            },
        );
        self.sidr_by_remote.insert((from, r.request_id), id);
        self.events.push_back(CmEvent::SidrRequest {
            conn: ConnId(id),
            req: Box::new(SidrRequest::from_msg(from, r)),
        });
    }

    /// A SIDR_REP counts only for a SIDR_REQ of ours still unanswered, from the address the
    /// request went to, in the request's transaction (Linux's CM sends the reply in the
    /// request's): a third host that guesses the 32-bit request ID still cannot choose the
    /// requester's peer (spec-notes/security.md).
    fn on_sidr_rep(&mut self, from: SocketAddr, tid: u64, r: &CmSidrRep) {
        let Some(c) = self.conns.get(&r.request_id) else {
            self.counters.unmatched += 1;
            return;
        };
        if c.state != ConnState::SidrReqSent {
            self.counters.unmatched += 1;
            return;
        }
        if c.peer != from {
            self.counters.wrong_peer += 1;
            return;
        }
        if c.tid != tid {
            self.counters.unmatched += 1;
            return;
        }
        self.events.push_back(CmEvent::SidrReply {
            conn: ConnId(r.request_id),
            rep: Box::new(SidrReply::from_msg(from, r)),
        });
        self.remove(r.request_id);
    }
}
