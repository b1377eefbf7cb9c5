//! The device list: one device per address of `SOFTROCE_BIND`, `softroce0`, `softroce1`, ...,
//! and their GUIDs.

use std::cell::UnsafeCell;
use std::ptr::{self, null_mut};
use std::sync::OnceLock;

use libc::{c_char, c_int, EINVAL};

use super::common::{config, copy_cstr, device_count, set_errno};
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

/// A device, `softroceN`: C gets a pointer to its `ibv_device` and only reads it
/// (libibverbs' contract for `struct ibv_device`), so it is never written after creation; the
/// UnsafeCell gives the pointer handed out write provenance all the same, as C's type for it
/// says `*mut`, over the whole `verbs_device` that container_of may reach.
struct Device(UnsafeCell<verbs_device>);
// SAFETY: the device's pointers are all null and nobody writes it after creation (above).
unsafe impl Send for Device {}
// SAFETY: as for Send: concurrent readers only.
unsafe impl Sync for Device {}

/// Name of the first device.
pub const DEVICE_NAME: &str = "softroce0";

/// The name of device `dev`: `softroce0`, `softroce1`, ... in the order `SOFTROCE_BIND`
/// names their addresses, as rxe devices are named by their index.
pub(super) fn device_name(dev: usize) -> String {
    format!("softroce{dev}")
}

/// The devices, made on first use, one per address of `SOFTROCE_BIND` (never moved after:
/// the pointers handed out stay valid for the process's life).
fn devices() -> &'static [Device] {
    static DEVS: OnceLock<Vec<Device>> = OnceLock::new();
    DEVS.get_or_init(|| (0..device_count()).map(make_device).collect())
}

fn make_device(dev: usize) -> Device {
    let name = device_name(dev);
    let mut d = ibv_device {
        _ops: [null_mut(); 2],
        node_type: IBV_NODE_CA,
        transport_type: IBV_TRANSPORT_IB,
        name: [0; IBV_SYSFS_NAME_MAX],
        dev_name: [0; IBV_SYSFS_NAME_MAX],
        dev_path: [0; IBV_SYSFS_PATH_MAX],
        ibdev_path: [0; IBV_SYSFS_PATH_MAX],
    };
    copy_cstr(&mut d.name, &name);
    copy_cstr(&mut d.dev_name, &format!("uverbs_{name}"));
    // Where rxe's are; `softroce run` lays them out (src/cli/run_ns.rs). Elsewhere they
    // name nothing, and sysfs reads fail as for a missing attribute.
    copy_cstr(
        &mut d.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs_{name}"),
    );
    copy_cstr(&mut d.ibdev_path, &format!("/sys/class/infiniband/{name}"));
    Device(UnsafeCell::new(verbs_device {
        device: d,
        ops: ptr::null(),
        refcount: 0,
        entry: [null_mut(); 2],
        sysfs: null_mut(),
        core_support: 0,
    }))
}

/// Device `dev`'s handle (`dev` below [`device_count`]).
pub(super) fn device(dev: usize) -> *mut ibv_device {
    // `device` is the first field of the repr(C) struct: the pointer to the whole is the
    // pointer to it, with provenance over the whole (what container_of needs).
    devices()[dev].0.get() as *mut ibv_device
}

/// Which device `d` is: its index, or None for a pointer that is none of the shim's.
pub(super) fn device_index(d: *mut ibv_device) -> Option<usize> {
    devices()
        .iter()
        .position(|x| x.0.get() as *mut ibv_device == d)
}

/// `ibv_get_device_list`: a NULL-terminated array of the devices, `softroce0` first.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let n = device_count();
    let list: Box<[*mut ibv_device]> = (0..n)
        .map(device)
        .chain(std::iter::once(null_mut()))
        .collect();
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num_devices = n as c_int };
    }
    Box::into_raw(list) as *mut *mut ibv_device
}

/// `ibv_free_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from ibv_get_device_list, which boxed a slice of the devices and a
    // NULL, and the caller only read it.
    unsafe { free_null_terminated(list) }
}

/// Frees a list of pointers that `Box::into_raw` made of a boxed slice ending with a NULL
/// (`ibv_get_device_list`'s, `rdma_get_devices`'s).
///
/// # Safety
///
/// `list` is NULL or such a list, which its holder only read and no longer uses.
pub(crate) unsafe fn free_null_terminated<T>(list: *mut *mut T) {
    if !list.is_null() {
        // SAFETY: by the caller's promise: the slice's length is up to the NULL and one.
        drop(unsafe {
            let mut len = 0;
            while !(*list.add(len)).is_null() {
                len += 1;
            }
            Box::from_raw(ptr::slice_from_raw_parts_mut(list, len + 1))
        });
    }
}

/// `ibv_get_device_name`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    if device_index(dev).is_none() {
        set_errno(EINVAL);
        return ptr::null();
    }
    // SAFETY: checked to be one of our static devices, never written (see `Device`); the
    // name is a NUL-terminated array that lives as long as the process.
    unsafe { ptr::addr_of!((*dev).name) as *const c_char }
}

/// Device `dev`'s node GUID as `__be64` (big-endian bytes): softroce's, of its address.
pub(super) fn node_guid(dev: usize) -> u64 {
    softroce::driver::node_guid(config(dev).bind.ip()).to_be()
}

/// `ibv_get_device_guid`: the node GUID, `__be64`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    match device_index(dev) {
        Some(i) => node_guid(i),
        None => {
            set_errno(EINVAL);
            0
        }
    }
}

/// `ibv_get_device_index`: N for softroceN, -1 (errno EINVAL) for anything else.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    match device_index(dev) {
        Some(i) => i as c_int,
        None => {
            set_errno(EINVAL);
            -1
        }
    }
}
