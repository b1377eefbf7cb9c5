//! The UDP sockets of a link: how they are made (the options the ICRC and the engine depend
//! on, see udp.rs), and the control messages of their sends and receives (GSO and GRO segment
//! sizes, TTL or hop limit, TOS or traffic class).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockAddr, SockAddrStorage, Socket, Type};

/// linux/udp.h UDP_NO_CHECK6_RX (not exported by every libc crate version).
pub(super) const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Receive buffer asked for (the kernel counts about twice the payload per packet).
pub(super) const RECV_BUFFER: libc::c_int = 64 << 20;

/// linux/udp.h UDP_GRO (receive coalesced datagrams; a socket option and a control message).
pub(super) const UDP_GRO: libc::c_int = 104;

/// linux/udp.h UDP_SEGMENT (GSO segment size, a socket option and a control message).
pub(super) const UDP_SEGMENT: libc::c_int = 103;

/// Room for the control messages of one send: UDP_SEGMENT, and the TTL and TOS (each an int,
/// CMSG_SPACE(4) = 24 bytes on 64-bit Linux), in u64s for alignment.
pub(super) const TX_CMSG_WORDS: usize = 12;

pub(super) fn set_int_opt(
    sock: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `sock` is a valid open socket for the duration of the call; the option value is a
    // live c_int on the stack and its exact size is passed, as setsockopt(2) requires.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The interface index IPv6 multicast leaves through for a device at `addr` (its own
/// interface's), found once per device: every source-port socket needs it, and finding it reads
/// the machine's interface list. `None` for IPv4 (an IPv4 socket is given its address) or when
/// the interface is not found.
pub(super) fn multicast_if_v6(addr: SocketAddr) -> Option<u32> {
    match addr.ip() {
        IpAddr::V6(a) if !a.is_unspecified() => super::interface::interface_of(addr.ip())
            .ok()
            .map(|i| i.index),
        _ => None,
    }
}

/// A RoCE socket bound to `addr`; `mcast_if_v6` is [`multicast_if_v6`] of the device.
pub(super) fn roce_socket(
    addr: SocketAddr,
    mcast_if_v6: Option<u32>,
    reuse_port: bool,
) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv4() {
        set_int_opt(
            &s,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
    } else {
        s.set_only_v6(true)?;
        set_int_opt(
            &s,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
        set_int_opt(&s, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
    }
    // Large buffers absorb bursts: a window of 4 KiB packets, and READ responses, which no
    // window bounds (a 1 GiB READ is 262,144 responses sent as fast as GSO lets the peer)
    // while this end's engine may be descheduled for milliseconds on a busy machine. The
    // kernel caps SO_RCVBUF at net.core.rmem_max; a process allowed to (CAP_NET_ADMIN) sets
    // the size past that cap with SO_RCVBUFFORCE.
    if set_int_opt(&s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RECV_BUFFER).is_err() {
        let _ = s.set_recv_buffer_size(RECV_BUFFER as usize);
    }
    let _ = s.set_send_buffer_size(4 << 20);
    // A datagram to a multicast group leaves through the device's own interface, never the
    // one the route to the group names (a default route's: the machine's network); IPv6 by
    // the interface's index. Not fatal: an IPv4 socket bound to a local address already sends
    // multicast through that address's interface (Linux's output route for a multicast
    // destination with a source and no interface), and a device that cannot set it still
    // serves unicast.
    match addr.ip() {
        IpAddr::V4(a) if !a.is_unspecified() => {
            let _ = s.set_multicast_if_v4(&a);
        }
        IpAddr::V6(_) => {
            if let Some(index) = mcast_if_v6 {
                let _ = s.set_multicast_if_v6(index);
            }
        }
        _ => {}
    }
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

/// A UDP socket on `addr` that joins the address's SO_REUSEPORT group (driver/group.rs), as
/// a shared device's member does, with nothing else set: the group's layout probes use it.
pub(super) fn reuseport_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The address a receive call wrote at `ss` (`len` bytes; the rest of the storage may be
/// uninitialised), if it is IPv4 or IPv6: socket2's [`SockAddr::as_socket`] reads it. The
/// `len` bytes are copied into a zeroed storage first, so that a short address reads as zeros
/// (no family: `None`), never as uninitialised bytes.
///
/// # Safety
/// `ss` must point at a sockaddr_storage whose first `len` bytes (at most its size) are
/// initialised.
pub(super) unsafe fn socket_addr(
    ss: *const libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: sockaddr_storage is one of this platform's sockaddr types, as view_as requires.
    let dst: *mut libc::sockaddr_storage = unsafe { storage.view_as::<libc::sockaddr_storage>() };
    // SAFETY: the caller guarantees `len` initialised bytes at `ss`; `dst` is a distinct
    // sockaddr_storage, at least `len` bytes long.
    unsafe { std::ptr::copy_nonoverlapping(ss.cast::<u8>(), dst.cast::<u8>(), len) };
    // SAFETY: the storage holds what the kernel wrote for this family, `len` bytes of it, and
    // zeros after; as_socket reads a sockaddr_in or sockaddr_in6 only for their family.
    let addr = unsafe { SockAddr::new(storage, len as libc::socklen_t) };
    addr.as_socket()
}

/// What the kernel said of a received datagram besides its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RecvControl {
    /// The segment size of a datagram the kernel coalesced (UDP_GRO), if it did.
    pub(super) segment: Option<usize>,
    /// The IPv4 TTL or IPv6 hop limit it arrived with (0: not reported).
    pub(super) hop_limit: u8,
    /// The IPv4 TOS or IPv6 traffic class it arrived with.
    pub(super) traffic_class: u8,
}

/// Reads the control messages of a received datagram: UDP_GRO, and the TTL and TOS that
/// IP_RECVTTL/IP_RECVTOS (IPV6_RECVHOPLIMIT/IPV6_RECVTCLASS) ask the kernel for.
pub(super) fn recv_control(h: &libc::msghdr) -> RecvControl {
    let mut r = RecvControl::default();
    // SAFETY: `h` is a header the kernel filled in: msg_control/msg_controllen describe the
    // control messages it wrote (or none), which the CMSG macros walk within those bounds;
    // each value is read with its own length (one byte for IPv4's TOS, an int otherwise).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let one_byte = (*c).cmsg_len as usize == libc::CMSG_LEN(1) as usize;
            let int = || {
                if one_byte {
                    libc::c_int::from(*data)
                } else {
                    std::ptr::read_unaligned(data.cast::<libc::c_int>())
                }
            };
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, UDP_GRO) => {
                    r.segment = usize::try_from(int()).ok().filter(|&s| s > 0)
                }
                (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                    r.hop_limit = int() as u8
                }
                (libc::IPPROTO_IP, libc::IP_TOS) | (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    r.traffic_class = int() as u8
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    r
}

/// Whether the kernel offers UDP GSO on this socket's family (Linux 4.18 and later).
pub(super) fn gso_supported(sock: &UdpSocket) -> bool {
    let s = socket2::SockRef::from(sock);
    set_int_opt(&s, libc::SOL_UDP, UDP_SEGMENT, 0).is_ok()
}

/// What one send's control messages say: the GSO segment size, and the IP header's TTL and
/// TOS where they differ from the socket's defaults (hop limit 0 and traffic class 0 leave
/// the kernel's 64 and 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SendControl {
    pub(super) segment: Option<u16>,
    pub(super) ipv4: bool,
    pub(super) hop_limit: u8,
    pub(super) traffic_class: u8,
}

impl SendControl {
    /// The control messages as (level, type, int value): UDP_SEGMENT carries a u16, written
    /// apart by [`set_send_cmsgs`].
    fn ip_fields(&self) -> impl Iterator<Item = (libc::c_int, libc::c_int, libc::c_int)> {
        let (level, ttl, tos) = if self.ipv4 {
            (libc::IPPROTO_IP, libc::IP_TTL, libc::IP_TOS)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT, libc::IPV6_TCLASS)
        };
        let ttl = (self.hop_limit != 0).then_some((level, ttl, self.hop_limit.into()));
        let tos = (self.traffic_class != 0).then_some((level, tos, self.traffic_class.into()));
        ttl.into_iter().chain(tos)
    }
}

/// Points `h` at `buf` filled with the control messages `c` asks for (none: no control
/// buffer).
pub(super) fn set_send_cmsgs(h: &mut libc::msghdr, buf: &mut [u64; TX_CMSG_WORDS], c: SendControl) {
    let int = std::mem::size_of::<libc::c_int>() as u32;
    let u16_len = std::mem::size_of::<u16>() as u32;
    // SAFETY: CMSG_SPACE only computes sizes.
    let space = unsafe {
        c.segment.map_or(0, |_| libc::CMSG_SPACE(u16_len))
            + c.ip_fields().count() as u32 * libc::CMSG_SPACE(int)
    } as usize;
    if space == 0 {
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        return;
    }
    debug_assert!(space <= std::mem::size_of_val(buf));
    buf.fill(0);
    h.msg_control = buf.as_mut_ptr().cast();
    h.msg_controllen = space;
    // SAFETY: `h` points at `buf`, aligned for a cmsghdr and at least `space` bytes long, the
    // sum of the CMSG_SPACE of the messages written, so CMSG_FIRSTHDR and each CMSG_NXTHDR
    // after a message that is followed by another return a header inside it, with CMSG_DATA
    // room for the value written.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(h);
        if let Some(seg) = c.segment {
            (*cm).cmsg_level = libc::SOL_UDP;
            (*cm).cmsg_type = UDP_SEGMENT;
            (*cm).cmsg_len = libc::CMSG_LEN(u16_len) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), seg);
            cm = libc::CMSG_NXTHDR(h, cm);
        }
        for (level, kind, value) in c.ip_fields() {
            (*cm).cmsg_level = level;
            (*cm).cmsg_type = kind;
            (*cm).cmsg_len = libc::CMSG_LEN(int) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>(), value);
            cm = libc::CMSG_NXTHDR(h, cm);
        }
    }
}

/// Asks the kernel for the TTL and TOS each datagram arrives with, for the GRH area of UD
/// receives and for captures (it reports them as control messages).
pub(super) fn ask_ip_fields(s: &Socket, ipv4: bool) -> io::Result<()> {
    if ipv4 {
        set_int_opt(s, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
        set_int_opt(s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    } else {
        set_int_opt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
        set_int_opt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
    }
}

/// A socket that receives the datagrams sent to `group` on UDP port `port`, on the interface
/// of the local address `local` (IPv4: the interface that has it; IPv6: its index, found
/// among the machine's interfaces). Several sockets, in this process and others, may hold the
/// same group (SO_REUSEADDR): each gets every datagram, as each device attached to a group
/// does. IP_MULTICAST_ALL is off, so the socket hears only the group it joined.
pub fn group_socket(group: IpAddr, port: u16, local: IpAddr) -> io::Result<UdpSocket> {
    let s = match (group, local) {
        (IpAddr::V4(g), IpAddr::V4(l)) => {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_reuse_address(true)?;
            s.set_multicast_all_v4(false)?;
            ask_ip_fields(&s, true)?;
            s.bind(&SocketAddr::new(group, port).into())?;
            s.join_multicast_v4(&g, &l)?;
            s
        }
        (IpAddr::V6(g), IpAddr::V6(l)) => {
            let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_only_v6(true)?;
            s.set_reuse_address(true)?;
            s.set_multicast_all_v6(false)?;
            ask_ip_fields(&s, false)?;
            s.bind(&SocketAddr::new(group, port).into())?;
            s.join_multicast_v6(&g, super::interface::interface_of(IpAddr::V6(l))?.index)?;
            s
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the group and the device address are of different families",
            ))
        }
    };
    s.set_nonblocking(true)?;
    Ok(s.into())
}
