//! A link wrapper that writes every datagram sent and received to a pcap file, as full
//! Ethernet frames that `softroce decode`, tshark and Wireshark read.
//!
//! The payload is captured exactly as sent or received, ICRC included, so a corrupted packet
//! shows up corrupted. The IP header is rebuilt as the kernel wrote it: for packets softroce
//! sends, identification 0 with DF (spec-notes/icrc.md); for packets received from a Linux rxe
//! peer, whose identification the socket does not reveal, the identification that makes the
//! ICRC valid is solved for, so that a good packet also decodes as good.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Instant;

use super::link::{InDatagram, Link, OutDatagram};
use crate::capture::PcapWriter;
use crate::wire::frame::EthAddrs;
use crate::wire::icrc::{verify_socket_datagram, SocketVerdict};
use crate::wire::{FrameBuilder, LinkType};

/// Locally administered MACs for the two directions of a capture.
const LOCAL_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];

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

    fn record(&mut self, src: SocketAddr, dst: SocketAddr, payload: &[u8], outgoing: bool) {
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
        if !outgoing {
            if let SocketVerdict::RecoveredId(id) = verify_socket_datagram(src, dst, payload) {
                b.ip_id = id;
            }
        }
        let ok = match b.wrap(payload, &mut self.frame) {
            Ok(n) => self.pcap.write_frame_now(&self.frame[..n]).is_ok(),
            Err(_) => false,
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
        self.record(src, d.dst, d.payload, true);
        Ok(())
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        let r = self.inner.recv(now, buf)?;
        if let Some(d) = r {
            self.record(d.src, d.dst, &buf[..d.len], false);
        }
        Ok(r)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.inner.register(registry, token)
    }
}

impl<L: Link, W: Write> Drop for CaptureLink<L, W> {
    fn drop(&mut self) {
        let _ = self.pcap.flush();
    }
}
