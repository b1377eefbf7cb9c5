//! Which device an address is on: an address's device, the device that routes to a
//! destination, and the loopback addresses a process's device stands in at when another
//! process holds the device's own (spec-notes/librdmacm.md, rule 10).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use super::addr::ports;
use super::device::device_addr;
use crate::objects::cm_hooks;

/// The device whose address `ip` is (its own, the stand-in it took, or the one
/// `SOFTROCE_BIND` names for it): the first such, or None.
pub(super) fn device_of_ip(ip: IpAddr) -> Option<usize> {
    (0..cm_hooks::device_count())
        .find(|&d| device_addr(d).ip() == ip || cm_hooks::nominal_addr(d).ip() == ip)
}

/// The device an identifier with no source address reaches `dst` from, as the kernel's
/// rdma_resolve_addr picks it: the device whose address `dst` is (the kernel's route to a
/// local address has that address as its source), else the one whose address is the source
/// of the host's route to `dst` (what a UDP socket connected there is bound to), else the
/// first.
pub(super) fn route_device(dst: IpAddr) -> usize {
    if let Some(d) = device_of_ip(dst) {
        return d;
    }
    if cm_hooks::device_count() == 1 {
        return 0;
    }
    let any: IpAddr = if dst.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    UdpSocket::bind(SocketAddr::new(any, 0))
        .and_then(|s| {
            // Connecting a UDP socket sends nothing: the kernel only picks the route.
            s.connect(SocketAddr::new(dst, 9))?;
            s.local_addr()
        })
        .ok()
        .and_then(|a| device_of_ip(a.ip()))
        .unwrap_or(0)
}

/// Whether `ip` is an address of this host (binding a UDP socket to it succeeds).
pub(super) fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Before a process's first identifier binds on device `dev`, when devices hold their
/// addresses alone (`SOFTROCE_SHARE=0`): if it is about to connect to that device's own
/// loopback address, and has started no engine and bound no port (so nothing of its own
/// listens there), the listener is another process on the same device, which holds that
/// address's socket. The kernel shares one device among processes;
/// softroce's device is the process's own, so this process's device stands in at an address
/// of its own on loopback, reachable from the other as any peer is (spec-notes/librdmacm.md,
/// rule 10).
pub(super) fn stand_in_to_reach_own_address(dev: usize, dst: IpAddr) {
    if softroce::driver::sharing_enabled() {
        // Both processes are members of the address's group: the listener's REQs reach it
        // there (spec-notes/shared-device.md), with no address of this process's own.
        return;
    }
    let nominal = cm_hooks::nominal_addr(dev);
    let IpAddr::V4(v4) = nominal.ip() else {
        return; // ::1 is IPv6's only loopback address: nowhere else to stand.
    };
    if !v4.is_loopback() || dst != nominal.ip() || !ports().is_empty() {
        return;
    }
    take_stand_in(dev, nominal.port());
}

/// Makes the first free stand-in address on `port` device `dev`'s address in this process;
/// true if one was free and the engine had not bound yet. The candidate must be free; the
/// engine binds it soon after (a process that takes it in between makes that bind fail with
/// EADDRINUSE, as without a stand-in).
fn take_stand_in(dev: usize, port: u16) -> bool {
    stand_in_candidates(std::process::id(), port)
        .into_iter()
        .any(|a| UdpSocket::bind(a).is_ok() && cm_hooks::stand_in(dev, a))
}

/// A UD identifier bound to a loopback IPv4 device address whose socket another process
/// holds: this process's device stands in at a loopback address of its own, and true if it
/// could. The other process is a peer on the same device (mckey's receiver and sender under
/// one `softroce run`, rdma-core's multicast tests fork two members): a UD peer's address
/// is only where its datagrams come from, which every answer follows (spec-notes/librdmacm.md,
/// rule 10).
pub(super) fn stand_in_for_ud(dev: usize) -> bool {
    let nominal = cm_hooks::nominal_addr(dev);
    let IpAddr::V4(v4) = nominal.ip() else {
        return false;
    };
    v4.is_loopback() && take_stand_in(dev, nominal.port())
}

/// Loopback addresses for process `pid`'s device to stand in at, on `port`: 127.128.0.0/9,
/// which the project's tests and tools do not use, numbered by the process (pid_max is at
/// most 2^22), the upper half tried second.
fn stand_in_candidates(pid: u32, port: u16) -> [SocketAddr; 2] {
    let [_, hi, mid, lo] = pid.to_be_bytes();
    let hi = hi & 0x3f;
    [128 + hi, 192 + hi].map(|b| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, b, mid, lo)), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_in_candidates_are_loopback_outside_the_low_range_and_per_process() {
        let a = stand_in_candidates(0x0012_3456, 4791);
        assert_eq!(a[0], "127.146.52.86:4791".parse().unwrap()); // 128 + 0x12
        assert_eq!(a[1], "127.210.52.86:4791".parse().unwrap()); // 192 + 0x12
                                                                 // pid_max is 2^22: the top process number still lands in 127/8.
        let top = stand_in_candidates((1 << 22) - 1, 7);
        assert_eq!(top[1], "127.255.255.255:7".parse().unwrap());
        // Two processes never share a first candidate.
        assert_ne!(
            stand_in_candidates(100, 1)[0],
            stand_in_candidates(101, 1)[0]
        );
    }
}
