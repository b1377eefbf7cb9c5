//! The link over real UDP sockets.
//!
//! One socket bound to (device address, RoCEv2 port) receives everything: peers always send to
//! port 4791 (or the configured port). Sending uses one socket per UDP source port, because a
//! RoCEv2 QP sends from its own port in 0xC000-0xFFFF (as rxe does, for ECMP entropy) and a
//! user-space program can only choose its source port by binding it.
//!
//! System calls come in batches: `send_batch` is one sendmmsg(2) per run of datagrams from
//! the same source port, `recv_batch` one recvmmsg(2). Within a sendmmsg, the equal-sized
//! datagrams of one message to one destination go as one UDP GSO message (UDP_SEGMENT):
//! the kernel segments it, so the stack is walked once for up to 15 packets of a 4096 MTU.
//! A link with gathering on ([`UdpLink::enable_gather`]) sends a datagram as up to three
//! iovecs, the middle one pointing into a registered region, so that the kernel copies an RC
//! payload straight from where the application put it.
//! On receive, with UDP GRO on (`enable_gro`), the kernel hands over such runs as one
//! datagram with the segment size in a control message, and `recv_batch` splits it. GRO is
//! for a link used through `recv_batch` only: `recv` returns datagrams as they come, so a
//! wrapper that receives one datagram at a time must leave GRO off.
//! GSO is detected when the link is bound (the UDP_SEGMENT socket option) and turned off for
//! good if a GSO send fails for want of support (EIO, EINVAL, EOPNOTSUPP). Every transmit socket is registered for
//! writability under the link's token (the receiving socket only for readability), so that the
//! engine waits for send space after EAGAIN instead of dropping packets.
//!
//! Socket options that the ICRC depends on (spec-notes/icrc.md, framing.md):
//! - IPv4: IP_MTU_DISCOVER = IP_PMTUDISC_DO, so that Linux sets DF and, for an unconnected
//!   socket, an IPv4 identification of 0, which is what the transport's ICRC covers;
//! - IPv6: IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO, and UDP_NO_CHECK6_RX so that datagrams with a
//!   zero UDP checksum (what rxe sends) are accepted.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use mio::unix::SourceFd;
use socket2::SockAddr;

use super::link::{gso_run, GatherRef, GsoKey, InDatagram, Link, OutDatagram, RxBatch};
pub use super::socket::group_socket;
use super::socket::{
    ask_ip_fields, gso_supported, multicast_if_v6, recv_control, roce_socket, set_int_opt,
    set_send_cmsgs, socket_addr, SendControl, TX_CMSG_WORDS, UDP_GRO,
};

/// Most distinct source ports (sockets) a link opens; beyond it QPs share ports.
pub const MAX_SOURCE_PORTS: usize = 1024;
/// Most datagrams one sendmmsg or recvmmsg call carries.
const MMSG_BATCH: usize = 64;
/// Most segments of one GSO send (UDP_MAX_SEGMENTS was 64 before Linux 6.9).
const GSO_MAX_SEGMENTS: usize = 64;
/// Room for the control messages of one received datagram, in u64s so that it is aligned for
/// a cmsghdr: UDP_GRO's segment size, the TTL and the TOS (each CMSG_SPACE(4) = 24 bytes on
/// 64-bit Linux, the TOS byte included).
const CMSG_WORDS: usize = 12;
/// A link over UDP sockets.
#[derive(Debug)]
pub struct UdpLink {
    local: SocketAddr,
    rx: mio::net::UdpSocket,
    tx: HashMap<u16, UdpSocket>,
    /// Where transmit sockets are registered for writability, once `register` was called.
    registry: Option<(mio::Registry, mio::Token)>,
    /// Destination addresses of a sendmmsg batch, kept to reuse their allocation.
    names: Vec<SockAddr>,
    /// Most datagrams per GSO send; 1 when the kernel lacks UDP GSO.
    gso_segments: usize,
    /// Whether the engine may hand over payloads to gather from their regions
    /// ([`UdpLink::enable_gather`]).
    gather: bool,
    /// The multicast groups received, each from its own socket (`group_socket`).
    groups: Vec<(IpAddr, mio::net::UdpSocket)>,
    /// IPv6: the device interface's index, for every source-port socket's multicast
    /// ([`multicast_if_v6`]).
    mcast_if_v6: Option<u32>,
    /// The arrays of one recvmmsg, kept between calls.
    rx_scratch: Box<RecvScratch>,
}

/// The headers, addresses, iovecs and control buffers of one `recvmmsg`, kept between calls so
/// that a call sets only the entries it uses and zeroes nothing.
struct RecvScratch {
    names: [std::mem::MaybeUninit<libc::sockaddr_storage>; MMSG_BATCH],
    iovs: [libc::iovec; MMSG_BATCH],
    hdrs: [libc::mmsghdr; MMSG_BATCH],
    cmsgs: [[u64; CMSG_WORDS]; MMSG_BATCH],
    /// The receive buffer's free-space start (as an address) and slot length that the first
    /// `set` entries were set up for.
    base: usize,
    slot: usize,
    set: usize,
}

/// The room given for a datagram's source address and control messages.
const SOCKADDR_ROOM: libc::socklen_t =
    std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
const CMSG_ROOM: usize = std::mem::size_of::<[u64; CMSG_WORDS]>();

// SAFETY: the raw pointers in `iovs` and `hdrs` are never dereferenced by Rust code, only
// handed to the kernel by `recv_many`, which points them into this same box (which does not
// move) and at the receive batch of the call, setting them up again whenever that batch's layout
// differs from the one they were made for. Nothing in the scratch is shared; the link that owns
// it is used by one thread at a time.
unsafe impl Send for RecvScratch {}

impl std::fmt::Debug for RecvScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvScratch").finish_non_exhaustive()
    }
}

impl RecvScratch {
    fn new() -> Box<RecvScratch> {
        // SAFETY: all-zero bytes are a valid value of every field: null pointers and zero
        // lengths in the iovecs and headers, zero words, and uninitialised addresses.
        Box::new(unsafe { std::mem::zeroed::<RecvScratch>() })
    }

    /// Sets up the first `want` headers to receive into the `slot`-byte slots of `bufs`, one
    /// datagram each, with full room for its address and control messages.
    ///
    /// The entries stay set up between calls for the same buffer layout (the device's own
    /// socket always receives into a cleared batch, so its layout never changes); a call
    /// gives back the room of the address and control buffers (lengths the kernel
    /// overwrites) and sets up the entries not yet set for this layout. Building all 64
    /// headers afresh cost more than the call itself when at most one datagram is waiting,
    /// which is every call of a busy-polling ping-pong.
    fn prepare(&mut self, bufs: &mut [u8], slot: usize, want: usize) {
        let base = bufs.as_mut_ptr() as usize;
        if base != self.base || slot != self.slot {
            self.base = base;
            self.slot = slot;
            self.set = 0;
        }
        let RecvScratch {
            names,
            iovs,
            hdrs,
            cmsgs,
            set,
            ..
        } = self;
        for h in &mut hdrs[..(*set).min(want)] {
            h.msg_hdr.msg_namelen = SOCKADDR_ROOM;
            h.msg_hdr.msg_controllen = CMSG_ROOM;
        }
        for i in *set..want {
            iovs[i] = libc::iovec {
                iov_base: bufs[i * slot..].as_mut_ptr().cast(),
                iov_len: slot,
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = names[i].as_mut_ptr().cast();
            h.msg_namelen = SOCKADDR_ROOM;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = cmsgs[i].as_mut_ptr().cast();
            h.msg_controllen = CMSG_ROOM;
        }
        *set = (*set).max(want);
    }
}

impl UdpLink {
    /// Binds the receiving socket to `local` (an address of this machine and the RoCEv2 port).
    pub fn bind(local: SocketAddr) -> io::Result<UdpLink> {
        Self::bind_with(local, false)
    }

    /// [`bind`](Self::bind) with SO_REUSEPORT, so that other processes of the same user can
    /// bind the address too: a member of a shared device's group (driver/group.rs).
    pub fn bind_shared(local: SocketAddr) -> io::Result<UdpLink> {
        Self::bind_with(local, true)
    }

    fn bind_with(local: SocketAddr, reuse_port: bool) -> io::Result<UdpLink> {
        let mcast_if_v6 = multicast_if_v6(local);
        let s = roce_socket(local, mcast_if_v6, reuse_port)?;
        ask_ip_fields(&s, local.is_ipv4())?;
        let std_sock: UdpSocket = s.into();
        let gso = gso_supported(&std_sock);
        let local = std_sock.local_addr()?;
        Ok(UdpLink {
            local,
            rx: mio::net::UdpSocket::from_std(std_sock),
            tx: HashMap::new(),
            registry: None,
            names: Vec::with_capacity(MMSG_BATCH),
            gso_segments: if gso { GSO_MAX_SEGMENTS } else { 1 },
            gather: false,
            groups: Vec::new(),
            mcast_if_v6,
            rx_scratch: RecvScratch::new(),
        })
    }

    /// The receiving socket's descriptor (fork.rs keeps it from fork children).
    pub fn rx_fd(&self) -> i32 {
        self.rx.as_raw_fd()
    }

    /// Sends `ds` (all from one source port) with sendmmsg, each GSO run (see [`gso_run`])
    /// as one message; returns how many went before the first error, and the error.
    /// `gathers` is empty, or says for each datagram which bytes to insert from a region:
    /// each datagram is then up to three iovecs (its bytes before them, them, its bytes
    /// after), so that the kernel copies the payload straight out of the region.
    fn send_run(
        &mut self,
        ds: &[OutDatagram],
        gathers: &[Option<GatherRef>],
    ) -> (usize, Option<io::Error>) {
        let port = match self.prepare_source_port(ds[0].src_port) {
            Ok(p) => p,
            Err(e) => return (0, Some(e)),
        };
        let Some(sock) = self.tx.get(&port) else {
            return (0, Some(io::Error::other("source port not bound")));
        };
        let fd = sock.as_raw_fd();
        let gather = |i: usize| gathers.get(i).copied().flatten();
        // A datagram's GSO key, its length counting gathered bytes.
        let key = |i: usize| GsoKey {
            len: ds[i].payload.len() + gather(i).map_or(0, |g| g.len),
            ..ds[i].gso_key()
        };
        let mut sent = 0;
        while sent < ds.len() {
            let rest = sent;
            let (msgs, nm) = plan_messages(ds.len() - rest, self.gso_segments, |i| key(rest + i));
            let msgs = &msgs[..nm];
            self.names.clear();
            self.names
                .extend(msgs.iter().map(|m| SockAddr::from(ds[rest + m.first].dst)));
            // Only the entries used are initialised: zeroing these arrays whole (11 KiB) was
            // a memset per call that cost as much as the rest of the function.
            let mut iovs =
                [const { std::mem::MaybeUninit::<libc::iovec>::uninit() }; 3 * MMSG_BATCH];
            let mut hdrs = [const { std::mem::MaybeUninit::<libc::mmsghdr>::uninit() }; MMSG_BATCH];
            let mut cmsgs =
                [const { std::mem::MaybeUninit::<[u64; TX_CMSG_WORDS]>::uninit() }; MMSG_BATCH];
            let bounds = fill_iovecs(&ds[rest..], |i| gather(rest + i), msgs, &mut iovs);
            let iov_base = iovs.as_mut_ptr().cast::<libc::iovec>();
            self.fill_headers(&ds[rest..], msgs, &bounds, iov_base, &mut hdrs, &mut cmsgs);
            // SAFETY: `fd` is the open socket of `sock`; each of the `nm` headers (the ones
            // initialised) points at its own initialised iovecs, whose buffers are payloads
            // borrowed for the call or region bytes the caller keeps pinned across it (which
            // the kernel only reads), a live socket address of the length given and either
            // no control buffer or a live one that `set_send_cmsgs` filled in.
            let rc = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
                    nm as libc::c_uint,
                    0,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                let gso_refused = matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP)
                );
                if msgs[0].run > 1 && gso_refused {
                    // This route cannot do GSO: send one by one from now on. The run was
                    // sealed for GSO identifications; a peer that checks the ICRC over the
                    // real IPv4 header drops its later packets, and retransmission recovers.
                    self.gso_segments = 1;
                    continue;
                }
                return (sent, Some(e));
            }
            // sendmmsg returns the error of the first message when that one fails; a later
            // failure shows up as a short count and is reported by the next call.
            sent += msgs[..rc as usize].iter().map(|m| m.run).sum::<usize>();
        }
        (sent, None)
    }

    /// Fills the first `msgs.len()` message headers of a sendmmsg call: each message's
    /// destination (`self.names`), its iovecs (`bounds[m]..bounds[m + 1]` of those at
    /// `iov_base`) and its control messages (GSO segment size, TOS or traffic class, hop
    /// limit). `ds` starts at the first datagram of the call.
    fn fill_headers(
        &self,
        ds: &[OutDatagram],
        msgs: &[TxMessage],
        bounds: &[usize; MMSG_BATCH + 1],
        iov_base: *mut libc::iovec,
        hdrs: &mut [std::mem::MaybeUninit<libc::mmsghdr>; MMSG_BATCH],
        cmsgs: &mut [std::mem::MaybeUninit<[u64; TX_CMSG_WORDS]>; MMSG_BATCH],
    ) {
        for (m, msg) in msgs.iter().enumerate() {
            // SAFETY: all-zero bytes are a valid (empty) mmsghdr.
            let hdr = hdrs[m].write(unsafe { std::mem::zeroed() });
            let h = &mut hdr.msg_hdr;
            h.msg_name = self.names[m].as_ptr() as *mut libc::c_void;
            h.msg_namelen = self.names[m].len();
            // In bounds: bounds[m] <= the iovecs filled <= 3 * MMSG_BATCH.
            h.msg_iov = iov_base.wrapping_add(bounds[m]);
            h.msg_iovlen = bounds[m + 1] - bounds[m];
            let d = &ds[msg.first];
            let control = SendControl {
                segment: msg.segment,
                ipv4: d.dst.is_ipv4(),
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            };
            set_send_cmsgs(h, cmsgs[m].write([0; TX_CMSG_WORDS]), control);
        }
    }

    fn watch_writable(&self, sock: &UdpSocket) -> io::Result<()> {
        if let Some((registry, token)) = &self.registry {
            registry.register(
                &mut SourceFd(&sock.as_raw_fd()),
                *token,
                mio::Interest::WRITABLE,
            )?;
        }
        Ok(())
    }

    /// Turns UDP GRO on for the receiving socket, if the kernel has it; returns whether it is
    /// on. Only for a link that is received from with `recv_batch` (see the module comment).
    pub fn enable_gro(&mut self) -> bool {
        let s = socket2::SockRef::from(&self.rx);
        set_int_opt(&s, libc::SOL_UDP, UDP_GRO, 1).is_ok()
    }

    /// Lets the engine send RC payloads straight from their regions (sendmmsg iovecs that
    /// point into them; `Link::send_gathered`) instead of copies in its transmit batch. Off
    /// by default: on the machine measured it cost more CPU than the copy (BENCHMARKS.md,
    /// issue #23); `SOFTROCE_GATHER=1` turns it on for a device (`driver::open`).
    pub fn enable_gather(&mut self) {
        self.gather = true;
    }

    /// Sends every packet as its own datagram, even where the kernel offers UDP GSO.
    pub fn disable_gso(&mut self) {
        self.gso_segments = 1;
    }

    /// Source ports bound so far.
    pub fn source_ports(&self) -> usize {
        self.tx.len()
    }

    /// Receives one datagram from socket `fd`, which receives what is sent to `dst`, without
    /// blocking; `Ok(None)` when none is ready.
    fn recv_one(fd: RawFd, dst: SocketAddr, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        loop {
            let mut name = std::mem::MaybeUninit::<libc::sockaddr_storage>::uninit();
            let mut control = [0u64; CMSG_WORDS];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: all-zero bytes are a valid (empty) msghdr.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = name.as_mut_ptr().cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iov;
            h.msg_iovlen = 1;
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = std::mem::size_of_val(&control);
            // SAFETY: `fd` is an open socket of the link; `h` points at a live iovec over `buf`, a
            // live sockaddr_storage and a live control buffer whose sizes are given;
            // MSG_DONTWAIT keeps the call from blocking.
            let rc = unsafe { libc::recvmsg(fd, &mut h, libc::MSG_DONTWAIT) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    // ICMP errors reported on the socket (port unreachable): not a datagram.
                    io::ErrorKind::ConnectionRefused => Ok(None),
                    _ => Err(e),
                };
            }
            // SAFETY: the kernel wrote msg_namelen bytes of the address into `name`.
            let Some(src) = (unsafe { socket_addr(name.as_ptr(), h.msg_namelen) }) else {
                // Not IPv4 or IPv6 (cannot happen on these sockets): skip it.
                continue;
            };
            let c = recv_control(&h);
            return Ok(Some(InDatagram {
                len: rc as usize,
                src,
                dst,
                hop_limit: c.hop_limit,
                traffic_class: c.traffic_class,
            }));
        }
    }

    /// Receives up to `batch.free_slot_count()` ready datagrams from socket `fd`, which
    /// receives what is sent to `dst`, into `batch`'s free slots, in one call.
    fn recv_many(
        fd: RawFd,
        dst: SocketAddr,
        batch: &mut RxBatch,
        scratch: &mut RecvScratch,
    ) -> io::Result<()> {
        let want = batch.free_slot_count().min(MMSG_BATCH);
        let (slot, bufs) = batch.free_slots();
        scratch.prepare(bufs, slot, want);
        // SAFETY: `fd` is an open socket of the link; each of the first `want` headers (set up
        // for this layout: the same `bufs` start and slot length) points at a live iovec over
        // its own disjoint `slot`-byte slot of `bufs` (which holds at least `want` free
        // slots), a live sockaddr_storage and a live control buffer, all in the boxed scratch,
        // with their full sizes as room; the kernel writes the addresses before they are read;
        // MSG_DONTWAIT keeps the call from blocking.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                scratch.hdrs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
                // ICMP errors reported on the socket (port unreachable): not a datagram.
                io::ErrorKind::ConnectionRefused => Ok(()),
                _ => Err(e),
            };
        }
        for h in &scratch.hdrs[..rc as usize] {
            record_received(h, dst, batch);
        }
        Ok(())
    }
}

/// Records a datagram that recvmmsg received through `h` (sent to `dst`) in the next slot of
/// `batch`, split into its segments if it came coalesced by GRO.
fn record_received(h: &libc::mmsghdr, dst: SocketAddr, batch: &mut RxBatch) {
    // SAFETY: msg_name points at names[i], a sockaddr_storage into which the kernel
    // wrote msg_namelen bytes (at most its size, which was given as the room).
    let src = unsafe {
        socket_addr(
            h.msg_hdr.msg_name.cast::<libc::sockaddr_storage>(),
            h.msg_hdr.msg_namelen,
        )
    };
    // A datagram longer than the slot is no RoCE packet: it is kept empty so that the
    // engine counts it as bad instead of parsing a truncated copy. Every datagram is
    // recorded, even one without a usable address, so that record i stays slot i.
    let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
    let d = InDatagram {
        len: if truncated || src.is_none() {
            0
        } else {
            h.msg_len as usize
        },
        src: src.unwrap_or(dst),
        dst,
        hop_limit: 0,
        traffic_class: 0,
    };
    let c = recv_control(&h.msg_hdr);
    let d = InDatagram {
        hop_limit: c.hop_limit,
        traffic_class: c.traffic_class,
        ..d
    };
    match c.segment {
        Some(seg) => batch.push_split(d, seg),
        None => batch.push(d),
    }
}

impl Link for UdpLink {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
        if self.tx.contains_key(&wanted) {
            return Ok(wanted);
        }
        if self.tx.len() >= MAX_SOURCE_PORTS {
            // Share an existing port: deterministic, so a QP keeps the one it got.
            let mut ports: Vec<u16> = self.tx.keys().copied().collect();
            ports.sort_unstable();
            return Ok(ports[wanted as usize % ports.len()]);
        }
        // Try the wanted port, then its neighbours in the dynamic range.
        let mut last_err = None;
        for i in 0..64u16 {
            let port = 0xC000 | (wanted.wrapping_add(i) & 0x3FFF);
            if let Some(_s) = self.tx.get(&port) {
                return Ok(port);
            }
            match roce_socket(
                SocketAddr::new(self.local.ip(), port),
                self.mcast_if_v6,
                false,
            ) {
                Ok(s) => {
                    let s: UdpSocket = s.into();
                    self.watch_writable(&s)?;
                    self.tx.insert(port, s);
                    return Ok(port);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no source port available")))
    }

    fn send(&mut self, _now: Instant, d: &OutDatagram) -> io::Result<()> {
        // One sendmsg with the datagram's TTL and TOS, as a batch of one.
        match self.send_run(std::slice::from_ref(d), &[]) {
            (_, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        let got = Self::recv_one(self.rx.as_raw_fd(), self.local, buf)?;
        if got.is_some() {
            return Ok(got);
        }
        for (group, sock) in &self.groups {
            let dst = SocketAddr::new(*group, self.local.port());
            if let Ok(Some(d)) = Self::recv_one(sock.as_raw_fd(), dst, buf) {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        registry.register(&mut self.rx, token, mio::Interest::READABLE)?;
        self.registry = Some((registry.try_clone()?, token));
        for s in self.tx.values() {
            self.watch_writable(s)?;
        }
        for (_, s) in &mut self.groups {
            registry.register(s, token, mio::Interest::READABLE)?;
        }
        Ok(())
    }

    fn send_batch(&mut self, _now: Instant, ds: &[OutDatagram]) -> (usize, Option<io::Error>) {
        let mut done = 0;
        while done < ds.len() {
            let port = ds[done].src_port;
            let run = ds[done..].iter().take_while(|d| d.src_port == port).count();
            let (n, err) = self.send_run(&ds[done..done + run], &[]);
            done += n;
            if err.is_some() {
                return (done, err);
            }
        }
        (done, None)
    }

    fn gso_max_segments(&self) -> usize {
        self.gso_segments
    }

    fn gathers(&self) -> bool {
        self.gather
    }

    fn send_gathered(
        &mut self,
        _now: Instant,
        ds: &[OutDatagram],
        gathers: &[Option<GatherRef>],
    ) -> (usize, Option<io::Error>) {
        let mut done = 0;
        while done < ds.len() {
            let port = ds[done].src_port;
            let run = ds[done..].iter().take_while(|d| d.src_port == port).count();
            let (n, err) = self.send_run(
                &ds[done..done + run],
                gathers.get(done..done + run).unwrap_or(&[]),
            );
            done += n;
            if err.is_some() {
                return (done, err);
            }
        }
        (done, None)
    }

    fn recv_batch(&mut self, _now: Instant, batch: &mut RxBatch) -> io::Result<()> {
        batch.clear();
        Self::recv_many(self.rx.as_raw_fd(), self.local, batch, &mut self.rx_scratch)?;
        for (group, sock) in &self.groups {
            if batch.free_slot_count() == 0 {
                break;
            }
            // A group's socket fails alone (the device's datagrams are already in the batch).
            let dst = SocketAddr::new(*group, self.local.port());
            let _ = Self::recv_many(sock.as_raw_fd(), dst, batch, &mut self.rx_scratch);
        }
        Ok(())
    }

    fn join_group(&mut self, group: IpAddr, socket: UdpSocket) -> io::Result<()> {
        let mut sock = mio::net::UdpSocket::from_std(socket);
        if let Some((registry, token)) = &self.registry {
            registry.register(&mut sock, *token, mio::Interest::READABLE)?;
        }
        self.leave_group(group);
        self.groups.push((group, sock));
        Ok(())
    }

    fn leave_group(&mut self, group: IpAddr) {
        if let Some(i) = self.groups.iter().position(|(g, _)| *g == group) {
            let (_, mut sock) = self.groups.swap_remove(i);
            if let Some((registry, _)) = &self.registry {
                let _ = registry.deregister(&mut sock);
            }
        }
    }
}

/// One message of a sendmmsg call: a GSO run of datagrams.
#[derive(Debug, Clone, Copy, Default)]
struct TxMessage {
    /// Its first datagram, counted from the call's first.
    first: usize,
    /// Datagrams in the run.
    run: usize,
    /// The GSO segment size, for a run of more than one.
    segment: Option<u16>,
}

/// Groups the next `left` datagrams (GSO keys `key(0..left)`) into at most `MMSG_BATCH`
/// messages of GSO runs of at most `max_segments`, with at most `MMSG_BATCH` datagrams in all
/// (a run is never split across calls); returns the messages and how many there are.
fn plan_messages(
    left: usize,
    max_segments: usize,
    key: impl Fn(usize) -> GsoKey,
) -> ([TxMessage; MMSG_BATCH], usize) {
    let mut msgs = [TxMessage::default(); MMSG_BATCH];
    let (mut nm, mut nd) = (0, 0);
    while nd < left && nm < MMSG_BATCH {
        let run = gso_run(left - nd, max_segments, |i| key(nd + i));
        if nd + run > MMSG_BATCH {
            break;
        }
        msgs[nm] = TxMessage {
            first: nd,
            run,
            segment: (run > 1).then_some(key(nd).len as u16),
        };
        nm += 1;
        nd += run;
    }
    (msgs, nm)
}

/// Writes the iovecs of `msgs` into `iovs`: per datagram of `ds` (which starts at the call's
/// first) its bytes, or with `gather(i)` its bytes before the gathered ones, those, and its
/// bytes after. Returns where each message's iovecs start, and after the last, where they end.
fn fill_iovecs(
    ds: &[OutDatagram],
    gather: impl Fn(usize) -> Option<GatherRef>,
    msgs: &[TxMessage],
    iovs: &mut [std::mem::MaybeUninit<libc::iovec>; 3 * MMSG_BATCH],
) -> [usize; MMSG_BATCH + 1] {
    let mut bounds = [0usize; MMSG_BATCH + 1];
    let mut niov = 0;
    for (m, msg) in msgs.iter().enumerate() {
        bounds[m] = niov;
        for (i, d) in ds.iter().enumerate().skip(msg.first).take(msg.run) {
            let p = d.payload;
            let mut push = |base: *const u8, len: usize| {
                if len > 0 {
                    iovs[niov].write(libc::iovec {
                        iov_base: base as *mut libc::c_void,
                        iov_len: len,
                    });
                    niov += 1;
                }
            };
            match gather(i) {
                Some(g) => {
                    push(p.as_ptr(), g.at);
                    push(g.ptr, g.len);
                    push(p[g.at..].as_ptr(), p.len() - g.at);
                }
                None => push(p.as_ptr(), p.len()),
            }
        }
    }
    bounds[msgs.len()] = niov;
    bounds
}

#[cfg(test)]
mod tests;
