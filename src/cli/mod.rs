//! The `softroce` command line: one module per subcommand, dispatched by [`run`].

pub mod activity;
pub mod decode;
pub mod device;
pub mod perf;
pub mod pingpong;
pub mod plot;
pub mod plot_time;
pub mod qp_setup;
pub mod rping;
pub mod run;
pub mod run_ns;
pub mod stat;

use std::fmt;
use std::io;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser, Subcommand};

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

/// Parses the process's command line, exiting with clap's message on an error. An unknown
/// flag is only given a suggestion that is close to it (clap's own similarity measure offers
/// `--no-gso` for `--bogus`, and puts the suggestion into the usage line it prints).
pub fn parse() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => without_far_suggestion(e, &args).exit(),
    }
}

/// `e` itself, or, for an unknown flag whose suggestion is not close to it, the same error
/// with neither the suggestion nor the suggestion in the usage line.
fn without_far_suggestion(e: clap::Error, args: &[std::ffi::OsString]) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let (Some(ContextValue::String(bad)), Some(suggested)) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::SuggestedArg),
    ) else {
        return e;
    };
    let suggested = match suggested {
        ContextValue::String(s) => s.clone(),
        ContextValue::Strings(v) if v.len() == 1 => v[0].clone(),
        _ => return e,
    };
    if close_flags(bad, &suggested) {
        return e;
    }
    let mut cmd = Cli::command();
    cmd.build();
    // The subcommand the error is about: the first argument naming one.
    let sub = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| cmd.find_subcommand(a).is_some())
        .map(str::to_string);
    let target = match &sub {
        Some(name) => match cmd.find_subcommand_mut(name) {
            Some(s) => s,
            None => return e,
        },
        None => &mut cmd,
    };
    let usage = target.render_usage();
    let mut plain = clap::Error::new(ErrorKind::UnknownArgument).with_cmd(target);
    plain.insert(ContextKind::InvalidArg, ContextValue::String(bad.clone()));
    plain.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
    plain
}

/// Whether `suggested` is a likely meaning of the unknown flag `bad`: the same words but for
/// case and `-`/`_`, or at most two edits apart and less than half of the flag changed.
fn close_flags(bad: &str, suggested: &str) -> bool {
    let norm = |s: &str| -> Vec<char> {
        s.trim_start_matches('-')
            .chars()
            .map(|c| {
                if c == '_' {
                    '-'
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    };
    let (a, b) = (norm(bad), norm(suggested));
    let d = edit_distance(&a, &b);
    d == 0 || (d <= 2 && 2 * d < a.len().max(b.len()))
}

/// Levenshtein distance.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + (ca != cb) as usize).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_close_flags_are_suggested() {
        assert!(!close_flags("--bogus", "--no-gso"));
        assert!(close_flags("--tx_depth", "--tx-depth"));
        assert!(close_flags("--chek", "--check"));
        assert!(close_flags("--jsn", "--json"));
        assert!(!close_flags("--x", "--json"));
        assert_eq!(edit_distance(&['a', 'b'], &['b']), 1);
    }
}
