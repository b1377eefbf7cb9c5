//! perftest's out-of-band exchange (linux-rdma/perftest, src/perftest_communication.c), as
//! Debian 12's perftest 4.5+0.17 speaks it (its programs report version "6.06").
//!
//! Every exchange is lock-step over one TCP connection: the client writes its message and then
//! reads the server's; the server reads first and then writes (`ctx_xchg_data_ethernet`,
//! `ctx_hand_shake`). The messages, in the order the programs send them:
//!
//! 1. version: 16 bytes, the NUL-padded version string (`exchange_versions`);
//! 2. page size and cache line size: two big-endian `int`s (`check_sys_data`);
//! 3. path MTU: 2 bytes, `sprintf("%d", enum ibv_mtu)` (`check_mtu`);
//! 4. keys: 108 bytes of text per QP and per handshake (`ethernet_write_keys`), see
//!    [`KeyMsg`]; the programs repeat the handshake as barriers, a number of times that
//!    depends on the program (spec-notes/oob.md lists them);
//! 5. bandwidth report (ib_write/read/atomic_bw only): size, iterations, peak, average and
//!    message rate, five big-endian 8-byte values (`xchg_bw_reports`);
//! 6. close: one more handshake, then `"done"` with its NUL (`ctx_close_connection`), never
//!    read by the peer.
//!
//! softroce appends an extension after the NUL of its version string, which perftest ignores
//! (it only applies `atof` to the field): a softroce peer uses it to refuse a peer that runs
//! another test, rather than deadlocking in a later handshake.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::OobError;
use crate::ib::Gid;

/// The version we announce: perftest 4.5+0.17's.
pub const VERSION: &str = "6.06";
/// perftest refuses peers older than this (`check_version_compatibility`).
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Length of the version message (`MAX_VERSION`).
pub const VERSION_LEN: usize = 16;
/// Length of a key message with a GID, NUL included (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_LEN: usize = 108;
/// The message that ends the exchange (`ctx_close_connection`).
pub const DONE: &[u8; 5] = b"done\0";

/// Which end of the TCP connection we are: the client writes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connected to the server; writes each message before reading the peer's.
    Client,
    /// Accepted the connection; reads each message before writing its own.
    Server,
}

/// One QP's address and memory as `ethernet_write_keys` prints it:
/// `"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:"` and a NUL, 108 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMsg {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// READ/atomic requests this side accepts (the peer's `max_rd_atomic`).
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// Remote key of the buffer.
    pub rkey: u32,
    /// Address the peer targets with WRITE, READ and atomics.
    pub vaddr: u64,
    /// GID: the sender's IP address (IPv4-mapped for IPv4), which RoCE uses as its address.
    pub gid: Gid,
    /// SRQ number (XRC/DC only; 0 otherwise).
    pub srqn: u32,
}

impl KeyMsg {
    /// The 108-byte message.
    pub fn to_wire(&self) -> [u8; KEY_MSG_LEN] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xFF_FFFF,
            self.psn & 0xFF_FFFF,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.0 {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        debug_assert_eq!(text.len(), KEY_MSG_LEN - 1);
        let mut out = [0u8; KEY_MSG_LEN];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses a key message: 23 colon-separated hexadecimal fields before the NUL, each in
    /// range. perftest itself parses with `strtol` and no checks; anything malformed here is
    /// an [`OobError::Malformed`], never a panic.
    pub fn parse(msg: &[u8]) -> Result<KeyMsg, OobError> {
        const WHAT: &str = "perftest key message";
        let text = super::text_before_nul(msg, WHAT)?;
        let fields: Vec<&str> = text.strip_suffix(':').unwrap_or(text).split(':').collect();
        if fields.len() != 23 {
            return Err(OobError::Malformed {
                what: WHAT,
                detail: format!(
                    "expected 23 fields (lid:out_reads:qpn:psn:rkey:vaddr:16 GID bytes:srqn), got {} in {text:?}",
                    fields.len()
                ),
            });
        }
        let hex = |i: usize, field: &str, max: u64| super::hex_field(WHAT, field, fields[i], max);
        let mut gid = [0u8; 16];
        for (k, b) in gid.iter_mut().enumerate() {
            *b = hex(6 + k, "GID byte", 0xFF)? as u8;
        }
        Ok(KeyMsg {
            lid: hex(0, "LID", 0xFFFF)? as u16,
            out_reads: hex(1, "out_reads", 0xFFFF)? as u16,
            qpn: hex(2, "QPN", 0xFF_FFFF)? as u32,
            psn: hex(3, "PSN", 0xFF_FFFF)? as u32,
            rkey: hex(4, "rkey", 0xFFFF_FFFF)? as u32,
            vaddr: hex(5, "vaddr", u64::MAX)?,
            gid: Gid(gid),
            srqn: hex(22, "SRQN", 0xFFFF_FFFF)? as u32,
        })
    }
}

impl KeyMsg {
    /// The 56-byte `struct pingpong_dest` that `rdma_write_keys` SENDs under rdma_cm, as
    /// perftest built with HAVE_ENDIAN lays it out on x86-64: big-endian 32-bit `lid`,
    /// `out_reads`, `qpn`, `psn`, `rkey` at 0..20, 4 bytes of padding, the big-endian 64-bit
    /// `vaddr` at 24, the GID's 16 bytes at 32, big-endian `srqn` at 48 and `gid_index` at
    /// 52 (0 here: the peer's reader ignores it, as it ignores the padding).
    pub fn to_dest(&self) -> [u8; DEST_LEN] {
        let mut out = [0u8; DEST_LEN];
        for (i, v) in [
            self.lid as u32,
            self.out_reads as u32,
            self.qpn,
            self.psn,
            self.rkey,
        ]
        .into_iter()
        .enumerate()
        {
            out[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
        }
        out[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        out[32..48].copy_from_slice(&self.gid.0);
        out[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        out
    }

    /// Parses a `struct pingpong_dest` as `rdma_read_keys` does (padding and `gid_index`
    /// ignored). perftest reads the fields as they come; here a LID or out_reads beyond 16
    /// bits and a QPN or PSN beyond 24 are [`OobError::Malformed`].
    pub fn from_dest(msg: &[u8; DEST_LEN]) -> Result<KeyMsg, OobError> {
        let u32_at = |i: usize| u32::from_be_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
        let field = |name: &'static str, i: usize, max: u32| {
            let v = u32_at(i);
            if v > max {
                return Err(OobError::Malformed {
                    what: "perftest key message (rdma_cm)",
                    detail: format!("{name} 0x{v:x} out of range"),
                });
            }
            Ok(v)
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&msg[32..48]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&msg[24..32]);
        Ok(KeyMsg {
            lid: field("LID", 0, 0xFFFF)? as u16,
            out_reads: field("out_reads", 4, 0xFFFF)? as u16,
            qpn: field("QPN", 8, 0xFF_FFFF)?,
            psn: field("PSN", 12, 0xFF_FFFF)?,
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid: Gid(gid),
            srqn: u32_at(48),
        })
    }
}

/// Length of `struct pingpong_dest`, the key message under rdma_cm and the size of the
/// receive buffer perftest posts for every rdma_cm message (`post_one_recv_wqe`).
pub const DEST_LEN: usize = 56;

/// What a softroce peer says about its test, after the NUL of the version string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestSignature {
    /// Test kind, chosen by the caller (operation and latency/bandwidth).
    pub test: u8,
    /// Flags the caller needs both ends to agree on (e.g. the data check).
    pub flags: u8,
    /// Message size (saturated at `u32::MAX`).
    pub size: u32,
    /// Iterations (saturated at `u32::MAX`).
    pub iters: u32,
}

/// The peer's version message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeerVersion {
    /// The number `atof` reads from it, as perftest compares it.
    pub version: f64,
    /// Present when the peer is softroce.
    pub softroce: Option<TestSignature>,
}

/// Marker of the softroce extension, right after the NUL of "6.06".
const EXT_MARK: u8 = b'S';

/// The 16-byte version message: "6.06", its NUL, and optionally the softroce extension
/// (marker 'S', test, flags, size, iterations: 1 + 1 + 1 + 4 + 4 bytes at offset 5, which
/// ends at exactly 16 bytes).
pub fn version_to_wire(sig: Option<TestSignature>) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    out[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    if let Some(s) = sig {
        let e = VERSION.len() + 1;
        out[e] = EXT_MARK;
        out[e + 1] = s.test;
        out[e + 2] = s.flags;
        out[e + 3..e + 7].copy_from_slice(&s.size.to_be_bytes());
        out[e + 7..e + 11].copy_from_slice(&s.iters.to_be_bytes());
    }
    out
}

/// Parses a peer's version message as perftest does (`atof` of the text before the NUL: the
/// leading decimal number, 0 if there is none), plus the softroce extension if present.
pub fn parse_version(msg: &[u8; VERSION_LEN]) -> PeerVersion {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
    let text = String::from_utf8_lossy(&msg[..end]);
    let t = text.trim_start();
    let mut len = 0;
    let mut seen_dot = false;
    for c in t.chars() {
        if c.is_ascii_digit() || (c == '.' && !seen_dot) {
            seen_dot |= c == '.';
            len += 1;
        } else {
            break;
        }
    }
    let version = t[..len].parse::<f64>().unwrap_or(0.0);
    let e = end + 1;
    // The extension only follows our own version string, so it is in bounds exactly then.
    let softroce = (end == VERSION.len() && msg[e] == EXT_MARK).then(|| {
        let u32_at = |i: usize| u32::from_be_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
        TestSignature {
            test: msg[e + 1],
            flags: msg[e + 2],
            size: u32_at(e + 3),
            iters: u32_at(e + 7),
        }
    });
    PeerVersion { version, softroce }
}

/// The `enum ibv_mtu` value for an MTU in bytes (1 = 256 ... 5 = 4096).
pub fn mtu_enum(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The MTU in bytes for an `enum ibv_mtu` value.
pub fn mtu_bytes(e: u8) -> Option<u32> {
    (1..=5).contains(&e).then(|| 128u32 << e)
}

/// The 2-byte MTU message: the enum value in decimal, then a NUL.
pub fn mtu_to_wire(bytes: u32) -> Option<[u8; 2]> {
    mtu_enum(bytes).map(|e| [b'0' + e, 0])
}

/// The MTU both ends use: perftest takes the peer's value when it is valid and smaller
/// (`check_mtu`: `strtol` of the peer's 2 bytes).
pub fn agree_mtu(mine: u32, peer_msg: &[u8; 2]) -> u32 {
    let digits: Vec<u8> = peer_msg
        .iter()
        .copied()
        .take_while(|b| b.is_ascii_digit())
        .collect();
    let peer = std::str::from_utf8(&digits)
        .ok()
        .and_then(|s| s.parse::<u8>().ok())
        .and_then(mtu_bytes);
    match peer {
        Some(p) if p < mine => p,
        _ => mine,
    }
}

/// The report the client of ib_write/read/atomic_bw sends the server, which prints it.
/// Bandwidths are in perftest's MB/s (2^20 bytes per second), the rate in millions of
/// messages per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Messages counted (iterations x QPs).
    pub iters: u64,
    /// Peak bandwidth, MB/s: the best window of cq_mod (100) messages.
    pub bw_peak: f64,
    /// Average bandwidth, MB/s: over the whole run, first post to last completion.
    pub bw_avg: f64,
    /// Average message rate, millions of messages per second.
    pub msg_rate: f64,
}

/// How the exchange's messages travel: perftest's TCP socket, or (under perftest's -R)
/// SEND/RECV on a QP that rdma_cm connected ([`super::perftest_cm::CmLink`]).
pub trait Transport: std::fmt::Debug + Send {
    /// Sends one message.
    fn send(&mut self, msg: &[u8]) -> Result<(), OobError>;
    /// Receives one message of exactly `buf.len()` bytes.
    fn recv(&mut self, buf: &mut [u8]) -> Result<(), OobError>;
    /// Whether the peer's next message has (at least partly) arrived, waiting at most
    /// `within`; [`OobError::PeerClosed`] if the peer went away.
    fn ready(&mut self, within: Duration) -> Result<bool, OobError>;
    /// Whether key messages are perftest's binary `struct pingpong_dest` (rdma_cm:
    /// `rdma_write_keys`) rather than its text (TCP: `ethernet_write_keys`).
    fn binary_keys(&self) -> bool;
    /// What follows the closing handshake (`ctx_close_connection`): "done" on TCP, nothing
    /// under rdma_cm.
    fn finish(&mut self) -> Result<(), OobError>;
}

/// perftest's TCP exchange.
#[derive(Debug)]
pub struct TcpLink {
    stream: TcpStream,
}

impl TcpLink {
    /// Wraps a connected stream. Read timeouts, if any, are the caller's (set on the stream).
    pub fn new(stream: TcpStream) -> TcpLink {
        TcpLink { stream }
    }
}

impl Transport for TcpLink {
    fn send(&mut self, msg: &[u8]) -> Result<(), OobError> {
        Ok(self.stream.write_all(msg)?)
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<(), OobError> {
        Ok(self.stream.read_exact(buf)?)
    }

    fn ready(&mut self, within: Duration) -> Result<bool, OobError> {
        let before = self.stream.read_timeout()?;
        self.stream
            .set_read_timeout(Some(within.max(Duration::from_millis(1))))?;
        let r = match self.stream.peek(&mut [0u8; 1]) {
            Ok(0) => Err(OobError::PeerClosed),
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        };
        self.stream.set_read_timeout(before)?;
        r
    }

    fn binary_keys(&self) -> bool {
        false
    }

    fn finish(&mut self) -> Result<(), OobError> {
        Ok(self.stream.write_all(DONE)?)
    }
}

/// What the wait of [`Exchange::xchg_waiting`] gets: the transport, to ask whether the
/// peer's message is there.
pub type Wait<'a> = dyn FnMut(&mut dyn Transport) -> Result<(), OobError> + 'a;

/// The exchange over an established connection (TCP, or rdma_cm under -R).
#[derive(Debug)]
pub struct Exchange {
    link: Box<dyn Transport>,
    role: Role,
}

impl Exchange {
    /// Wraps a connected TCP stream. Read timeouts, if any, are the caller's (set on the
    /// stream).
    pub fn new(stream: TcpStream, role: Role) -> Exchange {
        Exchange::over(Box::new(TcpLink::new(stream)), role)
    }

    /// An exchange over any transport.
    pub fn over(link: Box<dyn Transport>, role: Role) -> Exchange {
        Exchange { link, role }
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether the peer has closed the exchange, looking without waiting (and without
    /// consuming a message that may have arrived).
    pub fn peer_closed(&mut self) -> bool {
        matches!(self.link.ready(Duration::ZERO), Err(OobError::PeerClosed))
    }

    /// One lock-step exchange of equal-size messages: the client writes then reads, the
    /// server reads then writes (`ctx_xchg_data_ethernet`, `ctx_xchg_data_rdma`).
    pub fn xchg<const N: usize>(&mut self, mine: &[u8; N]) -> Result<[u8; N], OobError> {
        self.xchg_waiting(mine, &mut |_| Ok(()))
    }

    /// [`Exchange::xchg`], calling `wait` before reading the peer's message: a side that
    /// may wait long (the passive side of a test, while the peer runs it) uses it to watch
    /// something other than the exchange and to give up on its own terms.
    pub fn xchg_waiting<const N: usize>(
        &mut self,
        mine: &[u8; N],
        wait: &mut Wait<'_>,
    ) -> Result<[u8; N], OobError> {
        let mut theirs = [0u8; N];
        match self.role {
            Role::Client => {
                self.link.send(mine)?;
                wait(&mut *self.link)?;
                self.link.recv(&mut theirs)?;
            }
            Role::Server => {
                wait(&mut *self.link)?;
                self.link.recv(&mut theirs)?;
                self.link.send(mine)?;
            }
        }
        Ok(theirs)
    }

    /// Versions (`exchange_versions` + `check_version_compatibility`).
    pub fn versions(&mut self, sig: Option<TestSignature>) -> Result<PeerVersion, OobError> {
        let peer = parse_version(&self.xchg(&version_to_wire(sig))?);
        if peer.version < MIN_PEER_VERSION {
            return Err(OobError::Malformed {
                what: "perftest version",
                detail: format!(
                    "the peer reports version {}; perftest's exchange needs {MIN_PEER_VERSION} or later",
                    peer.version
                ),
            });
        }
        Ok(peer)
    }

    /// Page ("cycle buffer") and cache line sizes (`check_sys_data`): both ends use the
    /// larger of the two values. Returns `(cycle_buffer, cache_line_size)`.
    pub fn sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32), OobError> {
        let peer_cycle = u32::from_be_bytes(self.xchg(&cycle_buffer.to_be_bytes())?);
        let peer_line = u32::from_be_bytes(self.xchg(&cache_line.to_be_bytes())?);
        // perftest compares them as ints; a negative or absurd value from the peer is refused
        // rather than turned into a huge buffer.
        let sane = |v: u32| v <= 1 << 30;
        if !sane(peer_cycle) || !sane(peer_line) {
            return Err(OobError::Malformed {
                what: "perftest system data",
                detail: format!("page size {peer_cycle}, cache line {peer_line}"),
            });
        }
        Ok((cycle_buffer.max(peer_cycle), cache_line.max(peer_line)))
    }

    /// Path MTU (`check_mtu`): returns the MTU both ends use.
    pub fn mtu(&mut self, mine: u32) -> Result<u32, OobError> {
        let msg = mtu_to_wire(mine).ok_or_else(|| OobError::Local(format!("MTU {mine}")))?;
        Ok(agree_mtu(mine, &self.xchg(&msg)?))
    }

    /// One key handshake (`ctx_hand_shake`): our keys for the peer's.
    pub fn handshake(&mut self, mine: &KeyMsg) -> Result<KeyMsg, OobError> {
        self.handshake_waiting(mine, &mut |_| Ok(()))
    }

    /// [`Exchange::handshake`] with a `wait` as in [`Exchange::xchg_waiting`].
    pub fn handshake_waiting(
        &mut self,
        mine: &KeyMsg,
        wait: &mut Wait<'_>,
    ) -> Result<KeyMsg, OobError> {
        if self.link.binary_keys() {
            KeyMsg::from_dest(&self.xchg_waiting(&mine.to_dest(), wait)?)
        } else {
            KeyMsg::parse(&self.xchg_waiting(&mine.to_wire(), wait)?)
        }
    }

    /// The bandwidth reports (`xchg_bw_reports` with a peer of version 5.33 or later).
    pub fn bw_reports(&mut self, mine: &BwReport) -> Result<BwReport, OobError> {
        let size = u64::from_be_bytes(self.xchg(&mine.size.to_be_bytes())?);
        let iters = u64::from_be_bytes(self.xchg(&mine.iters.to_be_bytes())?);
        let mut f = |v: f64| -> Result<f64, OobError> {
            Ok(f64::from_bits(u64::from_be_bytes(
                self.xchg(&v.to_bits().to_be_bytes())?,
            )))
        };
        Ok(BwReport {
            size,
            iters,
            bw_peak: f(mine.bw_peak)?,
            bw_avg: f(mine.bw_avg)?,
            msg_rate: f(mine.msg_rate)?,
        })
    }

    /// `ctx_close_connection`: a last handshake, then "done", then the connection closes.
    pub fn close(self, mine: &KeyMsg) -> Result<(), OobError> {
        self.close_waiting(mine, &mut |_| Ok(()))
    }

    /// [`Exchange::close`] with a `wait` as in [`Exchange::xchg_waiting`].
    pub fn close_waiting(mut self, mine: &KeyMsg, wait: &mut Wait<'_>) -> Result<(), OobError> {
        self.handshake_waiting(mine, wait)?;
        self.link.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn keys() -> KeyMsg {
        KeyMsg {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0xABCDEF,
            rkey: 0x1234,
            vaddr: 0x5612_3456_7000,
            gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 11]),
            srqn: 0,
        }
    }

    #[test]
    fn key_message_is_perftests_text_byte_for_byte() {
        // What sprintf(KEY_PRINT_FMT_GID, ...) prints for these values.
        let want = b"0000:0080:000011:abcdef:00001234:0000561234567000:\
00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:0b:00000000:\0";
        assert_eq!(want.len(), KEY_MSG_LEN);
        assert_eq!(&keys().to_wire()[..], &want[..]);
        assert_eq!(KeyMsg::parse(want).unwrap(), keys());
    }

    #[test]
    fn binary_key_message_is_pingpong_dest_with_big_endian_fields() {
        let d = keys().to_dest();
        let mut want = [0u8; DEST_LEN];
        want[4..8].copy_from_slice(&[0, 0, 0, 0x80]);
        want[8..12].copy_from_slice(&[0, 0, 0, 0x11]);
        want[12..16].copy_from_slice(&[0, 0xab, 0xcd, 0xef]);
        want[16..20].copy_from_slice(&[0, 0, 0x12, 0x34]);
        want[24..32].copy_from_slice(&[0, 0, 0x56, 0x12, 0x34, 0x56, 0x70, 0]);
        want[32..48].copy_from_slice(&keys().gid.0);
        assert_eq!(d, want);
        assert_eq!(KeyMsg::from_dest(&d).unwrap(), keys());
        // Padding and gid_index are ignored, as rdma_read_keys ignores them.
        let mut noisy = d;
        noisy[20..24].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        noisy[52..56].copy_from_slice(&[0, 0, 0, 3]);
        assert_eq!(KeyMsg::from_dest(&noisy).unwrap(), keys());
        // What perftest sends before its QPs exist (create_rdma_cm_connection): zeros.
        assert_eq!(KeyMsg::from_dest(&[0u8; DEST_LEN]).unwrap().qpn, 0);
        let mut big = d;
        big[8] = 1; // QPN beyond 24 bits
        let mut reads = d;
        reads[5] = 1; // out_reads beyond 16 bits
        for m in [big, reads, [0xff; DEST_LEN]] {
            assert!(matches!(
                KeyMsg::from_dest(&m),
                Err(OobError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn malformed_key_messages_are_typed_errors() {
        let good = keys().to_wire();
        let mut cut = good;
        cut[60] = 0; // truncated inside the GID
        let mut nonhex = good;
        nonhex[0] = b'z';
        let mut big_qpn = good;
        big_qpn[10..16].copy_from_slice(b"ffffff");
        assert!(KeyMsg::parse(&big_qpn).is_ok());
        let text = String::from_utf8_lossy(&good[..107]).replace(":000011:", ":1000011:");
        let mut wide = [0u8; KEY_MSG_LEN + 1];
        wide[..text.len()].copy_from_slice(text.as_bytes());
        for (msg, what) in [
            (&cut[..], "truncated"),
            (&nonhex[..], "not hex"),
            (&wide[..], "QPN beyond 24 bits"),
            (&[0xffu8; KEY_MSG_LEN][..], "not text"),
            (&[0u8; KEY_MSG_LEN][..], "empty"),
        ] {
            assert!(
                matches!(KeyMsg::parse(msg), Err(OobError::Malformed { .. })),
                "{what}"
            );
        }
    }

    #[test]
    fn version_message_is_what_perftest_reads_with_atof() {
        let plain = version_to_wire(None);
        assert_eq!(&plain, b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        let p = parse_version(&plain);
        assert_eq!(p.version, 6.06);
        assert_eq!(p.softroce, None);
        let sig = TestSignature {
            test: 3,
            flags: 1,
            size: 65536,
            iters: 5000,
        };
        let ext = version_to_wire(Some(sig));
        // perftest sees "6.06" and stops at the NUL.
        assert_eq!(&ext[..5], b"6.06\0");
        assert_eq!(parse_version(&ext).softroce, Some(sig));
        assert_eq!(parse_version(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0").version, 5.6);
        assert_eq!(parse_version(b"junk\0\0\0\0\0\0\0\0\0\0\0\0").version, 0.0);
        assert_eq!(parse_version(&[b'9'; 16]).version, 9999999999999999.0);
    }

    #[test]
    fn mtu_message_and_agreement_follow_check_mtu() {
        assert_eq!(mtu_to_wire(1024), Some(*b"3\0"));
        assert_eq!(mtu_to_wire(4096), Some(*b"5\0"));
        assert_eq!(mtu_to_wire(1500), None);
        assert_eq!(agree_mtu(4096, b"3\0"), 1024);
        assert_eq!(agree_mtu(1024, b"5\0"), 1024);
        // An invalid value from the peer is ignored, as valid_mtu_size() does.
        assert_eq!(agree_mtu(2048, b"9\0"), 2048);
        assert_eq!(agree_mtu(2048, b"x\0"), 2048);
    }

    /// Both roles against each other over loopback TCP, message by message.
    #[test]
    fn both_roles_complete_the_whole_exchange() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut x = Exchange::new(s, Role::Server);
            let v = x.versions(None).unwrap();
            let sys = x.sys_data(4096, 64).unwrap();
            let mtu = x.mtu(1024).unwrap();
            let mut k = keys();
            k.qpn = 0x22;
            let peer = x.handshake(&k).unwrap();
            let rep = x
                .bw_reports(&BwReport {
                    size: 0,
                    iters: 0,
                    bw_peak: 0.0,
                    bw_avg: 0.0,
                    msg_rate: 0.0,
                })
                .unwrap();
            x.close(&k).unwrap();
            (v, sys, mtu, peer, rep)
        });
        let mut x = Exchange::new(TcpStream::connect(addr).unwrap(), Role::Client);
        let sig = TestSignature {
            test: 1,
            flags: 0,
            size: 8,
            iters: 10,
        };
        assert_eq!(x.versions(Some(sig)).unwrap().version, 6.06);
        assert_eq!(x.sys_data(8192, 32).unwrap(), (8192, 64));
        assert_eq!(x.mtu(4096).unwrap(), 1024);
        assert_eq!(x.handshake(&keys()).unwrap().qpn, 0x22);
        let report = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1234.5,
            bw_avg: 1000.25,
            msg_rate: 0.016,
        };
        x.bw_reports(&report).unwrap();
        x.close(&keys()).unwrap();
        let (v, sys, mtu, peer, rep) = server.join().unwrap();
        assert_eq!(v.softroce, Some(sig));
        assert_eq!(sys, (8192, 64));
        assert_eq!(mtu, 1024);
        assert_eq!(peer, keys());
        assert_eq!(rep, report);
    }

    #[test]
    fn reports_are_big_endian_doubles_on_the_wire() {
        // A raw peer in the server's place: it reads each of our five values and answers with
        // what a perftest client on x86 writes (hton_long / hton_double: big-endian bytes).
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let answers: [[u8; 8]; 5] = [
            [0, 0, 0, 0, 0, 0, 0x10, 0],       // size 4096
            [0, 0, 0, 0, 0, 0, 0x03, 0xe8],    // 1000 iterations
            [0x40, 0x8f, 0x40, 0, 0, 0, 0, 0], // peak 1000.0
            [0x40, 0x7f, 0x40, 0, 0, 0, 0, 0], // average 500.0
            [0x3f, 0xd0, 0, 0, 0, 0, 0, 0],    // 0.25 Mpps
        ];
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            for a in answers {
                let mut b = [0u8; 8];
                s.read_exact(&mut b).unwrap();
                got.push(b);
                s.write_all(&a).unwrap();
            }
            got
        });
        let mut x = Exchange::new(TcpStream::connect(addr).unwrap(), Role::Client);
        let theirs = x
            .bw_reports(&BwReport {
                size: 65536,
                iters: 5000,
                bw_peak: 1.5,
                bw_avg: 2.0,
                msg_rate: 0.25,
            })
            .unwrap();
        assert_eq!(
            theirs,
            BwReport {
                size: 4096,
                iters: 1000,
                bw_peak: 1000.0,
                bw_avg: 500.0,
                msg_rate: 0.25,
            }
        );
        let got = peer.join().unwrap();
        assert_eq!(got[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(got[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        assert_eq!(got[2], [0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(got[3], [0x40, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(got[4], [0x3f, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
}
