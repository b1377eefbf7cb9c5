//! The transport's limits, shared by the files that enforce them (as rxe_param.h is for rxe):
//! constants only, importing nothing from the transport, so any file may use them.

/// Largest message (IBTA: 2^31 bytes).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// Most PSNs the requester lets be unacknowledged (rxe_param.h RXE_MAX_UNACKED_PSNS).
pub const MAX_UNACKED_PSNS: u32 = 128;
/// Packets after which AckReq is forced within a long message (rxe: `noack_pkts++ > 64`).
pub const ACKREQ_EVERY: u32 = 64;

/// Most responses queued at once; beyond it duplicate requests are dropped (bounded memory
/// under a flood of duplicates).
pub const MAX_QUEUED_RESPONSES: usize = 256;

/// First table index of a memory window: keys with the top bit set are windows.
pub const MW_INDEX_BASE: u32 = 0x80_0000;
/// Largest number of live memory windows (their indexes run from [`MW_INDEX_BASE`] to the top
/// of the 24-bit index).
pub const MAX_MW: usize = (1 << 24) - MW_INDEX_BASE as usize;
/// Largest number of live regions (the index must fit in the 23 bits below the windows').
pub const MAX_MR: usize = MW_INDEX_BASE as usize;
