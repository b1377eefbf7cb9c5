//! Helpers shared by the baseline programs: argument lookup, UDP sockets set up as softroce's
//! link sets up its own (src/driver/udp.rs), and perftest's latency statistics.

#![deny(missing_docs)]

use std::io;
use std::mem::size_of;
use std::net::SocketAddrV4;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::exit;
use std::time::Instant;

/// The receive buffer softroce asks for on its UDP socket; the baselines ask for the same so
/// that neither side gets a deeper queue.
pub const RCVBUF: i32 = 8 << 20;

/// `--name VALUE` from the command line, if given.
pub fn opt(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Whether `--name` is on the command line.
pub fn flag(args: &[String], name: &str) -> bool {
    args.iter().any(|a| a == name)
}

/// `--name VALUE` parsed, or `default`; exits with a usage message if the value is malformed.
pub fn parsed<T: std::str::FromStr>(args: &[String], name: &str, default: Option<T>) -> T {
    match opt(args, name) {
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| die(&format!("{name} {v}: not a valid value"))),
        None => default.unwrap_or_else(|| die(&format!("{name} is required"))),
    }
}

/// Prints `msg` to stderr and exits with status 2.
pub fn die(msg: &str) -> ! {
    eprintln!("{}: {msg}", std::env::args().next().unwrap_or_default());
    exit(2)
}

/// The last OS error, prefixed by what was being done.
pub fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// `addr` as the kernel's sockaddr_in.
pub fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// setsockopt with an int value.
pub fn set_int(fd: &OwnedFd, level: i32, name: i32, value: i32, what: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the pointer and length describe `value`, an int that lives across the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(os_err(what));
    }
    Ok(())
}

/// A UDP socket bound to `addr` with softroce's receive buffer size.
pub fn udp_socket(addr: SocketAddrV4) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) has no memory arguments; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(os_err("socket"));
    }
    // SAFETY: `raw` is a descriptor just returned by socket(2) and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // As softroce: ask for 8 MiB and accept what the kernel's rmem_max allows.
    let _ = set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF, "SO_RCVBUF");
    let sa = sockaddr(addr);
    // SAFETY: `sa` is a valid sockaddr_in and the length is its size.
    let r = unsafe {
        libc::bind(
            raw,
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(os_err(&format!("bind {addr}")));
    }
    Ok(fd)
}

/// Sets SO_RCVTIMEO (0 = block forever).
pub fn set_recv_timeout(fd: &OwnedFd, ms: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_usec: ((ms % 1000) * 1000) as libc::suseconds_t,
    };
    // SAFETY: the pointer and length describe `tv`, which lives across the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(os_err("SO_RCVTIMEO"));
    }
    Ok(())
}

/// One-way latency statistics in microseconds from the start time of each iteration, computed
/// exactly as `softroce perf --lat` (src/cli/perf/report.rs) and perftest's print_report_lat:
/// the gaps between consecutive starts divided by `rtt_factor` (2 for a ping-pong), the two
/// largest left out, the median of the rest as t_typical.
#[derive(Debug, Clone, Copy)]
pub struct Lat {
    /// Smallest sample.
    pub min: f64,
    /// perftest's t_typical: the median of the kept samples.
    pub p50: f64,
    /// 99th percentile, perftest's index rule.
    pub p99: f64,
    /// Mean of the kept samples.
    pub avg: f64,
}

impl Lat {
    /// None with fewer than four starts (perftest's minimum for a report).
    pub fn from_starts(starts: &[Instant], rtt_factor: f64) -> Option<Lat> {
        if starts.len() < 4 {
            return None;
        }
        let mut d: Vec<f64> = starts
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
        d.sort_by(f64::total_cmp);
        let m = d.len() - 2;
        let p50 = if m % 2 == 0 {
            (d[m / 2 - 1] + d[m / 2]) / 2.0
        } else {
            d[m / 2]
        };
        Some(Lat {
            min: d[0],
            p50,
            p99: d[((m as f64 * 0.99).ceil() as usize).min(m)],
            avg: d[..m].iter().sum::<f64>() / m as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn latency_follows_softroce_perf_report() {
        // The same case as src/cli/perf/report.rs: gaps 1..7, 9 and an outlier of 100 us.
        let t0 = Instant::now();
        let mut starts = vec![t0];
        let mut t = t0;
        for gap in [1u64, 2, 3, 4, 5, 6, 7, 9, 100] {
            t += Duration::from_micros(gap);
            starts.push(t);
        }
        let l = Lat::from_starts(&starts, 1.0).unwrap();
        assert!((l.p50 - 4.0).abs() < 1e-6, "{l:?}");
        assert!((l.p99 - 9.0).abs() < 1e-6, "{l:?}");
        let half = Lat::from_starts(&starts, 2.0).unwrap();
        assert!((half.p50 - 2.0).abs() < 1e-6, "{half:?}");
        assert!(Lat::from_starts(&starts[..3], 1.0).is_none());
    }
}
