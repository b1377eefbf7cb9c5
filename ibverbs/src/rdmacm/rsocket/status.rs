//! How the rsocket exports return: -1 with errno set, or the value.

use libc::{c_int, ssize_t};

/// Sets errno to `e` and returns -1.
pub(super) fn fail(e: c_int) -> c_int {
    super::super::error::fail(e)
}

/// -1 and errno, or the value.
pub(super) fn ret(r: Result<c_int, c_int>) -> c_int {
    r.unwrap_or_else(fail)
}

/// -1 and errno, or the byte count.
pub(super) fn ret_len(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e) as ssize_t,
    }
}
