//! ibverbs/tests/c/ex.c: the extended verbs as rxe's provider offers them (ibv_create_cq_ex
//! and the ibv_cq_ex polling API, ibv_resize_cq, ibv_create_qp_ex and the ibv_wr_* API)
//! through the C ABI, with loopback traffic: compiled against Debian's headers, linked with
//! -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn ex_c_passes_every_check() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/ex.c");
    let dir = std::env::temp_dir().join(format!("softroce-ex-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("ex");
    let out = Command::new(program("cc", "gcc"))
        .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot compile ex.c (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = under_shim(&exe, "127.0.19.7").spawn().unwrap();
    let (out, in_time) = wait_for(child, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(in_time, "ex.c hung:\n{text}");
    assert!(out.status.success(), "{text}");
    let n: u32 = text
        .strip_prefix("ok ")
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(n > 100, "only {n} checks ran:\n{text}");
    let _ = std::fs::remove_dir_all(dir);
}
