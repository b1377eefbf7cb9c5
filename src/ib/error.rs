//! Errors of the verbs API: one typed variant per way a call can be refused, each saying what
//! was wrong, as libibverbs says it with an errno but with the detail an errno loses.

use super::types::{QpAttrMask, QpState};

/// Which queue a [`VerbsError::QueueFull`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
    /// A completion queue.
    Completion,
}

/// Why an SGE was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SgeFault {
    /// No memory region of this protection domain has the lkey.
    UnknownLkey,
    /// The range lies outside the memory region.
    OutOfRange,
    /// The memory region lacks an access right the operation needs (e.g. LOCAL_WRITE for a
    /// receive or READ target).
    AccessDenied,
    /// An atomic's result buffer must be exactly 8 bytes.
    AtomicLength,
}

/// Errors of verbs calls.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerbsError {
    /// A work request queue has no room: `depth` WRs are outstanding already.
    QueueFull {
        /// The queue that was full.
        queue: QueueKind,
        /// Its capacity in WRs (completions for a CQ).
        depth: u32,
    },
    /// A work request has more SGEs than the QP was created for.
    TooManySge {
        /// Length of the work request's SGE list.
        given: usize,
        /// The QP's limit.
        max: u32,
    },
    /// Inline data longer than the QP's `max_inline_data`.
    InlineTooLarge {
        /// Total bytes of the SGEs to be copied inline.
        given: u64,
        /// The QP's limit.
        max: u32,
    },
    /// An SGE of a work request is not usable.
    BadSge {
        /// Index in the work request's list.
        index: usize,
        /// Which check the SGE failed.
        fault: SgeFault,
    },
    /// The message is longer than the transport allows (2^31 bytes).
    MessageTooLong(u64),
    /// A UD message longer than one MTU (UD messages are single packets).
    UdMessageTooLong {
        /// The message length.
        len: u64,
        /// The MTU in bytes.
        mtu: u32,
    },
    /// The operation is not valid for this QP (e.g. an atomic whose remote address is not
    /// 8-byte aligned, a READ on UC).
    InvalidWr(&'static str),
    /// Posting is not allowed in the QP's current state (e.g. send in RESET, INIT or RTR).
    InvalidState {
        /// The QP's state.
        state: QpState,
        /// The refused call, e.g. "post_send".
        call: &'static str,
    },
    /// `modify_qp` asked for a transition that does not exist (IBTA 10.3.1, figure 124).
    IllegalTransition {
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
    },
    /// `modify_qp` lacked attributes the transition requires.
    MissingAttributes {
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
        /// The required attributes that were absent.
        missing: QpAttrMask,
    },
    /// `modify_qp` gave attributes the transition does not accept.
    UnexpectedAttributes {
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
        /// The attributes not allowed here.
        extra: QpAttrMask,
    },
    /// An attribute value is out of range.
    InvalidAttribute {
        /// The attribute.
        attr: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// `cur_qp_state` was given and does not match the QP's state.
    StateMismatch {
        /// What the caller assumed.
        assumed: QpState,
        /// The actual state.
        actual: QpState,
    },
    /// A creation parameter exceeds the device's limits.
    ExceedsDeviceLimit {
        /// The parameter.
        what: &'static str,
        /// Requested.
        requested: u64,
        /// The limit.
        limit: u64,
    },
    /// A memory region, QP, CQ or PD belongs to another context or protection domain.
    ForeignObject(&'static str),
    /// The object is still in use (e.g. a CQ attached to a QP).
    Busy(&'static str),
    /// A key or number does not name a live object.
    NotFound(&'static str),
    /// A blocking call ran out of time.
    Timeout,
    /// The device context's engine has stopped.
    DeviceClosed,
    /// An operating-system error (socket, thread).
    Io(String),
    /// The memory for an object (a region's bytes) could not be allocated.
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// Memory to register is not mapped in the process (part of it or all): rxe's pinning
    /// fails there, EFAULT.
    NotMapped {
        /// The range's start.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// Memory to register is mapped but part of it cannot be read (`PROT_NONE`): rxe's
    /// pinning fails there, EFAULT.
    NotReadable {
        /// The range's start.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// Memory registered with a right that writes it (local or remote write, remote atomics,
    /// window binding) is mapped read-only in part or all: rxe's pinning for write fails
    /// there, EFAULT.
    NotWritable {
        /// The range's start.
        addr: u64,
        /// Its length.
        len: u64,
    },
}

impl core::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VerbsError::QueueFull { queue, depth } => {
                write!(
                    f,
                    "{queue:?} queue full ({depth} work requests outstanding)"
                )
            }
            VerbsError::TooManySge { given, max } => {
                write!(f, "{given} SGEs given, the QP allows {max}")
            }
            VerbsError::InlineTooLarge { given, max } => {
                write!(f, "{given} bytes of inline data, the QP allows {max}")
            }
            VerbsError::BadSge { index, fault } => write!(f, "SGE {index}: {fault:?}"),
            VerbsError::MessageTooLong(n) => write!(f, "message of {n} bytes exceeds 2^31"),
            VerbsError::UdMessageTooLong { len, mtu } => {
                write!(f, "UD message of {len} bytes exceeds the MTU of {mtu}")
            }
            VerbsError::InvalidWr(why) => write!(f, "invalid work request: {why}"),
            VerbsError::InvalidState { state, call } => {
                write!(f, "{call} is not allowed in QP state {state:?}")
            }
            VerbsError::IllegalTransition { from, to } => {
                write!(f, "no QP transition from {from:?} to {to:?}")
            }
            VerbsError::MissingAttributes { from, to, missing } => {
                write!(f, "{from:?} -> {to:?} requires {missing:?}")
            }
            VerbsError::UnexpectedAttributes { from, to, extra } => {
                write!(f, "{from:?} -> {to:?} does not accept {extra:?}")
            }
            VerbsError::InvalidAttribute { attr, reason } => write!(f, "{attr}: {reason}"),
            VerbsError::StateMismatch { assumed, actual } => {
                write!(f, "cur_qp_state {assumed:?} but the QP is in {actual:?}")
            }
            VerbsError::ExceedsDeviceLimit {
                what,
                requested,
                limit,
            } => write!(f, "{what} {requested} exceeds the device limit {limit}"),
            VerbsError::ForeignObject(what) => write!(f, "{what} belongs to another context or PD"),
            VerbsError::Busy(what) => write!(f, "{what} is in use"),
            VerbsError::NotFound(what) => write!(f, "no such {what}"),
            VerbsError::Timeout => f.write_str("timed out"),
            VerbsError::DeviceClosed => f.write_str("the device context is closed"),
            VerbsError::Io(e) => write!(f, "I/O error: {e}"),
            VerbsError::OutOfMemory { bytes } => write!(f, "cannot allocate {bytes} bytes"),
            VerbsError::NotMapped { addr, len } => {
                write!(f, "{len} bytes at {addr:#x} are not all mapped")
            }
            VerbsError::NotReadable { addr, len } => {
                write!(f, "{len} bytes at {addr:#x} are not all readable")
            }
            VerbsError::NotWritable { addr, len } => {
                write!(f, "{len} bytes at {addr:#x} are not all writable")
            }
        }
    }
}

impl std::error::Error for VerbsError {}

impl From<std::io::Error> for VerbsError {
    fn from(e: std::io::Error) -> Self {
        VerbsError::Io(e.to_string())
    }
}

/// Result of verbs calls.
pub type Result<T> = core::result::Result<T, VerbsError>;
