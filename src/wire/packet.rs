//! A whole RoCE packet as carried in a UDP datagram: BTH, extended headers, payload, pad, ICRC.
//!
//! Which extended headers follow the BTH, and whether payload may follow them, is fixed by the
//! opcode ([`super::opcode`]); the pad count in the BTH says how many of the trailing payload
//! bytes are padding to a 4-byte multiple (IBTA vol. 1 §9.2.3 / §9.4). The ICRC is not verified
//! here because it covers the IP and UDP headers too: see [`super::icrc`] and [`super::frame`].

use super::opcode::{CNP_RESERVED_LEN, WIRE_ORDER};
use super::{
    bth, check_emit_len, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Error,
    FethRepr, Header, HeaderSet, IethRepr, ImmDtRepr, Opcode, OpcodeInfo, Result, RethRepr,
    XrcEthRepr, ICRC_LEN,
};

/// The extended transport headers of a packet; which are present is dictated by the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// XRCETH (every XRC request).
    pub xrceth: Option<XrcEthRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (WRITE first/only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic: Option<AtomicEthRepr>,
    /// AETH (ACK, READ response first/last/only, ATOMIC ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC ACK).
    pub atomic_ack: Option<AtomicAckEthRepr>,
    /// ImmDt (SEND or WRITE LAST/ONLY with immediate).
    pub imm: Option<ImmDtRepr>,
    /// IETH (SEND with invalidate).
    pub ieth: Option<IethRepr>,
}

impl ExtHeaders {
    /// The set of headers present (CNP's reserved area is not represented here).
    pub fn present(&self) -> HeaderSet {
        let mut s = HeaderSet::NONE;
        let mut add = |on: bool, h: HeaderSet| {
            if on {
                s = s.union(h)
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.xrceth.is_some(), HeaderSet::XRCETH);
        add(self.feth.is_some(), HeaderSet::FETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.imm.is_some(), HeaderSet::IMMDT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        s
    }
}

/// A parsed RoCE packet (everything after the UDP header except the ICRC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// The base transport header. On emit, `pad_count` is recomputed from the payload length.
    pub bth: BthRepr,
    /// Extended headers; which are present must match the opcode ([`PacketRepr::check`]
    /// and parsing enforce it).
    pub ext: ExtHeaders,
    /// Payload without pad bytes.
    pub payload: &'a [u8],
}

/// Splits a RoCE UDP payload into the bytes the ICRC covers and the ICRC value it carries.
pub fn split_icrc(buf: &[u8]) -> Result<(&[u8], u32)> {
    if buf.len() < bth::LEN + ICRC_LEN {
        return Err(Error::Truncated {
            header: if buf.len() < bth::LEN {
                Header::Bth
            } else {
                Header::Icrc
            },
            need: bth::LEN + ICRC_LEN,
            got: buf.len(),
        });
    }
    let (body, icrc) = buf.split_at(buf.len() - ICRC_LEN);
    Ok((
        body,
        u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]),
    ))
}

/// Pad bytes needed after `payload_len` bytes to reach a multiple of four.
#[inline]
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - (payload_len % 4)) % 4) as u8
}

impl<'a> PacketRepr<'a> {
    /// Parses a RoCE UDP payload (BTH through ICRC). The ICRC is located but not verified.
    ///
    /// Rejects: a truncated header or missing ICRC, a transport version other than 0, an
    /// unknown opcode, a length that is not a multiple of 4, payload on an opcode that carries
    /// none, and a pad count larger than the payload. (Every extended header is a multiple of
    /// 4 bytes, so a whole number of words means the pad count aligns the payload.)
    // Inlined so that the receive path builds the packet in its own frame: returned, its
    // ~200 bytes were copied out of the Result once more.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let bth = BthRepr::parse_strict(buf)?;
        let info = bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(bth.opcode.0))?;
        let mut ext = ExtHeaders::default();
        let mut at = bth::LEN;
        for (_, header, len) in info.headers.in_wire_order() {
            // Every header must fit before the 4-byte ICRC trailer.
            let room = buf.len().saturating_sub(at + ICRC_LEN);
            if room < len {
                return Err(Error::Truncated {
                    header,
                    need: len,
                    got: room,
                });
            }
            let h = &buf[at..at + len];
            match header {
                Header::Deth => ext.deth = Some(DethRepr::parse(h)?),
                Header::XrcEth => ext.xrceth = Some(XrcEthRepr::parse(h)?),
                Header::Feth => ext.feth = Some(FethRepr::parse(h)?),
                Header::Reth => ext.reth = Some(RethRepr::parse(h)?),
                Header::AtomicEth => ext.atomic = Some(AtomicEthRepr::parse(h)?),
                Header::Aeth => ext.aeth = Some(AethRepr::parse(h)?),
                Header::AtomicAckEth => ext.atomic_ack = Some(AtomicAckEthRepr::parse(h)?),
                Header::ImmDt => ext.imm = Some(ImmDtRepr::parse(h)?),
                Header::Ieth => ext.ieth = Some(IethRepr::parse(h)?),
                // CNP: 16 reserved bytes, ignored on receipt.
                _ => {}
            }
            at += len;
        }
        if buf.len() < at + ICRC_LEN {
            return Err(Error::Truncated {
                header: Header::Icrc,
                need: ICRC_LEN,
                got: buf.len() - at,
            });
        }
        if buf.len() % 4 != 0 {
            return Err(Error::UnalignedLength(buf.len()));
        }
        let body = &buf[at..buf.len() - ICRC_LEN];
        if !info.payload && !body.is_empty() {
            return Err(Error::UnexpectedPayload {
                opcode: bth.opcode.0,
                len: body.len(),
            });
        }
        let pad = bth.pad_count as usize;
        if pad > body.len() {
            return Err(Error::PadExceedsPayload {
                pad: bth.pad_count,
                payload: body.len(),
            });
        }
        Ok(PacketRepr {
            bth,
            ext,
            payload: &body[..body.len() - pad],
        })
    }

    /// The opcode's static description; `None` for an unknown opcode.
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        self.bth.opcode.info()
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        self.bth.opcode
    }

    /// Bytes of headers, payload and pad, without the ICRC.
    pub fn len_without_icrc(&self) -> usize {
        let hdrs = self.info().map_or(0, |i| i.header_len());
        bth::LEN + hdrs + self.payload.len() + pad_for(self.payload.len()) as usize
    }

    /// Bytes the packet occupies in a UDP datagram, ICRC included.
    pub fn buffer_len(&self) -> usize {
        self.len_without_icrc() + ICRC_LEN
    }

    /// Checks that the representation is consistent with its opcode.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        let info = self.check_headers()?;
        if !info.payload && !self.payload.is_empty() {
            return Err(Error::UnexpectedPayload {
                opcode: self.bth.opcode.0,
                len: self.payload.len(),
            });
        }
        Ok(info)
    }

    /// Checks that the extended headers present are exactly those the opcode carries.
    fn check_headers(&self) -> Result<&'static OpcodeInfo> {
        let op = self.bth.opcode.0;
        let info = self.info().ok_or(Error::UnknownOpcode(op))?;
        let want = info.headers;
        let have = self.ext.present();
        // The packet path's case, one comparison: exactly the headers the opcode needs (a
        // CNP's reserved bytes are not an extended header the repr carries).
        if have == want.without(HeaderSet::CNP_RESERVED) {
            return Ok(info);
        }
        // Otherwise name the first header wrong, in wire order.
        for &(set, header, _) in WIRE_ORDER.iter() {
            if set == HeaderSet::CNP_RESERVED {
                continue;
            }
            match (want.contains(set), have.contains(set)) {
                (true, false) => return Err(Error::MissingHeader { opcode: op, header }),
                (false, true) => return Err(Error::ExtraHeader { opcode: op, header }),
                _ => {}
            }
        }
        Ok(info)
    }

    /// Writes BTH, extended headers, payload and zero pad into `buf`, and zeroes the 4 ICRC
    /// bytes (the frame layer fills them in, as it knows the IP and UDP headers). The BTH pad
    /// count is derived from the payload length. Returns the bytes written (`buffer_len()`).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit_len(buf, self.buffer_len())?;
        let at = self.emit_headers(buf, self.payload.len())?;
        buf[at..at + self.payload.len()].copy_from_slice(self.payload);
        Ok(finish_payload(buf, at, self.payload.len()))
    }

    /// Writes the BTH (with the pad count for `payload_len`) and the extended headers, ignoring
    /// `self.payload`; returns where the payload starts. With [`finish_payload`] this lets a
    /// caller copy the payload straight from its source into `buf`, without an intermediate
    /// buffer. `buf` must hold the whole packet (headers, payload, pad and ICRC).
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let info = self.check_headers()?;
        if !info.payload && payload_len != 0 {
            return Err(Error::UnexpectedPayload {
                opcode: self.bth.opcode.0,
                len: payload_len,
            });
        }
        let total =
            bth::LEN + info.header_len() + payload_len + pad_for(payload_len) as usize + ICRC_LEN;
        check_emit_len(buf, total)?;
        let bth = BthRepr {
            pad_count: pad_for(payload_len),
            ..self.bth
        };
        bth.emit(buf)?;
        // In wire order (`HeaderSet::ORDER`; `every_opcode_round_trips` checks it), each
        // header only if present: `check_headers` made the present ones exactly the opcode's.
        // (A loop over the order had every header's bytes computed whether present or not.)
        let e = &self.ext;
        let mut at = bth::LEN;
        if let Some(h) = e.deth {
            h.emit(&mut buf[at..])?;
            at += DethRepr::LEN;
        }
        if let Some(h) = e.xrceth {
            h.emit(&mut buf[at..])?;
            at += XrcEthRepr::LEN;
        }
        if let Some(h) = e.feth {
            h.emit(&mut buf[at..])?;
            at += FethRepr::LEN;
        }
        if let Some(h) = e.reth {
            h.emit(&mut buf[at..])?;
            at += RethRepr::LEN;
        }
        if let Some(h) = e.atomic {
            h.emit(&mut buf[at..])?;
            at += AtomicEthRepr::LEN;
        }
        if let Some(h) = e.aeth {
            h.emit(&mut buf[at..])?;
            at += AethRepr::LEN;
        }
        if let Some(h) = e.atomic_ack {
            h.emit(&mut buf[at..])?;
            at += AtomicAckEthRepr::LEN;
        }
        if let Some(h) = e.imm {
            h.emit(&mut buf[at..])?;
            at += ImmDtRepr::LEN;
        }
        if let Some(h) = e.ieth {
            h.emit(&mut buf[at..])?;
            at += IethRepr::LEN;
        }
        if info.headers.contains(HeaderSet::CNP_RESERVED) {
            buf[at..at + CNP_RESERVED_LEN].fill(0);
            at += CNP_RESERVED_LEN;
        }
        Ok(at)
    }
}

/// After [`PacketRepr::emit_headers`] returned `payload_at` and the caller wrote `payload_len`
/// payload bytes there, zeroes the pad and the ICRC placeholder; returns the packet length.
pub fn finish_payload(buf: &mut [u8], payload_at: usize, payload_len: usize) -> usize {
    let end = payload_at + payload_len;
    let total = end + pad_for(payload_len) as usize + ICRC_LEN;
    buf[end..total].fill(0);
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AckSyndrome, NakCode};

    // RC RDMA WRITE ONLY with immediate, 5-byte payload, PSN 7, DestQP 0x12.
    const WRITE_IMM: [u8; 48] = [
        0x0B, 0x30, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x07, // BTH (pad 3)
        0x00, 0x00, 0x7F, 0x00, 0x12, 0x34, 0x50, 0x00, 0xAA, 0xBB, 0xCC, 0xDD, 0x00, 0x00, 0x00,
        0x05, // RETH
        0xDE, 0xAD, 0xBE, 0xEF, // ImmDt
        b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // payload + pad
        0x11, 0x22, 0x33, 0x44, // ICRC (not checked here)
        0, 0, 0, 0, // room for tests that extend
    ];

    fn write_imm() -> &'static [u8] {
        &WRITE_IMM[..44]
    }

    #[test]
    fn parse_write_with_imm() {
        let p = PacketRepr::parse(write_imm()).unwrap();
        assert_eq!(p.opcode(), Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE);
        assert_eq!(p.bth.pad_count, 3);
        assert_eq!(p.bth.dest_qp, 0x12);
        assert_eq!(p.bth.psn, 7);
        assert!(p.bth.ack_req);
        assert_eq!(
            p.ext.reth,
            Some(RethRepr {
                va: 0x7F00_1234_5000,
                rkey: 0xAABB_CCDD,
                len: 5
            })
        );
        assert_eq!(p.ext.imm, Some(ImmDtRepr { imm: 0xDEAD_BEEF }));
        assert_eq!(p.payload, b"hello");
        assert_eq!(split_icrc(write_imm()).unwrap().1, 0x4433_2211);
    }

    /// Every opcode's headers, each filled with its own bytes, come back from parse as they
    /// were emitted: emit and parse agree on the wire order.
    #[test]
    fn every_opcode_round_trips() {
        fn bytes(tag: u8) -> [u8; 32] {
            std::array::from_fn(|i| {
                tag.wrapping_mul(37)
                    .wrapping_add((i as u8).wrapping_mul(11))
                    | 1
            })
        }
        for op in 0..=255u8 {
            let Some(info) = Opcode(op).info() else {
                continue;
            };
            let h = info.headers;
            let pick = |set: HeaderSet| h.contains(set);
            let ext = ExtHeaders {
                deth: pick(HeaderSet::DETH).then(|| DethRepr::parse(&bytes(1)).unwrap()),
                xrceth: pick(HeaderSet::XRCETH).then(|| XrcEthRepr::parse(&bytes(2)).unwrap()),
                feth: pick(HeaderSet::FETH).then(|| FethRepr::parse(&bytes(3)).unwrap()),
                reth: pick(HeaderSet::RETH).then(|| RethRepr::parse(&bytes(4)).unwrap()),
                atomic: pick(HeaderSet::ATOMIC_ETH)
                    .then(|| AtomicEthRepr::parse(&bytes(5)).unwrap()),
                aeth: pick(HeaderSet::AETH).then(|| AethRepr::parse(&[0, 0, 0, 9]).unwrap()),
                atomic_ack: pick(HeaderSet::ATOMIC_ACK_ETH)
                    .then(|| AtomicAckEthRepr::parse(&bytes(7)).unwrap()),
                imm: pick(HeaderSet::IMMDT).then(|| ImmDtRepr::parse(&bytes(8)).unwrap()),
                ieth: pick(HeaderSet::IETH).then(|| IethRepr::parse(&bytes(9)).unwrap()),
            };
            let payload: &[u8] = if info.payload { b"abcdefg" } else { &[] };
            let p = PacketRepr {
                bth: BthRepr {
                    opcode: Opcode(op),
                    dest_qp: 0x12_3456,
                    psn: 0x65_4321,
                    ..BthRepr::default()
                },
                ext,
                payload,
            };
            let mut buf = [0u8; 256];
            let n = p.emit(&mut buf).unwrap();
            assert_eq!(n, p.buffer_len(), "opcode {op:#x}");
            let q = PacketRepr::parse(&buf[..n]).unwrap();
            assert_eq!(q.ext, p.ext, "opcode {op:#x}");
            assert_eq!(q.payload, p.payload, "opcode {op:#x}");
        }
    }

    #[test]
    fn emit_write_with_imm_is_byte_exact() {
        let p = PacketRepr::parse(write_imm()).unwrap();
        assert_eq!(p.buffer_len(), 44);
        let mut out = [0xEEu8; 44];
        assert_eq!(p.emit(&mut out).unwrap(), 44);
        let mut want = [0u8; 44];
        want.copy_from_slice(write_imm());
        want[40..].fill(0); // ICRC placeholder
        assert_eq!(out, want);
    }

    #[test]
    fn ack_and_atomic_ack() {
        let ack = [
            0x11, 0x00, 0xFF, 0xFF, 0, 0, 0, 0x05, 0, 0x00, 0x01, 0x00, // BTH
            0x61, 0x00, 0x00, 0x09, // AETH: NAK invalid request, MSN 9
            1, 2, 3, 4, // ICRC
        ];
        let p = PacketRepr::parse(&ack).unwrap();
        let aeth = p.ext.aeth.unwrap();
        assert_eq!(aeth.msn, 9);
        assert_eq!(aeth.kind(), AckSyndrome::Nak(NakCode::InvalidRequest));
        assert!(p.payload.is_empty());

        let atomic_ack = [
            0x12, 0x00, 0xFF, 0xFF, 0, 0, 0, 0x05, 0, 0x00, 0x01, 0x00, // BTH
            0x1F, 0x00, 0x00, 0x01, // AETH: ACK, MSN 1
            0, 0, 0, 0, 0, 0, 0x10, 0x00, // original value 4096
            1, 2, 3, 4,
        ];
        let p = PacketRepr::parse(&atomic_ack).unwrap();
        assert_eq!(p.ext.atomic_ack.unwrap().orig, 4096);
        let mut out = [0u8; 28];
        p.emit(&mut out).unwrap();
        assert_eq!(&out[..24], &atomic_ack[..24]);
    }

    #[test]
    fn cnp_has_sixteen_reserved_bytes() {
        let mut cnp = [0u8; 32];
        cnp[0] = 0x81;
        cnp[2] = 0xFF;
        cnp[3] = 0xFF;
        cnp[4] = 0x40;
        let p = PacketRepr::parse(&cnp).unwrap();
        assert_eq!(p.opcode(), Opcode::CNP);
        assert_eq!(p.buffer_len(), 32);
        assert!(PacketRepr::parse(&cnp[..31]).is_err());
        // Bytes after the reserved area are not allowed: CNP carries no payload.
        let long = [cnp.as_slice(), &[0, 0, 0, 0]].concat();
        assert_eq!(
            PacketRepr::parse(&long),
            Err(Error::UnexpectedPayload {
                opcode: 0x81,
                len: 4
            })
        );
    }

    #[test]
    fn rejects_bad_packets() {
        let mut unknown = [0u8; 16];
        unknown[0] = 0x1F;
        assert_eq!(PacketRepr::parse(&unknown), Err(Error::UnknownOpcode(0x1F)));

        let mut tver = [0u8; 16];
        tver[0] = 0x04;
        tver[1] = 0x01;
        assert_eq!(PacketRepr::parse(&tver), Err(Error::BadTransportVersion(1)));

        // SEND ONLY with 23 payload bytes and pad 0: not a whole number of words.
        let mut odd = [0u8; 12 + 23 + 4];
        odd[0] = 0x04;
        assert_eq!(PacketRepr::parse(&odd), Err(Error::UnalignedLength(39)));

        // SEND ONLY with pad 3 but no payload bytes to pad.
        let mut pad = [0u8; 16];
        pad[0] = 0x04;
        pad[1] = 0x30;
        assert_eq!(
            PacketRepr::parse(&pad),
            Err(Error::PadExceedsPayload { pad: 3, payload: 0 })
        );

        // READ request followed by 4 stray bytes.
        let mut read = [0u8; 12 + 16 + 4 + 4];
        read[0] = 0x0C;
        assert_eq!(
            PacketRepr::parse(&read),
            Err(Error::UnexpectedPayload {
                opcode: 0x0C,
                len: 4
            })
        );
    }

    #[test]
    fn every_truncation_is_rejected() {
        let full = write_imm();
        for n in 0..full.len() {
            // Any prefix either fails, or (when it cuts only payload and ICRC) parses a
            // shorter payload -- but never panics and never yields headers from beyond `n`.
            if let Ok(p) = PacketRepr::parse(&full[..n]) {
                assert!(p.buffer_len() <= n, "prefix {n} parsed as {p:?}");
            }
        }
        // Cutting into the headers is always an error naming the header.
        assert!(matches!(
            PacketRepr::parse(&full[..20]),
            Err(Error::Truncated {
                header: Header::Reth,
                ..
            })
        ));
        assert!(matches!(
            PacketRepr::parse(&full[..34]),
            Err(Error::Truncated {
                header: Header::ImmDt,
                ..
            })
        ));
    }

    #[test]
    fn emit_checks_headers_against_opcode() {
        let mut p = PacketRepr::parse(write_imm()).unwrap();
        let mut out = [0u8; 64];
        p.ext.imm = None;
        assert_eq!(
            p.emit(&mut out),
            Err(Error::MissingHeader {
                opcode: 0x0B,
                header: Header::ImmDt
            })
        );
        p.ext.imm = Some(ImmDtRepr { imm: 1 });
        p.ext.aeth = Some(AethRepr::ack(0));
        assert_eq!(
            p.emit(&mut out),
            Err(Error::ExtraHeader {
                opcode: 0x0B,
                header: Header::Aeth
            })
        );
        p.ext.aeth = None;
        assert_eq!(
            p.emit(&mut out[..43]),
            Err(Error::BufferTooSmall { need: 44, got: 43 })
        );
        p.bth.opcode = Opcode(0x1F);
        assert_eq!(p.emit(&mut out), Err(Error::UnknownOpcode(0x1F)));
    }

    #[test]
    fn pad_counts() {
        assert_eq!(pad_for(0), 0);
        assert_eq!(pad_for(1), 3);
        assert_eq!(pad_for(2), 2);
        assert_eq!(pad_for(3), 1);
        assert_eq!(pad_for(4096), 0);
    }

    // XRC RDMA WRITE ONLY, 4-byte payload, PSN 9, DestQP 0x34, XRC SRQ 0x000102: the XRCETH
    // sits between the BTH and the RETH (IBTA annex A14).
    const XRC_WRITE: [u8; 40] = [
        0xAA, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x34, 0x80, 0x00, 0x00, 0x09, // BTH
        0x00, 0x00, 0x01, 0x02, // XRCETH
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
        0x04, // RETH
        b'd', b'a', b't', b'a', // payload
        0, 0, 0, 0, // ICRC
    ];

    #[test]
    fn xrc_write_carries_xrceth_before_reth() {
        let p = PacketRepr::parse(&XRC_WRITE).unwrap();
        assert_eq!(p.opcode(), Opcode::XRC_RDMA_WRITE_ONLY);
        assert_eq!(p.info().unwrap().transport, crate::wire::Transport::Xrc);
        assert_eq!(p.ext.xrceth, Some(XrcEthRepr { srqn: 0x102 }));
        assert_eq!(p.ext.reth.unwrap().rkey, 7);
        assert_eq!(p.payload, b"data");
        let mut out = [0u8; 40];
        assert_eq!(p.emit(&mut out).unwrap(), 40);
        assert_eq!(out, XRC_WRITE);
        // Without its XRCETH the request cannot be emitted.
        let bare = PacketRepr {
            ext: ExtHeaders {
                xrceth: None,
                ..p.ext
            },
            ..p
        };
        assert!(matches!(
            bare.emit(&mut out),
            Err(Error::MissingHeader {
                header: Header::XrcEth,
                ..
            })
        ));
    }

    #[test]
    fn xrc_ack_has_no_xrceth() {
        let info = Opcode::XRC_ACK.info().unwrap();
        assert_eq!(info.kind, crate::wire::OpKind::Ack);
        assert!(!info.headers.contains(HeaderSet::XRCETH));
        assert!(Opcode(0xA4)
            .info()
            .unwrap()
            .headers
            .contains(HeaderSet::XRCETH));
        assert!(Opcode(0xB5).info().is_none());
        assert!(Opcode(0xBC).info().is_none());
    }
}
