//! The engine thread's spin before it sleeps (`DeviceConfig::idle_spin`) stops when the traffic
//! does: after a dense exchange, an idle device's engine threads use (almost) no CPU. A spin
//! that never ended would burn a core per device. And a device without the spin
//! (`idle_spin` zero: sleep at once, as before it existed) carries the same traffic.
//!
//! One test in its own binary: it reads the CPU time of this process's engine threads, which
//! other tests running beside it would add to.

use std::time::{Duration, Instant};

use softroce::ib::*;

mod common;
use common::{queues, two_contexts_configured, End, EndSpec};

/// Two connected RC ends whose devices spin for `idle_spin` before sleeping.
fn connected(idle_spin: Duration) -> (End, End) {
    let (ca, cb) = two_contexts_configured(|_, cfg| cfg.idle_spin = idle_spin);
    let spec = EndSpec {
        mr_len: 1 << 16,
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        cq_len: 256,
        qp_type: QpType::Rc,
        cap: queues(128),
        sq_sig_all: false,
    };
    let (a, b) = (End::open(ca, &spec), End::open(cb, &spec));
    a.connect_rc(&b, AccessFlags::REMOTE_WRITE);
    (a, b)
}

/// `n` signaled 64-byte WRITEs from `a` into `b`, one at a time, each polled to its
/// successful completion before the next: as dense as a ping-pong, so the engines spin.
fn writes(a: &End, b: &End, n: u64) {
    let mut wc = [WorkCompletion::default(); 4];
    for i in 0..n {
        a.qp.post_send(&[SendWr {
            wr_id: i,
            sg_list: &[a.mr.sge(0, 64)],
            opcode: WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr() + 64 * (i % 512),
                rkey: b.mr.rkey(),
            },
            send_flags: SendFlags::SIGNALED,
        }])
        .unwrap();
        assert_eq!(a.cq.wait(&mut wc, Duration::from_secs(30)).unwrap(), 1);
        assert_eq!((wc[0].status, wc[0].wr_id), (WcStatus::Success, i));
    }
}

/// The /proc directories of this process's engine threads (named after their device's
/// address, `softroce-127.0.0.N:PORT`, cut to 15 bytes).
fn engine_threads() -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|t| t.unwrap().path())
        .filter(|dir| {
            std::fs::read_to_string(dir.join("comm"))
                .unwrap_or_default()
                .starts_with("softroce-127.")
        })
        .collect()
}

/// The CPU time, in nanoseconds, that this process's engine threads have run so far, from
/// each thread's /proc schedstat (its first field).
fn engine_cpu_ns() -> u64 {
    engine_threads()
        .iter()
        .map(|dir| {
            let stat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
            stat.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// The scheduler state of each of this process's engine threads (/proc stat's third field:
/// `S` while it sleeps in epoll_wait, `R` while it runs or spins).
fn engine_states() -> Vec<char> {
    engine_threads()
        .iter()
        .filter_map(|dir| {
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            // "tid (comm) S ...": the state follows the command, which may hold spaces.
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        .collect()
}

/// Waits until every engine thread has gone to sleep: asleep and using no CPU over a 10 ms
/// sample (longer than a scheduler tick, so a spinning thread's time would have grown).
/// Panics when they have not after `limit`: a spin that does not end.
fn wait_until_engines_sleep(limit: Duration) {
    let start = Instant::now();
    loop {
        let before = engine_cpu_ns();
        std::thread::sleep(Duration::from_millis(10));
        let states = engine_states();
        if engine_cpu_ns() == before && !states.is_empty() && states.iter().all(|&s| s == 'S') {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "the engines still run {limit:?} after the traffic stopped: states {states:?}"
        );
    }
}

#[test]
fn the_engines_stop_spinning_when_the_traffic_stops() {
    let (a, b) = connected(softroce::driver::DEFAULT_IDLE_SPIN);
    writes(&a, &b, 2000);
    // The last completion's ACK has been taken in; the spins that followed it end.
    wait_until_engines_sleep(Duration::from_secs(5));
    let before = engine_cpu_ns();
    assert!(before > 0, "no engine thread found in /proc/self/task");
    let idle = Duration::from_millis(500);
    std::thread::sleep(idle);
    let used = Duration::from_nanos(engine_cpu_ns() - before);
    // Two spinning engines would use close to the whole window each; sleeping ones, nothing
    // but what waking for the odd timer takes.
    assert!(
        used < idle / 20,
        "the idle engines used {used:?} of CPU in {idle:?}"
    );
    // Still alive after the idle spell: the next WRITE goes through.
    writes(&a, &b, 10);
    drop((a, b));

    let (a, b) = connected(Duration::ZERO);
    writes(&a, &b, 500);
}
