//! How an analysis is shown: the text and JSON forms of [`AnalysisReport`], its
//! [`ConnectionStats`] and [`Counters`], next to `report.rs`, which shows single packets. The
//! analysis itself (what is counted and why) is in `analyze.rs`.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::report::{nak_text, rnr_timer_text};
use super::stats::{ConnectionStats, Counters, Examples, Gap, MAX_CONNECTIONS};
use crate::wire::aeth::rnr_timer_ns;
use crate::wire::{NakCode, Opcode};

impl Counters {
    /// `N frames, M RoCEv2 packets (K bad ICRC, J malformed), S other frames skipped`, with
    /// details of the skipped frames when some were not plain other traffic.
    pub fn summary_line(&self) -> String {
        let mut s = format!(
            "{} frames, {} RoCEv2 packets ({} bad ICRC, {} malformed), {} other frames skipped",
            self.frames, self.roce_packets, self.bad_icrc, self.malformed, self.other
        );
        let mut notes = Vec::new();
        if self.unsupported_link > 0 {
            notes.push(format!(
                "{} with an unsupported link type",
                self.unsupported_link
            ));
        }
        if self.undecodable > 0 {
            notes.push(format!("{} undecodable", self.undecodable));
        }
        if self.snapped > 0 {
            notes.push(format!(
                "{} RoCEv2 frames cut short by the snap length",
                self.snapped
            ));
        }
        if !notes.is_empty() {
            let _ = write!(s, " ({})", notes.join(", "));
        }
        s
    }

    /// The counters as a JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "frames": self.frames,
            "roce_packets": self.roce_packets,
            "bad_icrc": self.bad_icrc,
            "malformed": self.malformed,
            "snapped": self.snapped,
            "other": self.other,
            "unsupported_link": self.unsupported_link,
            "undecodable": self.undecodable,
            "untracked": self.untracked,
        })
    }
}

/// The result of an analysis: the counters and every connection, in order of first appearance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnalysisReport {
    /// Frame counts.
    pub counters: Counters,
    /// Connections, in order of their first packet.
    pub connections: Vec<ConnectionStats>,
    /// Frames whose ICRC is wrong: in no connection, since any field may be the corrupted one.
    pub bad_icrc: Examples<u64>,
}

fn psn_list(items: &[u32]) -> String {
    items
        .iter()
        .map(|p| format!("0x{p:06x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn more(e: &Examples<impl Sized>) -> &'static str {
    if e.count > e.items.len() as u64 {
        " ..."
    } else {
        ""
    }
}

fn gap_text(g: &Gap) -> String {
    match g.expected {
        Some(e) => format!("0x{e:06x}->0x{:06x}", g.got),
        None => format!("?->0x{:06x}", g.got),
    }
}

fn opt_psn(p: Option<u32>) -> Value {
    p.map_or(Value::Null, Value::from)
}

fn examples_json<T: Clone + Into<Value>>(e: &Examples<T>, name: &str) -> Value {
    let mut m = Map::new();
    m.insert("count".into(), e.count.into());
    m.insert(
        name.into(),
        Value::Array(e.items.iter().cloned().map(Into::into).collect()),
    );
    Value::Object(m)
}

fn gaps_json(e: &Examples<Gap>, missing: u64) -> Value {
    json!({
        "count": e.count,
        "missing": missing,
        "examples": e.items.iter().map(|g| json!({"expected": g.expected, "got": g.got})).collect::<Vec<_>>(),
    })
}

impl ConnectionStats {
    /// A one-line description of the connection, e.g.
    /// `192.0.2.11 > 192.0.2.12 dqpn=0x000013`.
    pub fn title(&self) -> String {
        let mut s = format!("{} > {} dqpn=0x{:06x}", self.src, self.dst, self.dqpn);
        if let Some(q) = self.src_qp {
            let _ = write!(s, " srcqp=0x{q:06x}");
        }
        s
    }

    /// The connection as indented text lines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let ports: Vec<String> = self.src_ports.iter().map(u16::to_string).collect();
        let _ = writeln!(
            s,
            "connection {} (udp src port {}), frames {}-{}",
            self.title(),
            ports.join(","),
            self.first_frame,
            self.last_frame
        );
        let _ = writeln!(
            s,
            "  packets {}, payload {} bytes, malformed {}",
            self.packets, self.payload_bytes, self.malformed.count
        );
        for (op, st) in &self.opcodes {
            let _ = writeln!(
                s,
                "    {:<36} {:>10} pkts {:>14} bytes",
                Opcode(*op).to_string(),
                st.packets,
                st.bytes
            );
        }
        self.requests_text(&mut s);
        self.responses_text(&mut s);
        if self.fecn > 0 || self.becn > 0 {
            let _ = writeln!(s, "  FECN {}, BECN {}", self.fecn, self.becn);
        }
        match self.path_mtu {
            Some(m) => {
                let _ = writeln!(s, "  path MTU {m} (inferred)");
            }
            None => s.push_str("  path MTU unknown\n"),
        }
        s
    }

    /// The requests' line of [`text`](Self::text): PSN range, retransmissions and gaps.
    fn requests_text(&self, s: &mut String) {
        let r = &self.requests;
        if r.packets == 0 {
            return;
        }
        let _ = write!(
            s,
            "  requests {}: PSN 0x{:06x}..0x{:06x}, retransmitted {}",
            r.packets,
            r.first_psn.unwrap_or(0),
            r.highest_psn.unwrap_or(0),
            r.retransmitted.count
        );
        if r.retransmitted.count > 0 {
            let _ = write!(
                s,
                " ({}{})",
                psn_list(&r.retransmitted.items),
                more(&r.retransmitted)
            );
        }
        let _ = write!(s, ", gaps {}", r.gaps.count);
        if r.gaps.count > 0 {
            let g: Vec<String> = r.gaps.items.iter().map(gap_text).collect();
            let _ = write!(
                s,
                " ({} PSNs missing: {}{})",
                r.missing_psns,
                g.join(" "),
                more(&r.gaps)
            );
        }
        s.push('\n');
    }

    /// The responses' lines of [`text`](Self::text): PSN range and kinds, then each NAK code,
    /// RNR timer, READ response gap and repeat.
    fn responses_text(&self, s: &mut String) {
        let q = &self.responses;
        if q.packets == 0 {
            return;
        }
        let naks: u64 = q.naks.values().map(|e| e.count).sum();
        let rnrs: u64 = q.rnr_naks.values().map(|e| e.count).sum();
        let _ = writeln!(
            s,
            "  responses {}: PSN 0x{:06x}..0x{:06x}, ACK {}, READ response {}, ATOMIC ACK {}, \
             NAK {}, RNR NAK {}",
            q.packets,
            q.first_psn.unwrap_or(0),
            q.highest_psn.unwrap_or(0),
            q.acks,
            q.read_responses,
            q.atomic_acks,
            naks,
            rnrs
        );
        for (code, e) in &q.naks {
            let _ = writeln!(
                s,
                "    NAK {}: {} (PSN {}{})",
                nak_text(NakCode::from_u8(*code)),
                e.count,
                psn_list(&e.items),
                more(e)
            );
        }
        for (timer, e) in &q.rnr_naks {
            let _ = writeln!(
                s,
                "    RNR NAK timer={timer} ({}): {} (PSN {}{})",
                rnr_timer_text(*timer),
                e.count,
                psn_list(&e.items),
                more(e)
            );
        }
        if q.read_gaps.count > 0 {
            let g: Vec<String> = q.read_gaps.items.iter().map(gap_text).collect();
            let _ = writeln!(
                s,
                "    READ response gaps {} ({} PSNs missing: {}{})",
                q.read_gaps.count,
                q.read_missing_psns,
                g.join(" "),
                more(&q.read_gaps)
            );
        }
        if q.read_retransmitted.count > 0 {
            let _ = writeln!(
                s,
                "    READ responses repeated {} ({}{})",
                q.read_retransmitted.count,
                psn_list(&q.read_retransmitted.items),
                more(&q.read_retransmitted)
            );
        }
    }

    /// The connection as a JSON object, whose "connection" key identifies it.
    pub fn to_json(&self) -> Value {
        let opcodes: Map<String, Value> = self
            .opcodes
            .iter()
            .map(|(op, st)| {
                (
                    Opcode(*op).to_string(),
                    json!({"opcode": op, "packets": st.packets, "bytes": st.bytes}),
                )
            })
            .collect();
        let r = &self.requests;
        let q = &self.responses;
        let naks: Map<String, Value> = q
            .naks
            .iter()
            .map(|(code, e)| {
                (
                    nak_text(NakCode::from_u8(*code)),
                    json!({"code": code, "count": e.count, "psns": e.items}),
                )
            })
            .collect();
        let rnr: Vec<Value> = q
            .rnr_naks
            .iter()
            .map(|(t, e)| {
                json!({"timer": t, "delay_ns": rnr_timer_ns(*t), "count": e.count, "psns": e.items})
            })
            .collect();
        json!({
            "connection": {
                "src": self.src.to_string(),
                "dst": self.dst.to_string(),
                "dqpn": self.dqpn,
                "src_qp": self.src_qp,
                "src_ports": self.src_ports,
            },
            "first_frame": self.first_frame,
            "last_frame": self.last_frame,
            "packets": self.packets,
            "payload_bytes": self.payload_bytes,
            "opcodes": opcodes,
            "malformed": examples_json(&self.malformed, "frames"),
            "fecn": self.fecn,
            "becn": self.becn,
            "path_mtu": self.path_mtu,
            "requests": {
                "packets": r.packets,
                "first_psn": opt_psn(r.first_psn),
                "highest_psn": opt_psn(r.highest_psn),
                "retransmitted": examples_json(&r.retransmitted, "psns"),
                "gaps": gaps_json(&r.gaps, r.missing_psns),
            },
            "responses": {
                "packets": q.packets,
                "first_psn": opt_psn(q.first_psn),
                "highest_psn": opt_psn(q.highest_psn),
                "acks": q.acks,
                "atomic_acks": q.atomic_acks,
                "read_responses": q.read_responses,
                "naks": naks,
                "rnr_naks": rnr,
                "read_gaps": gaps_json(&q.read_gaps, q.read_missing_psns),
                "read_retransmitted": examples_json(&q.read_retransmitted, "psns"),
            },
        })
    }
}

impl AnalysisReport {
    /// The analysis as text: one block per connection.
    pub fn text(&self) -> String {
        let mut s = format!("analysis: {} connections\n", self.connections.len());
        for c in &self.connections {
            s.push_str(&c.text());
        }
        if self.bad_icrc.count > 0 {
            let frames: Vec<String> = self.bad_icrc.items.iter().map(u64::to_string).collect();
            let _ = writeln!(
                s,
                "bad ICRC: {} packets, in no connection (a receiver drops them; any field, the QPN included, may be the corrupted one): frames {}{}",
                self.bad_icrc.count,
                frames.join(" "),
                more(&self.bad_icrc)
            );
        }
        if self.counters.untracked > 0 {
            let _ = writeln!(
                s,
                "{} packets of further connections were not analyzed (limit {MAX_CONNECTIONS})",
                self.counters.untracked
            );
        }
        s
    }

    /// The analysis as JSON objects: one per connection (with a "connection" key), then one
    /// `{"summary": {...counters}}`.
    pub fn to_json(&self) -> Vec<Value> {
        let mut v: Vec<Value> = self.connections.iter().map(|c| c.to_json()).collect();
        let mut summary = self.counters.to_json();
        summary["bad_icrc_frames"] = examples_json(&self.bad_icrc, "frames")["frames"].clone();
        v.push(json!({ "summary": summary }));
        v
    }
}
