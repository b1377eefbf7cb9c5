//! The devices as software outside libibverbs looks for them, for programs under `softroce
//! run`: `/dev/infiniband/<dev_name>` (UCX skips a device whose node is not a character device
//! it can open) and the sysfs tree of an rxe device on Linux 6.1 (`/sys/class/infiniband/...`,
//! read by UCX, rdma-core's tests, librdmacm users, libfabric), one of each per `--bind`.
//!
//! Mechanism: before running the program, `softroce run` moves itself into a new mount
//! namespace (and, when not root, a new user namespace in which it maps its own uid and gid
//! to themselves, which gives it the right to mount there and nothing beyond it). It makes
//! every mount private, so nothing it mounts reaches the host, and lays tmpfs over
//! `/dev`, `/sys/class` and `/sys/devices/virtual` in which each existing entry is bound back
//! and the device's entries are added. A program outside `softroce run` sees the real `/dev`
//! and `/sys`, which are never written. Chosen over an `LD_PRELOAD` interposer on
//! open/stat/opendir because glibc's own calls (fopen, realpath, opendir, the `*at` and
//! statx families) and programs that make system calls themselves bypass an interposer,
//! while the namespace shows the same files to every path lookup of every library.
//!
//! Each device's entry names its interface under `device/net/<ifname>` (rdma-core's tests find
//! the address to bind there), and `ports/1/hw_counters` holds its live counters, which
//! `softroce run` rewrites every [`HW_COUNTERS_PERIOD`] from its programs' stat sockets
//! (spec-notes/device-view.md, rules 4 and 5).
//!
//! `/dev/infiniband/<dev_name>` is `/dev/null` bound there: a character device that stat,
//! access and open accept; the shim never opens it (it talks UDP). `/dev/infiniband/rdma_cm`
//! is not laid: the real librdmacm (which UCX's rdmacm transport loads) would open it and wait
//! on ucma commands that nothing answers (measured: UCX 1.13's `ucx_info -d` hung in
//! rdma_create_event_channel); without it librdmacm reports ENODEV, as on a host without the
//! rdma_ucm module.

use std::ffi::{CString, OsStr};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The InfiniBand name the shim reports for device `index` (`ibv_get_device_name`):
/// `softroce0` for the first `--bind`, `softroce1` for the second, ...
pub fn ibdev(index: usize) -> String {
    format!("softroce{index}")
}

/// The name of device `index`'s uverbs node (`ibv_device.dev_name`), under `/dev/infiniband`
/// and `/sys/class/infiniband_verbs`.
pub fn uverbs(index: usize) -> String {
    format!("uverbs_{}", ibdev(index))
}

/// GID table entries the shim reports (`DeviceLimits::gid_table_len`).
const GID_TABLE_LEN: usize = 2;

/// What the generated tree says about one device; the shim answers the same from the same
/// address and MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceView {
    /// Which device it is (`softroce<index>`, the order of `--bind`).
    pub index: usize,
    /// The device's address (`--bind`).
    pub ip: IpAddr,
    /// The netdev that owns that address (`gid_attrs/ndevs`, rxe's `parent`), if any.
    pub ndev: Option<String>,
    /// `rdev` of the character device bound at the uverbs node (its sysfs `dev`).
    pub rdev: u64,
}

/// One entry of the generated tree, by path relative to its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir(String),
    /// A read-only file and its contents.
    File(String, String),
    /// A symbolic link and its target.
    Link(String, String),
}

/// The node GUID as the shim reports it (`ibv_query_device`, `ibv_get_device_guid`): the
/// EUI-64 of the locally administered MAC 02:00:a:b:c:d from the address's last four bytes.
pub fn node_guid(ip: IpAddr) -> [u8; 8] {
    let o = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    [0x00, 0x00, o[0], 0xff, 0xfe, o[1], o[2], o[3]]
}

/// The GID of the address, as the shim's every GID table entry (IPv4-mapped for IPv4).
pub fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Big-endian bytes as sysfs prints GUIDs and GIDs: groups of four hex digits joined by ':'.
fn hex_groups(b: &[u8]) -> String {
    let mut s = String::new();
    for (i, pair) in b.chunks(2).enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{:02x}{:02x}", pair[0], pair[1]);
    }
    s
}

/// The sysfs entries of the devices, relative to `/sys`, as rxe's on Linux 6.1 (drivers/
/// infiniband/core/sysfs.c, rxe_verbs.c's `parent`, uverbs_main.c): for each, the ib_device
/// under `devices/virtual/infiniband` (with `device/net/<ifname>` for the netdev that owns the
/// address, as under rxe's parent device), the uverbs device under
/// `devices/virtual/infiniband_verbs`, and the class links to both; and the uverbs class's
/// `abi_version`.
pub fn sysfs_entries(views: &[DeviceView]) -> Vec<Entry> {
    let mut e: Vec<Entry> = views.iter().flat_map(device_entries).collect();
    e.push(Entry::File(
        "class/infiniband_verbs/abi_version".into(),
        "6\n".into(),
    ));
    e
}

/// One device's sysfs entries (see [`sysfs_entries`]).
fn device_entries(v: &DeviceView) -> Vec<Entry> {
    let ibdev = ibdev(v.index);
    let uverbs = uverbs(v.index);
    let dev = format!("devices/virtual/infiniband/{ibdev}");
    let port = format!("{dev}/ports/1");
    let guid = hex_groups(&node_guid(v.ip));
    let gid = hex_groups(&gid(v.ip));
    let f = |p: String, s: &str| Entry::File(p, format!("{s}\n"));
    let mut e = vec![
        Entry::Dir(dev.clone()),
        f(format!("{dev}/node_type"), "1: CA"),
        f(format!("{dev}/node_guid"), &guid),
        f(format!("{dev}/sys_image_guid"), &guid),
        f(format!("{dev}/node_desc"), "softroce"),
        // rxe has no firmware version op: the core prints an empty line.
        f(format!("{dev}/fw_ver"), ""),
        Entry::Dir(format!("{dev}/ports")),
        Entry::Dir(port.clone()),
        f(format!("{port}/state"), "4: ACTIVE"),
        f(format!("{port}/phys_state"), "5: LinkUp"),
        f(format!("{port}/lid"), "0x0"),
        f(format!("{port}/lid_mask_count"), "0"),
        f(format!("{port}/sm_lid"), "0x0"),
        f(format!("{port}/sm_sl"), "0"),
        // IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS, the shim's port_cap_flags.
        f(format!("{port}/cap_mask"), "0x04010000"),
        // 1X SDR, the shim's active_width and active_speed.
        f(format!("{port}/rate"), "2.5 Gb/sec (1X SDR)"),
        f(format!("{port}/link_layer"), "Ethernet"),
        Entry::Dir(format!("{port}/gids")),
        Entry::Dir(format!("{port}/pkeys")),
        f(format!("{port}/pkeys/0"), "0xffff"),
        Entry::Dir(format!("{port}/gid_attrs")),
        Entry::Dir(format!("{port}/gid_attrs/types")),
        Entry::Dir(format!("{port}/gid_attrs/ndevs")),
        Entry::Dir(format!("{port}/{HW_COUNTERS}")),
    ];
    // rxe's hw_counters, one integer a file, 0 until the refresher writes the live values.
    for name in counter_names() {
        e.push(f(format!("{port}/{HW_COUNTERS}/{name}"), "0"));
    }
    for i in 0..GID_TABLE_LEN {
        e.push(f(format!("{port}/gids/{i}"), &gid));
        e.push(f(format!("{port}/gid_attrs/types/{i}"), "RoCE v2"));
        if let Some(n) = &v.ndev {
            e.push(f(format!("{port}/gid_attrs/ndevs/{i}"), n));
        }
    }
    // The table's empty entries, as the kernel shows them: the zero GID, and no attributes
    // (reading them fails there).
    let zero = hex_groups(&[0; 16]);
    for i in GID_TABLE_LEN..usize::from(softroce::ib::GID_TABLE_CAPACITY) {
        e.push(f(format!("{port}/gids/{i}"), &zero));
    }
    if let Some(n) = &v.ndev {
        e.push(f(format!("{dev}/parent"), n));
        // rxe's ib_device has its netdev's parent device as its own (`device`), so
        // `device/net/<ifname>` names the interface: rdma-core's tests (base.py
        // `get_net_name`) and librdmacm users find the device's interface, and from it the
        // IP address, there. The interface here may have no parent device (lo), so the view
        // gives `device` a directory of its own holding just that entry, a link to the
        // interface's real sysfs directory (six levels up is /sys).
        e.extend([
            Entry::Dir(format!("{dev}/device")),
            Entry::Dir(format!("{dev}/device/net")),
            Entry::Link(
                format!("{dev}/device/net/{n}"),
                format!("../../../../../../class/net/{n}"),
            ),
        ]);
    }
    let uv = format!("devices/virtual/infiniband_verbs/{uverbs}");
    let (major, minor) = (libc::major(v.rdev), libc::minor(v.rdev));
    e.extend([
        Entry::Dir(uv.clone()),
        f(format!("{uv}/ibdev"), &ibdev),
        // RXE_UVERBS_ABI_VERSION.
        f(format!("{uv}/abi_version"), "2"),
        f(format!("{uv}/dev"), &format!("{major}:{minor}")),
        Entry::Link(
            format!("class/infiniband/{ibdev}"),
            format!("../../devices/virtual/infiniband/{ibdev}"),
        ),
        Entry::Link(
            format!("class/infiniband_verbs/{uverbs}"),
            format!("../../devices/virtual/infiniband_verbs/{uverbs}"),
        ),
    ]);
    e
}

/// The port's counters directory, as rxe's (drivers/infiniband/sw/rxe/rxe_hw_counters.c).
const HW_COUNTERS: &str = "hw_counters";

/// The device's counters (`softroce stat`'s, rxe's names where rxe has them).
fn counter_names() -> Vec<&'static str> {
    softroce::transport::Counters::default()
        .snapshot()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// How often `softroce run` rewrites the view's hw_counters from the programs' counters.
pub const HW_COUNTERS_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

/// One device's counters as the view shows them: the sum over the processes of this
/// `softroce run` (all in its mount namespace, each with its own engine for the device),
/// read through their `softroce stat` sockets; a process that has exited keeps counting
/// with the values last read from it, so that the counters only grow, as a device's do.
#[derive(Debug, Default)]
pub struct HwCounters {
    /// The last values read from each live process.
    live: std::collections::HashMap<u32, Vec<(String, u64)>>,
    /// What exited processes had counted.
    retired: std::collections::HashMap<String, u64>,
}

impl HwCounters {
    /// Takes a round of reads: `procs` maps each process found to its devices' counters
    /// (None: it could not be read, e.g. it exited). Processes missing from `procs` or
    /// unreadable are retired with their last values.
    pub fn update(&mut self, procs: Vec<ProcessCounters>) {
        let mut seen = std::collections::HashSet::new();
        for (pid, c) in procs {
            if let Some(c) = c {
                seen.insert(pid);
                self.live.insert(pid, c);
            }
        }
        let gone: Vec<u32> = self
            .live
            .keys()
            .filter(|p| !seen.contains(p))
            .copied()
            .collect();
        for pid in gone {
            for (n, v) in self.live.remove(&pid).unwrap_or_default() {
                *self.retired.entry(n).or_default() += v;
            }
        }
    }

    /// The value of counter `name` now.
    pub fn value(&self, name: &str) -> u64 {
        let live: u64 = self
            .live
            .values()
            .flat_map(|c| c.iter().filter(|(n, _)| n == name).map(|(_, v)| *v))
            .sum();
        live + self.retired.get(name).copied().unwrap_or(0)
    }
}

/// One process's counters in a round of reads: its PID and, if it could be read, the
/// counters of its engines for one device.
pub type ProcessCounters = (u32, Option<Vec<(String, u64)>>);

/// A process's engines' counters (as its stat socket lists them, each with its address)
/// split by the device they count for: the device whose `--bind` address the engine has;
/// an engine at an address no `--bind` names (a stand-in, spec-notes/librdmacm.md rule 10)
/// counts for the first device. One list per address of `addrs`.
pub fn by_device(
    engines: Vec<softroce::driver::stats::DeviceStats>,
    addrs: &[SocketAddr],
) -> Vec<Vec<(String, u64)>> {
    let mut out = vec![Vec::new(); addrs.len().max(1)];
    for e in engines {
        let i = e
            .addr
            .parse::<SocketAddr>()
            .ok()
            .and_then(|a| addrs.iter().position(|b| *b == a))
            .unwrap_or(0);
        out[i].extend(e.counters);
    }
    out
}

/// This process's mount namespace (the `softroce run` whose view it is in).
fn mount_ns(pid: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
}

/// One round: reads the counters of every softroce process in this mount namespace, for
/// each of the devices at `addrs` (one list of processes per device).
fn read_processes(addrs: &[SocketAddr]) -> Vec<Vec<ProcessCounters>> {
    let me = mount_ns("self");
    let mut out: Vec<Vec<ProcessCounters>> = vec![Vec::new(); addrs.len().max(1)];
    let pids = softroce::driver::stats::list()
        .into_iter()
        .filter(|p| *p != std::process::id() && me.is_some() && mount_ns(&p.to_string()) == me);
    for p in pids {
        match softroce::driver::stats::query(p) {
            Ok(engines) => {
                for (i, c) in by_device(engines, addrs).into_iter().enumerate() {
                    out[i].push((p, Some(c)));
                }
            }
            Err(_) => out.iter_mut().for_each(|d| d.push((p, None))),
        }
    }
    out
}

/// Writes each counter's value into `dir` (the view's hw_counters directory): a new file
/// renamed over the old one, so that a reader sees the old or the new value, never half.
fn write_counters(dir: &Path, c: &HwCounters) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for name in counter_names() {
        let tmp = dir.join(format!(".{name}.new"));
        std::fs::write(&tmp, format!("{}\n", c.value(name)))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o444))?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}

/// Starts the thread that keeps the view's hw_counters live for the devices at `addrs`
/// (`softroce<i>` at `addrs[i]`): every [`HW_COUNTERS_PERIOD`] it reads the programs'
/// counters (their stat sockets, the relaxed atomics the engines update: nothing on the data
/// path waits for it) and rewrites each device's files. It runs as long as `softroce run`
/// does; a failed round is tried again the next period.
pub fn keep_hw_counters_live(addrs: Vec<SocketAddr>) {
    let dirs: Vec<PathBuf> = (0..addrs.len())
        .map(|i| {
            Path::new("/sys")
                .join(format!("devices/virtual/infiniband/{}/ports/1", ibdev(i)))
                .join(HW_COUNTERS)
        })
        .collect();
    let _ = std::thread::Builder::new()
        .name("hw-counters".into())
        .spawn(move || {
            let mut c: Vec<HwCounters> = dirs.iter().map(|_| HwCounters::default()).collect();
            loop {
                for (i, procs) in read_processes(&addrs).into_iter().enumerate() {
                    if let (Some(c), Some(dir)) = (c.get_mut(i), dirs.get(i)) {
                        c.update(procs);
                        let _ = write_counters(dir, c);
                    }
                }
                std::thread::sleep(HW_COUNTERS_PERIOD);
            }
        });
}

/// The interface that owns `ip`: the one with that address, else for a loopback address the
/// loopback interface (which answers all of 127.0.0.0/8); None when no interface has it.
pub fn owning_netdev(ip: IpAddr) -> Option<String> {
    softroce::driver::interface::interface_of(ip)
        .ok()
        .map(|i| i.name.to_string_lossy().into_owned())
}

/// Why the device view could not be laid.
#[derive(Debug)]
pub struct NsError {
    /// The step that failed.
    pub step: String,
    /// Its error.
    pub err: std::io::Error,
}

impl std::fmt::Display for NsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.err)
    }
}

fn fail(step: impl Into<String>) -> impl FnOnce(std::io::Error) -> NsError {
    let step = step.into();
    move |err| NsError { step, err }
}

fn cstr(p: &Path) -> Result<CString, NsError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| NsError {
        step: format!("path {}", p.display()),
        err: std::io::Error::from_raw_os_error(libc::EINVAL),
    })
}

fn check(r: libc::c_int, step: impl FnOnce() -> String) -> Result<(), NsError> {
    if r == 0 {
        Ok(())
    } else {
        Err(NsError {
            step: step(),
            err: std::io::Error::last_os_error(),
        })
    }
}

fn mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), NsError> {
    let src_c = src.map(cstr).transpose()?;
    let dst_c = cstr(dst)?;
    let fs_c = fstype.map(|s| CString::new(s).expect("no NUL in a filesystem name"));
    let data_c = data.map(|s| CString::new(s).expect("no NUL in mount options"));
    let opt = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            opt(&src_c),
            dst_c.as_ptr(),
            opt(&fs_c),
            flags,
            opt(&data_c) as *const libc::c_void,
        )
    };
    check(r, || match src {
        Some(s) => format!("mount {} on {}", s.display(), dst.display()),
        None => format!("mount {} on {}", fstype.unwrap_or("(flags)"), dst.display()),
    })
}

/// Enters a private mount namespace (with a user namespace when not root), one that the
/// program spawned next inherits.
fn enter_namespace() -> Result<(), NsError> {
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // Root keeps its own user namespace (and so its privileges over the host's network and
    // devices); a mount namespace is enough for it. Others need a user namespace to mount.
    // SAFETY: unshare changes only this (single-threaded) process's namespaces.
    let root_ok = uid == 0 && unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0;
    if !root_ok {
        // SAFETY: as above; CLONE_NEWUSER needs a single-threaded caller, which
        // `softroce run` is until it spawns the program.
        let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
        check(r, || "unshare(CLONE_NEWUSER|CLONE_NEWNS)".into())?;
        // setgroups must be denied before an unprivileged process may write gid_map.
        std::fs::write("/proc/self/setgroups", "deny")
            .map_err(fail("write /proc/self/setgroups"))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(fail("write uid_map"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(fail("write gid_map"))?;
    }
    // Nothing mounted from here on may propagate to the host's namespace.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

/// Lays a tmpfs over `dir` in which each entry `dir` had is bound back (directories and
/// files with their submounts, symlinks copied), so that new names can be added beside them.
fn shadow(dir: &Path) -> Result<(), NsError> {
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(fail(format!("read {}", dir.display())))?
        .filter_map(Result::ok)
        .collect();
    // The hidden directory stays reachable through this descriptor's /proc/self/fd link.
    let fd = std::fs::File::open(dir).map_err(fail(format!("open {}", dir.display())))?;
    use std::os::fd::AsRawFd;
    let hidden = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    mount(None, dir, Some("tmpfs"), 0, Some("mode=755")).map_err(|e| NsError {
        step: format!("tmpfs on {}: {}", dir.display(), e.step),
        err: e.err,
    })?;
    for e in entries {
        let name = e.file_name();
        let dst = dir.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(hidden.join(&name)) else {
            continue; // gone meanwhile
        };
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = std::fs::read_link(hidden.join(&name))
                .map_err(fail(format!("readlink {}", dst.display())))?;
            std::os::unix::fs::symlink(target, &dst)
                .map_err(fail(format!("symlink {}", dst.display())))?;
            continue;
        }
        if ft.is_dir() {
            std::fs::create_dir(&dst).map_err(fail(format!("mkdir {}", dst.display())))?;
        } else {
            std::fs::File::create(&dst).map_err(fail(format!("create {}", dst.display())))?;
        }
        let bound = mount(
            Some(&hidden.join(&name)),
            &dst,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        );
        if let Err(e) = bound {
            // An entry the kernel will not let us bind (rare: a file owned by another user
            // namespace) is left out rather than losing the whole view.
            let _ = std::fs::remove_file(&dst).or_else(|_| std::fs::remove_dir(&dst));
            if e.err.raw_os_error() != Some(libc::EPERM)
                && e.err.raw_os_error() != Some(libc::EACCES)
            {
                return Err(e);
            }
        }
    }
    drop(fd);
    Ok(())
}

/// Makes `dir/name` a fresh empty directory: over the existing one if there is one (hiding
/// what it held, e.g. a host's real uverbs nodes), else beside `dir`'s entries.
fn fresh_dir(dir: &Path, name: &str, shadowed: &mut Vec<PathBuf>) -> Result<PathBuf, NsError> {
    let p = dir.join(name);
    if p.is_dir() {
        mount(None, &p, Some("tmpfs"), 0, Some("mode=755"))?;
    } else {
        if !shadowed.iter().any(|s| s == dir) {
            shadow(dir)?;
            shadowed.push(dir.to_path_buf());
        }
        std::fs::create_dir(&p).map_err(fail(format!("mkdir {}", p.display())))?;
    }
    Ok(p)
}

fn write_entries(root: &Path, entries: &[Entry]) -> Result<(), NsError> {
    use std::os::unix::fs::PermissionsExt;
    for e in entries {
        match e {
            Entry::Dir(p) => {
                let p = root.join(p);
                std::fs::create_dir_all(&p).map_err(fail(format!("mkdir {}", p.display())))?;
            }
            Entry::File(p, s) => {
                let p = root.join(p);
                std::fs::write(&p, s).map_err(fail(format!("write {}", p.display())))?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444))
                    .map_err(fail(format!("chmod {}", p.display())))?;
            }
            Entry::Link(p, t) => {
                let p = root.join(p);
                std::os::unix::fs::symlink(OsStr::new(t), &p)
                    .map_err(fail(format!("symlink {}", p.display())))?;
            }
        }
    }
    Ok(())
}

/// The character device bound at the uverbs node.
const CHAR_DEV: &str = "/dev/null";

/// Enters the namespace and lays the `/dev/infiniband` and sysfs entries of a device at each
/// of `ips` (`softroce<i>` at `ips[i]`). On error the process may be in a namespace with part
/// of the view; nothing outside it has changed.
pub fn lay_device_view(ips: &[IpAddr]) -> Result<Vec<DeviceView>, NsError> {
    let meta = std::fs::metadata(CHAR_DEV).map_err(fail(format!("stat {CHAR_DEV}")))?;
    if !meta.file_type().is_char_device() {
        return Err(NsError {
            step: format!("{CHAR_DEV} is not a character device"),
            err: std::io::Error::from_raw_os_error(libc::ENODEV),
        });
    }
    let views: Vec<DeviceView> = ips
        .iter()
        .enumerate()
        .map(|(index, &ip)| DeviceView {
            index,
            ip,
            ndev: owning_netdev(ip),
            rdev: meta.rdev(),
        })
        .collect();
    enter_namespace()?;
    let mut shadowed = Vec::new();

    let ib = fresh_dir(Path::new("/dev"), "infiniband", &mut shadowed)?;
    for v in &views {
        let node = ib.join(uverbs(v.index));
        std::fs::File::create(&node).map_err(fail(format!("create {}", node.display())))?;
        mount(Some(Path::new(CHAR_DEV)), &node, None, libc::MS_BIND, None)?;
    }

    let sys = Path::new("/sys");
    for (dir, name) in [
        ("devices/virtual", "infiniband"),
        ("devices/virtual", "infiniband_verbs"),
        ("class", "infiniband"),
        ("class", "infiniband_verbs"),
    ] {
        fresh_dir(&sys.join(dir), name, &mut shadowed)?;
    }
    write_entries(sys, &sysfs_entries(&views))?;
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> DeviceView {
        DeviceView {
            index: 0,
            ip: "127.0.0.2".parse().unwrap(),
            ndev: Some("lo".into()),
            rdev: libc::makedev(1, 3),
        }
    }

    fn file<'a>(e: &'a [Entry], path: &str) -> Option<&'a str> {
        e.iter().find_map(|x| match x {
            Entry::File(p, s) if p == path => Some(s.as_str()),
            _ => None,
        })
    }

    #[test]
    fn guid_and_gid_print_as_sysfs_does() {
        let e = sysfs_entries(&[view()]);
        let d = "devices/virtual/infiniband/softroce0";
        assert_eq!(
            file(&e, &format!("{d}/node_guid")),
            Some("0000:7fff:fe00:0002\n")
        );
        assert_eq!(
            file(&e, &format!("{d}/ports/1/gids/1")),
            Some("0000:0000:0000:0000:0000:ffff:7f00:0002\n")
        );
        assert_eq!(
            file(&e, &format!("{d}/ports/1/gid_attrs/types/0")),
            Some("RoCE v2\n")
        );
        assert_eq!(
            file(&e, &format!("{d}/ports/1/gid_attrs/ndevs/1")),
            Some("lo\n")
        );
        assert_eq!(
            file(&e, "devices/virtual/infiniband_verbs/uverbs_softroce0/dev"),
            Some("1:3\n")
        );
    }

    #[test]
    fn the_device_names_its_netdev_under_device_net() {
        let e = sysfs_entries(&[view()]);
        let d = "devices/virtual/infiniband/softroce0";
        let link = e.iter().find_map(|x| match x {
            Entry::Link(p, t) if p == &format!("{d}/device/net/lo") => Some(t.as_str()),
            _ => None,
        });
        // From sys/devices/virtual/infiniband/softroce0/device/net/ up six levels is /sys.
        assert_eq!(link, Some("../../../../../../class/net/lo"));
        let base = Path::new("/sys").join(d).join("device/net");
        let resolved = base.join(link.unwrap());
        let norm: PathBuf = resolved.components().fold(PathBuf::new(), |mut p, c| {
            match c {
                std::path::Component::ParentDir => {
                    p.pop();
                }
                c => p.push(c),
            }
            p
        });
        assert_eq!(norm, Path::new("/sys/class/net/lo"));
    }

    #[test]
    fn hw_counters_sum_processes_and_keep_what_exited_ones_counted() {
        let c = |v: u64| Some(vec![("sent_pkts".to_string(), v), ("rcvd_pkts".into(), 1)]);
        let mut h = HwCounters::default();
        h.update(vec![(10, c(5)), (11, c(7))]);
        assert_eq!(h.value("sent_pkts"), 12);
        assert_eq!(h.value("rcvd_pkts"), 2);
        // 10 counts on; 11 exits (unreadable, then gone): its last values stay counted.
        h.update(vec![(10, c(9)), (11, None)]);
        assert_eq!(h.value("sent_pkts"), 16);
        h.update(vec![(10, c(20))]);
        assert_eq!(h.value("sent_pkts"), 27);
        assert_eq!(h.value("no_such_counter"), 0);
        // The files are laid with every counter name, at 0.
        let e = sysfs_entries(&[view()]);
        let hw = "devices/virtual/infiniband/softroce0/ports/1/hw_counters";
        for n in [
            "sent_pkts",
            "rcvd_pkts",
            "retry_exceeded_err",
            "np_cnp_sent",
        ] {
            assert_eq!(file(&e, &format!("{hw}/{n}")), Some("0\n"), "{n}");
        }
    }

    #[test]
    fn the_gid_table_is_as_long_as_rxes_with_the_unused_entries_zero() {
        let e = sysfs_entries(&[view()]);
        let port = "devices/virtual/infiniband/softroce0/ports/1";
        let zero = "0000:0000:0000:0000:0000:0000:0000:0000\n";
        assert_ne!(file(&e, &format!("{port}/gids/1")), Some(zero));
        assert_eq!(file(&e, &format!("{port}/gids/2")), Some(zero));
        assert_eq!(file(&e, &format!("{port}/gids/1023")), Some(zero));
        assert!(file(&e, &format!("{port}/gids/1024")).is_none());
        assert!(file(&e, &format!("{port}/gid_attrs/types/1")).is_some());
        assert!(file(&e, &format!("{port}/gid_attrs/types/2")).is_none());
        assert!(file(&e, &format!("{port}/gid_attrs/ndevs/2")).is_none());
    }

    #[test]
    fn no_netdev_means_no_ndevs_files() {
        let mut v = view();
        v.ndev = None;
        let e = sysfs_entries(&[v]);
        assert!(!e.iter().any(
            |x| matches!(x, Entry::File(p, _) if p.contains("ndevs/") || p.ends_with("/parent"))
        ));
        assert!(!e
            .iter()
            .any(|x| matches!(x, Entry::Dir(p) | Entry::Link(p, _) if p.contains("/device"))));
        // The GIDs are still there.
        assert!(file(&e, "devices/virtual/infiniband/softroce0/ports/1/gids/0").is_some());
    }

    #[test]
    fn every_entry_has_its_directory_first() {
        let e = sysfs_entries(&[view()]);
        let mut dirs: Vec<String> = vec![
            "devices/virtual/infiniband".into(),
            "devices/virtual/infiniband_verbs".into(),
            "class/infiniband".into(),
            "class/infiniband_verbs".into(),
        ];
        for x in &e {
            let p = match x {
                Entry::Dir(p) | Entry::File(p, _) | Entry::Link(p, _) => p,
            };
            let parent = p.rsplit_once('/').unwrap().0;
            assert!(dirs.iter().any(|d| d == parent), "{p} before its directory");
            if let Entry::Dir(p) = x {
                dirs.push(p.clone());
            }
        }
    }

    #[test]
    fn loopback_addresses_belong_to_the_loopback_interface() {
        let lo = owning_netdev("127.0.0.1".parse().unwrap());
        assert!(lo.is_some(), "no interface owns 127.0.0.1");
        assert_eq!(owning_netdev("127.0.0.77".parse().unwrap()), lo);
        // TEST-NET-1 is on no interface of a test machine.
        assert_eq!(owning_netdev("192.0.2.1".parse().unwrap()), None);
    }

    #[test]
    fn two_devices_each_get_their_own_tree_and_share_the_class_files() {
        let mut second = view();
        second.index = 1;
        second.ip = "127.0.0.3".parse().unwrap();
        let e = sysfs_entries(&[view(), second]);
        let d1 = "devices/virtual/infiniband/softroce1";
        assert_eq!(
            file(&e, &format!("{d1}/node_guid")),
            Some("0000:7fff:fe00:0003\n")
        );
        assert_eq!(
            file(&e, &format!("{d1}/ports/1/gids/0")),
            Some("0000:0000:0000:0000:0000:ffff:7f00:0003\n")
        );
        assert_eq!(
            file(&e, "devices/virtual/infiniband/softroce0/ports/1/gids/0"),
            Some("0000:0000:0000:0000:0000:ffff:7f00:0002\n")
        );
        assert_eq!(
            file(
                &e,
                "devices/virtual/infiniband_verbs/uverbs_softroce1/ibdev"
            ),
            Some("softroce1\n")
        );
        let link = |p: &str| {
            e.iter().find_map(|x| match x {
                Entry::Link(q, t) if q == p => Some(t.as_str()),
                _ => None,
            })
        };
        assert_eq!(
            link("class/infiniband/softroce1"),
            Some("../../devices/virtual/infiniband/softroce1")
        );
        assert_eq!(
            link("class/infiniband_verbs/uverbs_softroce1"),
            Some("../../devices/virtual/infiniband_verbs/uverbs_softroce1")
        );
        // One path, one entry: the class's abi_version is written once.
        let mut paths: Vec<&str> = e
            .iter()
            .map(|x| match x {
                Entry::Dir(p) | Entry::File(p, _) | Entry::Link(p, _) => p.as_str(),
            })
            .collect();
        let n = paths.len();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), n, "a path laid twice");
        assert!(file(&e, "class/infiniband_verbs/abi_version").is_some());
    }

    #[test]
    fn engines_count_for_the_device_of_their_address() {
        use softroce::driver::stats::DeviceStats;
        let engine = |addr: &str, v: u64| DeviceStats {
            addr: addr.into(),
            counters: vec![("sent_pkts".into(), v)],
            qps: Vec::new(),
        };
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
        ];
        let split = by_device(
            vec![
                engine("127.0.0.3:4791", 5),
                engine("127.0.0.2:4791", 7),
                // A stand-in (rule 10): for the first device.
                engine("127.146.52.86:4791", 1),
            ],
            &addrs,
        );
        assert_eq!(
            split,
            vec![
                vec![("sent_pkts".to_string(), 7), ("sent_pkts".to_string(), 1)],
                vec![("sent_pkts".to_string(), 5)],
            ]
        );
        let mut h = HwCounters::default();
        h.update(vec![(10, Some(split[0].clone()))]);
        assert_eq!(h.value("sent_pkts"), 8);
    }
}
