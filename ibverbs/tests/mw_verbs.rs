//! ibverbs/tests/c/mw.c: memory windows through the C ABI (ibv_alloc_mw, ibv_bind_mw,
//! ibv_dealloc_mw, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV and their ibv_wr_*
//! builders) with RDMA WRITEs through windows between RC QPs over loopback: compiled against
//! Debian's headers, linked with -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn mw_c_passes_every_check() {
    let t = CTest::build("tests/c/mw.c", &[], &["-libverbs"]);
    t.check(
        under_shim(t.exe(), "127.0.19.9"),
        Duration::from_secs(60),
        120,
    );
}
