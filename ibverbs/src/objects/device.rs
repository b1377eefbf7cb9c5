//! The device list: one device, `softroce0`, and its GUID.

use std::cell::UnsafeCell;
use std::ptr::{self, null_mut};
use std::sync::OnceLock;

use libc::{c_char, c_int, EINVAL};

use super::common::{config, copy_cstr, set_errno};
use crate::ffi::*;

/// rdma-core 44's `struct verbs_device` (libibverbs/driver.h): every device rdma-core hands
/// out is the first member of one, and code built against rdma-core's private header reads
/// past the `ibv_device` (`container_of`; libefa's `efadv_query_device` compares
/// `verbs_device->ops` with its own ops to tell whether a device is EFA's). The shim's
/// device is allocated as a whole one, its tail zeroed: `ops` and `sysfs` NULL (no provider
/// and no sysfs record, so such code finds the device is not its own), `refcount` 0, and an
/// empty `entry` (NULL links: the shim keeps no device list that one could be on).
#[repr(C)]
pub struct verbs_device {
    /// The device libibverbs' API sees (must be first).
    pub device: ibv_device,
    /// `const struct verbs_device_ops *`: the provider's ops; NULL.
    pub ops: *const libc::c_void,
    /// `atomic_int refcount`.
    pub refcount: c_int,
    /// `struct list_node entry` (ccan: next, prev).
    pub entry: [*mut libc::c_void; 2],
    /// `struct verbs_sysfs_dev *sysfs`; NULL.
    pub sysfs: *mut libc::c_void,
    /// `uint64_t core_support`: 0.
    pub core_support: u64,
}

/// Size and field offsets of [`verbs_device`], named as driver.h names them, for the layout
/// test (driver.h is not installed by libibverbs-dev, so it cannot be compiled against).
pub fn verbs_device_layout() -> Vec<(&'static str, usize)> {
    use core::mem::{offset_of, size_of};
    vec![
        ("sizeof", size_of::<verbs_device>()),
        ("device", offset_of!(verbs_device, device)),
        ("ops", offset_of!(verbs_device, ops)),
        ("refcount", offset_of!(verbs_device, refcount)),
        ("entry", offset_of!(verbs_device, entry)),
        ("sysfs", offset_of!(verbs_device, sysfs)),
        ("core_support", offset_of!(verbs_device, core_support)),
    ]
}

/// The one device, `softroce0`: C gets a pointer to its `ibv_device` and only reads it
/// (libibverbs' contract for `struct ibv_device`), so it is never written after creation; the
/// UnsafeCell gives the pointer handed out write provenance all the same, as C's type for it
/// says `*mut`, over the whole `verbs_device` that container_of may reach.
struct Device(UnsafeCell<verbs_device>);
// SAFETY: the device's pointers are all null and nobody writes it after creation (above).
unsafe impl Send for Device {}
// SAFETY: as for Send: concurrent readers only.
unsafe impl Sync for Device {}

/// Name of the device.
pub const DEVICE_NAME: &str = "softroce0";

/// The device's handle.
pub(super) fn device() -> *mut ibv_device {
    static DEV: OnceLock<Box<Device>> = OnceLock::new();
    let d = DEV.get_or_init(|| {
        let mut d = ibv_device {
            _ops: [null_mut(); 2],
            node_type: IBV_NODE_CA,
            transport_type: IBV_TRANSPORT_IB,
            name: [0; IBV_SYSFS_NAME_MAX],
            dev_name: [0; IBV_SYSFS_NAME_MAX],
            dev_path: [0; IBV_SYSFS_PATH_MAX],
            ibdev_path: [0; IBV_SYSFS_PATH_MAX],
        };
        copy_cstr(&mut d.name, DEVICE_NAME);
        copy_cstr(&mut d.dev_name, "uverbs_softroce0");
        // Where rxe's are; `softroce run` lays them out (src/cli/run_ns.rs). Elsewhere they
        // name nothing, and sysfs reads fail as for a missing attribute.
        copy_cstr(
            &mut d.dev_path,
            "/sys/class/infiniband_verbs/uverbs_softroce0",
        );
        copy_cstr(&mut d.ibdev_path, "/sys/class/infiniband/softroce0");
        Box::new(Device(UnsafeCell::new(verbs_device {
            device: d,
            ops: ptr::null(),
            refcount: 0,
            entry: [null_mut(); 2],
            sysfs: null_mut(),
            core_support: 0,
        })))
    });
    // `device` is the first field of the repr(C) struct: the pointer to the whole is the
    // pointer to it, with provenance over the whole (what container_of needs).
    d.0.get() as *mut ibv_device
}

/// `ibv_get_device_list`: a NULL-terminated array holding `softroce0`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let list: Box<[*mut ibv_device; 2]> = Box::new([device(), null_mut()]);
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num_devices = 1 };
    }
    Box::into_raw(list) as *mut *mut ibv_device
}

/// `ibv_free_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if !list.is_null() {
        // SAFETY: `list` came from ibv_get_device_list, which boxed a 2-element array.
        drop(unsafe { Box::from_raw(list as *mut [*mut ibv_device; 2]) });
    }
}

/// `ibv_get_device_name`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    if dev != device() {
        set_errno(EINVAL);
        return ptr::null();
    }
    // SAFETY: checked to be our static device, never written (see `Device`); the name is a
    // NUL-terminated array that lives as long as the process.
    unsafe { ptr::addr_of!((*dev).name) as *const c_char }
}

/// The node GUID as `__be64` (big-endian bytes): softroce's, of the bound address.
pub(super) fn node_guid() -> u64 {
    softroce::driver::node_guid(config().bind.ip()).to_be()
}

/// `ibv_get_device_guid`: the node GUID, `__be64`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    if dev != device() {
        set_errno(EINVAL);
        return 0;
    }
    node_guid()
}

/// `ibv_get_device_index`: 0 for softroce0, -1 (errno EINVAL) for anything else.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    if dev != device() {
        set_errno(EINVAL);
        return -1;
    }
    0
}
