//! The device shared within and across processes through the shim (ibverbs/tests/c/shared.c,
//! spec-notes/shared-device.md): four threads opening and closing contexts 200 times each
//! beside a context the main thread keeps, SENDs checked between them; and a child forked from
//! a process with an open context, which finds that context closed, opens its own, moves data,
//! and leaves the parent's working.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn contexts_opened_and_closed_on_four_threads_and_a_forked_child_share_the_device() {
    let t = CTest::build("tests/c/shared.c", &["-pthread"], &["-libverbs"]);
    let mut cmd = under_shim(t.exe(), "127.0.16.91");
    cmd.arg("200");
    // 4 x 200 rounds (each: open, PD, MR, CQ, QP, a SEND, close), and the fork.
    let text = t.check(cmd, Duration::from_secs(240), 4 * 200 * 20);
    eprintln!("{text}");
}
