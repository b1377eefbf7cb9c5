//! Packet capture files: reading classic pcap and pcapng ([`reader`]) and writing classic pcap
//! ([`pcap_writer`]), so that softroce's traffic can be inspected with `softroce decode`,
//! tshark or Wireshark.

pub mod pcap_writer;
pub mod reader;

pub use pcap_writer::PcapWriter;
pub use reader::{CaptureError, CaptureReader, CapturedFrame};
