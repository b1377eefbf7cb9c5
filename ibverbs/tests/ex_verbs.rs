//! ibverbs/tests/c/ex.c: the extended verbs as rxe's provider offers them (ibv_create_cq_ex
//! and the ibv_cq_ex polling API, ibv_resize_cq, ibv_create_qp_ex and the ibv_wr_* API)
//! through the C ABI, with loopback traffic: compiled against Debian's headers, linked with
//! -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn ex_c_passes_every_check() {
    let t = CTest::build("tests/c/ex.c", &[], &["-libverbs"]);
    t.check(
        under_shim(t.exe(), "127.0.19.7"),
        Duration::from_secs(60),
        100,
    );
}
