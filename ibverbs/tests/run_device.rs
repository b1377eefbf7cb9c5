//! `softroce run` shows its program the device as a host with rxe would: a character device at
//! /dev/infiniband/<dev_name> and the sysfs entries under /sys/class/infiniband/softroce0,
//! agreeing with what the shim answers; a program outside `softroce run` sees neither.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{program, shim_lib, softroce};

/// `softroce run --bind 127.0.0.2 [EXTRA] -- sh -c SCRIPT`, its output.
fn run_sh(extra: &[&str], script: &str) -> Output {
    Command::new(softroce())
        .args(["run", "--lib"])
        .arg(shim_lib())
        .args(["--bind", "127.0.0.2"])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout_ok(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{what} failed ({}):\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `key=value` lines of a script's output.
fn values(out: &str) -> std::collections::HashMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

const DEV: &str = "/dev/infiniband/uverbs_softroce0";
const SYS: &str = "/sys/class/infiniband/softroce0";

#[test]
fn the_device_node_and_sysfs_are_there_under_run_and_agree_with_the_shim() {
    let script = format!(
        "set -e
         echo type=$(stat -L -c %F {DEV})
         test -r {DEV} && test -w {DEV} && echo rw=yes
         test -e /dev/infiniband/rdma_cm || echo cm=absent
         echo link=$(readlink {SYS})
         echo node_type=$(cat {SYS}/node_type)
         echo guid=$(cat {SYS}/node_guid)
         echo gid0=$(cat {SYS}/ports/1/gids/0)
         echo type0=$(cat {SYS}/ports/1/gid_attrs/types/0)
         echo ndev0=$(cat {SYS}/ports/1/gid_attrs/ndevs/0)
         echo layer=$(cat {SYS}/ports/1/link_layer)
         echo state=$(cat {SYS}/ports/1/state)
         echo ibdev=$(cat /sys/class/infiniband_verbs/uverbs_softroce0/ibdev)
         echo lo=$(cat /sys/class/net/lo/ifindex)
         echo shm=$(stat -c %d /dev/shm)
         echo null=$(stat -c %t:%T /dev/null)
         {} -v",
        program("ibv_devinfo", "ibverbs-utils").display()
    );
    let out = stdout_ok(&run_sh(&[], &script), "the script under softroce run");
    let v = values(&out);
    let get = |k: &str| v.get(k).map(String::as_str).unwrap_or("");
    assert_eq!(get("type"), "character special file", "{out}");
    assert_eq!(get("rw"), "yes");
    // No rdma_cm node: librdmacm would wait on it forever (src/cli/run_ns.rs).
    assert_eq!(get("cm"), "absent");
    assert_eq!(
        get("link"),
        "../../devices/virtual/infiniband/softroce0",
        "as rxe's class link (no parent device)"
    );
    assert_eq!(get("node_type"), "1: CA");
    assert_eq!(get("gid0"), "0000:0000:0000:0000:0000:ffff:7f00:0002");
    assert_eq!(get("type0"), "RoCE v2");
    assert_eq!(get("ndev0"), "lo", "127.0.0.2 is the loopback interface's");
    assert_eq!(get("layer"), "Ethernet");
    assert_eq!(get("state"), "4: ACTIVE");
    assert_eq!(get("ibdev"), "softroce0");
    // The shim's own answers: the same GUID and GID.
    let devinfo_guid = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("node_guid:"))
        .expect("ibv_devinfo prints node_guid")
        .trim();
    assert_eq!(get("guid"), devinfo_guid);
    assert!(
        out.contains("GID[  0]:\t\t::ffff:127.0.0.2, RoCE v2"),
        "{out}"
    );
    // What was there stays there: the host's sysfs classes and /dev's mounts and nodes.
    let lo = std::fs::read_to_string("/sys/class/net/lo/ifindex").unwrap();
    assert_eq!(get("lo"), lo.trim());
    let shm = Command::new("stat")
        .args(["-c", "%d", "/dev/shm"])
        .output()
        .unwrap();
    assert_eq!(get("shm"), String::from_utf8_lossy(&shm.stdout).trim());
    assert_eq!(get("null"), "1:3");

    // And none of it outside, after the run.
    assert!(!Path::new(DEV).exists(), "{DEV} leaked out of softroce run");
    assert!(!Path::new(SYS).exists(), "{SYS} leaked out of softroce run");
}

#[test]
fn no_device_view_runs_without_them() {
    let out = run_sh(
        &["--no-device-view"],
        &format!("test -e {DEV} && echo dev; test -e {SYS} && echo sys; true"),
    );
    assert_eq!(stdout_ok(&out, "--no-device-view").trim(), "");
}

#[test]
fn an_unprivileged_user_gets_the_view_through_a_user_namespace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: the plain test above already ran through a user namespace.
        return;
    }
    let setpriv = program("setpriv", "util-linux");
    // nobody must be able to reach the binaries; a private build tree is a setup, not a
    // softroce, failure, and says so.
    let reach = Command::new(&setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "test",
            "-x",
        ])
        .arg(softroce())
        .status()
        .unwrap();
    if !reach.success() {
        eprintln!("skipped: user 65534 cannot reach {}", softroce().display());
        return;
    }
    let out = Command::new(&setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(softroce())
        .args(["run", "--lib"])
        .arg(shim_lib())
        .args(["--bind", "127.0.0.3", "--", "sh", "-c"])
        .arg(format!(
            "echo uid=$(id -u); echo type=$(stat -L -c %F {DEV}); test -r {DEV} && test -w {DEV} && echo rw=yes; echo gid0=$(cat {SYS}/ports/1/gids/0)"
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = stdout_ok(&out, "softroce run as user 65534");
    let v = values(&out);
    assert_eq!(v["uid"], "65534", "the program keeps the caller's uid");
    assert_eq!(v["type"], "character special file");
    assert_eq!(v.get("rw").map(String::as_str), Some("yes"), "{out}");
    assert_eq!(v["gid0"], "0000:0000:0000:0000:0000:ffff:7f00:0003");
}
