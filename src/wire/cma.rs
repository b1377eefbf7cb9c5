//! rdma_cm's header at the front of a REQ's private data (Linux `struct cma_hdr` in
//! drivers/infiniband/core/cma.c), 36 bytes, for the IP port spaces (TCP, UDP, IPoIB):
//!
//! ```text
//!  byte 0      1                   2-3           4-19              20-35
//!  version 0 | IP version << 4  | source port | source address  | destination address
//! ```
//!
//! An IPv4 address sits in the last 4 bytes of its 16, after 12 zero bytes (not the
//! ::ffff:a.b.c.d form); an IPv6 address fills all 16. The listener's CM learns the connecting
//! side's IP addresses and port from here, since RoCE's CM REQ carries only GIDs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{check_emit_len, check_len, Error, Header, Result};

/// Size of the header.
pub const LEN: usize = 36;
/// The only version rdma_cm defines.
pub const VERSION: u8 = 0;

/// A parsed rdma_cm header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// The connecting side's port.
    pub src_port: u16,
    /// The connecting side's IP address.
    pub src_addr: IpAddr,
    /// The address it connects to.
    pub dst_addr: IpAddr,
}

fn read_addr(b: &[u8], v6: bool) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    if v6 {
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
    }
}

fn write_addr(b: &mut [u8], addr: IpAddr) {
    match addr {
        IpAddr::V4(v4) => {
            b[..12].fill(0);
            b[12..16].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => b[..16].copy_from_slice(&v6.octets()),
    }
}

impl CmaHeader {
    /// Bytes on the wire.
    pub const LEN: usize = LEN;

    /// Parses the header at the front of a REQ's private data.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        check_len(buf, LEN, Header::CmaHeader)?;
        let version = buf[0];
        let ip_version = buf[1] >> 4;
        if version != VERSION || !(ip_version == 4 || ip_version == 6) {
            return Err(Error::BadCmaHeader {
                version,
                ip_version,
            });
        }
        let v6 = ip_version == 6;
        Ok(CmaHeader {
            src_port: u16::from_be_bytes([buf[2], buf[3]]),
            src_addr: read_addr(&buf[4..20], v6),
            dst_addr: read_addr(&buf[20..36], v6),
        })
    }

    /// Writes the header into the front of `buf`. Both addresses take the IP version of the
    /// source address; a destination of the other version is written in that form anyway, as
    /// rdma_cm would never build one.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        buf[0] = VERSION;
        buf[1] = if self.src_addr.is_ipv6() {
            6 << 4
        } else {
            4 << 4
        };
        buf[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        write_addr(&mut buf[4..20], self.src_addr);
        write_addr(&mut buf[20..36], self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The start of the REQ's private data in tests/data/rxe/rping.pcap: rping -c from
    // 192.0.2.11 port 45615 to 192.0.2.12.
    const BYTES: [u8; 36] = [
        0x00, 0x40, 0xb2, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 11, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 12,
    ];

    #[test]
    fn parse_and_emit_ipv4() {
        let h = CmaHeader::parse(&BYTES).unwrap();
        assert_eq!(
            h,
            CmaHeader {
                src_port: 45615,
                src_addr: "192.0.2.11".parse().unwrap(),
                dst_addr: "192.0.2.12".parse().unwrap(),
            }
        );
        let mut out = [0xffu8; 36];
        h.emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn ipv6_roundtrip() {
        let h = CmaHeader {
            src_port: 1,
            src_addr: "fe80::1".parse().unwrap(),
            dst_addr: "::1".parse().unwrap(),
        };
        let mut out = [0u8; 36];
        h.emit(&mut out).unwrap();
        assert_eq!(out[1], 0x60);
        assert_eq!(CmaHeader::parse(&out).unwrap(), h);
    }

    #[test]
    fn bad_versions_and_short_input_are_errors() {
        let mut b = BYTES;
        b[0] = 1;
        assert_eq!(
            CmaHeader::parse(&b),
            Err(Error::BadCmaHeader {
                version: 1,
                ip_version: 4
            })
        );
        let mut b = BYTES;
        b[1] = 0x50;
        assert!(CmaHeader::parse(&b).is_err());
        assert!(CmaHeader::parse(&BYTES[..35]).is_err());
        assert!(CmaHeader::parse(&BYTES)
            .unwrap()
            .emit(&mut [0u8; 10])
            .is_err());
    }
}
