//! Tests of `reader.rs` (moved out of it as they were).

use super::*;
use crate::capture::PcapWriter;

/// Collects (number, ts, linktype, interface, orig_len, data) until the end or an error.
type Rec = (u64, Duration, u32, u32, u32, Vec<u8>);

fn read_all(bytes: &[u8]) -> (Vec<Rec>, Option<CaptureError>) {
    let mut out = Vec::new();
    let mut r = match CaptureReader::new(bytes) {
        Ok(r) => r,
        Err(e) => return (out, Some(e)),
    };
    loop {
        match r.next_frame() {
            Ok(Some(f)) => out.push((
                f.number,
                f.ts,
                f.linktype,
                f.interface,
                f.orig_len,
                f.data.to_vec(),
            )),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

fn sample_pcap() -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
    w.write_frame(Duration::new(100, 5_000), &[1, 2, 3])
        .unwrap();
    w.write_frame(Duration::new(101, 0), &[]).unwrap();
    w.write_frame(Duration::new(102, 999_999_000), &[9; 70])
        .unwrap();
    w.into_inner().unwrap()
}

/// Hand-written classic pcap in any byte order and magic.
fn pcap(big: bool, magic: u32, link: u32, recs: &[(u32, u32, &[u8], u32)]) -> Vec<u8> {
    let p32 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let p16 = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut b = Vec::new();
    b.extend(p32(magic));
    b.extend(p16(2));
    b.extend(p16(4));
    b.extend([0; 8]);
    b.extend(p32(65535));
    b.extend(p32(link));
    for &(s, frac, data, orig) in recs {
        b.extend(p32(s));
        b.extend(p32(frac));
        b.extend(p32(data.len() as u32));
        b.extend(p32(orig));
        if magic == PCAP_MAGIC_MODIFIED {
            b.extend([0; 8]);
        }
        b.extend(data);
    }
    b
}

fn block(big: bool, btype: u32, body: &[u8]) -> Vec<u8> {
    let p32 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let padded = body.len().div_ceil(4) * 4;
    let total = (12 + padded) as u32;
    let mut b = Vec::new();
    b.extend(p32(btype));
    b.extend(p32(total));
    b.extend(body);
    b.resize(8 + padded, 0);
    b.extend(p32(total));
    b
}

fn shb(big: bool) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(if big {
        PCAPNG_BOM.to_be_bytes()
    } else {
        PCAPNG_BOM.to_le_bytes()
    });
    let p16 = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    body.extend(p16(1));
    body.extend(p16(0));
    body.extend((-1i64).to_le_bytes());
    block(big, PCAPNG_SHB, &body)
}

fn idb(big: bool, link: u16, snaplen: u32, opts: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(if big {
        link.to_be_bytes()
    } else {
        link.to_le_bytes()
    });
    body.extend([0, 0]);
    body.extend(if big {
        snaplen.to_be_bytes()
    } else {
        snaplen.to_le_bytes()
    });
    body.extend(opts);
    block(big, BLOCK_IDB, &body)
}

fn epb(big: bool, iface: u32, ticks: u64, data: &[u8], orig: u32) -> Vec<u8> {
    let p32 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut body = Vec::new();
    body.extend(p32(iface));
    body.extend(p32((ticks >> 32) as u32));
    body.extend(p32(ticks as u32));
    body.extend(p32(data.len() as u32));
    body.extend(p32(orig));
    body.extend(data);
    block(big, BLOCK_EPB, &body)
}

#[test]
fn reads_what_the_writer_wrote() {
    let (recs, err) = read_all(&sample_pcap());
    assert!(err.is_none(), "{err:?}");
    assert_eq!(recs.len(), 3);
    assert_eq!(
        recs[0],
        (1, Duration::new(100, 5_000), 1, 0, 3, vec![1, 2, 3])
    );
    assert_eq!(recs[1].5, Vec::<u8>::new());
    assert_eq!(recs[2].0, 3);
    assert_eq!(recs[2].1, Duration::new(102, 999_999_000));
    let f = sample_pcap();
    let r = CaptureReader::new(&f[..]).unwrap();
    assert_eq!(
        r.format(),
        CaptureFormat::Pcap {
            big_endian: false,
            nanosecond: false,
            version: (2, 4),
            linktype: 1
        }
    );
}

#[test]
fn byte_orders_and_magics() {
    for big in [false, true] {
        for magic in [PCAP_MAGIC_MICROS, PCAP_MAGIC_NANOS, PCAP_MAGIC_MODIFIED] {
            let f = pcap(
                big,
                magic,
                101,
                &[(7, 250, &[0xAB; 5], 60), (8, 0, &[1], 1)],
            );
            let (recs, err) = read_all(&f);
            assert!(err.is_none(), "{big} {magic:x}: {err:?}");
            assert_eq!(recs.len(), 2);
            let nanos = if magic == PCAP_MAGIC_NANOS {
                250
            } else {
                250_000
            };
            assert_eq!(
                recs[0],
                (1, Duration::new(7, nanos), 101, 0, 60, vec![0xAB; 5])
            );
            assert_eq!(recs[1].5, vec![1]);
        }
    }
}

#[test]
fn unsupported_link_types_are_frames_without_a_link() {
    let f = pcap(false, PCAP_MAGIC_MICROS, 147, &[(1, 0, &[1, 2], 2)]);
    let mut r = CaptureReader::new(&f[..]).unwrap();
    let fr = r.next_frame().unwrap().unwrap();
    assert_eq!(fr.link, None);
    assert_eq!(fr.linktype, 147);
    assert!(r.next_frame().unwrap().is_none());
    assert!(r.next_frame().unwrap().is_none());
}

#[test]
fn pcapng_interfaces_blocks_and_sections() {
    let mut f = shb(false);
    // Interface 0: Ethernet, default microseconds. Interface 1: raw IP, nanoseconds, with
    // a 10-second offset.
    f.extend(idb(false, 1, 0, &[]));
    let mut opts = Vec::new();
    opts.extend(9u16.to_le_bytes());
    opts.extend(1u16.to_le_bytes());
    opts.extend([9, 0, 0, 0]);
    opts.extend(14u16.to_le_bytes());
    opts.extend(8u16.to_le_bytes());
    opts.extend(10u64.to_le_bytes());
    opts.extend([0, 0, 0, 0]);
    f.extend(idb(false, 101, 0, &opts));
    f.extend(epb(false, 0, 1_500_000, &[1, 2, 3], 3));
    f.extend(block(false, 4, &[0; 9])); // name resolution: skipped
    f.extend(epb(false, 1, 2_000_000_001, &[4; 8], 100));
    f.extend(block(false, 5, &[0; 16])); // interface statistics: skipped
                                         // Simple packet block on interface 0 (its data padded to 4).
    let mut spb = 5u32.to_le_bytes().to_vec();
    spb.extend([5; 5]);
    f.extend(block(false, BLOCK_SPB, &spb));
    // Obsolete packet block.
    let mut pb = Vec::new();
    pb.extend(1u16.to_le_bytes());
    pb.extend(0u16.to_le_bytes());
    pb.extend(0u32.to_le_bytes());
    pb.extend(3_000_000u32.to_le_bytes());
    pb.extend(2u32.to_le_bytes());
    pb.extend(2u32.to_le_bytes());
    pb.extend([6, 6]);
    f.extend(block(false, BLOCK_PB, &pb));
    // A second, big-endian section with binary timestamp resolution.
    f.extend(shb(true));
    let mut opts = Vec::new();
    opts.extend(9u16.to_be_bytes());
    opts.extend(1u16.to_be_bytes());
    opts.extend([0x81, 0, 0, 0]);
    f.extend(idb(true, 1, 0, &opts));
    f.extend(epb(true, 0, 5, &[7], 1));

    let (recs, err) = read_all(&f);
    assert!(err.is_none(), "{err:?}");
    let summary: Vec<_> = recs
        .iter()
        .map(|r| (r.0, r.1, r.2, r.3, r.5.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, Duration::new(1, 500_000_000), 1, 0, vec![1, 2, 3]),
            (2, Duration::new(12, 1), 101, 1, vec![4; 8]),
            (3, Duration::ZERO, 1, 0, vec![5; 5]),
            (4, Duration::new(10, 3_000_000), 101, 1, vec![6, 6]),
            (5, Duration::new(2, 500_000_000), 1, 0, vec![7]),
        ]
    );
    assert_eq!(recs[1].4, 100);
    let r = CaptureReader::new(&f[..]).unwrap();
    assert_eq!(r.format(), CaptureFormat::PcapNg);
}

#[test]
fn pcapng_errors() {
    // A packet before any interface.
    let mut f = shb(false);
    f.extend(epb(false, 0, 0, &[1], 1));
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
    // Captured length beyond the block.
    let mut f = shb(false);
    f.extend(idb(false, 1, 0, &[]));
    let mut b = epb(false, 0, 0, &[1; 4], 4);
    b[20..24].copy_from_slice(&40u32.to_le_bytes());
    f.extend(b);
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
    // Trailing length mismatch.
    let mut f = shb(false);
    let mut b = idb(false, 1, 0, &[]);
    let n = b.len();
    b[n - 4] ^= 4;
    f.extend(b);
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
    // Block length not a multiple of 4, or too small.
    for bad in [13u32, 8] {
        let mut f = shb(false);
        f.extend(1u32.to_le_bytes());
        f.extend(bad.to_le_bytes());
        f.extend([0; 16]);
        assert!(matches!(
            read_all(&f).1,
            Some(CaptureError::Malformed { .. })
        ));
    }
    // Bad byte-order magic.
    let mut f = shb(false);
    f[8] ^= 0xFF;
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
    // A huge packet block length is refused without allocating it.
    let mut f = shb(false);
    f.extend(6u32.to_le_bytes());
    f.extend(0xFFFF_FFF0u32.to_le_bytes());
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
}

#[test]
fn not_a_capture_and_empty() {
    assert!(matches!(read_all(&[]).1, Some(CaptureError::Empty)));
    assert!(matches!(
        read_all(b"hello, world").1,
        Some(CaptureError::NotACapture { .. })
    ));
    assert!(matches!(
        read_all(b"he").1,
        Some(CaptureError::NotACapture { .. })
    ));
    assert!(matches!(
        read_all(&[0xD4, 0xC3]).1,
        Some(CaptureError::Truncated { .. })
    ));
    let mut f = sample_pcap();
    f[4] = 3; // version 3.4
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
    let e = read_all(b"GIF89a").1.unwrap().to_string();
    assert!(e.contains("not a pcap or pcapng"), "{e}");
}

#[test]
fn huge_record_length_is_refused() {
    let mut f = pcap(false, PCAP_MAGIC_MICROS, 1, &[(0, 0, &[1], 1)]);
    f[32..36].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
    assert!(matches!(
        read_all(&f).1,
        Some(CaptureError::Malformed { .. })
    ));
}

/// Every prefix of a valid file is either a clean end (at a record boundary) or a
/// `Truncated` error after the frames it fully contains.
#[test]
fn every_truncation_is_detected() {
    let mut ng = shb(false);
    ng.extend(idb(false, 1, 0, &[]));
    ng.extend(epb(false, 0, 1, &[1, 2, 3], 3));
    ng.extend(block(false, 4, &[0; 8]));
    ng.extend(epb(false, 0, 2, &[4; 9], 9));
    for file in [sample_pcap(), ng] {
        let (full, err) = read_all(&file);
        assert!(err.is_none());
        let mut boundaries = vec![];
        for n in 0..=file.len() {
            let (recs, err) = read_all(&file[..n]);
            assert!(recs.len() <= full.len());
            for (a, b) in recs.iter().zip(&full) {
                assert_eq!(a, b);
            }
            match err {
                None => boundaries.push(n),
                Some(CaptureError::Truncated { after_frame, .. }) => {
                    assert_eq!(after_frame, recs.len() as u64, "prefix {n}")
                }
                Some(CaptureError::Empty) => assert_eq!(n, 0),
                Some(e) => panic!("prefix {n}: {e}"),
            }
        }
        assert!(boundaries.contains(&file.len()));
    }
}

/// A reader that returns one byte per call.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.is_empty() || buf.is_empty() {
            return Ok(0);
        }
        buf[0] = self.0[0];
        self.0 = &self.0[1..];
        Ok(1)
    }
}

#[test]
fn short_reads_are_handled() {
    let f = sample_pcap();
    let mut r = CaptureReader::new(Trickle(&f)).unwrap();
    let mut n = 0;
    while let Some(fr) = r.next_frame().unwrap() {
        n += 1;
        assert_eq!(fr.number, n);
    }
    assert_eq!(n, 3);
    assert_eq!(r.frames_read(), 3);
    assert_eq!(r.offset(), f.len() as u64);
}

#[test]
fn timestamp_resolutions() {
    assert_eq!(
        TsResol::Decimal(6).to_duration(1_000_001),
        Duration::new(1, 1_000)
    );
    assert_eq!(TsResol::Decimal(12).to_duration(1_000), Duration::new(0, 1));
    assert_eq!(
        TsResol::Binary(1).to_duration(3),
        Duration::new(1, 500_000_000)
    );
    assert_eq!(TsResol::Decimal(200).to_duration(u64::MAX), Duration::ZERO);
    assert_eq!(
        TsResol::Decimal(0).to_duration(u64::MAX).as_secs(),
        u64::MAX
    );
    assert_eq!(apply_offset(Duration::new(5, 0), -10), Duration::ZERO);
}
