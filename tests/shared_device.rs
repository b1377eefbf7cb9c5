//! One device address shared by many processes and contexts (driver/group.rs,
//! spec-notes/shared-device.md): servers and clients side by side on one address, a member
//! killed while the others transfer, IPv6's one loopback address, and many contexts of one
//! process opened and closed at once.

use std::net::{IpAddr, SocketAddr};
use std::process::Output;
use std::time::{Duration, Instant};

mod common;
use common::{end_args, finish, ok, pattern, ports, queues, s, spawn, wait_one, End, EndSpec};

use softroce::driver::DeviceConfig;
use softroce::ib::{AccessFlags, QpType, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode};
use softroce::verbs::{Context, UdSendWr};

/// The QP number a `softroce perf` end printed for itself ("local address: ... QPN 0x...").
fn local_qpn(out: &str) -> u32 {
    let line = out
        .lines()
        .find(|l| l.contains("local address:"))
        .unwrap_or_else(|| panic!("no local address in:\n{out}"));
    let hex = line
        .split("QPN ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|h| h.strip_prefix("0x"))
        .unwrap();
    u32::from_str_radix(hex, 16).unwrap()
}

/// `softroce perf write --check` ends, every one on `ip` at RoCE port `udp`: the server's
/// arguments and the client's, each pair with its own TCP port.
fn perf_pair(ip: &str, udp: u16, n: &str) -> (Vec<String>, Vec<String>) {
    let tcp = ports().0;
    let head = ["perf", "write", "--check", "--counters", "-n", n];
    let sv = end_args(&head, tcp, udp, ip);
    let mut cv = end_args(&head, tcp, udp, ip);
    cv.push(ip.into());
    (sv, cv)
}

/// Waits until `cond` holds, at most `limit`.
fn until(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether an end's data check passed.
fn passed(o: &Output) -> bool {
    String::from_utf8_lossy(&o.stdout).contains("Data check      : passed")
}

#[test]
fn two_servers_and_their_clients_share_one_address() {
    // Four processes on 127.0.0.1 and one RoCE port, as four processes on one rxe device:
    // two perf servers and their two clients, all transferring at once.
    let udp = ports().1;
    let (sa, ca) = perf_pair("127.0.0.1", udp, "1000");
    let (sb, cb) = perf_pair("127.0.0.1", udp, "1000");
    let servers = [spawn(&sa), spawn(&sb)];
    std::thread::sleep(Duration::from_millis(300));
    let clients = [spawn(&ca), spawn(&cb)];
    let limit = Duration::from_secs(120);
    let outs: Vec<Output> = clients
        .into_iter()
        .chain(servers)
        .enumerate()
        .map(|(i, c)| finish(c, &format!("end {i}"), limit))
        .collect();
    let mut slots = Vec::new();
    for (i, o) in outs.iter().enumerate() {
        let out = ok(o, &format!("end {i}"));
        assert!(passed(o), "end {i}:\n{out}");
        slots.push(local_qpn(&out) >> 16);
    }
    // Each process's QPs are numbered in its own slot, by which the address's program
    // steers their packets to it.
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 4, "QPN slots {slots:?}");
}

#[test]
fn a_member_killed_mid_transfer_leaves_the_others_transfers_whole() {
    let udp = ports().1;
    let (sa, ca) = perf_pair("127.0.0.1", udp, "8000");
    let (mut sb, mut cb) = perf_pair("127.0.0.1", udp, "8000");
    // The killed pair gives up quickly: 1 ms ACK timeouts, 3 retries, 5 s without progress.
    for v in [&mut sb, &mut cb] {
        v.extend(s(&["-u", "8", "--timeout", "5"]));
    }
    // Pair B, whose server is killed, joins first, so that its server is not the group's last
    // socket: the kernel moves the last one into the freed index, and the program that
    // steered by the old layout is stale until the group is laid out anew.
    let server_b = spawn(&sb);
    let server_a = spawn(&sa);
    std::thread::sleep(Duration::from_millis(300));
    let client_b = spawn(&cb);
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), udp);
    assert!(
        until(Duration::from_secs(20), || softroce::driver::group::layout(
            addr
        )
        .is_ok_and(|m| m.len() == 2)),
        "pair B never joined"
    );
    let client_a = spawn(&ca);
    assert!(
        until(Duration::from_secs(20), || softroce::driver::group::layout(
            addr
        )
        .is_ok_and(|m| m.len() == 4)),
        "pair A never joined"
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut server_b = server_b;
    server_b.kill().unwrap();
    let _ = server_b.wait();
    let limit = Duration::from_secs(120);
    let (oa, osa) = (
        finish(client_a, "client A", limit),
        finish(server_a, "server A", limit),
    );
    for (o, what) in [(&oa, "client A"), (&osa, "server A")] {
        let out = ok(o, what);
        assert!(passed(o), "{what}:\n{out}");
    }
    // B's client lost its peer: it fails, and does not hang.
    let ob = finish(client_b, "client B", Duration::from_secs(60));
    assert!(
        !ob.status.success(),
        "client B of a killed server succeeded"
    );
}

#[test]
fn an_ipv6_pair_runs_on_the_one_loopback_address() {
    let (tcp, udp) = ports();
    let head = ["perf", "write", "--check", "-n", "500"];
    let sv = end_args(&head, tcp, udp, "::1");
    let mut cv = end_args(&head, tcp, udp, "::1");
    cv.push("::1".into());
    let server = spawn(&sv);
    std::thread::sleep(Duration::from_millis(300));
    let client = common::client_until_connected(&cv, Duration::from_secs(60));
    let so = finish(server, "server", Duration::from_secs(60));
    for (o, what) in [(&client, "client"), (&so, "server")] {
        let out = ok(o, what);
        assert!(passed(o), "{what}:\n{out}");
    }
}

#[test]
fn rping_servers_side_by_side_serve_their_clients_on_one_address() {
    let udp = ports().1;
    let up = udp.to_string();
    let rp = |role: &str, port: &str| {
        s(&[
            "rping",
            role,
            "-a",
            "127.0.0.1",
            "-p",
            port,
            "-C",
            "20",
            "-v",
            "--roce-port",
            &up,
        ])
    };
    let (p1, p2) = (ports().0.to_string(), ports().0.to_string());
    let servers = [spawn(&rp("-s", &p1)), spawn(&rp("-s", &p2))];
    std::thread::sleep(Duration::from_millis(300));
    let mut c1 = rp("-c", &p1);
    let mut c2 = rp("-c", &p2);
    for c in [&mut c1, &mut c2] {
        c.extend(s(&["-I", "127.0.0.1"]));
    }
    let clients = [spawn(&c1), spawn(&c2)];
    let limit = Duration::from_secs(60);
    for (i, c) in clients.into_iter().chain(servers).enumerate() {
        let o = finish(c, &format!("rping {i}"), limit);
        let out = ok(&o, &format!("rping {i}"));
        assert_eq!(
            out.lines()
                .filter(|l| l.contains("ping data: rdma-ping-"))
                .count(),
            20,
            "rping {i}:\n{out}"
        );
    }
}

#[test]
fn many_threads_open_and_close_contexts_on_one_address() {
    // Four threads each open two contexts on the address, connect an RC QP on one to an RC QP
    // on the other, SEND a message between them (checked), and close both again, over and
    // over, while the main thread keeps a context of its own open (rxe 6.1 runs the like of
    // it; before the address was shared, the second context of a process failed with
    // EADDRINUSE). Every SEND crosses the address's steering, laid out anew at each open and
    // close.
    let udp = ports().1;
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), udp);
    let keep = End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec());
    const ROUNDS: u64 = 200;
    let deadline = Instant::now() + Duration::from_secs(150);
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut done = 0;
                for round in 0..ROUNDS {
                    if Instant::now() > deadline {
                        break;
                    }
                    let open =
                        || End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec());
                    let (a, b) = (open(), open());
                    a.connect_rc(&b, AccessFlags::LOCAL_WRITE);
                    send_checked(
                        &a,
                        &b,
                        t << 32 | round,
                        &format!("thread {t} round {round}"),
                    );
                    done += 1;
                }
                done
            })
        })
        .collect();
    let done: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(done, 4 * ROUNDS, "rounds done in the time given");
    // The context kept open all along still carries traffic.
    let other = End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec());
    keep.connect_rc(&other, AccessFlags::LOCAL_WRITE);
    other
        .qp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &[other.mr.sge(0, 64)],
        }])
        .unwrap();
    keep.qp
        .post_send(&[SendWr {
            wr_id: 2,
            sg_list: &[keep.mr.sge(0, 64)],
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
        }])
        .unwrap();
    assert_eq!(
        wait_one(&other.cq, Duration::from_secs(10)).status,
        WcStatus::Success
    );
}

/// SENDs 256 bytes of `pattern(seed)` from `a` to `b` (connected RC ends) and checks that
/// both complete and the bytes arrived.
fn send_checked(a: &End, b: &End, seed: u64, what: &str) {
    let msg = pattern(seed, 256);
    a.mr.write(0, &msg).unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[b.mr.sge(0, 256)],
    }])
    .unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 2,
        sg_list: &[a.mr.sge(0, 256)],
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let wc = wait_one(&b.cq, Duration::from_secs(10));
    assert_eq!(wc.status, WcStatus::Success, "{what}");
    assert_eq!(b.mr.to_vec(0, 256).unwrap(), msg, "{what}");
    assert_eq!(
        wait_one(&a.cq, Duration::from_secs(10)).status,
        WcStatus::Success,
        "{what}"
    );
}

/// The entries of the groups directory that belong to the group at 127.0.0.1:`port`.
fn group_dirs(port: u16) -> Vec<std::path::PathBuf> {
    let suffix = format!("-127.0.0.1-{port}");
    std::fs::read_dir(softroce::driver::group::groups_dir())
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(&suffix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_group_ends_with_its_last_member_and_a_new_one_starts_clean() {
    // The last context to close on an address removes the group's directory (before, every
    // address and port ever opened left one behind in the groups directory, tens of thousands
    // on a test machine). Threads that open and close the only context on the address race
    // that removal against their own joins: every open must succeed, and afterwards a pair on
    // the address still carries traffic through a group started anew.
    let udp = ports().1;
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), udp);
    {
        let (a, b) = (
            End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec()),
            End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec()),
        );
        assert_eq!(group_dirs(udp).len(), 1, "the open group has its directory");
        a.connect_rc(&b, AccessFlags::LOCAL_WRITE);
        send_checked(&a, &b, 1, "first group");
    }
    assert_eq!(group_dirs(udp), Vec::<std::path::PathBuf>::new());
    let err = softroce::driver::group::layout(addr).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    let deadline = Instant::now() + Duration::from_secs(60);
    let workers: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut opened = 0;
                while opened < 40 && Instant::now() < deadline {
                    drop(Context::open(&DeviceConfig::new(addr)).expect("open during removal"));
                    opened += 1;
                }
                opened
            })
        })
        .collect();
    let opened: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(opened, 120, "opens done in the time given");
    assert_eq!(group_dirs(udp), Vec::<std::path::PathBuf>::new());
    let (a, b) = (
        End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec()),
        End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec()),
    );
    a.connect_rc(&b, AccessFlags::LOCAL_WRITE);
    send_checked(&a, &b, 2, "a group started anew");
}

/// A small RC end: 4 KiB, local write, 16 CQ entries.
fn spec() -> EndSpec {
    EndSpec {
        mr_len: 4096,
        mr_access: AccessFlags::LOCAL_WRITE,
        cq_len: 16,
        qp_type: QpType::Rc,
        cap: queues(4),
        sq_sig_all: false,
    }
}

/// Three contexts on `addr`, each with a UD QP made as `spec` says, ready with `qkey`.
fn ud_ends(addr: SocketAddr, qkey: u32, spec: EndSpec) -> Vec<End> {
    (0..3)
        .map(|_| {
            let e = End::open(Context::open(&DeviceConfig::new(addr)).unwrap(), &spec);
            e.qp.ready_ud(qkey, 1).unwrap();
            e
        })
        .collect()
}

#[test]
fn ud_datagrams_cross_between_contexts_on_one_address() {
    // Three contexts on one address, each with a UD QP: each sends a datagram to each other
    // one; every datagram reaches the QP it names (by the QPN's slot), data and sender checked.
    const QKEY: u32 = 0x1111_1111;
    let udp = ports().1;
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), udp);
    let ends = ud_ends(
        addr,
        QKEY,
        EndSpec {
            qp_type: QpType::Ud,
            ..spec()
        },
    );
    for (i, to) in ends.iter().enumerate() {
        for k in 0..2u64 {
            to.qp
                .post_recv(&[RecvWr {
                    wr_id: k,
                    sg_list: &[to.mr.sge(k * 1024, 1024)],
                }])
                .unwrap();
        }
        for (j, from) in ends.iter().enumerate().filter(|&(j, _)| j != i) {
            let msg = pattern((i * 10 + j) as u64, 100);
            from.mr.write(2048, &msg).unwrap();
            let ah = from.ah_to(to);
            from.qp
                .post_send_ud(&[UdSendWr {
                    wr: SendWr {
                        wr_id: 9,
                        sg_list: &[from.mr.sge(2048, 100)],
                        opcode: WrOpcode::Send,
                        send_flags: SendFlags::SIGNALED,
                    },
                    ah: &ah,
                    remote_qpn: to.qp.qp_num(),
                    remote_qkey: QKEY,
                }])
                .unwrap();
            assert_eq!(
                wait_one(&from.cq, Duration::from_secs(10)).status,
                WcStatus::Success
            );
            let wc = wait_one(&to.cq, Duration::from_secs(10));
            assert_eq!(wc.status, WcStatus::Success, "{j} -> {i}");
            assert_eq!(wc.src_qp, from.qp.qp_num(), "{j} -> {i}");
            // The datagram's bytes follow the 40-byte GRH area.
            let got = to.mr.to_vec(wc.wr_id * 1024 + 40, 100).unwrap();
            assert_eq!(got, msg, "{j} -> {i}");
        }
    }
}

#[test]
fn one_ud_qps_burst_to_two_contexts_on_one_address_reaches_each_qp() {
    // One UD QP posts a chain of equal datagrams alternating between the UD QPs of two other
    // contexts on one address: one source port, one destination address, one length, which
    // the engine sends as GSO runs. The kernel steers a GSO send once, by its first segment,
    // so a run that mixed the two QPNs' slots went whole to one member, which dropped the
    // other's datagrams as misrouted (UCX's UD wireup lost its messages to this, and an
    // OpenMPI job hung). Every datagram must reach the QP it names, none misrouted.
    const QKEY: u32 = 0x2222_2222;
    const EACH: u64 = 8;
    let udp = ports().1;
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), udp);
    let ends = ud_ends(
        addr,
        QKEY,
        EndSpec {
            qp_type: QpType::Ud,
            cq_len: 64,
            cap: queues(2 * EACH as u32),
            ..spec()
        },
    );
    let (from, to) = (&ends[0], [&ends[1], &ends[2]]);
    for t in to {
        for k in 0..EACH {
            t.qp.post_recv(&[RecvWr {
                wr_id: k,
                sg_list: &[t.mr.sge(k * 256, 256)],
            }])
            .unwrap();
        }
    }
    let ahs = [from.ah_to(to[0]), from.ah_to(to[1])];
    for k in 0..2 * EACH {
        from.mr.write(2048 + k * 100, &pattern(k, 100)).unwrap();
    }
    let sges: Vec<_> = (0..2 * EACH)
        .map(|k| from.mr.sge(2048 + k * 100, 100))
        .collect();
    let wrs: Vec<UdSendWr> = (0..2 * EACH as usize)
        .map(|k| UdSendWr {
            wr: SendWr {
                wr_id: k as u64,
                sg_list: std::slice::from_ref(&sges[k]),
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
            },
            ah: &ahs[k % 2],
            remote_qpn: to[k % 2].qp.qp_num(),
            remote_qkey: QKEY,
        })
        .collect();
    from.qp.post_send_ud(&wrs).unwrap();
    for _ in 0..2 * EACH {
        assert_eq!(
            wait_one(&from.cq, Duration::from_secs(10)).status,
            WcStatus::Success
        );
    }
    for (n, t) in to.iter().enumerate() {
        for _ in 0..EACH {
            let wc = wait_one(&t.cq, Duration::from_secs(10));
            assert_eq!(wc.status, WcStatus::Success, "to context {n}");
            // Datagram k went to context k % 2; receive i holds the i-th that arrived, in order.
            let k = 2 * wc.wr_id + n as u64;
            let got = t.mr.to_vec(wc.wr_id * 256 + 40, 100).unwrap();
            assert_eq!(got, pattern(k, 100), "datagram {k} to context {n}");
        }
    }
    for e in &ends {
        assert_eq!(e.ctx.counter("misrouted_pkts"), Some(0));
    }
}

#[test]
fn another_user_cannot_join_an_address_and_is_told_why() {
    // The kernel refuses a SO_REUSEPORT socket of another effective UID (EADDRINUSE): another
    // user's process gets a clear error and none of this user's packets. Needs two users: run
    // as root, the second one is nobody (65534), as CI runs; skipped otherwise.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a process as another user");
        return;
    }
    let (tcp, udp) = ports();
    let mine = spawn(&s(&[
        "rping",
        "-s",
        "-a",
        "127.0.0.1",
        "-p",
        &tcp.to_string(),
        "--roce-port",
        &udp.to_string(),
    ]));
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), udp);
    assert!(
        until(Duration::from_secs(20), || softroce::driver::group::layout(
            addr
        )
        .is_ok_and(|m| m.len() == 1)),
        "the first user's device never came up"
    );
    // A copy of the binary that nobody may run (the build's directory may be root's alone).
    let dir = std::env::temp_dir().join(format!("softroce-otheruser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("softroce");
    std::fs::copy(common::bin(), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [(&dir, 0o755), (&bin, 0o755)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let theirs = std::process::Command::new(common::program("setpriv", "util-linux"))
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(["rping", "-s", "-a", "127.0.0.1", "-p"])
        .arg(ports().0.to_string())
        .args(["--roce-port", &udp.to_string()])
        .env("SOFTROCE_STAT", "0")
        .env_remove("SOFTROCE_GROUP_DIR")
        .output()
        .unwrap();
    let mut mine = mine;
    let _ = mine.kill();
    let _ = mine.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&theirs.stderr);
    assert!(!theirs.status.success(), "another user joined: {err}");
    assert!(
        err.contains("Address already in use") && err.contains("another user's softroce"),
        "{err}"
    );
}
