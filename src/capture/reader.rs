//! A streaming reader for classic pcap and pcapng captures.
//!
//! [`CaptureReader`] works over any [`std::io::Read`] and never holds more than one record in
//! memory, so captures of any size can be read. The format is detected from the first four bytes:
//!
//! - classic pcap in either byte order, with microsecond (`0xa1b2c3d4`) or nanosecond
//!   (`0xa1b23c4d`) timestamps, and the "modified" (Kuznetzov) variant (`0xa1b2cd34`, whose
//!   record headers are 24 bytes long);
//! - pcapng, with any number of sections (each with its own byte order) and interfaces (each with
//!   its own link type, timestamp resolution and offset). Enhanced, simple and the obsolete
//!   packet blocks yield frames; every other block is skipped.
//!
//! Damage is reported as a typed [`CaptureError`]: a file that ends in the middle of a header,
//! record or block is [`CaptureError::Truncated`] (frames read before that point have already
//! been returned), inconsistent lengths are [`CaptureError::Malformed`]. Nothing here panics on
//! any input, and no allocation is sized by an unchecked length from the file.
//!
//! Why not the pcap-parser crate (0.17, checked 2026-11): its readers refuse a big-endian
//! "modified" pcap (`HeaderNotRecognized`), fail to open a stream whose first `read` returns
//! fewer than 24 bytes (a pipe; `Incomplete`), and turn every I/O error into a bare `ReadError`,
//! so [`CaptureError::Io`] would lose its cause.

use std::fmt;
use std::io::{self, Read};
use std::time::Duration;

use super::{PCAP_MAGIC_MICROS, PCAP_MAGIC_MODIFIED, PCAP_MAGIC_NANOS};
use crate::wire::LinkType;

/// Largest record or block body this reader accepts (64 MiB). Real frames are at most a few
/// hundred KiB; a larger length means the file is corrupt.
pub const MAX_RECORD_LEN: usize = 64 << 20;

const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_BOM: u32 = 0x1A2B_3C4D;

const BLOCK_IDB: u32 = 1;
const BLOCK_PB: u32 = 2;
const BLOCK_SPB: u32 = 3;
const BLOCK_EPB: u32 = 6;

/// Why a capture could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum CaptureError {
    /// The underlying reader failed.
    Io(io::Error),
    /// The file is empty.
    Empty,
    /// The file does not start with a pcap or pcapng magic number.
    NotACapture {
        /// The first bytes of the file (up to four).
        magic: Vec<u8>,
    },
    /// The file ends in the middle of a header, record or block.
    Truncated {
        /// Number of complete frames read before the truncation point.
        after_frame: u64,
        /// Byte offset in the file where the incomplete part starts.
        offset: u64,
        /// What was being read ("the file header", "a record", ...).
        context: &'static str,
    },
    /// Lengths or fields in the file are inconsistent.
    Malformed {
        /// Byte offset of the offending header, record or block.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Io(e) => write!(f, "read error: {e}"),
            CaptureError::Empty => f.write_str("the file is empty (not a pcap or pcapng capture)"),
            CaptureError::NotACapture { magic } => {
                write!(f, "not a pcap or pcapng capture (starts with")?;
                for b in magic {
                    write!(f, " {b:02x}")?;
                }
                f.write_str(")")
            }
            CaptureError::Truncated {
                after_frame,
                offset,
                context,
            } => write!(
                f,
                "capture truncated in {context} at byte offset {offset} (after frame {after_frame})"
            ),
            CaptureError::Malformed { offset, reason } => {
                write!(f, "malformed capture at byte offset {offset}: {reason}")
            }
        }
    }
}

impl std::error::Error for CaptureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CaptureError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for CaptureError {
    fn from(e: io::Error) -> Self {
        CaptureError::Io(e)
    }
}

/// The container format of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic libpcap format: one file header, then records (magic 0xa1b2c3d4, 0xa1b23c4d
    /// for nanosecond timestamps or 0xa1b2cd34 for the modified format, in either byte order).
    Pcap {
        /// Whether the file was written big-endian.
        big_endian: bool,
        /// Whether timestamps have nanosecond (rather than microsecond) resolution.
        nanosecond: bool,
        /// The file format version (major, minor), normally (2, 4).
        version: (u16, u16),
        /// The raw LINKTYPE_* value of the file header.
        linktype: u32,
    },
    /// pcapng: blocks, each interface with its own link type and timestamp resolution.
    PcapNg,
}

/// One frame read from a capture. The data is borrowed from the reader's buffer and is valid
/// until the next call to [`CaptureReader::next_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedFrame<'a> {
    /// 1-based position of the frame in the file (as Wireshark numbers them).
    pub number: u64,
    /// Timestamp, from the Unix epoch.
    pub ts: Duration,
    /// The link type, or `None` when it is one softroce cannot decode.
    pub link: Option<LinkType>,
    /// The raw LINKTYPE_* value.
    pub linktype: u32,
    /// The pcapng interface the frame was captured on (always 0 for classic pcap).
    pub interface: u32,
    /// The frame's length on the wire (the captured data may be shorter: see the snap length).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

impl CapturedFrame<'_> {
    /// Whether the capture holds fewer bytes than the frame had on the wire.
    pub fn is_snapped(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }
}

/// Timestamp resolution of a pcapng interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TsResol {
    /// Units of 10^-n seconds.
    Decimal(u8),
    /// Units of 2^-n seconds.
    Binary(u8),
}

impl TsResol {
    fn to_duration(self, ticks: u64) -> Duration {
        let ticks = u128::from(ticks);
        let nanos: u128 = match self {
            TsResol::Decimal(n) if n <= 9 => ticks * 10u128.pow(9 - u32::from(n)),
            TsResol::Decimal(n) if n <= 38 => ticks / 10u128.pow(u32::from(n) - 9),
            TsResol::Decimal(_) => 0,
            TsResol::Binary(n) if n < 64 => (ticks * 1_000_000_000) >> n,
            TsResol::Binary(_) => 0,
        };
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        Duration::new(secs, (nanos % 1_000_000_000) as u32)
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    tsresol: TsResol,
    tsoffset: i64,
}

#[derive(Debug)]
enum Kind {
    Pcap {
        big_endian: bool,
        nanosecond: bool,
        modified: bool,
        version: (u16, u16),
        linktype: u32,
    },
    PcapNg {
        big_endian: bool,
        interfaces: Vec<Interface>,
    },
}

/// Reads frames from a classic pcap or pcapng stream; see the [module docs](self).
#[derive(Debug)]
pub struct CaptureReader<R: Read> {
    inner: R,
    kind: Kind,
    buf: Vec<u8>,
    frames: u64,
    offset: u64,
    finished: bool,
}

fn u16_of(big_endian: bool, b: [u8; 2]) -> u16 {
    if big_endian {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

fn u32_of(big_endian: bool, b: [u8; 4]) -> u32 {
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// Little helper over a byte slice whose length has not necessarily been checked: every read
/// returns `None` past the end.
#[derive(Clone, Copy)]
struct Fields<'a> {
    b: &'a [u8],
    big_endian: bool,
}

impl Fields<'_> {
    fn u16(&self, at: usize) -> Option<u16> {
        let s = self.b.get(at..at.checked_add(2)?)?;
        Some(u16_of(self.big_endian, [s[0], s[1]]))
    }
    fn u32(&self, at: usize) -> Option<u32> {
        let s = self.b.get(at..at.checked_add(4)?)?;
        Some(u32_of(self.big_endian, [s[0], s[1], s[2], s[3]]))
    }
    fn u64(&self, at: usize) -> Option<u64> {
        let hi = u64::from(self.u32(at)?);
        let lo = u64::from(self.u32(at.checked_add(4)?)?);
        Some(if self.big_endian {
            (hi << 32) | lo
        } else {
            (lo << 32) | hi
        })
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn is_magic_prefix(head: &[u8]) -> bool {
    let mut magics = Vec::new();
    for m in [
        PCAP_MAGIC_MICROS,
        PCAP_MAGIC_NANOS,
        PCAP_MAGIC_MODIFIED,
        PCAPNG_SHB,
    ] {
        magics.push(m.to_le_bytes());
        magics.push(m.to_be_bytes());
    }
    magics.iter().any(|m| m.starts_with(head))
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header (pcap) or first section header block (pcapng) and returns a reader
    /// positioned at the first frame.
    pub fn new(mut inner: R) -> Result<Self, CaptureError> {
        let mut magic = [0u8; 4];
        let n = read_full(&mut inner, &mut magic)?;
        if n == 0 {
            return Err(CaptureError::Empty);
        }
        if n < 4 {
            return Err(if is_magic_prefix(&magic[..n]) {
                CaptureError::Truncated {
                    after_frame: 0,
                    offset: 0,
                    context: "the file header",
                }
            } else {
                CaptureError::NotACapture {
                    magic: magic[..n].to_vec(),
                }
            });
        }
        let le = u32::from_le_bytes(magic);
        let be = u32::from_be_bytes(magic);
        let mut reader = CaptureReader {
            inner,
            kind: Kind::PcapNg {
                big_endian: false,
                interfaces: Vec::new(),
            },
            buf: Vec::new(),
            frames: 0,
            offset: 4,
            finished: false,
        };
        if le == PCAPNG_SHB {
            let mut h = [0u8; 8];
            reader.read_exact_at(&mut h, 0, "the section header block", false)?;
            reader.finish_section_header(0, [h[0], h[1], h[2], h[3]], [h[4], h[5], h[6], h[7]])?;
            return Ok(reader);
        }
        let (big_endian, m) = match (le, be) {
            (PCAP_MAGIC_MICROS | PCAP_MAGIC_NANOS | PCAP_MAGIC_MODIFIED, _) => (false, le),
            (_, PCAP_MAGIC_MICROS | PCAP_MAGIC_NANOS | PCAP_MAGIC_MODIFIED) => (true, be),
            _ => {
                return Err(CaptureError::NotACapture {
                    magic: magic.to_vec(),
                })
            }
        };
        let mut h = [0u8; 20];
        if read_full(&mut reader.inner, &mut h)? < h.len() {
            return Err(CaptureError::Truncated {
                after_frame: 0,
                offset: 0,
                context: "the file header",
            });
        }
        reader.offset = 24;
        let f = Fields { b: &h, big_endian };
        let version = (f.u16(0).unwrap_or(0), f.u16(2).unwrap_or(0));
        if version.0 != 2 {
            return Err(CaptureError::Malformed {
                offset: 4,
                reason: format!("unsupported pcap version {}.{}", version.0, version.1),
            });
        }
        // The top four bits of the link-type field carry FCS information.
        let linktype = f.u32(16).unwrap_or(0) & 0x0FFF_FFFF;
        reader.kind = Kind::Pcap {
            big_endian,
            nanosecond: m == PCAP_MAGIC_NANOS,
            modified: m == PCAP_MAGIC_MODIFIED,
            version,
            linktype,
        };
        Ok(reader)
    }

    /// The container format.
    pub fn format(&self) -> CaptureFormat {
        match self.kind {
            Kind::Pcap {
                big_endian,
                nanosecond,
                version,
                linktype,
                ..
            } => CaptureFormat::Pcap {
                big_endian,
                nanosecond,
                version,
                linktype,
            },
            Kind::PcapNg { .. } => CaptureFormat::PcapNg,
        }
    }

    /// Number of frames returned so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Bytes consumed from the input so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn truncated(&self, offset: u64, context: &'static str) -> CaptureError {
        CaptureError::Truncated {
            after_frame: self.frames,
            offset,
            context,
        }
    }

    /// Reads exactly `buf.len()` bytes, or fails as truncated; `Ok(false)` when the input ended
    /// cleanly before the first byte and `eof_ok` is set.
    fn read_exact_at(
        &mut self,
        buf: &mut [u8],
        start: u64,
        context: &'static str,
        eof_ok: bool,
    ) -> Result<bool, CaptureError> {
        let n = read_full(&mut self.inner, buf)?;
        self.offset += n as u64;
        if n == 0 && eof_ok {
            return Ok(false);
        }
        if n < buf.len() {
            return Err(self.truncated(start, context));
        }
        Ok(true)
    }

    /// Reads `len` bytes into the internal buffer.
    fn read_body(
        &mut self,
        len: usize,
        start: u64,
        context: &'static str,
    ) -> Result<(), CaptureError> {
        self.buf.clear();
        // `take` + `read_to_end` grows the buffer with the data actually present, so a bogus
        // length in a truncated file does not allocate more than the file holds.
        let n = (&mut self.inner)
            .take(len as u64)
            .read_to_end(&mut self.buf)?;
        self.offset += n as u64;
        if n < len {
            return Err(self.truncated(start, context));
        }
        Ok(())
    }

    /// Skips `len` bytes without buffering them.
    fn skip(&mut self, len: u64, start: u64, context: &'static str) -> Result<(), CaptureError> {
        let n = io::copy(&mut (&mut self.inner).take(len), &mut io::sink())?;
        self.offset += n;
        if n < len {
            return Err(self.truncated(start, context));
        }
        Ok(())
    }

    /// Returns the next frame, `Ok(None)` at the end of the capture. After an error, or the end,
    /// every further call returns `Ok(None)`.
    pub fn next_frame(&mut self) -> Result<Option<CapturedFrame<'_>>, CaptureError> {
        if self.finished {
            return Ok(None);
        }
        let r = match self.kind {
            Kind::Pcap { .. } => self.next_pcap(),
            Kind::PcapNg { .. } => self.next_pcapng(),
        };
        match r {
            Ok(Some(meta)) => {
                self.frames += 1;
                let data = self
                    .buf
                    .get(meta.start..meta.start + meta.len)
                    .unwrap_or(&[]);
                Ok(Some(CapturedFrame {
                    number: self.frames,
                    ts: meta.ts,
                    link: LinkType::from_pcap(meta.linktype),
                    linktype: meta.linktype,
                    interface: meta.interface,
                    orig_len: meta.orig_len,
                    data,
                }))
            }
            Ok(None) => {
                self.finished = true;
                Ok(None)
            }
            Err(e) => {
                self.finished = true;
                Err(e)
            }
        }
    }

    fn next_pcap(&mut self) -> Result<Option<FrameMeta>, CaptureError> {
        let Kind::Pcap {
            big_endian,
            nanosecond,
            modified,
            linktype,
            ..
        } = self.kind
        else {
            return Ok(None);
        };
        let start = self.offset;
        let mut h = [0u8; 24];
        let hlen = if modified { 24 } else { 16 };
        if !self.read_exact_at(&mut h[..hlen], start, "a record header", true)? {
            return Ok(None);
        }
        let f = Fields { b: &h, big_endian };
        let secs = u64::from(f.u32(0).unwrap_or(0));
        let frac = u64::from(f.u32(4).unwrap_or(0));
        let caplen = f.u32(8).unwrap_or(0);
        let orig_len = f.u32(12).unwrap_or(0);
        let caplen_usize = caplen as usize;
        if caplen_usize > MAX_RECORD_LEN {
            return Err(CaptureError::Malformed {
                offset: start,
                reason: format!(
                    "record of {caplen} bytes exceeds the {MAX_RECORD_LEN}-byte limit (corrupt \
                     record header?)"
                ),
            });
        }
        self.read_body(caplen_usize, start, "a record")?;
        let nanos = if nanosecond { frac } else { frac * 1000 };
        let ts = Duration::from_secs(secs) + Duration::from_nanos(nanos);
        Ok(Some(FrameMeta {
            ts,
            linktype,
            interface: 0,
            orig_len,
            start: 0,
            len: caplen_usize,
        }))
    }

    /// Reads the rest of a section header block whose type, length and byte-order magic have
    /// been consumed, and starts a new section.
    fn finish_section_header(
        &mut self,
        start: u64,
        len: [u8; 4],
        bom: [u8; 4],
    ) -> Result<(), CaptureError> {
        let big_endian = if u32::from_be_bytes(bom) == PCAPNG_BOM {
            true
        } else if u32::from_le_bytes(bom) == PCAPNG_BOM {
            false
        } else {
            return Err(CaptureError::Malformed {
                offset: start,
                reason: "pcapng section header block with a bad byte-order magic".into(),
            });
        };
        let total = u32_of(big_endian, len) as usize;
        if total < 28 || total % 4 != 0 || total > MAX_RECORD_LEN {
            return Err(CaptureError::Malformed {
                offset: start,
                reason: format!("pcapng section header block of invalid length {total}"),
            });
        }
        // Version, section length, options and the trailing length.
        self.read_body(total - 12, start, "a section header block")?;
        let f = Fields {
            b: &self.buf,
            big_endian,
        };
        let major = f.u16(0).unwrap_or(0);
        let trailer = f.u32(total - 16).unwrap_or(0) as usize;
        if trailer != total {
            return Err(block_len_mismatch(start, total, trailer));
        }
        if major != 1 {
            return Err(CaptureError::Malformed {
                offset: start,
                reason: format!("unsupported pcapng version {major}"),
            });
        }
        self.kind = Kind::PcapNg {
            big_endian,
            interfaces: Vec::new(),
        };
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<FrameMeta>, CaptureError> {
        loop {
            let start = self.offset;
            let mut h = [0u8; 8];
            if !self.read_exact_at(&mut h, start, "a block header", true)? {
                return Ok(None);
            }
            let big_endian = match self.kind {
                Kind::PcapNg { big_endian, .. } => big_endian,
                Kind::Pcap { .. } => return Ok(None),
            };
            let btype = u32_of(big_endian, [h[0], h[1], h[2], h[3]]);
            if btype == PCAPNG_SHB {
                // A new section, whose byte order may differ from the previous one's.
                let mut bom = [0u8; 4];
                self.read_exact_at(&mut bom, start, "a section header block", false)?;
                self.finish_section_header(start, [h[4], h[5], h[6], h[7]], bom)?;
                continue;
            }
            let total = u32_of(big_endian, [h[4], h[5], h[6], h[7]]) as usize;
            if total < 12 || total % 4 != 0 {
                return Err(CaptureError::Malformed {
                    offset: start,
                    reason: format!("pcapng block of invalid length {total}"),
                });
            }
            let body_len = total - 12;
            if !matches!(btype, BLOCK_IDB | BLOCK_PB | BLOCK_SPB | BLOCK_EPB) {
                // Other blocks (name resolution, statistics, secrets, custom...) are skipped
                // without buffering, whatever their size.
                self.skip(body_len as u64, start, "a block")?;
                let mut t = [0u8; 4];
                self.read_exact_at(&mut t, start, "a block", false)?;
                let trailer = u32_of(big_endian, t) as usize;
                if trailer != total {
                    return Err(block_len_mismatch(start, total, trailer));
                }
                continue;
            }
            if total > MAX_RECORD_LEN {
                return Err(CaptureError::Malformed {
                    offset: start,
                    reason: format!(
                        "pcapng block of {total} bytes exceeds the {MAX_RECORD_LEN}-byte limit"
                    ),
                });
            }
            // Body and trailing length.
            self.read_body(total - 8, start, "a block")?;
            let trailer = Fields {
                b: &self.buf,
                big_endian,
            }
            .u32(body_len)
            .unwrap_or(0) as usize;
            if trailer != total {
                return Err(block_len_mismatch(start, total, trailer));
            }
            let f = Fields {
                b: self.buf.get(..body_len).unwrap_or(&[]),
                big_endian,
            };
            let Kind::PcapNg { interfaces, .. } = &mut self.kind else {
                return Ok(None);
            };
            if let Some(meta) = pcapng_block(btype, f, body_len, start, interfaces)? {
                return Ok(Some(meta));
            }
        }
    }
}

/// Reads a pcapng block of type `btype` (an interface description, enhanced, obsolete or
/// simple packet block) whose `body_len`-byte body `f` holds, the block starting at byte
/// `start` of the file: an interface description joins `interfaces` (None), a packet block
/// gives its frame.
fn pcapng_block(
    btype: u32,
    f: Fields,
    body_len: usize,
    start: u64,
    interfaces: &mut Vec<Interface>,
) -> Result<Option<FrameMeta>, CaptureError> {
    let malformed = |reason: String| CaptureError::Malformed {
        offset: start,
        reason,
    };
    let iface = |id: u32, interfaces: &[Interface]| {
        interfaces.get(id as usize).copied().ok_or_else(|| {
            malformed(format!(
                "packet block refers to interface {id}, but {} {} defined",
                interfaces.len(),
                if interfaces.len() == 1 { "is" } else { "are" }
            ))
        })
    };
    match btype {
        BLOCK_IDB => {
            let (Some(lt), Some(snaplen)) = (f.u16(0), f.u32(4)) else {
                return Err(malformed("interface description block too short".into()));
            };
            let mut i = Interface {
                linktype: u32::from(lt),
                snaplen,
                tsresol: TsResol::Decimal(6),
                tsoffset: 0,
            };
            parse_idb_options(f, 8, &mut i);
            interfaces.push(i);
            Ok(None)
        }
        BLOCK_EPB | BLOCK_PB => {
            let (id, rest) = if btype == BLOCK_EPB {
                (f.u32(0), 4)
            } else {
                (f.u16(0).map(u32::from), 4)
            };
            let (Some(id), Some(ts_hi), Some(ts_lo), Some(caplen), Some(orig_len)) = (
                id,
                f.u32(rest),
                f.u32(rest + 4),
                f.u32(rest + 8),
                f.u32(rest + 12),
            ) else {
                return Err(malformed("packet block too short".into()));
            };
            let i = iface(id, interfaces)?;
            let data_start = rest + 16;
            let caplen = caplen as usize;
            if caplen > body_len - data_start {
                return Err(malformed(format!(
                    "packet block claims {caplen} captured bytes but holds only {}",
                    body_len - data_start
                )));
            }
            let ticks = (u64::from(ts_hi) << 32) | u64::from(ts_lo);
            Ok(Some(FrameMeta {
                ts: apply_offset(i.tsresol.to_duration(ticks), i.tsoffset),
                linktype: i.linktype,
                interface: id,
                orig_len,
                start: data_start,
                len: caplen,
            }))
        }
        _ => {
            // Simple packet block: no timestamp, captured length implied.
            let Some(orig_len) = f.u32(0) else {
                return Err(malformed("simple packet block too short".into()));
            };
            let i = iface(0, interfaces)?;
            let mut caplen = (orig_len as usize).min(body_len - 4);
            if i.snaplen != 0 {
                caplen = caplen.min(i.snaplen as usize);
            }
            Ok(Some(FrameMeta {
                ts: Duration::ZERO,
                linktype: i.linktype,
                interface: 0,
                orig_len,
                start: 4,
                len: caplen,
            }))
        }
    }
}

fn block_len_mismatch(start: u64, total: usize, trailer: usize) -> CaptureError {
    CaptureError::Malformed {
        offset: start,
        reason: format!("pcapng block length {total} does not match its trailing copy {trailer}"),
    }
}

/// Where a frame's bytes are in the reader's buffer, and its metadata.
#[derive(Debug)]
struct FrameMeta {
    ts: Duration,
    linktype: u32,
    interface: u32,
    orig_len: u32,
    start: usize,
    len: usize,
}

fn apply_offset(ts: Duration, offset_secs: i64) -> Duration {
    if offset_secs >= 0 {
        ts.saturating_add(Duration::from_secs(offset_secs.unsigned_abs()))
    } else {
        ts.saturating_sub(Duration::from_secs(offset_secs.unsigned_abs()))
    }
}

/// Reads `if_tsresol` and `if_tsoffset`; stops quietly at a malformed option.
fn parse_idb_options(f: Fields<'_>, mut at: usize, i: &mut Interface) {
    while let (Some(code), Some(len)) = (f.u16(at), f.u16(at + 2)) {
        let len = usize::from(len);
        let Some(value) = f.b.get(at + 4..at + 4 + len) else {
            return;
        };
        match (code, len) {
            (0, _) => return,
            (9, 1) => {
                let v = value[0];
                i.tsresol = if v & 0x80 != 0 {
                    TsResol::Binary(v & 0x7F)
                } else {
                    TsResol::Decimal(v)
                };
            }
            (14, 8) => {
                if let Some(off) = f.u64(at + 4) {
                    i.tsoffset = off as i64;
                }
            }
            _ => {}
        }
        at += 4 + len.div_ceil(4) * 4;
    }
}

#[cfg(test)]
mod tests;
