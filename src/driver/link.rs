//! The link: what the engine sends RoCE UDP payloads over and receives them from. Capture and
//! impairment are wrappers implementing the same trait around another link, as smoltcp's
//! pcap_writer and fault_injector wrap a device.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

/// A datagram to send: a whole RoCE packet (BTH .. ICRC, ICRC filled in).
#[derive(Debug, Clone, Copy)]
pub struct OutDatagram<'a> {
    /// UDP source port (the QP's, as prepared with [`Link::prepare_source_port`]).
    pub src_port: u16,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// The RoCE packet.
    pub payload: &'a [u8],
}

/// A received datagram; its bytes are at the start of the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InDatagram {
    /// Bytes received.
    pub len: usize,
    /// Sender address and UDP port.
    pub src: SocketAddr,
    /// Local address and UDP port it was received on.
    pub dst: SocketAddr,
}

/// A datagram link.
pub trait Link {
    /// The local address and RoCEv2 port.
    fn local_addr(&self) -> SocketAddr;

    /// Makes `wanted` usable as a UDP source port and returns the port that will actually be
    /// used (another one when `wanted` cannot be bound). The transport computes its ICRC over
    /// the returned port, so it must ask before sending.
    fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16>;

    /// Sends one datagram.
    fn send(&mut self, now: Instant, d: &OutDatagram) -> io::Result<()>;

    /// Receives one datagram into `buf` without blocking; `Ok(None)` when none is ready.
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>>;

    /// The earliest instant at which the link has work of its own (a held packet to release).
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Registers the receiving socket with a mio registry, for readability.
    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()>;
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn local_addr(&self) -> SocketAddr {
        (**self).local_addr()
    }
    fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
        (**self).prepare_source_port(wanted)
    }
    fn send(&mut self, now: Instant, d: &OutDatagram) -> io::Result<()> {
        (**self).send(now, d)
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        (**self).recv(now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        (**self).register(registry, token)
    }
}
