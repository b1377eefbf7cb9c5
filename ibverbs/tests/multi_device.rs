//! Several devices in one process: `softroce run --bind A --bind B` gives the program
//! softroce0 at A and softroce1 at B, as a host with two rxe devices. C programs built against
//! Debian's headers open both, connect a QP on one to a QP on the other inside the process
//! (through the verbs, and through librdmacm, which picks the device by address), and
//! ibverbs-utils list both; one `--bind` is one device, as it always was.
//!
//! The devices are on loopback addresses 127.0.0.1 and 127.0.0.2, each test on a UDP port of
//! its own (not RoCE's 4791, which other tests that cargo runs at the same time bind on these
//! addresses).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// `softroce run --bind A:PORT --bind B:PORT [EXTRA] -- PROG ARGS`, output piped.
fn run_two(port: u16, extra: &[&str], prog: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(softroce());
    c.args(["run", "--lib"])
        .arg(shim_lib())
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .args(["--bind", &format!("127.0.0.2:{port}")])
        .args(extra)
        .arg("--")
        .arg(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn two_devices_in_one_process_connect_an_rc_qp_each_and_move_data_both_ways() {
    let t = CTest::build("tests/c/two_devices.c", &[], &["-libverbs"]);
    let cmd = run_two(24791, &[], t.exe(), &["127.0.0.1", "127.0.0.2", "24791"]);
    t.check(cmd, Duration::from_secs(60), 100);
}

#[test]
fn rdma_cm_connects_a_listener_on_one_device_to_a_connector_on_the_other_in_one_process() {
    let t = CTest::build(
        "tests/c/rdmacm_two_devices.c",
        &[],
        &["-lrdmacm", "-libverbs"],
    );
    let cmd = run_two(24792, &[], t.exe(), &["127.0.0.1", "127.0.0.2"]);
    let out = t.check(cmd, Duration::from_secs(60), 300);
    // Nothing but the count: the shim prints nothing of its own.
    assert_eq!(out.lines().count(), 1, "{out}");
}

/// `ibv_devices` and `ibv_devinfo -v` under `softroce run` with `binds`, their output.
fn utils(binds: &[&str]) -> String {
    let mut c = Command::new(softroce());
    c.args(["run", "--lib"]).arg(shim_lib());
    for b in binds {
        c.args(["--bind", b]);
    }
    let script = format!(
        "{} && {} -v",
        program("ibv_devices", "ibverbs-utils").display(),
        program("ibv_devinfo", "ibverbs-utils").display()
    );
    let o = c
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{:?}\n{t}", o.status);
    t
}

#[test]
fn ibv_devices_and_ibv_devinfo_list_both_devices() {
    let t = utils(&["127.0.0.1:24793", "127.0.0.2:24793"]);
    // ibv_devices: one line each, with the GUID of its address.
    assert!(t.contains("softroce0       \t00007ffffe000001"), "{t}");
    assert!(t.contains("softroce1       \t00007ffffe000002"), "{t}");
    // ibv_devinfo: each device with its own GUID and GIDs (index 0 and 1: its address).
    let info: Vec<&str> = t.split("hca_id:").skip(1).collect();
    assert_eq!(info.len(), 2, "{t}");
    for (i, dev) in info.iter().enumerate() {
        let ip = format!("127.0.0.{}", i + 1);
        assert!(dev.starts_with(&format!("\tsoftroce{i}\n")), "{dev}");
        assert!(
            dev.contains(&format!("node_guid:\t\t\t0000:7fff:fe00:000{}", i + 1)),
            "{dev}"
        );
        for g in 0..2 {
            assert!(
                dev.contains(&format!("GID[  {g}]:\t\t::ffff:{ip}, RoCE v2")),
                "{dev}"
            );
        }
        assert!(dev.contains("PORT_ACTIVE"), "{dev}");
    }
}

#[test]
fn one_bind_is_one_device_as_before() {
    let t = utils(&["127.0.0.2:24794"]);
    assert!(t.contains("softroce0       \t00007ffffe000002"), "{t}");
    assert!(!t.contains("softroce1"), "{t}");
    assert_eq!(t.matches("hca_id:").count(), 1, "{t}");
}

#[test]
fn each_device_has_its_node_and_sysfs_tree_and_mtu_under_run() {
    // --mtu sets every device's active MTU (without it, each gets rxe's for the interface
    // of its own address).
    let script = "set -e
        for d in 0 1; do
            echo type$d=$(stat -L -c %F /dev/infiniband/uverbs_softroce$d)
            echo link$d=$(readlink /sys/class/infiniband/softroce$d)
            echo gid$d=$(cat /sys/class/infiniband/softroce$d/ports/1/gids/1)
            echo ndev$d=$(ls /sys/class/infiniband/softroce$d/device/net)
            echo ibdev$d=$(cat /sys/class/infiniband_verbs/uverbs_softroce$d/ibdev)
            test -f /sys/class/infiniband/softroce$d/ports/1/hw_counters/sent_pkts
        done
        echo bind=$SOFTROCE_BIND mtu=$SOFTROCE_MTU
        echo active_2048=$(ibv_devinfo | grep -c 'active_mtu:.*2048 (4)')";
    let o = run_two(
        24795,
        &["--mtu", "2048"],
        std::path::Path::new("sh"),
        &["-c", script],
    )
    .output()
    .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for d in 0..2 {
        let has = |k: &str, v: &str| t.lines().any(|l| l == format!("{k}{d}={v}"));
        assert!(has("type", "character special file"), "{t}");
        assert!(
            has(
                "link",
                &format!("../../devices/virtual/infiniband/softroce{d}")
            ),
            "{t}"
        );
        assert!(
            has(
                "gid",
                &format!("0000:0000:0000:0000:0000:ffff:7f00:000{}", d + 1)
            ),
            "{t}"
        );
        assert!(has("ndev", "lo"), "{t}");
        assert!(has("ibdev", &format!("softroce{d}")), "{t}");
    }
    assert!(
        t.contains("bind=127.0.0.1:24795,127.0.0.2:24795 mtu=2048,2048"),
        "{t}"
    );
    // And the shim reports it on both ports.
    assert!(t.lines().any(|l| l == "active_2048=2"), "{t}");
}
