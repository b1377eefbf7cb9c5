//! A thread that waits on a CQ runs the engine itself while it waits (driver/standby.rs): in a
//! blocking ping-pong the completion is received on the thread that waits for it, and the
//! engine threads stand by instead of waking for every datagram. Before, every message
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

/// Waits (`CompletionQueue::wait`) until a receive completes, re-posting it; the send
/// completions that come meanwhile are checked and counted.
fn await_recv(e: &End) {
    let mut wc = [WorkCompletion::default(); 4];
    loop {
        let n = e.cq.wait(&mut wc, Duration::from_secs(30)).unwrap();
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

#[test]
fn waiting_threads_receive_for_themselves_and_the_engines_stand_by() {
    let (a, b) = connected();
    for i in 0..RECVS {
        post_recv(&a, i);
        post_recv(&b, i);
    }
    let ping_pong = |n: u64| {
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..n {
                    await_recv(&b);
                    send(&b, 0);
                }
            });
            for i in 0..n {
                send(&a, i);
                await_recv(&a);
            }
        });
    };
    // Warm up (connection, first timers), then count.
    ping_pong(200);
    let n = 2000;
    let before = engine_switches();
    ping_pong(n);
    let switches = engine_switches() - before;
    eprintln!("engine threads: {switches} context switches in {n} round trips");
    // Each round trip carries two SENDs and their ACKs. An engine thread that received them
    // would wake (or be switched in from its spin) for most; standing by, it wakes once per
    // stand-by period (100 us to 1 ms) at most, whatever the traffic.
    assert!(
        switches < n / 4,
        "the engine threads switched {switches} times in {n} round trips"
    );
}
