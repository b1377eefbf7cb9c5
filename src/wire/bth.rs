//! Base Transport Header (IBTA vol. 1 §9.2), 12 bytes, present in every RoCE packet.
//!
//! ```text
//!  byte 0      1                     2-3     4                 5-7      8          9-11
//!  OpCode | SE M PadCnt(2) TVer(4) | P_Key | FECN BECN resv6 | DestQP | A resv7 |  PSN
//! ```

use super::{be, check_emit_len, check_len, Error, Header, Opcode, Result};

/// Size of the BTH on the wire.
pub const LEN: usize = 12;

/// The default partition key (full membership of the default partition).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// The destination QP of a multicast packet (IBTA 9.2.4: DestQP 0xFFFFFF is the multicast
/// QP; the packets go to every QP attached to the group the destination GID names).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const ECN: usize = 4;
    pub const DQPN: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;

    pub const SE: u8 = 0x80;
    pub const MIG: u8 = 0x40;
    pub const PAD_MASK: u8 = 0x30;
    pub const PAD_SHIFT: u8 = 4;
    pub const TVER_MASK: u8 = 0x0F;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const RESV6_MASK: u8 = 0x3F;
    pub const ACK_REQ: u8 = 0x80;
    pub const RESV7_MASK: u8 = 0x7F;
}

/// A checked view of a BTH at the front of a byte buffer.
#[derive(Debug, Clone, Copy)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Bth { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len(buffer.as_ref(), LEN, Header::Bth)?;
        Ok(Bth { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The OpCode byte: transport in the top 3 bits, operation in the low 5 ([`Opcode::info`]
    /// says which headers follow).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }
    /// Solicited Event: the receive completion should wake a consumer waiting only for
    /// solicited completions (set on the last packet of a SEND or WRITE with immediate).
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::SE != 0
    }
    /// MigReq (automatic path migration, unused on RoCE; rxe and softroce send 0).
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::MIG != 0
    }
    /// Pad count: bytes (0-3) appended to the payload to reach a 4-byte multiple.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & field::PAD_MASK) >> field::PAD_SHIFT
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & field::TVER_MASK
    }
    /// Partition key: bit 15 is full membership, bits 14-0 the key ([`DEFAULT_PKEY`] on RoCE).
    pub fn pkey(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::PKEY)
    }
    /// FECN: congestion was seen on the way to the receiver (RoCEv2 marks it in the IP ECN bits
    /// instead, and the receiver answers with a CNP).
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & field::FECN != 0
    }
    /// BECN: set in a packet going back to the source of a packet that carried FECN.
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & field::BECN != 0
    }
    /// The 6 reserved bits of byte 4.
    pub fn resv6(&self) -> u8 {
        self.buffer.as_ref()[field::ECN] & field::RESV6_MASK
    }
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        be::u24_at(self.buffer.as_ref(), field::DQPN)
    }
    /// AckReq: the responder must acknowledge this packet (RC only).
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK] & field::ACK_REQ != 0
    }
    /// The 7 reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[field::ACK] & field::RESV7_MASK
    }
    /// Packet sequence number (24 bits); compare with [`crate::wire::Psn`], which wraps.
    pub fn psn(&self) -> u32 {
        be::u24_at(self.buffer.as_ref(), field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the OpCode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = op.0;
    }
    /// Sets the destination QP number (low 24 bits of `qpn`).
    pub fn set_dest_qp(&mut self, qpn: u32) {
        be::put_u24(self.buffer.as_mut(), field::DQPN, qpn);
    }
    /// Sets the PSN (low 24 bits of `psn`).
    pub fn set_psn(&mut self, psn: u32) {
        be::put_u24(self.buffer.as_mut(), field::PSN, psn);
    }
    /// Sets or clears AckReq, keeping the reserved bits.
    pub fn set_ack_req(&mut self, on: bool) {
        let b = &mut self.buffer.as_mut()[field::ACK];
        *b = (*b & field::RESV7_MASK) | if on { field::ACK_REQ } else { 0 };
    }
    /// Sets the pad count (0-3), keeping the other flag bits.
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::PAD_MASK) | ((pad << field::PAD_SHIFT) & field::PAD_MASK);
    }
    /// Sets or clears Solicited Event, keeping the other flag bits.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_bit(field::FLAGS, field::SE, on);
    }
    /// Sets or clears MigReq, keeping the other flag bits.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_bit(field::FLAGS, field::MIG, on);
    }
    /// Sets the transport header version (low 4 bits of `tver`), keeping the other flag bits.
    pub fn set_tver(&mut self, tver: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::TVER_MASK) | (tver & field::TVER_MASK);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, pkey: u16) {
        be::put_u16(self.buffer.as_mut(), field::PKEY, pkey);
    }
    /// Sets or clears FECN, keeping BECN and the reserved bits.
    pub fn set_fecn(&mut self, on: bool) {
        self.set_bit(field::ECN, field::FECN, on);
    }
    /// Sets or clears BECN, keeping FECN and the reserved bits.
    pub fn set_becn(&mut self, on: bool) {
        self.set_bit(field::ECN, field::BECN, on);
    }

    fn set_bit(&mut self, at: usize, mask: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[at];
        *b = if on { *b | mask } else { *b & !mask };
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
        let v = Bth::new_checked(buf)?;
        Ok(BthRepr {
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
        // Reserved bits go out as zero; the setters below keep them.
        buf[..LEN].fill(0);
        let mut v = Bth::new_unchecked(&mut buf[..LEN]);
        v.set_opcode(self.opcode);
        v.set_solicited(self.solicited);
        v.set_mig_req(self.mig_req);
        v.set_pad_count(self.pad_count);
        v.set_tver(self.tver);
        v.set_pkey(self.pkey);
        v.set_fecn(self.fecn);
        v.set_becn(self.becn);
        v.set_dest_qp(self.dest_qp);
        v.set_ack_req(self.ack_req);
        v.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
