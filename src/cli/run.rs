//! `softroce run [--bind ADDR]... [--mtu MTU] -- PROGRAM [ARGS...]`: runs an unmodified verbs
//! program on softroce, with the libibverbs shim (`libibverbs.so.1`, and `librdmacm.so.1` the
//! same object; built from `ibverbs/`)
//! found first through `LD_LIBRARY_PATH` and its device `softroce0` bound to ADDR (with several
//! `--bind`s, one device each: `softroce0` at the first, `softroce1` at the second, ...); the
//! program also finds the devices' /dev/infiniband nodes and sysfs entries
//! ([`super::run_ns`]).

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

use super::device::{cc_config, CcMode};
use super::CliError;
use softroce::driver::{DEFAULT_IDLE_SPIN, MAX_IDLE_SPIN};
use softroce::ib::Mtu;

/// Flags of `softroce run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The device's address: an IP (UDP port 4791) or IP:PORT, as the host's NIC address: any
    /// number of processes share it, as processes share rxe0. Given more than once (or as a
    /// comma-separated list), the program has one device per address, as a host with several
    /// rxe devices: softroce0 at the first, softroce1 at the second, ... (passed to the shim
    /// as SOFTROCE_BIND, the addresses joined by commas).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1",
        value_delimiter = ','
    )]
    pub bind: Vec<String>,
    /// The port's active MTU in bytes (256, 512, 1024, 2048 or 4096), what programs read with
    /// ibv_query_port and usually use as the path MTU; with several devices, every device's
    /// [default: as rxe derives it from each device's address's interface: 4096 on loopback,
    /// 1024 on a 1500-byte link].
    #[arg(long, value_name = "MTU")]
    pub mtu: Option<u32>,
    /// The shim library (default: $SOFTROCE_LIBIBVERBS, else libibverbs.so next to this
    /// executable, where cargo builds it).
    #[arg(long, value_name = "FILE")]
    pub lib: Option<PathBuf>,
    /// Run the program without the device's /dev/infiniband node and sysfs entries (see
    /// `run_ns`): as on a host with no RDMA device, apart from libibverbs.
    #[arg(long)]
    pub no_device_view: bool,
    /// Congestion control of the program's device, as the other subcommands' --cc (passed to
    /// the shim as SOFTROCE_CC).
    #[arg(long, value_enum, default_value_t = CcMode::None)]
    pub cc: CcMode,
    /// A DCQCN parameter NAME=VALUE, as the other subcommands' --cc-param (passed to the shim
    /// as SOFTROCE_CC_PARAMS).
    #[arg(long = "cc-param", value_name = "NAME=VALUE")]
    pub cc_param: Vec<String>,
    /// Busy-poll mode for the program's device (passed to the shim as SOFTROCE_BUSY_POLL=1):
    /// the program's threads that poll CQs and post run the engine themselves, as with a
    /// user-space RDMA provider, for programs that spin on ibv_poll_cq (perftest, UCX, MPI).
    /// Lower latency; the engine's own thread then wakes every 50 us while nobody polls.
    #[arg(long)]
    pub busy_poll: bool,
    /// Without --busy-poll: how long the device's engine thread spins for packets and posts
    /// before it sleeps, as the other subcommands' --idle-spin-us (passed to the shim as
    /// SOFTROCE_IDLE_SPIN_US).
    #[arg(long, value_name = "US", default_value_t = DEFAULT_IDLE_SPIN.as_micros() as u64,
        value_parser = clap::value_parser!(u64).range(0..=MAX_IDLE_SPIN.as_micros() as u64))]
    pub idle_spin_us: u64,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub program: Vec<OsString>,
}

/// Parses `IP` or `IP:PORT` (IPv6 as `[::1]:PORT`).
pub fn parse_bind(s: &str) -> Option<SocketAddr> {
    s.parse::<SocketAddr>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 4791)))
}

/// The `--bind` addresses, in order: each must parse, and none may be named twice (two
/// devices cannot hold one address's socket).
fn parse_binds(args: &[String]) -> Result<Vec<SocketAddr>, CliError> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for a in args {
        let b = parse_bind(a.trim())
            .ok_or_else(|| CliError::Usage(format!("--bind {a}: not an IP or IP:PORT")))?;
        if out.contains(&b) {
            return Err(CliError::Usage(format!(
                "--bind {a}: {b} is named twice (each device needs an address of its own)"
            )));
        }
        out.push(b);
    }
    if out.is_empty() {
        return Err(CliError::Usage("--bind: no address".into()));
    }
    Ok(out)
}

/// Addresses as SOFTROCE_BIND takes them: joined by commas.
fn join(binds: &[SocketAddr]) -> String {
    binds
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn find_lib(explicit: Option<&Path>) -> Result<PathBuf, CliError> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => std::env::var_os("SOFTROCE_LIBIBVERBS")
            .map(PathBuf::from)
            .into_iter()
            .chain(
                std::env::current_exe()
                    .ok()
                    .and_then(|e| e.parent().map(|d| d.join("libibverbs.so"))),
            )
            .collect(),
    };
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            CliError::Usage(format!(
                "the libibverbs shim is not at {} (build it with `cargo build -p softroce-ibverbs`, or give --lib)",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
        })
}

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1`, both symlinks to the one shim
/// object (spec-notes/librdmacm.md: the loader maps a file once, so both libraries share one
/// engine); removed when dropped.
struct LibDir(PathBuf);

impl LibDir {
    fn new(lib: &Path) -> Result<LibDir, CliError> {
        // A fresh directory of our own: a name with the PID alone met the directory a killed
        // run with the same PID left behind (EEXIST), and /tmp is everyone's.
        let mut attempts = 0;
        let dir = loop {
            let name = format!(
                "softroce-run-{}-{:08x}",
                std::process::id(),
                softroce::random::u32()
            );
            let dir = std::env::temp_dir().join(name);
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 16 => {
                    attempts += 1;
                }
                Err(e) => return Err(CliError::Io(e)),
            }
        };
        let guard = LibDir(dir);
        let target = lib.canonicalize().map_err(CliError::Io)?;
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            std::os::unix::fs::symlink(&target, guard.0.join(name)).map_err(CliError::Io)?;
        }
        Ok(guard)
    }
}

impl Drop for LibDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the program; on success returns its exit status as ours (128 + signal when killed).
pub fn run(args: &RunArgs) -> Result<u8, CliError> {
    let binds = parse_binds(&args.bind)?;
    let mtu = args
        .mtu
        .map(|m| {
            Mtu::from_bytes(m).ok_or_else(|| {
                CliError::Usage(format!("--mtu {m}: must be 256, 512, 1024, 2048 or 4096"))
            })
        })
        .transpose()?;
    // One MTU a device (SOFTROCE_MTU takes a comma-separated list as SOFTROCE_BIND does).
    let mtus: Vec<String> = binds
        .iter()
        .map(|b| {
            mtu.unwrap_or_else(|| softroce::driver::interface::default_active_mtu(b.ip()))
                .bytes()
                .to_string()
        })
        .collect();
    let ips: Vec<IpAddr> = binds.iter().map(|b| b.ip()).collect();
    // Checked here, where the message reaches the user; the shim would only fail to open.
    cc_config(args.cc, &args.cc_param)?;
    let lib = find_lib(args.lib.as_deref())?;
    if !args.no_device_view {
        if let Err(e) = super::run_ns::lay_device_view(&ips) {
            eprintln!(
                "softroce run: no device view ({e}): programs that look for /dev/infiniband/{} or /sys/class/infiniband/{} (UCX, rdma-core's tests) will not find the device",
                super::run_ns::uverbs(0),
                super::run_ns::ibdev(0)
            );
        } else {
            super::run_ns::keep_hw_counters_live(binds.clone());
        }
    }
    let dir = LibDir::new(&lib)?;
    let mut path = OsString::from(&dir.0);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (prog, rest) = args
        .program
        .split_first()
        .ok_or_else(|| CliError::Usage("no program to run".into()))?;
    let mut cmd = Command::new(prog);
    // SAFETY: the hook runs in the child between fork and exec and only makes one
    // async-signal-safe system call.
    unsafe {
        cmd.pre_exec(|| {
            // The program does not outlive `softroce run`: whoever kills run (a test's
            // deadline, `timeout`) kills the program and frees its UDP port.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let status = cmd
        .args(rest)
        .env("LD_LIBRARY_PATH", path)
        .env("SOFTROCE_BIND", join(&binds))
        .env("SOFTROCE_MTU", mtus.join(","))
        .env(
            "SOFTROCE_CC",
            match args.cc {
                CcMode::None => "none",
                CcMode::Dcqcn => "dcqcn",
            },
        )
        .env("SOFTROCE_CC_PARAMS", args.cc_param.join(","))
        .env("SOFTROCE_BUSY_POLL", if args.busy_poll { "1" } else { "0" })
        .env("SOFTROCE_IDLE_SPIN_US", args.idle_spin_us.to_string())
        .status()
        .map_err(|e| CliError::Usage(format!("cannot run {}: {e}", prog.to_string_lossy())))?;
    drop(dir);
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_takes_an_ip_or_an_ip_and_port() {
        assert_eq!(
            parse_bind("127.0.0.2"),
            Some("127.0.0.2:4791".parse().unwrap())
        );
        assert_eq!(
            parse_bind("127.0.0.2:5000"),
            Some("127.0.0.2:5000".parse().unwrap())
        );
        assert_eq!(parse_bind("::1"), Some("[::1]:4791".parse().unwrap()));
        assert_eq!(parse_bind("[::1]:7"), Some("[::1]:7".parse().unwrap()));
        assert_eq!(parse_bind("localhost"), None);
        assert_eq!(parse_bind("127.0.0.300"), None);
    }

    #[test]
    fn several_binds_are_one_device_each_in_order_and_never_twice() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let b = parse_binds(&v(&["127.0.0.2", "127.0.0.3:5000"])).unwrap();
        assert_eq!(join(&b), "127.0.0.2:4791,127.0.0.3:5000");
        assert_eq!(
            join(&parse_binds(&v(&["[::1]:7"])).unwrap()),
            "[::1]:7",
            "one address: as SOFTROCE_BIND always was"
        );
        assert!(parse_binds(&v(&["127.0.0.2", "127.0.0.2:4791"])).is_err());
        assert!(parse_binds(&v(&["127.0.0.2", "localhost"])).is_err());
        assert!(parse_binds(&[]).is_err());
    }
}
