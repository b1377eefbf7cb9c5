//! ibverbs/tests/compat_1_0.c: the IBVERBS_1.0 compatibility layer (`name@IBVERBS_1.0`, for
//! programs linked against libibverbs 1.0) through dlvsym, with the 1.0 object layouts: every
//! one of its 33 functions, the data path through the 1.0 context's ops (SEND with a
//! completion channel, RDMA WRITE, bad_wr of a failed post), and bad handles refused with
//! EINVAL. Compiled against Debian's headers, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn compat_1_0_c_passes_every_check() {
    let t = CTest::build("tests/compat_1_0.c", &[], &["-libverbs", "-ldl"]);
    t.check(
        under_shim(t.exe(), "127.0.19.5"),
        Duration::from_secs(60),
        100,
    );
}
