//! Property tests of the wire layer: random valid packets of every known opcode, in IPv4 and
//! IPv6 frames with and without Ethernet, survive emit -> parse unchanged with a valid ICRC;
//! every truncation of such a frame is rejected; every single-bit error outside the fields the
//! ICRC masks is caught.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;
use softroce::wire::frame::EthAddrs;
use softroce::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr, Frame,
    FrameBuilder, HeaderSet, IethRepr, ImmDtRepr, LinkType, Opcode, PacketRepr, RethRepr,
    XrcEthRepr,
};

/// Everything needed to build one packet; the payload is owned so the repr can borrow it.
#[derive(Debug, Clone)]
struct Case {
    bth: BthRepr,
    ext: ExtHeaders,
    payload: Vec<u8>,
    builder: FrameBuilder,
}

impl Case {
    fn packet(&self) -> PacketRepr<'_> {
        PacketRepr {
            bth: self.bth,
            ext: self.ext,
            payload: &self.payload,
        }
    }

    fn link(&self) -> LinkType {
        if self.builder.eth.is_some() {
            LinkType::Ethernet
        } else {
            LinkType::RawIp
        }
    }

    fn frame_bytes(&self) -> Vec<u8> {
        let p = self.packet();
        let mut buf = vec![0u8; self.builder.buffer_len(&p)];
        let n = self.builder.emit(&p, &mut buf).expect("valid case emits");
        assert_eq!(n, buf.len());
        buf
    }
}

fn ext_for(headers: HeaderSet) -> impl Strategy<Value = ExtHeaders> {
    (
        any::<(u32, u32)>(),
        (0u8..4, 0u8..16),
        any::<(u64, u32, u32)>(),
        any::<(u64, u32, u64, u64)>(),
        any::<(u8, u32)>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(move |(deth, feth, reth, at, aeth, orig, imm, ieth)| {
            let on = |h: HeaderSet| headers.contains(h);
            ExtHeaders {
                deth: on(HeaderSet::DETH).then_some(DethRepr {
                    qkey: deth.0,
                    src_qp: deth.1 & 0xFF_FFFF,
                }),
                xrceth: on(HeaderSet::XRCETH).then_some(XrcEthRepr {
                    srqn: deth.0 & 0xFF_FFFF,
                }),
                feth: on(HeaderSet::FETH).then_some(FethRepr {
                    selectivity: feth.0,
                    placement: feth.1,
                }),
                reth: on(HeaderSet::RETH).then_some(RethRepr {
                    va: reth.0,
                    rkey: reth.1,
                    len: reth.2,
                }),
                atomic: on(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
                    va: at.0,
                    rkey: at.1,
                    swap_add: at.2,
                    compare: at.3,
                }),
                aeth: on(HeaderSet::AETH).then_some(AethRepr {
                    syndrome: aeth.0,
                    msn: aeth.1 & 0xFF_FFFF,
                }),
                atomic_ack: on(HeaderSet::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr { orig }),
                imm: on(HeaderSet::IMMDT).then_some(ImmDtRepr { imm }),
                ieth: on(HeaderSet::IETH).then_some(IethRepr { rkey: ieth }),
            }
        })
}

fn addresses() -> impl Strategy<Value = (SocketAddr, SocketAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
    .prop_flat_map(|(s, d)| {
        (0xC000u16..=0xFFFF)
            .prop_map(move |sport| (SocketAddr::new(s, sport), SocketAddr::new(d, 4791)))
    })
}

fn case() -> impl Strategy<Value = Case> {
    let ops: Vec<Opcode> = Opcode::all_known().collect();
    (
        proptest::sample::select(ops),
        any::<(bool, bool, u16, bool, bool, u32, bool, u32)>(),
    )
        .prop_flat_map(|(op, (se, mig, pkey, fecn, becn, dqpn, ack, psn))| {
            let info = op.info().unwrap();
            let max_payload = if info.payload { 4200 } else { 0 };
            let bth = BthRepr {
                opcode: op,
                solicited: se,
                mig_req: mig,
                pad_count: 0,
                tver: 0,
                pkey,
                fecn,
                becn,
                dest_qp: dqpn & 0xFF_FFFF,
                ack_req: ack,
                psn: psn & 0xFF_FFFF,
            };
            (
                Just(bth),
                ext_for(info.headers),
                proptest::collection::vec(any::<u8>(), 0..=max_payload),
                addresses(),
                any::<(bool, u8, u8, u16, bool, u32, [u8; 6], [u8; 6])>(),
            )
        })
        .prop_map(|(mut bth, ext, payload, (src, dst), ip)| {
            bth.pad_count = softroce::wire::packet::pad_for(payload.len());
            let (eth, ttl, tos, ip_id, df, flow, smac, dmac) = ip;
            let mut builder = FrameBuilder::new(src, dst);
            builder.ttl = ttl;
            builder.tos = tos;
            builder.ip_id = ip_id;
            builder.dont_fragment = df;
            builder.flow_label = flow & 0xF_FFFF;
            if eth {
                builder = builder.with_eth(EthAddrs {
                    src: smac,
                    dst: dmac,
                });
            }
            Case {
                bth,
                ext,
                payload,
                builder,
            }
        })
}

/// Byte offsets, within the frame, of the bits the ICRC deliberately does not cover.
fn masked(case: &Case, byte: usize, bit: u8) -> bool {
    let l2 = if case.builder.eth.is_some() { 14 } else { 0 };
    if byte < l2 {
        return true; // Ethernet header is not covered
    }
    let ip = byte - l2;
    let v4 = case.builder.src.is_ipv4();
    let (ip_len, masked_ip) = if v4 {
        (20, matches!(ip, 1 | 8 | 10 | 11))
    } else {
        // Traffic class and flow label (low nibble of byte 0, bytes 1-3) and hop limit.
        (40, (ip == 0 && bit < 4) || matches!(ip, 1..=3 | 7))
    };
    if ip < ip_len {
        return masked_ip;
    }
    let udp = ip - ip_len;
    if udp < 8 {
        return matches!(udp, 6 | 7);
    }
    let bth = udp - 8;
    bth == 4 // FECN, BECN, reserved
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn emit_then_parse_is_identity(c in case()) {
        let bytes = c.frame_bytes();
        let frame = Frame::parse(c.link(), &bytes).unwrap().expect("a RoCEv2 frame");
        prop_assert_eq!(frame.src, c.builder.src);
        prop_assert_eq!(frame.dst, c.builder.dst);
        let check = frame.icrc().unwrap();
        prop_assert!(check.ok(), "{:?}", check);
        prop_assert_eq!(frame.verified_packet().unwrap(), c.packet());
        // The UDP payload alone re-emits byte for byte (ICRC aside).
        let p = PacketRepr::parse(frame.udp_payload).unwrap();
        let mut again = vec![0u8; p.buffer_len()];
        p.emit(&mut again).unwrap();
        let n = again.len() - 4;
        prop_assert_eq!(&again[..n], &frame.udp_payload[..n]);
    }

    #[test]
    fn every_truncation_is_rejected(c in case()) {
        let bytes = c.frame_bytes();
        // All prefixes for small frames, a spread of them for large ones.
        let step = (bytes.len() / 200).max(1);
        let cuts = (0..bytes.len()).step_by(step).chain(bytes.len().saturating_sub(8)..bytes.len());
        for n in cuts {
            let accepted = matches!(
                Frame::parse(c.link(), &bytes[..n]),
                Ok(Some(f)) if f.verified_packet().is_ok()
            );
            prop_assert!(!accepted, "prefix of {} of {} bytes accepted", n, bytes.len());
        }
    }

    #[test]
    fn single_bit_errors_are_caught(c in case(), pick in any::<proptest::sample::Index>(), bit in 0u8..8) {
        let bytes = c.frame_bytes();
        let byte = pick.index(bytes.len());
        let mut bad = bytes.clone();
        bad[byte] ^= 1 << bit;
        let result = Frame::parse(c.link(), &bad);
        if masked(&c, byte, bit) {
            // A masked field: if the frame is still RoCEv2 at all, its ICRC still verifies.
            if let Ok(Some(f)) = result {
                prop_assert!(f.icrc().unwrap().ok(), "masked bit {} of byte {}", bit, byte);
            }
        } else {
            let accepted = matches!(&result, Ok(Some(f)) if f.verified_packet().is_ok());
            prop_assert!(!accepted, "bit {} of byte {} flipped and accepted", bit, byte);
        }
    }
}
