//! Base Transport Header (IBTA vol. 1 §9.2), 12 bytes, present in every RoCE packet.
//!
//! ```text
//!  byte 0      1                     2-3     4                 5-7      8          9-11
//!  OpCode | SE M PadCnt(2) TVer(4) | P_Key | FECN BECN resv6 | DestQP | A resv7 |  PSN
//! ```

use super::field::view;
use super::{check_emit_len, Error, Header, Opcode, Result};

/// Size of the BTH on the wire.
pub const LEN: usize = 12;

/// The default partition key (full membership of the default partition).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// The destination QP of a multicast packet (IBTA 9.2.4: DestQP 0xFFFFFF is the multicast
/// QP; the packets go to every QP attached to the group the destination GID names).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

view! {
    /// A checked view of a BTH at the front of a byte buffer.
    pub struct Bth("BTH", LEN, Header::Bth) {
        /// The OpCode byte: transport in the top 3 bits, operation in the low 5 ([`Opcode::info`]
        /// says which headers follow).
        opcode: Opcode = bits(0, 0, 8) => set_opcode("Sets the OpCode."),
        /// Solicited Event: the receive completion should wake a consumer waiting only for
        /// solicited completions (set on the last packet of a SEND or WRITE with immediate).
        solicited: bool = bits(1, 0, 1)
            => set_solicited("Sets or clears Solicited Event, keeping the other flag bits."),
        /// MigReq (automatic path migration, unused on RoCE; rxe and softroce send 0).
        mig_req: bool = bits(1, 1, 1)
            => set_mig_req("Sets or clears MigReq, keeping the other flag bits."),
        /// Pad count: bytes (0-3) appended to the payload to reach a 4-byte multiple.
        pad_count: u8 = bits(1, 2, 2)
            => set_pad_count("Sets the pad count (0-3), keeping the other flag bits."),
        /// Transport header version (0).
        tver: u8 = bits(1, 4, 4) => set_tver(
            "Sets the transport header version (its low 4 bits), keeping the other flag bits."
        ),
        /// Partition key: bit 15 is full membership, bits 14-0 the key ([`DEFAULT_PKEY`] on RoCE).
        pkey: u16 = bits(2, 0, 16) => set_pkey("Sets the partition key."),
        /// FECN: congestion was seen on the way to the receiver (RoCEv2 marks it in the IP ECN bits
        /// instead, and the receiver answers with a CNP).
        fecn: bool = bits(4, 0, 1)
            => set_fecn("Sets or clears FECN, keeping BECN and the reserved bits."),
        /// BECN: set in a packet going back to the source of a packet that carried FECN.
        becn: bool = bits(4, 1, 1)
            => set_becn("Sets or clears BECN, keeping FECN and the reserved bits."),
        /// The 6 reserved bits of byte 4.
        resv6: u8 = bits(4, 2, 6),
        /// Destination QP number (24 bits).
        dest_qp: u32 = bits(5, 0, 24)
            => set_dest_qp("Sets the destination QP number (its low 24 bits)."),
        /// AckReq: the responder must acknowledge this packet (RC only).
        ack_req: bool = bits(8, 0, 1)
            => set_ack_req("Sets or clears AckReq, keeping the reserved bits."),
        /// The 7 reserved bits of byte 8.
        resv7: u8 = bits(8, 1, 7),
        /// Packet sequence number (24 bits); compare with [`crate::wire::Psn`], which wraps.
        psn: u32 = bits(9, 0, 24) => set_psn("Sets the PSN (its low 24 bits)."),
    }
}

/// A parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited Event: the receive completion should wake a consumer waiting only for
    /// solicited completions (set on the last packet of a SEND or WRITE with immediate).
    pub solicited: bool,
    /// MigReq (automatic path migration; Linux rxe sends 0 on every packet).
    pub mig_req: bool,
    /// Pad count (0-3).
    pub pad_count: u8,
    /// Transport header version; 0 is the only defined value.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl Default for BthRepr {
    fn default() -> Self {
        BthRepr {
            opcode: Opcode(0),
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: 0,
            ack_req: false,
            psn: 0,
        }
    }
}

impl BthRepr {
    /// Bytes on the wire (12): the next header or the payload starts this far after it.
    pub const LEN: usize = LEN;

    /// Parses the BTH at the front of `buf`. Reserved bits are ignored on receipt, as IBTA
    /// requires; the transport version is returned for the caller to check.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        // Read from the twelve bytes as one array (one length check), as the view's getters
        // would read them (`parse_matches_the_view` checks it).
        let Some(&[op, flags, k0, k1, fb, q1, q2, q3, a, p1, p2, p3]) = buf.first_chunk::<LEN>()
        else {
            return Err(Error::Truncated {
                header: Header::Bth,
                need: LEN,
                got: buf.len(),
            });
        };
        Ok(BthRepr {
            opcode: Opcode(op),
            solicited: flags & 0x80 != 0,
            mig_req: flags & 0x40 != 0,
            pad_count: (flags >> 4) & 0x3,
            tver: flags & 0xF,
            pkey: u16::from_be_bytes([k0, k1]),
            fecn: fb & 0x80 != 0,
            becn: fb & 0x40 != 0,
            dest_qp: u32::from_be_bytes([0, q1, q2, q3]),
            ack_req: a & 0x80 != 0,
            psn: u32::from_be_bytes([0, p1, p2, p3]),
        })
    }

    /// Parses and rejects a transport version other than 0.
    pub fn parse_strict(buf: &[u8]) -> Result<Self> {
        let r = Self::parse(buf)?;
        if r.tver != 0 {
            return Err(Error::BadTransportVersion(r.tver));
        }
        Ok(r)
    }

    /// Writes the BTH into the front of `buf`; reserved bits are sent as zero. Out-of-range values
    /// (`pad_count` > 3, `tver` > 15, QPN or PSN above 24 bits) are truncated to their field.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit_len(buf, LEN)?;
        // The twelve bytes assembled at once (reserved bits zero), as the view's setters
        // would write them field by field (`emit_matches_the_view` checks it): one store
        // instead of a read-modify-write per field on the send path.
        let flags = u8::from(self.solicited) << 7
            | u8::from(self.mig_req) << 6
            | (self.pad_count & 0x3) << 4
            | (self.tver & 0xF);
        let [_, q1, q2, q3] = self.dest_qp.to_be_bytes();
        let [_, p1, p2, p3] = self.psn.to_be_bytes();
        let [k0, k1] = self.pkey.to_be_bytes();
        buf[..LEN].copy_from_slice(&[
            self.opcode.0,
            flags,
            k0,
            k1,
            u8::from(self.fecn) << 7 | u8::from(self.becn) << 6,
            q1,
            q2,
            q3,
            u8::from(self.ack_req) << 7,
            p1,
            p2,
            p3,
        ]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the view's setters write, field by field, into zeroed bytes.
    fn emit_by_view(r: &BthRepr) -> [u8; LEN] {
        let mut buf = [0u8; LEN];
        let mut v = Bth::new_unchecked(&mut buf[..]);
        v.set_opcode(r.opcode);
        v.set_solicited(r.solicited);
        v.set_mig_req(r.mig_req);
        v.set_pad_count(r.pad_count);
        v.set_tver(r.tver);
        v.set_pkey(r.pkey);
        v.set_fecn(r.fecn);
        v.set_becn(r.becn);
        v.set_dest_qp(r.dest_qp);
        v.set_ack_req(r.ack_req);
        v.set_psn(r.psn);
        buf
    }

    proptest::proptest! {
        #[test]
        fn parse_matches_the_view(bytes: [u8; LEN]) {
            let v = Bth::new_checked(&bytes[..]).unwrap();
            let want = BthRepr {
                opcode: v.opcode(),
                solicited: v.solicited(),
                mig_req: v.mig_req(),
                pad_count: v.pad_count(),
                tver: v.tver(),
                pkey: v.pkey(),
                fecn: v.fecn(),
                becn: v.becn(),
                dest_qp: v.dest_qp(),
                ack_req: v.ack_req(),
                psn: v.psn(),
            };
            proptest::prop_assert_eq!(BthRepr::parse(&bytes).unwrap(), want);
        }

        #[test]
        fn emit_matches_the_view(
            op: u8, se: bool, m: bool, pad: u8, tver: u8, pkey: u16,
            fecn: bool, becn: bool, qp: u32, a: bool, psn: u32,
        ) {
            let r = BthRepr {
                opcode: Opcode(op),
                solicited: se,
                mig_req: m,
                pad_count: pad,
                tver,
                pkey,
                fecn,
                becn,
                dest_qp: qp,
                ack_req: a,
                psn,
            };
            let mut out = [0xA5u8; LEN];
            r.emit(&mut out).unwrap();
            proptest::prop_assert_eq!(out, emit_by_view(&r));
        }
    }

    // RC SEND ONLY, SE + MigReq, PadCnt 2, P_Key 0xFFFF, DestQP 0x000011, AckReq, PSN 0xABCDEF.
    const BYTES: [u8; 12] = [
        0x04, 0xE0, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0xAB, 0xCD, 0xEF,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: true,
            mig_req: true,
            pad_count: 2,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: 0xABCDEF,
        }
    }

    #[test]
    fn deconstruct() {
        let v = Bth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.opcode(), Opcode::RC_SEND_ONLY);
        assert!(v.solicited());
        assert!(v.mig_req());
        assert_eq!(v.pad_count(), 2);
        assert_eq!(v.tver(), 0);
        assert_eq!(v.pkey(), 0xFFFF);
        assert!(!v.fecn() && !v.becn());
        assert_eq!(v.dest_qp(), 0x11);
        assert!(v.ack_req());
        assert_eq!(v.psn(), 0xABCDEF);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(BthRepr::parse(&BYTES).unwrap(), repr());
        let mut out = [0u8; 12];
        repr().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn cnp_bth_from_connectx4_capture() {
        // BTH of the ConnectX-4 Lx CNP in spec-notes/icrc.md: opcode 0x81, BECN, DestQP 0x000118.
        let b = [
            0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,
        ];
        let r = BthRepr::parse(&b).unwrap();
        assert_eq!(r.opcode, Opcode::CNP);
        assert!(r.becn && !r.fecn);
        assert_eq!(r.dest_qp, 0x118);
        assert_eq!(r.psn, 0);
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn reserved_bits_ignored_on_parse_and_zero_on_emit() {
        let mut b = BYTES;
        b[4] |= 0x3F;
        b[8] |= 0x7F;
        let v = Bth::new_checked(&b[..]).unwrap();
        assert_eq!(v.resv6(), 0x3F);
        assert_eq!(v.resv7(), 0x7F);
        let r = BthRepr::parse(&b).unwrap();
        assert_eq!(r, repr());
        // Whatever the buffer held before, the reserved bits go out as zero.
        let mut out = [0xFFu8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn tver_checked_by_strict_parse() {
        let mut b = BYTES;
        b[1] |= 0x01;
        assert_eq!(BthRepr::parse(&b).unwrap().tver, 1);
        assert_eq!(
            BthRepr::parse_strict(&b),
            Err(Error::BadTransportVersion(1))
        );
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = BYTES;
        let mut v = Bth::new_unchecked(&mut b[..]);
        v.set_psn(0x1234_5678); // only the low 24 bits fit
        v.set_dest_qp(0xFF_000102);
        v.set_ack_req(false);
        v.set_pad_count(1);
        v.set_opcode(Opcode::RC_ACK);
        assert_eq!(
            b,
            [0x11, 0xD0, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x02, 0x00, 0x34, 0x56, 0x78]
        );
    }

    #[test]
    fn flag_setters_touch_only_their_bit() {
        let mut b = [0u8; LEN];
        b[1] = 0x30; // pad count 3
        b[4] = 0x3F; // reserved bits
        let mut v = Bth::new_unchecked(&mut b[..]);
        v.set_solicited(true);
        v.set_mig_req(true);
        v.set_tver(0x1F); // only the low 4 bits fit
        v.set_pkey(0x8001);
        v.set_fecn(true);
        v.set_becn(true);
        assert_eq!(&b[1..5], &[0xFF, 0x80, 0x01, 0xFF]);
        let mut v = Bth::new_unchecked(&mut b[..]);
        v.set_solicited(false);
        v.set_becn(false);
        assert_eq!(&b[1..5], &[0x7F, 0x80, 0x01, 0xBF]);
    }

    #[test]
    fn truncated() {
        for n in 0..LEN {
            assert_eq!(
                BthRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: Header::Bth,
                    need: LEN,
                    got: n
                })
            );
        }
        assert!(BthRepr::parse(&BYTES[..]).is_ok());
        let mut small = [0u8; 11];
        assert_eq!(
            repr().emit(&mut small),
            Err(Error::BufferTooSmall { need: 12, got: 11 })
        );
    }
}
