//! Management datagrams inside QP1 (GSI) SENDs, decoded for display: the CM message a MAD
//! carries (REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR), its fields and, in a REQ, rdma_cm's
//! IP header; the header alone for MADs of other classes.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use crate::wire::cm::{rdma_service_port, rej_reason, transport_type, CmMessage, CmPath};
use crate::wire::cma::CmaHeader;
use crate::wire::deth::GSI_QPN;
use crate::wire::mad::{self, MadRepr};
use crate::wire::PacketRepr;

/// What the payload of a SEND to QP1 holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MadDecode {
    /// A communication management message.
    Cm {
        /// The MAD's transaction ID.
        tid: u64,
        /// The message (boxed: a REQ is ten times the size of the other variants).
        msg: Box<CmMessage>,
    },
    /// A MAD of another class, version or attribute: its header only.
    Other(MadRepr),
    /// A payload too short to be a MAD.
    Malformed(String),
}

impl MadDecode {
    /// Decodes the MAD in a UD SEND to QP1; `None` for every other packet.
    pub fn from_packet(p: &PacketRepr<'_>) -> Option<MadDecode> {
        if p.bth.dest_qp != GSI_QPN || p.ext.deth.is_none() {
            return None;
        }
        Some(match CmMessage::parse(p.payload) {
            Ok((hdr, msg)) => MadDecode::Cm {
                tid: hdr.tid,
                msg: Box::new(msg),
            },
            Err(e) => match MadRepr::parse(p.payload) {
                Ok(hdr) => MadDecode::Other(hdr),
                Err(_) => MadDecode::Malformed(e.to_string()),
            },
        })
    }

    /// The MAD as shown at the end of a text line, e.g.
    /// ` MAD(CM REQ tid=0x28edc46a2 lcid=0xa246dc8e sid=0x1061c06 (port 7174) qpn=0x00001e ...)`.
    pub fn text(&self) -> String {
        let mut s = String::from(" MAD(");
        match self {
            MadDecode::Cm { tid, msg } => {
                let _ = write!(s, "CM {} tid=0x{tid:x}", msg.name());
                cm_text(msg, &mut s);
            }
            MadDecode::Other(h) => {
                let _ = write!(
                    s,
                    "class=0x{:02x} version={} method=0x{:02x} attr=0x{:04x} tid=0x{:x}",
                    h.mgmt_class, h.class_version, h.method, h.attr_id, h.tid
                );
            }
            MadDecode::Malformed(e) => {
                let _ = write!(s, "malformed: {e}");
            }
        }
        s.push(')');
        s
    }

    /// The MAD as a JSON object: "class", "method", "tid", "attr_id" and, for CM messages,
    /// "cm" (the message name) with one key per field under "fields".
    pub fn to_json(&self) -> Value {
        match self {
            MadDecode::Cm { tid, msg } => json!({
                "class": mad::CLASS_CM,
                "method": mad::method::SEND,
                "tid": tid,
                "attr_id": msg.attr_id(),
                "cm": msg.name(),
                "fields": cm_json(msg),
            }),
            MadDecode::Other(h) => json!({
                "class": h.mgmt_class,
                "class_version": h.class_version,
                "method": h.method,
                "tid": h.tid,
                "attr_id": h.attr_id,
            }),
            MadDecode::Malformed(e) => json!({ "error": e }),
        }
    }
}

fn mtu_bytes(code: u8) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

/// A REQ's transport: its service type, and for the extended type its extended type (XRC is
/// the one the kernel's CM sends).
fn transport_name(t: u8, extended: u8) -> &'static str {
    match (t, extended) {
        (transport_type::RC, _) => "RC",
        (transport_type::UC, _) => "UC",
        (transport_type::RD, _) => "RD",
        (_, transport_type::EXTENDED_XRC) => "XRC",
        _ => "extended",
    }
}

fn gid_text(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

fn cma_of(private_data: &[u8]) -> Option<CmaHeader> {
    CmaHeader::parse(private_data).ok()
}

fn cm_text(msg: &CmMessage, s: &mut String) {
    let _ = write!(s, " lcid=0x{:08x}", msg.local_comm_id());
    match msg {
        CmMessage::Req(r) => {
            let _ = write!(s, " sid=0x{:x}", r.service_id);
            if let Some(port) = rdma_service_port(r.service_id) {
                let _ = write!(s, " (port {port})");
            }
            let _ = write!(
                s,
                " {} qpn=0x{:06x} psn=0x{:06x} mtu={} rsp_res={} init_depth={} retry={} rnr_retry={} srq={} gid={} > {}",
                transport_name(r.transport_service_type, r.extended_transport_type),
                r.local_qpn,
                r.starting_psn,
                mtu_bytes(r.path_mtu),
                r.responder_resources,
                r.initiator_depth,
                r.retry_count,
                r.rnr_retry_count,
                u8::from(r.srq),
                gid_text(&r.primary.local_gid),
                gid_text(&r.primary.remote_gid),
            );
            if let Some(h) = cma_of(&r.private_data) {
                let _ = write!(
                    s,
                    " rdma_cm(src={}:{} dst={})",
                    h.src_addr, h.src_port, h.dst_addr
                );
            }
        }
        CmMessage::Rep(r) => {
            let _ = write!(
                s,
                " rcid=0x{:08x} qpn=0x{:06x} psn=0x{:06x} rsp_res={} init_depth={} rnr_retry={} srq={}",
                r.remote_comm_id,
                r.local_qpn,
                r.starting_psn,
                r.responder_resources,
                r.initiator_depth,
                r.rnr_retry_count,
                u8::from(r.srq)
            );
            // An XRC target's QPN (the kernel's CM sends it there).
            if r.local_eecn != 0 {
                let _ = write!(s, " eecn=0x{:06x}", r.local_eecn);
            }
        }
        CmMessage::Rtu(r) | CmMessage::Drep(r) => {
            let _ = write!(s, " rcid=0x{:08x}", r.remote_comm_id);
        }
        CmMessage::Dreq(d) => {
            let _ = write!(
                s,
                " rcid=0x{:08x} rqpn=0x{:06x}",
                d.remote_comm_id, d.remote_qpn
            );
        }
        CmMessage::Rej(r) => {
            let _ = write!(
                s,
                " rcid=0x{:08x} msg={} reason={} ({})",
                r.remote_comm_id,
                r.message_rejected,
                r.reason,
                rej_reason::name(r.reason)
            );
        }
        CmMessage::Mra(m) => {
            let _ = write!(
                s,
                " rcid=0x{:08x} msg={} service_timeout={}",
                m.remote_comm_id, m.message_mraed, m.service_timeout
            );
        }
        CmMessage::SidrReq(r) => {
            let _ = write!(
                s,
                " sid=0x{:x} pkey=0x{:04x}",
                r.service_id, r.partition_key
            );
        }
        CmMessage::SidrRep(r) => {
            let _ = write!(
                s,
                " status={} qpn=0x{:06x} qkey=0x{:08x}",
                r.status, r.qpn, r.qkey
            );
        }
    }
}

fn path_json(p: &CmPath) -> Value {
    json!({
        "local_lid": p.local_lid,
        "remote_lid": p.remote_lid,
        "local_gid": gid_text(&p.local_gid),
        "remote_gid": gid_text(&p.remote_gid),
        "flow_label": p.flow_label,
        "packet_rate": p.packet_rate,
        "traffic_class": p.traffic_class,
        "hop_limit": p.hop_limit,
        "sl": p.sl,
        "subnet_local": p.subnet_local,
        "local_ack_timeout": p.local_ack_timeout,
    })
}

fn cm_json(msg: &CmMessage) -> Value {
    let mut m = Map::new();
    m.insert("local_comm_id".into(), msg.local_comm_id().into());
    let v = match msg {
        CmMessage::Req(r) => {
            let mut v = json!({
                "service_id": r.service_id,
                "local_ca_guid": r.local_ca_guid,
                "local_qkey": r.local_qkey,
                "local_qpn": r.local_qpn,
                "responder_resources": r.responder_resources,
                "initiator_depth": r.initiator_depth,
                "remote_cm_response_timeout": r.remote_cm_response_timeout,
                "transport_service_type": transport_name(r.transport_service_type, r.extended_transport_type),
                "end_to_end_flow_control": r.end_to_end_flow_control,
                "starting_psn": r.starting_psn,
                "local_cm_response_timeout": r.local_cm_response_timeout,
                "retry_count": r.retry_count,
                "partition_key": r.partition_key,
                "path_mtu": mtu_bytes(r.path_mtu),
                "rnr_retry_count": r.rnr_retry_count,
                "max_cm_retries": r.max_cm_retries,
                "srq": r.srq,
                "primary_path": path_json(&r.primary),
            });
            if let Some(h) = cma_of(&r.private_data) {
                v["rdma_cm"] = json!({
                    "src": h.src_addr.to_string(),
                    "src_port": h.src_port,
                    "dst": h.dst_addr.to_string(),
                });
            }
            v
        }
        CmMessage::Rep(r) => json!({
            "remote_comm_id": r.remote_comm_id,
            "local_qkey": r.local_qkey,
            "local_qpn": r.local_qpn,
            "local_eecn": r.local_eecn,
            "starting_psn": r.starting_psn,
            "responder_resources": r.responder_resources,
            "initiator_depth": r.initiator_depth,
            "target_ack_delay": r.target_ack_delay,
            "failover_accepted": r.failover_accepted,
            "end_to_end_flow_control": r.end_to_end_flow_control,
            "rnr_retry_count": r.rnr_retry_count,
            "srq": r.srq,
            "local_ca_guid": r.local_ca_guid,
        }),
        CmMessage::Rtu(r) | CmMessage::Drep(r) => json!({ "remote_comm_id": r.remote_comm_id }),
        CmMessage::Dreq(d) => json!({
            "remote_comm_id": d.remote_comm_id,
            "remote_qpn": d.remote_qpn,
        }),
        CmMessage::Rej(r) => json!({
            "remote_comm_id": r.remote_comm_id,
            "message_rejected": r.message_rejected,
            "reason": r.reason,
            "reason_name": rej_reason::name(r.reason),
            "rejected_info_length": r.rejected_info_length,
        }),
        CmMessage::Mra(x) => json!({
            "remote_comm_id": x.remote_comm_id,
            "message_mraed": x.message_mraed,
            "service_timeout": x.service_timeout,
        }),
        CmMessage::SidrReq(r) => json!({
            "service_id": r.service_id,
            "partition_key": r.partition_key,
        }),
        CmMessage::SidrRep(r) => json!({
            "status": r.status,
            "qpn": r.qpn,
            "service_id": r.service_id,
            "qkey": r.qkey,
        }),
    };
    if let Value::Object(o) = v {
        m.extend(o);
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::cm::{CmIds, RTU_PRIVATE_DATA_LEN};
    use crate::wire::{BthRepr, DethRepr, ExtHeaders, Opcode};

    fn ud_send(dest_qp: u32, payload: &[u8]) -> PacketRepr<'_> {
        PacketRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                dest_qp,
                ..Default::default()
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: crate::wire::deth::GSI_QKEY,
                    src_qp: 1,
                }),
                ..Default::default()
            },
            payload,
        }
    }

    #[test]
    fn only_sends_to_qp1_are_mads() {
        let mut m = [0u8; mad::LEN];
        let rtu = CmMessage::Rtu(CmIds {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        });
        rtu.emit(9, &mut m).unwrap();
        assert_eq!(MadDecode::from_packet(&ud_send(2, &m)), None);
        let d = MadDecode::from_packet(&ud_send(1, &m)).unwrap();
        assert_eq!(
            d,
            MadDecode::Cm {
                tid: 9,
                msg: Box::new(rtu)
            }
        );
        assert_eq!(
            d.text(),
            " MAD(CM RTU tid=0x9 lcid=0x00000001 rcid=0x00000002)"
        );
        let j = d.to_json();
        assert_eq!(j["cm"], "RTU");
        assert_eq!(j["fields"]["remote_comm_id"], 2);
    }

    #[test]
    fn other_classes_and_short_payloads() {
        let mut m = [0u8; mad::LEN];
        MadRepr {
            mgmt_class: 0x03,
            ..MadRepr::cm_send(1, 0x0020)
        }
        .emit(&mut m)
        .unwrap();
        let d = MadDecode::from_packet(&ud_send(1, &m)).unwrap();
        assert!(matches!(d, MadDecode::Other(h) if h.mgmt_class == 3));
        assert!(d.text().contains("class=0x03"));
        let short = MadDecode::from_packet(&ud_send(1, &m[..100])).unwrap();
        assert!(matches!(short, MadDecode::Malformed(_)));
        assert!(short.to_json()["error"].as_str().unwrap().contains("MAD"));
    }
}
