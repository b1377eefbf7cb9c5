//! The device the shim hands out is the first member of a whole rdma-core 44
//! `struct verbs_device`, as every device libibverbs lists is: code built against rdma-core's
//! private driver.h (libefa's `efadv_query_device`) reads `verbs_device->ops` past the
//! `ibv_device` and must find readable memory and a NULL there (crash-findings: libefa read
//! 8 bytes past the shim's 664-byte device).

mod common;

use std::process::Command;

/// rdma-core v44's libibverbs/driver.h `struct verbs_device`, as written there (driver.h is
/// not installed by Debian's libibverbs-dev); `struct list_node` is ccan's two pointers.
const DRIVER_H_V44: &str = r#"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>
#include <infiniband/verbs.h>
struct list_node { struct list_node *next, *prev; };
struct verbs_device_ops;
struct verbs_sysfs_dev;
struct verbs_device {
	struct ibv_device device; /* Must be first */
	const struct verbs_device_ops *ops;
	atomic_int refcount;
	struct list_node entry;
	struct verbs_sysfs_dev *sysfs;
	uint64_t core_support;
};
int main(void) {
	printf("sizeof %zu\n", sizeof(struct verbs_device));
	printf("device %zu\n", offsetof(struct verbs_device, device));
	printf("ops %zu\n", offsetof(struct verbs_device, ops));
	printf("refcount %zu\n", offsetof(struct verbs_device, refcount));
	printf("entry %zu\n", offsetof(struct verbs_device, entry));
	printf("sysfs %zu\n", offsetof(struct verbs_device, sysfs));
	printf("core_support %zu\n", offsetof(struct verbs_device, core_support));
	printf("tail %zu\n", sizeof(struct verbs_device) - sizeof(struct ibv_device));
	return 0;
}
"#;

#[test]
fn verbs_device_size_and_offsets_match_driver_h() {
    let dir = std::env::temp_dir().join(format!("softroce-verbs-device-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("verbs_device.c");
    std::fs::write(&c, DRIVER_H_V44).unwrap();
    let exe = dir.join("verbs_device");
    let st = Command::new(common::program("cc", "gcc"))
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "cannot compile against verbs.h (install libibverbs-dev)"
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut c_side: Vec<(String, usize)> = text
        .lines()
        .map(|l| {
            let (n, v) = l.rsplit_once(' ').unwrap();
            (n.to_string(), v.parse().unwrap())
        })
        .collect();
    // The tail libefa reads: 48 bytes on x86_64 (what the brief and crash-findings measured).
    let tail = c_side.pop().unwrap();
    assert_eq!(tail.0, "tail");
    if cfg!(target_pointer_width = "64") {
        assert_eq!(tail.1, 48);
    }
    let rust: Vec<(String, usize)> = ibverbs::verbs_device_layout()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    assert_eq!(rust, c_side);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_listed_device_has_a_zeroed_verbs_device_tail() {
    let mut n = 0;
    // SAFETY: the shim's own list function; freed below.
    let list = unsafe { ibverbs::ibv_get_device_list(&mut n) };
    assert_eq!(n, 1);
    // SAFETY: a list of one device and a NULL.
    let dev = unsafe { *list };
    assert!(!dev.is_null());
    // What container_of does in rdma-core: the device is the verbs_device's first member.
    // SAFETY: the shim allocates the whole verbs_device (the point of this test; were it a
    // bare ibv_device, this read would be past its end, as libefa's was).
    let vd = unsafe { &*(dev as *const ibverbs::verbs_device) };
    assert!(
        vd.ops.is_null(),
        "a provider's ops would make libefa take it for its own"
    );
    assert!(vd.sysfs.is_null());
    assert_eq!(vd.refcount, 0);
    assert!(vd.entry.iter().all(|p| p.is_null()));
    assert_eq!(vd.core_support, 0);
    // The ibv_device part is the one the API reads.
    // SAFETY: the name is NUL-terminated in the live device.
    let name = unsafe { std::ffi::CStr::from_ptr(ibverbs::ibv_get_device_name(dev)) };
    assert_eq!(name.to_str().unwrap(), "softroce0");
    // SAFETY: the list came from ibv_get_device_list.
    unsafe { ibverbs::ibv_free_device_list(list) };
}
