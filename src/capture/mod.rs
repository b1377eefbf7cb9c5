//! Packet capture files: reading classic pcap and pcapng ([`reader`]) and writing classic pcap
//! ([`pcap_writer`]), so that softroce's traffic can be inspected with `softroce decode`,
//! tshark or Wireshark.

pub mod pcap_writer;
pub mod reader;

pub use pcap_writer::PcapWriter;
pub use reader::{CaptureError, CaptureReader, CapturedFrame};

/// Magic number of a classic pcap file with microsecond timestamps (the one [`PcapWriter`]
/// writes), as a `u32` in the file's byte order.
pub const PCAP_MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// Magic number of a classic pcap file with nanosecond timestamps.
pub const PCAP_MAGIC_NANOS: u32 = 0xA1B2_3C4D;
/// Magic number of the "modified" (Kuznetzov) classic pcap format, whose records carry extra
/// fields.
pub const PCAP_MAGIC_MODIFIED: u32 = 0xA1B2_CD34;
