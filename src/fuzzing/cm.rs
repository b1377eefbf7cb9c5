//! Fuzz target `cm`: two connection managers (A connects, B listens) driven by an arbitrary
//! interleaving of API calls, MAD deliveries, losses, duplicates, forged or corrupted MADs and
//! time, with what each endpoint sends parsed back as a CM message.
//!
//! Invariants, for any input:
//! - nothing panics, and every MAD an endpoint sends parses as the CM message it meant;
//! - an endpoint never holds more connections than its limit, nor a listener more undecided
//!   ones than its backlog;
//! - each connection is reported established at most once per side;
//! - after the input, with the wire cut and hours passing, every connection that waits on the
//!   peer is gone: only those waiting on the application (established, REP received, DREQ
//!   received) may remain, so no MAD sequence leaves state behind.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use crate::cm::{
    AcceptParams, CmEndpoint, CmEvent, ConnId, ConnState, ConnectParams, EndpointConfig, RejectInfo,
};
use crate::wire::cm::{rdma_tcp_service_id, CmMessage};
use crate::wire::mad;

const SERVICE: u64 = rdma_tcp_service_id(7174);
const MAX_CONNECTIONS: usize = 8;
const BACKLOG: usize = 3;
/// Steps per input: enough for several connections' lifetimes.
const MAX_STEPS: usize = 400;

#[derive(Debug, Arbitrary)]
enum Op {
    /// A connects (with a flag: private data too long).
    Connect(bool),
    /// B answers its oldest undecided connect request: accept (true) or reject.
    Answer(bool),
    /// A establishes its oldest REP received.
    Establish,
    /// Side (A: false, B: true) disconnects its n-th connection.
    Disconnect(bool, u8),
    /// Delivers the next MAD in flight towards A or B.
    Deliver(bool),
    /// Loses it.
    Lose(bool),
    /// Delivers it twice.
    Duplicate(bool),
    /// Delivers it with one byte changed.
    Corrupt(bool, u8, u8),
    /// Delivers a message from the fuzzer to A or B.
    Forge(bool, ForgedMad),
    /// Lets time pass (milliseconds, scaled up to about an hour).
    Wait(u16),
}

#[derive(Debug, Arbitrary)]
enum ForgedMad {
    /// Raw bytes (usually not a CM MAD at all).
    Raw(Vec<u8>),
    /// A well-formed header with an arbitrary attribute and body.
    Body(u16, Vec<u8>),
    /// A copy of the last MAD seen on the wire with its communication IDs replaced.
    Replay(u32, u32),
}

/// One side: its endpoint, what it must still decide, and what it was told.
struct Side {
    ep: CmEndpoint,
    addr: SocketAddr,
    pending: VecDeque<ConnId>,
    established: HashSet<ConnId>,
}

impl Side {
    fn new(seed: u32, last: u8) -> Side {
        Side {
            ep: CmEndpoint::new(EndpointConfig {
                comm_id_seed: Some(seed.into()),
                max_connections: MAX_CONNECTIONS,
                ..EndpointConfig::default()
            }),
            addr: SocketAddr::from(([127, 0, 0, last], 4791)),
            pending: VecDeque::new(),
            established: HashSet::new(),
        }
    }

    /// Takes the endpoint's events, checking that none is reported twice.
    fn drain_events(&mut self) {
        while let Some(e) = self.ep.poll_event() {
            match e {
                CmEvent::ConnectRequest { conn, .. } => {
                    // Read, as an application reads it: it leaves the listener's backlog.
                    self.ep.request_read(conn);
                    self.pending.push_back(conn)
                }
                CmEvent::RepReceived { conn, .. } => self.pending.push_back(conn),
                CmEvent::Established { conn } => {
                    assert!(self.established.insert(conn), "{conn:?} established twice");
                }
                CmEvent::TimewaitExit { conn }
                | CmEvent::Rejected { conn, .. }
                | CmEvent::Unreachable { conn } => {
                    self.pending.retain(|c| *c != conn);
                    self.established.remove(&conn);
                }
                CmEvent::SidrRequest { conn, .. } => self.ep.request_read(conn),
                CmEvent::Disconnected { .. } | CmEvent::SidrReply { .. } => {}
            }
        }
        assert!(self.ep.connections() <= MAX_CONNECTIONS);
    }
}

/// The target's body.
pub fn cm(data: &[u8]) {
    run(data);
}

/// What a run saw: connections established at A and at B.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    established_a: usize,
    established_b: usize,
}

fn run(data: &[u8]) -> Seen {
    let mut u = Unstructured::new(data);
    let mut w = World::new();
    for _ in 0..MAX_STEPS {
        let Ok(op) = Op::arbitrary(&mut u) else {
            break;
        };
        w.step(op);
    }
    w.settle();
    w.seen
}

/// Both sides, the MADs in flight between them, and the time.
struct World {
    a: Side,
    b: Side,
    /// MADs in flight towards A and towards B.
    to_a: VecDeque<[u8; mad::LEN]>,
    to_b: VecDeque<[u8; mad::LEN]>,
    last_seen: [u8; mad::LEN],
    now: Duration,
    seen: Seen,
}

impl World {
    fn new() -> World {
        let a = Side::new(1, 1);
        let mut b = Side::new(2, 2);
        b.ep.listen(SERVICE, BACKLOG)
            .expect("a fresh endpoint listens");
        World {
            a,
            b,
            to_a: VecDeque::new(),
            to_b: VecDeque::new(),
            last_seen: [0u8; mad::LEN],
            now: Duration::from_secs(1),
            seen: Seen::default(),
        }
    }

    /// Runs one operation, then moves what each side sent onto the wire and takes its events.
    fn step(&mut self, op: Op) {
        let now = self.now;
        match op {
            Op::Connect(too_long) => self.connect(too_long),
            Op::Answer(accept) => self.answer(accept),
            Op::Establish => {
                if let Some(conn) = self.a.pending.pop_front() {
                    let _ = self.a.ep.establish(conn);
                }
            }
            Op::Disconnect(on_b, n) => {
                let side = if on_b { &mut self.b } else { &mut self.a };
                let conns: Vec<ConnId> = side.established.iter().copied().collect();
                if !conns.is_empty() {
                    let c = conns[n as usize % conns.len()];
                    let _ = side.ep.disconnect(now, c);
                }
            }
            Op::Deliver(towards_b) => self.deliver(towards_b, 1),
            Op::Lose(towards_b) => self.deliver(towards_b, 0),
            Op::Duplicate(towards_b) => self.deliver(towards_b, 2),
            Op::Corrupt(towards_b, at, x) => {
                let (q, side, from) = self.towards(towards_b);
                if let Some(mut m) = q.pop_front() {
                    m[at as usize] ^= x.max(1);
                    side.ep.handle_mad(now, from, &m);
                }
            }
            Op::Forge(towards_b, f) => self.forge(towards_b, f),
            Op::Wait(ms) => {
                self.now += Duration::from_millis(u64::from(ms)) * 64;
                self.a.ep.handle_timeout(self.now);
                self.b.ep.handle_timeout(self.now);
            }
        }
        collect(&mut self.a, &mut self.to_b);
        collect(&mut self.b, &mut self.to_a);
        self.note_established();
        self.a.drain_events();
        self.b.drain_events();
        self.note_established();
        // Bounded in-flight queues: a peer cannot make an endpoint send without limit.
        assert!(self.to_a.len() + self.to_b.len() <= 64 * (MAX_STEPS + 1));
    }

    /// The queue towards a side, that side, and the address of the other.
    fn towards(
        &mut self,
        towards_b: bool,
    ) -> (&mut VecDeque<[u8; mad::LEN]>, &mut Side, SocketAddr) {
        if towards_b {
            (&mut self.to_b, &mut self.b, self.a.addr)
        } else {
            (&mut self.to_a, &mut self.a, self.b.addr)
        }
    }

    fn note_established(&mut self) {
        self.seen.established_a = self.seen.established_a.max(self.a.established.len());
        self.seen.established_b = self.seen.established_b.max(self.b.established.len());
    }

    /// A connects (with private data too long if `too_long`).
    fn connect(&mut self, too_long: bool) {
        let mut p = ConnectParams::rc(SERVICE, 0x11, 0x100, [1; 16], [2; 16]);
        if too_long {
            p.private_data = vec![0; 93];
        }
        let full = self.a.ep.connections() >= MAX_CONNECTIONS;
        let r = self.a.ep.connect(self.now, self.b.addr, &p);
        assert_eq!(r.is_err(), too_long || full);
    }

    /// B accepts or rejects its oldest undecided connect request.
    fn answer(&mut self, accept: bool) {
        let Some(conn) = self.b.pending.pop_front() else {
            return;
        };
        let _ = if accept {
            let p = AcceptParams {
                qpn: 0x22,
                starting_psn: 0x200,
                responder_resources: 1,
                initiator_depth: 1,
                rnr_retry_count: 7,
                srq: false,
                ca_guid: 2,
                private_data: vec![],
            };
            self.b.ep.accept(self.now, conn, &p).map(|_| ())
        } else {
            let info = RejectInfo {
                reason: 28,
                private_data: vec![],
            };
            self.b.ep.reject(conn, &info)
        };
    }

    /// Delivers the next MAD towards a side `times` times (0: loses it).
    fn deliver(&mut self, towards_b: bool, times: usize) {
        let now = self.now;
        let (q, side, from) = self.towards(towards_b);
        if let Some(m) = q.pop_front() {
            for _ in 0..times {
                side.ep.handle_mad(now, from, &m);
            }
            self.last_seen = m;
        }
    }

    /// Delivers a MAD the fuzzer made to a side.
    fn forge(&mut self, towards_b: bool, f: ForgedMad) {
        let bytes: Vec<u8> = match f {
            ForgedMad::Raw(v) => v,
            ForgedMad::Body(attr, body) => {
                let mut m = [0u8; mad::LEN];
                let _ = crate::wire::mad::MadRepr::cm_send(7, attr).emit(&mut m);
                let n = body.len().min(mad::DATA_LEN);
                m[mad::HEADER_LEN..mad::HEADER_LEN + n].copy_from_slice(&body[..n]);
                m.to_vec()
            }
            ForgedMad::Replay(local, remote) => {
                let mut m = self.last_seen;
                m[mad::HEADER_LEN..mad::HEADER_LEN + 4].copy_from_slice(&local.to_be_bytes());
                m[mad::HEADER_LEN + 4..mad::HEADER_LEN + 8].copy_from_slice(&remote.to_be_bytes());
                m.to_vec()
            }
        };
        let now = self.now;
        let (_, side, from) = self.towards(towards_b);
        side.ep.handle_mad(now, from, &bytes);
    }

    /// Cuts the wire and lets hours pass: whatever waits on the peer must end.
    fn settle(&mut self) {
        let (a, b) = (&mut self.a, &mut self.b);
        self.to_a.clear();
        self.to_b.clear();
        // Each pass runs at least the earliest deadline; every connection has at most its
        // retries and a time-wait.
        for _ in 0..(2 * MAX_CONNECTIONS * 20) {
            let next = [a.ep.poll_timeout(), b.ep.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else { break };
            self.now = self.now.max(t);
            a.ep.handle_timeout(self.now);
            b.ep.handle_timeout(self.now);
            while a.ep.poll_transmit().is_some() {}
            while b.ep.poll_transmit().is_some() {}
            a.drain_events();
            b.drain_events();
        }
        for side in [&*a, &*b] {
            for (conn, state) in side.ep.connection_states() {
                assert!(
                    matches!(
                        state,
                        ConnState::Established | ConnState::RepRcvd | ConnState::DreqRcvd
                    ),
                    "{conn:?} left in {state:?} with nobody to answer"
                );
            }
        }
    }
}

/// Moves an endpoint's MADs onto the wire, checking each parses as a CM message.
fn collect(side: &mut Side, q: &mut VecDeque<[u8; mad::LEN]>) {
    while let Some(o) = side.ep.poll_transmit() {
        assert!(
            CmMessage::parse(&o.mad).is_ok(),
            "an endpoint sent a MAD that does not parse"
        );
        q.push_back(o.mad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shaped seeds do what their names say: each whole connection comes up at both ends
    /// despite its loss or duplicate, and ends without leftovers (checked by `run` itself).
    #[test]
    fn shaped_seeds_connect() {
        for (name, seed) in crate::fuzzing::seeds::cm_shaped() {
            let seen = run(&seed);
            if name == "rejected_then_abandoned" {
                assert_eq!(seen, Seen::default(), "{name}");
            } else {
                assert_eq!(
                    seen,
                    Seen {
                        established_a: 1,
                        established_b: 1
                    },
                    "{name}"
                );
            }
        }
    }
}
