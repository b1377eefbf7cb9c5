//! A link wrapper that writes every datagram sent and received to a pcap file, as full
//! Ethernet frames that `softroce decode`, tshark and Wireshark read.
//!
//! The payload is captured exactly as sent or received, ICRC included, so a corrupted packet
//! shows up corrupted. The IP header is rebuilt as the kernel wrote it: for packets softroce
//! sends, identification 0 with DF (spec-notes/icrc.md); for packets received from a Linux rxe
//! peer, whose identification the socket does not reveal, the identification that makes the
//! ICRC valid is solved for, so that a good packet also decodes as good.
//!
//! Every datagram is captured, whatever it holds: one too short to carry a BTH and an ICRC
//! (which the frame builder refuses to wrap) is framed here by hand, so that the capture shows
//! all that arrived, junk included. One kind is left out: a shared device's own datagrams
//! (driver/group.rs: layout probes, their answers, forwarded MADs), which start with 0xFF,
//! "SR" as no RoCE packet does and are not RoCE. A forwarded MAD is in the capture of the
//! member that first received it, as the RoCE packet it came in.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Instant;

use super::link::{InDatagram, Link, OutDatagram};
use crate::capture::PcapWriter;
use crate::wire::frame::EthAddrs;
use crate::wire::icrc::{verify_socket_datagram, SocketVerdict};
use crate::wire::{FrameBuilder, LinkType};

/// Locally administered MACs for the two directions of a capture.
const LOCAL_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];

/// The shortest UDP payload the frame builder wraps: a BTH and an ICRC.
const SHORTEST_ROCE: usize = crate::wire::bth::LEN + crate::wire::ICRC_LEN;

/// Writes an Ethernet (if `eth`), IP and UDP frame around `payload` into `buf`, as the kernel
/// would have sent it (IPv4: identification 0, DF, TTL 64, no UDP checksum; IPv6: the UDP
/// checksum it requires). Returns the frame length, or `None` if it cannot be framed (mixed
/// address families, a buffer too small).
fn wrap_short(
    src: SocketAddr,
    dst: SocketAddr,
    eth: Option<EthAddrs>,
    payload: &[u8],
    buf: &mut [u8],
) -> Option<usize> {
    let udp_len = u16::try_from(8 + payload.len()).ok()?;
    let mut at = 0;
    if let Some(e) = eth {
        buf.get_mut(..14)?;
        buf[0..6].copy_from_slice(&e.dst);
        buf[6..12].copy_from_slice(&e.src);
        let ethertype: u16 = if src.is_ipv4() { 0x0800 } else { 0x86DD };
        buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
        at = 14;
    }
    let udp_at;
    let mut udp_sum = None;
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = buf.get_mut(at..at + 20)?;
            ip.fill(0);
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[6] = 0x40; // DF
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let sum = !fold(sum16(0, ip));
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            udp_at = at + 20;
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = buf.get_mut(at..at + 40)?;
            ip.fill(0);
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            // Pseudo-header: addresses, upper-layer length, next header.
            let pseudo = sum16(sum16(0, &ip[8..40]), &[0, 0, 0, 17]) + u32::from(udp_len);
            udp_sum = Some(pseudo);
            udp_at = at + 40;
        }
        _ => return None,
    }
    let end = udp_at + 8 + payload.len();
    let udp = buf.get_mut(udp_at..end)?;
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].fill(0);
    udp[8..].copy_from_slice(payload);
    if let Some(pseudo) = udp_sum {
        let mut sum = !fold(sum16(pseudo, udp));
        if sum == 0 {
            sum = 0xFFFF;
        }
        udp[6..8].copy_from_slice(&sum.to_be_bytes());
    }
    Some(end)
}

/// Adds `data` as big-endian 16-bit words (odd tail padded with zero) to `sum`.
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u32::from(*b) << 8;
    }
    sum
}

/// Folds the carries of a one's-complement sum into 16 bits.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// Captures the traffic of the link it wraps.
#[derive(Debug)]
pub struct CaptureLink<L: Link, W: Write> {
    inner: L,
    pcap: PcapWriter<W>,
    frame: Vec<u8>,
    /// Frames that could not be written (the capture is best effort; traffic goes on).
    pub write_errors: u64,
}

impl<L: Link, W: Write> CaptureLink<L, W> {
    /// Wraps `inner`, writing the pcap header to `out`.
    pub fn new(inner: L, out: W) -> io::Result<Self> {
        Ok(CaptureLink {
            inner,
            pcap: PcapWriter::new(out, LinkType::Ethernet)?,
            frame: vec![0u8; 65536 + 128],
            write_errors: 0,
        })
    }

    /// Frames captured.
    pub fn frames(&self) -> u64 {
        self.pcap.frames()
    }

    /// Flushes the capture.
    pub fn flush(&mut self) -> io::Result<()> {
        self.pcap.flush()
    }

    /// Writes one frame. `ip` is the datagram's TTL and TOS as sent or as received (a hop
    /// limit of 0, not known or the socket's default, is shown as 64).
    fn record(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        outgoing: bool,
        ip: (u8, u8),
    ) {
        let mut b = FrameBuilder::new(src, dst).with_eth(if outgoing {
            EthAddrs {
                src: LOCAL_MAC,
                dst: PEER_MAC,
            }
        } else {
            EthAddrs {
                src: PEER_MAC,
                dst: LOCAL_MAC,
            }
        });
        if ip.0 != 0 {
            b.ttl = ip.0;
        }
        b.tos = ip.1;
        if !outgoing {
            if let SocketVerdict::RecoveredId(id) = verify_socket_datagram(src, dst, payload) {
                b.ip_id = id;
            }
        }
        let framed = if payload.len() < SHORTEST_ROCE {
            wrap_short(src, dst, b.eth, payload, &mut self.frame)
        } else {
            b.wrap(payload, &mut self.frame).ok()
        };
        let ok = match framed {
            Some(n) => self.pcap.write_frame_now(&self.frame[..n]).is_ok(),
            None => false,
        };
        if !ok {
            self.write_errors += 1;
        }
    }
}

impl<L: Link, W: Write> Link for CaptureLink<L, W> {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
        self.inner.prepare_source_port(wanted)
    }

    fn send(&mut self, now: Instant, d: &OutDatagram) -> io::Result<()> {
        self.inner.send(now, d)?;
        let src = SocketAddr::new(self.inner.local_addr().ip(), d.src_port);
        self.record(src, d.dst, d.payload, true, (d.hop_limit, d.traffic_class));
        Ok(())
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        let r = self.inner.recv(now, buf)?;
        if let Some(d) = r.filter(|d| !crate::driver::steering::is_group_datagram(&buf[..d.len])) {
            self.record(
                d.src,
                d.dst,
                &buf[..d.len],
                false,
                (d.hop_limit, d.traffic_class),
            );
        }
        Ok(r)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.inner.register(registry, token)
    }

    fn join_group(&mut self, group: IpAddr, socket: UdpSocket) -> io::Result<()> {
        self.inner.join_group(group, socket)
    }

    fn leave_group(&mut self, group: IpAddr) {
        self.inner.leave_group(group)
    }
}

impl<L: Link, W: Write> Drop for CaptureLink<L, W> {
    fn drop(&mut self) {
        let _ = self.pcap.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::CaptureReader;

    /// A link that receives the datagrams it was given, in order.
    struct Canned {
        local: SocketAddr,
        from: SocketAddr,
        datagrams: Vec<Vec<u8>>,
    }

    impl Link for Canned {
        fn local_addr(&self) -> SocketAddr {
            self.local
        }
        fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
            Ok(wanted)
        }
        fn send(&mut self, _now: Instant, _d: &OutDatagram) -> io::Result<()> {
            Ok(())
        }
        fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
            if self.datagrams.is_empty() {
                return Ok(None);
            }
            let d = self.datagrams.remove(0);
            buf[..d.len()].copy_from_slice(&d);
            Ok(Some(InDatagram {
                len: d.len(),
                src: self.from,
                dst: self.local,
                hop_limit: 0,
                traffic_class: 0,
            }))
        }
        fn register(&mut self, _r: &mio::Registry, _t: mio::Token) -> io::Result<()> {
            Ok(())
        }
    }

    /// The UDP payloads of every frame in a capture, and the frames' parsed UDP lengths.
    fn udp_payloads(pcap: &[u8], ip_len: usize) -> Vec<Vec<u8>> {
        let mut r = CaptureReader::new(pcap).unwrap();
        let mut out = Vec::new();
        while let Some(f) = r.next_frame().unwrap() {
            let udp = &f.data[14 + ip_len..];
            let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
            assert_eq!(udp_len, udp.len(), "UDP length matches the frame");
            out.push(udp[8..].to_vec());
        }
        out
    }

    #[test]
    fn received_datagrams_shorter_than_a_bth_are_captured_too() {
        for (local, from, ip_len) in [
            ("127.0.0.1:4791", "127.0.0.5:4791", 20),
            ("[::1]:4791", "[::1]:5000", 40),
        ] {
            let sent: Vec<Vec<u8>> = vec![vec![], vec![0xAB], vec![1; 15], vec![7; 40]];
            let link = Canned {
                local: local.parse().unwrap(),
                from: from.parse().unwrap(),
                datagrams: sent.clone(),
            };
            let mut out = Vec::new();
            {
                let mut c = CaptureLink::new(link, &mut out).unwrap();
                let mut buf = [0u8; 256];
                while c.recv(Instant::now(), &mut buf).unwrap().is_some() {}
                assert_eq!(c.frames(), 4, "{local}");
                assert_eq!(c.write_errors, 0);
            }
            assert_eq!(udp_payloads(&out, ip_len), sent, "{local}");
        }
    }

    #[test]
    fn short_frames_carry_valid_ip_and_udp_checksums() {
        let src: SocketAddr = "[::1]:5000".parse().unwrap();
        let dst: SocketAddr = "[::1]:4791".parse().unwrap();
        let mut buf = [0u8; 128];
        let n = wrap_short(src, dst, None, &[1, 2, 3], &mut buf).unwrap();
        // The one's-complement sum over pseudo-header and UDP datagram, checksum included, is
        // all ones.
        let udp = &buf[40..n];
        let pseudo = sum16(sum16(0, &buf[8..40]), &[0, 0, 0, 17]) + udp.len() as u32;
        assert_eq!(fold(sum16(pseudo, udp)), 0xFFFF);
        let src: SocketAddr = "127.0.0.5:4791".parse().unwrap();
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let n = wrap_short(src, dst, None, &[9], &mut buf).unwrap();
        assert_eq!(n, 20 + 8 + 1);
        assert_eq!(fold(sum16(0, &buf[..20])), 0xFFFF, "IPv4 header checksum");
    }
}
