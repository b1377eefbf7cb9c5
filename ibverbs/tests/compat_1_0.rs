//! ibverbs/tests/compat_1_0.c: the IBVERBS_1.0 compatibility layer (`name@IBVERBS_1.0`, for
//! programs linked against libibverbs 1.0) through dlvsym, with the 1.0 object layouts: every
//! one of its 33 functions, the data path through the 1.0 context's ops (SEND with a
//! completion channel, RDMA WRITE, bad_wr of a failed post), and bad handles refused with
//! EINVAL. Compiled against Debian's headers, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn compat_1_0_c_passes_every_check() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compat_1_0.c");
    let dir = std::env::temp_dir().join(format!("softroce-compat10-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("compat_1_0");
    let out = Command::new(program("cc", "gcc"))
        .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-libverbs", "-ldl"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot compile compat_1_0.c (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = under_shim(&exe, "127.0.19.5").output().unwrap();
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
    assert!(n > 100, "only {n} checks ran:\n{text}");
    let _ = std::fs::remove_dir_all(dir);
}
