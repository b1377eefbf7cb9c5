//! What every object kind's file uses: the device's configuration, errno, C struct helpers.

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;

use libc::{c_char, c_int, EBUSY, EINVAL, ENOMEM};
use softroce::ib::{Mtu, VerbsError};
use softroce::transport::cc::CcConfig;

/// The device's configuration, read once from the environment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    pub(super) bind: SocketAddr,
    pub(super) mtu: Mtu,
    /// Congestion control (`SOFTROCE_CC`, `SOFTROCE_CC_PARAMS`); `None` when they are not
    /// usable: the device then does not open (EINVAL) rather than run without what was asked.
    pub(super) cc: Option<CcConfig>,
}

/// The device's one port (ports are numbered from 1).
pub(super) const PORT: u8 = 1;

/// The default P_Key, the only entry of the P_Key table (as `__be16`; all ones either way).
pub(super) const DEFAULT_PKEY: u16 = 0xffff;

/// Bytes an eventfd read or write moves.
pub(super) const EVENTFD_COUNT: usize = core::mem::size_of::<u64>();

/// Where the device binds when `SOFTROCE_BIND` does not say.
const DEFAULT_BIND: &str = "127.0.0.1:4791";

/// The configuration, read on first use.
pub(super) fn config() -> Config {
    static CFG: OnceLock<Config> = OnceLock::new();
    *CFG.get_or_init(|| {
        let bind = std::env::var("SOFTROCE_BIND")
            .ok()
            .and_then(|s| parse_bind(&s))
            .unwrap_or_else(|| DEFAULT_BIND.parse().expect("constant address"));
        let mtu = std::env::var("SOFTROCE_MTU")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .and_then(Mtu::from_bytes)
            .unwrap_or(Mtu::Mtu1024);
        let cc = cc_from_env(
            std::env::var("SOFTROCE_CC").ok().as_deref(),
            std::env::var("SOFTROCE_CC_PARAMS").ok().as_deref(),
        );
        Config { bind, mtu, cc }
    })
}

/// The congestion control `SOFTROCE_CC` (`dcqcn` or `none`, default none) and
/// `SOFTROCE_CC_PARAMS` (`name=value,...`, mlx5's names) ask for, or `None` after one line on
/// stderr saying what is wrong (stdout belongs to the program), as rdma-core's own warnings.
fn cc_from_env(mode: Option<&str>, params: Option<&str>) -> Option<CcConfig> {
    match CcConfig::from_text(mode.unwrap_or("none"), params.unwrap_or("")) {
        Ok(cc) => Some(cc),
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "libibverbs: softroce: SOFTROCE_CC/SOFTROCE_CC_PARAMS: {e}"
            );
            None
        }
    }
}

/// `a.b.c.d`, `a.b.c.d:port`, `::1`, `[::1]:port`.
fn parse_bind(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 4791))
}

/// Sets this thread's errno.
pub(super) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// A failure returned as an errno value (libibverbs' convention for most calls), with errno
/// set to it as well: the kernel's failed command leaves it there with rdma-core, and
/// programs (qperf) print `strerror(errno)`.
pub(super) fn fail(e: c_int) -> c_int {
    set_errno(e);
    e
}

/// A failure returned as -1 with errno set.
pub(super) fn fail_neg(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// A failure returned as NULL with errno set.
pub(super) fn fail_null<T>(e: c_int) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// The errno libibverbs (on rxe) reports for a softroce error.
pub(super) fn errno_of(e: &VerbsError) -> c_int {
    match e {
        VerbsError::QueueFull { .. } => ENOMEM,
        VerbsError::Busy(_) => EBUSY,
        VerbsError::NotFound(_) => libc::ENOENT,
        VerbsError::Timeout => libc::ETIMEDOUT,
        VerbsError::DeviceClosed => libc::ENODEV,
        VerbsError::Io(msg) if msg.contains("in use") => libc::EADDRINUSE,
        VerbsError::Io(msg) if msg.contains("not available") => libc::EADDRNOTAVAIL,
        VerbsError::Io(_) => libc::EIO,
        _ => EINVAL,
    }
}

/// A `pthread_mutex_t` as `PTHREAD_MUTEX_INITIALIZER` (rdma-core initialises its structs'
/// mutexes with default attributes).
pub(super) fn mutex_init() -> libc::pthread_mutex_t {
    libc::PTHREAD_MUTEX_INITIALIZER
}

/// A `pthread_cond_t` as `PTHREAD_COND_INITIALIZER`.
pub(super) fn cond_init() -> libc::pthread_cond_t {
    libc::PTHREAD_COND_INITIALIZER
}

/// Copies `s` NUL-terminated into `dst` (truncated to fit).
pub(super) fn copy_cstr(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as c_char;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_from_the_environment() {
        assert_eq!(cc_from_env(None, None), Some(CcConfig::default()));
        let on = cc_from_env(Some("dcqcn"), Some("rpg_ai_rate=5,cnp_dscp=48")).unwrap();
        assert!(on.enabled);
        assert_eq!((on.rp.rpg_ai_rate_mbps, on.cnp_dscp), (5.0, Some(48)));
        assert_eq!(cc_from_env(Some("reno"), None), None);
        assert_eq!(cc_from_env(Some("dcqcn"), Some("rpg_ai_rat=5")), None);
        assert_eq!(cc_from_env(None, Some("rpg_ai_rate=5")), None);
    }
}
