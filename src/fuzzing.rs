//! Bodies of the fuzz targets in `fuzz/`, kept in the library so that `cargo test` can replay
//! their seed corpus on stable Rust through exactly the code the fuzzer runs. Each function
//! takes arbitrary bytes, must never panic, and asserts the invariants that hold for any input.

use crate::wire::{Frame, LinkType, PacketRepr};

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
}

/// Emitting a parsed packet and parsing the result gives the same packet back.
fn check_reemit(p: &PacketRepr) {
    let mut buf = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut buf).expect("a parsed packet re-emits");
    assert_eq!(n, buf.len());
    let again = PacketRepr::parse(&buf).expect("a re-emitted packet parses");
    assert_eq!(&again, p);
}
