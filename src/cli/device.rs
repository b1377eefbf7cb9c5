//! Options every subcommand that opens a device shares: the local address, the RoCEv2 UDP
//! port, a packet capture, impairment of the link (loss, duplication, reordering,
//! corruption, delay) for testing recovery, and congestion control.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use softroce::driver::{
    Bottleneck, DeviceConfig, Direction, Impairment, DEFAULT_IDLE_SPIN, MAX_IDLE_SPIN,
};
use softroce::transport::cc::CcConfig;
use softroce::transport::Counters;
use softroce::verbs::Context;

use super::CliError;

/// Device options.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Local IP address of the RoCE device (its GID). Default: for a server 127.0.0.1; for a
    /// client, the address the system would use to reach the server (127.0.0.2 when the
    /// server is 127.0.0.1, so that both ends can run on one machine).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// UDP port of RoCEv2 (both ends use the same one).
    #[arg(long, value_name = "PORT", default_value_t = 4791)]
    pub roce_port: u16,
    /// Write every packet sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Probability of dropping a packet (0..1).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub drop: f64,
    /// Probability of duplicating a packet.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub dup: f64,
    /// Probability of delaying a packet behind the next one.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub reorder: f64,
    /// Probability of flipping one bit of a packet (the ICRC check must catch it).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub corrupt: f64,
    /// Delay added to every impaired packet, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub delay_us: u64,
    /// A bottleneck in the path: a queue drained at this many Mb/s (10^6 bit/s of IP packets)
    /// that marks ECN CE on ECN-capable packets above --bottleneck-mark and drops at
    /// --bottleneck-queue, in the direction(s) of --impair (one queue each). With --cc dcqcn
    /// on both ends the senders slow down on its marks.
    #[arg(long, value_name = "MBPS")]
    pub bottleneck: Option<f64>,
    /// The bottleneck's queue capacity in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub bottleneck_queue: u64,
    /// The bottleneck's marking threshold K in bytes (step marking, as DCTCP's; RED's Kmin
    /// with --bottleneck-mark-max).
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 10)]
    pub bottleneck_mark: u64,
    /// RED marking instead of a step: from --bottleneck-mark up to this depth in bytes (Kmax)
    /// a packet is marked with a probability rising to --bottleneck-mark-prob, above it always.
    #[arg(long, value_name = "BYTES")]
    pub bottleneck_mark_max: Option<u64>,
    /// RED's marking probability at --bottleneck-mark-max (Pmax, 0..1).
    #[arg(long, value_name = "P", default_value_t = 1.0)]
    pub bottleneck_mark_prob: f64,
    /// Seed of the impairment's random choices.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Which packets the impairment applies to. With the default, the same flags on both
    /// ends impair each direction once, so `--drop 0.1` on both is a 10% lossy link.
    #[arg(long, value_enum, default_value_t = ImpairDirection::Send)]
    pub impair: ImpairDirection,
    /// Print the device's non-zero counters (rxe's names, plus what the impairment injected)
    /// to stderr when the program ends, successfully or not.
    #[arg(long)]
    pub counters: bool,
    /// Busy-poll: the engine thread spins on the socket and completion waits spin, instead
    /// of sleeping until woken. Lower latency, at the cost of two busy CPUs per process.
    #[arg(long)]
    pub busy_poll: bool,
    /// Without --busy-poll: how long the engine thread keeps looking for packets and posts
    /// after it has served some, before it sleeps until woken (microseconds; 0: sleep at
    /// once). It spins only while traffic is that dense, so an idle device costs no CPU.
    #[arg(long, value_name = "US", default_value_t = DEFAULT_IDLE_SPIN.as_micros() as u64,
        value_parser = clap::value_parser!(u64).range(0..=MAX_IDLE_SPIN.as_micros() as u64))]
    pub idle_spin_us: u64,
    /// Send each packet as its own datagram instead of runs of equal-sized packets as one
    /// UDP GSO send.
    #[arg(long)]
    pub no_gso: bool,
    /// Congestion control: `dcqcn` marks packets ECN-capable (ECT(0)), answers CE-marked
    /// packets with CNPs and paces each QP by DCQCN on the CNPs it receives; `none` (the
    /// default, as kernel rxe) does none of it.
    #[arg(long, value_enum, default_value_t = CcMode::None)]
    pub cc: CcMode,
    /// A DCQCN parameter as NAME=VALUE (repeat the flag, or separate by commas), under mlx5's
    /// names: rpg_max_rate, rpg_ai_rate, rpg_hai_rate, rpg_min_rate (Mb/s), rpg_time_reset,
    /// dce_tcp_rtt, rate_reduce_monitor_period, min_time_between_cnps (microseconds),
    /// rpg_byte_reset (bytes), rpg_threshold, rpg_min_dec_fac (percent), dce_tcp_g,
    /// initial_alpha_value (1/1024), cnp_dscp. Needs --cc dcqcn.
    #[arg(long = "cc-param", value_name = "NAME=VALUE")]
    pub cc_param: Vec<String>,
}

/// The congestion control of `--cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CcMode {
    /// None, as kernel rxe: packets keep the address vector's traffic class, CE marks are not
    /// answered, CNPs are counted and dropped.
    None,
    /// DCQCN (ECT(0), CNPs, per-QP rate control).
    Dcqcn,
}

/// The congestion control configuration of `--cc` and `--cc-param`, or the usage error that
/// names what is wrong. `softroce run` shares it to check the flags it passes to the shim.
pub fn cc_config(mode: CcMode, params: &[String]) -> Result<CcConfig, CliError> {
    let mode = match mode {
        CcMode::None => "none",
        CcMode::Dcqcn => "dcqcn",
    };
    CcConfig::from_text(mode, &params.join(","))
        .map_err(|e| CliError::Usage(format!("--cc-param: {e}")))
}

/// Prints the counters when dropped, if asked to: the program's result, an error or a
/// retry-exceeded failure all end up reporting what the transport did.
pub struct CounterReport {
    counters: Option<Arc<Counters>>,
}

impl CounterReport {
    /// The counters line: every non-zero counter as `name=value`, in declaration order.
    pub fn line(counters: &Counters) -> String {
        let mut line = String::from("counters:");
        for (name, v) in counters.snapshot() {
            if v != 0 {
                line.push_str(&format!(" {name}={v}"));
            }
        }
        line
    }
}

impl Drop for CounterReport {
    fn drop(&mut self) {
        if let Some(c) = &self.counters {
            eprintln!("{}", CounterReport::line(c));
        }
    }
}

/// Which packets are impaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImpairDirection {
    /// Packets this endpoint sends.
    Send,
    /// Packets this endpoint receives.
    Recv,
    /// Both.
    Both,
}

impl DeviceArgs {
    /// The local address for a server (`peer` = None) or for a client of `peer`.
    pub fn local_ip(&self, peer: Option<IpAddr>) -> Result<IpAddr, CliError> {
        if let Some(ip) = self.bind {
            return Ok(ip);
        }
        let Some(peer) = peer else {
            return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
        };
        if peer.is_loopback() {
            return Ok(match peer {
                IpAddr::V4(v4) if v4.octets() == [127, 0, 0, 2] => "127.0.0.1".parse().unwrap(),
                IpAddr::V4(_) => "127.0.0.2".parse().unwrap(),
                // ::1 is the only IPv6 loopback address: the two ends must use ports to differ.
                IpAddr::V6(_) => peer,
            });
        }
        // Ask the routing table which source address reaches the peer (no packet is sent).
        let probe = UdpSocket::bind(SocketAddr::new(
            if peer.is_ipv4() {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            },
            0,
        ))
        .map_err(CliError::Io)?;
        probe
            .connect(SocketAddr::new(peer, self.roce_port))
            .map_err(CliError::Io)?;
        Ok(probe.local_addr().map_err(CliError::Io)?.ip())
    }

    /// Checks every device flag; subcommands call it before they wait for a peer, so that a
    /// bad flag fails at once instead of after a connection.
    pub fn validate(&self) -> Result<(), CliError> {
        self.impairment()?;
        self.congestion_control().map(|_| ())
    }

    /// The congestion control configuration of `--cc` and `--cc-param`.
    fn congestion_control(&self) -> Result<CcConfig, CliError> {
        cc_config(self.cc, &self.cc_param)
    }

    /// Checks the impairment flags.
    fn impairment(&self) -> Result<Option<Impairment>, CliError> {
        for (name, p) in [
            ("--drop", self.drop),
            ("--dup", self.dup),
            ("--reorder", self.reorder),
            ("--corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) || p.is_nan() {
                return Err(CliError::Usage(format!(
                    "{name} must be a probability in 0..1, not {p}"
                )));
            }
        }
        let bottleneck = self.bottleneck()?;
        let any = self.drop > 0.0
            || self.dup > 0.0
            || self.reorder > 0.0
            || self.corrupt > 0.0
            || self.delay_us > 0
            || bottleneck.is_some();
        if !any {
            return Ok(None);
        }
        Ok(Some(Impairment {
            drop: self.drop,
            dup: self.dup,
            reorder: self.reorder,
            corrupt: self.corrupt,
            delay: Duration::from_micros(self.delay_us),
            seed: self.seed,
            apply_to: match self.impair {
                ImpairDirection::Send => Direction::Send,
                ImpairDirection::Recv => Direction::Recv,
                ImpairDirection::Both => Direction::Both,
            },
            bottleneck,
        }))
    }

    /// Checks the bottleneck flags.
    fn bottleneck(&self) -> Result<Option<Bottleneck>, CliError> {
        let Some(mbps) = self.bottleneck else {
            return Ok(None);
        };
        if !(mbps > 0.0 && mbps <= 1e6) {
            return Err(CliError::Usage(format!(
                "--bottleneck {mbps}: the rate must be above 0 and at most 1000000 Mb/s"
            )));
        }
        // At least one packet of the largest MTU with its headers.
        const MIN_QUEUE: u64 = 4096 + 64 + 48;
        if self.bottleneck_queue < MIN_QUEUE {
            return Err(CliError::Usage(format!(
                "--bottleneck-queue {}: the queue must hold at least {MIN_QUEUE} bytes (one 4096-byte packet)",
                self.bottleneck_queue
            )));
        }
        if self.bottleneck_mark >= self.bottleneck_queue {
            return Err(CliError::Usage(format!(
                "--bottleneck-mark {}: the marking threshold must be below --bottleneck-queue {}",
                self.bottleneck_mark, self.bottleneck_queue
            )));
        }
        let kmax = self.bottleneck_mark_max.unwrap_or(self.bottleneck_mark);
        if kmax < self.bottleneck_mark || kmax >= self.bottleneck_queue {
            return Err(CliError::Usage(format!(
                "--bottleneck-mark-max {kmax}: RED's Kmax must lie between --bottleneck-mark {} and --bottleneck-queue {}",
                self.bottleneck_mark, self.bottleneck_queue
            )));
        }
        let p = self.bottleneck_mark_prob;
        if !(0.0..=1.0).contains(&p) {
            return Err(CliError::Usage(format!(
                "--bottleneck-mark-prob {p}: must be a probability in 0..1"
            )));
        }
        Ok(Some(Bottleneck {
            rate_bytes_per_sec: mbps * 1e6 / 8.0,
            limit_bytes: self.bottleneck_queue,
            mark_bytes: self.bottleneck_mark,
            mark_max_bytes: kmax,
            mark_max_prob: p,
        }))
    }

    /// A guard that reports `ctx`'s counters on stderr when dropped, if `--counters` was given.
    pub fn counter_report(&self, ctx: &Context) -> CounterReport {
        CounterReport {
            counters: self.counters.then(|| ctx.counter_handle()),
        }
    }

    /// Opens the device at `ip`.
    pub fn open(&self, ip: IpAddr) -> Result<Context, CliError> {
        let cfg = DeviceConfig {
            addr: SocketAddr::new(ip, self.roce_port),
            pcap: self.pcap.clone(),
            impairment: self.impairment()?,
            remote_port: None,
            busy_poll: self.busy_poll,
            idle_spin: Duration::from_micros(self.idle_spin_us),
            gso: !self.no_gso,
            cc: self.congestion_control()?,
            share: true,
        };
        Context::open(&cfg).map_err(CliError::Verbs)
    }
}
