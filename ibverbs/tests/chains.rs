//! ibverbs/tests/c/chains.c: chains of WRs in one post call (send, receive and SRQ receive),
//! which the shim queues under one lock and rings once: every WR lands and completes in order
//! with its own bytes, inline ones included, and a bad WR in the middle of a chain leaves the
//! WRs before it posted and none after it.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn chains_of_work_requests_post_in_order_and_stop_at_the_bad_one() {
    let t = CTest::build("tests/c/chains.c", &[], &["-libverbs"]);
    t.check(
        under_shim(t.exe(), "127.0.27.3"),
        Duration::from_secs(60),
        500,
    );
}
