//! `softroce perf`: perftest's ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_lat,
//! ib_write_lat, ib_read_lat and ib_atomic_lat, speaking perftest 4.5's out-of-band exchange
//! (`softroce::oob::perftest`) so that either end may be perftest itself.
//!
//! Roles are perftest's: the client (given SERVER) is the requester for WRITE, READ and atomics
//! and the sender for SEND bandwidth; the server is passive there (its QP only answers) and
//! prints the report the client sends it. ib_send_lat and ib_write_lat are ping-pongs in which
//! both ends measure. The flags are perftest's (-s -n -m -p -q -t -r -o -x -u -A -c RC|UC|UD,
//! -F accepted for habit's sake) and so is the memory layout each end advertises: a buffer of
//! max(size, page size) bytes, which the peer targets at offsets that step by the message size
//! rounded to a cache line (`ctx_set_send_reg_wqes`, `increase_rem_addr`).
//!
//! `--check` (softroce at both ends; the peer's version message says so): every message carries
//! a pattern that depends on its iteration and is verified byte for byte where it lands, each
//! message in its own region: WRITE at the server after the client's last completion, READ at
//! the client, SEND at the receiver, write_lat's writes at each end as they arrive, atomics at
//! the client (fetch-add returns 0, 1, 2, ...; compare-and-swap i -> i+1 returns i) and at the
//! server (the final value). The two ends exchange verdicts so that both exit non-zero on a
//! mismatch.

use std::time::Duration;

use clap::{Args, ValueEnum};
use softroce::oob::perftest::TestSignature;
use std::result::Result;

mod bw;
mod lat;
mod ops;
mod progress;
mod rdma_cm;
mod refused;
mod report;
mod setup;
mod ud;

use super::device::DeviceArgs;
use super::plot;
use super::CliError;
use report::{print_result, Output};
use setup::Test;

/// The operation under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PerfOp {
    /// SEND / RECV (ib_send_bw, ib_send_lat).
    Send,
    /// RDMA WRITE (ib_write_bw, ib_write_lat).
    Write,
    /// RDMA READ (ib_read_bw, ib_read_lat).
    Read,
    /// Atomics (ib_atomic_bw, ib_atomic_lat).
    Atomic,
}

/// perftest's -A.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AtomicType {
    /// Fetch-and-add (perftest's default).
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    /// Compare-and-swap.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

/// perftest's -c: RC, UC or UD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Connection {
    /// Reliable Connected.
    #[value(name = "RC")]
    Rc,
    /// Unreliable Connected: SEND and WRITE only, nothing acknowledged or retried.
    #[value(name = "UC")]
    Uc,
    /// Unreliable Datagram: SEND only, one MTU at most per message (`ud`).
    #[value(name = "UD")]
    Ud,
}

/// perftest's options, with perftest's letters.
#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// The operation.
    #[arg(value_enum)]
    pub op: PerfOp,
    /// Latency test (ib_*_lat) instead of bandwidth (ib_*_bw).
    #[arg(long)]
    pub lat: bool,
    /// TCP port of the out-of-band exchange (with -R or -z: its rdma_cm port).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Connect the QPs through rdma_cm, the exchange too (perftest's -R; RC).
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Run the exchange over an rdma_cm connection instead of TCP; the QPs still connect
    /// from the exchanged keys (perftest's -z).
    #[arg(short = 'z', long = "comm_rdma_cm")]
    pub comm_rdma_cm: bool,
    /// Message size in bytes (default: 65536 for bw, 2 for lat, 8 for atomics).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Iterations per QP (default: 5000 for bw, 1000 for lat).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Path MTU; both ends use the smaller of their two values, as perftest does.
    #[arg(short = 'm', long = "mtu", default_value_t = 4096)]
    pub mtu: u32,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub num_qps: u32,
    /// Outstanding work requests per QP (bw tests; lat tests use 1).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Receives posted per QP (SEND tests).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub rx_depth: u32,
    /// READ/atomic requests this end accepts per QP, told to the peer (default: the device
    /// maximum, 128, for READ and atomics; 1 otherwise, as perftest).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u8>,
    /// Atomic operation (perftest's -A).
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicType::FetchAndAdd)]
    pub atomic_type: AtomicType,
    /// Same as -A CMP_AND_SWAP.
    #[arg(long)]
    pub cas: bool,
    /// Connection type (perftest's -c): RC, UC (SEND and WRITE) or UD (SEND).
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = Connection::Rc)]
    pub connection: Connection,
    /// Device name (perftest's -d; accepted for habit: softroce has one device per --bind
    /// address).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the device (perftest's -i; must be 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Accepted for perftest's habit (-F: do not fail on CPU frequency); timing uses the
    /// monotonic clock, not cycle counters.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Fill every message with an iteration-dependent pattern and verify every byte (softroce
    /// at both ends).
    #[arg(long)]
    pub check: bool,
    /// Print the result as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Local GID index (0 or 1; both are the device address).
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    pub gid_index: u8,
    /// Give up when neither the peer nor the network makes progress for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// QP local ACK timeout exponent: 4.096 us x 2^N (perftest's -u; 0 = never).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// Transport retries before "retry exceeded" (0..7; 7 retries forever, as rxe treats it).
    #[arg(long = "retry-cnt", default_value_t = 7, value_parser = clap::value_parser!(u8).range(0..=7))]
    pub retry_cnt: u8,
    /// Run every message size from 2 to 2^23 bytes, one report row per size (perftest's -a;
    /// bandwidth tests; atomics stay at 8 bytes).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Run for this many seconds instead of -n iterations (perftest's -D; bandwidth tests).
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u64>,
    /// Seconds left out at the start and at the end of a -D run (perftest's -f; default a
    /// quarter of the duration).
    #[arg(short = 'f', long = "margin")]
    pub margin: Option<u64>,
    /// Bidirectional: both ends send (perftest's -b; bandwidth tests; SEND without -D).
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// With -b, also print this end's and the peer's figures apart.
    #[arg(long = "report-both")]
    pub report_both: bool,
    /// Write perftest's JSON report (to --out_json_file, default perftest_out.json).
    #[arg(long = "out_json")]
    pub out_json: bool,
    /// The file --out_json writes (rewritten after every report, as perftest does).
    #[arg(long = "out_json_file", default_value = "perftest_out.json")]
    pub out_json_file: String,
    /// Ask for a completion every N work requests (perftest's -Q; default 1 here: every WR).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Post N work requests per post_send call, the last of them signaled (perftest's -l).
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    pub post_list: u32,
    /// Send SEND and WRITE messages of at most this many bytes inline: copied into the work
    /// request at post time (perftest's -I; at most the device's max_inline_data, 400).
    #[arg(short = 'I', long = "inline_size", default_value_t = 0)]
    pub inline_size: u32,
    /// No peak bandwidth (perftest's -N; also without it above 20000 iterations, as perftest).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Bandwidth in Gb/s (10^9 bits) instead of MB/s (perftest's --report_gbits).
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Print only one figure per row (perftest's --output): bandwidth or message_rate for the
    /// bandwidth tests, latency (the average) for the latency tests.
    #[arg(long = "output", value_enum)]
    pub output: Option<OutputOnly>,
    /// Latency tests: also print every sample in the order taken (perftest's -U).
    #[arg(short = 'U', long = "report-unsorted")]
    pub unsorted: bool,
    /// Latency tests: also print the sorted samples the statistics use (perftest's -H).
    #[arg(short = 'H', long = "report-histogrm", alias = "report-histogram")]
    pub histogram: bool,
    /// Accepted for perftest's habit: softroce always gives each QP its own memory region.
    #[arg(long = "mr_per_qp")]
    pub mr_per_qp: bool,
    /// perftest's -L: as perftest's, only its default (64) is accepted here; other values are
    /// for raw Ethernet QPs. The QPs' address vectors say 255, which the route's hop limit
    /// replaces on the wire (64 by default), as on kernel rxe.
    #[arg(short = 'L', long = "hop_limit")]
    pub hop_limit: Option<u8>,
    /// Traffic class of the QPs' address vectors: the IPv4 TOS (DSCP and ECN bits) or IPv6
    /// traffic class of every packet (perftest's --tclass).
    #[arg(long = "tclass")]
    pub tclass: Option<u8>,
    /// Post tx_depth work requests and wait for them before measuring (perftest's
    /// --perform_warm_up; WRITE, READ and atomic bandwidth).
    #[arg(long = "perform_warm_up")]
    pub perform_warm_up: bool,
    /// The server generates the traffic and the client receives it (perftest's --reversed;
    /// the TCP roles stay).
    #[arg(long)]
    pub reversed: bool,
    /// Run until killed, printing a row every -D seconds (default 5) (perftest's
    /// --run_infinitely; bandwidth tests).
    #[arg(long = "run_infinitely")]
    pub run_infinitely: bool,
    /// Print the CPU utilisation of the sampled window (perftest's --cpu_util: user time over
    /// user + idle time of /proc/stat; duration mode).
    #[arg(long = "cpu_util")]
    pub cpu_util: bool,
    /// Draw this run's bandwidth and message rate against message size to an SVG file (with
    /// -a: one point per size; `softroce plot` combines several runs).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// The legend entry of --plot (default: "softroce PROGRAM").
    #[arg(long = "plot-label")]
    pub plot_label: Option<String>,
    /// perftest flags that have no meaning on softroce; each is refused by name.
    #[command(flatten)]
    pub refused: refused::RefusedFlags,
    /// Device options.
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Server to connect to; without it, act as the server.
    pub server: Option<String>,
}

impl PerfArgs {
    /// perftest's full report (its FULL_VERBOSITY): the banners, address lines and tables on
    /// stdout; not under --json (JSON lines only) or --output (one figure per row).
    fn full_report(&self) -> bool {
        !self.json && self.output.is_none()
    }
}

/// perftest's --output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputOnly {
    /// The average bandwidth.
    #[value(name = "bandwidth")]
    Bandwidth,
    /// The message rate.
    #[value(name = "message_rate")]
    MessageRate,
    /// The average latency.
    #[value(name = "latency")]
    Latency,
}

/// The eight perftest programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
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
    fn of(op: PerfOp, lat: bool) -> Program {
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

    fn lat(self) -> bool {
        matches!(
            self,
            Program::SendLat | Program::WriteLat | Program::ReadLat | Program::AtomicLat
        )
    }

    /// The perftest program this one pairs with.
    fn perftest_name(self) -> &'static str {
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

    fn code(self) -> u8 {
        self as u8 + 1
    }
}

/// Everything both ends must agree on, resolved from the flags.
#[derive(Debug, Clone, Copy)]
struct Params {
    prog: Program,
    op: PerfOp,
    cas: bool,
    check: bool,
    size: u64,
    iters: u64,
    num_qps: u32,
    conn: Connection,
    /// -a: every size from 2 to 2^23 (`size` is then the buffer's, 2^23).
    all: bool,
    /// -D: seconds to run, and the margin at each end.
    duration: Option<Duration>,
    /// -f, resolved.
    margin: Duration,
    /// -b.
    duplex: bool,
    /// -N (or more than 20000 iterations): no peak.
    no_peak: bool,
    /// --report_gbits.
    gbits: bool,
    /// --reversed: the server generates the traffic.
    reversed: bool,
    /// --run_infinitely: report every -D seconds, forever.
    forever: bool,
    /// --cpu_util.
    cpu_util: bool,
}

impl Params {
    /// What a softroce peer must also be running (the version message extension).
    fn signature(&self) -> TestSignature {
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
            size: if self.all { setup::MAX_SIZE } else { self.size }.min(u32::MAX as u64) as u32,
            iters: match self.duration {
                Some(d) => d.as_secs().min(u32::MAX as u64) as u32,
                None => self.iters.min(u32::MAX as u64) as u32,
            },
        }
    }

    fn describe(sig: &TestSignature) -> String {
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

/// Runs `softroce perf`: checks the flags, agrees on the test with the peer, sets up the QPs,
/// connects them in the program's order, runs the traffic and prints the report.
pub fn run(args: &PerfArgs) -> Result<(), CliError> {
    let mut p = Params::from_args(args)?;
    if let Some(path) = &args.plot {
        plot::check_output(std::path::Path::new(path))?;
    }
    let timeout = Duration::from_secs(args.timeout.max(1));
    let (mut x, dev, mut cm) = rdma_cm::open(args, timeout)?;
    let agreed = setup::agree(&mut x, &mut p, args)?;
    let ctx = dev.open(args)?;
    let _report = args.device.counter_report(&ctx);
    let mut t = Test::new(&ctx, p, &agreed, x.role(), timeout, args)?;
    let k0 = t.connect(&mut x, agreed.mtu, args, cm.as_mut())?;
    let result = if p.prog.lat() {
        t.run_lat(x, &k0)?
    } else {
        t.run_bw(x, &k0)?
    };
    if let Some(s) = &mut cm {
        s.finish();
    }
    let output = Output {
        json: args.json,
        report_both: args.report_both,
        out_json: args.out_json.then_some(args.out_json_file.as_str()),
        // Under -R the QPs' MTU is the one rdma_cm set, not the exchanged -m.
        mtu: if args.rdma_cm {
            t.conns[0].qp.query().path_mtu.bytes()
        } else {
            agreed.mtu_bytes
        },
        is_client: t.is_client,
        tx_depth: t.tx_depth,
        rx_depth: t.rx_depth,
        outs: t.conns[0].mine.out_reads.min(255) as u8,
        only: args.output,
        unsorted: args.unsorted,
        histogram: args.histogram,
        inline: args.inline_size,
        post_list: t.post_list,
        cq_mod: t.cq_mod,
        verified: (p.check && t.failure.is_none()).then_some(t.verified),
    };
    print_result(&p, &output, &result)?;
    if let Some(path) = &args.plot {
        let label = args
            .plot_label
            .clone()
            .unwrap_or_else(|| format!("softroce {}", p.prog.perftest_name()));
        plot::draw(std::path::Path::new(path), &[result.series(label)?])?;
    }
    if let Some(f) = t.failure.take() {
        return Err(CliError::Failed(f));
    }
    Ok(())
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
}
