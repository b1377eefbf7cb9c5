//! A run's resources: the CQ, and per QP its memory region, its queue pair and both ends'
//! keys ([`Conn`]), where messages sit in the memory ([`Layout`]), and the [`Test`] that holds
//! them with the run's parameters. Built by `setup.rs`; used by `ops.rs`, `ud.rs`, `bw.rs`,
//! `lat.rs` and `rdma_cm.rs`, which add its methods.

use std::sync::Arc;
use std::time::Duration;

use softroce::ib::Mtu;
use softroce::oob::perftest::KeyMsg;
use softroce::verbs::*;
use std::result::Result;

use super::params::Params;
use super::progress::Progress;
use crate::cli::CliError;

/// What the two ends agreed on before any QP exists.
pub(super) struct Agreed {
    /// Where messages go in each QP's memory.
    pub(super) layout: Layout,
    /// The smaller of the two ends' -m.
    pub(super) mtu: Mtu,
    /// `mtu` in bytes, for the report.
    pub(super) mtu_bytes: u32,
    /// The peer's cycle buffer and cache line, for per-size layouts under -a.
    pub(super) cycle: u64,
    /// See `cycle`.
    pub(super) line: u64,
}

/// Where messages go in a QP's memory region: a local half [0, half) that this end sends from
/// and reads into, and the half [half, 2 x half) that it advertises to the peer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Bytes in each half of the region.
    pub(super) half: u64,
    /// Bytes between consecutive messages.
    pub(super) stride: u64,
    /// Messages before the offsets wrap.
    pub(super) slots: u64,
}

impl Layout {
    /// perftest's: BUFF_SIZE = max(size, cycle buffer); messages of at most half the cycle
    /// buffer step through it by the size rounded up to a cache line, larger ones all use
    /// offset 0.
    pub(super) fn perftest(size: u64, cycle: u64, line: u64) -> Layout {
        let inc = size.max(1).div_ceil(line.max(1)) * line.max(1);
        let (stride, slots) = if size <= cycle / 2 {
            (inc, (cycle / inc).max(1))
        } else {
            (0, 1)
        };
        Layout {
            half: size.max(cycle),
            stride,
            slots,
        }
    }

    /// --check: a region per iteration, so that every message can be verified.
    pub(super) fn check(size: u64, iters: u64) -> Result<Layout, CliError> {
        let stride = size.max(8).div_ceil(8) * 8;
        let half = stride
            .checked_mul(iters)
            .filter(|h| *h <= 2 << 30)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "--check keeps every message: {iters} messages of {size} bytes need more than 4 GiB per QP; lower -n or -s"
                ))
            })?;
        Ok(Layout {
            half,
            stride,
            slots: iters,
        })
    }

    /// Where message `iter` sits within a half.
    pub(super) fn offset(&self, iter: u64) -> u64 {
        (iter % self.slots) * self.stride
    }
}

/// One QP, its memory and both ends' keys.
pub(super) struct Conn {
    pub(super) qp: Arc<QueuePair>,
    pub(super) mr: MemoryRegion,
    /// What this end told the peer.
    pub(super) mine: KeyMsg,
    /// What the peer told this end.
    pub(super) remote: KeyMsg,
    /// UD: the address handle of the peer, at an end that sends.
    pub(super) ah: Option<AddressHandle>,
}

/// A test in progress: parameters, resources and the first data-check failure.
pub(super) struct Test<'a> {
    pub(super) p: Params,
    pub(super) layout: Layout,
    pub(super) conns: Vec<Conn>,
    pub(super) cq: CompletionQueue,
    pub(super) ctx: &'a Context,
    pub(super) is_client: bool,
    /// How long the peer and the network may both be silent.
    pub(super) timeout: Duration,
    /// The first --check mismatch; the test runs to its end so that the peer is not left
    /// waiting, then both ends fail.
    pub(super) failure: Option<String>,
    /// --check: the messages and bytes this end verified.
    pub(super) verified: (u64, u64),
    /// --perform_warm_up.
    pub(super) warm: bool,
    /// The cycle buffer and cache line agreed with the peer (for [`Test::set_size`]).
    pub(super) cycle: u64,
    /// See `cycle`.
    pub(super) line: u64,
    /// The QPs' protection domain (UD makes its address handles in it).
    pub(super) pd: ProtectionDomain,
    /// The progress line of a run that lasts.
    pub(super) progress: Progress,
    /// The device's `rcvd_pkts` and `timeouts` once the QPs were connected: whether the peer
    /// has answered since ([`Test::poll`]'s dead-peer rule).
    pub(super) heard: (u64, u64),
    /// The RoCE UDP port the QPs send to (the peer's, the same as this end's).
    pub(super) roce_port: u16,
    /// -u and --retry-cnt, for the failure messages.
    pub(super) qp_timeout: u8,
    /// See `qp_timeout`.
    pub(super) retry_cnt: u8,
}

/// Room reserved up front for per-message timestamps; more grows as the run goes.
pub(super) const PREALLOCATED_TIMESTAMPS: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_layout_steps_by_cache_lines_within_the_page() {
        // ib_write_bw -s 100: 128-byte steps through a 4096-byte buffer, 32 slots.
        let l = Layout::perftest(100, 4096, 64);
        assert_eq!((l.half, l.stride, l.slots), (4096, 128, 32));
        assert_eq!(l.offset(0), 0);
        assert_eq!(l.offset(31), 31 * 128);
        assert_eq!(l.offset(32), 0);
        // Atomics: 8 bytes round up to one cache line.
        let a = Layout::perftest(8, 4096, 64);
        assert_eq!((a.stride, a.slots), (64, 64));
        // More than half the page: everything at offset 0, the buffer as large as a message.
        let big = Layout::perftest(65536, 4096, 64);
        assert_eq!((big.half, big.offset(7)), (65536, 0));
        let mid = Layout::perftest(2049, 4096, 64);
        assert_eq!((mid.half, mid.offset(1)), (4096, 0));
    }
}
