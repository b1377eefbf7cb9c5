//! Debian's python3-pyverbs (rdma-core 44's Python binding, what rdma-core's own test suite
//! runs on) loads under the shim: every extension module of the package, the mlx5 and EFA
//! provider ones included, imports (Python loads them with RTLD_NOW and Debian links them with
//! BIND_NOW, so every libibverbs symbol they or libmlx5/libefa import must resolve), and the
//! device answers through it. tests/rdma_core/run.sh runs the suite itself.

mod common;

use common::*;
use std::path::Path;

const SCRIPT: &str = r#"
import importlib, os
import pyverbs
# Every module file of the package, providers/ (folders without __init__.py) included.
root = os.path.dirname(os.path.dirname(pyverbs.__file__))
names = []
for dirpath, _, files in os.walk(os.path.dirname(pyverbs.__file__)):
    for f in files:
        if f.endswith(".so") or (f.endswith(".py") and f != "__init__.py"):
            rel = os.path.relpath(os.path.join(dirpath, f.split(".")[0]), root)
            names.append(rel.replace(os.sep, "."))
for n in sorted(names):
    importlib.import_module(n)
import pyverbs.device as d
devs = d.get_device_list()
assert [x.name.decode() for x in devs] == ["softroce0"], devs
with d.Context(name="softroce0") as ctx:
    ex = ctx.query_device_ex()
    assert ex.phys_port_cnt_ex == 1 == ex.orig_attr.phys_port_cnt, ex.phys_port_cnt_ex
    assert ex.orig_attr.max_srq > 0 and ex.orig_attr.max_ah > 0
    port = ctx.query_port(1)
    assert port.max_msg_sz == 1 << 31, port.max_msg_sz
print("imported", len(names))
"#;

#[test]
fn every_pyverbs_module_imports_and_queries_softroce0() {
    let py = Path::new("/usr/bin/python3");
    assert!(
        Path::new("/usr/lib/python3/dist-packages/pyverbs/__init__.py").is_file() && py.is_file(),
        "python3-pyverbs is not installed (scripts/setup.sh installs it)"
    );
    let out = under_shim(py, "127.0.19.3")
        .args(["-c", SCRIPT])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let n: usize = text
        .trim()
        .strip_prefix("imported ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // pyverbs 44: 22 modules of its own and 15 under providers/.
    assert!(n >= 37, "only {n} modules:\n{text}");
}
