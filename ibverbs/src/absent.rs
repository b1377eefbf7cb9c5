//! Exports of rdma-core 44's libibverbs for features that rxe's provider does not offer, with
//! what libibverbs does on rxe: its dispatch reaches the `verbs_dummy_ops` of
//! `libibverbs/dummy_ops.c` (EOPNOTSUPP, NULL, or nothing), after the same argument checks.
//! pyverbs and libfabric link against them, so they must exist even where they cannot work.

use libc::{c_int, c_uint, c_void, EINVAL, ENODEV, EOPNOTSUPP};
use std::ptr::null_mut;

use crate::ffi::{ibv_context, ibv_mr, ibv_pd, ibv_qp};

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// `ibv_import_device`: a context shared from another process through its uverbs command fd.
/// As libibverbs: EINVAL unless `cmd_fd` is a character device; ENODEV unless it is
/// softroce0's (a context's `cmd_fd`, open on `CMD_DEVICE`); then EOPNOTSUPP, as for rxe,
/// whose provider has no `import_context`; NULL.
#[no_mangle]
pub extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    // SAFETY: `stat` is plain integers, for which all zeroes is a valid value.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat writes the `stat` we own and pass; any fd value is allowed (a closed or
    // negative one is EBADF).
    let r = unsafe { libc::fstat(cmd_fd, &mut st) };
    if r != 0 || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: as above, plain integers.
    let mut own: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated path and the `stat` we own.
    let r = unsafe { libc::stat(crate::objects::CMD_DEVICE.as_ptr(), &mut own) };
    set_errno(if r == 0 && own.st_rdev == st.st_rdev {
        EOPNOTSUPP
    } else {
        ENODEV
    });
    null_mut()
}

/// `ibv_import_pd`: importing objects needs a shared kernel context; NULL, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_import_pd(_context: *mut ibv_context, _pd_handle: u32) -> *mut ibv_pd {
    set_errno(EOPNOTSUPP);
    null_mut()
}

/// `ibv_import_mr`: as `ibv_import_pd`, NULL, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _mr_handle: u32) -> *mut ibv_mr {
    set_errno(EOPNOTSUPP);
    null_mut()
}

/// `ibv_import_dm`: no device memory; NULL, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_import_dm(_context: *mut ibv_context, _dm_handle: u32) -> *mut c_void {
    set_errno(EOPNOTSUPP);
    null_mut()
}

/// `ibv_unimport_pd`: nothing was imported; does nothing, as the dummy op.
#[no_mangle]
pub extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

/// `ibv_unimport_mr`: does nothing, as the dummy op.
#[no_mangle]
pub extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

/// `ibv_unimport_dm`: does nothing, as the dummy op.
#[no_mangle]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// `ibv_reg_dmabuf_mr`: registering a dma-buf (GPU memory) needs a kernel driver that can map
/// it; rxe has none either. NULL, errno EOPNOTSUPP.
#[no_mangle]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(EOPNOTSUPP);
    null_mut()
}

/// `ibv_query_qp_data_in_order`: 1 if the data of operation `op` lands in memory in order
/// (`flags` must be 0 in rdma-core 44). rxe's
/// provider does not answer, so libibverbs returns 0 ("not guaranteed"), and so does the
/// shim: the engine copies a packet's payload with no ordering promise across packets that a
/// poller could rely on before the completion.
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_uint, _flags: u32) -> c_int {
    0
}
