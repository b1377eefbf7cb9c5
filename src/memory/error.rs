//! Why an access to a region's bytes was refused: the one error of `region.rs`'s and
//! `foreign.rs`'s accesses.

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// The range `offset .. offset + len` does not lie within the buffer.
    OutOfBounds {
        /// First byte.
        offset: u64,
        /// Length.
        len: u64,
        /// Buffer size.
        size: usize,
    },
    /// An atomic needs an 8-byte aligned offset.
    Misaligned {
        /// The offset.
        offset: u64,
    },
    /// The application took its memory back (`ibv_dereg_mr`) while an operation still held
    /// the region.
    Revoked,
    /// The application's memory was not there: unmapped, or without the permission the access
    /// needs, since it was registered ([`super::guard`]).
    Fault,
}

impl core::fmt::Display for AccessError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            AccessError::OutOfBounds { offset, len, size } => {
                write!(
                    f,
                    "bytes {offset}..{offset}+{len} outside a {size}-byte buffer"
                )
            }
            AccessError::Misaligned { offset } => {
                write!(f, "offset {offset} is not 8-byte aligned")
            }
            AccessError::Revoked => write!(f, "the application deregistered the memory"),
            AccessError::Fault => write!(f, "the application's memory is unmapped or protected"),
        }
    }
}

impl std::error::Error for AccessError {}
