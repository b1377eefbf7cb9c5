//! The shim exports exactly what Debian 12's libibverbs.so.1 (rdma-core 44, package
//! libibverbs1) exports: every symbol at every version, default (`name@@V`) or not
//! (`name@V`: the IBVERBS_1.0 compatibility layer, `ibv_register_driver@IBVERBS_1.1`), and the
//! version definitions, from `nm -D --with-symbol-versions` of both libraries; and the soname.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The real library, from libibverbs1's file list.
fn real_lib() -> PathBuf {
    let out = Command::new("dpkg")
        .args(["-L", "libibverbs1"])
        .output()
        .expect("dpkg");
    assert!(
        out.status.success(),
        "libibverbs1 is not installed (scripts/setup.sh installs it)"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("/libibverbs.so.1"))
        .map(PathBuf::from)
        .expect("libibverbs1 lists no libibverbs.so.1")
}

/// `name@VERSION` (non-default) or `name@@VERSION` (default) of every defined dynamic symbol;
/// the version definitions themselves (`IBVERBS_1.1` alone) too.
fn exports(lib: &Path) -> BTreeSet<String> {
    let out = Command::new(common::program("nm", "binutils"))
        .args(["-D", "--with-symbol-versions", "--defined-only"])
        .arg(lib)
        .output()
        .unwrap();
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

fn soname(lib: &Path) -> String {
    let out = Command::new(common::program("objdump", "binutils"))
        .arg("-p")
        .arg(lib)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("SONAME")
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default()
}

#[test]
fn every_symbol_and_version_of_the_real_library() {
    let real_path = real_lib();
    let real = exports(&real_path);
    let ours = exports(&common::shim_lib());
    assert!(
        real.len() > 150,
        "nm found {} symbols in {real_path:?}",
        real.len()
    );

    let extra: Vec<_> = ours.difference(&real).collect();
    assert!(extra.is_empty(), "not in the real library: {extra:?}");

    let missing: Vec<_> = real.difference(&ours).collect();
    assert!(missing.is_empty(), "missing from the shim: {missing:?}");
    // Both kinds of non-default version are among them.
    assert!(
        ours.contains("ibv_alloc_pd@IBVERBS_1.0") && ours.contains("ibv_alloc_pd@@IBVERBS_1.1")
    );
    assert!(ours.contains("ibv_register_driver@IBVERBS_1.1"));
    assert_eq!(soname(&common::shim_lib()), soname(&real_path));
    assert_eq!(soname(&real_path), "libibverbs.so.1");
}
