//! Raw UDP throughput over loopback, the ceiling softroce's datapath is compared with.
//!
//!     udp_blast recv --bind 127.0.0.1:PORT --bytes N [--gro]
//!     udp_blast send --bind 127.0.0.2:PORT --to 127.0.0.1:PORT --bytes N [--gso] [--size S]
//!
//! Packets carry S bytes of UDP payload (default 4128: a RoCEv2 WRITE_FIRST packet of MTU 4096,
//! i.e. 4096 bytes of data + 12 BTH + 16 RETH + 4 ICRC, the largest datagram softroce sends;
//! the middle and last packets of a WRITE carry no RETH and are 16 bytes shorter).
//!
//! plain: sendmmsg(2) of 64 datagrams per call; recvmmsg(2) of up to 64 per call.
//! gso:   the UDP_SEGMENT socket option; each datagram handed to sendmmsg holds 15 segments
//!        (15 x 4128 = 61920 bytes, under the 64 KiB IP limit), 8 datagrams per call.
//! gro:   the UDP_GRO socket option; recvmmsg of up to 64 coalesced datagrams per call, the
//!        segment size read from each one's UDP_GRO control message.
//!
//! Nothing paces the sender: loopback delivers into the receiver's socket buffer and drops
//! what does not fit, so the figure that counts is the receiver's: bytes received from the
//! first datagram to the last, which is what the receiving process can absorb. Each end
//! prints one JSON line.

use std::mem::{size_of, zeroed};
use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use softroce_bench_baselines::{
    die, flag, os_err, parsed, set_int, set_recv_timeout, sockaddr, udp_socket,
};

/// Datagrams (or coalesced datagrams) per recvmmsg.
const RECV_BATCH: usize = 64;
/// Bytes per receive buffer: a whole GRO datagram fits.
const RECV_BUF: usize = 65536;
/// How long the receiver waits for the first datagram.
const FIRST_WAIT_MS: u64 = 10_000;
/// After the first datagram, silence this long ends the run (the sender is done and the rest
/// was dropped).
const IDLE_MS: u64 = 300;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("recv") => recv(&args),
        Some("send") => send(&args),
        _ => die("usage: udp_blast recv|send --bind ADDR:PORT [--to ADDR:PORT] --bytes N [--gso|--gro] [--size S]"),
    };
    if let Err(e) = r {
        die(&e.to_string());
    }
}

fn recv(args: &[String]) -> std::io::Result<()> {
    let bind: SocketAddrV4 = parsed(args, "--bind", None);
    let expected: u64 = parsed(args, "--bytes", None);
    let gro = flag(args, "--gro");
    let fd = udp_socket(bind)?;
    if gro {
        set_int(&fd, libc::SOL_UDP, libc::UDP_GRO, 1, "UDP_GRO")?;
    }
    set_recv_timeout(&fd, FIRST_WAIT_MS)?;
    let mut bufs = vec![0u8; RECV_BATCH * RECV_BUF];
    let cspace = cmsg_space(size_of::<i32>());
    let mut cbufs = vec![0u8; RECV_BATCH * cspace];
    // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is a valid value.
    let mut iovs: Vec<libc::iovec> = (0..RECV_BATCH).map(|_| unsafe { zeroed() }).collect();
    // SAFETY: as above.
    let mut msgs: Vec<libc::mmsghdr> = (0..RECV_BATCH).map(|_| unsafe { zeroed() }).collect();
    let (mut bytes, mut packets, mut calls) = (0u64, 0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    while bytes < expected {
        for i in 0..RECV_BATCH {
            iovs[i].iov_base = bufs[i * RECV_BUF..].as_mut_ptr().cast();
            iovs[i].iov_len = RECV_BUF;
            let h = &mut msgs[i].msg_hdr;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = cbufs[i * cspace..].as_mut_ptr().cast();
            h.msg_controllen = cspace as _;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
            h.msg_flags = 0;
        }
        // SAFETY: `msgs` holds RECV_BATCH headers whose iovecs and control buffers point into
        // `bufs` and `cbufs`, which outlive the call and are not otherwise borrowed.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                RECV_BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        calls += 1;
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) if first.is_some() => break,
                Some(libc::EAGAIN) => die("no datagram arrived within 10 s"),
                Some(libc::EINTR) => continue,
                _ => return Err(os_err("recvmmsg")),
            }
        }
        let now = Instant::now();
        if first.is_none() {
            first = Some(now);
            set_recv_timeout(&fd, IDLE_MS)?;
        }
        last = now;
        for m in &msgs[..n as usize] {
            let len = m.msg_len as u64;
            bytes += len;
            packets += match gro_segment(&m.msg_hdr) {
                Some(seg) if seg > 0 => len.div_ceil(seg as u64),
                _ => 1,
            };
        }
    }
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    println!(
        "{{\"role\":\"recv\",\"mode\":\"{}\",\"bytes\":{bytes},\"expected\":{expected},\"packets\":{packets},\"recv_calls\":{calls},\"seconds\":{secs:.6},\"mbps\":{:.1}}}",
        if gro { "gro" } else { "plain" },
        if secs > 0.0 { bytes as f64 / secs / 1e6 } else { 0.0 }
    );
    Ok(())
}

/// The segment size of a GRO-coalesced datagram, from its UDP_GRO control message.
fn gro_segment(h: &libc::msghdr) -> Option<i32> {
    // SAFETY: `h` is a header the kernel filled in; CMSG_FIRSTHDR/CMSG_NXTHDR stay within
    // msg_controllen and CMSG_DATA points inside the message they were given.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

fn cmsg_space(len: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(len as u32) as usize }
}

fn send(args: &[String]) -> std::io::Result<()> {
    let bind: SocketAddrV4 = parsed(args, "--bind", None);
    let to: SocketAddrV4 = parsed(args, "--to", None);
    let total: u64 = parsed(args, "--bytes", None);
    let size: usize = parsed(args, "--size", Some(4128));
    let gso = flag(args, "--gso");
    if size == 0 || size > 65507 {
        die("--size must be 1..65507");
    }
    let fd = udp_socket(bind)?;
    // Segments per GSO datagram: as many as fit in one IP datagram, at most the kernel's 64.
    let segs = if gso {
        set_int(
            &fd,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            size as i32,
            "UDP_SEGMENT",
        )?;
        (65507 / size).clamp(1, 64)
    } else {
        1
    };
    let batch = if gso { 8 } else { 64 };
    let payload = vec![0x5au8; size * segs];
    let mut dst = sockaddr(to);
    let packets_total = total.div_ceil(size as u64);
    // SAFETY: plain C structs for which all-zero is a valid value.
    let mut iovs: Vec<libc::iovec> = (0..batch).map(|_| unsafe { zeroed() }).collect();
    // SAFETY: as above.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { zeroed() }).collect();
    let (mut packets, mut calls) = (0u64, 0u64);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    while packets < packets_total {
        let mut k = 0;
        let mut queued = packets;
        while k < batch && queued < packets_total {
            let n = (packets_total - queued).min(segs as u64);
            iovs[k].iov_base = payload.as_ptr() as *mut _;
            iovs[k].iov_len = n as usize * size;
            let h = &mut msgs[k].msg_hdr;
            h.msg_iov = &mut iovs[k];
            h.msg_iovlen = 1;
            h.msg_name = (&mut dst as *mut libc::sockaddr_in).cast();
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            queued += n;
            k += 1;
        }
        // SAFETY: the first `k` headers point at `iovs`, `payload` and `dst`, all alive and
        // unmodified during the call.
        let sent = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), k as u32, 0) };
        calls += 1;
        if sent < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR) => {}
                _ => return Err(os_err("sendmmsg")),
            }
        } else {
            for m in &msgs[..sent as usize] {
                packets += (m.msg_len as u64).div_ceil(size as u64);
            }
        }
        if Instant::now() > deadline {
            die("sending took more than 60 s");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = packets * size as u64;
    println!(
        "{{\"role\":\"send\",\"mode\":\"{}\",\"bytes\":{bytes},\"packets\":{packets},\"send_calls\":{calls},\"seconds\":{secs:.6},\"mbps\":{:.1}}}",
        if gso { "gso" } else { "plain" },
        bytes as f64 / secs.max(1e-9) / 1e6
    );
    Ok(())
}
