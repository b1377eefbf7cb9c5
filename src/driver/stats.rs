//! Live counters: a running process's devices, watched from outside without stopping them
//! (`softroce stat`, in the manner of `rdma statistic` over rxe's hw_counters).
//!
//! The first device a process opens starts one listener thread on a Unix socket,
//! `<dir>/<pid>.sock` ([`stat_dir`]: `$SOFTROCE_STAT_DIR`, else `$XDG_RUNTIME_DIR/softroce`,
//! else `/tmp/softroce-<uid>`, created 0700). Each connection gets one snapshot of every open
//! device of the process, as text, and is closed; the counters are the relaxed atomics the
//! engine updates, read while it runs, and each QP is locked only for the moment its state is
//! copied. Nothing here prints or panics: inside a foreign process (the libibverbs shim) a
//! listener that cannot start simply does not exist, and `softroce stat` cannot see that
//! process. Setting `SOFTROCE_STAT=0` keeps a process from listening at all.
//!
//! The snapshot format, one record per line, fields separated by spaces:
//! `device <address>`, then `counter <name> <value>` for every device counter, then
//! `qp <qpn> <type> <state> <dest_qpn> <sq_psn> <rq_psn> <outstanding_psns> <send_queue>
//! <rate>` per QP (`rate`: the DCQCN rate in Mb/s, or `line` when the QP is not limited),
//! and `end` after the last device.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

use super::device::Device;

static DEVICES: Mutex<Vec<Weak<Device>>> = Mutex::new(Vec::new());
static LISTENER: Once = Once::new();

/// The directory the processes' stat sockets live in.
pub fn stat_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTROCE_STAT_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("softroce");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/softroce-{uid}"))
}

/// The socket process `pid` answers on.
pub fn socket_path(pid: u32) -> PathBuf {
    stat_dir().join(format!("{pid}.sock"))
}

/// Makes `dev` visible to `softroce stat`, starting the process's listener on first use.
pub(crate) fn register(dev: &Arc<Device>) {
    if std::env::var_os("SOFTROCE_STAT").is_some_and(|v| v == "0") {
        return;
    }
    {
        let mut list = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|d| d.strong_count() > 0);
        list.push(Arc::downgrade(dev));
    }
    LISTENER.call_once(|| {
        if let Ok(l) = bind() {
            let _ = super::thread::spawn_settled("softroce-stat".into(), move || serve(l));
        }
    });
}

fn bind() -> io::Result<UnixListener> {
    let dir = stat_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let path = socket_path(std::process::id());
    // A file of that name is a dead process's with our PID: ours now.
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

fn serve(l: UnixListener) {
    for conn in l.incoming() {
        let Ok(mut s) = conn else { continue };
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = s.write_all(snapshot().as_bytes());
    }
}

/// The snapshot of every open device of this process (the format of the module
/// documentation).
pub fn snapshot() -> String {
    use std::fmt::Write as _;
    let devices: Vec<Arc<Device>> = {
        let list = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        list.iter().filter_map(Weak::upgrade).collect()
    };
    let mut out = String::new();
    for dev in devices {
        if dev.closed.load(std::sync::atomic::Ordering::Acquire) {
            continue;
        }
        let _ = writeln!(out, "device {}", dev.local);
        for (name, v) in dev.counters.snapshot() {
            let _ = writeln!(out, "counter {name} {v}");
        }
        let cores: Vec<_> = {
            let qps = dev.qps.read().unwrap_or_else(|e| e.into_inner());
            let mut v: Vec<_> = qps.iter().map(|(n, e)| (*n, Arc::clone(&e.core))).collect();
            v.sort_by_key(|(n, _)| *n);
            v
        };
        for (qpn, core) in cores {
            let q = core.lock().unwrap_or_else(|e| e.into_inner());
            let a = q.query();
            let d = q.queue_depths();
            let rate = q
                .cc_rate_mbps()
                .map_or_else(|| "line".to_string(), |r| format!("{r:.1}"));
            let _ = writeln!(
                out,
                "qp {qpn} {:?} {:?} {} {} {} {} {} {rate}",
                q.qp_type(),
                a.qp_state,
                a.dest_qp_num,
                a.sq_psn,
                a.rq_psn,
                d.outstanding_psns,
                d.send,
            );
        }
    }
    out.push_str("end\n");
    out
}

/// One device as `softroce stat` reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceStats {
    /// The device's address.
    pub addr: String,
    /// Its counters, in the engine's order.
    pub counters: Vec<(String, u64)>,
    /// Its QPs: the fields of a `qp` line after the word `qp`.
    pub qps: Vec<Vec<String>>,
}

/// Why a process's counters could not be read.
#[derive(Debug)]
pub enum StatError {
    /// No process with a stat socket of that PID (or it exited).
    NoProcess(u32),
    /// The socket or the exchange failed.
    Io(io::Error),
    /// The answer did not follow the format (a line number, the line).
    Malformed(usize, String),
}

impl std::fmt::Display for StatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatError::NoProcess(p) => write!(f, "no softroce process {p} (no stat socket)"),
            StatError::Io(e) => write!(f, "{e}"),
            StatError::Malformed(n, l) => write!(f, "malformed stat line {n}: {l:?}"),
        }
    }
}

impl std::error::Error for StatError {}

/// The PIDs of the processes with a stat socket whose process still exists. The socket of a
/// process that is gone (it cannot remove its own when it exits) is removed here: the
/// directory is this user's alone.
pub fn list() -> Vec<u32> {
    let dir = stat_dir();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let Some(pid) = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            pids.push(pid);
        } else {
            let _ = std::fs::remove_file(e.path());
        }
    }
    pids.sort_unstable();
    pids
}

/// Reads process `pid`'s devices (bounded: 2 s for the whole exchange).
pub fn query(pid: u32) -> Result<Vec<DeviceStats>, StatError> {
    let s = match UnixStream::connect(socket_path(pid)) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(StatError::NoProcess(pid))
        }
        Err(e) => return Err(StatError::Io(e)),
    };
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(StatError::Io)?;
    parse(BufReader::new(s))
}

/// Parses a snapshot.
pub fn parse(r: impl BufRead) -> Result<Vec<DeviceStats>, StatError> {
    let mut out: Vec<DeviceStats> = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(StatError::Io)?;
        let f: Vec<&str> = line.split(' ').collect();
        let bad = || StatError::Malformed(i + 1, line.clone());
        match f.as_slice() {
            ["device", addr] => out.push(DeviceStats {
                addr: addr.to_string(),
                ..DeviceStats::default()
            }),
            ["counter", name, v] => {
                let v = v.parse().map_err(|_| bad())?;
                out.last_mut()
                    .ok_or_else(bad)?
                    .counters
                    .push((name.to_string(), v));
            }
            ["qp", rest @ ..] if rest.len() == 9 => out
                .last_mut()
                .ok_or_else(bad)?
                .qps
                .push(rest.iter().map(|s| s.to_string()).collect()),
            ["end"] => return Ok(out),
            _ => return Err(bad()),
        }
    }
    Err(StatError::Malformed(0, "no end line (cut short)".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_takes_the_format_and_refuses_what_is_not() {
        let text = "device 127.0.0.1:4791\ncounter sent_pkts 5\ncounter np_cnp_sent 1\n\
                    qp 17 Rc Rts 18 100 200 3 4 line\nend\n";
        let d = parse(text.as_bytes()).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].addr, "127.0.0.1:4791");
        assert_eq!(d[0].counters[1], ("np_cnp_sent".to_string(), 1));
        assert_eq!(d[0].qps[0][0], "17");
        assert!(matches!(
            parse("counter x 1\nend\n".as_bytes()),
            Err(StatError::Malformed(1, _))
        ));
        assert!(matches!(
            parse("device a\ncounter x y\nend\n".as_bytes()),
            Err(StatError::Malformed(2, _))
        ));
        assert!(matches!(
            parse("device a\n".as_bytes()),
            Err(StatError::Malformed(0, _))
        ));
    }
}
