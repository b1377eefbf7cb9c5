//! A flood of valid rdma_cm REQs at a listening rping (issue 34, "The librdmacm CM under
//! stress"): what the shim delivers, and whether a real client still connects.
//!
//! `flood` builds REQs as a connecting rdma_cm would (distinct comm IDs and source ports, the
//! listener's TCP-port-space service ID, a valid rdma_cm header naming the listener's address)
//! and sends each to QP1 over RoCEv2 with a correct ICRC from a UDP socket of its own. The
//! ignored test `flood_tool` runs it alone (FLOOD_FROM, FLOOD_TO, FLOOD_PORT, FLOOD_N), e.g.
//! inside the rxe lab's namespace at a kernel rping in a guest.

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use softroce::cm::{CmEndpoint, ConnectParams, EndpointConfig};
use softroce::ib::Gid;
use softroce::wire::cm::{rdma_tcp_service_id, CmMessage};
use softroce::wire::cma::CmaHeader;
use softroce::wire::{icrc, BthRepr, DethRepr, ExtHeaders, Opcode, PacketRepr};

/// Sends `n` REQs from `from` (a UDP socket bound there) to the RoCEv2 port at `to`, for the
/// rdma_cm listener on TCP-space port `port`. Every REQ has its own comm ID (seeded by `seed`)
/// and source port. Returns the comm IDs sent.
pub fn flood(from: IpAddr, to: SocketAddr, port: u16, n: u32, seed: u64) -> Vec<u32> {
    let mut factory = CmEndpoint::new(EndpointConfig {
        comm_id_seed: Some(seed),
        max_connections: n as usize + 16,
        ..EndpointConfig::default()
    });
    let sock = UdpSocket::bind(SocketAddr::new(from, 0)).unwrap();
    // As softroce's driver (src/driver/udp.rs): DF and, unconnected, IPv4 identification 0,
    // which the ICRC covers and seal_socket_datagram assumes.
    if from.is_ipv4() {
        use std::os::fd::AsRawFd;
        let v: libc::c_int = libc::IP_PMTUDISC_DO;
        // SAFETY: a valid socket and an int option of the right size.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }
    let local = sock.local_addr().unwrap();
    let mut ids = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut p = ConnectParams::rc(
            rdma_tcp_service_id(port),
            0x100 + i,
            (i * 7) & 0xff_ffff,
            Gid::from_ip(from).0,
            Gid::from_ip(to.ip()).0,
        );
        let mut pd = vec![0u8; CmaHeader::LEN];
        CmaHeader {
            src_port: 20000 + (i % 40000) as u16,
            src_addr: from,
            dst_addr: to.ip(),
        }
        .emit(&mut pd)
        .unwrap();
        p.private_data = pd;
        factory.connect(Duration::ZERO, to, &p).unwrap();
        let out = factory.poll_transmit().unwrap();
        let (_, m) = CmMessage::parse(&out.mad).unwrap();
        let CmMessage::Req(r) = &m else {
            panic!("{m:?}")
        };
        ids.push(r.local_comm_id);
        let mut mad = [0u8; softroce::wire::mad::LEN];
        m.emit(0x5000_0000 + i as u64, &mut mad).unwrap();
        let pkt = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                pkey: 0xffff,
                dest_qp: 1,
                ..BthRepr::default()
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: softroce::wire::deth::GSI_QKEY,
                    src_qp: 1,
                }),
                ..ExtHeaders::default()
            },
            payload: &mad,
        };
        let mut buf = vec![0u8; pkt.buffer_len()];
        let len = pkt.emit(&mut buf).unwrap();
        buf.truncate(len);
        assert!(icrc::seal_socket_datagram(local, to, &mut buf));
        sock.send_to(&buf, to).unwrap();
        // Pace a little every 64 so a receiver's socket buffer is not what decides.
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    ids
}

/// The flood alone, for the rxe lab: FLOOD_FROM=192.0.2.1 FLOOD_TO=192.0.2.11 FLOOD_PORT=7174
/// FLOOD_N=5000 <this test binary> --ignored --exact flood_tool --nocapture
#[test]
#[ignore]
fn flood_tool() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} unset"));
    let from: IpAddr = var("FLOOD_FROM").parse().unwrap();
    let to: IpAddr = var("FLOOD_TO").parse().unwrap();
    let port: u16 = var("FLOOD_PORT").parse().unwrap();
    let n: u32 = var("FLOOD_N").parse().unwrap();
    let ids = flood(from, SocketAddr::new(to, 4791), port, n, 34);
    eprintln!("sent {} REQs from {from} to {to} port {port}", ids.len());
}

/// `softroce run --bind ADDR PROG`: PROG with both shim libraries, its device on ADDR.
fn under_shim(prog: &std::path::Path, bind: &str) -> std::process::Command {
    let mut c = std::process::Command::new(common::softroce());
    // The shim this test run built (`softroce run`'s default, the library next to the
    // binary, is only refreshed by `cargo build`: a stale one passed or failed for old code).
    c.args(["run", "--bind", bind, "--lib"])
        .arg(common::shim_lib())
        .arg(prog)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// Waits (at most 20 s) until a server listens at `ip` (the address's group names a listener
/// once its CM listens: the program `softroce run` started, whose PID is not `child`'s; a fixed
/// pause lost that race on a loaded machine), and checks that it has not ended meanwhile.
fn settle(child: &mut std::process::Child, ip: &str) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            for s in [
                child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
                child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
            ]
            .into_iter()
            .flatten()
            {
                let _ = { s }.read_to_string(&mut out);
            }
            panic!("the server ended before the flood: {status:?}\n{out}");
        }
        let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 4791);
        let listeners = softroce::driver::group::listener_pids(addr).unwrap_or_default();
        // `softroce run`'s child: a listener a killed earlier run left in the table is not.
        if listeners
            .iter()
            .any(|&(_, p)| parent_of(p) == Some(child.id()))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not listen within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The parent PID of process `pid` (field 4 of /proc/PID/stat), if it is alive.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold spaces: count after it.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// rping 44's non-persistent server under the shim, flooded with 50 valid REQs from a third
/// address, fails as it fails on kernel rxe (spec-notes/librdmacm.md rule 18): its CM thread
/// posts one semaphore for every CONNECT_REQUEST and overwrites `child_cm_id`, so the main
/// thread's waits return on the second request ("wait for RDMA_READ_ADV state 2", state 2 =
/// CONNECT_REQUEST), and then exits 255. The shim delivers the flood's requests as the kernel
/// does (this fails if it delivered only one, or none: the tool's REQs would then not be ones a
/// kernel takes).
#[test]
fn rping_44_server_under_a_req_flood_fails_in_its_own_race_as_on_rxe() {
    let rping = common::program("rping", "rdmacm-utils");
    let port = 7176u16;
    let mut s = under_shim(&rping, "127.0.0.55")
        .args(["-s", "-v", "-C", "3", "-a", "127.0.0.55", "-p"])
        .arg(port.to_string())
        .spawn()
        .unwrap();
    settle(&mut s, "127.0.0.55");
    let ids = flood(
        "127.0.0.56".parse().unwrap(),
        "127.0.0.55:4791".parse().unwrap(),
        port,
        50,
        3401,
    );
    assert_eq!(ids.len(), 50);
    // It then disconnects its child identifier and joins its CQ thread, which wakes on the
    // flush of the receive it posted: rdma_disconnect moves the QP to the error state first,
    // whatever the connection's state (rdma-core's ucma_shutdown; tested deterministically by
    // tests/rdma_cm_loopback.rs `disconnecting_an_accepted_connection_before_it_is_
    // established_flushes_its_qp`). On rxe it exits 255 there. The same race may have
    // overwritten `child_cm_id` after rping made its QP on an earlier one: it then disconnects
    // an identifier without a QP, nothing flushes, and it waits, here as on rxe, for its
    // accepted connection's REP to time out; so within 10 s it has exited 255 or not ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut ended = false;
    while !ended && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        ended = s.try_wait().unwrap().is_some();
    }
    let _ = s.kill();
    let o = s.wait_with_output().unwrap();
    let out = common::text(&o);
    // A third way the race shows: with the backlog counting only unread requests (as the
    // kernel's), rping's CM thread can take the next request between the main thread's
    // rdma_create_qp and its rdma_accept, which then runs on an identifier without a QP, with
    // rping's zeroed qp_num (the lab saw rping 44 crash on rxe there, SIGSEGV after 7
    // requests); the shim refuses that accept (EINVAL) and rping exits 255.
    assert!(
        out.contains("wait for RDMA_READ_ADV state 2")
            || out.contains("wait for CONNECTED state 2")
            || out.contains("rdma_accept: Invalid argument"),
        "rping 44's request race did not show: {:?}\n{out}",
        o.status
    );
    if ended {
        assert_eq!(o.status.code(), Some(255), "{out}");
    }
}

/// The backlog that bounds a flood is the kernel's: a listener's connect-request events not yet
/// read (ucma), where softroce's CM used to count requests not yet answered, so that a flood's
/// unanswered requests, or a server reading requests and answering later, locked out a later
/// client with "no resources". tests/c/rdmacm_backlog.c, under the shim: a request read but
/// unanswered leaves room for the next; one that finds the backlog full is dropped without a
/// REJ and gets in with its requester's retransmission once the application reads.
#[test]
fn a_listeners_backlog_counts_unread_requests_and_drops_what_overflows_it_unanswered() {
    let t = common::CTest::build("tests/c/rdmacm_backlog.c", &[], &["-lrdmacm", "-libverbs"]);
    let mut cmd = under_shim(t.exe(), "127.0.0.61");
    cmd.arg("127.0.0.61");
    t.check(cmd, Duration::from_secs(60), 20);
}
