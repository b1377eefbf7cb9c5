//! A classic pcap writer (the format of libpcap 2.4, microsecond timestamps).
//!
//! Records are written straight to the underlying writer with no per-frame allocation; wrap
//! a file in a `BufWriter` for throughput.

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::PCAP_MAGIC_MICROS;
use crate::wire::LinkType;

/// Largest frame a record may hold (the snap length written in the file header).
pub const SNAPLEN: u32 = 262_144;

/// Writes frames to a classic pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    frames: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header for `link` and returns the writer.
    pub fn new(mut out: W, link: LinkType) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&PCAP_MAGIC_MICROS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // bytes 8..16: thiszone and sigfigs, both zero
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&link.to_pcap().to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, frames: 0 })
    }

    /// Appends one frame with a timestamp measured from the Unix epoch. Frames longer than
    /// [`SNAPLEN`] are truncated in the file (their original length is recorded).
    pub fn write_frame(&mut self, since_epoch: Duration, frame: &[u8]) -> io::Result<()> {
        let caplen = frame.len().min(SNAPLEN as usize);
        let mut r = [0u8; 16];
        let secs = u32::try_from(since_epoch.as_secs()).unwrap_or(u32::MAX);
        r[0..4].copy_from_slice(&secs.to_le_bytes());
        r[4..8].copy_from_slice(&since_epoch.subsec_micros().to_le_bytes());
        r[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        r[12..16].copy_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_le_bytes());
        self.out.write_all(&r)?;
        self.out.write_all(&frame[..caplen])?;
        self.frames += 1;
        Ok(())
    }

    /// Appends one frame stamped with the current wall-clock time.
    pub fn write_frame_now(&mut self, frame: &[u8]) -> io::Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.write_frame(now, frame)
    }

    /// Number of frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_layout() {
        let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
        w.write_frame(Duration::new(0x0102_0304, 5_000), &[0xAA, 0xBB, 0xCC])
            .unwrap();
        assert_eq!(w.frames(), 1);
        let b = w.into_inner().unwrap();
        assert_eq!(
            b,
            [
                0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x04, 0x00,
                1, 0, 0, 0, // file header: v2.4, snaplen 262144, Ethernet
                0x04, 0x03, 0x02, 0x01, 0x05, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0,
                0, // record header
                0xAA, 0xBB, 0xCC,
            ]
        );
    }
}
