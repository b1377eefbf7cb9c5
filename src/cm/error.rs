//! Why a call on the endpoint was refused.

use super::conn::{ConnId, ConnState};

/// Why a call on the endpoint was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmError {
    /// No such connection (never made, or gone after time-wait).
    UnknownConnection(ConnId),
    /// The call does not apply in the connection's state.
    WrongState {
        /// The call.
        op: &'static str,
        /// The connection's state.
        state: ConnState,
    },
    /// More private data than the message carries.
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes the message carries.
        max: usize,
    },
    /// Somebody already listens on this service ID.
    AlreadyListening(u64),
    /// The endpoint holds [`super::EndpointConfig::max_connections`] connections.
    TooManyConnections,
}

impl std::fmt::Display for CmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmError::UnknownConnection(c) => write!(f, "no connection with ID 0x{:08x}", c.0),
            CmError::WrongState { op, state } => {
                write!(f, "{op} is not possible in CM state {state:?}")
            }
            CmError::PrivateDataTooLong { len, max } => {
                write!(f, "{len} bytes of private data; the message carries {max}")
            }
            CmError::AlreadyListening(s) => write!(f, "service ID 0x{s:x} is already listened on"),
            CmError::TooManyConnections => write!(f, "too many CM connections"),
        }
    }
}

impl std::error::Error for CmError {}
