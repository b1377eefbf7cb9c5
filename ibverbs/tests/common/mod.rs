//! Helpers of the shim's tests: the library under its soname in a directory of its own, the
//! programs to run under it, and two-process runs with deadlines.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// target/<profile>/, where cargo put libibverbs.so (and, in a workspace build, softroce).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test>-<hash>
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// softroce's binary, which a workspace build puts next to the shim.
pub fn softroce() -> PathBuf {
    let p = target_dir().join("softroce");
    assert!(
        p.is_file(),
        "{} not built: run the tests from the workspace root (cargo test), which builds it",
        p.display()
    );
    p
}

/// A directory holding `libibverbs.so.1` -> the shim, for LD_LIBRARY_PATH.
pub fn shim_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(make_shim_dir).clone()
}

/// The shim that this test run was built with. `cargo test` builds the library into
/// target/<profile>/deps/ and copies it up to target/<profile>/ only on `cargo build`, so the
/// copy in deps/ is the current one (the other may be missing, as on a fresh clone, or stale).
pub fn shim_lib() -> PathBuf {
    let fresh = target_dir().join("deps").join("libibverbs.so");
    if fresh.is_file() {
        return fresh;
    }
    let built = target_dir().join("libibverbs.so");
    assert!(
        built.is_file(),
        "neither {} nor {} is built",
        fresh.display(),
        built.display()
    );
    built
}

fn make_shim_dir() -> PathBuf {
    let lib = shim_lib();
    let dir = std::env::temp_dir().join(format!("softroce-shim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    dir
}

/// The path of a program that CI installs (ibverbs-utils, perftest, a C compiler); fails the
/// test with the package to install when it is missing.
pub fn program(name: &str, package: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} not found: install {package} (scripts/setup.sh does)");
}

/// `cmd` with the shim in place and the device bound to `bind`.
pub fn under_shim(prog: &Path, bind: &str) -> Command {
    let mut c = Command::new(prog);
    c.env("LD_LIBRARY_PATH", shim_dir())
        .env("SOFTROCE_BIND", bind)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A directory with `libibverbs.so.1` and `librdmacm.so.1`, both links to the shim.
pub fn rdmacm_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let lib = shim_lib();
        let dir = std::env::temp_dir().join(format!("softroce-rdmacm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&lib, &link).unwrap();
        }
        dir
    })
    .clone()
}

/// Whether the process `pid` listens on the device at `ip` (port 4791): the table of the
/// address's group names it as a listener, which it does once its CM listens.
pub fn cm_listening(ip: &str, pid: u32) -> bool {
    let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 4791);
    softroce::driver::group::listener_pids(addr).is_ok_and(|l| l.iter().any(|&(_, p)| p == pid))
}

/// A TCP port free on 127.0.0.1 now (for the programs' out-of-band exchange).
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits for `child` at most `limit`; kills it when late. Returns its output and whether it
/// finished in time.
pub fn wait_for(mut child: Child, limit: Duration) -> (Output, bool) {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait().unwrap() {
            Some(_) => return (child.wait_with_output().unwrap(), true),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                return (child.wait_with_output().unwrap(), false);
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Whether some socket listens on TCP `port` (IPv4 or IPv6), from /proc/net/tcp{,6}: a probe
/// connection would be taken for the client by servers that accept one peer.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is cols[1] (ADDR:PORT in hex); st is cols[3], 0A = LISTEN.
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// The TCP port a command's `-p PORT` names.
fn port_arg(c: &Command) -> Option<u16> {
    let args: Vec<_> = c.get_args().collect();
    args.windows(2)
        .find(|w| w[0] == "-p")
        .and_then(|w| w[1].to_str()?.parse().ok())
}

/// Runs a server and, once it listens on its `-p` port, a client; both must exit 0 within
/// `limit`. Returns (server stdout+stderr, client stdout+stderr).
pub fn pair(mut server: Command, mut client: Command, limit: Duration) -> (String, String) {
    let mut s = server.spawn().unwrap();
    let port = port_arg(&server).expect("the server's command has -p PORT");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listening(port) && Instant::now() < deadline && s.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = client.spawn().unwrap();
    let (co, cok) = wait_for(c, limit);
    let (so, sok) = wait_for(s, limit);
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (st, ct) = (text(&so), text(&co));
    assert!(sok && cok, "timed out\nserver:\n{st}\nclient:\n{ct}");
    assert!(
        so.status.success(),
        "server failed: {:?}\n{st}\nclient:\n{ct}",
        so.status
    );
    assert!(
        co.status.success(),
        "client failed: {:?}\n{ct}\nserver:\n{st}",
        co.status
    );
    (st, ct)
}

/// A C test program (ex.c, mw.c, stress.c, api.c ...) built against Debian's libibverbs-dev
/// headers, in a directory of its own that is removed once the program has passed (a failing
/// one stays behind to be looked at).
pub struct CTest {
    name: String,
    dir: PathBuf,
    exe: PathBuf,
}

impl CTest {
    /// Compiles `src` (a path relative to ibverbs/) with `-O1 -g -Wall -Werror`, the `extra`
    /// flags and then `libs`; fails the test with the compiler's message when it does not build.
    pub fn build(src: &str, extra: &[&str], libs: &[&str]) -> CTest {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        let stem = src.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = std::env::temp_dir().join(format!("softroce-{stem}-c-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(&stem);
        let out = Command::new(program("cc", "gcc"))
            .args(["-O1", "-g", "-Wall", "-Werror"])
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .args(libs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cannot compile {name} (install libibverbs-dev):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        CTest { name, dir, exe }
    }

    /// The compiled program, to hand to [`under_shim`].
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Runs `cmd` (this program, under the shim) for at most `limit` and asserts how the C
    /// tests end: in time, with exit status 0, and with output that starts `ok N` where more
    /// than `min_checks` checks ran. Returns its stdout and stderr.
    pub fn check(&self, mut cmd: Command, limit: Duration, min_checks: u64) -> String {
        let name = &self.name;
        let (out, in_time) = wait_for(cmd.spawn().unwrap(), limit);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(in_time, "{name} hung:\n{text}");
        assert!(out.status.success(), "{name}: {:?}\n{text}", out.status);
        let n: u64 = text
            .strip_prefix("ok ")
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{text}"));
        assert!(n > min_checks, "only {n} checks ran:\n{text}");
        let _ = std::fs::remove_dir_all(&self.dir);
        text
    }
}

/// `prog ARGS` under both shims (libibverbs.so.1 and librdmacm.so.1 of this test run) with the
/// device bound to `ip`, its output captured.
pub fn shimmed(prog: &Path, ip: &str, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", rdmacm_dir())
        .env("SOFTROCE_BIND", ip)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Both outputs of a finished process, stdout first.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
