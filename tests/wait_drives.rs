//! A thread that waits on a CQ, or spins on it, runs the engine itself meanwhile
//! (driver/standby.rs): in a ping-pong the completion is received on the thread that waits for
//! it, and the engine threads stand by instead of waking for every datagram. Before, every message
//! crossed from an engine thread to the waiting thread: a wake-up (a context switch) on
//! each side, several per round trip.
//!
//! One test in its own binary: it counts the context switches of this process's engine
//! threads, which other tests running beside it would add to.

use std::time::Duration;

use softroce::ib::*;

mod common;
use common::{queues, two_contexts, End, EndSpec};

/// Receives posted on each end at a time.
const RECVS: u64 = 64;

fn connected() -> (End, End) {
    let (ca, cb) = two_contexts();
    let spec = EndSpec {
        mr_len: 1 << 16,
        mr_access: AccessFlags::LOCAL_WRITE,
        cq_len: 512,
        qp_type: QpType::Rc,
        cap: queues(128),
        sq_sig_all: true,
    };
    let (a, b) = (End::open(ca, &spec), End::open(cb, &spec));
    a.connect_rc(&b, AccessFlags::empty());
    (a, b)
}

fn post_recv(e: &End, id: u64) {
    e.qp.post_recv(&[RecvWr {
        wr_id: id,
        sg_list: &[e.mr.sge(4096 + 64 * (id % RECVS), 64)],
    }])
    .unwrap();
}

fn send(e: &End, id: u64) {
    e.qp.post_send(&[SendWr {
        wr_id: id,
        sg_list: &[e.mr.sge(0, 2)],
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
    }])
    .unwrap();
}

/// How a thread waits for its completion.
#[derive(Clone, Copy, Debug)]
enum Waits {
    /// `CompletionQueue::wait`, what softroce's own tools do.
    Blocking,
    /// `CompletionQueue::poll` in a loop, as perftest, UCX and MPI spin on `ibv_poll_cq`.
    Spinning,
}

/// Waits until a receive completes, re-posting it; the send completions that come meanwhile
/// are checked.
fn await_recv(e: &End, how: Waits) {
    let mut wc = [WorkCompletion::default(); 4];
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n = match how {
            Waits::Blocking => e.cq.wait(&mut wc, Duration::from_secs(30)).unwrap(),
            Waits::Spinning => {
                assert!(std::time::Instant::now() < limit, "no completion in 30 s");
                e.cq.poll(&mut wc).unwrap()
            }
        };
        let mut got = false;
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            if w.opcode == WcOpcode::Recv {
                post_recv(e, w.wr_id);
                got = true;
            }
        }
        if got {
            return;
        }
    }
}

/// The context switches (voluntary and not) that this process's engine threads have made
/// so far, from /proc/self/task/*/status.
fn engine_switches() -> u64 {
    let mut total = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("softroce-127.") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap();
            }
        }
    }
    total
}

/// A ping-pong of `n` round trips after a warm-up, each end waiting as `how` says on its
/// own thread; returns the context switches the engine threads made during it.
fn ping_pong_switches(how: Waits, n: u64) -> u64 {
    let (a, b) = connected();
    for i in 0..RECVS {
        post_recv(&a, i);
        post_recv(&b, i);
    }
    let ping_pong = |n: u64| {
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..n {
                    await_recv(&b, how);
                    send(&b, 0);
                }
            });
            for i in 0..n {
                send(&a, i);
                await_recv(&a, how);
            }
        });
    };
    // Warm up (connection, first timers), then count.
    ping_pong(200);
    let before = engine_switches();
    ping_pong(n);
    let switches = engine_switches() - before;
    eprintln!("{how:?}: engine threads made {switches} context switches in {n} round trips");
    switches
}

#[test]
fn waiting_and_spinning_threads_receive_for_themselves_and_the_engines_stand_by() {
    // Each round trip carries two SENDs and their ACKs. Engine threads that received them
    // woke (or were switched in from their spin) 4 to 7 times per round trip
    // (SOFTROCE_WAIT_DRIVES=0: 7,865 to 14,724 switches in 2,000); standing by, an engine
    // thread wakes once per stand-by period (100 us to 1 ms), whatever the traffic: 94 to 314
    // on an idle 2-core machine, nearer one per round trip on a loaded one, whose round trips
    // are slower. (One test: the counts are of every engine thread of the process.)
    let n = 2000;
    for how in [Waits::Blocking, Waits::Spinning] {
        let switches = ping_pong_switches(how, n);
        assert!(
            switches < n,
            "{how:?}: the engine threads switched {switches} times in {n} round trips"
        );
    }
}
