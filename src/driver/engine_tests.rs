//! The engine's own tests: a scripted link under the transmit batch (back-pressure, loss,
//! GSO sealing, gathered payloads) and the receive batch.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;

use super::*;
use crate::driver::link::{GatherRef, InDatagram, OutDatagram};
use crate::transport::{Gather, Transmit};
use crate::wire::ICRC_LEN;

/// A link whose sends fail with the scripted errors first, then succeed and are recorded
/// with the GSO grouping the engine must seal for.
struct Scripted {
    errors: VecDeque<io::ErrorKind>,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    gso: usize,
    /// Takes gathered payloads (and assembles them as the kernel would).
    gather: bool,
}

impl Link for Scripted {
    fn local_addr(&self) -> SocketAddr {
        "127.0.0.1:4791".parse().unwrap()
    }
    fn prepare_source_port(&mut self, wanted: u16) -> io::Result<u16> {
        Ok(wanted)
    }
    fn send(&mut self, _now: Instant, d: &OutDatagram) -> io::Result<()> {
        if let Some(kind) = self.errors.pop_front() {
            return Err(kind.into());
        }
        self.sent.lock().unwrap().push(d.payload.to_vec());
        Ok(())
    }
    fn recv(&mut self, _now: Instant, _buf: &mut [u8]) -> io::Result<Option<InDatagram>> {
        Ok(None)
    }
    fn register(&mut self, _r: &mio::Registry, _t: mio::Token) -> io::Result<()> {
        Ok(())
    }
    fn gso_max_segments(&self) -> usize {
        self.gso
    }
    fn gathers(&self) -> bool {
        self.gather
    }
    fn send_gathered(
        &mut self,
        now: Instant,
        ds: &[OutDatagram],
        gathers: &[Option<GatherRef>],
    ) -> (usize, Option<io::Error>) {
        for (i, d) in ds.iter().enumerate() {
            let Some(g) = gathers.get(i).copied().flatten() else {
                if let Err(e) = self.send(now, d) {
                    return (i, Some(e));
                }
                continue;
            };
            let mut whole = d.payload[..g.at].to_vec();
            // SAFETY: the engine keeps the region pinned across the call and `ptr` is
            // valid for `len` bytes (GatherRef); nothing writes the region in this test.
            whole.extend_from_slice(unsafe { std::slice::from_raw_parts(g.ptr, g.len) });
            whole.extend_from_slice(&d.payload[g.at..]);
            self.sent.lock().unwrap().push(whole);
        }
        (ds.len(), None)
    }
}

fn engine(link: Scripted) -> Engine {
    let poll = mio::Poll::new().unwrap();
    let waker = mio::Waker::new(poll.registry(), WAKER).unwrap();
    let dev = Arc::new(Device::new(
        "127.0.0.1:4791".parse().unwrap(),
        4791,
        waker,
        false,
    ));
    Engine::new(dev, poll.registry(), Box::new(link)).unwrap()
}

/// Puts a sealed 64-byte packet (a BTH, zeros, its ICRC for identification 0) in the batch.
fn queue_packet(e: &mut Engine, tag: u8) {
    let src: SocketAddr = "127.0.0.1:49152".parse().unwrap();
    let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
    let len = 64;
    let slot = e.tx.free_slot().unwrap();
    slot[..len].fill(0);
    slot[0] = 0x04; // SEND ONLY
    slot[12] = tag;
    let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (src.ip(), dst.ip()) else {
        unreachable!()
    };
    let ip = crate::wire::icrc::ipv4_header_for_socket(s, d, 8 + len as u16, true);
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&(8 + len as u16).to_be_bytes());
    let crc = crate::wire::icrc::compute(&ip, &udp, &slot[..len - 4]).unwrap();
    slot[len - 4..len].copy_from_slice(&crate::wire::icrc::to_wire(crc));
    e.tx.meta.push(Transmit {
        len,
        dst,
        src_port: src.port(),
        hop_limit: 0,
        traffic_class: 0,
    });
    e.tx.ids.push(0);
    e.tx.gathers.push(None);
}

#[test]
fn a_full_batch_of_coalesced_datagrams_keeps_every_packet() {
    // RX_BATCH datagrams, each as many small packets as UDP GRO coalesces (64): none may
    // be dropped for want of packet room (they were past the 512th, without a counter).
    let mut batch = RxBatch::new(RX_BATCH, RX_SLOT, RX_PACKETS);
    let at: SocketAddr = "127.0.0.1:4791".parse().unwrap();
    for _ in 0..RX_BATCH {
        let d = InDatagram {
            len: 64 * 60,
            src: at,
            dst: at,
            hop_limit: 0,
            traffic_class: 0,
        };
        batch.push_split(d, 60);
    }
    assert_eq!(batch.len(), RX_BATCH * 64);
    assert!(batch.is_full());
}

#[test]
fn eagain_is_back_pressure_not_loss() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut e = engine(Scripted {
        errors: VecDeque::from([io::ErrorKind::WouldBlock]),
        sent: Arc::clone(&sent),
        gso: 1,
        gather: false,
    });
    queue_packet(&mut e, 1);
    queue_packet(&mut e, 2);
    e.flush();
    assert!(e.blocked, "EAGAIN blocks the engine's transmission");
    assert!(e.tx.pending(), "the packets are kept");
    assert_eq!(e.dev.counters.get("send_err"), Some(0));
    // Send space again: both go, in order, and nothing was counted lost.
    e.blocked = false;
    e.flush();
    assert!(!e.blocked && !e.tx.pending());
    let sent = sent.lock().unwrap();
    assert_eq!(sent.iter().map(|p| p[12]).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(e.dev.counters.get("send_err"), Some(0));
}

/// A UD/UC send completion held for packets still in the batch reaches its CQ only once
/// they were handed to the link; closing the device (`finish`) sends them and releases it.
#[test]
fn unreliable_send_completions_wait_for_their_packets_to_leave() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut e = engine(Scripted {
        errors: VecDeque::from([io::ErrorKind::WouldBlock]),
        sent: Arc::clone(&sent),
        gso: 1,
        gather: false,
    });
    let cq = Arc::new(CqInner::new(16, &e.dev));
    let wc = WorkCompletion {
        wr_id: 7,
        status: crate::ib::WcStatus::Success,
        opcode: crate::ib::WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        qp_num: 5,
        src_qp: 0,
        solicited: false,
        grh: false,
        invalidated_rkey: None,
        network_hdr_type: None,
        tm: None,
    };
    queue_packet(&mut e, 1);
    e.held_wc.push((Arc::clone(&cq), wc));
    e.flush();
    assert!(e.blocked && e.tx.pending());
    assert_eq!(
        cq.len(),
        0,
        "no completion while its datagram is still ours"
    );
    e.finish();
    assert!(!e.tx.pending(), "closing sends what is left");
    assert_eq!(sent.lock().unwrap().len(), 1);
    let mut out = [wc; 2];
    assert_eq!(cq.poll(&mut out).unwrap(), 1);
    assert_eq!(out[0].wr_id, 7);
}

#[test]
fn other_send_errors_lose_one_packet_and_the_rest_go() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut e = engine(Scripted {
        errors: VecDeque::from([io::ErrorKind::PermissionDenied]),
        sent: Arc::clone(&sent),
        gso: 1,
        gather: false,
    });
    for tag in 1..=3 {
        queue_packet(&mut e, tag);
    }
    e.flush();
    assert!(!e.blocked && !e.tx.pending());
    assert_eq!(e.dev.counters.get("send_err"), Some(1));
    let tags: Vec<u8> = sent.lock().unwrap().iter().map(|p| p[12]).collect();
    assert_eq!(tags, [2, 3]);
}

#[test]
fn gso_runs_are_sealed_for_the_identifications_the_kernel_gives_segments() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut e = engine(Scripted {
        errors: VecDeque::new(),
        sent: Arc::clone(&sent),
        gso: 3,
        gather: false,
    });
    for tag in 0..5 {
        queue_packet(&mut e, tag);
    }
    e.flush();
    // Runs of at most 3: identifications 0, 1, 2, then 0, 1. The receiver's check finds
    // each one (RecoveredId for the non-zero ones).
    let src: SocketAddr = "127.0.0.1:49152".parse().unwrap();
    let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
    let verdicts: Vec<_> = sent
        .lock()
        .unwrap()
        .iter()
        .map(|p| crate::wire::icrc::verify_socket_datagram(src, dst, p))
        .collect();
    use crate::wire::icrc::SocketVerdict::{Exact, RecoveredId};
    assert_eq!(
        verdicts,
        [Exact, RecoveredId(1), RecoveredId(2), Exact, RecoveredId(1)]
    );
}

/// Puts a WRITE MIDDLE in the batch whose 1000-byte payload stays in `region` from
/// `offset` (a gathered packet, sealed for identification 0).
fn queue_gathered(e: &mut Engine, region: &Arc<crate::memory::SharedBytes>, offset: u64) {
    let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
    let (at, len) = (12, 1000);
    let t = Transmit {
        len: at + len + ICRC_LEN,
        dst,
        src_port: 49152,
        hop_limit: 0,
        traffic_class: 0,
    };
    let g = Gather {
        bytes: Arc::clone(region),
        offset,
        len,
        at,
    };
    let slot = e.tx.free_slot().unwrap();
    slot[..at + ICRC_LEN].fill(0);
    slot[0] = 0x07; // RC RDMA WRITE MIDDLE
    e.endpoint.seal_gathered(&t, &g, slot);
    e.tx.meta.push(t);
    e.tx.ids.push(0);
    e.tx.gathers.push(Some(g));
}

/// Gathered packets go out whole (headers, the region's bytes, ICRC), sealed for the GSO
/// identifications of their runs; one whose region the application took back is lost
/// and counted, and the others still go.
#[test]
fn gathered_packets_are_resealed_and_a_revoked_region_loses_only_its_own() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let mut e = engine(Scripted {
        errors: VecDeque::new(),
        sent: Arc::clone(&sent),
        gso: 3,
        gather: true,
    });
    let owned = Arc::new(crate::memory::SharedBytes::new(4096));
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 5 + 2) as u8).collect();
    owned.write(0, &pattern).unwrap();
    let mut app = vec![0xA5u8; 2048];
    // SAFETY: `app` outlives the region, which is revoked (and dropped) before it.
    let foreign =
        Arc::new(unsafe { crate::memory::SharedBytes::foreign(app.as_mut_ptr(), app.len()) });
    for k in 0..4 {
        queue_gathered(&mut e, &owned, k * 1000);
    }
    queue_gathered(&mut e, &foreign, 0);
    foreign.revoke();
    e.flush();
    assert!(!e.tx.pending());
    assert_eq!(e.dev.counters.get("send_err"), Some(1), "the revoked one");
    let src: SocketAddr = "127.0.0.1:49152".parse().unwrap();
    let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
    let sent = sent.lock().unwrap();
    use crate::wire::icrc::SocketVerdict::{Exact, RecoveredId};
    let verdicts: Vec<_> = sent
        .iter()
        .map(|p| crate::wire::icrc::verify_socket_datagram(src, dst, p))
        .collect();
    assert_eq!(verdicts, [Exact, RecoveredId(1), RecoveredId(2), Exact]);
    for (k, p) in sent.iter().enumerate() {
        assert_eq!(&p[12..1012], &pattern[k * 1000..k * 1000 + 1000]);
    }
    drop(foreign);
    drop(app);
}
