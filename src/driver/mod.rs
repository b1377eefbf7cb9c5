//! The driver: the UDP socket, the engine thread, timers, the link layers around the socket
//! (capture, impairment), and the state the engine shares with the verbs API above it (the
//! device's QP and MR tables, doorbell, completion queues). `open` starts a device for
//! `verbs::Context::open`.

pub mod capture;
mod cq;
pub(crate) mod device;
pub(crate) mod engine;
mod engine_thread;
pub mod fork;
pub mod group;
pub(crate) mod gsi;
pub mod impair;
pub mod interface;
pub mod link;
mod multicast;
mod qp_table;
mod socket;
mod standby;
pub mod stats;
pub mod steering;
pub mod thread;
mod timer;
mod tx;
pub mod udp;

use crate::transport::cc::CcConfig;
use std::fs::File;
use std::io::BufWriter;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) use cq::CqInner;
pub use cq::{clock_ns, Stamp};
pub use device::node_guid;
pub use impair::{Bottleneck, Direction, ImpairLink, Impairment};
pub use link::{InDatagram, Link, OutDatagram, RxBatch};
pub use udp::UdpLink;

use crate::ib::VerbsError;
use device::Device;

type Result<T> = core::result::Result<T, VerbsError>;

/// The engine thread's spin before it sleeps, by default ([`DeviceConfig::idle_spin`]): as
/// Linux's `net.core.busy_poll` suggests for sockets, 50 us, a few one-way trips on loopback.
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(50);
/// The longest spin [`DeviceConfig::idle_spin`] takes; a longer one is cut to it. A spin of a
/// second is already a busy loop (`busy_poll` is the mode for that).
pub const MAX_IDLE_SPIN: Duration = Duration::from_secs(1);

/// How to open a device context.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// Local address and RoCEv2 UDP port (4791).
    pub addr: SocketAddr,
    /// Capture every packet to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Impair the link (testing).
    pub impairment: Option<Impairment>,
    /// The UDP port peers receive RoCE on; `None`: the same as ours (4791 on both ends, as
    /// RoCEv2 has it). Two devices that share an IP address (e.g. on ::1, the only IPv6
    /// loopback address) need different ports and so must name each other's.
    pub remote_port: Option<u16>,
    /// Busy-poll mode: the application threads that poll CQs and post run the engine's passes
    /// themselves (the engine's own thread only covers timers while nobody polls), and waits
    /// on the context's CQs spin instead of sleeping. Lower latency for a CPU per thread.
    pub busy_poll: bool,
    /// Without busy-poll: how long the engine thread keeps looking for a datagram or a
    /// doorbell after a pass before it sleeps (`DEFAULT_IDLE_SPIN`; zero: never). It spins
    /// only while traffic is dense enough for that to pay (the engine's `wait` says how), so
    /// an idle device costs no CPU. Saves the wake-up per packet that otherwise bounds a
    /// ping-pong's latency and a window-limited message rate. At most `MAX_IDLE_SPIN`.
    pub idle_spin: Duration,
    /// Send runs of equal-sized packets with UDP GSO where the kernel offers it (the
    /// default); `false` sends each packet as its own datagram (for comparison, or for a
    /// path whose segmentation does not number IPv4 identifications from 0 as Linux does).
    pub gso: bool,
    /// Congestion control (spec-notes/congestion.md): ECT(0) on every packet, CNPs for CE
    /// marks, DCQCN pacing. Off by default (`CcConfig::default()`: `enabled: false`), as kernel
    /// rxe, which neither sends nor reacts to CNPs; `CcConfig::on()` for the defaults.
    pub cc: CcConfig,
    /// Share the address with every other device context of this user that opens it, in
    /// this process or another, as every process shares rxe0 (driver/group.rs; the default).
    /// `false`: hold the address alone, as before; a second context then fails to open it
    /// (AddrInUse). `SOFTROCE_SHARE=0` in the environment turns sharing off for every device.
    /// An address with port 0 (a port the kernel chooses) is never shared.
    pub share: bool,
}

impl DeviceConfig {
    /// A device at `addr` with no capture and no impairment.
    pub fn new(addr: SocketAddr) -> DeviceConfig {
        DeviceConfig {
            addr,
            pcap: None,
            impairment: None,
            remote_port: None,
            busy_poll: false,
            idle_spin: DEFAULT_IDLE_SPIN,
            gso: true,
            cc: CcConfig::default(),
            share: true,
        }
    }
}

/// Opens a device: binds the socket, builds the link stack and starts the engine thread.
/// Returns the state shared with the engine and the engine's thread.
///
/// Layering: socket <- impairment <- capture <- engine. The capture therefore records
/// what the engine sent and received after impairment on the receive side and before it
/// on the send side: exactly what the transport saw.
pub(crate) fn open(cfg: &DeviceConfig) -> Result<(Arc<Device>, JoinHandle<()>)> {
    let poll = mio::Poll::new()?;
    let waker = mio::Waker::new(poll.registry(), engine::WAKER)?;
    let share = cfg.share && cfg.addr.port() != 0 && sharing_enabled();
    let (member, mut udp) = if share {
        let (m, udp) = group::Member::join(cfg.addr, UdpLink::bind_shared)
            .map_err(|e| VerbsError::Io(bind_error(cfg.addr, &e)))?;
        (Some(m), udp)
    } else {
        let udp = UdpLink::bind(cfg.addr)
            .map_err(|e| VerbsError::Io(format!("cannot bind {}: {e}", cfg.addr)))?;
        (None, udp)
    };
    if !cfg.gso {
        udp.disable_gso();
    }
    if std::env::var_os("SOFTROCE_GATHER").is_some_and(|v| v == "1") {
        // RC payloads sent from their regions: measured, not yet a gain (udp.rs).
        udp.enable_gather();
    }
    // GRO only on a bare link (the wrappers receive one datagram at a time), and for a shared
    // device only on a loopback interface: a NIC's GRO coalesces a peer's datagrams of one flow
    // whatever QPs they name, and the kernel steers the coalesced datagram once, by its first
    // segment, so segments for another member's QPs would reach this one and be lost
    // (spec-notes/shared-device.md rule 3). Loopback coalesces nothing; its GSO sends keep to
    // one slot each (`link::GsoKey::steer`).
    let gro_steers_right =
        member.is_none() || interface::interface_of(cfg.addr.ip()).is_ok_and(|i| i.loopback);
    if cfg.impairment.is_none() && cfg.pcap.is_none() && gro_steers_right {
        udp.enable_gro();
    }
    let local = udp.local_addr();
    let remote_port = cfg.remote_port.unwrap_or(local.port());
    let mut dev = Device::new(local, remote_port, waker, cfg.busy_poll);
    if !cfg.busy_poll {
        // A thread waiting on a CQ runs the engine for as long as the engine thread would
        // spin (standby.rs).
        dev.standby = standby::Standby::new(cfg.idle_spin.min(MAX_IDLE_SPIN));
    }
    if let Some(m) = &member {
        dev.set_member(Arc::clone(m), udp.rx_fd());
    }
    let dev = Arc::new(dev);
    stats::register(&dev);
    let mut link: Box<dyn Link + Send> = Box::new(udp);
    if let Some(imp) = cfg.impairment {
        link = Box::new(ImpairLink::new(link, imp, Arc::clone(&dev.counters)));
    }
    if let Some(path) = &cfg.pcap {
        let f = File::create(path)
            .map_err(|e| VerbsError::Io(format!("cannot create {}: {e}", path.display())))?;
        link = Box::new(capture::CaptureLink::new(link, BufWriter::new(f))?);
    }
    link.register(poll.registry(), engine::SOCKET)?;
    let mut engine = engine::Engine::new(Arc::clone(&dev), poll.registry(), link)?;
    engine.set_congestion_control(cfg.cc);
    // The engine sits in the device in both modes: whoever holds its lock runs a pass
    // (engine_thread.rs).
    *dev.engine.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(engine));
    let name = format!("softroce-{local}");
    let d = Arc::clone(&dev);
    let handle = if cfg.busy_poll {
        thread::spawn_settled(name, move || engine_thread::run_busy(d))
    } else {
        let spin = cfg.idle_spin;
        thread::spawn_settled(name, move || engine_thread::run(d, poll, spin))
    };
    let handle = match handle {
        Ok(h) => h,
        Err(e) => {
            dev.shut_down(None);
            return Err(e.into());
        }
    };
    // The engine answers probes now: find where every member sits, this one included, and
    // steer by it, before the first QP can be made.
    if let Some(m) = &member {
        if let Err(e) = m.relayout() {
            dev.shut_down(Some(handle));
            return Err(VerbsError::Io(format!(
                "cannot steer {}'s datagrams to this process: {e}",
                cfg.addr
            )));
        }
    }
    Ok((dev, handle))
}

/// Whether devices share their addresses with other contexts (driver/group.rs): yes unless
/// `SOFTROCE_SHARE=0` says otherwise (`DeviceConfig::share` turns it off for one device).
pub fn sharing_enabled() -> bool {
    !std::env::var_os("SOFTROCE_SHARE").is_some_and(|v| v == "0")
}

/// What a failed bind of a shared device says: who may hold the address.
fn bind_error(addr: SocketAddr, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            "cannot bind {addr}: Address already in use (by another user's softroce, by a \
             program that is not softroce, or by a softroce that holds it alone: \
             SOFTROCE_SHARE=0)"
        )
    } else {
        format!("cannot bind {addr}: {e}")
    }
}
