//! The shim's errno conventions: a lock through poisoning, this thread's errno, librdmacm's
//! -1-and-errno return, and the errno the kernel's rdma_cm gives for each of softroce's errors.

use std::sync::Mutex;

use libc::c_int;
use softroce::rdma_cm::RdmaCmError;

/// Locks `m`, through poisoning (a panic elsewhere leaves the data consistent: every
/// critical section here is a plain update).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// This thread's errno.
pub(super) fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Sets errno to `e` and returns -1 (librdmacm's convention for every int call).
pub(super) fn fail(e: c_int) -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// The errno the kernel's rdma_cm gives for what softroce's refused.
pub(super) fn errno_of(e: &RdmaCmError) -> c_int {
    use softroce::cm::CmError;
    match e {
        RdmaCmError::Cm(CmError::AlreadyListening(_)) => libc::EADDRINUSE,
        RdmaCmError::Cm(CmError::TooManyConnections) => libc::ENOMEM,
        RdmaCmError::Cm(_) => libc::EINVAL,
        RdmaCmError::Verbs(v) => match v {
            softroce::ib::VerbsError::DeviceClosed => libc::ENODEV,
            _ => libc::EINVAL,
        },
        RdmaCmError::WrongState { .. } => libc::EINVAL,
        RdmaCmError::AddressFamily(_) => libc::EAFNOSUPPORT,
        RdmaCmError::ChannelInUse => libc::EBUSY,
        RdmaCmError::Timeout => libc::ETIMEDOUT,
    }
}
