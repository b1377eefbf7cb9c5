//! Steering a shared device's datagrams to the process that owns their QP: the classic BPF
//! program a group of SO_REUSEPORT sockets on one address runs for every datagram to the port
//! (`SO_ATTACH_REUSEPORT_CBPF`, which needs no privilege), and the probe datagram the group
//! uses to learn which socket sits at which index of the kernel's array
//! (spec-notes/shared-device.md says why and how).
//!
//! The kernel runs the program with the packet's data starting at the UDP payload, the BTH:
//! its return value is an index into the group's socket array, and a value past the array's
//! end falls back to the ordinary hash of the 4-tuple (net/core/sock_reuseport.c,
//! run_bpf_filter / reuseport_select_sock). A load past the datagram's end ends the program
//! with 0.
//!
//! The program: a probe (its first word [`PROBE_MAGIC`]) goes to the index its second word
//! names; a forwarded MAD ([`FORWARD_MAGIC`]) goes by the slot in its fifth byte; any other
//! datagram goes by the top byte of the BTH's destination QPN (byte 5), which is the slot of
//! the member that made the QP ([`qpn_slot`]). Slots go to indices through the table of the
//! group's layout; a slot not in the table, to the hash.

use std::io;
use std::os::fd::AsRawFd;

/// The first word of a probe datagram: 0xFF, "SRP". 0xFF is no BTH opcode (0xC0-0xFF are
/// manufacturer-specific, and neither rxe nor softroce takes one), so no RoCE packet starts so.
pub const PROBE_MAGIC: u32 = 0xFF53_5250;
/// The first word of a forwarded MAD's envelope: 0xFF, "SRF" (driver/group.rs).
pub const FORWARD_MAGIC: u32 = 0xFF53_5246;
/// The first word of a probe's answer: 0xFF, "SRA".
pub const ANSWER_MAGIC: u32 = 0xFF53_5241;
/// A probe's length: magic, index, the group's secret, the port to answer to.
pub const PROBE_LEN: usize = 4 + 4 + SECRET_LEN + 2;
/// An answer's length: magic, index, the group's secret, the answering member's slot.
pub const ANSWER_LEN: usize = 4 + 4 + SECRET_LEN + 1;
/// The group's secret: only a process of the user who owns the group's directory (mode 0700)
/// can read it, so a probe or answer from anyone else is ignored.
pub const SECRET_LEN: usize = 16;
/// Members a group holds at most: the slot is a QPN's top byte, and slot 255 would hand out
/// QPN 0xFFFFFF, the multicast QPN.
pub const MAX_SLOTS: usize = 255;
/// Return value past any array's end: the kernel's hash then chooses.
const TO_HASH: u32 = u32::MAX;

/// Whether `data` starts as the group's own datagrams do (0xFF, "SR": a probe, an answer, a
/// forwarded MAD), so that a capture leaves it out; it may still be junk that only looks so.
pub fn is_group_datagram(data: &[u8]) -> bool {
    data.starts_with(&[0xFF, 0x53, 0x52])
}

/// The slot of the member that made QP `qpn` (the top byte of the 24-bit QPN).
pub fn qpn_slot(qpn: u32) -> u8 {
    (qpn >> 16) as u8
}

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Operation.
    pub code: u16,
    /// Jump offset when true.
    pub jt: u8,
    /// Jump offset when false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

// The classic BPF opcodes the program uses (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_B_ABS: u16 = 0x30;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;
const JA: u16 = 0x05;

/// The steering program for a group whose members sit at the given `(slot, index)` pairs.
pub fn program(map: &[(u8, u32)]) -> Vec<Insn> {
    let i = |code, jt, jf, k| Insn { code, jt, jf, k };
    let mut p = vec![
        i(LD_W_ABS, 0, 0, 0),
        // A probe: to the index it names.
        i(JEQ_K, 0, 2, PROBE_MAGIC),
        i(LD_W_ABS, 0, 0, 4),
        i(RET_A, 0, 0, 0),
        // A forwarded MAD: by the slot it names.
        i(JEQ_K, 0, 2, FORWARD_MAGIC),
        i(LD_B_ABS, 0, 0, 4),
        i(JA, 0, 0, 1),
        // Anything else: by the destination QPN's top byte.
        i(LD_B_ABS, 0, 0, 5),
    ];
    for &(slot, index) in map {
        p.push(i(JEQ_K, 0, 1, u32::from(slot)));
        p.push(i(RET_K, 0, 0, index));
    }
    p.push(i(RET_K, 0, 0, TO_HASH));
    p
}

/// Runs `prog` on `data` as the kernel does for a reuseport group (only the instructions
/// [`program`] uses): the index it returns. For tests.
pub fn run(prog: &[Insn], data: &[u8]) -> u32 {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    while let Some(ins) = prog.get(pc) {
        let k = ins.k as usize;
        match ins.code {
            LD_W_ABS => match data.get(k..k + 4) {
                Some(b) => a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                None => return 0,
            },
            LD_B_ABS => match data.get(k) {
                Some(&b) => a = u32::from(b),
                None => return 0,
            },
            JEQ_K => {
                pc += usize::from(if a == ins.k { ins.jt } else { ins.jf });
            }
            JA => pc += k,
            RET_K => return ins.k,
            RET_A => return a,
            _ => return 0,
        }
        pc += 1;
    }
    0
}

/// Attaches `prog` to the reuseport group `sock` belongs to (replacing the group's program).
pub fn attach(sock: &impl AsRawFd, prog: &[Insn]) -> io::Result<()> {
    let filter: Vec<libc::sock_filter> = prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let fprog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points at `filter`, which outlives the call; the kernel copies the
    // program and validates every instruction.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A probe for the socket at `index`; its answer goes to `reply_port` on the group's address.
pub fn probe(index: u32, secret: &[u8; SECRET_LEN], reply_port: u16) -> [u8; PROBE_LEN] {
    let mut b = [0u8; PROBE_LEN];
    b[0..4].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&index.to_be_bytes());
    b[8..8 + SECRET_LEN].copy_from_slice(secret);
    b[8 + SECRET_LEN..].copy_from_slice(&reply_port.to_be_bytes());
    b
}

/// A probe's index and answer port, if `data` is a probe carrying `secret`.
pub fn parse_probe(data: &[u8], secret: &[u8; SECRET_LEN]) -> Option<(u32, u16)> {
    if data.len() != PROBE_LEN || data[0..4] != PROBE_MAGIC.to_be_bytes() {
        return None;
    }
    if data[8..8 + SECRET_LEN] != secret[..] {
        return None;
    }
    let index = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
    let port = u16::from_be_bytes([data[8 + SECRET_LEN], data[9 + SECRET_LEN]]);
    Some((index, port))
}

/// The answer of the member in `slot` to the probe for `index`.
pub fn answer(index: u32, secret: &[u8; SECRET_LEN], slot: u8) -> [u8; ANSWER_LEN] {
    let mut b = [0u8; ANSWER_LEN];
    b[0..4].copy_from_slice(&ANSWER_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&index.to_be_bytes());
    b[8..8 + SECRET_LEN].copy_from_slice(secret);
    b[8 + SECRET_LEN] = slot;
    b
}

/// An answer's index and slot, if `data` is an answer carrying `secret`.
pub fn parse_answer(data: &[u8], secret: &[u8; SECRET_LEN]) -> Option<(u32, u8)> {
    if data.len() != ANSWER_LEN || data[0..4] != ANSWER_MAGIC.to_be_bytes() {
        return None;
    }
    if data[8..8 + SECRET_LEN] != secret[..] {
        return None;
    }
    let index = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
    Some((index, data[8 + SECRET_LEN]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTH (12 bytes) naming destination QP `qpn`, then some payload.
    fn packet(qpn: u32) -> Vec<u8> {
        let mut p = vec![0x0a, 0x40, 0xff, 0xff, 0x00];
        p.extend_from_slice(&qpn.to_be_bytes()[1..]);
        p.extend_from_slice(&[0x80, 0, 0, 1, 9, 9, 9, 9]);
        p
    }

    #[test]
    fn packets_go_by_their_qpns_slot_and_unknown_slots_to_the_hash() {
        let prog = program(&[(0, 2), (3, 0), (7, 1)]);
        assert_eq!(run(&prog, &packet(0x00_0011)), 2);
        assert_eq!(run(&prog, &packet(0x03_0042)), 0);
        assert_eq!(run(&prog, &packet(0x07_ffff)), 1);
        // QP1 (the CM's) is slot 0's.
        assert_eq!(run(&prog, &packet(1)), 2);
        assert_eq!(run(&prog, &packet(0x05_0011)), TO_HASH);
        assert_eq!(run(&program(&[]), &packet(0x00_0011)), TO_HASH);
    }

    #[test]
    fn probes_go_to_the_index_they_name() {
        let secret = [7u8; SECRET_LEN];
        let prog = program(&[(0, 2), (3, 0)]);
        for index in [0u32, 1, 5, 254] {
            let p = probe(index, &secret, 4242);
            assert_eq!(run(&prog, &p), index);
            assert_eq!(parse_probe(&p, &secret), Some((index, 4242)));
        }
    }

    #[test]
    fn forwarded_mads_go_by_the_slot_they_name() {
        let prog = program(&[(0, 2), (3, 0)]);
        let mut env = vec![0u8; 40];
        env[0..4].copy_from_slice(&FORWARD_MAGIC.to_be_bytes());
        env[4] = 3;
        // Byte 5 would say slot 0: the envelope's own slot wins.
        assert_eq!(run(&prog, &env), 0);
        env[4] = 9;
        assert_eq!(run(&prog, &env), TO_HASH);
    }

    #[test]
    fn a_probe_or_answer_without_the_groups_secret_is_not_one() {
        let secret = [7u8; SECRET_LEN];
        let other = [8u8; SECRET_LEN];
        assert_eq!(parse_probe(&probe(1, &other, 1), &secret), None);
        assert_eq!(parse_answer(&answer(1, &other, 3), &secret), None);
        assert_eq!(parse_answer(&answer(1, &secret, 3), &secret), Some((1, 3)));
        // Truncated: not a probe; and a RoCE packet is never one.
        assert_eq!(parse_probe(&probe(1, &secret, 1)[..10], &secret), None);
        assert_eq!(parse_probe(&packet(0x10011), &secret), None);
    }

    #[test]
    fn a_datagram_too_short_for_the_loads_goes_to_index_zero() {
        // The kernel ends a program at an out-of-bounds load with 0.
        let prog = program(&[(4, 3)]);
        assert_eq!(run(&prog, &[0xff, 0x53]), 0);
        assert_eq!(run(&prog, &[0x0a, 0, 0, 0, 0]), 0);
    }

    #[test]
    fn the_largest_group_fits_the_kernels_program_limit() {
        let map: Vec<(u8, u32)> = (0..MAX_SLOTS as u32).map(|s| (s as u8, s)).collect();
        let prog = program(&map);
        // BPF_MAXINSNS.
        assert!(prog.len() <= 4096);
        assert_eq!(run(&prog, &packet(0xfe_0011)), 254);
    }
}
