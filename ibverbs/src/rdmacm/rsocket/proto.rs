//! The rsocket protocol's messages as bytes, without I/O: the connect private data
//! (`rs_conn_data`), the 32-bit immediate data of every RDMA WRITE WITH IMMEDIATE, the
//! scatter-gather entries a peer writes into our target SGL, the compact size scale, and the
//! two headers of the datagram (UD) mode. Layouts follow librdmacm/rsocket.c of rdma-core
//! v44.0; the rules are spec-notes/rsockets.md.

/// The protocol version `rs_format_conn_data` sends (spec-notes: rsockets.md R1).
pub const CONN_VERSION: u8 = 1;
/// Connect flag: the sender's host is big-endian, so its SGL updates are in network order.
pub const CONN_FLAG_NET: u8 = 1 << 0;
/// Connect flag: the sender has an iomap area after its target SGL.
pub const CONN_FLAG_IOMAP: u8 = 1 << 1;
/// Bytes of `rs_conn_data` on the wire.
pub const CONN_DATA_LEN: usize = 40;
/// Entries in a target SGL (`RS_SGL_SIZE`).
pub const SGL_SIZE: u32 = 2;
/// Bytes of one `rs_sge` (addr, key, length).
pub const SGE_LEN: usize = 16;
/// Bytes of one `rs_iomap` (offset, then an `rs_sge`).
pub const IOMAP_LEN: usize = 24;

/// One remote buffer: `struct rs_sge`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address in the peer.
    pub addr: u64,
    /// The peer's rkey.
    pub key: u32,
    /// Length in bytes (for a target SGL: its number of entries).
    pub length: u32,
}

impl Sge {
    /// The 16 bytes in network order, as in the connect private data.
    pub fn to_be_bytes(self) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.key.to_be_bytes());
        b[12..16].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Reads 16 bytes in network order.
    pub fn from_be_bytes(b: &[u8; SGE_LEN]) -> Sge {
        Sge {
            addr: u64::from_be_bytes(b[0..8].try_into().unwrap_or_default()),
            key: u32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
            length: u32::from_be_bytes(b[12..16].try_into().unwrap_or_default()),
        }
    }

    /// The 16 bytes of a credit (SGL) update as this host writes it into the peer's target
    /// SGL: in our own byte order, or swapped when the peer's flags said its order differs
    /// (spec-notes: rsockets.md R5).
    pub fn to_update_bytes(self, swap: bool) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        let (addr, key, length) = if swap {
            (
                self.addr.swap_bytes(),
                self.key.swap_bytes(),
                self.length.swap_bytes(),
            )
        } else {
            (self.addr, self.key, self.length)
        };
        b[0..8].copy_from_slice(&addr.to_ne_bytes());
        b[8..12].copy_from_slice(&key.to_ne_bytes());
        b[12..16].copy_from_slice(&length.to_ne_bytes());
        b
    }

    /// Reads an SGL update a peer wrote into our target SGL; the writer converted it to our
    /// order, so it is read in host order.
    pub fn from_update_bytes(b: &[u8; SGE_LEN]) -> Sge {
        Sge {
            addr: u64::from_ne_bytes(b[0..8].try_into().unwrap_or_default()),
            key: u32::from_ne_bytes(b[8..12].try_into().unwrap_or_default()),
            length: u32::from_ne_bytes(b[12..16].try_into().unwrap_or_default()),
        }
    }
}

/// `struct rs_conn_data`: what each side puts in the connect request and reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnData {
    /// Protocol version (1).
    pub version: u8,
    /// `CONN_FLAG_*`.
    pub flags: u8,
    /// Receive credits granted: the sender's receive queue size.
    pub credits: u16,
    /// The iomap area's entry count, on the 8-bit scale of [`value_to_scale`].
    pub target_iomap_size: u8,
    /// Where the peer writes credit updates (length: entries, `SGL_SIZE`).
    pub target_sgl: Sge,
    /// The first half of the sender's receive buffer, the peer's first write target.
    pub data_buf: Sge,
}

impl ConnData {
    /// The 40 bytes of the private data (spec-notes: rsockets.md R1).
    pub fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        // bytes 4..7 reserved, zero
        b[7] = self.target_iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.to_be_bytes());
        b[24..40].copy_from_slice(&self.data_buf.to_be_bytes());
        b
    }

    /// Reads the private data of a connect request or reply; `None` when it is shorter than
    /// `rs_conn_data` (the CM pads private data, so longer is normal) or of another version.
    pub fn decode(b: &[u8]) -> Option<ConnData> {
        let b: &[u8; CONN_DATA_LEN] = b.get(..CONN_DATA_LEN)?.try_into().ok()?;
        if b[0] != CONN_VERSION {
            return None;
        }
        let sge = |at: usize| {
            let mut s = [0u8; SGE_LEN];
            s.copy_from_slice(&b[at..at + SGE_LEN]);
            Sge::from_be_bytes(&s)
        };
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        })
    }

    /// Whether the sender's byte order differs from ours, so SGL updates we write to it must
    /// be swapped (`RS_OPT_SWAP_SGL`, spec-notes: rsockets.md R2).
    pub fn needs_swap(&self) -> bool {
        let net = self.flags & CONN_FLAG_NET != 0;
        net != cfg!(target_endian = "big")
    }

    /// Where the peer's iomap area is: just after its target SGL, same key (R2).
    pub fn remote_iomap(&self) -> Option<Sge> {
        if self.flags & CONN_FLAG_IOMAP == 0 {
            return None;
        }
        Some(Sge {
            addr: self
                .target_sgl
                .addr
                .wrapping_add(SGE_LEN as u64 * u64::from(self.target_sgl.length)),
            key: self.target_sgl.key,
            length: scale_to_value(u32::from(self.target_iomap_size), 8),
        })
    }
}

/// The three-bit operation in the top of the immediate data (`RS_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Data written into the receive buffer; the low 29 bits are its length.
    Data,
    /// A credit update: the low 29 bits are the receive sequence number granted up to.
    Sgl,
    /// An iomap entry was written; the low 16 bits are its index.
    IomapSgl,
    /// A control message: `CTRL_*` in the low bits.
    Ctrl,
    /// Reserved values 1, 3, 5 and `RS_OP_WRITE` (2), which is never sent.
    Other(u8),
}

/// Control message: the peer is going away.
pub const CTRL_DISCONNECT: u32 = 0;
/// Control message: keepalive, no effect but proving the connection.
pub const CTRL_KEEPALIVE: u32 = 1;
/// Control message: the peer shut down writing.
pub const CTRL_SHUTDOWN: u32 = 2;

impl Op {
    fn code(self) -> u32 {
        match self {
            Op::Data => 0,
            Op::Sgl => 4,
            Op::IomapSgl => 6,
            Op::Ctrl => 7,
            Op::Other(c) => u32::from(c & 7),
        }
    }
}

/// The immediate data of a message: op in bits 31..29, data in 28..0 (`rs_msg_set`,
/// spec-notes: rsockets.md R3). The value is in host order; the ImmDt header (and the
/// `__be32 imm_data` of a work request) carries it big-endian, see [`imm_wire`].
pub fn imm_encode(op: Op, data: u32) -> u32 {
    (op.code() << 29) | (data & 0x1FFF_FFFF)
}

/// The four ImmDt bytes of a message: rsocket.c posts `htobe32(msg)` and reads
/// `be32toh(wc.imm_data)`, so the op is in the first byte's top three bits.
pub fn imm_wire(op: Op, data: u32) -> [u8; 4] {
    imm_encode(op, data).to_be_bytes()
}

/// Splits an immediate value into op and data (`rs_msg_op`, `rs_msg_data`).
pub fn imm_decode(imm: u32) -> (Op, u32) {
    let op = match imm >> 29 {
        0 => Op::Data,
        4 => Op::Sgl,
        6 => Op::IomapSgl,
        7 => Op::Ctrl,
        c => Op::Other(c as u8),
    };
    (op, imm & 0x1FFF_FFFF)
}

/// `rs_value_to_scale`: values up to 2^(bits-1) as they are, larger ones as a flag bit and
/// the value shifted right by `bits` (spec-notes: rsockets.md R4).
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    let half = 1u32 << (bits - 1);
    if value <= half {
        value
    } else {
        half | (value >> bits)
    }
}

/// `rs_scale_to_value`, the inverse of [`value_to_scale`] for the values it produces.
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    let half = 1u32 << (bits - 1);
    if value <= half {
        value
    } else {
        (value & !half) << bits
    }
}

/// `DS_UDP_TAG`, the first word of a UDP-service header.
pub const DS_UDP_TAG: u32 = 0x5555_5555;

/// The address header in front of every datagram on a UD QP (`struct ds_header`,
/// spec-notes: rsockets.md R6): the sender's address and port as the receiver reports them.
pub fn ds_header(addr: &std::net::SocketAddr) -> Vec<u8> {
    match addr {
        std::net::SocketAddr::V4(a) => {
            let mut b = vec![4u8, 8];
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.ip().octets());
            b
        }
        std::net::SocketAddr::V6(a) => {
            let mut b = vec![6u8, 24];
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.flowinfo().to_be_bytes());
            b.extend_from_slice(&a.ip().octets());
            b
        }
    }
}

/// Reads a `ds_header`: the source address and the header's length, or `None` when the
/// version and length do not agree (`ds_valid_recv`).
pub fn ds_header_decode(b: &[u8]) -> Option<(std::net::SocketAddr, usize)> {
    let (version, len) = (*b.first()?, *b.get(1)? as usize);
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match (version, len) {
        (4, 8) => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(((std::net::Ipv4Addr::from(ip), port).into(), len))
        }
        (6, 24) => {
            let flow = u32::from_be_bytes(b.get(4..8)?.try_into().ok()?);
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let a = std::net::SocketAddrV6::new(ip.into(), port, flow, 0);
            Some((a.into(), len))
        }
        _ => None,
    }
}

/// The header udpong-style services exchange over the UDP socket that stands beside a
/// datagram rsocket (`struct ds_udp_header`, spec-notes: rsockets.md R7): tag, version, op,
/// header length, the sender's QPN (low 24 bits) and its address.
pub fn ds_udp_header(op: u8, qpn: u32, ip: &std::net::IpAddr) -> Vec<u8> {
    let mut b = DS_UDP_TAG.to_be_bytes().to_vec();
    let (version, len) = match ip {
        std::net::IpAddr::V4(_) => (4u8, 16u8),
        std::net::IpAddr::V6(_) => (6, 28),
    };
    b.extend_from_slice(&[version, op, len, 0]);
    b.extend_from_slice(&(qpn & 0xFF_FFFF).to_be_bytes());
    match ip {
        std::net::IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
        std::net::IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_bytes() {
        let c = ConnData {
            version: 1,
            flags: CONN_FLAG_IOMAP,
            credits: 384,
            target_iomap_size: value_to_scale(8, 8) as u8,
            target_sgl: Sge {
                addr: 0x0000_7f12_3456_7000,
                key: 0x1122_3344,
                length: 2,
            },
            data_buf: Sge {
                addr: 0x0000_7f12_3460_0000,
                key: 0x5566_7788,
                length: 0x10000,
            },
        };
        let want: [u8; 40] = [
            1, 2, 0x01, 0x80, 0, 0, 0, 8, //
            0, 0, 0x7f, 0x12, 0x34, 0x56, 0x70, 0x00, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 2, //
            0, 0, 0x7f, 0x12, 0x34, 0x60, 0x00, 0x00, 0x55, 0x66, 0x77, 0x88, 0, 1, 0, 0,
        ];
        assert_eq!(c.encode(), want);
        let mut padded = want.to_vec();
        padded.resize(56, 0);
        assert_eq!(ConnData::decode(&padded), Some(c));
        assert_eq!(ConnData::decode(&want[..39]), None);
        let mut v2 = want;
        v2[0] = 2;
        assert_eq!(ConnData::decode(&v2), None);
        // a little-endian peer (no NET flag) needs no swap on x86
        assert_eq!(c.needs_swap(), cfg!(target_endian = "big"));
        let io = c.remote_iomap().unwrap();
        assert_eq!(io.addr, 0x0000_7f12_3456_7020);
        assert_eq!((io.key, io.length), (0x1122_3344, 8));
    }

    #[test]
    fn immediate_values() {
        assert_eq!(imm_encode(Op::Data, 4096), 0x0000_1000);
        assert_eq!(imm_encode(Op::Sgl, 0x1_0180), 0x8001_0180);
        assert_eq!(imm_encode(Op::IomapSgl, 3), 0xC000_0003);
        assert_eq!(imm_encode(Op::Ctrl, CTRL_SHUTDOWN), 0xE000_0002);
        assert_eq!(imm_encode(Op::Ctrl, CTRL_KEEPALIVE), 0xE000_0001);
        assert_eq!(imm_decode(0xE000_0000), (Op::Ctrl, CTRL_DISCONNECT));
        assert_eq!(imm_decode(0x0001_0000), (Op::Data, 65536));
        assert_eq!(imm_decode(0x4000_0010), (Op::Other(2), 16));
        assert_eq!(imm_wire(Op::Sgl, 0x180), [0x80, 0, 0x01, 0x80]);
        assert_eq!(imm_wire(Op::Data, 65536), [0, 1, 0, 0]);
        // data beyond 29 bits is cut, as the C macro's cast-and-or would corrupt the op
        assert_eq!(imm_encode(Op::Data, 0x2000_0001), 1);
    }

    #[test]
    fn scale() {
        assert_eq!(value_to_scale(128, 8), 128);
        assert_eq!(value_to_scale(129, 8), 128);
        assert_eq!(value_to_scale(512, 8), 130);
        assert_eq!(scale_to_value(130, 8), 512);
        assert_eq!(scale_to_value(8, 8), 8);
    }

    #[test]
    fn sgl_update_bytes() {
        let s = Sge {
            addr: 0x0102_0304_0506_0708,
            key: 0x0a0b_0c0d,
            length: 0x8000,
        };
        let own = s.to_update_bytes(false);
        assert_eq!(Sge::from_update_bytes(&own), s);
        let swapped = s.to_update_bytes(true);
        if cfg!(target_endian = "little") {
            assert_eq!(swapped, s.to_be_bytes());
            assert_eq!(
                own,
                [8, 7, 6, 5, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0x80, 0, 0]
            );
        }
    }

    #[test]
    fn datagram_headers() {
        let a: std::net::SocketAddr = "127.0.0.31:7174".parse().unwrap();
        let h = ds_header(&a);
        assert_eq!(h, [4, 8, 0x1c, 0x06, 127, 0, 0, 31]);
        assert_eq!(ds_header_decode(&h), Some((a, 8)));
        assert_eq!(ds_header_decode(&[4, 24, 0, 0, 1, 2, 3, 4]), None);
        let u = ds_udp_header(0, 0xAB12_3456, &a.ip());
        assert_eq!(
            u,
            [0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0x12, 0x34, 0x56, 127, 0, 0, 31]
        );
        let a6: std::net::SocketAddr = "[::1]:7174".parse().unwrap();
        assert_eq!(ds_header(&a6).len(), 24);
        assert_eq!(ds_header_decode(&ds_header(&a6)), Some((a6, 24)));
        assert_eq!(ds_udp_header(7, 1, &a6.ip()).len(), 28);
    }
}
