//! The IBVERBS_1.0 compatibility layer: the non-default `name@IBVERBS_1.0` versions of 33
//! functions, for programs linked against libibverbs 1.0 (2006), whose objects had other
//! layouts. As rdma-core's `compat-1_0.c` does, each 1.0 object is a small struct of the old
//! layout that points at the current object (`real_*`), each 1.0 function unwraps its
//! arguments and calls the current one, and the data path of a 1.0 context (poll, notify,
//! post) goes through a 1.0 ops table whose entries convert the old work requests.
//!
//! Each 1.0 object is an object of the shim's one handle type (`objects::handle`), in the same
//! registry as the current ones, so that the 1.0 functions hold with any number of threads as
//! the current ones do: a control call looks its 1.0 handle up and takes a reference under
//! the registry lock, a 1.0 object holds the 1.0 objects it was made from (a 1.0 QP its PD,
//! CQs and SRQ), and a 1.0 destroy is refused with EBUSY while either is the case.
//!
//! Differences from rdma-core, all on its crash paths: a bad, foreign, already destroyed or
//! other-typed 1.0 handle is refused with EINVAL (or NULL and errno EINVAL) instead of a
//! crash, a destroy while another thread uses the object is EBUSY instead of a use after
//! free, and `ibv_query_qp` tolerates a QP without an SRQ.
//!
//! The versions are given with `.symver`, which needs the versioned symbol defined in the same
//! object as the directive: a one-instruction trampoline per function, in assembly, jumps to
//! the Rust implementation (a tail jump keeps every argument register and the return value).

/// The live 1.0 object of type `$t` behind `$p`, referenced (see `handle::get`), or a return
/// with errno EINVAL in the function's C convention: `null` (NULL), `void` (nothing), or the
/// value given.
macro_rules! handle_or {
    ($t:ty, $p:expr, null) => {
        match handle::get::<$t>($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return null_mut();
            }
        }
    };
    ($t:ty, $p:expr, void) => {
        match handle::get::<$t>($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return;
            }
        }
    };
    ($t:ty, $p:expr, $ret:expr) => {
        match handle::get::<$t>($p) {
            Some(x) => x,
            None => {
                set_errno(EINVAL);
                return $ret;
            }
        }
    };
}

mod data_path;
mod device;
mod handles;
mod objects;
mod structs;

use device::*;
use objects::*;

/// A trampoline `softroce_compat_NAME_1_0`, exported as `NAME@IBVERBS_1.0`, that jumps to
/// the Rust implementation.
macro_rules! symver_1_0 {
    ($($name:literal => $f:ident),* $(,)?) => {
        $(
            #[cfg(target_arch = "x86_64")]
            std::arch::global_asm!(
                concat!(".globl softroce_compat_", $name, "_1_0"),
                concat!(".type softroce_compat_", $name, "_1_0, %function"),
                concat!("softroce_compat_", $name, "_1_0:"),
                "jmp {f}@PLT",
                concat!(".size softroce_compat_", $name, "_1_0, . - softroce_compat_", $name, "_1_0"),
                concat!(".symver softroce_compat_", $name, "_1_0, ", $name, "@IBVERBS_1.0"),
                f = sym $f,
                options(att_syntax),
            );
            #[cfg(target_arch = "aarch64")]
            std::arch::global_asm!(
                concat!(".globl softroce_compat_", $name, "_1_0"),
                concat!(".type softroce_compat_", $name, "_1_0, %function"),
                concat!("softroce_compat_", $name, "_1_0:"),
                "b {f}",
                concat!(".size softroce_compat_", $name, "_1_0, . - softroce_compat_", $name, "_1_0"),
                concat!(".symver softroce_compat_", $name, "_1_0, ", $name, "@IBVERBS_1.0"),
                f = sym $f,
            );
        )*
    };
}

symver_1_0!(
    "ibv_get_device_list" => get_device_list_1_0,
    "ibv_free_device_list" => free_device_list_1_0,
    "ibv_get_device_name" => get_device_name_1_0,
    "ibv_get_device_guid" => get_device_guid_1_0,
    "ibv_open_device" => open_device_1_0,
    "ibv_close_device" => close_device_1_0,
    "ibv_get_async_event" => get_async_event_1_0,
    "ibv_ack_async_event" => ack_async_event_1_0,
    "ibv_query_device" => query_device_1_0,
    "ibv_query_port" => query_port_1_0,
    "ibv_query_gid" => query_gid_1_0,
    "ibv_query_pkey" => query_pkey_1_0,
    "ibv_alloc_pd" => alloc_pd_1_0,
    "ibv_dealloc_pd" => dealloc_pd_1_0,
    "ibv_reg_mr" => reg_mr_1_0,
    "ibv_dereg_mr" => dereg_mr_1_0,
    "ibv_create_cq" => create_cq_1_0,
    "ibv_resize_cq" => resize_cq_1_0,
    "ibv_destroy_cq" => destroy_cq_1_0,
    "ibv_get_cq_event" => get_cq_event_1_0,
    "ibv_ack_cq_events" => ack_cq_events_1_0,
    "ibv_create_srq" => create_srq_1_0,
    "ibv_modify_srq" => modify_srq_1_0,
    "ibv_query_srq" => query_srq_1_0,
    "ibv_destroy_srq" => destroy_srq_1_0,
    "ibv_create_qp" => create_qp_1_0,
    "ibv_query_qp" => query_qp_1_0,
    "ibv_modify_qp" => modify_qp_1_0,
    "ibv_destroy_qp" => destroy_qp_1_0,
    "ibv_create_ah" => create_ah_1_0,
    "ibv_destroy_ah" => destroy_ah_1_0,
    "ibv_attach_mcast" => attach_mcast_1_0,
    "ibv_detach_mcast" => detach_mcast_1_0,
);
