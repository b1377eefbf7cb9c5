//! What this librdmacm refuses: the rsocket calls not implemented yet (rpoll, rselect, the
//! datagram calls, the iomap calls; the stream calls are in `rsocket/`). Each call fails with ENOSYS and, the first time in the process, says on stderr
//! which function it was, so that a program's own "failed" message has a cause; it never
//! aborts and never writes to stdout.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Mutex;

use libc::{c_int, c_void, size_t, ssize_t, ENOSYS};

use super::fail;

/// Says once per function on stderr that softroce does not implement it, and sets ENOSYS.
fn refuse(func: &'static str) -> c_int {
    static SAID: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let first = SAID
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(func);
    if first {
        let _ = writeln!(
            std::io::stderr(),
            "librdmacm (softroce): {func} is not implemented (ENOSYS)"
        );
    }
    fail(ENOSYS)
}

/// Defines rsocket functions that fail with ENOSYS, returning -1 in their C return type.
macro_rules! rsockets {
    ($($name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: ENOSYS (rsockets are not implemented).")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $(let _ = $arg;)*
            refuse(stringify!($name)) as $ret
        }
    )*};
}

rsockets! {
    rrecvfrom(s: c_int, buf: *mut c_void, len: size_t, flags: c_int, src: *mut c_void, alen: *mut u32) -> ssize_t;
    rrecvmsg(s: c_int, msg: *mut c_void, flags: c_int) -> ssize_t;
    rsendto(s: c_int, buf: *const c_void, len: size_t, flags: c_int, dst: *const c_void, alen: u32) -> ssize_t;
    rsendmsg(s: c_int, msg: *const c_void, flags: c_int) -> ssize_t;
}
