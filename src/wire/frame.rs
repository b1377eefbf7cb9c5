//! The encapsulation around a RoCE packet: [link header] + IPv4 or IPv6 + UDP (RoCEv2 annex
//! A17.2), and the ICRC that covers them.
//!
//! [`Frame::parse`] classifies a captured frame (using etherparse for Ethernet, VLAN, IP and
//! UDP) and exposes the byte ranges the ICRC needs; [`FrameBuilder`] emits a complete frame
//! around a [`PacketRepr`] and seals it with its ICRC.

use std::net::{IpAddr, SocketAddr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use super::icrc::{self, IPV6_HEADER_LEN, UDP_HEADER_LEN};
use super::packet::split_icrc;
use super::{check_emit_len, Error, PacketRepr, Result, ICRC_LEN, ROCE_V2_UDP_PORT};

/// The link-layer framing of captured frames (pcap LINKTYPE_* values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// LINKTYPE_ETHERNET (1): Ethernet II, optionally VLAN-tagged.
    Ethernet,
    /// LINKTYPE_RAW (101), LINKTYPE_IPV4 (228), LINKTYPE_IPV6 (229): the IP header first.
    RawIp,
    /// LINKTYPE_LINUX_SLL (113): Linux "cooked" capture, 16-byte header.
    LinuxSll,
    /// LINKTYPE_LINUX_SLL2 (276): Linux "cooked" capture v2, 20-byte header.
    LinuxSll2,
    /// LINKTYPE_NULL (0): BSD loopback, 4-byte host-order address family.
    Null,
}

impl LinkType {
    /// Maps a pcap/pcapng link-type number; `None` for unsupported types.
    pub fn from_pcap(linktype: u32) -> Option<LinkType> {
        match linktype {
            1 => Some(LinkType::Ethernet),
            101 | 228 | 229 | 12 | 14 => Some(LinkType::RawIp),
            113 => Some(LinkType::LinuxSll),
            276 => Some(LinkType::LinuxSll2),
            0 => Some(LinkType::Null),
            _ => None,
        }
    }

    /// The pcap link-type number.
    pub fn to_pcap(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Null => 0,
        }
    }
}

/// A UDP datagram addressed to the RoCEv2 port, found in a captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// The IP header exactly as captured (with IPv4 options, if any).
    pub ip_header: &'a [u8],
    /// The 8-byte UDP header.
    pub udp_header: &'a [u8],
    /// The UDP payload: the RoCE packet from the BTH to the ICRC, bounded by the UDP length.
    pub udp_payload: &'a [u8],
}

/// The outcome of checking a frame's ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcCheck {
    /// The ICRC computed over the frame.
    pub computed: u32,
    /// The ICRC carried by the frame.
    pub found: u32,
}

impl IcrcCheck {
    /// Whether they agree.
    pub fn ok(&self) -> bool {
        self.computed == self.found
    }
}

/// Strips a Linux cooked or BSD loopback header, returning the IP packet it carries, or `None`
/// when the frame does not carry IPv4 or IPv6.
fn strip_pseudo_link(link: LinkType, data: &[u8]) -> Result<Option<&[u8]>> {
    let (hdr, proto) = match link {
        LinkType::LinuxSll => {
            if data.len() < 16 {
                return Err(Error::Encapsulation("truncated Linux cooked header"));
            }
            (16, u16::from_be_bytes([data[14], data[15]]))
        }
        LinkType::LinuxSll2 => {
            if data.len() < 20 {
                return Err(Error::Encapsulation("truncated Linux cooked v2 header"));
            }
            (20, u16::from_be_bytes([data[0], data[1]]))
        }
        LinkType::Null => {
            if data.len() < 4 {
                return Err(Error::Encapsulation("truncated loopback header"));
            }
            // The family is in the capturing host's byte order; accept either. AF_INET is 2
            // everywhere, AF_INET6 is 10 (Linux), 24, 28 or 30 (the BSDs, macOS).
            let le = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            let be = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
            let fam = le.min(be);
            let proto = match fam {
                2 => 0x0800,
                10 | 24 | 28 | 30 => 0x86DD,
                _ => 0,
            };
            (4, proto)
        }
        LinkType::Ethernet | LinkType::RawIp => unreachable!("handled by etherparse"),
    };
    Ok(match proto {
        0x0800 | 0x86DD => Some(&data[hdr..]),
        _ => None,
    })
}

impl<'a> Frame<'a> {
    /// Finds a RoCEv2 datagram in a captured frame. Returns `Ok(None)` for frames that are not
    /// UDP to port 4791 (other traffic), and an error for frames whose Ethernet, IP or UDP
    /// headers are malformed or truncated.
    pub fn parse(link: LinkType, data: &'a [u8]) -> Result<Option<Frame<'a>>> {
        Self::parse_port(link, data, ROCE_V2_UDP_PORT)
    }

    /// As [`Frame::parse`], with another destination port standing for RoCEv2.
    pub fn parse_port(link: LinkType, data: &'a [u8], port: u16) -> Result<Option<Frame<'a>>> {
        let sliced = match link {
            LinkType::Ethernet => SlicedPacket::from_ethernet(data),
            LinkType::RawIp => SlicedPacket::from_ip(data),
            _ => match strip_pseudo_link(link, data)? {
                Some(ip) => SlicedPacket::from_ip(ip),
                None => return Ok(None),
            },
        };
        let sliced = match sliced {
            Ok(s) => s,
            Err(_) => {
                return Err(Error::Encapsulation(
                    "malformed or truncated Ethernet/IP/UDP",
                ))
            }
        };
        let udp = match sliced.transport {
            Some(TransportSlice::Udp(u)) => u,
            _ => return Ok(None),
        };
        if udp.destination_port() != port {
            return Ok(None);
        }
        let (src_ip, dst_ip, ip_header): (IpAddr, IpAddr, &[u8]) = match &sliced.net {
            Some(NetSlice::Ipv4(v4)) => {
                let h = v4.header();
                if !v4.extensions().is_empty() {
                    return Err(Error::Encapsulation(
                        "IPv4 authentication header before UDP",
                    ));
                }
                (
                    h.source_addr().into(),
                    h.destination_addr().into(),
                    // Re-borrow from `data` so the slice lives as long as the frame.
                    subslice(data, h.slice()),
                )
            }
            Some(NetSlice::Ipv6(v6)) => {
                let h = v6.header();
                if !v6.extensions().is_empty() {
                    return Err(Error::Encapsulation(
                        "IPv6 extension headers before UDP (not covered by the RoCEv2 ICRC)",
                    ));
                }
                (
                    h.source_addr().into(),
                    h.destination_addr().into(),
                    h.slice(),
                )
            }
            _ => return Ok(None),
        };
        let udp_slice = udp.slice();
        if (udp.length() as usize) != udp_slice.len() {
            return Err(Error::Encapsulation(
                "UDP length exceeds the captured datagram",
            ));
        }
        Ok(Some(Frame {
            src: SocketAddr::new(src_ip, udp.source_port()),
            dst: SocketAddr::new(dst_ip, udp.destination_port()),
            ip_header,
            udp_header: &udp_slice[..UDP_HEADER_LEN],
            udp_payload: &udp_slice[UDP_HEADER_LEN..],
        }))
    }

    /// Parses the RoCE packet in the datagram (the ICRC is not checked; see [`Frame::icrc`]).
    pub fn packet(&self) -> Result<PacketRepr<'a>> {
        PacketRepr::parse(self.udp_payload)
    }

    /// Computes the ICRC over the frame and reads the one it carries.
    pub fn icrc(&self) -> Result<IcrcCheck> {
        let (covered, found) = split_icrc(self.udp_payload)?;
        let computed = icrc::compute(self.ip_header, self.udp_header, covered)?;
        Ok(IcrcCheck { computed, found })
    }

    /// Parses the packet and verifies its ICRC.
    pub fn verified_packet(&self) -> Result<PacketRepr<'a>> {
        let check = self.icrc()?;
        if !check.ok() {
            return Err(Error::IcrcMismatch {
                computed: check.computed,
                found: check.found,
            });
        }
        self.packet()
    }
}

/// Returns the part of `outer` that `inner` points into (both are views of one capture; this
/// only fixes the lifetime that etherparse's IPv4 header accessor shortens).
fn subslice<'a>(outer: &'a [u8], inner: &[u8]) -> &'a [u8] {
    let start = (inner.as_ptr() as usize).wrapping_sub(outer.as_ptr() as usize);
    match outer.get(start..start + inner.len()) {
        Some(s) if s.as_ptr() == inner.as_ptr() => s,
        // Not reachable for slices of `outer`; an empty header then fails the ICRC check.
        _ => &[],
    }
}

/// Ethernet addresses for [`FrameBuilder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EthAddrs {
    /// Source MAC.
    pub src: [u8; 6],
    /// Destination MAC.
    pub dst: [u8; 6],
}

/// Emits complete frames around RoCE packets, sealed with a valid ICRC.
///
/// The defaults follow Linux rxe: IPv4 with DF set and UDP checksum 0, TTL / hop limit 64.
/// IPv6 frames get a real UDP checksum, which RFC 8200 requires (the ICRC masks it anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameBuilder {
    /// Ethernet header, or `None` for a raw-IP frame.
    pub eth: Option<EthAddrs>,
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port (4791 for RoCEv2).
    pub dst: SocketAddr,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 TOS or IPv6 traffic class.
    pub tos: u8,
    /// IPv4 identification.
    pub ip_id: u16,
    /// IPv4 don't-fragment.
    pub dont_fragment: bool,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
}

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;

impl FrameBuilder {
    /// A builder for `src` -> `dst` with rxe's defaults and no Ethernet header.
    pub fn new(src: SocketAddr, dst: SocketAddr) -> FrameBuilder {
        FrameBuilder {
            eth: None,
            src,
            dst,
            ttl: 64,
            tos: 0,
            ip_id: 0,
            dont_fragment: true,
            flow_label: 0,
        }
    }

    /// Adds an Ethernet header.
    pub fn with_eth(mut self, eth: EthAddrs) -> FrameBuilder {
        self.eth = Some(eth);
        self
    }

    fn header_len(&self) -> usize {
        let l2 = if self.eth.is_some() { ETH_LEN } else { 0 };
        let l3 = if self.src.is_ipv4() {
            IPV4_LEN
        } else {
            IPV6_HEADER_LEN
        };
        l2 + l3 + UDP_HEADER_LEN
    }

    /// Bytes needed for the frame carrying `packet`.
    pub fn buffer_len(&self, packet: &PacketRepr) -> usize {
        self.header_len() + packet.buffer_len()
    }

    /// Writes the frame carrying an already-encoded RoCE UDP payload (BTH..ICRC, whose last
    /// four bytes are overwritten with the ICRC). Returns the frame length.
    pub fn emit_udp_payload(&self, roce: &[u8], buf: &mut [u8]) -> Result<usize> {
        let n = self.wrap(roce, buf)?;
        self.seal(buf, roce.len())?;
        Ok(n)
    }

    /// Writes the frame carrying `roce` (BTH..ICRC) exactly as given, ICRC included: what a
    /// capture of a sent or received packet must show, a corrupted one included. Returns the
    /// frame length.
    pub fn wrap(&self, roce: &[u8], buf: &mut [u8]) -> Result<usize> {
        let total = self.header_len() + roce.len();
        check_emit_len(buf, total)?;
        let start = total - roce.len();
        buf[start..total].copy_from_slice(roce);
        self.write_headers(buf, roce.len())?;
        Ok(total)
    }

    /// Writes the frame carrying `packet`, ICRC included. Returns the frame length.
    pub fn emit(&self, packet: &PacketRepr, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len(packet);
        check_emit_len(buf, total)?;
        let start = self.header_len();
        let n = packet.emit(&mut buf[start..total])?;
        self.write_headers(buf, n)?;
        self.seal(buf, n)
    }

    /// Writes the Ethernet, IP and UDP headers in front of the `roce_len` bytes already at the
    /// end of the frame (the IPv6 UDP checksum included).
    fn write_headers(&self, buf: &mut [u8], roce_len: usize) -> Result<()> {
        if roce_len < ICRC_LEN + super::bth::LEN {
            return Err(Error::Truncated {
                header: super::Header::Bth,
                need: ICRC_LEN + super::bth::LEN,
                got: roce_len,
            });
        }
        let udp_len = UDP_HEADER_LEN + roce_len;
        let udp_len16 = u16::try_from(udp_len).map_err(|_| Error::PayloadTooLarge(roce_len))?;
        let mut at = 0;
        if let Some(eth) = self.eth {
            buf[0..6].copy_from_slice(&eth.dst);
            buf[6..12].copy_from_slice(&eth.src);
            let ethertype: u16 = if self.src.is_ipv4() { 0x0800 } else { 0x86DD };
            buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
            at = ETH_LEN;
        }
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total_len = u16::try_from(IPV4_LEN + udp_len)
                    .map_err(|_| Error::PayloadTooLarge(roce_len))?;
                let ip = &mut buf[at..at + IPV4_LEN];
                ip[0] = 0x45;
                ip[1] = self.tos;
                ip[2..4].copy_from_slice(&total_len.to_be_bytes());
                ip[4..6].copy_from_slice(&self.ip_id.to_be_bytes());
                let flags: u16 = if self.dont_fragment { 0x4000 } else { 0 };
                ip[6..8].copy_from_slice(&flags.to_be_bytes());
                ip[8] = self.ttl;
                ip[9] = 17;
                ip[10..12].fill(0);
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                let sum = internet_checksum(0, ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                at += IPV4_LEN;
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let ip = &mut buf[at..at + IPV6_HEADER_LEN];
                let word = (6u32 << 28) | ((self.tos as u32) << 20) | (self.flow_label & 0xF_FFFF);
                ip[0..4].copy_from_slice(&word.to_be_bytes());
                ip[4..6].copy_from_slice(&udp_len16.to_be_bytes());
                ip[6] = 17;
                ip[7] = self.ttl;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                at += IPV6_HEADER_LEN;
            }
            _ => {
                return Err(Error::Encapsulation(
                    "source and destination address families differ",
                ))
            }
        }
        let udp = &mut buf[at..at + UDP_HEADER_LEN];
        udp[0..2].copy_from_slice(&self.src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len16.to_be_bytes());
        udp[6..8].fill(0);
        self.fix_udp_checksum(buf, roce_len);
        Ok(())
    }

    /// Offsets of the IP header, the UDP header and the RoCE payload in a frame.
    fn offsets(&self) -> (usize, usize, usize) {
        let ip = if self.eth.is_some() { ETH_LEN } else { 0 };
        let udp = ip
            + if self.src.is_ipv4() {
                IPV4_LEN
            } else {
                IPV6_HEADER_LEN
            };
        (ip, udp, udp + UDP_HEADER_LEN)
    }

    /// IPv6 needs a real UDP checksum (RFC 8200); IPv4 keeps 0, as rxe sends.
    fn fix_udp_checksum(&self, buf: &mut [u8], roce_len: usize) {
        let (IpAddr::V6(s), IpAddr::V6(d)) = (self.src.ip(), self.dst.ip()) else {
            return;
        };
        let (_, udp_start, roce_start) = self.offsets();
        let end = roce_start + roce_len;
        buf[udp_start + 6..udp_start + 8].fill(0);
        // Pseudo-header: addresses, UDP length, next header; then the datagram.
        let mut sum = 0u32;
        sum = internet_sum(sum, &s.octets());
        sum = internet_sum(sum, &d.octets());
        sum = internet_sum(sum, &((UDP_HEADER_LEN + roce_len) as u32).to_be_bytes());
        sum = internet_sum(sum, &[0, 0, 0, 17]);
        let c = internet_checksum(sum, &buf[udp_start..end]);
        let c = if c == 0 { 0xFFFF } else { c };
        buf[udp_start + 6..udp_start + 8].copy_from_slice(&c.to_be_bytes());
    }

    /// Computes the ICRC over the headers already written and stores it in the last four bytes
    /// (then refreshes the IPv6 UDP checksum, which covers them). Returns the frame length.
    fn seal(&self, buf: &mut [u8], roce_len: usize) -> Result<usize> {
        let (ip_start, udp_start, roce_start) = self.offsets();
        let end = roce_start + roce_len;
        let crc = icrc::compute(
            &buf[ip_start..udp_start],
            &buf[udp_start..roce_start],
            &buf[roce_start..end - ICRC_LEN],
        )?;
        buf[end - ICRC_LEN..end].copy_from_slice(&icrc::to_wire(crc));
        self.fix_udp_checksum(buf, roce_len);
        Ok(end)
    }
}

/// Adds `data` as big-endian 16-bit words to a ones'-complement accumulator.
fn internet_sum(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum
}

/// The RFC 1071 checksum of `data`, starting from a partial sum.
fn internet_checksum(start: u32, data: &[u8]) -> u16 {
    !(internet_sum(start, data) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BthRepr, ExtHeaders, Opcode, RethRepr};

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const CNP: &str = "e41d2dab2bc27cfe90643b32 0800 45c2003c718c400040119161 0a001101 0a001201 \
                       0000 12b7 0028 0000 8100ffff 40000118 00000000 \
                       00000000000000000000000000000000 82fd002a";

    #[test]
    fn parses_the_connectx4_cnp() {
        let f = hex(CNP);
        let fr = Frame::parse(LinkType::Ethernet, &f).unwrap().unwrap();
        assert_eq!(fr.src, "10.0.17.1:0".parse().unwrap());
        assert_eq!(fr.dst, "10.0.18.1:4791".parse().unwrap());
        let c = fr.icrc().unwrap();
        assert!(c.ok(), "{c:?}");
        let p = fr.verified_packet().unwrap();
        assert_eq!(p.opcode(), Opcode::CNP);
        assert_eq!(p.bth.dest_qp, 0x118);
    }

    #[test]
    fn ethernet_padding_is_ignored_and_corruption_detected() {
        let mut f = hex(CNP);
        f.extend_from_slice(&[0; 6]); // trailer bytes beyond the IP total length
        let fr = Frame::parse(LinkType::Ethernet, &f).unwrap().unwrap();
        assert!(fr.icrc().unwrap().ok());
        let mut bad = hex(CNP);
        bad[50] ^= 0x01; // DestQP
        let fr = Frame::parse(LinkType::Ethernet, &bad).unwrap().unwrap();
        assert!(matches!(
            fr.verified_packet(),
            Err(Error::IcrcMismatch { .. })
        ));
    }

    #[test]
    fn other_traffic_is_not_roce() {
        let mut f = hex(CNP);
        f[37] = 0x35; // UDP destination port 4661 -> not RoCE
        assert_eq!(Frame::parse(LinkType::Ethernet, &f).unwrap(), None);
        let mut arp = hex(CNP);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(Frame::parse(LinkType::Ethernet, &arp)
            .map(|o| o.is_none())
            .unwrap_or(true));
    }

    #[test]
    fn truncated_frames_are_errors() {
        let f = hex(CNP);
        for n in 0..f.len() {
            let r = Frame::parse(LinkType::Ethernet, &f[..n]);
            assert!(
                !matches!(r, Ok(Some(_))),
                "prefix of {n} bytes accepted: {r:?}"
            );
        }
    }

    fn sample() -> PacketRepr<'static> {
        PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_WRITE_ONLY,
                dest_qp: 0x11,
                psn: 0x123456,
                ack_req: true,
                pad_count: 1, // what emit derives for a 3-byte payload
                ..Default::default()
            },
            ext: ExtHeaders {
                reth: Some(RethRepr {
                    va: 0x1000,
                    rkey: 0x42,
                    len: 3,
                }),
                ..Default::default()
            },
            payload: b"abc",
        }
    }

    #[test]
    fn builder_round_trips_ipv4_and_ipv6() {
        for (src, dst, link) in [
            (
                "192.0.2.1:49152",
                "192.0.2.2:4791",
                Some(EthAddrs::default()),
            ),
            ("192.0.2.1:49152", "192.0.2.2:4791", None),
            (
                "[2001:db8::1]:50000",
                "[2001:db8::2]:4791",
                Some(EthAddrs::default()),
            ),
            ("[2001:db8::1]:50000", "[2001:db8::2]:4791", None),
        ] {
            let mut b = FrameBuilder::new(src.parse().unwrap(), dst.parse().unwrap());
            b.eth = link;
            let p = sample();
            let mut buf = vec![0u8; b.buffer_len(&p)];
            let n = b.emit(&p, &mut buf).unwrap();
            assert_eq!(n, buf.len());
            let lt = if link.is_some() {
                LinkType::Ethernet
            } else {
                LinkType::RawIp
            };
            let fr = Frame::parse(lt, &buf).unwrap().unwrap();
            assert_eq!(fr.src, src.parse().unwrap());
            assert_eq!(fr.verified_packet().unwrap(), p);
            // etherparse agrees with our IP and UDP checksums.
            let sliced = match lt {
                LinkType::Ethernet => SlicedPacket::from_ethernet(&buf).unwrap(),
                _ => SlicedPacket::from_ip(&buf).unwrap(),
            };
            match sliced.net.unwrap() {
                NetSlice::Ipv4(v4) => {
                    let h = v4.header().to_header();
                    assert_eq!(h.header_checksum, h.calc_header_checksum());
                }
                NetSlice::Ipv6(v6) => {
                    let Some(TransportSlice::Udp(u)) = sliced.transport else {
                        panic!()
                    };
                    let want = u
                        .to_header()
                        .calc_checksum_ipv6(&v6.header().to_header(), u.payload())
                        .unwrap();
                    assert_eq!(u.checksum(), want);
                }
                _ => panic!(),
            }
        }
    }

    #[test]
    fn builder_rejects_mixed_families_and_small_buffers() {
        let b = FrameBuilder::new(
            "192.0.2.1:1".parse().unwrap(),
            "[2001:db8::2]:4791".parse().unwrap(),
        );
        let mut buf = [0u8; 256];
        assert!(matches!(
            b.emit(&sample(), &mut buf),
            Err(Error::Encapsulation(_))
        ));
        let b = FrameBuilder::new(
            "192.0.2.1:1".parse().unwrap(),
            "192.0.2.2:4791".parse().unwrap(),
        );
        let need = b.buffer_len(&sample());
        assert_eq!(
            b.emit(&sample(), &mut buf[..need - 1]),
            Err(Error::BufferTooSmall {
                need,
                got: need - 1
            })
        );
    }

    #[test]
    fn pseudo_links() {
        let b = FrameBuilder::new(
            "192.0.2.1:1".parse().unwrap(),
            "192.0.2.2:4791".parse().unwrap(),
        );
        let p = sample();
        let mut ip = vec![0u8; b.buffer_len(&p)];
        b.emit(&p, &mut ip).unwrap();
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        let fr = Frame::parse(LinkType::LinuxSll, &sll).unwrap().unwrap();
        assert_eq!(fr.verified_packet().unwrap(), p);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&ip);
        assert!(Frame::parse(LinkType::LinuxSll2, &sll2).unwrap().is_some());
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        assert!(Frame::parse(LinkType::Null, &null).unwrap().is_some());
        assert!(Frame::parse(LinkType::LinuxSll, &sll[..10]).is_err());
        assert_eq!(LinkType::from_pcap(1), Some(LinkType::Ethernet));
        assert_eq!(LinkType::from_pcap(147), None);
    }
}
