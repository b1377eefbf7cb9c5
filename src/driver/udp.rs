//! The link over real UDP sockets.
//!
//! One socket bound to (device address, RoCEv2 port) receives everything: peers always send to
//! port 4791 (or the configured port). Sending uses one socket per UDP source port, because a
//! RoCEv2 QP sends from its own port in 0xC000-0xFFFF (as rxe does, for ECMP entropy) and a
//! user-space program can only choose its source port by binding it.
//!
//! Socket options that the ICRC depends on (spec-notes/icrc.md, framing.md):
//! - IPv4: IP_MTU_DISCOVER = IP_PMTUDISC_DO, so that Linux sets DF and, for an unconnected
//!   socket, an IPv4 identification of 0, which is what the transport's ICRC covers;
//! - IPv6: IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO, and UDP_NO_CHECK6_RX so that datagrams with a
//!   zero UDP checksum (what rxe sends) are accepted.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use super::link::{InDatagram, Link, OutDatagram};

/// Most distinct source ports (sockets) a link opens; beyond it QPs share ports.
pub const MAX_SOURCE_PORTS: usize = 1024;
/// linux/udp.h UDP_NO_CHECK6_RX (not exported by every libc crate version).
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// A link over UDP sockets.
#[derive(Debug)]
pub struct UdpLink {
    local: SocketAddr,
    rx: mio::net::UdpSocket,
    tx: HashMap<u16, UdpSocket>,
}

fn set_int_opt(
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

fn roce_socket(addr: SocketAddr) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
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
    // Large buffers absorb bursts of a window of 4 KiB packets; the kernel caps them at
    // net.core.{r,w}mem_max, which is fine.
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

impl UdpLink {
    /// Binds the receiving socket to `local` (an address of this machine and the RoCEv2 port).
    pub fn bind(local: SocketAddr) -> io::Result<UdpLink> {
        let s = roce_socket(local)?;
        let std_sock: UdpSocket = s.into();
        let local = std_sock.local_addr()?;
        Ok(UdpLink {
            local,
            rx: mio::net::UdpSocket::from_std(std_sock),
            tx: HashMap::new(),
        })
    }

    /// Source ports bound so far.
    pub fn source_ports(&self) -> usize {
        self.tx.len()
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
            match roce_socket(SocketAddr::new(self.local.ip(), port)) {
                Ok(s) => {
                    self.tx.insert(port, s.into());
                    return Ok(port);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no source port available")))
    }

    fn send(&mut self, _now: Instant, d: &OutDatagram) -> io::Result<()> {
        let port = self.prepare_source_port(d.src_port)?;
        let sock = self
            .tx
            .get(&port)
            .ok_or_else(|| io::Error::other("source port not bound"))?;
        sock.send_to(d.payload, d.dst)?;
        Ok(())
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        match self.rx.recv_from(buf) {
            Ok((len, src)) => Ok(Some(InDatagram {
                len,
                src,
                dst: self.local,
            })),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            // ICMP errors reported on the socket (port unreachable): not a datagram.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> io::Result<()> {
        registry.register(&mut self.rx, token, mio::Interest::READABLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_links_on_one_port_different_loopback_addresses() {
        // Port 0: let the kernel pick one for the first, then bind the second to the same.
        let a = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = a.local_addr().port();
        let mut b = match UdpLink::bind(SocketAddr::new("127.0.0.2".parse().unwrap(), port)) {
            Ok(b) => b,
            Err(e) => panic!("binding 127.0.0.2:{port}: {e}"),
        };
        let mut a = a;
        let sport = a.prepare_source_port(0xC123).unwrap();
        a.send(
            Instant::now(),
            &OutDatagram {
                src_port: sport,
                dst: b.local_addr(),
                payload: b"hello",
            },
        )
        .unwrap();
        let mut buf = [0u8; 64];
        let t = Instant::now();
        loop {
            if let Some(d) = b.recv(Instant::now(), &mut buf).unwrap() {
                assert_eq!(&buf[..d.len], b"hello");
                assert_eq!(d.src, SocketAddr::new("127.0.0.1".parse().unwrap(), sport));
                assert_eq!(d.dst, b.local_addr());
                break;
            }
            assert!(t.elapsed().as_secs() < 5, "datagram not received");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Nothing for a: it receives only what is sent to its own address.
        assert_eq!(a.recv(Instant::now(), &mut buf).unwrap(), None);
    }

    #[test]
    fn source_port_falls_back_when_taken() {
        let mut a = UdpLink::bind("127.0.0.3:0".parse().unwrap()).unwrap();
        let blocker = UdpSocket::bind("127.0.0.3:0").unwrap();
        let taken = blocker.local_addr().unwrap().port();
        let wanted = 0xC000 | (taken & 0x3FFF);
        if wanted == taken {
            let got = a.prepare_source_port(wanted).unwrap();
            assert_ne!(got, wanted);
            assert!(got >= 0xC000);
        }
        let p = a.prepare_source_port(0xD000).unwrap();
        assert_eq!(a.prepare_source_port(0xD000).unwrap(), p, "stable");
    }
}
