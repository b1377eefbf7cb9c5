//! One device address shared by every process of a user, as rxe0 serves every process of its
//! host (spec-notes/shared-device.md gives the design and the argument for it).
//!
//! Each device context that opens an address is a *member* of the address's group: its
//! receiving socket joins a SO_REUSEPORT group on the address's port, it takes a *slot*
//! (0-254), and the QPs it makes are numbered in its slot (the QPN's top byte). A classic BPF
//! program on the group ([`super::steering`]) hands every datagram to the member whose slot
//! its destination QPN names. Which socket sits at which index of the kernel's array is
//! learned by probing ([`Member::relayout`]), since the kernel renumbers the array on every departure.
//! The CM's MADs (all to QP1) are routed by their content: a REQ to the member listening on
//! its service ID, any other message to the member whose slot its communication ID carries,
//! in an envelope the same program steers by slot.
//!
//! The group's state lives in a directory of the user's, one per network namespace, address
//! and port: a lock file and a table (`table`: the group's secret, the slots and who holds
//! them, the listeners, the last known layout), rewritten whole under the lock.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write as _};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::steering::{self, FORWARD_MAGIC, MAX_SLOTS, SECRET_LEN};
use crate::wire::cm::{CmMessage, CmReq, CmSidrReq};

/// The envelope: magic, slot (and 3 bytes of padding), the secret, the MAD's source (an IPv6
/// or IPv4-mapped address and a port), the MAD.
const FORWARD_HEADER: usize = 8 + SECRET_LEN + 16 + 2;
/// A forwarded MAD's envelope length.
pub const FORWARD_LEN: usize = FORWARD_HEADER + crate::wire::mad::LEN;

/// How long a member's engine waits between two reports of misrouted packets.
const MISROUTE_REPORT_GAP: Duration = Duration::from_millis(20);
/// How long a member waits for the group's lock before it gives up with an error.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);
/// How long each probe round waits for answers; a member that answers in none of them is
/// left out of the layout (its packets go by the kernel's hash until the next layout).
const PROBE_ROUNDS: [Duration; 4] = [
    Duration::from_millis(5),
    Duration::from_millis(25),
    Duration::from_millis(80),
    Duration::from_millis(200),
];

/// Where a MAD that QP1 received should be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadRoute {
    /// By this member's CM.
    Here,
    /// By the member in this slot.
    Member(u8),
    /// A REQ or SIDR_REQ for a service no member listens on (yet): the caller may hold it a
    /// moment for a listener that is registering, then hands it to its own CM, which refuses
    /// it.
    Nobody,
}

/// Where `mad` belongs: a REQ or SIDR_REQ to the listener of its service ID (`listener`;
/// `Nobody` if none), any other CM message to the slot in its communication or request ID
/// (the top byte of the ID the recipient chose), what does not parse here (the CM counts it).
pub fn route_mad(mad: &[u8], me: u8, listener: impl FnOnce(u64) -> Option<u8>) -> MadRoute {
    let Ok((_, msg)) = CmMessage::parse(mad) else {
        return MadRoute::Here;
    };
    let slot = match msg {
        CmMessage::Req(CmReq { service_id, .. })
        | CmMessage::SidrReq(CmSidrReq { service_id, .. }) => match listener(service_id) {
            Some(s) => Some(s),
            None => return MadRoute::Nobody,
        },
        CmMessage::SidrRep(r) => Some(id_slot(r.request_id)),
        CmMessage::Mra(m) => Some(id_slot(m.remote_comm_id)),
        CmMessage::Rej(r) => Some(id_slot(r.remote_comm_id)),
        CmMessage::Rep(r) => Some(id_slot(r.remote_comm_id)),
        CmMessage::Rtu(r) => Some(id_slot(r.remote_comm_id)),
        CmMessage::Dreq(d) => Some(id_slot(d.remote_comm_id)),
        CmMessage::Drep(d) => Some(id_slot(d.remote_comm_id)),
    };
    match slot {
        Some(s) if s != me => MadRoute::Member(s),
        _ => MadRoute::Here,
    }
}

/// The slot a communication or request ID was made in (its top byte; see
/// `cm::EndpointConfig::comm_id_tag`).
pub fn id_slot(id: u32) -> u8 {
    (id >> 24) as u8
}

/// The envelope that carries `mad`, received from `from`, to the member in `slot`.
pub fn forward_envelope(
    slot: u8,
    secret: &[u8; SECRET_LEN],
    from: SocketAddr,
    mad: &[u8],
) -> Option<[u8; FORWARD_LEN]> {
    if mad.len() != crate::wire::mad::LEN {
        return None;
    }
    let mut b = [0u8; FORWARD_LEN];
    b[0..4].copy_from_slice(&FORWARD_MAGIC.to_be_bytes());
    b[4] = slot;
    b[8..8 + SECRET_LEN].copy_from_slice(secret);
    let ip = match from.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    b[8 + SECRET_LEN..24 + SECRET_LEN].copy_from_slice(&ip.octets());
    b[24 + SECRET_LEN..FORWARD_HEADER].copy_from_slice(&from.port().to_be_bytes());
    b[FORWARD_HEADER..].copy_from_slice(mad);
    Some(b)
}

/// A forwarded MAD's source and bytes, if `data` is an envelope carrying `secret`.
pub fn parse_forward<'a>(
    data: &'a [u8],
    secret: &[u8; SECRET_LEN],
) -> Option<(SocketAddr, &'a [u8])> {
    if data.len() != FORWARD_LEN || data[0..4] != FORWARD_MAGIC.to_be_bytes() {
        return None;
    }
    if data[8..8 + SECRET_LEN] != secret[..] {
        return None;
    }
    let mut o = [0u8; 16];
    o.copy_from_slice(&data[8 + SECRET_LEN..24 + SECRET_LEN]);
    let v6 = std::net::Ipv6Addr::from(o);
    let ip = match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    };
    let port = u16::from_be_bytes([data[24 + SECRET_LEN], data[25 + SECRET_LEN]]);
    Some((SocketAddr::new(ip, port), &data[FORWARD_HEADER..]))
}

/// What [`Member::control`] made of a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Control<'a> {
    /// A probe, answered.
    Answered,
    /// A MAD another member forwarded: its source and bytes, for this member's CM.
    Mad(SocketAddr, &'a [u8]),
    /// Not the group's: the transport's.
    NotOurs,
}

/// A process that holds a slot: its PID and its start time (so that a recycled PID is not
/// taken for the holder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    pid: u32,
    start: u64,
}

impl Holder {
    fn me() -> Holder {
        let pid = std::process::id();
        Holder {
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    fn alive(&self) -> bool {
        start_time(self.pid).is_some_and(|s| s == self.start)
    }
}

/// Process `pid`'s start time (field 22 of /proc/PID/stat), or None if it is gone.
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The group's table, as its file holds it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Table {
    secret: Option<[u8; SECRET_LEN]>,
    slots: BTreeMap<u8, Holder>,
    listeners: BTreeMap<u64, u8>,
    /// The layout the program attached last: (slot, index).
    map: Vec<(u8, u32)>,
}

impl Table {
    fn parse(text: &str) -> Table {
        let mut t = Table::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["secret", hex] => t.secret = parse_secret(hex),
                ["slot", s, pid, start] => {
                    if let (Ok(s), Ok(pid), Ok(start)) = (s.parse(), pid.parse(), start.parse()) {
                        t.slots.insert(s, Holder { pid, start });
                    }
                }
                ["listen", svc, s] => {
                    if let (Ok(svc), Ok(s)) = (u64::from_str_radix(svc, 16), s.parse()) {
                        t.listeners.insert(svc, s);
                    }
                }
                ["map", s, i] => {
                    if let (Ok(s), Ok(i)) = (s.parse(), i.parse()) {
                        t.map.push((s, i));
                    }
                }
                _ => {}
            }
        }
        t
    }

    fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        if let Some(s) = &self.secret {
            let hex: String = s.iter().map(|b| format!("{b:02x}")).collect();
            let _ = writeln!(out, "secret {hex}");
        }
        for (s, h) in &self.slots {
            let _ = writeln!(out, "slot {s} {} {}", h.pid, h.start);
        }
        for (svc, s) in &self.listeners {
            let _ = writeln!(out, "listen {svc:x} {s}");
        }
        for (s, i) in &self.map {
            let _ = writeln!(out, "map {s} {i}");
        }
        out
    }

    /// Forgets the slots of processes that are gone, and their listeners.
    fn prune(&mut self) {
        self.slots.retain(|_, h| h.alive());
        let slots = &self.slots;
        self.listeners.retain(|_, s| slots.contains_key(s));
    }

    fn free_slot(&self) -> Option<u8> {
        (0..MAX_SLOTS as u8).find(|s| !self.slots.contains_key(s))
    }
}

fn parse_secret(hex: &str) -> Option<[u8; SECRET_LEN]> {
    if hex.len() != 2 * SECRET_LEN {
        return None;
    }
    let mut s = [0u8; SECRET_LEN];
    for (i, b) in s.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(s)
}

/// The directory that holds every group of this user: `$SOFTROCE_GROUP_DIR`, else
/// `/tmp/softroce-<uid>/groups`. Not under `$XDG_RUNTIME_DIR` (where `softroce stat` looks):
/// every process of the user must find the same directory, and a process started by cron or
/// sudo has no XDG_RUNTIME_DIR.
pub fn groups_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTROCE_GROUP_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/softroce-{uid}/groups"))
}

/// The directory of the group at `addr` in this process's network namespace, created 0700.
/// Refused if it, or the directory above it, belongs to someone else or others may write it:
/// another user must not read the secret or forge the table.
fn group_dir(addr: SocketAddr) -> io::Result<PathBuf> {
    let netns = std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            s.strip_prefix("net:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "0".into());
    let ip = addr.ip().to_string().replace(':', "_");
    let base = groups_dir();
    let dir = base.join(format!("{netns}-{ip}-{}", addr.port()));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    // The default directory's parent is the user's too (/tmp/softroce-<uid>).
    let parent = base.parent().filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("softroce-"))
    });
    for d in parent.into_iter().chain([base.as_path(), dir.as_path()]) {
        let m = std::fs::symlink_metadata(d)?;
        if m.uid() != uid || m.mode() & 0o022 != 0 || !m.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory of this user's alone (owner {}, mode {:o})",
                    d.display(),
                    m.uid(),
                    m.mode() & 0o7777
                ),
            ));
        }
    }
    Ok(dir)
}

/// The group's lock, held while it lives.
struct Locked {
    file: File,
    dir: PathBuf,
}

impl Locked {
    /// Takes the group's lock. The group's last member removes the lock file with the
    /// directory (`remove_group`), so a lock taken on a file that is no longer the one at the
    /// path is let go and taken again on the new one: two holders never hold two files.
    fn take(dir: &Path) -> io::Result<Locked> {
        let give_up = Instant::now() + LOCK_PATIENCE;
        loop {
            let file = Self::flock(dir, give_up)?;
            let held = file.metadata()?;
            match std::fs::metadata(dir.join("lock")) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Locked {
                        file,
                        dir: dir.to_path_buf(),
                    });
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            // Removed (or replaced) while this process waited: the lock goes with `file`.
        }
    }

    /// Opens the lock file (the directory too, if the group's last member removed it) and
    /// locks it, by `give_up`.
    fn flock(dir: &Path, give_up: Instant) -> io::Result<File> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join("lock"))?;
        // Polled, not waited for: a holder that never lets go (a stopped process, one stuck in
        // its exit) must not hang every process that opens the address.
        let mut pause = Duration::from_micros(50);
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(file);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            if Instant::now() >= give_up {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} stayed locked by another process for {} s",
                        dir.join("lock").display(),
                        LOCK_PATIENCE.as_secs()
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Removes the group's files and directory: its last member left. Holding the lock, so
    /// that a process waiting for it finds the file gone and starts a fresh group (`take`).
    fn remove_group(self) {
        let _ = std::fs::remove_file(self.dir.join("table"));
        let _ = std::fs::remove_file(self.dir.join("table.new"));
        let _ = std::fs::remove_file(self.dir.join("lock"));
        let _ = std::fs::remove_dir(&self.dir);
    }

    fn read(&self) -> Table {
        std::fs::read_to_string(self.dir.join("table"))
            .map(|t| Table::parse(&t))
            .unwrap_or_default()
    }

    /// Replaces the table whole (readers without the lock see the old one or the new one).
    fn write(&self, t: &Table) -> io::Result<()> {
        let tmp = self.dir.join("table.new");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(t.render().as_bytes())?;
        std::fs::rename(&tmp, self.dir.join("table"))
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: unlocks the descriptor this value owns (closing it would too).
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// This device context's membership of its address's group.
#[derive(Debug)]
pub struct Member {
    dir: PathBuf,
    addr: SocketAddr,
    /// The slot: the top byte of every QPN and communication ID this member makes.
    pub slot: u8,
    secret: [u8; SECRET_LEN],
    /// Sends probe answers and forwarded MADs (bound to the address, any port).
    tx: UdpSocket,
    /// A report of misrouted packets is with the keeper.
    report_pending: AtomicBool,
    /// When the last report went (nanoseconds since `origin`).
    last_report: AtomicU64,
    /// The slot the last misrouted packet named.
    misrouted_slot: AtomicU8,
    origin: Instant,
    left: AtomicBool,
}

impl Member {
    /// Joins the group at `addr`: takes a free slot and binds the receiving socket with
    /// `bind` (which sets SO_REUSEPORT) under the group's lock, so that no layout is being
    /// probed meanwhile. The caller starts the engine, then calls [`Member::relayout`].
    pub fn join<S>(
        addr: SocketAddr,
        bind: impl FnOnce(SocketAddr) -> io::Result<S>,
    ) -> io::Result<(Arc<Member>, S)> {
        let dir = group_dir(addr)?;
        let lock = Locked::take(&dir)?;
        let mut t = lock.read();
        t.prune();
        let secret = match t.secret {
            Some(s) => s,
            None => {
                let mut s = [0u8; SECRET_LEN];
                crate::random::fill(&mut s);
                t.secret = Some(s);
                s
            }
        };
        let slot = t.free_slot().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{addr} already has {MAX_SLOTS} device contexts open"),
            )
        })?;
        let sock = bind(addr)?;
        let tx = UdpSocket::bind(SocketAddr::new(addr.ip(), 0))?;
        tx.set_nonblocking(true)?;
        t.slots.insert(slot, Holder::me());
        lock.write(&t)?;
        drop(lock);
        super::fork::register(tx.as_raw_fd());
        Ok((
            Arc::new(Member {
                dir,
                addr,
                slot,
                secret,
                tx,
                report_pending: AtomicBool::new(false),
                last_report: AtomicU64::new(0),
                misrouted_slot: AtomicU8::new(0),
                origin: Instant::now(),
                left: AtomicBool::new(false),
            }),
            sock,
        ))
    }

    /// Probes the group's layout and attaches the program for it (see `relayout_locked`).
    pub fn relayout(&self) -> io::Result<()> {
        let lock = Locked::take(&self.dir)?;
        relayout_locked(&lock, self.addr, &self.secret)
    }

    /// Leaves the group, after the member's socket was closed: gives up the slot and its
    /// listeners, then lays the group out anew for those who stay (the kernel moved the last
    /// socket into the freed index).
    pub fn leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        super::fork::unregister(self.tx.as_raw_fd());
        let Ok(lock) = Locked::take(&self.dir) else {
            return;
        };
        let mut t = lock.read();
        if t.slots.get(&self.slot) == Some(&Holder::me()) {
            t.slots.remove(&self.slot);
        }
        let slot = self.slot;
        t.listeners.retain(|_, s| *s != slot);
        t.map.retain(|(s, _)| *s != slot);
        t.prune();
        if t.slots.is_empty() {
            // The last member: the group ends with it, and its directory with it (a host that
            // opens many addresses or ports must not fill the groups directory).
            lock.remove_group();
            return;
        }
        let _ = lock.write(&t);
        let _ = relayout_locked(&lock, self.addr, &self.secret);
    }

    /// Registers this member as the listener on `service_id`; AddrInUse if another live
    /// member of the group listens on it (two processes cannot listen on one rdma_cm port).
    pub fn listen(&self, service_id: u64) -> io::Result<()> {
        let lock = Locked::take(&self.dir)?;
        let mut t = lock.read();
        t.prune();
        match t.listeners.get(&service_id) {
            Some(&s) if s != self.slot => Err(io::ErrorKind::AddrInUse.into()),
            _ => {
                t.listeners.insert(service_id, self.slot);
                lock.write(&t)
            }
        }
    }

    /// Stops listening on `service_id`.
    pub fn unlisten(&self, service_id: u64) {
        if let Ok(lock) = Locked::take(&self.dir) {
            let mut t = lock.read();
            if t.listeners.get(&service_id) == Some(&self.slot) {
                t.listeners.remove(&service_id);
                let _ = lock.write(&t);
            }
        }
    }

    /// The slot of the member listening on `service_id`, from the table as last written
    /// (no lock: the table is replaced whole).
    fn listener(&self, service_id: u64) -> Option<u8> {
        let text = std::fs::read_to_string(self.dir.join("table")).ok()?;
        Table::parse(&text).listeners.get(&service_id).copied()
    }

    /// Where QP1's MAD `mad` is to be handled.
    pub fn route(&self, mad: &[u8]) -> MadRoute {
        route_mad(mad, self.slot, |svc| self.listener(svc))
    }

    /// Sends `mad` (from `from`) to the member in `slot`; false if it could not leave (the
    /// caller then handles it here).
    pub fn forward(&self, slot: u8, from: SocketAddr, mad: &[u8]) -> bool {
        let Some(env) = forward_envelope(slot, &self.secret, from, mad) else {
            return false;
        };
        self.tx.send_to(&env, self.addr).is_ok()
    }

    /// Takes the group's own datagrams, which start with 0xFF as no RoCE packet does and carry
    /// the group's secret: answers a probe, or unwraps a forwarded MAD (returned with its
    /// source). Anything else is not ours.
    pub fn control<'a>(&self, data: &'a [u8]) -> Control<'a> {
        if data.first() != Some(&0xFF) {
            return Control::NotOurs;
        }
        if let Some((index, port)) = steering::parse_probe(data, &self.secret) {
            let a = steering::answer(index, &self.secret, self.slot);
            let _ = self.tx.send_to(&a, SocketAddr::new(self.addr.ip(), port));
            return Control::Answered;
        }
        match parse_forward(data, &self.secret) {
            Some((from, mad)) => Control::Mad(from, mad),
            None => Control::NotOurs,
        }
    }

    /// A packet for another member's QP (`qpn`) reached this one: the layout the program
    /// steers by is stale (a member left without laying the group out anew: killed). Tells
    /// the keeper, at most once per `MISROUTE_REPORT_GAP`.
    pub fn misrouted(self: &Arc<Self>, qpn: u32) {
        self.misrouted_slot
            .store(steering::qpn_slot(qpn), Ordering::Relaxed);
        let now = self.origin.elapsed().as_nanos() as u64;
        let last = self.last_report.load(Ordering::Relaxed);
        if now.saturating_sub(last) < MISROUTE_REPORT_GAP.as_nanos() as u64 {
            return;
        }
        if self.report_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        self.last_report.store(now, Ordering::Relaxed);
        if keeper().send(Arc::downgrade(self)).is_err() {
            self.report_pending.store(false, Ordering::Release);
        }
    }

    /// The keeper's answer to a report: lays the group out anew if the slot the packet named
    /// is held by a live member (the program is stale), or if a holder died (its slot is
    /// freed and the program forgets it). A packet for a slot nobody holds is only dropped.
    fn check(&self) {
        let slot = self.misrouted_slot.load(Ordering::Relaxed);
        if let Ok(lock) = Locked::take(&self.dir) {
            let mut t = lock.read();
            let before = t.slots.len();
            t.prune();
            let died = t.slots.len() != before;
            if died {
                let _ = lock.write(&t);
            }
            if died || (slot != self.slot && t.slots.contains_key(&slot)) {
                let _ = relayout_locked(&lock, self.addr, &self.secret);
            }
        }
        self.report_pending.store(false, Ordering::Release);
    }
}

/// The thread that answers misroute reports, so that an engine never waits for a layout
/// (which waits for every engine's answer to a probe, its own included).
fn keeper() -> &'static crossbeam_channel::Sender<Weak<Member>> {
    static KEEPER: OnceLock<crossbeam_channel::Sender<Weak<Member>>> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::bounded::<Weak<Member>>(64);
        let _ = super::thread::spawn_settled("softroce-group".into(), move || {
            for m in rx.iter() {
                if let Some(m) = m.upgrade() {
                    if !m.left.load(Ordering::Acquire) {
                        m.check();
                    } else {
                        m.report_pending.store(false, Ordering::Release);
                    }
                }
            }
        });
        tx
    })
}

/// Finds which member's socket sits at each index of the group's array, and attaches the
/// program for that layout. Holding the group's lock, so that no member joins or leaves by
/// the group's rules meanwhile:
///
/// 1. A temporary socket joins the group: the kernel appends it, at the last index.
/// 2. The last known program goes on the group again (a group whose members had all left
///    has none), so that probes steer by the index they name.
/// 3. A probe for each index goes to the address; the member at that index answers with its
///    slot, and the temporary socket's own probe comes back to it: that index is the end.
///    Indices past the end fall to the kernel's hash, so their answers are ignored. Probes
///    not answered are sent again, up to four rounds.
/// 4. The program for the slots found goes on the group, and the temporary socket leaves
///    (the last index: nothing moves).
fn relayout_locked(lock: &Locked, addr: SocketAddr, secret: &[u8; SECRET_LEN]) -> io::Result<()> {
    let mut t = lock.read();
    let temp = super::socket::reuseport_socket(addr)?;
    steering::attach(&temp, &steering::program(&t.map))?;
    temp.set_nonblocking(true)?;
    let reply = UdpSocket::bind(SocketAddr::new(addr.ip(), 0))?;
    reply.set_nonblocking(true)?;
    let reply_port = reply.local_addr()?.port();

    let mut found: BTreeMap<u32, u8> = BTreeMap::new();
    let mut end: Option<u32> = None;
    let mut hi = (t.slots.len() as u32 + 2).min(MAX_SLOTS as u32 + 1);
    let mut buf = [0u8; 64];
    for wait in PROBE_ROUNDS {
        let limit = end.unwrap_or(hi);
        let want: Vec<u32> = (0..limit).filter(|i| !found.contains_key(i)).collect();
        if want.is_empty() && end.is_some() {
            break;
        }
        for &i in &want {
            let _ = reply.send_to(&steering::probe(i, secret, reply_port), addr);
        }
        let until = Instant::now() + wait;
        loop {
            let done = end.is_some_and(|e| (0..e).all(|i| found.contains_key(&i)));
            let now = Instant::now();
            if done || now >= until {
                break;
            }
            wait_readable(&[&temp, &reply], until - now);
            while let Ok(n) = temp.recv(&mut buf) {
                if let Some((i, _)) = steering::parse_probe(&buf[..n], secret) {
                    end = Some(end.map_or(i, |e| e.min(i)));
                }
            }
            while let Ok(n) = reply.recv(&mut buf) {
                if let Some((i, slot)) = steering::parse_answer(&buf[..n], secret) {
                    found.insert(i, slot);
                }
            }
        }
        if end.is_none() {
            hi = (hi * 2).min(MAX_SLOTS as u32 + 1);
        }
    }
    let end = end.unwrap_or(0);
    let mut map: Vec<(u8, u32)> = found
        .into_iter()
        .filter(|&(i, _)| i < end)
        .map(|(i, s)| (s, i))
        .collect();
    map.sort_unstable();
    map.dedup_by_key(|(s, _)| *s);
    steering::attach(&temp, &steering::program(&map))?;
    drop(temp);
    t.map = map;
    lock.write(&t)
}

/// Waits until one of `socks` is readable or `timeout` passes.
fn wait_readable(socks: &[&UdpSocket], timeout: Duration) {
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid array of pollfd of the length given.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// The table of the group at `addr`, as last written.
fn read_table(addr: SocketAddr) -> io::Result<Table> {
    let dir = group_dir(addr)?;
    Ok(Table::parse(&std::fs::read_to_string(dir.join("table"))?))
}

/// The layout last probed for the group at `addr`: (slot, index) of each member found.
pub fn layout(addr: SocketAddr) -> io::Result<Vec<(u8, u32)>> {
    Ok(read_table(addr)?.map)
}

/// The CM service IDs listened on in the group at `addr`, with the process id of the member
/// that listens (a listener whose slot the table no longer holds is left out). The table
/// names a listener once its CM listens (`Device::listen`), so a REQ sent after this lists it
/// finds the listener: what a test waits for before it starts a client.
pub fn listener_pids(addr: SocketAddr) -> io::Result<Vec<(u64, u32)>> {
    let t = read_table(addr)?;
    Ok(t.listeners
        .iter()
        .filter_map(|(svc, slot)| Some((*svc, t.slots.get(slot)?.pid)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::cm::{CmDreq, CmMessage};

    #[test]
    fn a_table_reads_back_what_it_wrote() {
        let mut t = Table {
            secret: Some([0xab; SECRET_LEN]),
            ..Table::default()
        };
        t.slots.insert(
            0,
            Holder {
                pid: 12,
                start: 345,
            },
        );
        t.slots.insert(7, Holder { pid: 99, start: 1 });
        t.listeners.insert(0x0106_0000_0000_4a4b, 7);
        t.map = vec![(0, 1), (7, 0)];
        assert_eq!(Table::parse(&t.render()), t);
        // Lines it does not know, or that are cut short, are skipped.
        assert_eq!(Table::parse("slot 1 2\nbogus\nmap x 1\n"), Table::default());
    }

    #[test]
    fn a_dead_processs_slots_and_listeners_are_pruned() {
        let mut t = Table::default();
        t.slots.insert(0, Holder::me());
        // A PID that cannot exist (above pid_max's largest value).
        t.slots.insert(
            1,
            Holder {
                pid: 0x7fff_fff0,
                start: 1,
            },
        );
        // Our own PID with another start time: a recycled PID.
        t.slots.insert(
            2,
            Holder {
                pid: std::process::id(),
                start: 1,
            },
        );
        t.listeners.insert(5, 0);
        t.listeners.insert(6, 1);
        t.prune();
        assert_eq!(t.slots.keys().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(t.listeners.keys().copied().collect::<Vec<_>>(), vec![5]);
        assert_eq!(t.free_slot(), Some(1));
    }

    fn mad(msg: &CmMessage) -> [u8; crate::wire::mad::LEN] {
        let mut m = [0u8; crate::wire::mad::LEN];
        msg.emit(1, &mut m).unwrap();
        m
    }

    #[test]
    fn cm_messages_go_to_the_slot_of_the_id_their_recipient_chose() {
        let dreq = CmMessage::Dreq(CmDreq {
            local_comm_id: 0x0511_2233,
            remote_comm_id: 0x0344_5566,
            remote_qpn: 0x11,
            private_data: [0; crate::wire::cm::DREQ_PRIVATE_DATA_LEN],
        });
        let m = mad(&dreq);
        assert_eq!(route_mad(&m, 0, |_| None), MadRoute::Member(3));
        assert_eq!(route_mad(&m, 3, |_| None), MadRoute::Here);
        // Not a CM message: here, where the CM counts it.
        assert_eq!(route_mad(&[0u8; 10], 0, |_| Some(9)), MadRoute::Here);
    }

    #[test]
    fn a_req_goes_to_its_services_listener_or_to_nobody() {
        // A REQ as a peer's CM makes it.
        let p = crate::cm::ConnectParams::rc(0x0106_0000_0000_1234, 0x11, 0, [1; 16], [2; 16]);
        let mut peer = crate::cm::CmEndpoint::new(crate::cm::EndpointConfig::default());
        peer.connect(
            std::time::Duration::ZERO,
            "127.0.0.9:4791".parse().unwrap(),
            &p,
        )
        .unwrap();
        let m = peer.poll_transmit().unwrap().mad;
        let table = |svc: u64| (svc == 0x0106_0000_0000_1234).then_some(4);
        assert_eq!(route_mad(&m, 0, table), MadRoute::Member(4));
        assert_eq!(route_mad(&m, 4, table), MadRoute::Here);
        assert_eq!(route_mad(&m, 0, |_| None), MadRoute::Nobody);
    }

    #[test]
    fn a_forwarded_mad_keeps_its_source_and_bytes() {
        let secret = [3u8; SECRET_LEN];
        let mut m = [0u8; crate::wire::mad::LEN];
        m[0] = 1;
        m[255] = 0xee;
        for from in [
            "127.0.0.2:4791".parse::<SocketAddr>().unwrap(),
            "[fd00::1]:50000".parse().unwrap(),
        ] {
            let env = forward_envelope(9, &secret, from, &m).unwrap();
            // The steering program sends it by the slot in byte 4.
            assert_eq!(env[4], 9);
            let (f, mad) = parse_forward(&env, &secret).unwrap();
            assert_eq!((f, mad), (from, &m[..]));
            assert!(parse_forward(&env, &[4u8; SECRET_LEN]).is_none());
        }
        assert!(forward_envelope(1, &secret, "1.2.3.4:1".parse().unwrap(), &m[..10]).is_none());
    }
}
