//! Why an rdma_cm call failed.

use std::net::IpAddr;

use crate::cm::CmError;
use crate::ib::VerbsError;

/// Why an rdma_cm call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaCmError {
    /// The connection manager refused the call.
    Cm(CmError),
    /// A verbs call on the identifier's QP failed.
    Verbs(VerbsError),
    /// The call does not apply to the identifier now (e.g. connect before the route is
    /// resolved, accept on an identifier that did not come from a connect request).
    WrongState {
        /// The call.
        op: &'static str,
        /// What the identifier is doing.
        state: &'static str,
    },
    /// The destination address is of another family than the device's.
    AddressFamily(IpAddr),
    /// Another event channel is open on this device (QP1's events go to one channel).
    ChannelInUse,
    /// No event arrived in time.
    Timeout,
}

impl std::fmt::Display for RdmaCmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdmaCmError::Cm(e) => write!(f, "connection manager: {e}"),
            RdmaCmError::Verbs(e) => write!(f, "QP: {e}"),
            RdmaCmError::WrongState { op, state } => {
                write!(f, "{op} is not possible while the identifier is {state}")
            }
            RdmaCmError::AddressFamily(a) => {
                write!(f, "{a} is not of the device's address family")
            }
            RdmaCmError::ChannelInUse => {
                write!(f, "another rdma_cm event channel is open on this device")
            }
            RdmaCmError::Timeout => write!(f, "no rdma_cm event in time"),
        }
    }
}

impl std::error::Error for RdmaCmError {}

impl From<CmError> for RdmaCmError {
    fn from(e: CmError) -> Self {
        RdmaCmError::Cm(e)
    }
}

impl From<VerbsError> for RdmaCmError {
    fn from(e: VerbsError) -> Self {
        RdmaCmError::Verbs(e)
    }
}

pub(super) type Result<T> = std::result::Result<T, RdmaCmError>;
