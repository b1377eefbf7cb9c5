//! The ibv_*_pingpong exchange (rdma-core libibverbs/examples/rc_pingpong.c,
//! pp_client_exch_dest / pp_server_exch_dest, unchanged since rdma-core v1 through v44+).
//!
//! Each side's address is one message of exactly 52 bytes: `sprintf("%04x:%06x:%06x:%s",
//! lid, qpn, psn, gid)` where the GID is its 16 bytes as 32 hex digits, plus the NUL. The
//! client connects and writes its message; the server reads it, connects its QP (RTR, RTS),
//! writes its own; the client reads it and writes "done" (5 bytes with the NUL), which the
//! server reads before starting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::OobError;
use crate::ib::Gid;

/// Length of an address message, NUL included.
pub const MSG_LEN: usize = 52;

/// One side's address as the pingpong tools exchange it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingpongDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// GID: the sender's IP address (IPv4-mapped for IPv4), which RoCE uses as its address.
    pub gid: Gid,
}

impl PingpongDest {
    /// The 52-byte message.
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let mut text = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xFF_FFFF,
            self.psn & 0xFF_FFFF
        );
        for b in self.gid.0 {
            text.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; MSG_LEN];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses a message as pingpong.c does (`sscanf("%x:%x:%x:%s")` then 32 hex GID digits),
    /// strictly: every field must be hexadecimal and in range.
    pub fn parse(msg: &[u8]) -> Result<PingpongDest, OobError> {
        const WHAT: &str = "pingpong address";
        let bad = |detail: String| OobError::Malformed { what: WHAT, detail };
        let text = super::text_before_nul(msg, WHAT)?;
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 4 {
            return Err(bad(format!("expected lid:qpn:psn:gid, got {text:?}")));
        }
        let lid = super::hex_field(WHAT, "LID", parts[0], 0xFFFF)? as u16;
        let qpn = super::hex_field(WHAT, "QPN", parts[1], 0xFF_FFFF)? as u32;
        let psn = super::hex_field(WHAT, "PSN", parts[2], 0xFF_FFFF)? as u32;
        let g = parts[3];
        if g.len() != 32 || !g.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad(format!("GID {g:?} is not 32 hex digits")));
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad("GID".into()))?;
        }
        Ok(PingpongDest {
            lid,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }
}

fn read_msg(s: &mut TcpStream) -> Result<PingpongDest, OobError> {
    let mut buf = [0u8; MSG_LEN];
    s.read_exact(&mut buf)?;
    PingpongDest::parse(&buf)
}

/// The client side: write our address, read the server's, write "done".
pub fn client_exchange(
    s: &mut TcpStream,
    local: &PingpongDest,
    timeout: Duration,
) -> Result<PingpongDest, OobError> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(&local.to_wire())?;
    let remote = read_msg(s)?;
    s.write_all(b"done\0")?;
    Ok(remote)
}

/// The server side: read the client's address, call `connect` (move the QP to RTR and RTS),
/// write our address, and wait for the client's "done".
pub fn server_exchange(
    s: &mut TcpStream,
    local: &PingpongDest,
    timeout: Duration,
    connect: impl FnOnce(&PingpongDest) -> Result<(), String>,
) -> Result<PingpongDest, OobError> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let remote = read_msg(s)?;
    connect(&remote).map_err(OobError::Local)?;
    s.write_all(&local.to_wire())?;
    let mut done = [0u8; 5];
    s.read_exact(&mut done)?;
    if &done[..4] != b"done" {
        return Err(OobError::Malformed {
            what: "done message",
            detail: format!("{:?}", String::from_utf8_lossy(&done)),
        });
    }
    Ok(remote)
}

/// Address messages ibv_srq_pingpong exchanges each way, whatever its number of QPs
/// (srq_pingpong.c MAX_QP): the entries past the QPs in use are all-zero addresses.
pub const SRQ_MAX_QP: usize = 256;

/// ibv_srq_pingpong's addresses for `used` QPs: theirs, then all-zero entries up to
/// [`SRQ_MAX_QP`] (srq_pingpong.c zeroes `my_dest` and fills the first `num_qp`).
pub fn srq_padded(used: &[PingpongDest]) -> Vec<PingpongDest> {
    let zero = PingpongDest {
        lid: 0,
        qpn: 0,
        psn: 0,
        gid: Gid([0; 16]),
    };
    let mut v = used.to_vec();
    v.resize(SRQ_MAX_QP.max(used.len()), zero);
    v
}

/// ibv_srq_pingpong's client side: write [`SRQ_MAX_QP`] addresses, read as many, write
/// "done".
pub fn client_exchange_srq(
    s: &mut TcpStream,
    locals: &[PingpongDest],
    timeout: Duration,
) -> Result<Vec<PingpongDest>, OobError> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    for d in srq_padded(locals) {
        s.write_all(&d.to_wire())?;
    }
    let mut remote = Vec::with_capacity(SRQ_MAX_QP);
    for _ in 0..SRQ_MAX_QP {
        remote.push(read_msg(s)?);
    }
    s.write_all(b"done\0")?;
    Ok(remote)
}

/// ibv_srq_pingpong's server side: read [`SRQ_MAX_QP`] addresses, call `connect`, write ours,
/// wait for "done".
pub fn server_exchange_srq(
    s: &mut TcpStream,
    locals: &[PingpongDest],
    timeout: Duration,
    connect: impl FnOnce(&[PingpongDest]) -> Result<(), String>,
) -> Result<Vec<PingpongDest>, OobError> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut remote = Vec::with_capacity(SRQ_MAX_QP);
    for _ in 0..SRQ_MAX_QP {
        remote.push(read_msg(s)?);
    }
    connect(&remote).map_err(OobError::Local)?;
    for d in srq_padded(locals) {
        s.write_all(&d.to_wire())?;
    }
    let mut done = [0u8; 5];
    s.read_exact(&mut done)?;
    if &done[..4] != b"done" {
        return Err(OobError::Malformed {
            what: "done message",
            detail: format!("{:?}", String::from_utf8_lossy(&done)),
        });
    }
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn dest() -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ip("192.0.2.11".parse().unwrap()),
        }
    }

    #[test]
    fn message_is_byte_exact() {
        let w = dest().to_wire();
        let text = b"0000:000011:abcdef:00000000000000000000ffffc000020b";
        assert_eq!(text.len(), 51);
        assert_eq!(&w[..51], text);
        assert_eq!(w[51], 0);
        assert_eq!(PingpongDest::parse(&w).unwrap(), dest());
    }

    #[test]
    fn malformed_messages_are_typed_errors() {
        for m in [
            &b""[..],
            b"0000:000011:abcdef",
            b"zzzz:000011:abcdef:00000000000000000000ffffc000020b",
            b"0000:1000000:abcdef:00000000000000000000ffffc000020b",
            b"0000:000011:abcdef:00000000000000000000ffffc000020",
            b"0000:000011:abcdef:00000000000000000000ffffc000020g",
            b"\xff\xfe:000011:abcdef:00000000000000000000ffffc000020b",
        ] {
            assert!(
                matches!(PingpongDest::parse(m), Err(OobError::Malformed { .. })),
                "{m:?}"
            );
        }
    }

    #[test]
    fn client_and_server_exchange_over_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut mine = dest();
            mine.qpn = 0x12;
            let mut seen = None;
            let r = server_exchange(&mut s, &mine, Duration::from_secs(5), |rem| {
                seen = Some(*rem);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, Some(r));
            r
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let rem = client_exchange(&mut s, &dest(), Duration::from_secs(5)).unwrap();
        assert_eq!(rem.qpn, 0x12);
        assert_eq!(server.join().unwrap(), dest());
    }

    #[test]
    fn a_peer_that_closes_early_is_reported() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; MSG_LEN];
            s.read_exact(&mut b).unwrap();
            // close without answering
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let r = client_exchange(&mut s, &dest(), Duration::from_secs(5));
        t.join().unwrap();
        assert!(matches!(r, Err(OobError::PeerClosed)), "{r:?}");
    }

    #[test]
    fn srq_exchange_sends_256_addresses_each_way() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mine: Vec<PingpongDest> = (0..3)
            .map(|i| PingpongDest {
                qpn: 0x20 + i,
                ..dest()
            })
            .collect();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let ours = [PingpongDest {
                qpn: 0x40,
                ..dest()
            }];
            server_exchange_srq(&mut s, &ours, Duration::from_secs(5), |rem| {
                assert_eq!(rem.len(), SRQ_MAX_QP);
                Ok(())
            })
            .unwrap()
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let rem = client_exchange_srq(&mut s, &mine, Duration::from_secs(5)).unwrap();
        assert_eq!(rem.len(), SRQ_MAX_QP);
        assert_eq!(rem[0].qpn, 0x40);
        assert_eq!(rem[1].qpn, 0);
        assert_eq!(
            &rem[1].to_wire()[..51],
            b"0000:000000:000000:00000000000000000000000000000000"
        );
        let got = server.join().unwrap();
        assert_eq!(&got[..3], &mine[..]);
        assert!(got[3..].iter().all(|d| d.qpn == 0 && d.gid.is_zero()));
    }
}
