//! Symbols that other rdma-core libraries need from libibverbs.so.1 to load at all.
//!
//! Debian links its libraries with BIND_NOW, so every symbol they import must exist when a
//! program starts, even one never called: perftest links libmlx5 (an mlx5 provider, whose
//! imports are libibverbs' provider interface, IBVERBS_PRIVATE_34) and librdmacm (kernel RDMA
//! CM helpers), and pyverbs links libmlx5 and libefa. softroce's shim has no providers and no
//! kernel command channel, so nothing reaches the provider interface: a provider only calls
//! it on a device it opened itself, and the shim never gives one a device. Should something
//! call it anyway, it fails as a command on a device without a kernel interface would, and
//! never aborts the host process: the `ibv_cmd_*` and ioctl calls return EOPNOTSUPP (and set
//! errno), the constructors return NULL with errno EOPNOTSUPP, the rest do nothing. The
//! public ones among them get real behaviour here.

use std::sync::atomic::AtomicBool;

use libc::{c_char, c_int, c_uint, c_void, EINVAL, ENOENT, EOPNOTSUPP};

/// Read by providers when the kernel disassociates a device; softroce never does.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// Provider commands that return 0 or an errno value (`int ibv_cmd_*(...)` of driver.h):
/// EOPNOTSUPP, errno set too. Their arguments are never read, so the C prototypes' are left
/// out (a C caller's arguments in registers or on its stack are simply not looked at).
macro_rules! command_unsupported {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: provider interface; EOPNOTSUPP (see the module doc).")]
            #[no_mangle]
            pub extern "C" fn $name() -> c_int {
                set_errno(EOPNOTSUPP);
                EOPNOTSUPP
            }
        )*
    };
}

/// Provider constructors that return a pointer: NULL, errno EOPNOTSUPP.
macro_rules! constructor_unsupported {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: provider interface; NULL, errno EOPNOTSUPP (see the module doc).")]
            #[no_mangle]
            pub extern "C" fn $name() -> *mut c_void {
                set_errno(EOPNOTSUPP);
                std::ptr::null_mut()
            }
        )*
    };
}

/// Provider helpers returning nothing: do nothing.
macro_rules! void_unsupported {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: provider interface; does nothing (see the module doc).")]
            #[no_mangle]
            pub extern "C" fn $name() {}
        )*
    };
}

command_unsupported!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
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
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
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
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);

constructor_unsupported!(_verbs_init_and_alloc_context, verbs_open_device);

void_unsupported!(
    __verbs_log,
    verbs_init_cq,
    verbs_set_ops,
    verbs_uninit_context
);

/// `__ioctl_final_num_attrs(num_attrs, link)`: the attribute count of a chain of ioctl
/// command buffers, which only providers build; the count given, as for a chain of one.
#[no_mangle]
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
    num_attrs
}

/// `ibv_read_ibdev_sysfs_file(buf, size, sysfs_dev, fmt, ...)`: a provider reading its
/// device's sysfs file; softroce0 has no sysfs directory, so -1 with errno ENOENT, as a
/// failed open.
#[no_mangle]
pub extern "C" fn ibv_read_ibdev_sysfs_file(
    _buf: *mut c_char,
    _size: usize,
    _sysfs_dev: *mut c_void,
    _fmt: *const c_char,
) -> c_int {
    set_errno(ENOENT);
    -1
}

/// `ibv_resolve_eth_l2_from_gid`: the Ethernet address and VLAN of a RoCE destination, from
/// the kernel's neighbour table. softroce0's peers are reached by UDP through the host's own
/// stack, with no link-layer address of the device's own, so resolution fails as libibverbs'
/// does when no neighbour answers: -EINVAL.
#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut c_void,
    _attr: *mut c_void,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    -EINVAL
}

/// `ibv_set_ece`: no enhanced connection establishment options; EOPNOTSUPP (libibverbs' answer
/// for a provider without them).
#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_query_ece`: as `ibv_set_ece`, EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
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

// `ibv_register_driver@IBVERBS_1.1`: the provider registration of rdma-core before 13, kept by
// libibverbs as a non-default version that does nothing (old libfabric usnic providers call
// it only to suppress their own registration), so that binaries linked against it still load.
// A non-default version can only be given with `.symver` in the object that defines the
// function, hence assembly: the body is one `ret` (the function takes two arguments it ignores
// and returns nothing), the same instruction on x86-64 and aarch64.
std::arch::global_asm!(
    ".globl softroce_ibv_register_driver_1_1",
    ".type softroce_ibv_register_driver_1_1, %function",
    "softroce_ibv_register_driver_1_1:",
    "ret",
    ".size softroce_ibv_register_driver_1_1, . - softroce_ibv_register_driver_1_1",
    ".symver softroce_ibv_register_driver_1_1, ibv_register_driver@IBVERBS_1.1",
);
