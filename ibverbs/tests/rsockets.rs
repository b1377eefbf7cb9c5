//! rsockets (librdmacm's socket API over RDMA) under the shim: Debian's rdmacm-utils programs
//! rstream and rcopy between two processes on loopback, each under the shim's librdmacm.so.1
//! built by this test run, its device on its own loopback address (issue 37).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long one program of a pair may run.
const LIMIT: Duration = Duration::from_secs(60);

fn rstream() -> PathBuf {
    program("rstream", "rdmacm-utils")
}

fn riostream() -> PathBuf {
    program("riostream", "rdmacm-utils")
}

fn rcopy() -> PathBuf {
    program("rcopy", "rdmacm-utils")
}

/// Starts `server`, waits (bounded) until its CM listens at `ip`, runs `client` to its end,
/// then waits for the server when `server_ends`, or kills it (rcopy's serves forever).
/// Returns (server output, client output, client exited 0, server exited 0 or was killed).
fn pair(
    mut server: Command,
    ip: &str,
    mut client: Command,
    server_ends: bool,
) -> (String, String, bool, bool) {
    let mut s = server.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cm_listening(ip, s.id()) {
        if Instant::now() >= deadline || s.try_wait().unwrap().is_some() {
            let _ = s.kill();
            let (so, _) = wait_for(s, Duration::ZERO);
            panic!("the server never listened on {ip}:\n{}", text(&so));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (co, cin) = wait_for(client.spawn().unwrap(), LIMIT);
    let (so, sok) = if server_ends {
        let (so, sin) = wait_for(s, LIMIT);
        let ok = sin && so.status.success();
        (so, ok)
    } else {
        let _ = s.kill();
        (wait_for(s, LIMIT).0, true)
    };
    (text(&so), text(&co), cin && co.status.success(), sok)
}

/// rstream's server and client with the same test options; both verify the data (-T v) and
/// print one result line naming the transfer size.
fn rstream_pair(ip: &str, port: &str, opts: &[&str], size_label: &str) {
    stream_pair(&rstream(), ip, port, opts, size_label);
}

/// As [`rstream_pair`], for `prog` (rstream or riostream, which share their options).
fn stream_pair(prog: &Path, ip: &str, port: &str, opts: &[&str], size_label: &str) {
    let mut args = vec!["-p", port, "-T", "v"];
    args.extend_from_slice(opts);
    let mut sargs = vec!["-b", ip];
    sargs.extend_from_slice(&args);
    let mut cargs = vec!["-s", ip];
    cargs.extend_from_slice(&args);
    let client_ip = client_ip(ip);
    let (st, ct, cok, sok) = pair(
        shimmed(prog, ip, &sargs),
        ip,
        shimmed(prog, &client_ip, &cargs),
        true,
    );
    assert!(cok && sok, "server:\n{st}\nclient:\n{ct}");
    for (who, out) in [("server", &st), ("client", &ct)] {
        let line = out.lines().find(|l| l.starts_with("custom"));
        assert!(
            line.is_some_and(|l| l.split_whitespace().nth(1) == Some(size_label)),
            "{who} printed no result for {size_label}:\n{out}"
        );
        assert!(!out.contains("not implemented"), "{who}:\n{out}");
    }
}

/// The client's address: the server's with the last octet plus one.
fn client_ip(ip: &str) -> String {
    let (head, last) = ip.rsplit_once('.').unwrap();
    format!("{head}.{}", last.parse::<u8>().unwrap() + 1)
}

#[test]
fn rstream_blocking_4k() {
    rstream_pair(
        "127.0.0.61",
        "7461",
        &["-T", "b", "-S", "4096", "-C", "100"],
        "4k",
    );
}

#[test]
fn rstream_blocking_1m() {
    rstream_pair(
        "127.0.0.63",
        "7463",
        &["-T", "b", "-S", "1048576", "-C", "20"],
        "1m",
    );
}

#[test]
fn rstream_nonblocking_4k() {
    rstream_pair(
        "127.0.0.65",
        "7465",
        &["-T", "n", "-S", "4096", "-C", "200"],
        "4k",
    );
}

#[test]
fn rcopy_of_20_mb_arrives_whole() {
    let dir = std::env::temp_dir().join(format!("softroce-rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("src.bin");
    let dst = dir.join("dst.bin");
    // 20 MB of a pattern no period of the message sizes divides
    let bytes: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &bytes).unwrap();
    let _ = std::fs::remove_file(&dst);
    let ip = "127.0.0.67";
    let target = format!("{ip}:{}", dst.display());
    let (st, ct, cok, _) = pair(
        shimmed(&rcopy(), ip, &["-p", "7467"]),
        ip,
        shimmed(
            &rcopy(),
            &client_ip(ip),
            &[src.to_str().unwrap(), &target, "-p", "7467"],
        ),
        false,
    );
    assert!(cok, "server:\n{st}\nclient:\n{ct}");
    let got = std::fs::read(&dst).unwrap_or_default();
    assert_eq!(got.len(), bytes.len(), "server:\n{st}\nclient:\n{ct}");
    assert!(got == bytes, "the copy differs from the source");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rstream_async_4k() {
    rstream_pair(
        "127.0.0.69",
        "7469",
        &["-T", "a", "-S", "4096", "-C", "200"],
        "4k",
    );
}

#[test]
fn rstream_async_1m() {
    rstream_pair(
        "127.0.0.71",
        "7471",
        &["-T", "a", "-S", "1048576", "-C", "10"],
        "1m",
    );
}

/// The shim loaded into this process, and one of its functions.
fn shim_fn<T: Copy>(name: &str) -> T {
    static LIB: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let lib = *LIB.get_or_init(|| {
        let path = std::ffi::CString::new(shim_lib().to_str().unwrap()).unwrap();
        // SAFETY: loading the shim; its initialisers are those of any program using it.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen of the shim failed");
        h as usize
    });
    let sym = std::ffi::CString::new(name).unwrap();
    // SAFETY: a live handle and a symbol name.
    let f = unsafe { libc::dlsym(lib as *mut libc::c_void, sym.as_ptr()) };
    assert!(!f.is_null(), "{name} is not exported");
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<usize>());
    // SAFETY: the caller names the function's C type.
    unsafe { std::mem::transmute_copy(&f) }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

type SocketFn = unsafe extern "C" fn(i32, i32, i32) -> i32;
type CloseFn = unsafe extern "C" fn(i32) -> i32;
type SendFn = unsafe extern "C" fn(i32, *const libc::c_void, usize, i32) -> isize;
type FcntlFn = unsafe extern "C" fn(i32, i32, usize) -> i32;
type SetOptFn = unsafe extern "C" fn(i32, i32, i32, *const libc::c_void, u32) -> i32;
type GetOptFn = unsafe extern "C" fn(i32, i32, i32, *mut libc::c_void, *mut u32) -> i32;
type ShutdownFn = unsafe extern "C" fn(i32, i32) -> i32;

#[test]
fn calls_fail_with_the_errno_rsockets_gives() {
    let rsocket: SocketFn = shim_fn("rsocket");
    let rclose: CloseFn = shim_fn("rclose");
    let rsend: SendFn = shim_fn("rsend");
    let rfcntl: FcntlFn = shim_fn("rfcntl");
    let rsetsockopt: SetOptFn = shim_fn("rsetsockopt");
    let rgetsockopt: GetOptFn = shim_fn("rgetsockopt");
    let rshutdown: ShutdownFn = shim_fn("rshutdown");
    // SAFETY: the shim's rsocket calls with their C types; buffers are locals.
    unsafe {
        for (d, t, p) in [
            (libc::AF_UNIX, libc::SOCK_STREAM, 0),
            (libc::AF_INET, libc::SOCK_RAW, 0),
            (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_UDP),
        ] {
            assert_eq!(rsocket(d, t, p), -1);
            assert_eq!(errno(), libc::ENOTSUP, "rsocket({d}, {t}, {p})");
        }
        assert_eq!(rclose(1_000_000), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(rsend(1_000_000, b"x".as_ptr().cast(), 1, 0), -1);
        assert_eq!(errno(), libc::EBADF);

        let s = rsocket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(s >= 0, "rsocket: errno {}", errno());
        assert_eq!(rsend(s, b"x".as_ptr().cast(), 1, 0), -1);
        assert_eq!(errno(), libc::ENOTCONN);
        assert_eq!(rshutdown(s, libc::SHUT_RDWR), -1);
        assert_eq!(errno(), libc::ENOTCONN);
        assert_eq!(rfcntl(s, libc::F_GETFL, 0) & libc::O_NONBLOCK, 0);
        assert_eq!(rfcntl(s, libc::F_SETFL, libc::O_NONBLOCK as usize), 0);
        assert_ne!(rfcntl(s, libc::F_GETFL, 0) & libc::O_NONBLOCK, 0);
        assert_eq!(rfcntl(s, libc::F_GETLK, 0), -1);
        assert_eq!(errno(), libc::ENOTSUP);
        let v: i32 = 100_000;
        let vp = (&v as *const i32).cast();
        assert_eq!(rsetsockopt(s, libc::SOL_SOCKET, libc::SO_RCVBUF, vp, 4), 0);
        let (mut got, mut len) = (0i32, 4u32);
        let gp = (&mut got as *mut i32).cast();
        assert_eq!(
            rgetsockopt(s, libc::SOL_SOCKET, libc::SO_RCVBUF, gp, &mut len),
            0
        );
        assert_eq!(got, 200_000, "SO_RCVBUF is doubled, as rsocket.c's");
        assert_eq!(
            rsetsockopt(s, libc::SOL_SOCKET, libc::SO_BROADCAST, vp, 4),
            -1
        );
        assert_eq!(errno(), libc::ENOTSUP);
        assert_eq!(rclose(s), 0);
        assert_eq!(rclose(s), -1);
        assert_eq!(errno(), libc::EBADF);
    }
}

#[test]
fn riostream_blocking_4k() {
    let opts = ["-T", "b", "-S", "4096", "-C", "100"];
    stream_pair(&riostream(), "127.0.0.73", "7473", &opts, "4k");
}

#[test]
fn riostream_async_1m() {
    let opts = ["-T", "a", "-S", "1048576", "-C", "10"];
    stream_pair(&riostream(), "127.0.0.75", "7475", &opts, "1m");
}

/// Debian's librspreload (unmodified), which moves a TCP program onto rsockets.
fn rspreload() -> PathBuf {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so");
    assert!(p.is_file(), "install librdmacm1 (it ships librspreload)");
    p
}

/// The `rcvd_pkts` counter of process `pid`'s device, from `softroce stat PID`.
fn rcvd_pkts(pid: u32) -> Option<u64> {
    let out = Command::new(softroce())
        .args(["stat", &pid.to_string()])
        .output()
        .ok()?;
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = t.split_whitespace();
    words.find(|w| *w == "rcvd_pkts")?;
    words.next()?.parse().ok()
}

#[test]
fn iperf3_under_librspreload_moves_its_bytes_as_rocev2() {
    let iperf3 = program("iperf3", "iperf3");
    let ip = "127.0.0.77";
    let preloaded = |bind: &str, args: &[&str]| {
        let mut c = shimmed(&iperf3, bind, args);
        c.env("LD_PRELOAD", rspreload());
        c
    };
    let mut server = preloaded(ip, &["-s", "-B", ip, "-p", "5377", "-1"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cm_listening(ip, server.id()) {
        assert!(Instant::now() < deadline, "iperf3 -s never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = preloaded(&client_ip(ip), &["-c", ip, "-p", "5377", "-t", "2"])
        .spawn()
        .unwrap();
    // the server's device counters while the test runs (bounded: the client's 2 s and more)
    let mut most = 0;
    let end = Instant::now() + LIMIT;
    while Instant::now() < end && server.try_wait().unwrap().is_none() {
        most = most.max(rcvd_pkts(server.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(200));
    }
    let (co, cin) = wait_for(client, LIMIT);
    let (so, _) = wait_for(server, Duration::from_secs(5));
    let (ct, st) = (text(&co), text(&so));
    assert!(cin && co.status.success(), "client:\n{ct}\nserver:\n{st}");
    let sent_line = ct.lines().find(|l| l.ends_with("sender")).unwrap_or("");
    assert!(sent_line.contains("Bytes"), "client:\n{ct}");
    // a TCP fallback would leave the devices idle but for the CM: demand 20 MB in packets
    assert!(
        most > 20_000_000 / 4096,
        "only {most} RoCEv2 packets reached the server's device:\n{ct}"
    );
}

#[test]
fn rstream_with_keepalive_every_second_keeps_its_data_whole() {
    // -k 1: SO_KEEPALIVE and TCP_KEEPIDLE 1, read back; the transfer outlasts a keepalive
    // period, so keepalive messages cross between the data and must not disturb it (-T v)
    let ip = "127.0.0.79";
    let opts = [
        "-p", "7479", "-T", "b", "-T", "v", "-k", "1", "-S", "1048576", "-C", "400",
    ];
    let mut sargs = vec!["-b", ip];
    sargs.extend_from_slice(&opts);
    let mut cargs = vec!["-s", ip];
    cargs.extend_from_slice(&opts);
    let (st, ct, cok, sok) = pair(
        shimmed(&rstream(), ip, &sargs),
        ip,
        shimmed(&rstream(), &client_ip(ip), &cargs),
        true,
    );
    assert!(cok && sok, "server:\n{st}\nclient:\n{ct}");
    for out in [&st, &ct] {
        assert!(
            out.contains("Keepalive: ON") && out.contains("time: 1"),
            "{out}"
        );
        assert!(out.lines().any(|l| l.starts_with("custom")), "{out}");
    }
}
