//! ibverbs/tests/c/mw.c: memory windows through the C ABI (ibv_alloc_mw, ibv_bind_mw,
//! ibv_dealloc_mw, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV and their ibv_wr_*
//! builders) with RDMA WRITEs through windows between RC QPs over loopback: compiled against
//! Debian's headers, linked with -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn mw_c_passes_every_check() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mw.c");
    let dir = std::env::temp_dir().join(format!("softroce-mw-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("mw");
    let out = Command::new(program("cc", "gcc"))
        .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot compile mw.c (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = under_shim(&exe, "127.0.19.9").spawn().unwrap();
    let (out, in_time) = wait_for(child, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(in_time, "mw.c hung:\n{text}");
    assert!(out.status.success(), "{text}");
    let n: u32 = text
        .strip_prefix("ok ")
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(n > 120, "only {n} checks ran:\n{text}");
    let _ = std::fs::remove_dir_all(dir);
}
