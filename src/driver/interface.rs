//! The network interface a device's address is on: its index (for IPv6 multicast) and its
//! MTU, from which the port's active MTU follows as rxe derives it from its netdev's.

use std::ffi::CString;
use std::io;
use std::net::IpAddr;

use crate::ib::Mtu;

/// A network interface of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`lo`, `eth0`, ...).
    pub name: CString,
    /// Its index.
    pub index: u32,
    /// It is a loopback interface (IFF_LOOPBACK): what is sent on it is received as sent,
    /// never coalesced by a NIC's receive offload (GRO).
    pub loopback: bool,
}

/// The interface that has address `ip`, or for a loopback address the one whose subnet holds
/// it (127.0.0.2 is on `lo`, which has 127.0.0.1/8, and answers for all of it).
pub fn interface_of(ip: IpAddr) -> io::Result<Interface> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`, which freeifaddrs frees below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (mut exact, mut subnet) = (None, None);
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until freeifaddrs; its
        // ifa_addr and ifa_netmask are null or sockaddrs of the family ifa_addr names, and
        // ifa_name a NUL-terminated string, copied before the list is freed.
        unsafe {
            let (a, m) = ((*p).ifa_addr, (*p).ifa_netmask);
            if let Some(addr) = ip_of(a) {
                let name = std::ffi::CStr::from_ptr((*p).ifa_name).to_owned();
                let name = (name, (*p).ifa_flags & libc::IFF_LOOPBACK as u32 != 0);
                if addr == ip {
                    exact.get_or_insert(name);
                } else if ip.is_loopback()
                    && ip_of(m).is_some_and(|mask| same_subnet(addr, ip, mask))
                {
                    subnet.get_or_insert(name);
                }
            }
            p = (*p).ifa_next;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    let (name, loopback) = exact.or(subnet).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("no interface has {ip}"),
        )
    })?;
    // SAFETY: `name` is a NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Interface {
        name,
        index,
        loopback,
    })
}

/// The address in a sockaddr of getifaddrs' list, if it is IPv4 or IPv6.
///
/// # Safety
/// `a` is null or points at a sockaddr of the family it names.
unsafe fn ip_of(a: *const libc::sockaddr) -> Option<IpAddr> {
    if a.is_null() {
        return None;
    }
    // SAFETY: by the caller's promise, per family.
    unsafe {
        match i32::from((*a).sa_family) {
            libc::AF_INET => {
                let a4 = &*(a as *const libc::sockaddr_in);
                Some(IpAddr::from(u32::from_be(a4.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 => {
                let a6 = &*(a as *const libc::sockaddr_in6);
                Some(IpAddr::from(a6.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

/// Whether `a` and `b` agree on every bit of `mask` (all three of one family).
fn same_subnet(a: IpAddr, b: IpAddr, mask: IpAddr) -> bool {
    match (a, b, mask) {
        (IpAddr::V4(a), IpAddr::V4(b), IpAddr::V4(m)) => {
            let m = u32::from(m);
            m != 0 && u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(m)) => {
            let m = u128::from(m);
            m != 0 && u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// The MTU of the interface address `ip` is on.
pub fn link_mtu(ip: IpAddr) -> io::Result<u32> {
    let iface = interface_of(ip)?;
    let fd = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    // SAFETY: all-zero bytes are a valid ifreq.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.name.as_bytes();
    if name.len() >= req.ifr_name.len() {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name in `req` and writes the MTU into its
    // union; `req` is a live ifreq and the socket is open for the call.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::SIOCGIFMTU,
            &mut req,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled in the union's MTU.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// The port's active MTU on a link of MTU `link_mtu` bytes, as rxe sets it from its netdev's
/// (rxe_set_mtu: the link MTU less RXE_MAX_HDR_LENGTH, 80 bytes, rounded down to an IB MTU,
/// 256 at least, 4096 at most): 1024 on a 1500-byte Ethernet, 4096 on 9000 and on loopback.
pub fn active_mtu_of_link(link_mtu: u32) -> Mtu {
    match link_mtu.saturating_sub(80) {
        0..=511 => Mtu::Mtu256,
        512..=1023 => Mtu::Mtu512,
        1024..=2047 => Mtu::Mtu1024,
        2048..=4095 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// The active MTU a device at `ip` has by default: its interface's, by rxe's rule, or 1024
/// (rxe's on a 1500-byte link) when the interface is not found.
pub fn default_active_mtu(ip: IpAddr) -> Mtu {
    link_mtu(ip).map_or(Mtu::Mtu1024, active_mtu_of_link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_derives_the_active_mtu_from_the_link_mtu() {
        assert_eq!(active_mtu_of_link(1500), Mtu::Mtu1024);
        assert_eq!(active_mtu_of_link(9000), Mtu::Mtu4096);
        assert_eq!(active_mtu_of_link(65536), Mtu::Mtu4096);
        assert_eq!(active_mtu_of_link(4176), Mtu::Mtu4096);
        assert_eq!(active_mtu_of_link(4175), Mtu::Mtu2048);
        assert_eq!(active_mtu_of_link(1103), Mtu::Mtu512);
        assert_eq!(active_mtu_of_link(0), Mtu::Mtu256);
    }

    #[test]
    fn loopback_addresses_are_on_lo_by_its_subnet() {
        let lo = interface_of("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(lo.name.to_str().unwrap(), "lo");
        assert_eq!(interface_of("127.0.45.6".parse().unwrap()).unwrap(), lo);
        assert_eq!(link_mtu("127.0.0.9".parse().unwrap()).unwrap(), 65536);
        assert!(interface_of("198.51.100.200".parse().unwrap()).is_err());
    }
}
