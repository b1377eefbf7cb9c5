//! Out-of-band connection exchanges of the standard RDMA test programs, over TCP (and
//! perftest's also over rdma_cm, [`perftest_cm`]): what
//! ibv_*_pingpong (rdma-core libibverbs/examples/pingpong.c, rc_pingpong.c) send each other
//! and perftest (src/perftest_communication.c) send each other before the RDMA traffic, so
//! that softroce's tools interoperate with them.
//! Formats and sequences: spec-notes/oob.md.

pub mod perftest;
pub mod perftest_cm;
pub mod pingpong;

use std::fmt;
use std::io;

/// Why an exchange failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OobError {
    /// The TCP connection failed.
    Io(io::Error),
    /// The peer closed the connection before the exchange was complete.
    PeerClosed,
    /// The peer took too long.
    Timeout,
    /// A message did not have the expected form.
    Malformed {
        /// Which message.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The local side failed to use the peer's parameters (e.g. to move its QP to RTR).
    Local(String),
}

impl fmt::Display for OobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OobError::Io(e) => write!(f, "{e}"),
            OobError::PeerClosed => f.write_str("the peer closed the connection"),
            OobError::Timeout => f.write_str("the peer did not answer in time"),
            OobError::Malformed { what, detail } => write!(f, "malformed {what}: {detail}"),
            OobError::Local(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OobError {}

impl From<io::Error> for OobError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => OobError::PeerClosed,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => OobError::Timeout,
            _ => OobError::Io(e),
        }
    }
}

/// The text of a NUL-terminated message (all of it if there is no NUL), or `Malformed` if it
/// is not text. `what` names the message in the error.
fn text_before_nul<'a>(msg: &'a [u8], what: &'static str) -> Result<&'a str, OobError> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    std::str::from_utf8(&msg[..end]).map_err(|_| OobError::Malformed {
        what,
        detail: "not text".into(),
    })
}

/// One hexadecimal field of a message, at most `max`, or `Malformed` naming the message
/// (`what`) and the field.
fn hex_field(what: &'static str, field: &str, s: &str, max: u64) -> Result<u64, OobError> {
    let bad = |detail: String| OobError::Malformed { what, detail };
    let v =
        u64::from_str_radix(s, 16).map_err(|_| bad(format!("{field} {s:?} is not hexadecimal")))?;
    if v > max {
        return Err(bad(format!("{field} 0x{v:x} out of range")));
    }
    Ok(v)
}
