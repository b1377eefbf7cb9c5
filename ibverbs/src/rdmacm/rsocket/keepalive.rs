//! SO_KEEPALIVE (spec-notes: rsockets.md R8): a thread of the process sends each connected
//! rsocket that asked for it a zero-length RDMA WRITE WITH IMMEDIATE `CTRL | KEEPALIVE` every
//! keepalive time (TCP_KEEPIDLE; the kernel's tcp_keepalive_time, else 7200 s, when unset),
//! as rsocket.c's `tcp_svc_run`; the peer ignores it, but its transport acknowledges it, so a
//! dead peer surfaces as a failed completion (EIO). The thread ends when no rsocket has
//! keepalive on.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::proto::CTRL_KEEPALIVE;
use super::stream::Rs;
use super::table;

/// How often the thread looks at the rsockets (keepalive times are whole seconds).
const TICK: Duration = Duration::from_secs(1);

/// Whether the thread runs.
static RUNNING: Mutex<bool> = Mutex::new(false);

/// The keepalive time when TCP_KEEPIDLE was not set (`rs_set_keepalive`).
pub(super) fn default_time() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(7200)
}

/// Starts the thread if it does not run (after an rsocket turned keepalive on).
pub(super) fn start() {
    let mut running = super::super::error::lock(&RUNNING);
    if *running {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("rsocket-keepalive".into())
        .spawn(run);
    *running = spawned.is_ok();
}

fn run() {
    loop {
        std::thread::sleep(TICK);
        let now = Instant::now();
        let mut any = false;
        for rs in table::all() {
            any |= tick(&rs, now);
        }
        if !any {
            let mut running = super::super::error::lock(&RUNNING);
            // an rsocket may have turned keepalive on since the scan: look again under the
            // flag's lock, which `start` takes too
            if !table::all().iter().any(|rs| rs.lock().keepalive) {
                *running = false;
                return;
            }
        }
    }
}

/// Sends `rs` its keepalive when due; whether it has keepalive on.
fn tick(rs: &Rs, now: Instant) -> bool {
    let mut st = rs.lock();
    if !st.keepalive {
        return false;
    }
    let every = Duration::from_secs(u64::from(st.keepalive_time.max(1)));
    let due = !matches!(st.keepalive_next, Some(t) if t > now);
    if let (true, Some(conn)) = (due, st.conn.as_mut()) {
        conn.poll();
        if conn.connected() {
            conn.send_ctrl(CTRL_KEEPALIVE);
        }
        st.keepalive_next = Some(now + every);
    }
    true
}
