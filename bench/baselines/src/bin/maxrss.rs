//! Runs a command and writes what it cost to a file, from the kernel's rusage for the child
//! (wait4(2)), read when the process has ended so that no sample can miss anything: its peak
//! resident set size (ru_maxrss, the same high-water mark as VmHWM in /proc/PID/status), the
//! CPU time of all its threads (user + system), and its context switches (voluntary +
//! involuntary, all threads).
//!
//!     maxrss OUT_FILE -- COMMAND [ARGS...]
//!
//! OUT_FILE gets one line, `max_rss_kib N cpu_s S csw N`. The exit status is the command's
//! (128 + signal if a signal ended it). stdin, stdout and stderr are the command's.

use std::process::{exit, Command};

use softroce_bench_baselines::die;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 || args[1] != "--" {
        die("usage: maxrss OUT_FILE -- COMMAND [ARGS...]");
    }
    let child = Command::new(&args[2])
        .args(&args[3..])
        .spawn()
        .unwrap_or_else(|e| die(&format!("{}: {e}", args[2])));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is a plain C struct for which all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `ru` are valid for writes; `pid` is our own child, not yet
        // reaped (std's Child is never waited on here).
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            die("wait4 failed");
        }
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let line = format!(
        "max_rss_kib {} cpu_s {:.6} csw {}\n",
        ru.ru_maxrss,
        secs(ru.ru_utime) + secs(ru.ru_stime),
        ru.ru_nvcsw + ru.ru_nivcsw
    );
    if let Err(e) = std::fs::write(&args[0], line) {
        die(&format!("{}: {e}", args[0]));
    }
    if libc::WIFEXITED(status) {
        exit(libc::WEXITSTATUS(status));
    }
    exit(128 + libc::WTERMSIG(status));
}
