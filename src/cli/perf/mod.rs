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
use std::result::Result;

// From the bottom up: params (the flags resolved), pattern (--check's bytes), progress,
// resources (a run's QPs and memory), report, exchange (the out-of-band connection and the
// agreement), ud, ops (what a run does per message), rdma_cm, setup (building and connecting
// a run), and the programs: bw, lat.
mod bw;
mod exchange;
mod lat;
mod ops;
mod params;
mod pattern;
mod progress;
mod rdma_cm;
mod refused;
mod render;
mod report;
mod resources;
mod setup;
mod ud;

use super::device::DeviceArgs;
use super::plot;
use super::CliError;
use params::Params;
use render::{print_result, Output};
use resources::Test;

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

/// Runs `softroce perf`: checks the flags, agrees on the test with the peer, sets up the QPs,
/// connects them in the program's order, runs the traffic and prints the report.
pub fn run(args: &PerfArgs) -> Result<(), CliError> {
    let mut p = Params::from_args(args)?;
    if let Some(path) = &args.plot {
        plot::check_output(std::path::Path::new(path))?;
    }
    let timeout = Duration::from_secs(args.timeout.max(1));
    let (mut x, dev, mut cm) = rdma_cm::open(args, timeout)?;
    let agreed = exchange::agree(&mut x, &mut p, args)?;
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
        only: args.output,
        unsorted: args.unsorted,
        histogram: args.histogram,
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
