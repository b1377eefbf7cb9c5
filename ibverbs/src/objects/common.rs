//! What every object kind's file uses: the devices' configuration, errno, C struct helpers.

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use libc::{c_char, c_int, EBUSY, EINVAL, ENOMEM};
use softroce::driver::{DEFAULT_IDLE_SPIN, MAX_IDLE_SPIN};
use softroce::ib::{Mtu, VerbsError};
use softroce::transport::cc::CcConfig;

/// One device's configuration, read once from the environment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    pub(super) bind: SocketAddr,
    pub(super) mtu: Mtu,
    /// Congestion control (`SOFTROCE_CC`, `SOFTROCE_CC_PARAMS`); `None` when they are not
    /// usable: the device then does not open (EINVAL) rather than run without what was asked.
    pub(super) cc: Option<CcConfig>,
    /// Busy-poll mode (`SOFTROCE_BUSY_POLL=1`, `softroce run --busy-poll`): the threads that
    /// poll CQs and post run the engine's passes themselves, as a user-space RDMA provider
    /// does, instead of waking the engine's thread for every packet.
    pub(super) busy_poll: bool,
    /// Without busy-poll, how long the engine thread spins before it sleeps
    /// (`SOFTROCE_IDLE_SPIN_US`, `softroce run --idle-spin-us`; `DeviceConfig::idle_spin`).
    pub(super) idle_spin: Duration,
}

/// The device's one port (ports are numbered from 1).
pub(super) const PORT: u8 = 1;

/// The default P_Key, the only entry of the P_Key table (as `__be16`; all ones either way).
pub(super) const DEFAULT_PKEY: u16 = 0xffff;

/// Bytes an eventfd read or write moves.
pub(super) const EVENTFD_COUNT: usize = core::mem::size_of::<u64>();

/// Where the device binds when `SOFTROCE_BIND` does not say.
const DEFAULT_BIND: &str = "127.0.0.1:4791";

/// How many devices the process has: one per address `SOFTROCE_BIND` names (at least one).
pub(super) fn device_count() -> usize {
    env_configs().len()
}

/// Device `dev`'s configuration: `SOFTROCE_BIND`'s address for it and `SOFTROCE_MTU` as
/// read on first use, with the stand-in address in place of the bound one if this process
/// took one for it ([`stand_in`]). `dev` is below [`device_count`].
pub(super) fn config(dev: usize) -> Config {
    let mut c = env_configs()[dev];
    if let Some(a) = lock_addr()[dev].stand_in_here() {
        c.bind = a;
    }
    c
}

/// The address `SOFTROCE_BIND` names for device `dev`, whatever it stands in at.
pub(super) fn nominal_bind(dev: usize) -> SocketAddr {
    env_configs()[dev].bind
}

/// Which address a device of this process uses, and whether that is settled.
#[derive(Clone, Copy, Default)]
struct AddrState {
    /// The stand-in address, and the process that chose it (a child after fork has its own
    /// device, see [`fix_address`]).
    stand_in: Option<(SocketAddr, u32)>,
    /// The process whose engine has bound its socket: its address can no longer change.
    fixed_by: Option<u32>,
}

impl AddrState {
    fn stand_in_here(&self) -> Option<SocketAddr> {
        self.stand_in
            .filter(|s| s.1 == std::process::id())
            .map(|s| s.0)
    }
}

/// Every device's [`AddrState`], by device index.
fn lock_addr() -> std::sync::MutexGuard<'static, Vec<AddrState>> {
    static ADDR: std::sync::Mutex<Vec<AddrState>> = std::sync::Mutex::new(Vec::new());
    let mut g = ADDR.lock().unwrap_or_else(|e| e.into_inner());
    if g.len() < device_count() {
        g.resize(device_count(), AddrState::default());
    }
    g
}

/// Settles device `dev`'s address for the engine about to bind it, and returns it: the
/// stand-in if this process chose one, else `SOFTROCE_BIND`'s. A process forked from one
/// whose engine ran settles its own (its parent's engine thread did not come with it).
pub(super) fn fix_address(dev: usize) -> SocketAddr {
    let mut g = lock_addr();
    g[dev].fixed_by = Some(std::process::id());
    g[dev].stand_in_here().unwrap_or_else(|| nominal_bind(dev))
}

/// Unsettles device `dev`'s address after its engine failed to bind it (another process
/// holds it), so that the rdma_cm shim may still choose a stand-in (spec-notes/librdmacm.md,
/// rule 10).
pub(super) fn unfix_address(dev: usize) {
    let mut g = lock_addr();
    if g[dev].fixed_by == Some(std::process::id()) {
        g[dev].fixed_by = None;
    }
}

/// Makes `a` device `dev`'s address in this process instead of `SOFTROCE_BIND`'s, if its
/// engine has not bound a socket yet and no other device of the process has that address
/// (then true). Used by the rdma_cm shim for a process that connects to its own loopback
/// device address from another process (spec-notes/librdmacm.md, rule 10).
pub(super) fn stand_in(dev: usize, a: SocketAddr) -> bool {
    let mut g = lock_addr();
    let me = std::process::id();
    if g[dev].fixed_by == Some(me) {
        return g[dev].stand_in_here() == Some(a);
    }
    let taken = (0..g.len())
        .filter(|&d| d != dev)
        .any(|d| g[d].stand_in_here().unwrap_or_else(|| nominal_bind(d)) == a);
    if taken {
        return false;
    }
    g[dev].stand_in = Some((a, me));
    true
}

/// The devices `SOFTROCE_BIND`, `SOFTROCE_MTU` and the other variables describe, read once.
fn env_configs() -> &'static [Config] {
    static CFG: OnceLock<Vec<Config>> = OnceLock::new();
    CFG.get_or_init(|| {
        let binds = binds_from_env(std::env::var("SOFTROCE_BIND").ok().as_deref());
        let mtus = mtus_from_env(std::env::var("SOFTROCE_MTU").ok().as_deref(), &binds);
        let cc = cc_from_env(
            std::env::var("SOFTROCE_CC").ok().as_deref(),
            std::env::var("SOFTROCE_CC_PARAMS").ok().as_deref(),
        );
        let busy_poll = busy_poll_from_env(std::env::var("SOFTROCE_BUSY_POLL").ok().as_deref());
        let idle_spin = idle_spin_from_env(std::env::var("SOFTROCE_IDLE_SPIN_US").ok().as_deref());
        binds
            .into_iter()
            .zip(mtus)
            .map(|(bind, mtu)| Config {
                idle_spin,
                bind,
                mtu,
                cc,
                busy_poll,
            })
            .collect()
    })
}

/// The devices' addresses `SOFTROCE_BIND` names: a comma-separated list of addresses (an IP,
/// UDP port 4791, or IP:PORT), device `softroceN` at the Nth. Unset or empty: one device at
/// [`DEFAULT_BIND`]. An entry that is not an address, or names one an earlier entry named, is
/// left out after one line on stderr; when none is left, the default.
fn binds_from_env(v: Option<&str>) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for entry in v.unwrap_or("").split(',').map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        match parse_bind(entry) {
            Some(a) if !out.contains(&a) => out.push(a),
            found => {
                use std::io::Write;
                let why = if found.is_some() {
                    "is named twice"
                } else {
                    "is not an IP or IP:PORT"
                };
                let _ = writeln!(
                    std::io::stderr(),
                    "libibverbs: softroce: SOFTROCE_BIND: {entry:?} {why}; left out"
                );
            }
        }
    }
    if out.is_empty() {
        out.push(DEFAULT_BIND.parse().expect("constant address"));
    }
    out
}

/// Each device's active MTU from `SOFTROCE_MTU`: one number of bytes for every device, or a
/// comma-separated list, one for each device in order. A device without a usable entry gets
/// rxe's for its address's interface (4096 on loopback, 1024 on a 1500-byte link).
fn mtus_from_env(v: Option<&str>, binds: &[SocketAddr]) -> Vec<Mtu> {
    let entries: Vec<Option<Mtu>> = v
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().parse::<u32>().ok().and_then(Mtu::from_bytes))
        .collect();
    binds
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let given = if entries.len() == 1 {
                entries[0]
            } else {
                entries.get(i).copied().flatten()
            };
            // rxe's active MTU follows its netdev's: 4096 on loopback, 1024 on 1500 bytes.
            given.unwrap_or_else(|| softroce::driver::interface::default_active_mtu(b.ip()))
        })
        .collect()
}
/// Whether `SOFTROCE_BUSY_POLL` asks for busy-poll mode: `1`, `true` or `yes`; unset, empty,
/// `0`, `false` or `no` do not; anything else does not either, after one line on stderr.
fn busy_poll_from_env(v: Option<&str>) -> bool {
    match v.map(str::trim) {
        Some("1" | "true" | "yes") => true,
        None | Some("" | "0" | "false" | "no") => false,
        Some(other) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "libibverbs: softroce: SOFTROCE_BUSY_POLL={other:?} is not 1 or 0; not busy-polling"
            );
            false
        }
    }
}

/// The engine's spin before sleeping that `SOFTROCE_IDLE_SPIN_US` asks for, in microseconds
/// (0: none, at most `MAX_IDLE_SPIN`); unset or empty: the default; anything else: the
/// default, after one line on stderr.
fn idle_spin_from_env(v: Option<&str>) -> Duration {
    match v.map(str::trim) {
        None | Some("") => DEFAULT_IDLE_SPIN,
        Some(us) => match us.parse::<u64>() {
            Ok(us) if Duration::from_micros(us) <= MAX_IDLE_SPIN => Duration::from_micros(us),
            _ => {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "libibverbs: softroce: SOFTROCE_IDLE_SPIN_US={us:?} is not a number of microseconds up to {}; using {}",
                    MAX_IDLE_SPIN.as_micros(),
                    DEFAULT_IDLE_SPIN.as_micros()
                );
                DEFAULT_IDLE_SPIN
            }
        },
    }
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
        VerbsError::OutOfMemory { .. } => ENOMEM,
        VerbsError::NotMapped { .. }
        | VerbsError::NotReadable { .. }
        | VerbsError::NotWritable { .. } => libc::EFAULT,
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
    #[test]
    fn busy_poll_is_asked_for_by_one_true_or_yes_only() {
        for (v, want) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("no"), false),
            (Some("1"), true),
            (Some(" true "), true),
            (Some("yes"), true),
            (Some("fast"), false),
        ] {
            assert_eq!(super::busy_poll_from_env(v), want, "{v:?}");
        }
    }

    use super::*;

    #[test]
    fn idle_spin_from_the_environment() {
        for (v, want) in [
            (None, DEFAULT_IDLE_SPIN),
            (Some(""), DEFAULT_IDLE_SPIN),
            (Some("0"), Duration::ZERO),
            (Some(" 120 "), Duration::from_micros(120)),
            (Some("1000000"), MAX_IDLE_SPIN),
            (Some("1000001"), DEFAULT_IDLE_SPIN),
            (Some("18446744073709551615"), DEFAULT_IDLE_SPIN),
            (Some("-5"), DEFAULT_IDLE_SPIN),
            (Some("fast"), DEFAULT_IDLE_SPIN),
        ] {
            assert_eq!(idle_spin_from_env(v), want, "{v:?}");
        }
    }

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

    fn addrs(v: &[&str]) -> Vec<SocketAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn bind_names_one_device_per_comma_separated_address() {
        assert_eq!(binds_from_env(None), addrs(&["127.0.0.1:4791"]));
        assert_eq!(binds_from_env(Some("")), addrs(&["127.0.0.1:4791"]));
        assert_eq!(
            binds_from_env(Some("127.0.0.2")),
            addrs(&["127.0.0.2:4791"])
        );
        assert_eq!(
            binds_from_env(Some("127.0.0.1:14791, 127.0.0.2,[::1]:7")),
            addrs(&["127.0.0.1:14791", "127.0.0.2:4791", "[::1]:7"])
        );
        // Left out: what is not an address, and an address named twice.
        assert_eq!(
            binds_from_env(Some("127.0.0.2,nowhere,127.0.0.2:4791,127.0.0.3,")),
            addrs(&["127.0.0.2:4791", "127.0.0.3:4791"])
        );
        assert_eq!(binds_from_env(Some("nowhere")), addrs(&["127.0.0.1:4791"]));
    }

    #[test]
    fn mtu_is_one_for_every_device_or_one_each() {
        let b = addrs(&["127.0.0.1:4791", "127.0.0.2:4791", "127.0.0.3:4791"]);
        let lo = softroce::driver::interface::default_active_mtu(b[0].ip());
        assert_eq!(mtus_from_env(Some("1024"), &b), vec![Mtu::Mtu1024; 3]);
        assert_eq!(
            mtus_from_env(Some("1024, 2048"), &b),
            vec![Mtu::Mtu1024, Mtu::Mtu2048, lo]
        );
        assert_eq!(
            mtus_from_env(Some("1000,,512"), &b),
            vec![lo, lo, Mtu::Mtu512]
        );
        assert_eq!(mtus_from_env(None, &b), vec![lo; 3]);
    }
}
