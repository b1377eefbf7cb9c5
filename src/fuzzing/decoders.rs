//! Fuzz targets `packet_decoder` and `capture_reader`: arbitrary bytes into the RoCEv2 frame
//! and packet decoders (and the CM MAD decoder), and into the pcap/pcapng reader and the decode
//! pipeline.

use crate::capture::CaptureReader;
use crate::decode::Decoder;
use crate::wire::cm::CmMessage;
use crate::wire::cma::CmaHeader;
use crate::wire::{mad, Frame, LinkType, PacketRepr};

/// Feeds arbitrary bytes to the packet decoder as a frame of every link type and as a bare
/// RoCE UDP payload. Whatever parses must re-emit to bytes that parse to the same packet.
pub fn packet_decoder(data: &[u8]) {
    for link in [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Null,
    ] {
        if let Ok(Some(frame)) = Frame::parse(link, data) {
            let _ = frame.icrc();
            if let Ok(p) = frame.packet() {
                check_reemit(&p);
            }
            let _ = frame.verified_packet();
        }
    }
    if let Ok(p) = PacketRepr::parse(data) {
        check_reemit(&p);
    }
    check_cm(data);
}

/// A CM MAD that parses re-emits to the same message; so does rdma_cm's header. The MAD
/// header's status, class-specific and attribute-modifier fields are the sender's to set and
/// the CM reads none of them (Linux's CM puts an ECE vendor value in the attribute modifier
/// of a REQ or REP); softroce's CM sends them as 0, so they are not compared.
fn check_cm(data: &[u8]) {
    if let Ok((hdr, msg)) = CmMessage::parse(data) {
        let mut buf = [0u8; mad::LEN];
        msg.emit(hdr.tid, &mut buf)
            .expect("a parsed CM message re-emits");
        let (hdr2, again) = CmMessage::parse(&buf).expect("a re-emitted CM message parses");
        let sent_as = mad::MadRepr {
            status: 0,
            class_specific: 0,
            attr_mod: 0,
            ..hdr
        };
        assert_eq!((hdr2, again), (sent_as, msg));
    }
    if let Ok(h) = CmaHeader::parse(data) {
        let mut buf = [0u8; CmaHeader::LEN];
        h.emit(&mut buf).expect("a parsed rdma_cm header re-emits");
        assert_eq!(CmaHeader::parse(&buf), Ok(h));
    }
}

/// Emitting a parsed packet and parsing the result gives the same packet back.
fn check_reemit(p: &PacketRepr) {
    let mut buf = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut buf).expect("a parsed packet re-emits");
    assert_eq!(n, buf.len());
    let again = PacketRepr::parse(&buf).expect("a re-emitted packet parses");
    assert_eq!(&again, p);
}

/// Feeds arbitrary bytes to the pcap/pcapng reader and every frame it yields to the decoder
/// behind `softroce decode`, rendering each report as text and JSON. The reader must end with
/// frames or a typed error, never a panic, and must not loop: it has to consume input.
pub fn capture_reader(data: &[u8]) {
    let Ok(mut reader) = CaptureReader::new(std::io::Cursor::new(data)) else {
        return;
    };
    let mut decoder = Decoder::new(crate::wire::ROCE_V2_UDP_PORT);
    // Every frame takes at least a record header, so there cannot be more frames than bytes.
    for _ in 0..=data.len() {
        match reader.next_frame() {
            Ok(Some(frame)) => {
                if let Some(report) = decoder.decode(&frame) {
                    let _ = report.text_line();
                    let _ = report.to_json();
                }
            }
            Ok(None) | Err(_) => {
                let report = decoder.analyzer().report();
                let _ = report.text();
                let _ = report.to_json();
                return;
            }
        }
    }
    panic!("the capture reader yielded more frames than the input has bytes");
}
