//! Seeded simulation: thousands of runs of a mixed workload over a link that loses,
//! duplicates and reorders, each checked against the RC invariants (issue #4):
//! every message delivered exactly once and in order with its data intact, every WR
//! completed exactly once in posting order, atomics executed once, queues bounded (checked
//! by the harness after every step), nothing left behind; and retry exhaustion ending in
//! the right statuses with the QP flushed.
//!
//! `SOFTROCE_SIM_SEEDS` raises the seed count for a longer soak (the default keeps the
//! suite to a few seconds).

use std::time::Duration;

use super::*;

fn seeds(default: u64) -> u64 {
    std::env::var("SOFTROCE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Small deterministic generator for the workload (the link has its own).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Send,
    Write,
    Read,
    FetchAdd,
    /// IBTA 1.5 ATOMIC WRITE of 8 bytes into the WR's slot on B.
    AtomicWrite,
}

/// Slot size per WR in both regions (the largest message is 4 MTUs of 4096 at most).
const SLOT: u64 = 0x4000;
const WRS: u64 = 12;

fn run_seed(seed: u64) {
    let mut g = Gen(seed ^ 0xD1B5_4A32_D192_ED03);
    let mtu = MTUS[g.below(5) as usize];
    let mtu_bytes = mtu.bytes();
    let mut p = Pair::with(mtu, 6, 7, 7);
    p.rng ^= seed.wrapping_mul(0x1234_5678_9ABC_DEF1);
    p.loss_permille = g.below(200);
    p.dup_permille = g.below(50);
    p.reorder_permille = g.below(50);
    let rkey = p.b.mr.rkey;
    let mut kinds = Vec::new();
    let mut lens = Vec::new();
    for i in 0..WRS {
        let kind = [
            Kind::Send,
            Kind::Write,
            Kind::Read,
            Kind::FetchAdd,
            Kind::AtomicWrite,
        ][g.below(5) as usize];
        let len = match kind {
            Kind::FetchAdd | Kind::AtomicWrite => 8,
            _ => match g.below(4) {
                0 => g.below(3) as u32,
                1 => mtu_bytes,
                _ => g.below(4 * mtu_bytes as u64) as u32 + 1,
            },
        };
        let data = pattern(seed * 100 + i, len as usize);
        let slot = i * SLOT;
        let op = match kind {
            Kind::Send => {
                p.a.mr.storage.write(slot, &data).unwrap();
                post_recv(&mut p, i, slot, SLOT as u32);
                WrOpcode::Send
            }
            Kind::Write => {
                p.a.mr.storage.write(slot, &data).unwrap();
                WrOpcode::RdmaWrite {
                    remote_addr: IOVA + slot,
                    rkey,
                }
            }
            Kind::Read => {
                p.b.mr.storage.write(slot, &data).unwrap();
                WrOpcode::RdmaRead {
                    remote_addr: IOVA + slot,
                    rkey,
                }
            }
            Kind::FetchAdd => WrOpcode::AtomicFetchAdd {
                remote_addr: IOVA + 0xF_0000,
                rkey,
                add: 1 << i,
            },
            Kind::AtomicWrite => WrOpcode::AtomicWrite {
                remote_addr: IOVA + slot,
                rkey,
                data: data[..8].try_into().unwrap(),
            },
        };
        post_send(&mut p, i, op, slot, len);
        kinds.push(kind);
        lens.push(len);
    }
    p.drive();
    let ctx = format!(
        "seed {seed} mtu {mtu_bytes} loss {} dup {} reorder {}",
        p.loss_permille, p.dup_permille, p.reorder_permille
    );
    // Every WR completed exactly once, in posting order, successfully.
    let ids: Vec<u64> = p.a.send_wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..WRS).collect::<Vec<_>>(), "{ctx}");
    if !p.a.send_wcs.iter().all(|w| w.status == WcStatus::Success) {
        for s in &p.log {
            eprintln!("{s:?}");
        }
        panic!("{ctx}: {:?}", p.a.send_wcs);
    }
    // Every SEND delivered exactly once, in order, with its length.
    let sends: Vec<(u64, u32)> = (0..WRS)
        .filter(|&i| kinds[i as usize] == Kind::Send)
        .map(|i| (i, lens[i as usize]))
        .collect();
    let got: Vec<(u64, u32)> = p.b.recv_wcs.iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(got, sends, "{ctx}");
    assert!(p.b.recv_wcs.iter().all(|w| w.status == WcStatus::Success));
    // Data intact where it landed.
    let mut added = 0u64;
    for i in 0..WRS {
        let len = lens[i as usize] as usize;
        let want = pattern(seed * 100 + i, len);
        let slot = i * SLOT;
        match kinds[i as usize] {
            Kind::Send | Kind::Write | Kind::AtomicWrite => {
                assert_eq!(
                    p.b.mr.storage.to_vec(slot, len).unwrap(),
                    want,
                    "{ctx} wr {i}"
                )
            }
            Kind::Read => {
                assert_eq!(
                    p.a.mr.storage.to_vec(slot, len).unwrap(),
                    want,
                    "{ctx} wr {i}"
                )
            }
            Kind::FetchAdd => {
                // The original value returned is the sum of the adds before it.
                assert_eq!(
                    p.a.mr.storage.load_u64(slot).unwrap(),
                    added,
                    "{ctx} wr {i}"
                );
                added += 1 << i;
            }
        }
    }
    // Each fetch-add executed exactly once: the bits of distinct powers of two.
    assert_eq!(p.b.mr.storage.load_u64(0xF_0000).unwrap(), added, "{ctx}");
    // Nothing left behind.
    for s in [&p.a, &p.b] {
        assert_eq!(s.qp.send_queue_len(), 0, "{ctx}");
        assert_eq!(s.qp.resp.queue_lens().1, 0, "{ctx}: responses left queued");
        assert_eq!(s.qp.state(), QpState::Rts, "{ctx}");
    }
    assert!(p.wire.is_empty(), "{ctx}");
    assert!(
        p.max_in_flight <= 1024,
        "{ctx}: {} in flight",
        p.max_in_flight
    );
}

#[test]
fn thousands_of_lossy_seeds_keep_every_invariant() {
    for seed in 0..seeds(2000) {
        run_seed(seed);
    }
}

#[test]
fn retry_exhaustion_across_seeds_fails_one_wr_and_flushes_the_rest() {
    for seed in 0..seeds(2000) / 4 {
        let mut g = Gen(seed);
        let retry = g.below(7) as u8;
        let mut p = Pair::with(Mtu::Mtu1024, 6, retry, 7);
        p.rng ^= seed;
        let rkey = p.b.mr.rkey;
        // The link dies after a random number of packets have gone through.
        let cut_after = g.below(40) as usize;
        let n = 10u64;
        for i in 0..n {
            post_send(
                &mut p,
                i,
                WrOpcode::RdmaWrite {
                    remote_addr: IOVA + i * 0x1000,
                    rkey,
                },
                0,
                (g.below(3000) + 1) as u32,
            );
        }
        let counter = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let c = counter.clone();
        // Drop every packet, both ways, once `cut_after` packets have been seen.
        for to_b in [true, false] {
            let c = c.clone();
            p.fault(to_b, Action::Drop, u32::MAX, move |_| {
                c.set(c.get() + 1);
                c.get() > cut_after
            });
        }
        p.drive();
        let ctx = format!("seed {seed} retry {retry} cut after {cut_after}");
        let st: Vec<WcStatus> = p.a.send_wcs.iter().map(|w| w.status).collect();
        let ids: Vec<u64> = p.a.send_wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(
            ids,
            (0..n).collect::<Vec<_>>(),
            "{ctx}: every WR exactly once"
        );
        let ok = st.iter().take_while(|s| **s == WcStatus::Success).count();
        if ok < n as usize {
            assert_eq!(st[ok], WcStatus::RetryExcErr, "{ctx}: {st:?}");
            assert!(
                st[ok + 1..].iter().all(|s| *s == WcStatus::WrFlushErr),
                "{ctx}: {st:?}"
            );
            assert_eq!(p.a.qp.state(), QpState::Err, "{ctx}");
            assert_eq!(p.a.qp.send_queue_len(), 0, "{ctx}");
            // The budget: retry_cnt + 1 timeouts of 262 us (timeout 6), well under 5 ms.
            assert_eq!(
                p.a.qp.counters.get("timeouts").unwrap(),
                retry as u64 + 1,
                "{ctx}"
            );
        }
        assert!(p.now < Duration::from_millis(5), "{ctx}: {:?}", p.now);
    }
}

/// 100 WRITEs of 64 KiB at MTU 4096 over a link losing `loss_permille` each way; returns
/// (packets A retransmitted, A's packets lost, A's packets with AckReq).
fn bulk_writes(loss_permille: u64) -> (u64, u64, u64) {
    let mut p = Pair::with(Mtu::Mtu4096, 14, 7, 7);
    p.loss_permille = loss_permille;
    let rkey = p.b.mr.rkey;
    for i in 0..100u64 {
        let w = WrOpcode::RdmaWrite {
            remote_addr: IOVA,
            rkey,
        };
        post_send(&mut p, i, w, 0, 65536);
    }
    p.drive();
    assert_eq!(p.a.send_wcs.len(), 100);
    assert!(p.a.send_wcs.iter().all(|w| w.status == WcStatus::Success));
    let sent_a = p.log.iter().filter(|s| s.to_b);
    let lost = sent_a.clone().filter(|s| s.dropped).count() as u64;
    let ack_req = sent_a.filter(|s| s.ack_req).count() as u64;
    let retrans = p.a.qp.counters.get("retransmit_pkts").unwrap();
    (retrans, lost, ack_req)
}

#[test]
fn without_loss_the_requester_behaves_exactly_as_rxe() {
    // rxe's window of 128 PSNs and AckReq only on each message's last packet (16 packets
    // per message: the 64-packet rule never triggers).
    let (retrans, lost, ack_req) = bulk_writes(0);
    assert_eq!((retrans, lost), (0, 0));
    assert_eq!(ack_req, 100);
}

#[test]
fn go_back_n_waste_stays_bounded_under_loss() {
    // With rxe's fixed 128-PSN window this run retransmitted 23,577 packets (9 per loss,
    // 2,578 losses: retransmissions get lost too) to deliver 1,600; the loss window
    // (window.rs) brings it to about 1,100 (4 per loss, 278 losses).
    let (retrans, lost, ack_req) = bulk_writes(100);
    assert!(lost > 100, "{lost}");
    assert!(
        retrans <= 5 * lost,
        "{retrans} retransmissions for {lost} losses"
    );
    assert!(retrans < 1600, "{retrans}: more than the data itself");
    // While recovering, ACKs are requested every half window.
    assert!(ack_req > 200, "{ack_req}");
}
