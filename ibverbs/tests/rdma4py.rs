//! rdma4py (PyPI `ibverbs`, Cython bindings that dlopen libibverbs.so.1) over the shim, through
//! its public API only: two RC QPs connected with its `connect_rc` helper, an RDMA WRITE, an
//! RDMA READ, a SEND and a SEND with immediate with their bytes checked, and the registration of
//! an address where nothing is mapped refused with EFAULT as every provider refuses it
//! (ibverbs/tests/python/rdma4py_rc.py). scripts/setup.sh installs the pinned wheel into
//! target/python/rdma4py-<version>.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The version scripts/setup.sh installs (with its hash there).
const VERSION: &str = "2026.10.22";

fn rdma4py_dir() -> PathBuf {
    // target/<profile>/.. is target/.
    let dir = target_dir()
        .parent()
        .unwrap()
        .join("python")
        .join(format!("rdma4py-{VERSION}"));
    assert!(
        dir.join("ibverbs").join("__init__.py").is_file(),
        "rdma4py {VERSION} is not installed in {} (scripts/setup.sh installs it)",
        dir.display()
    );
    dir
}

#[test]
fn rdma4py_rc_write_read_send_and_a_bad_address() {
    let py = Path::new("/usr/bin/python3");
    assert!(py.is_file(), "Debian's python3 is missing");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/rdma4py_rc.py");
    let mut cmd = under_shim(py, "127.0.27.1");
    cmd.env("PYTHONPATH", rdma4py_dir()).arg(&script);
    let (out, in_time) = wait_for(cmd.spawn().unwrap(), Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(in_time, "rdma4py's run did not end in 60 s:\n{text}");
    assert!(out.status.success(), "{text}");
    for line in [
        "device softroce0",
        "write ok",
        "read ok",
        "send ok",
        "bad address refused (EFAULT)",
        "all checks passed",
    ] {
        assert!(text.contains(line), "no '{line}':\n{text}");
    }
}
