//! `softroce decode`: print the RoCEv2 packets of a capture, optionally with a per-connection
//! analysis.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use clap::Args;
use softroce::capture::CaptureReader;
use softroce::decode::Decoder;
use softroce::wire::ROCE_V2_UDP_PORT;

use super::CliError;

const AFTER_HELP: &str = "\
Input: classic pcap (either byte order, micro- or nanosecond timestamps) or pcapng (any number
of sections and interfaces) with Ethernet, raw IP, Linux cooked (SLL, SLL2) or loopback frames.
Frames that are not UDP to the RoCEv2 port are counted and skipped.

Text output: one line per RoCEv2 packet:
  FRAME SRC:PORT > DST:PORT OPCODE se= m= pad= pkey= dqpn= ackreq= psn= [HEADERS] payload= icrc=ok|bad
or `FRAME SRC > DST MALFORMED: REASON`; then, with --analyze, one block per connection; then a
summary line: `N frames, M RoCEv2 packets (K bad ICRC, J malformed), S other frames skipped`.

JSON output (--json): JSON Lines on stdout, one object per line.
  - one object per RoCEv2 packet, with \"frame\" (1-based), \"ts\", \"src\", \"dst\", \"opcode\",
    \"opcode_name\", \"se\", \"mig\", \"pad\", \"tver\", \"pkey\", \"fecn\", \"becn\", \"dqpn\",
    \"ack_req\", \"psn\", \"payload_len\", \"icrc_ok\", \"icrc\" and, when present, \"deth\",
    \"feth\", \"reth\", \"atomic\", \"aeth\", \"atomic_ack\", \"imm\", \"ieth\"; a packet that
    cannot be decoded has \"frame\", \"src\", \"dst\" and \"error\" (and its BTH under \"bth\"
    when it was captured) instead;
  - with --analyze, after the packets: one object per connection, identified by its
    \"connection\" key ({\"src\", \"dst\", \"dqpn\", \"src_qp\", \"src_ports\"}), then a last
    object {\"summary\": {\"frames\", \"roce_packets\", \"bad_icrc\", \"malformed\", \"other\", ...}}.

A connection is one direction to one queue pair (source IP, destination IP, destination QP, and
for UD the source QP). The analysis counts packets and payload bytes per opcode, the request and
response PSN ranges, retransmitted request PSNs, PSN gaps, NAKs by code and RNR NAKs by timer,
gaps in READ responses, and packets with a bad ICRC (which take no part in the PSN accounting).

Exit status: 0 on success (also when the output pipe is closed early), 1 when the file cannot be
read or is not a valid capture (frames before a truncation point are printed first), 2 for bad
arguments.";

/// Arguments of `softroce decode`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct DecodeArgs {
    /// Print JSON Lines instead of text (one object per packet; see --help).
    #[arg(long)]
    pub json: bool,
    /// Add a per-connection analysis after the packets.
    ///
    /// Packets and bytes per opcode, PSN ranges, retransmitted PSNs, PSN gaps, NAKs by code,
    /// RNR NAKs by timer and bad ICRCs, per (source, destination, destination QP). With --json,
    /// one object per connection (key "connection") and a final {"summary": ...} object.
    #[arg(long)]
    pub analyze: bool,
    /// The UDP destination port that carries RoCEv2.
    #[arg(long, value_name = "PORT", default_value_t = ROCE_V2_UDP_PORT)]
    pub port: u16,
    /// The capture file (pcap or pcapng); `-` reads standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

fn open(path: &PathBuf) -> Result<Box<dyn Read>, CliError> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(io::stdin().lock()));
    }
    let f = File::open(path).map_err(|err| CliError::Open {
        path: path.display().to_string(),
        err,
    })?;
    Ok(Box::new(BufReader::with_capacity(256 * 1024, f)))
}

fn write_line(out: &mut impl Write, line: &str) -> Result<(), CliError> {
    out.write_all(line.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .map_err(CliError::Output)
}

/// Runs `softroce decode`.
pub fn run(args: &DecodeArgs) -> Result<(), CliError> {
    let name = args.file.display().to_string();
    let capture_err = |err| CliError::Capture {
        path: name.clone(),
        err,
    };
    let input = open(&args.file)?;
    let mut reader = CaptureReader::new(input).map_err(capture_err)?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut decoder = Decoder::new(args.port);
    let mut read_error = None;
    loop {
        match reader.next_frame() {
            Ok(Some(frame)) => {
                if let Some(report) = decoder.decode(&frame) {
                    let line = if args.json {
                        report.to_json().to_string()
                    } else {
                        report.text_line()
                    };
                    write_line(&mut out, &line)?;
                }
            }
            Ok(None) => break,
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    // What was read before an error is still summarized: a capture cut short (a killed tcpdump)
    // is worth analyzing.
    if args.analyze {
        let report = decoder.analyzer().report();
        if args.json {
            for v in report.to_json() {
                write_line(&mut out, &v.to_string())?;
            }
        } else {
            out.write_all(report.text().as_bytes())
                .map_err(CliError::Output)?;
        }
    }
    if !args.json {
        write_line(&mut out, &decoder.counters().summary_line())?;
    }
    out.flush().map_err(CliError::Output)?;
    match read_error {
        Some(e) => Err(capture_err(e)),
        None => Ok(()),
    }
}
