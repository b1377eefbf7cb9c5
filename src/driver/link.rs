//! The link: what the engine sends RoCE UDP payloads over and receives them from. Capture and
//! impairment are wrappers implementing the same trait around another link, as smoltcp's
//! pcap_writer and fault_injector wrap a device.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Instant;

/// A datagram to send: a whole RoCE packet (BTH .. ICRC, ICRC filled in).
#[derive(Debug, Clone, Copy)]
pub struct OutDatagram<'a> {
    /// UDP source port (the QP's, as prepared with [`Link::prepare_source_port`]).
    pub src_port: u16,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// IPv4 TTL or IPv6 hop limit (0: the socket's default).
    pub hop_limit: u8,
    /// IPv4 TOS or IPv6 traffic class.
    pub traffic_class: u8,
    /// The RoCE packet.
    pub payload: &'a [u8],
}

/// Payload bytes of a datagram that stay where they are, in a registered region, for a link
/// that gathers ([`Link::send_gathered`]): they go between `payload[..at]` and
/// `payload[at..]` of their [`OutDatagram`].
#[derive(Debug, Clone, Copy)]
pub struct GatherRef {
    /// Where in the datagram the bytes go.
    pub at: usize,
    /// The first byte, readable (by the kernel, `crate::memory` rule 4) for `len` bytes while
    /// the region is pinned, which the caller keeps it across the send.
    pub ptr: *const u8,
    /// How many.
    pub len: usize,
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
    /// The IPv4 TTL or IPv6 hop limit it arrived with (0: not known).
    pub hop_limit: u8,
    /// The IPv4 TOS or IPv6 traffic class it arrived with.
    pub traffic_class: u8,
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

    /// Starts receiving the datagrams of multicast group `group` from `socket` (made by
    /// [`super::udp::group_socket`]), as datagrams to the group's address. A link that cannot
    /// (the default) says Unsupported, and the device's QPs hear no multicast.
    fn join_group(&mut self, group: IpAddr, socket: UdpSocket) -> io::Result<()> {
        let _ = (group, socket);
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Stops receiving multicast group `group` (closing its socket leaves the group).
    fn leave_group(&mut self, group: IpAddr) {
        let _ = group;
    }

    /// Sends `ds` in order and returns how many were sent before the first error, with that
    /// error. The default sends one datagram at a time; the UDP link sends the batch in one
    /// system call.
    fn send_batch(&mut self, now: Instant, ds: &[OutDatagram]) -> (usize, Option<io::Error>) {
        for (i, d) in ds.iter().enumerate() {
            if let Err(e) = self.send(now, d) {
                return (i, Some(e));
            }
        }
        (ds.len(), None)
    }

    /// Whether the link takes datagrams whose payload is partly elsewhere
    /// ([`Link::send_gathered`]). Wrappers that look at or keep the bytes (capture,
    /// impairment) keep the default, and are given whole datagrams.
    fn gathers(&self) -> bool {
        false
    }

    /// As [`Link::send_batch`], datagram i with the bytes of `gathers[i]` (if any) inserted
    /// in its payload. Only for a link that [`gathers`](Link::gathers); the default takes
    /// whole datagrams only.
    fn send_gathered(
        &mut self,
        now: Instant,
        ds: &[OutDatagram],
        gathers: &[Option<GatherRef>],
    ) -> (usize, Option<io::Error>) {
        if gathers.iter().any(Option::is_some) {
            return (0, Some(io::ErrorKind::Unsupported.into()));
        }
        self.send_batch(now, ds)
    }

    /// Most datagrams the link sends as one with UDP GSO (UDP_SEGMENT); 1: no GSO. The
    /// kernel gives the segments of one IPv4 GSO send the identifications 0, 1, 2, ..., which
    /// the ICRC covers, so the sender must know how the link groups datagrams: by
    /// [`gso_run`] with this limit. Wrappers that send one datagram at a time keep the
    /// default.
    fn gso_max_segments(&self) -> usize {
        1
    }

    /// Receives up to `batch.free_slot_count()` ready datagrams into `batch` (emptied first)
    /// without blocking. The default receives one at a time; the UDP link takes the batch in one
    /// system call. An error with datagrams already received is dropped: the datagrams are
    /// returned, and a persistent error comes back on the next call.
    fn recv_batch(&mut self, now: Instant, batch: &mut RxBatch) -> io::Result<()> {
        batch.clear();
        while batch.free_slot_count() > 0 {
            let slot = batch.next_slot();
            match self.recv(now, slot) {
                Ok(Some(d)) => batch.push(d),
                Ok(None) => break,
                Err(e) if batch.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(())
    }
}

/// Buffers for a batch of received datagrams: fixed-size slots, so that a batch is received
/// without allocating. A slot holds one datagram, or several packets that the kernel
/// coalesced (UDP GRO), which the link records one by one.
#[derive(Debug)]
pub struct RxBatch {
    data: Vec<u8>,
    slot: usize,
    slots: usize,
    /// Slots filled.
    used: usize,
    /// Each packet and the offset of its bytes in `data`.
    got: Vec<(InDatagram, usize)>,
}

impl RxBatch {
    /// Room for `slots` datagrams of up to `slot_len` bytes each, and for `max_packets`
    /// packets in all (more than `slots` when the link splits coalesced datagrams).
    pub fn new(slots: usize, slot_len: usize, max_packets: usize) -> RxBatch {
        RxBatch {
            data: vec![0u8; slots * slot_len],
            slot: slot_len,
            slots,
            used: 0,
            got: Vec::with_capacity(max_packets.max(slots)),
        }
    }

    /// Slots not yet filled.
    pub fn free_slot_count(&self) -> usize {
        self.slots - self.used
    }

    /// Whether every slot was filled (more datagrams may be waiting).
    pub fn is_full(&self) -> bool {
        self.used == self.slots
    }

    /// Packets received.
    pub fn len(&self) -> usize {
        self.got.len()
    }

    /// Whether no packet was received.
    pub fn is_empty(&self) -> bool {
        self.got.is_empty()
    }

    /// Forgets the packets received.
    pub fn clear(&mut self) {
        self.got.clear();
        self.used = 0;
    }

    /// Packet `i`: its addresses and its bytes.
    pub fn get(&self, i: usize) -> (InDatagram, &[u8]) {
        let (d, at) = self.got[i];
        (d, &self.data[at..at + d.len])
    }

    /// The next free slot (call only while [`free_slot_count`](Self::free_slot_count) > 0).
    pub fn next_slot(&mut self) -> &mut [u8] {
        let i = self.used;
        &mut self.data[i * self.slot..(i + 1) * self.slot]
    }

    /// The free slots, `slot_len` bytes each, for a link that fills several at once.
    pub fn free_slots(&mut self) -> (usize, &mut [u8]) {
        let i = self.used;
        (self.slot, &mut self.data[i * self.slot..])
    }

    /// Records that the next free slot holds datagram `d` (`d.len` at most the slot length).
    pub fn push(&mut self, d: InDatagram) {
        self.push_split(d, d.len);
    }

    /// Records that the next free slot holds `d.len` bytes of packets of `segment` bytes
    /// each (the last may be shorter), from the same sender: a datagram that the kernel
    /// coalesced. Packets beyond the batch's packet room are dropped, as a full socket buffer
    /// would drop them.
    pub fn push_split(&mut self, d: InDatagram, segment: usize) {
        let base = self.used * self.slot;
        let total = d.len.min(self.slot);
        let segment = if segment == 0 { total.max(1) } else { segment };
        let mut at = 0;
        loop {
            let len = segment.min(total - at);
            if self.got.len() == self.got.capacity() {
                break;
            }
            self.got.push((InDatagram { len, ..d }, base + at));
            at += len;
            if at >= total {
                break;
            }
        }
        self.used += 1;
    }
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
    fn join_group(&mut self, group: IpAddr, socket: UdpSocket) -> io::Result<()> {
        (**self).join_group(group, socket)
    }
    fn leave_group(&mut self, group: IpAddr) {
        (**self).leave_group(group)
    }
    fn send_batch(&mut self, now: Instant, ds: &[OutDatagram]) -> (usize, Option<io::Error>) {
        (**self).send_batch(now, ds)
    }
    fn recv_batch(&mut self, now: Instant, batch: &mut RxBatch) -> io::Result<()> {
        (**self).recv_batch(now, batch)
    }
    fn gso_max_segments(&self) -> usize {
        (**self).gso_max_segments()
    }
    fn gathers(&self) -> bool {
        (**self).gathers()
    }
    fn send_gathered(
        &mut self,
        now: Instant,
        ds: &[OutDatagram],
        gathers: &[Option<GatherRef>],
    ) -> (usize, Option<io::Error>) {
        (**self).send_gathered(now, ds, gathers)
    }
}

/// Most UDP payload bytes one GSO send carries (an IPv4 datagram's 65535 bytes less the IP
/// and UDP headers, with room for IPv6's larger header).
pub const GSO_MAX_BYTES: usize = 65535 - 48 - 8;

/// What the datagrams of one GSO send share, since the kernel sends its segments with one
/// set of headers: source port, destination, the IP header's TTL and TOS, and a length (the
/// last segment may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsoKey {
    /// UDP source port.
    pub src_port: u16,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv4 TOS or IPv6 traffic class.
    pub traffic_class: u8,
    /// Datagram length in bytes.
    pub len: usize,
    /// The destination QPN's top byte (BTH byte 5). A shared device's group steers each
    /// datagram by it to the member that owns the QP, and the kernel steers a GSO send once,
    /// as a whole, by its first segment: datagrams for two slots never share one
    /// (spec-notes/shared-device.md rule 3).
    pub steer: u8,
}

impl OutDatagram<'_> {
    /// This datagram's [`GsoKey`].
    pub fn gso_key(&self) -> GsoKey {
        GsoKey {
            src_port: self.src_port,
            dst: self.dst,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            len: self.payload.len(),
            steer: self.payload.get(5).copied().unwrap_or(0),
        }
    }
}

/// How many datagrams at the start of a batch one GSO send carries: those after the first
/// with its key but the length, and its length (the last may be shorter), at most
/// `max_segments` and [`GSO_MAX_BYTES`] in all. `key(i)` gives datagram i's [`GsoKey`]; `n` is
/// the batch length (at least 1).
pub fn gso_run(n: usize, max_segments: usize, key: impl Fn(usize) -> GsoKey) -> usize {
    let first = key(0);
    let len = first.len;
    if max_segments <= 1 || len == 0 {
        return 1;
    }
    let limit = max_segments.min(GSO_MAX_BYTES / len).min(n);
    let mut run = 1;
    while run < limit {
        let k = key(run);
        if (GsoKey { len, ..k }) != first || k.len > len || k.len == 0 {
            break;
        }
        run += 1;
        if k.len < len {
            break;
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gso_runs_group_equal_sized_datagrams_to_one_peer() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let b: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        let k = |src_port, dst, hop_limit, len| GsoKey {
            src_port,
            dst,
            hop_limit,
            traffic_class: 0,
            len,
            steer: 0,
        };
        let ds = [
            k(1, a, 0, 100),
            k(1, a, 0, 100),
            k(1, a, 0, 40), // a shorter last segment ends the run
            k(1, a, 0, 100),
            k(2, a, 0, 100), // another source port
            k(2, b, 0, 100), // another peer
            k(2, b, 0, 120), // longer: not a segment of the run before
            k(2, b, 0, 120),
            k(2, b, 9, 120), // another TTL: the kernel gives a GSO send one IP header
            GsoKey {
                traffic_class: 0x28,
                ..k(2, b, 9, 120)
            },
            // Another destination slot: the kernel would steer both by the first one's.
            GsoKey {
                steer: 1,
                ..k(2, b, 9, 120)
            },
        ];
        let run = |from: usize, max: usize| gso_run(ds.len() - from, max, |i| ds[from + i]);
        assert_eq!(run(0, 64), 3);
        assert_eq!(run(3, 64), 1);
        assert_eq!(run(4, 64), 1);
        assert_eq!(run(5, 64), 1);
        assert_eq!(run(6, 64), 2);
        assert_eq!(run(8, 64), 1);
        assert_eq!(run(9, 64), 1);
        assert_eq!(run(10, 64), 1);
        assert_eq!(run(0, 2), 2, "at most max_segments");
        assert_eq!(run(0, 1), 1, "no GSO");
        let big = |_| k(1, a, 0, 5000);
        assert_eq!(gso_run(64, 64, big), GSO_MAX_BYTES / 5000, "at most 64 KiB");
    }

    #[test]
    fn a_coalesced_datagram_is_split_by_its_segment_size() {
        let mut b = RxBatch::new(2, 1000, 8);
        let d = InDatagram {
            len: 250,
            src: "127.0.0.2:49152".parse().unwrap(),
            dst: "127.0.0.1:4791".parse().unwrap(),
            hop_limit: 0,
            traffic_class: 0,
        };
        b.next_slot()[..250].copy_from_slice(&[7u8; 250]);
        b.push_split(d, 100);
        b.next_slot()[..10].copy_from_slice(&[9u8; 10]);
        b.push(InDatagram { len: 10, ..d });
        assert!(b.is_full());
        let lens: Vec<usize> = (0..b.len()).map(|i| b.get(i).1.len()).collect();
        assert_eq!(lens, [100, 100, 50, 10]);
        assert!(b.get(2).1.iter().all(|&x| x == 7));
        assert!(b.get(3).1.iter().all(|&x| x == 9));
        b.clear();
        assert_eq!((b.len(), b.free_slot_count()), (0, 2));
    }
}
