//! The application's calls on the endpoint: connect, accept, reject, establish, disconnect,
//! and SIDR's request and reply.

use super::*;

impl CmEndpoint {
    /// Sends a REQ to the CM at `to` (rdma_connect).
    pub fn connect(
        &mut self,
        now: Duration,
        to: SocketAddr,
        p: &ConnectParams,
    ) -> Result<ConnId, CmError> {
        let private_data = fill(&p.private_data).ok_or(CmError::PrivateDataTooLong {
            len: p.private_data.len(),
            max: crate::wire::cm::REQ_PRIVATE_DATA_LEN,
        })?;
        let id = self.new_comm_id()?;
        // An XRC initiator's REQ leaves what only a responder or a target has at 0: responder
        // resources, retry counts, SRQ (the kernel's cm_format_req).
        let xrc = p.transport == transport_type::EXTENDED;
        let req = CmReq {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: p.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn,
            responder_resources: if xrc { 0 } else { p.responder_resources },
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: self.cfg.cm_response_timeout,
            transport_service_type: p.transport,
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: self.cfg.cm_response_timeout,
            retry_count: if xrc { 0 } else { p.retry_count },
            partition_key: 0xffff,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: if xrc { 0 } else { p.rnr_retry_count },
            max_cm_retries: self.cfg.max_cm_retries.min(15),
            srq: p.srq && !xrc,
            extended_transport_type: if xrc { transport_type::EXTENDED_XRC } else { 0 },
            primary: CmPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: p.local_gid,
                remote_gid: p.remote_gid,
                flow_label: p.flow_label,
                packet_rate: 0,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: p.local_ack_timeout,
            },
            alternate: CmPath::default(),
            sap_supported: false,
            private_data,
        };
        // The transaction ID names this endpoint's transaction. Linux forms it from the MAD
        // agent's counter and the (random) communication ID; here it is drawn whole, so that
        // it says nothing of the endpoint's other transactions either.
        let tid = self.ids.next_u64();
        self.conns.insert(
            id,
            Conn {
                state: ConnState::ReqSent,
                peer: to,
                tid,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: p.qpn,
                remote_qpn: 0,
                xrc,
                peer_response: iba_time(self.cfg.cm_response_timeout),
                pending: None,
                last: None,
                expires: None,
                listener: None,
                unread: None,
            },
        );
        let timeout = self.wait_for_peer(iba_time(self.cfg.cm_response_timeout));
        self.send_pending(id, now, &CmMessage::Req(req), timeout);
        Ok(ConnId(id))
    }

    /// Answers a REQ with a REP (rdma_accept), after the application moved its QP to RTR.
    pub fn accept(&mut self, now: Duration, conn: ConnId, p: &AcceptParams) -> Result<(), CmError> {
        let private_data = fill(&p.private_data).ok_or(CmError::PrivateDataTooLong {
            len: p.private_data.len(),
            max: crate::wire::cm::REP_PRIVATE_DATA_LEN,
        })?;
        let c = self.conn_mut(conn)?;
        if c.state != ConnState::ReqRcvd {
            return Err(CmError::WrongState {
                op: "accept",
                state: c.state,
            });
        }
        c.state = ConnState::RepSent;
        c.local_qpn = p.qpn;
        c.expires = None;
        let remote_comm_id = c.remote_comm_id;
        let peer_response = c.peer_response;
        let xrc = c.xrc;
        let (listener, unread) = (c.listener.take(), c.unread.take());
        let peer_ip = c.peer.ip();
        self.release_backlog(listener, peer_ip);
        // Answered, so read: whoever answered it had it.
        if let Some(service) = unread {
            self.release_unread(service);
        }
        let rep = CmRep {
            local_comm_id: conn.0,
            remote_comm_id,
            local_qkey: 0,
            // An XRC target's REP: its QPN as the local EE context number, SRQ set, no
            // initiator depth (the kernel's cm_format_rep for IB_QPT_XRC_TGT).
            local_qpn: if xrc { 0 } else { p.qpn },
            local_eecn: if xrc { p.qpn } else { 0 },
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: if xrc { 0 } else { p.initiator_depth },
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq || xrc,
            local_ca_guid: p.ca_guid,
            private_data,
        };
        let timeout = self.wait_for_peer(peer_response);
        self.send_pending(conn.0, now, &CmMessage::Rep(rep), timeout);
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.last = c.pending.as_ref().map(|p| p.mad);
        }
        Ok(())
    }

    /// Refuses a REQ or a REP with a REJ (rdma_reject); the connection is gone.
    pub fn reject(&mut self, conn: ConnId, info: &RejectInfo) -> Result<(), CmError> {
        let private_data = fill(&info.private_data).ok_or(CmError::PrivateDataTooLong {
            len: info.private_data.len(),
            max: crate::wire::cm::REJ_PRIVATE_DATA_LEN,
        })?;
        let c = self.conn_mut(conn)?;
        let message_rejected = match c.state {
            ConnState::ReqRcvd => message_ref::REQ,
            ConnState::RepRcvd => message_ref::REP,
            state => {
                return Err(CmError::WrongState {
                    op: "reject",
                    state,
                })
            }
        };
        let (peer, tid, remote_comm_id) = (c.peer, c.tid, c.remote_comm_id);
        let rej = CmRej {
            local_comm_id: conn.0,
            remote_comm_id,
            message_rejected,
            rejected_info_length: 0,
            reason: info.reason,
            ari: [0; REJ_ARI_LEN],
            private_data,
        };
        self.send(peer, tid, &CmMessage::Rej(rej));
        self.remove(conn.0);
        Ok(())
    }

    /// Completes an active connection after [`CmEvent::RepReceived`]: sends the RTU (the
    /// application has moved its QP to RTS) and reports [`CmEvent::Established`].
    pub fn establish(&mut self, conn: ConnId) -> Result<(), CmError> {
        let c = self.conn_mut(conn)?;
        if c.state != ConnState::RepRcvd {
            return Err(CmError::WrongState {
                op: "establish",
                state: c.state,
            });
        }
        c.state = ConnState::Established;
        let (peer, tid, remote_comm_id) = (c.peer, c.tid, c.remote_comm_id);
        let rtu = CmIds {
            local_comm_id: conn.0,
            remote_comm_id,
            private_data: [0; crate::wire::cm::RTU_PRIVATE_DATA_LEN],
        };
        let m = self.send(peer, tid, &CmMessage::Rtu(rtu));
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.last = Some(m);
        }
        self.events.push_back(CmEvent::Established { conn });
        Ok(())
    }

    /// rdma_disconnect: sends a DREQ on an established connection, or the DREP that answers
    /// the peer's DREQ. Disconnecting a connection already disconnecting does nothing.
    pub fn disconnect(&mut self, now: Duration, conn: ConnId) -> Result<(), CmError> {
        let timewait = self.cfg.timewait;
        let c = self.conn_mut(conn)?;
        let (peer, tid, remote_comm_id) = (c.peer, c.tid, c.remote_comm_id);
        match c.state {
            ConnState::Established | ConnState::RepSent | ConnState::MraRepRcvd => {
                c.state = ConnState::DreqSent;
                let dreq = CmDreq {
                    local_comm_id: conn.0,
                    remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    private_data: [0; crate::wire::cm::DREQ_PRIVATE_DATA_LEN],
                };
                let peer_response = c.peer_response;
                let timeout = self.wait_for_peer(peer_response);
                self.send_pending(conn.0, now, &CmMessage::Dreq(dreq), timeout);
                Ok(())
            }
            ConnState::DreqRcvd => {
                c.state = ConnState::TimeWait;
                c.expires = Some(now + timewait);
                let m = self.send(peer, tid, &drep(conn.0, remote_comm_id));
                if let Some(c) = self.conns.get_mut(&conn.0) {
                    c.last = Some(m);
                }
                Ok(())
            }
            ConnState::DreqSent | ConnState::TimeWait => Ok(()),
            state => Err(CmError::WrongState {
                op: "disconnect",
                state,
            }),
        }
    }

    /// Sends a SIDR_REQ for `service_id` to the CM at `to` (rdma_connect on a UD identifier):
    /// [`CmEvent::SidrReply`] follows with the answer, or [`CmEvent::Unreachable`] after every
    /// retry (the REQ's timeouts and retry count: rdma_cm's cma_resolve_ib_udp asks for
    /// CMA_MAX_CM_RETRIES).
    pub fn sidr_request(
        &mut self,
        now: Duration,
        to: SocketAddr,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let private_data = fill(private_data).ok_or(CmError::PrivateDataTooLong {
            len: private_data.len(),
            max: SIDR_REQ_PRIVATE_DATA_LEN,
        })?;
        let id = self.new_comm_id()?;
        let req = CmSidrReq {
            request_id: id,
            partition_key: 0xffff,
            service_id,
            private_data,
        };
        let tid = self.ids.next_u64();
        self.conns.insert(
            id,
            Conn {
                state: ConnState::SidrReqSent,
                peer: to,
                tid,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: 0,
                remote_qpn: 0,
                xrc: false,
                peer_response: iba_time(self.cfg.cm_response_timeout),
                pending: None,
                last: None,
                expires: None,
                listener: None,
                unread: None,
            },
        );
        let timeout = self.wait_for_peer(iba_time(self.cfg.cm_response_timeout));
        self.send_pending(id, now, &CmMessage::SidrReq(req), timeout);
        Ok(ConnId(id))
    }

    /// Answers a [`CmEvent::SidrRequest`] with a SIDR_REP: `status` 0
    /// ([`sidr_status::SUCCESS`]) with the UD QP `qpn` and its `qkey` (rdma_accept), or a
    /// refusal such as [`sidr_status::REJECT`] (rdma_reject). The resolution is then over;
    /// the reply is kept a while so that a repeated SIDR_REQ gets it again.
    pub fn sidr_reply(
        &mut self,
        now: Duration,
        conn: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = fill(private_data).ok_or(CmError::PrivateDataTooLong {
            len: private_data.len(),
            max: SIDR_REP_PRIVATE_DATA_LEN,
        })?;
        let keep = 2 * self.wait_for_peer(iba_time(self.cfg.cm_response_timeout));
        let c = self.conn_mut(conn)?;
        if c.state != ConnState::SidrReqRcvd {
            return Err(CmError::WrongState {
                op: "sidr_reply",
                state: c.state,
            });
        }
        let service_id = c.listener.unwrap_or(0);
        let rep = CmSidrRep {
            request_id: c.remote_comm_id,
            status,
            additional_information_length: 0,
            qpn: if status == sidr_status::SUCCESS {
                qpn
            } else {
                0
            },
            service_id,
            qkey: if status == sidr_status::SUCCESS {
                qkey
            } else {
                0
            },
            additional_information: [0; SIDR_REP_INFO_LEN],
            private_data,
        };
        c.state = ConnState::SidrRepSent;
        c.local_qpn = qpn;
        c.expires = Some(now + keep);
        let (peer, tid, listener, unread) = (c.peer, c.tid, c.listener.take(), c.unread.take());
        self.release_backlog(listener, peer.ip());
        if let Some(service) = unread {
            self.release_unread(service);
        }
        let m = self.send(peer, tid, &CmMessage::SidrRep(rep));
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.last = Some(m);
        }
        Ok(())
    }
}
