//! The exported functions and the objects behind the C handles.

use std::collections::{HashSet, VecDeque};
use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use libc::{c_char, c_int, c_uint, c_void, EBUSY, EINVAL, ENOMEM, EOPNOTSUPP};
use softroce::driver::DeviceConfig;
use softroce::verbs::{
    AccessFlags, AddressHandle, AhAttr, CompletionQueue, Context, Gid, MemoryRegion, Mtu,
    ProtectionDomain, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, QueuePair, RecvWr,
    SendFlags, SendWr, Sge, SharedReceiveQueue, SrqAttr, SrqAttrMask, UdSendWr, VerbsError,
    WcStatus, WorkCompletion, WrOpcode,
};

use crate::ffi::*;

// ---------------------------------------------------------------------------------------------
// Configuration, errno, registry

/// The device's configuration, read once from the environment.
#[derive(Debug, Clone, Copy)]
struct Config {
    bind: SocketAddr,
    mtu: Mtu,
}

const DEFAULT_BIND: &str = "127.0.0.1:4791";

fn config() -> Config {
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
        Config { bind, mtu }
    })
}

/// `a.b.c.d`, `a.b.c.d:port`, `::1`, `[::1]:port`.
fn parse_bind(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 4791))
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The errno libibverbs (on rxe) reports for a softroce error.
fn errno_of(e: &VerbsError) -> c_int {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Context,
    Pd,
    Mr,
    Channel,
    Cq,
    Qp,
    Srq,
    Ah,
}

fn registry() -> MutexGuard<'static, HashSet<(Kind, usize)>> {
    static LIVE: OnceLock<Mutex<HashSet<(Kind, usize)>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn live<T>(kind: Kind, p: *const T) -> bool {
    !p.is_null() && registry().contains(&(kind, p as usize))
}

fn track<T>(kind: Kind, p: *const T) {
    registry().insert((kind, p as usize));
}

/// Removes `p` from the registry; false if it was not live (a double destroy).
fn untrack<T>(kind: Kind, p: *const T) -> bool {
    registry().remove(&(kind, p as usize))
}

fn mutex_init() -> libc::pthread_mutex_t {
    libc::PTHREAD_MUTEX_INITIALIZER
}

fn cond_init() -> libc::pthread_cond_t {
    libc::PTHREAD_COND_INITIALIZER
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as c_char;
    }
}

// ---------------------------------------------------------------------------------------------
// Device list

/// The one device, `softroce0`.
struct Device(ibv_device);
// SAFETY: the device's pointers are all null and it is never written after creation.
unsafe impl Send for Device {}
// SAFETY: as for Send.
unsafe impl Sync for Device {}

/// Name of the device.
pub const DEVICE_NAME: &str = "softroce0";

fn device() -> *mut ibv_device {
    static DEV: OnceLock<Box<Device>> = OnceLock::new();
    let d = DEV.get_or_init(|| {
        let mut d = ibv_device {
            _ops: [null_mut(); 2],
            node_type: 1,      // IBV_NODE_CA
            transport_type: 0, // IBV_TRANSPORT_IB
            name: [0; IBV_SYSFS_NAME_MAX],
            dev_name: [0; IBV_SYSFS_NAME_MAX],
            dev_path: [0; IBV_SYSFS_PATH_MAX],
            ibdev_path: [0; IBV_SYSFS_PATH_MAX],
        };
        copy_cstr(&mut d.name, DEVICE_NAME);
        copy_cstr(&mut d.dev_name, "uverbs_softroce0");
        // Where rxe's are; `softroce run` lays them out (src/cli/run_ns.rs). Elsewhere they
        // name nothing, and sysfs reads fail as for a missing attribute.
        copy_cstr(
            &mut d.dev_path,
            "/sys/class/infiniband_verbs/uverbs_softroce0",
        );
        copy_cstr(&mut d.ibdev_path, "/sys/class/infiniband/softroce0");
        Box::new(Device(d))
    });
    &d.0 as *const ibv_device as *mut ibv_device
}

/// `ibv_get_device_list`: a NULL-terminated array holding `softroce0`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let list: Box<[*mut ibv_device; 2]> = Box::new([device(), null_mut()]);
    if !num_devices.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num_devices = 1 };
    }
    Box::into_raw(list) as *mut *mut ibv_device
}

/// `ibv_free_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if !list.is_null() {
        // SAFETY: `list` came from ibv_get_device_list, which boxed a 2-element array.
        drop(unsafe { Box::from_raw(list as *mut [*mut ibv_device; 2]) });
    }
}

/// `ibv_get_device_name`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    if dev != device() {
        set_errno(EINVAL);
        return ptr::null();
    }
    // SAFETY: checked to be our static device.
    unsafe { (*dev).name.as_ptr() }
}

/// The node GUID (big-endian bytes, as `__be64`): the modified EUI-64 of the locally
/// administered MAC 02:00:a:b:c:d made from the bound address's last four bytes.
fn node_guid() -> u64 {
    let ip = config().bind.ip();
    let o: [u8; 4] = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    u64::from_ne_bytes([0x00, 0x00, o[0], 0xff, 0xfe, o[1], o[2], o[3]])
}

/// `ibv_get_device_guid`: the node GUID, `__be64`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    if dev != device() {
        set_errno(EINVAL);
        return 0;
    }
    node_guid()
}

/// `ibv_get_device_index`: 0 for softroce0, -1 for anything else.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    if dev != device() {
        return -1;
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Context

/// An open device: `verbs_context` (holding `ibv_context` last) first, then the softroce
/// context, opened on first need so that a program that only queries does not bind a socket.
#[repr(C)]
struct Ctx {
    vctx: verbs_context,
    cfg: Config,
    /// The softroce device context, opened when the first PD or CQ is created, and shared by
    /// every open context of the process (one address, one socket, as one NIC).
    inner: Mutex<Option<Arc<Context>>>,
    /// Objects (PDs, CQs, channels) that keep the context from closing.
    users: AtomicUsize,
}

unsafe fn ctx_of(c: *mut ibv_context) -> Option<&'static Ctx> {
    if !live(Kind::Context, c) {
        return None;
    }
    let off = core::mem::offset_of!(verbs_context, context);
    // SAFETY: live contexts are the `vctx.context` of a leaked `Ctx`, whose first field is
    // `vctx`.
    Some(unsafe { &*((c as *mut u8).sub(off) as *const Ctx) })
}

impl Ctx {
    /// The softroce context, opened now if needed.
    fn open(&self) -> Result<MutexGuard<'_, Option<Arc<Context>>>, c_int> {
        static SHARED: Mutex<std::sync::Weak<Context>> = Mutex::new(std::sync::Weak::new());
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            let ctx = match shared.upgrade() {
                Some(c) => c,
                None => {
                    let c = Arc::new(
                        Context::open(&DeviceConfig::new(self.cfg.bind))
                            .map_err(|e| errno_of(&e))?,
                    );
                    *shared = Arc::downgrade(&c);
                    c
                }
            };
            *g = Some(ctx);
        }
        Ok(g)
    }

    fn ptr(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}

/// `ibv_open_device`: NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    if dev != device() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: eventfd has no memory-safety preconditions.
    let async_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if async_fd < 0 {
        return null_mut();
    }
    let mut ops: [*mut c_void; VERBS_CONTEXT_SLOTS] = [null_mut(); VERBS_CONTEXT_SLOTS];
    ops[VCTX_QUERY_PORT] = ext_query_port as QueryPortFn as *mut c_void;
    let ctx = Box::new(Ctx {
        vctx: verbs_context {
            ops,
            sz: core::mem::size_of::<verbs_context>(),
            context: ibv_context {
                device: dev,
                ops: ibv_context_ops {
                    _compat: [null_mut(); 7],
                    alloc_mw: null_mut(),
                    bind_mw: null_mut(),
                    dealloc_mw: null_mut(),
                    _compat_create_cq: null_mut(),
                    poll_cq: Some(op_poll_cq),
                    req_notify_cq: Some(op_req_notify_cq),
                    _compat2: [null_mut(); 7],
                    post_srq_recv: Some(op_post_srq_recv),
                    _compat3: [null_mut(); 4],
                    post_send: Some(op_post_send),
                    post_recv: Some(op_post_recv),
                    _compat4: [null_mut(); 5],
                },
                cmd_fd: -1,
                async_fd,
                num_comp_vectors: 1,
                mutex: mutex_init(),
                abi_compat: usize::MAX as *mut c_void, // __VERBS_ABI_IS_EXTENDED
            },
        },
        cfg: config(),
        inner: Mutex::new(None),
        users: AtomicUsize::new(0),
    });
    let ctx = Box::leak(ctx);
    let p = ctx.ptr();
    track(Kind::Context, p);
    p
}

/// `ibv_close_device`: 0, or -1 and errno (EINVAL for a bad handle).
///
/// As with the kernel, which frees what a process leaves behind when it closes the device,
/// closing does not need every object destroyed first (perftest leaves a CQ): the engine stops,
/// objects still held fail with ENODEV from then on, and their memory (a few bytes of
/// bookkeeping each) stays allocated so that stale handles never dangle.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(c: *mut ibv_context) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return -1;
    };
    if !untrack(Kind::Context, c) {
        set_errno(EINVAL);
        return -1;
    }
    if ctx.users.load(Ordering::SeqCst) != 0 {
        // Let the engine go (it stops with the process's last context); leave the context's
        // memory to the objects that still point at it.
        drop(ctx.inner.lock().unwrap_or_else(|e| e.into_inner()).take());
        return 0;
    }
    let ctx = ctx as *const Ctx as *mut Ctx;
    // SAFETY: leaked in ibv_open_device; no longer registered, and no object refers to it.
    let ctx = unsafe { Box::from_raw(ctx) };
    // SAFETY: the fd was opened by ibv_open_device.
    unsafe { libc::close(ctx.vctx.context.async_fd) };
    drop(ctx);
    0
}

fn device_attr(cfg: &Config) -> ibv_device_attr {
    let l = softroce::verbs::DeviceLimits::default();
    let _ = cfg;
    ibv_device_attr {
        fw_ver: [0; 64],
        node_guid: node_guid(),
        sys_image_guid: node_guid(),
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        vendor_id: 0xffffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 0x10000,
        max_qp_wr: l.max_qp_wr as c_int,
        // IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN
        device_cap_flags: (1 << 11) | (1 << 12),
        max_sge: l.max_sge as c_int,
        max_sge_rd: l.max_sge as c_int,
        max_cq: 0x4000,
        max_cqe: l.max_cqe as c_int,
        max_mr: 0x40000,
        max_pd: 0x10000,
        max_qp_rd_atom: l.max_qp_rd_atom as c_int,
        max_ee_rd_atom: 0,
        max_res_rd_atom: 0x3f80,
        max_qp_init_rd_atom: l.max_qp_init_rd_atom as c_int,
        max_ee_init_rd_atom: 0,
        atomic_cap: 1, // IBV_ATOMIC_HCA
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 0,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 0,
        max_srq_wr: 0,
        max_srq_sge: 0,
        max_pkeys: l.pkey_table_len,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

/// `ibv_query_device`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    c: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return EINVAL;
    };
    if attr.is_null() {
        return EINVAL;
    }
    // SAFETY: the caller passes a writable ibv_device_attr.
    unsafe { attr.write(device_attr(&ctx.cfg)) };
    0
}

fn port_attr(cfg: &Config) -> ibv_port_attr {
    let l = softroce::verbs::DeviceLimits::default();
    ibv_port_attr {
        state: 4, // IBV_PORT_ACTIVE
        max_mtu: l.max_mtu as c_uint,
        active_mtu: cfg.mtu as c_uint,
        gid_tbl_len: l.gid_table_len as c_int,
        // IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS, as rxe.
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: 0x80_0000,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: l.pkey_table_len,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 1, // 1X
        active_speed: 1, // SDR
        phys_state: 5,   // LINK_UP
        link_layer: 2,   // IBV_LINK_LAYER_ETHERNET
        flags: 0,
        port_cap_flags2: 0,
    }
}

/// The `query_port` op of `verbs_context`, which the inline `ibv_query_port` calls: fills
/// `min(len, sizeof)` bytes; 0 or an errno value.
unsafe extern "C" fn ext_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return EINVAL;
    };
    if port != 1 || attr.is_null() {
        return EINVAL;
    }
    let a = port_attr(&ctx.cfg);
    let n = len.min(core::mem::size_of::<ibv_port_attr>());
    // SAFETY: the caller's buffer holds `len` bytes; `a` holds at least `n`.
    unsafe { ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr as *mut u8, n) };
    0
}

/// `ibv_query_port` (the exported, legacy entry for old binaries and for contexts without the
/// extended op): fills the `_compat_ibv_port_attr` prefix; 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded with the legacy struct's size.
    unsafe { ext_query_port(c, port, attr, COMPAT_PORT_ATTR_LEN) }
}

fn gid_at(cfg: &Config, index: c_int) -> Option<[u8; 16]> {
    let len = softroce::verbs::DeviceLimits::default().gid_table_len as c_int;
    (0..len)
        .contains(&index)
        .then(|| Gid::from_ip(cfg.bind.ip()).0)
}

/// `ibv_query_gid`: 0, or -1 (bad context, port or index).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return -1;
    };
    match gid_at(&ctx.cfg, index) {
        Some(g) if port == 1 && !gid.is_null() => {
            // SAFETY: the caller passes a writable union ibv_gid.
            unsafe { gid.write(g) };
            0
        }
        _ => {
            set_errno(EINVAL);
            -1
        }
    }
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    /// The GID.
    pub gid: [u8; 16],
    /// Its index.
    pub gid_index: u32,
    /// Port (1).
    pub port_num: u32,
    /// `IBV_GID_TYPE_ROCE_V2` (2).
    pub gid_type: u32,
    /// The netdev's ifindex (0: none).
    pub ndev_ifindex: u32,
}

fn gid_entry(cfg: &Config, index: c_int) -> Option<ibv_gid_entry> {
    gid_at(cfg, index).map(|gid| ibv_gid_entry {
        gid,
        gid_index: index as u32,
        port_num: 1,
        gid_type: 2,
        ndev_ifindex: 0,
    })
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return EINVAL;
    };
    if port != 1 || flags != 0 || entry.is_null() || entry_size < 32 {
        return EINVAL;
    }
    match gid_entry(&ctx.cfg, index as c_int) {
        Some(e) => {
            // SAFETY: the caller's entry holds entry_size >= 32 bytes.
            unsafe { entry.write(e) };
            0
        }
        None => EINVAL,
    }
}

/// `_ibv_query_gid_table`: the number of entries written, or a negative errno.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return -(EINVAL as isize);
    };
    if flags != 0 || entry_size < 32 || (entries.is_null() && max_entries > 0) {
        return -(EINVAL as isize);
    }
    let len = softroce::verbs::DeviceLimits::default().gid_table_len as usize;
    if max_entries < len {
        return -(EINVAL as isize);
    }
    for i in 0..len {
        if let Some(e) = gid_entry(&ctx.cfg, i as c_int) {
            // SAFETY: the caller's array holds max_entries >= len entries of entry_size bytes.
            unsafe { ((entries as *mut u8).add(i * entry_size) as *mut ibv_gid_entry).write(e) };
        }
    }
    len as isize
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, which ibv_devinfo calls): every GID is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2` = 1). 0, or -1 with errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return -1;
    };
    if port != 1 || ty.is_null() || gid_at(&ctx.cfg, index as c_int).is_none() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: the caller passes a writable enum.
    unsafe { ty.write(1) };
    0
}

/// `ibv_query_pkey`: index 0 holds the default P_Key 0xFFFF (big-endian); 0, or -1.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: checked through the registry.
    if unsafe { ctx_of(c) }.is_none() || port != 1 || index != 0 || pkey.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: the caller passes a writable __be16.
    unsafe { pkey.write(0xffff) };
    0
}

/// `ibv_get_pkey_index`: the index of `pkey` (big-endian) in the table, or -1.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(c: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    // SAFETY: checked through the registry.
    if unsafe { ctx_of(c) }.is_none() || port != 1 || pkey != 0xffff {
        set_errno(EINVAL);
        return -1;
    }
    0
}

/// `ibv_read_sysfs_file`: softroce has no sysfs directory; -1 (ENOENT).
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    set_errno(libc::ENOENT);
    -1
}

// ---------------------------------------------------------------------------------------------
// Protection domains and memory regions

#[repr(C)]
struct Pd {
    c: ibv_pd,
    pd: ProtectionDomain,
    ctx: &'static Ctx,
    /// MRs and QPs in it.
    users: AtomicUsize,
}

fn pd_of(p: *mut ibv_pd) -> Option<&'static Pd> {
    // SAFETY: live PDs are leaked `Pd`s whose first field is the C struct.
    live(Kind::Pd, p).then(|| unsafe { &*(p as *const Pd) })
}

/// `ibv_alloc_pd`: NULL and errno on failure (the first PD or CQ of a context binds its UDP
/// socket: EADDRINUSE when another process holds the address).
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return null_mut();
    };
    let g = match ctx.open() {
        Ok(g) => g,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    let pd = match g.as_ref().map(|x| x.alloc_pd()) {
        Some(Ok(pd)) => pd,
        Some(Err(e)) => {
            set_errno(errno_of(&e));
            return null_mut();
        }
        None => {
            set_errno(libc::ENODEV);
            return null_mut();
        }
    };
    static HANDLES: AtomicUsize = AtomicUsize::new(1);
    let p = Box::leak(Box::new(Pd {
        c: ibv_pd {
            context: c,
            handle: HANDLES.fetch_add(1, Ordering::Relaxed) as u32,
        },
        pd,
        ctx,
        users: AtomicUsize::new(0),
    }));
    ctx.users.fetch_add(1, Ordering::SeqCst);
    let ptr = &mut p.c as *mut ibv_pd;
    track(Kind::Pd, ptr);
    ptr
}

/// `ibv_dealloc_pd`: 0 or an errno value (EBUSY while MRs or QPs use it).
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    let Some(pd) = pd_of(p) else {
        return EINVAL;
    };
    if pd.users.load(Ordering::SeqCst) != 0 {
        return EBUSY;
    }
    if !untrack(Kind::Pd, p) {
        return EINVAL;
    }
    pd.ctx.users.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: leaked in ibv_alloc_pd and no longer registered.
    drop(unsafe { Box::from_raw(p as *mut Pd) });
    0
}

#[repr(C)]
struct Mr {
    c: ibv_mr,
    mr: MemoryRegion,
    pd: &'static Pd,
}

/// Access flags softroce implements; the optional range (relaxed ordering) is ignored as
/// libibverbs ignores it on devices without it.
const ACCESS_KNOWN: c_uint = 0xf;
const ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

unsafe fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    let Some(pdr) = pd_of(pd) else {
        set_errno(EINVAL);
        return null_mut();
    };
    let access = access & !ACCESS_OPTIONAL_RANGE;
    if access & !ACCESS_KNOWN != 0 {
        // MW_BIND, ZERO_BASED, ON_DEMAND, HUGETLB...: not implemented.
        set_errno(EOPNOTSUPP);
        return null_mut();
    }
    if addr.is_null() || len == 0 {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the application registers memory it owns and keeps it until ibv_dereg_mr,
    // which drops the region (and so revokes the engine's access) before it returns: the
    // contract of register_foreign_mr, as of a NIC's DMA.
    let mr = match unsafe {
        pdr.pd.register_foreign_mr(
            addr as *mut u8,
            len,
            iova,
            AccessFlags::from_bits_truncate(access),
        )
    } {
        Ok(mr) => mr,
        Err(e) => {
            set_errno(errno_of(&e));
            return null_mut();
        }
    };
    let m = Box::leak(Box::new(Mr {
        c: ibv_mr {
            context: pdr.c.context,
            pd,
            addr,
            length: len,
            handle: mr.lkey(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        },
        mr,
        pd: pdr,
    }));
    pdr.users.fetch_add(1, Ordering::SeqCst);
    let p = &mut m.c as *mut ibv_mr;
    track(Kind::Mr, p);
    p
}

/// `ibv_reg_mr`: registers the application's `len` bytes at `addr`; NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { reg_mr(pd, addr, len, addr as u64, access as c_uint) }
}

/// `ibv_reg_mr_iova`: as `ibv_reg_mr`, the peer addressing the region from `iova`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { reg_mr(pd, addr, len, iova, access as c_uint) }
}

/// `ibv_reg_mr_iova2`: what the inline `ibv_reg_mr` calls with optional access flags.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { reg_mr(pd, addr, len, iova, access) }
}

/// `ibv_dereg_mr`: 0 or an errno value. Once it returns, the engine no longer touches the
/// memory (operations still using the region find it gone).
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(m: *mut ibv_mr) -> c_int {
    if !untrack(Kind::Mr, m) {
        return EINVAL;
    }
    // SAFETY: was live: a leaked Mr whose first field is the C struct.
    let mr = unsafe { Box::from_raw(m as *mut Mr) };
    mr.pd.users.fetch_sub(1, Ordering::SeqCst);
    drop(mr);
    0
}

// ---------------------------------------------------------------------------------------------
// Completion channels and CQs

/// The engine side of a completion channel: the eventfd and the CQs that have fired.
struct ChanInner {
    fd: c_int,
    fired: Mutex<VecDeque<usize>>,
}

impl Drop for ChanInner {
    fn drop(&mut self) {
        // SAFETY: the fd was opened in ibv_create_comp_channel and is closed only here.
        unsafe { libc::close(self.fd) };
    }
}

#[repr(C)]
struct Channel {
    c: ibv_comp_channel,
    inner: Arc<ChanInner>,
    ctx: &'static Ctx,
    /// CQs attached.
    users: AtomicUsize,
}

/// `ibv_create_comp_channel`: its `fd` is an eventfd that becomes readable when an armed CQ
/// gets a completion (poll/epoll/select work on it). NULL and errno on failure.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return null_mut();
    };
    // SAFETY: no memory preconditions. Semaphore mode: one read per event.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return null_mut();
    }
    let ch = Box::leak(Box::new(Channel {
        c: ibv_comp_channel {
            context: c,
            fd,
            refcnt: 0,
        },
        inner: Arc::new(ChanInner {
            fd,
            fired: Mutex::new(VecDeque::new()),
        }),
        ctx,
        users: AtomicUsize::new(0),
    }));
    ctx.users.fetch_add(1, Ordering::SeqCst);
    let p = &mut ch.c as *mut ibv_comp_channel;
    track(Kind::Channel, p);
    p
}

/// `ibv_destroy_comp_channel`: 0 or an errno value (EBUSY while CQs use it).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if !live(Kind::Channel, ch) {
        return EINVAL;
    }
    // SAFETY: live channels are leaked `Channel`s.
    let chan = unsafe { &*(ch as *const Channel) };
    if chan.users.load(Ordering::SeqCst) != 0 {
        return EBUSY;
    }
    if !untrack(Kind::Channel, ch) {
        return EINVAL;
    }
    chan.ctx.users.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: leaked in ibv_create_comp_channel and no longer registered.
    drop(unsafe { Box::from_raw(ch as *mut Channel) });
    0
}

#[repr(C)]
struct Cq {
    c: ibv_cq,
    cq: CompletionQueue,
    ctx: &'static Ctx,
    armed: Arc<AtomicBool>,
    channel: Option<&'static Channel>,
    /// QPs using it.
    users: AtomicUsize,
}

fn cq_of(p: *mut ibv_cq) -> Option<&'static Cq> {
    // SAFETY: live CQs are leaked `Cq`s whose first field is the C struct.
    live(Kind::Cq, p).then(|| unsafe { &*(p as *const Cq) })
}

/// `ibv_create_cq`: NULL and errno on failure (EINVAL for `cqe` outside 1..=max_cqe or a
/// bad channel).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return null_mut();
    };
    let chan = if channel.is_null() {
        None
    } else if live(Kind::Channel, channel) {
        // SAFETY: live channels are leaked `Channel`s.
        Some(unsafe { &*(channel as *const Channel) })
    } else {
        set_errno(EINVAL);
        return null_mut();
    };
    if cqe < 1 {
        set_errno(EINVAL);
        return null_mut();
    }
    let g = match ctx.open() {
        Ok(g) => g,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    let cq = match g.as_ref().map(|x| x.create_cq(cqe as usize)) {
        Some(Ok(cq)) => cq,
        Some(Err(e)) => {
            set_errno(errno_of(&e));
            return null_mut();
        }
        None => {
            set_errno(libc::ENODEV);
            return null_mut();
        }
    };
    drop(g);
    let armed = Arc::new(AtomicBool::new(false));
    let b = Box::leak(Box::new(Cq {
        c: ibv_cq {
            context: c,
            channel,
            cq_context,
            handle: 0,
            cqe,
            mutex: mutex_init(),
            cond: cond_init(),
            comp_events_completed: 0,
            async_events_completed: 0,
        },
        cq,
        ctx,
        armed: Arc::clone(&armed),
        channel: chan,
        users: AtomicUsize::new(0),
    }));
    let p = &mut b.c as *mut ibv_cq;
    if let Some(ch) = chan {
        ch.users.fetch_add(1, Ordering::SeqCst);
        let inner = Arc::clone(&ch.inner);
        let cq_addr = p as usize;
        b.cq.set_event_hook(Box::new(move || {
            if armed.swap(false, Ordering::AcqRel) {
                inner
                    .fired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back(cq_addr);
                let one: u64 = 1;
                // SAFETY: writing 8 bytes from a local to our eventfd (kept open by `inner`).
                unsafe { libc::write(inner.fd, &one as *const u64 as *const c_void, 8) };
            }
        }));
    }
    ctx.users.fetch_add(1, Ordering::SeqCst);
    track(Kind::Cq, p);
    p
}

/// `ibv_destroy_cq`: 0 or an errno value (EBUSY while QPs use it).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(p: *mut ibv_cq) -> c_int {
    let Some(cq) = cq_of(p) else {
        return EINVAL;
    };
    if cq.users.load(Ordering::SeqCst) != 0 {
        return EBUSY;
    }
    if !untrack(Kind::Cq, p) {
        return EINVAL;
    }
    if let Some(ch) = cq.channel {
        ch.users.fetch_sub(1, Ordering::SeqCst);
        // Events of this CQ not yet read stay counted in the eventfd; drop their queue entries.
        ch.inner
            .fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&a| a != p as usize);
    }
    cq.ctx.users.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: leaked in ibv_create_cq and no longer registered.
    drop(unsafe { Box::from_raw(p as *mut Cq) });
    0
}

/// `ibv_resize_cq`: not implemented (EOPNOTSUPP); the CQ is unchanged.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(p: *mut ibv_cq, _cqe: c_int) -> c_int {
    if cq_of(p).is_none() {
        return EINVAL;
    }
    EOPNOTSUPP
}

/// The `req_notify_cq` op: arms the CQ; its next completion fires the channel, if any. Solicited-only
/// arming fires on any completion (a superset of what it asks for, as the verbs allow for
/// spurious events).
unsafe extern "C" fn op_req_notify_cq(p: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    if p.is_null() {
        return EINVAL;
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (crate doc): no
    // registry lock on the per-event path.
    let cq = unsafe { &*(p as *const Cq) };
    // Without a channel the arming has no one to tell; rxe accepts it all the same.
    cq.armed.store(true, Ordering::Release);
    0
}

/// `ibv_get_cq_event`: waits (unless the fd is non-blocking) for an event; 0, or -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    if !live(Kind::Channel, ch) || cq_out.is_null() || ctx_out.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: live channels are leaked `Channel`s.
    let chan = unsafe { &*(ch as *const Channel) };
    loop {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a local.
        let n = unsafe { libc::read(chan.inner.fd, &mut v as *mut u64 as *mut c_void, 8) };
        if n != 8 {
            return -1; // errno from read (EAGAIN on a non-blocking fd)
        }
        let next = chan
            .inner
            .fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        // An event of a CQ destroyed since has no entry: wait for the next.
        if let Some(a) = next {
            let p = a as *mut ibv_cq;
            // SAFETY: the entry names a live CQ (destroy removes its entries); the caller's
            // out-pointers were checked non-null.
            unsafe {
                *cq_out = p;
                *ctx_out = (*p).cq_context;
            }
            return 0;
        }
    }
}

/// `ibv_ack_cq_events`.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(p: *mut ibv_cq, nevents: c_uint) {
    if let Some(cq) = cq_of(p) {
        let c = &cq.c as *const ibv_cq as *mut ibv_cq;
        // SAFETY: a live CQ; the counter is only written here (the application acks from one
        // thread per CQ, as libibverbs requires under its own mutex).
        unsafe { (*c).comp_events_completed = (*c).comp_events_completed.wrapping_add(nevents) };
    }
}

fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let mut flags = 0;
    if w.grh {
        flags |= 1; // IBV_WC_GRH
    }
    if w.imm_data.is_some() {
        flags |= 2; // IBV_WC_WITH_IMM
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_uint,
        opcode: w.opcode as c_uint,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: w.imm_data.unwrap_or(0).to_be(),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        // The annex A17 L3 type in mlx5's place (WorkCompletion::sl).
        sl: w.sl(),
        dlid_path_bits: 0,
    }
}

/// The `poll_cq` op: completions moved, or -1 (a bad CQ, or one that overflowed).
unsafe extern "C" fn op_poll_cq(p: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if p.is_null() || n < 0 || (wc.is_null() && n > 0) {
        return -1;
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (see the crate doc).
    let cq = unsafe { &*(p as *const Cq) };
    let mut buf = [WorkCompletion::default(); 16];
    let mut done = 0usize;
    while done < n as usize {
        let want = (n as usize - done).min(buf.len());
        let got = match cq.cq.poll(&mut buf[..want]) {
            Ok(g) => g,
            Err(_) => return -1,
        };
        for (i, w) in buf[..got].iter().enumerate() {
            // SAFETY: the caller's array holds n entries; done + i < n.
            unsafe { wc.add(done + i).write(wc_to_c(w)) };
        }
        done += got;
        if got < want {
            break;
        }
    }
    done as c_int
}

// ---------------------------------------------------------------------------------------------
// Queue pairs

#[repr(C)]
struct Qp {
    c: ibv_qp,
    qp: QueuePair,
    pd: &'static Pd,
    send_cq: &'static Cq,
    recv_cq: &'static Cq,
    srq: Option<&'static Srq>,
    /// A UD QP: its sends carry `wr.ud`.
    ud: bool,
    cap: ibv_qp_cap,
    sq_sig_all: c_int,
    /// Where inline data is gathered (None without `max_inline_data`).
    inline: Option<Mutex<InlineScratch>>,
}

/// A registered buffer of the shim's own into which a post gathers inline data: inline SGEs
/// are plain process addresses whose lkey means nothing (as with any provider), while softroce
/// reads a WR's data out of a region. The transport copies inline data when the WR is posted,
/// so one buffer per QP, held under its mutex for the post, is enough.
struct InlineScratch {
    /// Registered over `buf`; dropped (revoked) before `buf` is freed.
    mr: Option<MemoryRegion>,
    buf: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned by the scratch and only touched under its mutex.
unsafe impl Send for InlineScratch {}

impl InlineScratch {
    fn new(pd: &ProtectionDomain, len: usize) -> Result<InlineScratch, c_int> {
        let buf = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        let mut s = InlineScratch { mr: None, buf, len };
        // SAFETY: `buf` lives until Drop, which drops the region (revoking it) first.
        let mr = unsafe { pd.register_foreign_mr(buf, len, buf as u64, AccessFlags::LOCAL_WRITE) }
            .map_err(|e| errno_of(&e))?;
        s.mr = Some(mr);
        Ok(s)
    }

    /// Copies the bytes the SGEs point at into the buffer; returns the one SGE that covers
    /// them, or EINVAL when they exceed it.
    unsafe fn gather(&mut self, list: &[Sge]) -> Result<Sge, c_int> {
        let mr = self.mr.as_ref().ok_or(EINVAL)?;
        let mut at = 0usize;
        for s in list {
            let n = s.length as usize;
            if n > self.len - at {
                return Err(EINVAL);
            }
            if n > 0 {
                // SAFETY: inline SGEs name `length` readable bytes at `addr` in this process
                // (the verbs contract for IBV_SEND_INLINE); the destination is in bounds.
                unsafe { ptr::copy_nonoverlapping(s.addr as *const u8, self.buf.add(at), n) };
            }
            at += n;
        }
        Ok(Sge {
            addr: mr.addr(),
            length: at as u32,
            lkey: mr.lkey(),
        })
    }
}

impl Drop for InlineScratch {
    fn drop(&mut self) {
        drop(self.mr.take());
        // SAFETY: allocated in `new` as a boxed slice of `len` bytes; the region over it is
        // gone, so nothing else refers to it.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.buf, self.len)) });
    }
}

fn qp_of(p: *mut ibv_qp) -> Option<&'static Qp> {
    // SAFETY: live QPs are leaked `Qp`s whose first field is the C struct.
    live(Kind::Qp, p).then(|| unsafe { &*(p as *const Qp) })
}

fn state_to_c(s: QpState) -> c_uint {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

fn state_from_c(v: c_uint) -> Option<QpState> {
    Some(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

/// `ibv_create_qp`: NULL and errno on failure (EINVAL for bad CQs or capacities, EOPNOTSUPP
/// for a QP type softroce does not run, as rxe for types it lacks).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    let Some(pdr) = pd_of(pd) else {
        set_errno(EINVAL);
        return null_mut();
    };
    if init.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller passes a readable and writable ibv_qp_init_attr.
    let ia = unsafe { &mut *init };
    let (Some(scq), Some(rcq)) = (cq_of(ia.send_cq), cq_of(ia.recv_cq)) else {
        set_errno(EINVAL);
        return null_mut();
    };
    let srq = if ia.srq.is_null() {
        None
    } else {
        match srq_of(ia.srq as *mut ibv_srq) {
            Some(x) => Some(x),
            None => {
                set_errno(EINVAL);
                return null_mut();
            }
        }
    };
    let qp_type = match ia.qp_type {
        2 => QpType::Rc,
        3 => QpType::Uc,
        4 => QpType::Ud,
        _ => {
            set_errno(EOPNOTSUPP);
            return null_mut();
        }
    };
    let cap = QpCap {
        max_send_wr: ia.cap.max_send_wr,
        max_recv_wr: ia.cap.max_recv_wr,
        max_send_sge: ia.cap.max_send_sge,
        max_recv_sge: ia.cap.max_recv_sge,
        max_inline_data: ia.cap.max_inline_data,
    };
    let init_attr = QpInitAttr {
        send_cq: &scq.cq,
        recv_cq: &rcq.cq,
        cap,
        qp_type,
        sq_sig_all: ia.sq_sig_all != 0,
    };
    let created = match srq {
        Some(x) => pdr.pd.create_qp_with_srq(&init_attr, &x.srq),
        None => pdr.pd.create_qp(&init_attr),
    };
    let qp = match created {
        Ok(qp) => qp,
        Err(VerbsError::InvalidAttribute {
            attr: "qp_type", ..
        }) => {
            set_errno(EOPNOTSUPP);
            return null_mut();
        }
        Err(e) => {
            set_errno(errno_of(&e));
            return null_mut();
        }
    };
    let qp_num = qp.qp_num();
    let inline = if ia.cap.max_inline_data > 0 {
        match InlineScratch::new(&pdr.pd, ia.cap.max_inline_data as usize) {
            Ok(x) => Some(Mutex::new(x)),
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        }
    } else {
        None
    };
    let q = Box::leak(Box::new(Qp {
        c: ibv_qp {
            context: pdr.c.context,
            qp_context: ia.qp_context,
            pd,
            send_cq: ia.send_cq,
            recv_cq: ia.recv_cq,
            srq: ia.srq,
            handle: qp_num,
            qp_num,
            state: 0,
            qp_type: ia.qp_type,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        },
        qp,
        pd: pdr,
        send_cq: scq,
        recv_cq: rcq,
        srq,
        ud: qp_type == QpType::Ud,
        cap: ia.cap,
        sq_sig_all: ia.sq_sig_all,
        inline,
    }));
    pdr.users.fetch_add(1, Ordering::SeqCst);
    scq.users.fetch_add(1, Ordering::SeqCst);
    rcq.users.fetch_add(1, Ordering::SeqCst);
    if let Some(x) = srq {
        x.users.fetch_add(1, Ordering::SeqCst);
    }
    let p = &mut q.c as *mut ibv_qp;
    track(Kind::Qp, p);
    p
}

/// `ibv_destroy_qp`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(p: *mut ibv_qp) -> c_int {
    if !untrack(Kind::Qp, p) {
        return EINVAL;
    }
    // SAFETY: was live: a leaked Qp.
    let q = unsafe { Box::from_raw(p as *mut Qp) };
    q.pd.users.fetch_sub(1, Ordering::SeqCst);
    q.send_cq.users.fetch_sub(1, Ordering::SeqCst);
    q.recv_cq.users.fetch_sub(1, Ordering::SeqCst);
    if let Some(x) = q.srq {
        x.users.fetch_sub(1, Ordering::SeqCst);
    }
    drop(q);
    0
}

fn attr_from_c(a: &ibv_qp_attr, mask: QpAttrMask) -> Result<QpAttr, c_int> {
    let mut out = QpAttr::default();
    if mask.contains(QpAttrMask::STATE) {
        out.qp_state = state_from_c(a.qp_state).ok_or(EINVAL)?;
    }
    if mask.contains(QpAttrMask::CUR_STATE) {
        out.cur_qp_state = state_from_c(a.cur_qp_state).ok_or(EINVAL)?;
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        out.path_mtu = Mtu::from_enum(a.path_mtu).ok_or(EINVAL)?;
    }
    if mask.contains(QpAttrMask::AV) {
        // RoCE needs the GRH (the kernel refuses an address vector without it: EINVAL).
        if a.ah_attr.is_global == 0 {
            return Err(EINVAL);
        }
        if mask.contains(QpAttrMask::PORT) && a.port_num != 1 {
            return Err(EINVAL);
        }
        out.ah_attr = AhAttr {
            dgid: Gid(a.ah_attr.grh.dgid),
            sgid_index: a.ah_attr.grh.sgid_index,
            hop_limit: a.ah_attr.grh.hop_limit,
            traffic_class: a.ah_attr.grh.traffic_class,
            flow_label: a.ah_attr.grh.flow_label,
            sl: a.ah_attr.sl,
        };
    }
    if mask.contains(QpAttrMask::PORT) && a.port_num != 1 {
        return Err(EINVAL);
    }
    out.qkey = a.qkey;
    out.rq_psn = a.rq_psn;
    out.sq_psn = a.sq_psn;
    out.dest_qp_num = a.dest_qp_num;
    out.qp_access_flags = AccessFlags::from_bits_truncate(a.qp_access_flags);
    out.cap = QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    out.pkey_index = a.pkey_index;
    out.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    out.max_rd_atomic = a.max_rd_atomic;
    out.max_dest_rd_atomic = a.max_dest_rd_atomic;
    out.min_rnr_timer = a.min_rnr_timer;
    out.port_num = a.port_num;
    out.timeout = a.timeout;
    out.retry_cnt = a.retry_cnt;
    out.rnr_retry = a.rnr_retry;
    Ok(out)
}

/// Attribute mask bits softroce knows (IBV_QP_STATE .. IBV_QP_DEST_QPN).
const MASK_KNOWN: c_int = (1 << 21) - 1;

/// `ibv_modify_qp`: 0 or an errno value (EINVAL for a refused transition or attribute, as
/// the kernel's ib_modify_qp_is_ok).
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let Some(q) = qp_of(p) else {
        return EINVAL;
    };
    if attr.is_null() || mask & !MASK_KNOWN != 0 {
        return EINVAL;
    }
    let mask = QpAttrMask::from_bits_truncate(mask as u32);
    // SAFETY: the caller passes a readable ibv_qp_attr.
    let a = match attr_from_c(unsafe { &*attr }, mask) {
        Ok(a) => a,
        Err(e) => return e,
    };
    if let Err(e) = q.qp.modify(&a, mask) {
        return errno_of(&e);
    }
    let c = &q.c as *const ibv_qp as *mut ibv_qp;
    // SAFETY: a live QP; `state` mirrors the QP's state for the application to read.
    unsafe { (*c).state = state_to_c(q.qp.query().qp_state) };
    0
}

/// `ibv_query_qp`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    p: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    let Some(q) = qp_of(p) else {
        return EINVAL;
    };
    if attr.is_null() || init.is_null() {
        return EINVAL;
    }
    let a = q.qp.query();
    let cap = ibv_qp_cap {
        max_send_wr: a.cap.max_send_wr.max(q.cap.max_send_wr),
        max_recv_wr: a.cap.max_recv_wr.max(q.cap.max_recv_wr),
        max_send_sge: a.cap.max_send_sge.max(q.cap.max_send_sge),
        max_recv_sge: a.cap.max_recv_sge.max(q.cap.max_recv_sge),
        max_inline_data: a.cap.max_inline_data.max(q.cap.max_inline_data),
    };
    let out = ibv_qp_attr {
        qp_state: state_to_c(a.qp_state),
        cur_qp_state: state_to_c(a.qp_state),
        path_mtu: a.path_mtu as c_uint,
        path_mig_state: 0, // IBV_MIG_MIGRATED
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: a.ah_attr.dgid.0,
                flow_label: a.ah_attr.flow_label,
                sgid_index: a.ah_attr.sgid_index,
                hop_limit: a.ah_attr.hop_limit,
                traffic_class: a.ah_attr.traffic_class,
            },
            dlid: 0,
            sl: a.ah_attr.sl,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        },
        alt_ah_attr: ibv_ah_attr::default(),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: 1,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    };
    // SAFETY: the caller passes writable structs.
    unsafe {
        attr.write(out);
        let ia = &mut *init;
        ia.qp_context = q.c.qp_context;
        ia.send_cq = q.c.send_cq;
        ia.recv_cq = q.c.recv_cq;
        ia.srq = q.c.srq;
        ia.cap = cap;
        ia.qp_type = q.c.qp_type;
        ia.sq_sig_all = q.sq_sig_all;
    }
    0
}

/// `ibv_qp_to_qp_ex`: NULL, as for any QP not created with `ibv_create_qp_ex`.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    null_mut()
}

const MAX_SGE: usize = 32;

/// Copies a C SGE list into `buf`; EINVAL for a negative or too long list.
unsafe fn sges(list: *const ibv_sge, n: c_int, buf: &mut [Sge; MAX_SGE]) -> Result<&[Sge], c_int> {
    if n < 0 || n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    for (i, slot) in buf.iter_mut().enumerate().take(n as usize) {
        // SAFETY: the caller's list holds n SGEs.
        let s = unsafe { list.add(i).read() };
        *slot = Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok(&buf[..n as usize])
}

fn wr_opcode(wr: &ibv_send_wr) -> Result<WrOpcode, c_int> {
    let imm = u32::from_be(wr.imm_data);
    let remote_addr = wr.wr.remote_addr;
    Ok(match wr.opcode {
        0 => WrOpcode::RdmaWrite {
            remote_addr,
            rkey: wr.rdma_rkey(),
        },
        1 => WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey: wr.rdma_rkey(),
            imm,
        },
        2 => WrOpcode::Send,
        3 => WrOpcode::SendWithImm { imm },
        4 => WrOpcode::RdmaRead {
            remote_addr,
            rkey: wr.rdma_rkey(),
        },
        5 => WrOpcode::AtomicCmpSwap {
            remote_addr,
            rkey: wr.wr.rkey,
            compare: wr.wr.compare_add,
            swap: wr.wr.swap,
        },
        6 => WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey: wr.wr.rkey,
            add: wr.wr.compare_add,
        },
        _ => return Err(EINVAL),
    })
}

/// The `post_send` op: 0, or an errno value with `*bad_wr` the first WR not posted.
unsafe extern "C" fn op_post_send(
    p: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    if p.is_null() {
        return EINVAL;
    }
    // SAFETY: the data path trusts its handle (crate doc).
    let q = unsafe { &*(p as *const Qp) };
    let mut buf = [Sge::default(); MAX_SGE];
    while !wr.is_null() {
        // SAFETY: the caller's list is a valid linked list of WRs.
        let w = unsafe { &*wr };
        let res = (|| {
            // SAFETY: the WR's sg_list holds num_sge SGEs.
            let mut sg_list = unsafe { sges(w.sg_list, w.num_sge, &mut buf)? };
            let opcode = wr_opcode(w)?;
            let flags = SendFlags::from_bits_truncate(w.send_flags);
            let inline_op = matches!(w.opcode, 0..=3); // WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM
            let mut gathered = [Sge::default(); 1];
            let mut guard = None;
            if flags.contains(SendFlags::INLINE) && inline_op {
                let mut g = q
                    .inline
                    .as_ref()
                    .ok_or(EINVAL)?
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // SAFETY: the application's inline SGEs (see InlineScratch::gather).
                gathered[0] = unsafe { g.gather(sg_list)? };
                guard = Some(g);
                sg_list = &gathered[..];
            }
            let one = SendWr {
                wr_id: w.wr_id,
                sg_list,
                opcode,
                send_flags: flags,
            };
            // The scratch stays locked until the transport has copied the data (in the post).
            let _inline = guard;
            if q.ud {
                let ah_ptr = w.ud_ah();
                if ah_ptr.is_null() {
                    return Err(EINVAL);
                }
                // SAFETY: the data path trusts the WR's address handle as providers do (crate
                // doc): no registry lock per datagram.
                let ah = unsafe { &*(ah_ptr as *const Ah) };
                let ud = UdSendWr {
                    wr: one,
                    ah: &ah.ah,
                    remote_qpn: w.ud_remote_qpn(),
                    remote_qkey: w.ud_remote_qkey(),
                };
                return q
                    .qp
                    .post_send_ud(std::slice::from_ref(&ud))
                    .map_err(|e| errno_of(&e.error));
            }
            q.qp.post_send(std::slice::from_ref(&one))
                .map_err(|e| errno_of(&e.error))
        })();
        if let Err(e) = res {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable pointer.
                unsafe { *bad_wr = wr };
            }
            return e;
        }
        wr = w.next;
    }
    0
}

/// The `post_recv` op: 0, or an errno value with `*bad_wr` the first WR not posted.
unsafe extern "C" fn op_post_recv(
    p: *mut ibv_qp,
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if p.is_null() {
        return EINVAL;
    }
    // SAFETY: the data path trusts its handle (crate doc).
    let q = unsafe { &*(p as *const Qp) };
    let mut buf = [Sge::default(); MAX_SGE];
    while !wr.is_null() {
        // SAFETY: the caller's list is a valid linked list of WRs.
        let w = unsafe { &*wr };
        let res = (|| {
            // SAFETY: the WR's sg_list holds num_sge SGEs.
            let sg_list = unsafe { sges(w.sg_list, w.num_sge, &mut buf)? };
            let one = RecvWr {
                wr_id: w.wr_id,
                sg_list,
            };
            q.qp.post_recv(std::slice::from_ref(&one))
                .map_err(|e| errno_of(&e.error))
        })();
        if let Err(e) = res {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable pointer.
                unsafe { *bad_wr = wr };
            }
            return e;
        }
        wr = w.next;
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Async events, fork, unsupported objects

/// `ibv_get_async_event`: softroce raises no asynchronous events yet, so this blocks on the
/// context's `async_fd` like a quiet device (or fails EAGAIN if the application made it
/// non-blocking); -1 and errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    c: *mut ibv_context,
    _ev: *mut ibv_async_event,
) -> c_int {
    // SAFETY: checked through the registry.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        set_errno(EINVAL);
        return -1;
    };
    let mut v: u64 = 0;
    // SAFETY: reading 8 bytes into a local.
    unsafe {
        libc::read(
            ctx.vctx.context.async_fd,
            &mut v as *mut u64 as *mut c_void,
            8,
        )
    };
    // Nothing ever writes the eventfd; a read that returns was interrupted or non-blocking.
    -1
}

/// `ibv_ack_async_event`: nothing to acknowledge.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_ev: *mut ibv_async_event) {}

/// `ibv_fork_init`: softroce pins no pages, so fork is safe without it; 0.
#[no_mangle]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (2).
#[no_mangle]
pub unsafe extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

// ---------------------------------------------------------------------------------------------
// Strings and rates

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_uint) -> *const c_char {
    const NAMES: [&CStr; 23] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
    ];
    let _ = WcStatus::Success; // the values of WcStatus are these indices
    match NAMES.get(status as usize) {
        Some(s) => s.as_ptr(),
        None if status == 23 => cstr!("TM Rendezvous error"),
        None => cstr!("unknown"),
    }
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_uint) -> *const c_char {
    match state {
        0 => cstr!("PORT_NOP"),
        1 => cstr!("PORT_DOWN"),
        2 => cstr!("PORT_INIT"),
        3 => cstr!("PORT_ARMED"),
        4 => cstr!("PORT_ACTIVE"),
        5 => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    match t {
        1 => cstr!("InfiniBand channel adapter"),
        2 => cstr!("InfiniBand switch"),
        3 => cstr!("InfiniBand router"),
        4 => cstr!("iWARP NIC"),
        5 => cstr!("usNIC"),
        6 => cstr!("usNIC UDP"),
        7 => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(e: c_uint) -> *const c_char {
    const NAMES: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    NAMES
        .get(e as usize)
        .map_or(cstr!("unknown"), |s| s.as_ptr())
}

/// (enum ibv_rate, multiple of 2.5 Gb/s, Mb/s) for the rates of `enum ibv_rate`.
const RATES: [(c_int, c_int, c_int); 21] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (7, 12, 30000),
    (8, 16, 40000),
    (9, 24, 60000),
    (4, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25000),
    (16, 40, 100000),
    (17, 80, 200000),
    (18, 120, 300000),
    (19, 20, 28000),
    (20, 20, 50000),
    (21, 160, 400000),
    (22, 240, 600000),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s (0 for unknown rates).
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(0, |r| r.1)
}

/// `mult_to_ibv_rate`: the inverse of `ibv_rate_to_mult` (IBV_RATE_MAX = 0 if none).
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES[..9].iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(0, |r| r.2)
}

/// `mbps_to_ibv_rate`.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

// ---------------------------------------------------------------------------------------------
// Shared receive queues

#[repr(C)]
struct Srq {
    c: ibv_srq,
    srq: SharedReceiveQueue,
    pd: &'static Pd,
    /// QPs using it.
    users: AtomicUsize,
}

fn srq_of(p: *mut ibv_srq) -> Option<&'static Srq> {
    // SAFETY: live SRQs are leaked `Srq`s whose first field is the C struct.
    live(Kind::Srq, p).then(|| unsafe { &*(p as *const Srq) })
}

/// `ibv_create_srq`: NULL and errno on failure (EINVAL for sizes beyond the device's).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    let Some(pdr) = pd_of(pd) else {
        set_errno(EINVAL);
        return null_mut();
    };
    if init.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller passes a readable and writable ibv_srq_init_attr.
    let ia = unsafe { &mut *init };
    let attr = SrqAttr {
        max_wr: ia.attr.max_wr,
        max_sge: ia.attr.max_sge,
        srq_limit: ia.attr.srq_limit,
    };
    let srq = match pdr.pd.create_srq(&attr) {
        Ok(x) => x,
        Err(e) => {
            set_errno(errno_of(&e));
            return null_mut();
        }
    };
    let b = Box::leak(Box::new(Srq {
        c: ibv_srq {
            context: pdr.c.context,
            srq_context: ia.srq_context,
            pd,
            handle: 0,
            mutex: mutex_init(),
            cond: cond_init(),
            events_completed: 0,
        },
        srq,
        pd: pdr,
        users: AtomicUsize::new(0),
    }));
    pdr.users.fetch_add(1, Ordering::SeqCst);
    let p = &mut b.c as *mut ibv_srq;
    track(Kind::Srq, p);
    p
}

/// `ibv_modify_srq`: `IBV_SRQ_MAX_WR` (1) and/or `IBV_SRQ_LIMIT` (2); 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    p: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let Some(x) = srq_of(p) else {
        return EINVAL;
    };
    if attr.is_null() || mask & !3 != 0 {
        return EINVAL;
    }
    // SAFETY: the caller passes a readable ibv_srq_attr.
    let a = unsafe { *attr };
    let mut m = SrqAttrMask(0);
    if mask & 1 != 0 {
        m = SrqAttrMask(m.0 | SrqAttrMask::MAX_WR.0);
    }
    if mask & 2 != 0 {
        m = SrqAttrMask(m.0 | SrqAttrMask::LIMIT.0);
    }
    let attr = SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    };
    match x.srq.modify(&attr, m) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `ibv_query_srq`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(p: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let Some(x) = srq_of(p) else {
        return EINVAL;
    };
    if attr.is_null() {
        return EINVAL;
    }
    let a = x.srq.query();
    // SAFETY: the caller passes a writable ibv_srq_attr.
    unsafe {
        attr.write(ibv_srq_attr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        })
    };
    0
}

/// `ibv_destroy_srq`: 0 or an errno value (EBUSY while QPs use it).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(p: *mut ibv_srq) -> c_int {
    let Some(x) = srq_of(p) else {
        return EINVAL;
    };
    if x.users.load(Ordering::SeqCst) != 0 {
        return EBUSY;
    }
    if !untrack(Kind::Srq, p) {
        return EINVAL;
    }
    x.pd.users.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: leaked in ibv_create_srq and no longer registered.
    drop(unsafe { Box::from_raw(p as *mut Srq) });
    0
}

/// The `post_srq_recv` op: 0, or an errno value with `*bad_wr` the first WR not posted.
unsafe extern "C" fn op_post_srq_recv(
    p: *mut c_void,
    mut wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if p.is_null() {
        if !bad_wr.is_null() {
            // SAFETY: the caller passes a writable pointer.
            unsafe { *bad_wr = wr };
        }
        return EINVAL;
    }
    // SAFETY: the data path trusts its handle as rdma-core's providers do (crate doc).
    let x = unsafe { &*(p as *const Srq) };
    let mut buf = [Sge::default(); MAX_SGE];
    while !wr.is_null() {
        // SAFETY: the caller's list is a valid linked list of WRs.
        let w = unsafe { &*wr };
        let res = (|| {
            // SAFETY: the WR's sg_list holds num_sge SGEs.
            let sg_list = unsafe { sges(w.sg_list, w.num_sge, &mut buf)? };
            let one = RecvWr {
                wr_id: w.wr_id,
                sg_list,
            };
            x.srq
                .post_recv(std::slice::from_ref(&one))
                .map_err(|e| errno_of(&e.error))
        })();
        if let Err(e) = res {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable pointer.
                unsafe { *bad_wr = wr };
            }
            return e;
        }
        wr = w.next;
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Address handles (UD)

#[repr(C)]
struct Ah {
    c: ibv_ah,
    ah: AddressHandle,
    pd: &'static Pd,
}

/// `ibv_create_ah`: NULL and errno on failure (EINVAL without a GRH, which RoCE needs, or for
/// a GID of another family or outside the table).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let Some(pdr) = pd_of(pd) else {
        set_errno(EINVAL);
        return null_mut();
    };
    if attr.is_null() {
        set_errno(EINVAL);
        return null_mut();
    }
    // SAFETY: the caller passes a readable ibv_ah_attr.
    let a = unsafe { *attr };
    if a.is_global == 0 || (a.port_num != 1 && a.port_num != 0) {
        set_errno(EINVAL);
        return null_mut();
    }
    let ah = match pdr.pd.create_ah(&AhAttr {
        dgid: Gid(a.grh.dgid),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
    }) {
        Ok(x) => x,
        Err(e) => {
            set_errno(errno_of(&e));
            return null_mut();
        }
    };
    let b = Box::leak(Box::new(Ah {
        c: ibv_ah {
            context: pdr.c.context,
            pd,
            handle: 0,
        },
        ah,
        pd: pdr,
    }));
    pdr.users.fetch_add(1, Ordering::SeqCst);
    let p = &mut b.c as *mut ibv_ah;
    track(Kind::Ah, p);
    p
}

/// `ibv_destroy_ah`: 0 or an errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(p: *mut ibv_ah) -> c_int {
    if !untrack(Kind::Ah, p) {
        return EINVAL;
    }
    // SAFETY: was live: a leaked Ah.
    let b = unsafe { Box::from_raw(p as *mut Ah) };
    b.pd.users.fetch_sub(1, Ordering::SeqCst);
    drop(b);
    0
}

/// `ibv_init_ah_from_wc`: the address vector back to the sender of a received datagram (its
/// GID from the GRH area, our GID index 1, hop limit 0xFF as libibverbs sets); 0, or -1 and
/// errno (EINVAL without a GRH).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: checked through the registry.
    if unsafe { ctx_of(c) }.is_none()
        || port != 1
        || wc.is_null()
        || grh.is_null()
        || attr.is_null()
    {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: the caller passes a completion and its receive buffer's GRH area.
    let (w, g) = unsafe { (*wc, *grh) };
    if w.wc_flags & 1 == 0 {
        set_errno(EINVAL);
        return -1;
    }
    let flow = u32::from_be(g.version_tclass_flow);
    let a = ibv_ah_attr {
        grh: ibv_global_route {
            dgid: g.sgid,
            flow_label: flow & 0xf_ffff,
            sgid_index: 1,
            hop_limit: 0xff,
            traffic_class: (flow >> 20) as u8,
        },
        dlid: 0,
        sl: w.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    };
    // SAFETY: the caller passes a writable ibv_ah_attr.
    unsafe { attr.write(a) };
    0
}

/// `ibv_create_ah_from_wc`: `ibv_init_ah_from_wc` then `ibv_create_ah`; NULL and errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    let Some(pdr) = pd_of(pd) else {
        set_errno(EINVAL);
        return null_mut();
    };
    let mut a = ibv_ah_attr::default();
    // SAFETY: forwarded; `a` is a local.
    if unsafe { ibv_init_ah_from_wc(pdr.c.context, port, wc, grh, &mut a) } != 0 {
        return null_mut();
    }
    // SAFETY: `a` is a local.
    unsafe { ibv_create_ah(pd, &mut a) }
}
