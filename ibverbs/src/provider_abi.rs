//! Symbols that other rdma-core libraries need from libibverbs.so.1 to load at all.
//!
//! Debian links its libraries with BIND_NOW, so every symbol they import must exist when a
//! program starts, even one never called: perftest links libmlx5 and libefa (providers, whose
//! imports are libibverbs' provider interface, IBVERBS_PRIVATE_34) and librdmacm (kernel RDMA
//! CM helpers). softroce's shim has no providers and no kernel CM: a provider registers itself
//! (`verbs_register_driver_34`) but is never matched to a device, so the provider interface is
//! not reached in the normal course. Should a library call it all the same, each function
//! returns as its C declaration lets it fail, never aborting the host process: the kernel
//! commands return EOPNOTSUPP (and set errno), the constructors return NULL with errno
//! EOPNOTSUPP, and the `void` ones do nothing. `__verbs_log`, which libefa does call, is a
//! provider's debug log: libibverbs prints it only when `VERBS_LOG_LEVEL` asks, to a file or
//! stderr; the shim never prints, so it drops it. The public ones among these get real
//! behaviour here.

use std::ptr::null_mut;
use std::sync::atomic::AtomicBool;

use libc::{c_char, c_int, c_void, EOPNOTSUPP};

/// Read by providers when the kernel disassociates a device; softroce never does.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

fn unsupported() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = EOPNOTSUPP };
    EOPNOTSUPP
}

/// Kernel commands and helpers returning `int` (0 or an errno value): EOPNOTSUPP.
macro_rules! unsupported_int {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: provider or kernel interface; EOPNOTSUPP, errno set (see the module doc).")]
            #[no_mangle]
            pub extern "C" fn $name() -> c_int {
                unsupported()
            }
        )*
    };
}

/// Constructors returning a pointer: NULL, errno EOPNOTSUPP.
macro_rules! unsupported_ptr {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: provider interface; NULL, errno EOPNOTSUPP (see the module doc).")]
            #[no_mangle]
            pub extern "C" fn $name() -> *mut c_void {
                unsupported();
                null_mut()
            }
        )*
    };
}

/// Functions returning nothing: nothing to do (see the module doc).
macro_rules! unsupported_void {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: provider interface returning void; does nothing (see the module doc).")]
            #[no_mangle]
            pub extern "C" fn $name() {}
        )*
    };
}

unsupported_void!(
    __verbs_log,
    ibv_copy_ah_attr_from_kern,
    ibv_copy_path_rec_from_kern,
    ibv_copy_qp_attr_from_kern,
    verbs_init_cq,
    verbs_set_ops,
    verbs_uninit_context,
);

unsupported_ptr!(_verbs_init_and_alloc_context, verbs_open_device);

unsupported_int!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
    ibv_resolve_eth_l2_from_gid,
);

/// `ibv_attach_mcast`: multicast (UD) is not implemented; EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_attach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    unsupported()
}

/// `ibv_detach_mcast`: multicast (UD) is not implemented; EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_detach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    unsupported()
}

/// `ibv_set_ece`: no enhanced connection establishment options; EOPNOTSUPP (libibverbs' answer
/// for a provider without them).
#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    unsupported()
}

/// `ibv_query_ece`: as `ibv_set_ece`, EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    unsupported()
}

/// `ibv_get_sysfs_path`: where sysfs is mounted.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_dontfork_range`: softroce pins no pages, so a child after fork sees ordinary memory;
/// nothing to do, 0.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: as `ibv_dontfork_range`, 0.
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `verbs_register_driver_34`: what a provider library (libmlx5, libefa...) calls from its
/// constructor when it is loaded, as perftest's are. The shim's only device is softroce0, so
/// the provider is not recorded and never matched to a device.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}
