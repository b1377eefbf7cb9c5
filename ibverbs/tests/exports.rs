//! ibverbs/tests/exports.c: the exports for features rxe's provider lacks (imports, dma-buf
//! and re-registered MRs, data-in-order, the provider interface, `ibv_register_driver`), the
//! `query_device_ex` op, the capabilities the device reports and honours, `ibv_create_cq`'s
//! comp_vector check and the uverbs conversion helpers, through the C ABI: compiled against
//! Debian's headers, linked with -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn exports_c_passes_every_check() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exports.c");
    let dir = std::env::temp_dir().join(format!("softroce-exports-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("exports");
    let out = Command::new(program("cc", "gcc"))
        .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-libverbs", "-ldl"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot compile exports.c (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = under_shim(&exe, "127.0.19.2").output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let n: u32 = text
        .strip_prefix("ok ")
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(n > 60, "only {n} checks ran:\n{text}");
    let _ = std::fs::remove_dir_all(dir);
}
