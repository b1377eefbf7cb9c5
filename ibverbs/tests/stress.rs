//! Many threads racing create/use/destroy on the shim (ibverbs/tests/c/stress.c, built with
//! pthreads against Debian's libibverbs-dev headers and run with the shim first on
//! LD_LIBRARY_PATH): ibv_reg_mr against ibv_dealloc_pd of its PD, ibv_create_qp against
//! ibv_destroy_cq, ibv_get_cq_event against ibv_destroy_cq with events in flight, post and poll
//! on a pair whose PD and CQ other threads' QPs share, query and modify of one QP from two
//! threads, contexts closed with objects alive. Every call must succeed or fail with the errno
//! rdma-core gives (EBUSY, EINVAL), the process must not crash or hang, and at the end every
//! object must be destroyable and creations and destructions must balance per kind.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Compiles stress.c; `extra`: additional compiler flags (a sanitizer).
fn build_stress(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/stress.c");
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("stress");
    let out = Command::new(program("cc", "gcc"))
        .args(["-O1", "-g", "-Wall", "-Werror", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot compile stress.c (install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn threads_racing_create_use_destroy_get_the_right_errno_and_leave_nothing_behind() {
    let dir = std::env::temp_dir().join(format!("softroce-stress-{}", std::process::id()));
    let exe = build_stress(&dir, &[]);
    // The racing phase stops after 8 s at the latest (each thread also has an iteration bound);
    // the teardown after it is quick. A hang fails the test at 60 s.
    let child = under_shim(&exe, "127.0.16.90").arg("8").spawn().unwrap();
    let (out, in_time) = wait_for(child, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(in_time, "stress hung:\n{text}");
    assert!(out.status.success(), "{:?}\n{text}", out.status);
    let n: u64 = text
        .strip_prefix("ok ")
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(n > 10_000, "only {n} checks ran:\n{text}");
    eprintln!("{text}");
    let _ = std::fs::remove_dir_all(dir);
}
