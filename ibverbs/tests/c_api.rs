//! tests/shim/api.c: every exported function and the inline helpers behind the context ops,
//! with their error paths and errno values, compiled against Debian's libibverbs-dev headers
//! and linked as any program is (-libverbs), then run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn api_c_passes_every_check() {
    let t = CTest::build("../tests/shim/api.c", &[], &["-libverbs"]);
    let mut cmd = under_shim(t.exe(), "127.0.16.40");
    cmd.env("SOFTROCE_MTU", "2048");
    t.check(cmd, Duration::from_secs(60), 150);
}
