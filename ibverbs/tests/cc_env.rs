//! Congestion control under the shim: `SOFTROCE_CC` and `SOFTROCE_CC_PARAMS` as `softroce run`
//! sets them. Values the device cannot honour make `ibv_open_device` fail (EINVAL) with one line
//! on stderr naming what is wrong, never a device that silently runs without them; good values
//! leave Debian's ibv_rc_pingpong working.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn unusable_cc_settings_fail_ibv_open_device_and_say_why() {
    let prog = program("ibv_devinfo", "ibverbs-utils");
    for (cc, params, want) in [
        (
            "reno",
            "",
            "congestion control 'reno': must be dcqcn or none",
        ),
        (
            "dcqcn",
            "rpg_ai_rat=5",
            "unknown congestion control parameter 'rpg_ai_rat'",
        ),
        (
            "none",
            "rpg_ai_rate=5",
            "congestion control parameters need congestion control on (dcqcn)",
        ),
    ] {
        let out = under_shim(&prog, "127.0.25.1")
            .env("SOFTROCE_CC", cc)
            .env("SOFTROCE_CC_PARAMS", params)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{cc} {params}: {stdout}");
        assert!(!stdout.contains("PORT_ACTIVE"), "{stdout}");
        assert!(
            stderr.contains(&format!(
                "libibverbs: softroce: SOFTROCE_CC/SOFTROCE_CC_PARAMS: {want}"
            )),
            "{cc} {params}: {stderr}"
        );
        // ibv_devinfo's own report of the failed ibv_open_device.
        assert!(stderr.contains("Failed to open device"), "{stderr}");
    }
}

#[test]
fn ibv_rc_pingpong_runs_with_dcqcn_on() {
    let prog = program("ibv_rc_pingpong", "ibverbs-utils");
    let port = free_tcp_port().to_string();
    let cmd = |ip: &str| {
        let mut c = under_shim(&prog, ip);
        c.env("SOFTROCE_CC", "dcqcn")
            .env("SOFTROCE_CC_PARAMS", "rpg_ai_rate=5,cnp_dscp=48")
            .args(["-g", "1", "-p", &port, "-n", "100", "-s", "8192", "-c"]);
        c
    };
    let mut c = cmd("127.0.25.3");
    c.arg("127.0.0.1");
    let (st, ct) = pair(cmd("127.0.25.2"), c, Duration::from_secs(60));
    assert!(
        st.contains("100 iters in") && ct.contains("100 iters in"),
        "{st}\n{ct}"
    );
}
