//! The `softroce` command line: one module per subcommand, dispatched by [`run`].

pub mod activity;
pub mod decode;
pub mod device;
pub mod perf;
pub mod pingpong;
pub mod plot;
pub mod qp_setup;
pub mod rping;
pub mod run;
pub mod stat;

use std::fmt;
use std::io;

use clap::{Parser, Subcommand};

/// A user-space RoCEv2 (SoftRoCE) engine and tools.
#[derive(Debug, Parser)]
#[command(name = "softroce", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode and analyze the RoCEv2 packets of a pcap or pcapng capture.
    Decode(decode::DecodeArgs),
    /// RC ping-pong of SEND messages, as ibv_rc_pingpong (same flags and exchange).
    Pingpong(pingpong::PingpongArgs),
    /// Bandwidth or latency test of SEND, WRITE, READ or atomics, as perftest's ib_*_bw/lat.
    Perf(Box<perf::PerfArgs>),
    /// Draw bandwidth and message rate against message size from `perf --json` runs (SVG).
    Plot(plot::PlotArgs),
    /// RDMA ping through the connection manager, as librdmacm's rping (same flags and
    /// exchange; interoperates with rping on kernel rxe).
    Rping(rping::RpingArgs),
    /// Run an unmodified verbs program (ibv_rc_pingpong, perftest, your own) on softroce
    /// through the libibverbs shim.
    Run(run::RunArgs),
    /// Live counters of running softroce processes (as `rdma statistic`), without stopping
    /// them.
    Stat(stat::StatArgs),
}

/// Why a subcommand failed.
#[derive(Debug)]
pub enum CliError {
    /// A file could not be opened.
    Open {
        /// The path.
        path: String,
        /// The error.
        err: io::Error,
    },
    /// The capture could not be read.
    Capture {
        /// The path.
        path: String,
        /// The error.
        err: softroce::capture::CaptureError,
    },
    /// Writing the output failed.
    Output(io::Error),
    /// A flag or argument is not usable.
    Usage(String),
    /// An operating-system error.
    Io(io::Error),
    /// A verbs call failed.
    Verbs(softroce::ib::VerbsError),
    /// The out-of-band exchange with the peer failed.
    Oob(softroce::oob::OobError),
    /// The test itself failed (a completion error, a data mismatch, a timeout).
    Failed(String),
    /// Everything completed except what the peer can no longer confirm: it went silent
    /// before acknowledging our last message (exit status 3, so that scripts can tell it from
    /// a failure).
    Unconfirmed(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Open { path, err } => write!(f, "cannot open {path}: {err}"),
            CliError::Capture { path, err } => write!(f, "{path}: {err}"),
            CliError::Output(e) => write!(f, "cannot write the output: {e}"),
            CliError::Usage(m) => write!(f, "{m}"),
            CliError::Io(e) => write!(f, "{e}"),
            CliError::Verbs(e) => write!(f, "{e}"),
            CliError::Oob(e) => write!(f, "out-of-band exchange: {e}"),
            CliError::Failed(m) => write!(f, "{m}"),
            CliError::Unconfirmed(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for CliError {}

impl CliError {
    /// Whether the error is only the reader of our output going away (`| head`), which is a
    /// normal way for a command to end.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }

    /// The process exit status: 3 for [`CliError::Unconfirmed`], 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Unconfirmed(_) => 3,
            _ => 1,
        }
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Rping(args) => rping::run(&args),
        Command::Run(args) => {
            let code = run::run(&args)?;
            if code != 0 {
                // The program's own status, as if it had been run directly.
                std::process::exit(code as i32);
            }
            Ok(())
        }
        Command::Plot(args) => plot::run(&args),
        Command::Stat(args) => stat::run(&args),
    }
}
