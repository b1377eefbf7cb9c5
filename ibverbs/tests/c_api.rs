//! tests/shim/api.c: every exported function and the inline helpers behind the context ops,
//! with their error paths and errno values, compiled against Debian's libibverbs-dev headers
//! and linked as any program is (-libverbs), then run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn api_c_passes_every_check() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/shim/api.c");
    let dir = std::env::temp_dir().join(format!("softroce-api-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("api");
    let out = Command::new(program("cc", "gcc"))
        .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot compile api.c (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = under_shim(&exe, "127.0.16.40")
        .env("SOFTROCE_MTU", "2048")
        .output()
        .unwrap();
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
    assert!(n > 150, "only {n} checks ran:\n{text}");
    let _ = std::fs::remove_dir_all(dir);
}
