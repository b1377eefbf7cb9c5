//! A perftest run's parameters: the flags checked and resolved once ([`Params::from_args`]),
//! with perftest's defaults and refusals, into what both ends must agree on and what this end
//! uses (queue depths, -Q, -l). Everything else in `perf` builds on these; nothing here knows
//! about QPs, the exchange or the report.

use std::time::Duration;

use softroce::ib::{DeviceLimits, Mtu};
use softroce::oob::perftest::TestSignature;
use std::result::Result;

use super::{AtomicType, Connection, OutputOnly, PerfArgs, PerfOp};
use crate::cli::CliError;

/// The eight perftest programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Program {
    SendBw,
    WriteBw,
    ReadBw,
    AtomicBw,
    SendLat,
    WriteLat,
    ReadLat,
    AtomicLat,
}

impl Program {
    pub(super) fn of(op: PerfOp, lat: bool) -> Program {
        match (op, lat) {
            (PerfOp::Send, false) => Program::SendBw,
            (PerfOp::Write, false) => Program::WriteBw,
            (PerfOp::Read, false) => Program::ReadBw,
            (PerfOp::Atomic, false) => Program::AtomicBw,
            (PerfOp::Send, true) => Program::SendLat,
            (PerfOp::Write, true) => Program::WriteLat,
            (PerfOp::Read, true) => Program::ReadLat,
            (PerfOp::Atomic, true) => Program::AtomicLat,
        }
    }

    pub(super) fn lat(self) -> bool {
        matches!(
            self,
            Program::SendLat | Program::WriteLat | Program::ReadLat | Program::AtomicLat
        )
    }

    /// The perftest program this one pairs with.
    pub(super) fn perftest_name(self) -> &'static str {
        match self {
            Program::SendBw => "ib_send_bw",
            Program::WriteBw => "ib_write_bw",
            Program::ReadBw => "ib_read_bw",
            Program::AtomicBw => "ib_atomic_bw",
            Program::SendLat => "ib_send_lat",
            Program::WriteLat => "ib_write_lat",
            Program::ReadLat => "ib_read_lat",
            Program::AtomicLat => "ib_atomic_lat",
        }
    }

    pub(super) fn code(self) -> u8 {
        self as u8 + 1
    }
}

/// Everything both ends must agree on, resolved from the flags.
#[derive(Debug, Clone, Copy)]
pub(super) struct Params {
    pub(super) prog: Program,
    pub(super) op: PerfOp,
    pub(super) cas: bool,
    pub(super) check: bool,
    pub(super) size: u64,
    pub(super) iters: u64,
    pub(super) num_qps: u32,
    pub(super) conn: Connection,
    /// -a: every size from 2 to 2^23 (`size` is then the buffer's, 2^23).
    pub(super) all: bool,
    /// -D: seconds to run, and the margin at each end.
    pub(super) duration: Option<Duration>,
    /// -f, resolved.
    pub(super) margin: Duration,
    /// -b.
    pub(super) duplex: bool,
    /// -N (or more than 20000 iterations): no peak.
    pub(super) no_peak: bool,
    /// --report_gbits.
    pub(super) gbits: bool,
    /// --reversed: the server generates the traffic.
    pub(super) reversed: bool,
    /// --run_infinitely: report every -D seconds, forever.
    pub(super) forever: bool,
    /// --cpu_util.
    pub(super) cpu_util: bool,
    /// Send work requests in flight per QP (-t; 4 for the latency tests), at most -n.
    pub(super) tx_depth: u32,
    /// Receives posted per QP (-r; under UC and UD perftest's larger default: [`rx_depth`]).
    pub(super) rx_depth: u32,
    /// READ/atomic requests this end accepts per QP, told to the peer (-o).
    pub(super) outs: u8,
    /// A completion every this many WRs (-Q; the post list's length by default).
    pub(super) cq_mod: u32,
    /// WRs per post_send (-l).
    pub(super) post_list: u32,
    /// Messages of at most this many bytes go inline (-I).
    pub(super) inline: u32,
}

impl Params {
    /// What a softroce peer must also be running (the version message extension).
    pub(super) fn signature(&self) -> TestSignature {
        TestSignature {
            test: self.prog.code()
                | if self.all { 0x10 } else { 0 }
                | if self.duration.is_some() { 0x20 } else { 0 }
                | if self.duplex { 0x40 } else { 0 }
                | if self.cas { 0x80 } else { 0 },
            flags: self.check as u8
                | (self.reversed as u8) << 1
                | ((self.num_qps.min(63) as u8) << 2),
            // Under -a the size is the buffer's; UD shrinks it to each end's MTU later.
            size: if self.all { MAX_SIZE } else { self.size }.min(u32::MAX as u64) as u32,
            iters: match self.duration {
                Some(d) => d.as_secs().min(u32::MAX as u64) as u32,
                None => self.iters.min(u32::MAX as u64) as u32,
            },
        }
    }

    pub(super) fn describe(sig: &TestSignature) -> String {
        let name = [
            "?",
            "send bw",
            "write bw",
            "read bw",
            "atomic bw",
            "send lat",
            "write lat",
            "read lat",
            "atomic lat",
        ]
        .get((sig.test & 0x0f) as usize)
        .copied()
        .unwrap_or("?");
        let bit = |b: u8, s: &'static str| if sig.test & b != 0 { s } else { "" };
        format!(
            "{name}{}, {}, {} {}, -q {}{}{}{}",
            bit(0x80, " (CAS)"),
            if sig.test & 0x10 != 0 {
                "-a".to_string()
            } else {
                format!("-s {}", sig.size)
            },
            if sig.test & 0x20 != 0 { "-D" } else { "-n" },
            sig.iters,
            sig.flags >> 2,
            bit(0x40, ", -b"),
            if sig.flags & 2 != 0 {
                ", --reversed"
            } else {
                ""
            },
            if sig.flags & 1 != 0 { ", --check" } else { "" }
        )
    }
}

/// Refuses flags this device cannot take: refused flags, the device name, the MTU, the port.
fn check_device_args(args: &PerfArgs) -> Result<(), CliError> {
    args.refused.check()?;
    args.device.validate()?;
    Mtu::from_bytes(args.mtu).ok_or_else(|| {
        CliError::Usage(format!(
            "-m {}: the MTU must be 256, 512, 1024, 2048 or 4096",
            args.mtu
        ))
    })?;
    if args.ib_port != 1 {
        return Err(CliError::Usage(format!(
            "-i {}: a softroce device has one port, port 1",
            args.ib_port
        )));
    }
    Ok(())
}

impl Params {
    /// Resolves perftest's defaults and refuses what cannot run.
    pub(super) fn from_args(args: &PerfArgs) -> Result<Params, CliError> {
        check_device_args(args)?;
        let mut p = Params::defaults(args);
        p.check_counts(args)?;
        p.check_modes()?;
        p.check_ud()?;
        p.check_reporting(args)?;
        p.resolve_queues(args);
        Ok(p)
    }

    /// The parameters as the flags and perftest's defaults give them, the queues not yet
    /// resolved (`resolve_queues`).
    fn defaults(args: &PerfArgs) -> Params {
        // --run_infinitely reports every -D seconds, perftest's DEF_DURATION (5) by default.
        let duration = args
            .duration
            .or(args.run_infinitely.then_some(5))
            .map(Duration::from_secs);
        // perftest: the margin defaults to a quarter of the duration.
        let margin = Duration::from_secs(args.margin.unwrap_or(args.duration.unwrap_or(0) / 4));
        Params {
            // Resolved last (resolve_queues), from the rest.
            tx_depth: 0,
            rx_depth: 0,
            outs: 0,
            cq_mod: 0,
            post_list: 0,
            inline: 0,
            all: args.all,
            duration,
            margin,
            duplex: args.bidirectional,
            // perftest: no peak under -N, in duration mode, and above 20000 iterations.
            no_peak: args.no_peak
                || args.duration.is_some()
                || (!args.lat && args.iters.unwrap_or(5000) > 20000),
            gbits: args.report_gbits,
            reversed: args.reversed,
            forever: args.run_infinitely,
            cpu_util: args.cpu_util,
            prog: Program::of(args.op, args.lat),
            op: args.op,
            cas: args.cas || args.atomic_type == AtomicType::CmpAndSwap,
            check: args.check,
            // perftest's -a sets the size (the buffer's) to MAX_SIZE whatever -s says.
            size: match (args.op, args.lat, args.size) {
                (PerfOp::Atomic, _, s) => s.unwrap_or(8),
                (_, _, _) if args.all => MAX_SIZE,
                (_, true, s) => s.unwrap_or(2),
                (_, false, s) => s.unwrap_or(65536),
            },
            iters: args.iters.unwrap_or(if args.lat { 1000 } else { 5000 }),
            num_qps: args.num_qps,
            conn: args.connection,
        }
    }

    /// Refuses a connection type, size, QP count or iteration count that cannot run.
    fn check_counts(&self, args: &PerfArgs) -> Result<(), CliError> {
        if self.conn == Connection::Uc && matches!(args.op, PerfOp::Read | PerfOp::Atomic) {
            // perftest: "Read and Atomic verbs are not supported on UC" (perftest_parameters.c).
            return Err(CliError::Usage(
                "-c UC: READ and atomics need an RC QP (UC carries SEND and WRITE)".into(),
            ));
        }
        if self.size == 0 || self.size > (1 << 31) {
            return Err(CliError::Usage(format!(
                "-s {}: the message size must be 1..2147483648 (2^31) bytes",
                self.size
            )));
        }
        if self.num_qps == 0 || self.num_qps > 4096 {
            return Err(CliError::Usage(format!(
                "-q {}: the number of QPs must be 1..4096",
                self.num_qps
            )));
        }
        if self.iters < if self.prog.lat() { 5 } else { 1 } {
            return Err(CliError::Usage(
                "-n must be at least 1 (5 for latency tests, whose report drops the two largest samples)"
                    .into(),
            ));
        }
        // Every message is timed (perftest's tposted/tcompleted), 32 bytes of timestamps each.
        if self.duration.is_none() && self.iters.saturating_mul(self.num_qps as u64) > MAX_MESSAGES
        {
            return Err(CliError::Usage(format!(
                "-n {} x -q {}: at most {MAX_MESSAGES} messages per run (each is timed)",
                self.iters, self.num_qps
            )));
        }
        if args.op == PerfOp::Atomic && self.size != 8 {
            return Err(CliError::Usage("atomics are 8 bytes (-s 8)".into()));
        }
        if self.prog.lat() && self.num_qps != 1 {
            return Err(CliError::Usage(
                "latency tests use one QP (-q 1), as perftest's".into(),
            ));
        }
        Ok(())
    }

    /// Refuses an --output, -L, -I, -l or -Q that does not apply.
    fn check_reporting(&self, args: &PerfArgs) -> Result<(), CliError> {
        match (args.output, self.prog.lat()) {
            (Some(OutputOnly::Latency), false) => {
                return Err(CliError::Usage(
                    "--output: the bandwidth tests print bandwidth or message_rate".into(),
                ))
            }
            (Some(OutputOnly::Bandwidth | OutputOnly::MessageRate), true) => {
                return Err(CliError::Usage(
                    "--output: the latency tests print latency".into(),
                ))
            }
            _ => {}
        }
        // perftest 4.5 (perftest_parameters.c): -L other than its default is for raw Ethernet
        // QPs only; its QPs' address vectors say 0xFF whatever -L says.
        if args.hop_limit.is_some_and(|h| h != PERFTEST_HOP_LIMIT) {
            return Err(CliError::Usage(
                "-L/--hop_limit: hop limit only valid for RawEth QP (as perftest's: RC, UC and UD QPs send with the route's hop limit)"
                    .into(),
            ));
        }
        if args.inline_size > MAX_INLINE {
            return Err(CliError::Usage(format!(
                "-I {}: the device's max_inline_data is {MAX_INLINE}",
                args.inline_size
            )));
        }
        if args.post_list == 0 || args.cq_mod == Some(0) {
            return Err(CliError::Usage("-l and -Q must be at least 1".into()));
        }
        if (args.post_list > 1 || args.cq_mod.is_some()) && self.prog.lat() {
            return Err(CliError::Usage(
                "-l and -Q apply to the bandwidth tests".into(),
            ));
        }
        Ok(())
    }

    /// The queue depths, -o, -Q, -l and -I as this end uses them (resolved here only).
    fn resolve_queues(&mut self, args: &PerfArgs) {
        self.tx_depth = if self.prog.lat() {
            4
        } else {
            args.tx_depth
                .clamp(1, 8192)
                .min(self.iters.min(8192) as u32)
        };
        self.rx_depth = if matches!(self.conn, Connection::Ud | Connection::Uc) {
            rx_depth(args, self, DeviceLimits::default().max_cqe)
        } else {
            args.rx_depth
                .clamp(1, 8192)
                .min(self.iters.min(8192) as u32)
        };
        self.outs = args.outs.unwrap_or(match args.op {
            PerfOp::Read | PerfOp::Atomic => 128,
            _ => 1,
        });
        // perftest: with a post list, the list's last WR is the signaled one.
        self.cq_mod = args
            .cq_mod
            .unwrap_or(args.post_list)
            .clamp(1, self.tx_depth.max(1));
        self.post_list = args.post_list.min(self.tx_depth.max(1));
        self.inline = args.inline_size;
    }

    /// Refuses -a, -D and -b where perftest refuses them or softroce does not run them.
    fn check_modes(&self) -> Result<(), CliError> {
        let usage = |s: &str| Err(CliError::Usage(s.into()));
        if let Some(d) = self.duration {
            if self.all {
                return usage("-D: duration mode does not run all sizes (-a), as perftest's");
            }
            if d <= 2 * self.margin && !self.forever {
                return usage(
                    "-D/-f: the duration must be more than twice the margin (DURATION > 2*MARGIN)",
                );
            }
        }
        if self.prog.lat() && (self.duration.is_some() || self.duplex) {
            return usage(
                "-D, -b and --run_infinitely run the bandwidth tests here; the latency tests run -s/-n or -a",
            );
        }
        if self.forever && self.duplex {
            return usage("--run_infinitely runs one direction (no -b)");
        }
        if self.cpu_util && self.duration.is_none() {
            return usage("--cpu_util works only in duration mode (-D), as perftest's");
        }
        if self.duplex && self.prog == Program::SendBw && self.duration.is_some() {
            return usage("-b with -D: bidirectional SEND runs -n iterations here");
        }
        if self.check && (self.all || self.duration.is_some() || self.duplex) {
            return usage(
                "--check verifies fixed -s/-n runs; it does not combine with -a, -D or -b",
            );
        }
        Ok(())
    }

    /// The message sizes a bandwidth run measures: 2..2^23 under -a (atomics stay 8 bytes, as
    /// perftest's ib_atomic_bw), else -s.
    pub(super) fn sizes(&self) -> Vec<u64> {
        if self.all && self.op != PerfOp::Atomic {
            // Under UD, `size` is the MTU by now: ib_send_bw -c UD -a runs 2 .. MTU.
            (1..24)
                .map(|i| 1u64 << i)
                .filter(|s| self.conn != Connection::Ud || *s <= self.size)
                .collect()
        } else {
            vec![self.size]
        }
    }
}

/// perftest's DEF_HOP_LIMIT: the only -L its RC, UC and UD tests accept.
pub(super) const PERFTEST_HOP_LIMIT: u8 = 64;

/// The largest -I: softroce's max_inline_data.
pub(super) const MAX_INLINE: u32 = 400;

/// perftest's MAX_SIZE: the largest -a size, and the buffer -a allocates.
pub(super) const MAX_SIZE: u64 = 1 << 23;

/// The most messages one run times (4 GiB of timestamps).
pub(super) const MAX_MESSAGES: u64 = 1 << 27;

/// perftest's DEF_QKEY: the Q_Key of every UD QP and of every datagram it sends.
pub(super) const QKEY: u32 = 0x1111_1111;

/// perftest's UD_ADDITION: the GRH room in front of every UD receive.
pub(super) const GRH_ROOM: u64 = 40;

/// perftest's UC_MAX_RX: the most receives -c UD/UC posts when -r is left at its default.
const MAX_RX: u32 = 16000;

/// perftest's DEF_RX_SEND: -r's default.
const DEF_RX_SEND: u32 = 512;

impl Connection {
    /// perftest's name for the connection type, as its report prints it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Uc => "UC",
            Connection::Ud => "UD",
        }
    }
}

impl Params {
    /// Refuses what perftest refuses with -c UD: every operation but SEND.
    pub(super) fn check_ud(&self) -> Result<(), CliError> {
        if self.conn == Connection::Ud && self.op != PerfOp::Send {
            // perftest_parameters.c: " UD connection only possible in SEND verb".
            return Err(CliError::Usage(
                "-c UD: only SEND runs on UD (ib_send_bw, ib_send_lat); WRITE, READ and atomics need RC (or UC for WRITE)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Fits a UD message into the MTU as perftest does: first into this end's (-m; perftest's
    /// check_link), then into the MTU both ends agreed on (check_mtu), where an explicit -s
    /// without -a is refused instead. The notices are perftest's.
    pub(super) fn fit_ud_size(&mut self, args: &PerfArgs, agreed_mtu: u32) -> Result<(), CliError> {
        if self.conn != Connection::Ud {
            return Ok(());
        }
        let notice =
            |mtu: u32| eprintln!(" Max msg size in UD is MTU {mtu}\n Changing to this MTU");
        let local = args.mtu as u64;
        if self.size > local {
            if self.all {
                notice(args.mtu);
            }
            self.size = local;
        }
        if self.size > agreed_mtu as u64 {
            if self.all || args.size.is_none() {
                notice(agreed_mtu);
                self.size = agreed_mtu as u64;
            } else {
                return Err(CliError::Usage(format!(
                    "-s {}: Max message size in UD cannot be greater than MTU ({agreed_mtu}, the smaller of the two ends')",
                    self.size
                )));
            }
        }
        Ok(())
    }

    /// Bytes of GRH room in front of each receive: 40 under UD, else none.
    pub(super) fn grh_room(&self) -> u64 {
        if self.conn == Connection::Ud {
            GRH_ROOM
        } else {
            0
        }
    }
}

/// -r under -c UD and -c UC: perftest's default of 512 becomes -n (at most 16000), so that a
/// sender faster than the receiver still finds a receive for each message (neither transport
/// has receiver-not-ready flow control); an explicit -r stays. Unlike perftest, whose separate
/// receive CQ of -n x -q entries then fails to be created past the device's `max_cqe`, the
/// default stops where the one CQ a softroce test shares between sends and receives fits.
fn rx_depth(args: &PerfArgs, p: &Params, max_cqe: u32) -> u32 {
    if args.rx_depth == DEF_RX_SEND && p.duration.is_none() {
        let room = (max_cqe / p.num_qps.max(1))
            .saturating_sub(p.tx_depth + 2)
            .max(1);
        p.iters.clamp(1, MAX_RX.min(room) as u64) as u32
    } else {
        args.rx_depth.clamp(1, 8192).min(p.iters.min(8192) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_differ_for_different_tests() {
        let p = Params {
            prog: Program::WriteBw,
            op: PerfOp::Write,
            cas: false,
            check: true,
            size: 65536,
            iters: 100,
            num_qps: 2,
            conn: Connection::Rc,
            all: false,
            duration: None,
            margin: Duration::ZERO,
            duplex: false,
            no_peak: false,
            gbits: false,
            reversed: false,
            forever: false,
            cpu_util: false,
            tx_depth: 128,
            rx_depth: 512,
            outs: 1,
            cq_mod: 1,
            post_list: 1,
            inline: 0,
        };
        let q = Params {
            prog: Program::ReadBw,
            ..p
        };
        assert_ne!(p.signature(), q.signature());
        assert_ne!(p.signature(), Params { num_qps: 3, ..p }.signature());
        assert!(Params::describe(&p.signature()).contains("write bw"));
        assert!(Params::describe(&p.signature()).contains("--check"));
        let all = Params { all: true, ..p };
        assert_ne!(p.signature(), all.signature());
        assert!(Params::describe(&all.signature()).contains("-a"));
        let dur = Params {
            duration: Some(Duration::from_secs(2)),
            ..p
        };
        assert_ne!(p.signature(), dur.signature());
        assert!(Params::describe(&dur.signature()).contains("-D 2"));
        assert_ne!(p.signature(), Params { duplex: true, ..p }.signature());
        let rev = Params {
            reversed: true,
            ..p
        };
        assert_ne!(p.signature(), rev.signature());
        assert!(Params::describe(&rev.signature()).contains("--reversed, --check"));
        assert!(Params::describe(&rev.signature()).contains("-q 2"));
    }

    /// The flags as `softroce perf ...` parses them.
    fn args(words: &[&str]) -> PerfArgs {
        use clap::Parser;
        let mut all = vec!["softroce", "perf"];
        all.extend_from_slice(words);
        match crate::cli::Cli::try_parse_from(all).unwrap().command {
            crate::cli::Command::Perf(a) => *a,
            _ => unreachable!("a perf command line"),
        }
    }

    #[test]
    fn queues_are_resolved_once_with_perftests_rules() {
        let p = Params::from_args(&args(&["write", "-t", "300", "-n", "100"])).unwrap();
        // -t, at most -n; -Q defaults to the post list (1), -o to 1 outside READ and atomics.
        assert_eq!((p.tx_depth, p.cq_mod, p.post_list, p.outs), (100, 1, 1, 1));
        let p = Params::from_args(&args(&["read", "-l", "8"])).unwrap();
        assert_eq!(
            (p.tx_depth, p.cq_mod, p.post_list, p.outs),
            (128, 8, 8, 128)
        );
        let p = Params::from_args(&args(&["send", "--lat", "-I", "64"])).unwrap();
        assert_eq!((p.tx_depth, p.inline), (4, 64));
        // UD and UC: the default -r becomes -n (at most 16000 and what the CQ fits).
        let p = Params::from_args(&args(&["send", "-c", "UD", "-n", "3000"])).unwrap();
        assert_eq!(p.rx_depth, 3000);
        let p = Params::from_args(&args(&["send", "-c", "UC", "-q", "8", "-n", "5000"])).unwrap();
        assert_eq!(p.rx_depth, 0x7FFF / 8 - (128 + 2));
        let p = Params::from_args(&args(&["send", "-n", "100"])).unwrap();
        assert_eq!(p.rx_depth, 100);
    }
}
