//! Raw UDP ping-pong over loopback between two processes, the latency floor softroce's
//! `perf send --lat` is compared with.
//!
//!     udp_pingpong server --bind 127.0.0.1:PORT [--busy] [--acks]
//!     udp_pingpong client --bind 127.0.0.2:PORT --to 127.0.0.1:PORT -n N [--size 2] [--busy] [--acks]
//!
//! The client sends `--size` bytes and waits for the server's echo, N times. Blocking mode
//! waits in recv(2); `--busy` spins on recv(MSG_DONTWAIT) at both ends, as a busy-polling
//! RDMA application spins on its completion queue. The client reports the one-way latency
//! as perftest's lat tests and `softroce perf --lat` do (src/cli/perf/report.rs): half of
//! each round trip, the two largest samples left out, the median as p50.
//!
//! `--acks` (both ends) carries what an RC ping-pong carries: each message goes with a second,
//! 20-byte datagram (an RoCE ACK's size: BTH, AETH, ICRC), the acknowledgement of the message
//! that came the other way, both in one sendmmsg(2), and each end takes in both, with
//! recvmmsg(2), before it answers: the floor of a protocol that acknowledges every message on
//! a path that carries one datagram per system call and per receive.
//!
//! Before timing, the client repeats a first ping until the server answers, so a server that
//! is still starting costs no timed sample. A 1-byte datagram tells the server to exit.

use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use softroce_bench_baselines::{die, flag, os_err, parsed, set_recv_timeout, udp_socket, Lat};

/// How long either end waits for a datagram before giving up.
const WAIT: Duration = Duration::from_secs(5);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("server") => server(&args),
        Some("client") => client(&args),
        _ => die("usage: udp_pingpong server|client --bind ADDR:PORT [--to ADDR:PORT] [-n N] [--size S] [--busy]"),
    };
    if let Err(e) = r {
        die(&e.to_string());
    }
}

/// One received datagram: its length and, on the server, where it came from.
fn recv(
    fd: &OwnedFd,
    buf: &mut [u8],
    busy: bool,
    from: &mut libc::sockaddr_in,
) -> std::io::Result<usize> {
    let deadline = Instant::now() + WAIT;
    let mut spins = 0u32;
    loop {
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: `buf` and `from` are valid for writes of the lengths given.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                if busy { libc::MSG_DONTWAIT } else { 0 },
                (from as *mut libc::sockaddr_in).cast(),
                &mut len,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        nothing_yet("recvfrom", busy, &mut spins, deadline)?;
    }
}

/// After a receive that returned nothing: Ok to try again, or the error (the call's own, or
/// a timeout at `deadline`). Blocking mode gets EAGAIN only when SO_RCVTIMEO expires; busy
/// mode looks at the clock every 4096 empty polls.
fn nothing_yet(call: &str, busy: bool, spins: &mut u32, deadline: Instant) -> std::io::Result<()> {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::EINTR) => {}
        _ => return Err(os_err(call)),
    }
    *spins += 1;
    if (!busy || *spins % 4096 == 0) && Instant::now() > deadline {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no datagram within 5 s",
        ));
    }
    Ok(())
}

/// The acknowledgement datagram of `--acks`: as long as an RoCE ACK's UDP payload.
const ACK: [u8; 20] = [0xacu8; 20];

/// Message headers for `recvmmsg`/`sendmmsg`, one per buffer of `iov` (at most two), each
/// naming `addr`; the rest zero (unused).
fn headers(iov: &mut [libc::iovec], addr: *mut libc::sockaddr_in) -> [libc::mmsghdr; 2] {
    // SAFETY: mmsghdr is a plain C struct for which all-zero is a valid value.
    let mut msgs: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_name = addr.cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    msgs
}

/// `--acks`: sends `buf` and an acknowledgement to `to` in one sendmmsg(2).
fn send_with_ack(fd: &OwnedFd, buf: &[u8], to: &libc::sockaddr_in) -> std::io::Result<()> {
    let mut iov = [
        libc::iovec {
            iov_base: ACK.as_ptr() as *mut _,
            iov_len: ACK.len(),
        },
        libc::iovec {
            iov_base: buf.as_ptr() as *mut _,
            iov_len: buf.len(),
        },
    ];
    let mut msgs = headers(&mut iov, (to as *const libc::sockaddr_in) as *mut _);
    let mut sent = 0;
    while sent < 2 {
        // SAFETY: the headers point at `iov`, `ACK`, `buf` and `to`, all alive for the call.
        let n = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                msgs[sent..].as_mut_ptr(),
                (2 - sent) as u32,
                0,
            )
        };
        if n < 0 {
            return Err(os_err("sendmmsg"));
        }
        sent += n as usize;
    }
    Ok(())
}

/// `--acks`: receives the acknowledgement and the message (recvmmsg(2), as many at a time as
/// have come); returns the message's length.
fn recv_with_ack(
    fd: &OwnedFd,
    buf: &mut [u8],
    busy: bool,
    from: &mut libc::sockaddr_in,
) -> std::io::Result<usize> {
    let deadline = Instant::now() + WAIT;
    let mut ack = [0u8; 64];
    let mut got = 0usize;
    let mut len = 0usize;
    let mut spins = 0u32;
    while got < 2 {
        let mut iov = [
            libc::iovec {
                iov_base: ack.as_mut_ptr().cast(),
                iov_len: ack.len(),
            },
            libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            },
        ];
        let mut msgs = headers(&mut iov[got..], (from as *mut libc::sockaddr_in).cast());
        let flags = if busy {
            libc::MSG_DONTWAIT
        } else {
            libc::MSG_WAITFORONE
        };
        // SAFETY: the headers point at `iov`, `ack`, `buf` and `from`, all alive for the call.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                (2 - got) as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n > 0 {
            for m in &msgs[..n as usize] {
                if got == 1 {
                    len = m.msg_len as usize;
                }
                got += 1;
            }
            continue;
        }
        nothing_yet("recvmmsg", busy, &mut spins, deadline)?;
    }
    Ok(len)
}

fn send(fd: &OwnedFd, buf: &[u8], to: &libc::sockaddr_in) -> std::io::Result<()> {
    // SAFETY: `buf` and `to` are valid for reads of the lengths given.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (to as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(os_err("sendto"));
    }
    Ok(())
}

fn server(args: &[String]) -> std::io::Result<()> {
    let bind: SocketAddrV4 = parsed(args, "--bind", None);
    let busy = flag(args, "--busy");
    let acks = flag(args, "--acks");
    let fd = udp_socket(bind)?;
    // The first ping may be a while coming (the client starts after the server).
    set_recv_timeout(&fd, 10_000)?;
    let mut buf = vec![0u8; 65536];
    // SAFETY: sockaddr_in is a plain C struct for which all-zero is a valid value.
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut echoed = 0u64;
    let mut first = true;
    loop {
        let got = if acks && !first {
            recv_with_ack(&fd, &mut buf, busy, &mut from)
        } else {
            recv(&fd, &mut buf, busy && !first, &mut from)
        };
        let n = match got {
            Ok(n) => n,
            Err(e) if first => return Err(e),
            // The client is gone without its goodbye: the run is over anyway.
            Err(_) => break,
        };
        if first {
            first = false;
            set_recv_timeout(&fd, WAIT.as_millis() as u64)?;
        }
        if n <= 1 {
            break;
        }
        if acks && echoed > 0 {
            send_with_ack(&fd, &buf[..n], &from)?;
        } else {
            send(&fd, &buf[..n], &from)?;
        }
        echoed += 1;
    }
    eprintln!("udp_pingpong server: echoed {echoed}");
    Ok(())
}

fn client(args: &[String]) -> std::io::Result<()> {
    let bind: SocketAddrV4 = parsed(args, "--bind", None);
    let to: SocketAddrV4 = parsed(args, "--to", None);
    let iters: u64 = parsed(args, "-n", Some(1000));
    let size: usize = parsed(args, "--size", Some(2));
    let busy = flag(args, "--busy");
    let acks = flag(args, "--acks");
    if !(2..=65507).contains(&size) || iters < 5 {
        die("--size must be 2..65507 and -n at least 5");
    }
    let fd = udp_socket(bind)?;
    let dst = softroce_bench_baselines::sockaddr(to);
    let msg = vec![0x5au8; size];
    let mut buf = vec![0u8; 65536];
    // SAFETY: plain C struct, all-zero is valid.
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    // Until the server answers: a ping every 100 ms, for at most 10 s.
    set_recv_timeout(&fd, 100)?;
    let mut answered = false;
    for _ in 0..100 {
        send(&fd, &msg, &dst)?;
        if recv_once(&fd, &mut buf)? {
            answered = true;
            break;
        }
    }
    if !answered {
        die("the server did not answer within 10 s");
    }
    set_recv_timeout(&fd, WAIT.as_millis() as u64)?;
    let mut starts = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        starts.push(Instant::now());
        let n = if acks {
            send_with_ack(&fd, &msg, &dst)?;
            recv_with_ack(&fd, &mut buf, busy, &mut from)?
        } else {
            send(&fd, &msg, &dst)?;
            recv(&fd, &mut buf, busy, &mut from)?
        };
        if n != size {
            die(&format!("echo of {n} bytes, sent {size}"));
        }
    }
    for _ in 0..3 {
        send(&fd, &[0u8], &dst)?;
    }
    let Some(l) = Lat::from_starts(&starts, 2.0) else {
        die("too few samples");
    };
    println!(
        "{{\"role\":\"client\",\"mode\":\"{}{}\",\"bytes\":{size},\"iters\":{iters},\"lat_us\":{{\"min\":{:.3},\"p50\":{:.3},\"p99\":{:.3},\"avg\":{:.3}}}}}",
        if busy { "busy" } else { "blocking" },
        if acks { "+acks" } else { "" },
        l.min,
        l.p50,
        l.p99,
        l.avg
    );
    Ok(())
}

/// One blocking receive with the socket's timeout; false if it expired.
fn recv_once(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<bool> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n >= 0 {
        return Ok(true);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::EINTR) => Ok(false),
        _ => Err(os_err("recv")),
    }
}
