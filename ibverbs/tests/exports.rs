//! ibverbs/tests/exports.c: the exports for features rxe's provider lacks (imports, dma-buf
//! and re-registered MRs, data-in-order, the provider interface, `ibv_register_driver`), the
//! `query_device_ex` op, the capabilities the device reports and honours, `ibv_create_cq`'s
//! comp_vector check and the uverbs conversion helpers, through the C ABI: compiled against
//! Debian's headers, linked with -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn exports_c_passes_every_check() {
    let t = CTest::build("tests/exports.c", &[], &["-libverbs", "-ldl"]);
    t.check(
        under_shim(t.exe(), "127.0.19.2"),
        Duration::from_secs(60),
        60,
    );
}
