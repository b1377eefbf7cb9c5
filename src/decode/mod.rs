//! Turning captured frames into RoCEv2 packet reports and per-connection analyses: the engine
//! behind `softroce decode`. Nothing here prints; callers render [`PacketReport`]s and
//! [`AnalysisReport`]s as text or JSON.
//!
//! [`Decoder`] is the entry point: feed it every [`CapturedFrame`] of a capture, in order, and
//! it returns a [`PacketReport`] for each RoCEv2 packet while an [`Analyzer`] accumulates
//! counters and per-connection statistics. [`classify`] is the first step on its own.

pub mod analysis_report;
pub mod analyze;
pub mod mad_report;
pub mod report;
pub mod stats;

use std::net::{IpAddr, SocketAddr};

use etherparse::{IpNumber, LaxNetSlice, LaxSlicedPacket};

pub use analysis_report::AnalysisReport;
pub use analyze::{Analyzer, Counters};
pub use mad_report::MadDecode;
pub use report::PacketReport;
pub use stats::{ConnectionStats, Examples, Gap, OpcodeStats, RequestStats, ResponseStats};

use crate::capture::CapturedFrame;
use crate::wire::{bth, BthRepr, Error, Frame, LinkType, ICRC_LEN, ROCE_V2_UDP_PORT};

/// What a captured frame is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified<'a> {
    /// A UDP datagram to the RoCEv2 port.
    Roce(Frame<'a>),
    /// A UDP datagram to the RoCEv2 port whose Ethernet/IP/UDP encapsulation cannot be parsed,
    /// typically because the capture's snap length cut it short.
    BrokenRoce {
        /// Source address and port.
        src: SocketAddr,
        /// Destination address and port.
        dst: SocketAddr,
        /// Whether the frame was cut short by the snap length.
        snapped: bool,
        /// What is wrong.
        error: String,
    },
    /// Any other traffic.
    Other,
    /// A frame whose link, IP or UDP headers cannot be parsed, and that does not look like
    /// RoCEv2.
    Undecodable,
    /// A frame of a link type softroce cannot decode.
    UnsupportedLink,
}

/// Finds the addresses of a UDP datagram to `port` in a frame that the strict parser rejected,
/// tolerating a payload cut short.
fn lax_udp_addrs(link: LinkType, data: &[u8], port: u16) -> Option<(SocketAddr, SocketAddr)> {
    let sliced = match link {
        LinkType::Ethernet => LaxSlicedPacket::from_ethernet(data).ok()?,
        LinkType::RawIp => LaxSlicedPacket::from_ip(data).ok()?,
        LinkType::LinuxSll => LaxSlicedPacket::from_ip(data.get(16..)?).ok()?,
        LinkType::LinuxSll2 => LaxSlicedPacket::from_ip(data.get(20..)?).ok()?,
        LinkType::Null => LaxSlicedPacket::from_ip(data.get(4..)?).ok()?,
    };
    let (src, dst): (IpAddr, IpAddr) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(v4)) => (
            v4.header().source_addr().into(),
            v4.header().destination_addr().into(),
        ),
        Some(LaxNetSlice::Ipv6(v6)) => (
            v6.header().source_addr().into(),
            v6.header().destination_addr().into(),
        ),
        _ => return None,
    };
    let payload = sliced.ip_payload()?;
    if payload.ip_number != IpNumber::UDP || payload.fragmented {
        return None;
    }
    let udp = payload.payload;
    let sport = u16::from_be_bytes([*udp.first()?, *udp.get(1)?]);
    let dport = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    (dport == port).then_some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
}

/// Classifies a captured frame, with `port` standing for the RoCEv2 UDP port.
pub fn classify<'a>(frame: &CapturedFrame<'a>, port: u16) -> Classified<'a> {
    let Some(link) = frame.link else {
        return Classified::UnsupportedLink;
    };
    match Frame::parse_port(link, frame.data, port) {
        Ok(Some(f)) => Classified::Roce(f),
        Ok(None) => Classified::Other,
        Err(e) => match lax_udp_addrs(link, frame.data, port) {
            Some((src, dst)) => {
                let snapped = frame.is_snapped();
                let error = if snapped {
                    format!(
                        "frame cut short by the capture's snap length ({} of {} bytes captured)",
                        frame.data.len(),
                        frame.orig_len
                    )
                } else {
                    e.to_string()
                };
                Classified::BrokenRoce {
                    src,
                    dst,
                    snapped,
                    error,
                }
            }
            None => Classified::Undecodable,
        },
    }
}

/// Decodes the frames of a capture one by one and analyzes them; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Decoder {
    port: u16,
    analyzer: Analyzer,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(ROCE_V2_UDP_PORT)
    }
}

impl Decoder {
    /// A decoder for RoCEv2 on UDP destination port `port` (normally 4791).
    pub fn new(port: u16) -> Self {
        Decoder {
            port,
            analyzer: Analyzer::new(),
        }
    }

    /// Decodes one frame: a report for a RoCEv2 packet (decoded or not), `None` for other
    /// traffic. Every frame is accounted for in the analyzer.
    pub fn decode(&mut self, frame: &CapturedFrame<'_>) -> Option<PacketReport> {
        match classify(frame, self.port) {
            Classified::Roce(f) => Some(self.decode_roce(frame, &f)),
            Classified::BrokenRoce {
                src,
                dst,
                snapped,
                error,
            } => {
                self.analyzer.observe_broken(snapped);
                Some(PacketReport {
                    frame: frame.number,
                    ts: frame.ts,
                    src,
                    dst,
                    bth: None,
                    ext: None,
                    payload_len: None,
                    mad: None,
                    icrc: None,
                    error: Some(error),
                })
            }
            Classified::Other => {
                self.analyzer.observe_other();
                None
            }
            Classified::Undecodable => {
                self.analyzer.observe_undecodable();
                None
            }
            Classified::UnsupportedLink => {
                self.analyzer.observe_unsupported_link();
                None
            }
        }
    }

    fn decode_roce(&mut self, cf: &CapturedFrame<'_>, f: &Frame<'_>) -> PacketReport {
        let icrc = f.icrc().ok();
        let parsed = f.packet();
        self.analyzer.observe(
            cf.number,
            f,
            parsed.as_ref().map_err(|e| *e),
            icrc.map(|c| c.ok()),
        );
        match parsed {
            Ok(p) => PacketReport::new(cf.number, cf.ts, f.src, f.dst, &p, icrc),
            Err(e) => {
                let bth = BthRepr::parse(f.udp_payload).ok();
                // For an unknown opcode everything between the BTH and the ICRC is opaque.
                let payload_len = matches!(e, Error::UnknownOpcode(_))
                    .then(|| f.udp_payload.len().saturating_sub(bth::LEN + ICRC_LEN));
                PacketReport {
                    frame: cf.number,
                    ts: cf.ts,
                    src: f.src,
                    dst: f.dst,
                    bth,
                    ext: None,
                    payload_len,
                    mad: None,
                    icrc,
                    error: Some(e.to_string()),
                }
            }
        }
    }

    /// The analyzer.
    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    /// The frame counts so far.
    pub fn counters(&self) -> &Counters {
        self.analyzer.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ExtHeaders, FrameBuilder, Opcode, PacketRepr};
    use std::time::Duration;

    fn captured(data: &[u8], link: Option<LinkType>, orig_len: usize) -> CapturedFrame<'_> {
        CapturedFrame {
            number: 1,
            ts: Duration::ZERO,
            link,
            linktype: link.map_or(147, LinkType::to_pcap),
            interface: 0,
            orig_len: orig_len as u32,
            data,
        }
    }

    fn sample() -> Vec<u8> {
        let p = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                dest_qp: 3,
                ..Default::default()
            },
            ext: ExtHeaders::default(),
            payload: &[1; 40],
        };
        let b = FrameBuilder::new(
            "192.0.2.1:7".parse().unwrap(),
            "192.0.2.2:4791".parse().unwrap(),
        );
        let mut buf = vec![0u8; b.buffer_len(&p)];
        b.emit(&p, &mut buf).unwrap();
        buf
    }

    #[test]
    fn classifies_frames() {
        let f = sample();
        let link = Some(LinkType::RawIp);
        assert!(matches!(
            classify(&captured(&f, link, f.len()), 4791),
            Classified::Roce(_)
        ));
        assert_eq!(
            classify(&captured(&f, link, f.len()), 4792),
            Classified::Other
        );
        assert_eq!(
            classify(&captured(&f, None, f.len()), 4791),
            Classified::UnsupportedLink
        );
        match classify(&captured(&f[..40], link, f.len()), 4791) {
            Classified::BrokenRoce {
                src,
                dst,
                snapped: true,
                error,
            } => {
                assert_eq!(src, "192.0.2.1:7".parse().unwrap());
                assert_eq!(dst.port(), 4791);
                assert!(error.contains("40 of 84 bytes"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            classify(&captured(&[0x45, 0, 0], link, 3), 4791),
            Classified::Undecodable
        );
    }

    #[test]
    fn decoder_reports_and_counts() {
        let f = sample();
        let mut d = Decoder::default();
        let r = d
            .decode(&captured(&f, Some(LinkType::RawIp), f.len()))
            .unwrap();
        assert!(r.is_ok());
        assert!(!r.icrc_bad());
        assert_eq!(r.payload_len, Some(40));
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 6] ^= 1;
        let r = d
            .decode(&captured(&bad, Some(LinkType::RawIp), bad.len()))
            .unwrap();
        assert!(r.icrc_bad());
        assert!(d.decode(&captured(&f, None, f.len())).is_none());
        let c = d.counters();
        assert_eq!(
            (c.frames, c.roce_packets, c.bad_icrc, c.other),
            (3, 2, 1, 1)
        );
    }
}
