//! The RoCEv2 invariant CRC (IBTA vol. 1 §7.8.1 and RoCEv2 annex A17.3.3).
//!
//! The ICRC is a standard CRC-32 (reflected polynomial 0xEDB88320, initial value and final XOR
//! 0xFFFFFFFF) over, in order: eight 0xFF bytes standing in for the InfiniBand LRH; the IP
//! header with its variant fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic
//! class, flow label, hop limit); the UDP header with its checksum set to ones; the BTH with
//! byte 4 (FECN, BECN, reserved) set to ones; then the extended headers, payload and pad. The
//! four result bytes are sent little-endian. Rules and test vectors: `spec-notes/icrc.md`.
//!
//! No allocation: the masked headers are copied into a stack buffer, and the CRC of it and the
//! rest is folded in place (`crc_fold`).

use super::{bth, crc_fold, Error, Header, Result, ICRC_LEN};

/// What stands in for the LRH at the start of the CRC input.
const LRH_ONES: [u8; 8] = [0xFF; 8];
/// Largest IPv4 header (IHL 15).
const IPV4_MAX_HEADER: usize = 60;
/// Size of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Size of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// The longest masked pseudo-header: LRH, an IPv4 header with options, UDP, BTH.
const PSEUDO_MAX: usize = 8 + IPV4_MAX_HEADER + UDP_HEADER_LEN + bth::LEN;
/// Room before the pseudo-header for the zeros that make the CRC's input whole 16-byte
/// blocks (`crc_fold`).
const LEAD: usize = 16;

/// Computes the ICRC.
///
/// - `ip_header`: the whole IPv4 header (with options, as IHL says) or the 40-byte IPv6 header,
///   as on the wire; the version nibble selects the masking.
/// - `udp_header`: the 8-byte UDP header.
/// - `roce`: the UDP payload from the BTH up to, not including, the ICRC.
#[inline(always)]
pub fn compute(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<u32> {
    if udp_header.len() != UDP_HEADER_LEN {
        return Err(Error::Encapsulation("UDP header must be 8 bytes"));
    }
    if roce.len() < bth::LEN {
        return Err(Error::Truncated {
            header: Header::Bth,
            need: bth::LEN,
            got: roce.len(),
        });
    }
    // The masked pseudo-header, then the first `rest.len() % 16` bytes after the BTH, with
    // zeros in front to a multiple of 16 bytes: the rest follows as whole blocks, read where it
    // lies (`crc_fold`: no partial block, no copy of the payload).
    let mut buf = [0u8; LEAD + PSEUDO_MAX + 16];
    buf[LEAD..LEAD + LRH_ONES.len()].copy_from_slice(&LRH_ONES);
    let mut at = LEAD + LRH_ONES.len();
    match ip_header.first().map(|b| b >> 4) {
        Some(4) => {
            let len = ip_header.len();
            if !(20..=IPV4_MAX_HEADER).contains(&len) || len != ((ip_header[0] & 0x0F) as usize) * 4
            {
                return Err(Error::Encapsulation(
                    "IPv4 header length disagrees with IHL",
                ));
            }
            let ip = &mut buf[at..at + len];
            ip.copy_from_slice(ip_header);
            ip[1] = 0xFF; // TOS (DSCP + ECN)
            ip[8] = 0xFF; // TTL
            ip[10] = 0xFF; // header checksum
            ip[11] = 0xFF;
            at += len;
        }
        Some(6) => {
            if ip_header.len() != IPV6_HEADER_LEN {
                return Err(Error::Encapsulation("IPv6 header must be 40 bytes"));
            }
            let ip = &mut buf[at..at + IPV6_HEADER_LEN];
            ip.copy_from_slice(ip_header);
            ip[0] |= 0x0F; // traffic class (high nibble) ...
            ip[1] = 0xFF; // ... traffic class (low nibble) and flow label
            ip[2] = 0xFF;
            ip[3] = 0xFF;
            ip[7] = 0xFF; // hop limit
            at += IPV6_HEADER_LEN;
        }
        _ => return Err(Error::Encapsulation("not an IPv4 or IPv6 header")),
    }
    let udp = &mut buf[at..at + UDP_HEADER_LEN];
    udp.copy_from_slice(udp_header);
    udp[6] = 0xFF; // checksum
    udp[7] = 0xFF;
    at += UDP_HEADER_LEN;
    let b = &mut buf[at..at + bth::LEN];
    b.copy_from_slice(&roce[..bth::LEN]);
    b[4] = 0xFF; // FECN, BECN, reserved
    at += bth::LEN;
    let after = &roce[bth::LEN..];
    let k = after.len() % 16;
    // A copy of constant length is a few moves where one of `k` bytes is a call to memcpy;
    // only the first `k` of the sixteen count.
    match after.first_chunk::<16>() {
        Some(first) => buf[at..at + 16].copy_from_slice(first),
        None => buf[at..at + k].copy_from_slice(&after[..k]),
    }
    let rest = &after[k..];
    at += k;
    let pad = (16 - (at - LEAD) % 16) % 16;
    Ok(crc_fold::crc32(&mut buf[LEAD - pad..at], pad, rest))
}

/// The four ICRC bytes as they appear on the wire.
#[inline]
pub fn to_wire(icrc: u32) -> [u8; 4] {
    icrc.to_le_bytes()
}

/// Builds the 20-byte IPv4 header (no options) that Linux puts in front of a UDP datagram
/// sent from an unconnected socket with DF set: identification 0 (include/net/ip.h,
/// `ip_select_ident_segs`), the variant fields zero (they are masked by the ICRC anyway).
/// This is what a user-space endpoint that sends through a UDP socket must cover with its ICRC.
pub fn ipv4_header_for_socket(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    udp_len: u16,
    dont_fragment: bool,
) -> [u8; 20] {
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(udp_len.wrapping_add(20)).to_be_bytes());
    ip[6] = if dont_fragment { 0x40 } else { 0 };
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    ip
}

/// Builds the 40-byte IPv6 header in front of a UDP datagram (variant fields zero).
pub fn ipv6_header_for_socket(
    src: std::net::Ipv6Addr,
    dst: std::net::Ipv6Addr,
    udp_len: u16,
) -> [u8; IPV6_HEADER_LEN] {
    let mut ip = [0u8; IPV6_HEADER_LEN];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
    ip[6] = 17; // next header: UDP
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    ip
}

/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xEDB8_8320;

/// Multiplies two polynomials modulo the CRC-32 polynomial, in the reflected representation
/// (bit 31 is the coefficient of x^0).
fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// x^(8n) modulo the CRC-32 polynomial: the effect of appending `n` zero bytes.
fn x_pow_8n(mut n: usize) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut base = 1u32 << 23; // x^8
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod_p(result, base);
        }
        base = mul_mod_p(base, base);
        n >>= 1;
    }
    result
}

/// The CRC register contribution (no initial value, no final XOR) of two bytes.
fn raw_crc16(word: u16) -> u32 {
    let mut c = 0u32;
    for byte in word.to_be_bytes() {
        c ^= byte as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
    }
    c
}

/// Finds the IPv4 Identification that makes an IPv4 RoCEv2 packet's ICRC come out as `found`.
///
/// A receiver that reads through an ordinary UDP socket sees neither the IP header nor its
/// Identification, which the ICRC covers and which Linux rxe fills with a hashed value. It can
/// rebuild the rest of the header (addresses, lengths, DF; see [`ipv4_header_for_socket`]).
/// CRC-32 is affine over GF(2), so the effect of the 16 unknown bits on the CRC is a linear map
/// into 32 bits; solving it tells whether some Identification makes the packet valid. This
/// leaves a 2^-16 chance of accepting a corrupted packet, where knowing the ID gives 2^-32
/// (`spec-notes/icrc.md`). Returns the Identification, or `None` when no value explains `found`.
///
/// `ip_header` is the 20-byte header with any Identification; it is treated as unknown.
pub fn solve_ipv4_id(ip_header: &[u8], udp_header: &[u8], roce: &[u8], found: u32) -> Option<u16> {
    if ip_header.len() != 20 || ip_header[0] != 0x45 {
        return None;
    }
    let mut ip = [0u8; 20];
    ip.copy_from_slice(ip_header);
    ip[4] = 0;
    ip[5] = 0;
    let base = compute(&ip, udp_header, roce).ok()?;
    solve_id_from_base(base, found, roce.len())
}

/// How the ICRC of an IPv4 RoCE packet whose RoCE part before the ICRC is `roce_len` bytes
/// changes when its IPv4 Identification changes by `id_xor` (old XOR new): the ICRC is
/// affine in its input, so `compute` with the new identification equals `compute` with the
/// old one XOR this. A sender that learns the identification a packet will carry only after
/// sealing it (UDP GSO numbers its segments) adjusts the ICRC with two table lookups instead
/// of computing it again.
pub fn ipv4_id_delta(id_xor: u16, roce_len: usize) -> u32 {
    if id_xor == 0 {
        return 0;
    }
    with_id_tables(roce_len, |t| t.effect(id_xor))
}

/// [`solve_ipv4_id`] given the CRC computed with Identification 0 (`base`): the difference
/// `base ^ found` is the effect of the Identification, which the tables invert.
fn solve_id_from_base(base: u32, found: u32, roce_len: usize) -> Option<u16> {
    let target = base ^ found;
    if target == 0 {
        return Some(0);
    }
    with_id_tables(roce_len, |t| t.solve(target))
}

/// Runs `f` on the Identification tables of packets whose RoCE part is `roce_len` bytes. They
/// depend only on that length, and a host sees few lengths at a time (a flow's full-MTU
/// packets, its READ responses with an AETH, its ACKs), so each thread keeps the last few.
fn with_id_tables<R>(roce_len: usize, f: impl FnOnce(&IdTables) -> R) -> R {
    use std::cell::RefCell;
    const CACHED: usize = 4;
    /// The tables of the last lengths seen, and the entry to replace next.
    struct Cache {
        tables: [Option<Box<IdTables>>; CACHED],
        next: usize,
    }
    thread_local! {
        static CACHE: RefCell<Cache> = const {
            RefCell::new(Cache { tables: [None, None, None, None], next: 0 })
        };
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(t) = c.tables.iter().flatten().find(|t| t.roce_len == roce_len) {
            return f(t);
        }
        let next = c.next;
        c.next = (next + 1) % CACHED;
        f(c.tables[next].insert(Box::new(IdTables::new(roce_len))))
    })
}

/// The effect of the 16 Identification bits on the ICRC of a packet whose RoCE part is
/// `roce_len` bytes, and its inverse, as byte tables. The effect is linear over GF(2) and
/// one-to-one (a CRC-32 sees every change confined to 16 bits), so a CRC difference comes from
/// at most one Identification: the inverse reads it off with four lookups, and the forward
/// tables check that it explains the difference (two more); solving by row reduction took
/// sixteen steps per packet.
struct IdTables {
    roce_len: usize,
    /// `forward[b][v]`: the CRC effect of Identification byte `b` (0 = low) holding `v`.
    forward: [[u32; 256]; 2],
    /// `inverse[b][v]`: the Identification bits that CRC difference byte `b` holding `v`
    /// stands for (only the pivot bits of the reduced basis count).
    inverse: [[u16; 256]; 4],
}

impl IdTables {
    fn new(roce_len: usize) -> IdTables {
        // Bytes of CRC input after the Identification field.
        let shift = x_pow_8n((20 - 6) + UDP_HEADER_LEN + roce_len);
        let effects: [u32; 16] = std::array::from_fn(|k| mul_mod_p(shift, raw_crc16(1 << k)));
        let mut forward = [[0u32; 256]; 2];
        for (b, table) in forward.iter_mut().enumerate() {
            for (v, e) in table.iter_mut().enumerate() {
                *e = (0..8)
                    .filter(|i| v >> i & 1 != 0)
                    .fold(0, |acc, i| acc ^ effects[8 * b + i]);
            }
        }
        // Reduced row-echelon form of (effect, Identification bits) rows: each row's highest
        // effect bit (its pivot) is set in no other row.
        let mut rows: Vec<(u32, u16)> = Vec::with_capacity(16);
        for (k, &e) in effects.iter().enumerate() {
            let (mut v, mut bits) = (e, 1u16 << k);
            for &(r, rb) in &rows {
                if v & pivot(r) != 0 {
                    v ^= r;
                    bits ^= rb;
                }
            }
            if v == 0 {
                continue;
            }
            for row in rows.iter_mut() {
                if row.0 & pivot(v) != 0 {
                    row.0 ^= v;
                    row.1 ^= bits;
                }
            }
            rows.push((v, bits));
        }
        let mut inverse = [[0u16; 256]; 4];
        for (b, table) in inverse.iter_mut().enumerate() {
            for (v, id) in table.iter_mut().enumerate() {
                let byte = (v as u32) << (8 * b);
                *id = rows
                    .iter()
                    .filter(|(r, _)| byte & pivot(*r) != 0)
                    .fold(0, |acc, (_, rb)| acc ^ rb);
            }
        }
        IdTables {
            roce_len,
            forward,
            inverse,
        }
    }

    fn effect(&self, id: u16) -> u32 {
        self.forward[0][usize::from(id as u8)] ^ self.forward[1][usize::from(id >> 8)]
    }

    /// The Identification whose effect is `target`, if any.
    fn solve(&self, target: u32) -> Option<u16> {
        let id = (0..4).fold(0, |acc, b| {
            acc ^ self.inverse[b][(target >> (8 * b)) as u8 as usize]
        });
        (self.effect(id) == target).then_some(id)
    }
}

/// The highest set bit of a nonzero `v`.
fn pivot(v: u32) -> u32 {
    1 << (31 - v.leading_zeros())
}

/// How a datagram received through a UDP socket fared against its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketVerdict {
    /// The ICRC matches the headers as the receiver rebuilt them (IPv6, or IPv4 sent with
    /// identification 0, as softroce and any DF socket sender does).
    Exact,
    /// IPv4: the ICRC matches with this identification, solved for (a Linux rxe sender).
    RecoveredId(u16),
    /// No header the sender could have used makes the ICRC match: corrupted.
    Bad,
}

/// Verifies the ICRC of a RoCE UDP payload (`payload` = BTH .. ICRC) received through a UDP
/// socket from `src` at `dst`, rebuilding the IP and UDP headers the sender's kernel wrote
/// (IPv4 with DF). See [`solve_ipv4_id`] for the one field a socket cannot see.
pub fn verify_socket_datagram(
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    payload: &[u8],
) -> SocketVerdict {
    use std::net::IpAddr;
    if payload.len() < bth::LEN + 4 || payload.len() > u16::MAX as usize - UDP_HEADER_LEN {
        return SocketVerdict::Bad;
    }
    let n = payload.len();
    let found = u32::from_le_bytes([
        payload[n - 4],
        payload[n - 3],
        payload[n - 2],
        payload[n - 1],
    ]);
    let covered = &payload[..n - 4];
    let udp_len = (UDP_HEADER_LEN + n) as u16;
    let mut udp = [0u8; UDP_HEADER_LEN];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = ipv4_header_for_socket(s, d, udp_len, true);
            match compute(&ip, &udp, covered) {
                Ok(c) if c == found => SocketVerdict::Exact,
                // `c` is the CRC with identification 0: solve from it instead of computing
                // the CRC of the packet a second time.
                Ok(c) => match solve_id_from_base(c, found, covered.len()) {
                    Some(id) => SocketVerdict::RecoveredId(id),
                    None => SocketVerdict::Bad,
                },
                Err(_) => SocketVerdict::Bad,
            }
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = ipv6_header_for_socket(s, d, udp_len);
            match compute(&ip, &udp, covered) {
                Ok(c) if c == found => SocketVerdict::Exact,
                _ => SocketVerdict::Bad,
            }
        }
        _ => SocketVerdict::Bad,
    }
}

/// The ICRC a sender at `src` puts on RoCE UDP payload `payload` (BTH .. ICRC; the last four
/// bytes are not covered) sent through a UDP socket to `dst`: the counterpart of
/// [`verify_socket_datagram`], covering the IP and UDP headers the sender's kernel writes (IPv4
/// with DF and identification 0). `None` for mixed address families or a length no UDP
/// datagram has.
pub fn socket_datagram_icrc(
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    payload: &[u8],
) -> Option<[u8; 4]> {
    let n = payload.len();
    if n < 4 {
        return None;
    }
    socket_datagram_icrc_parts(src, dst, n, &payload[..n - 4], Some, &payload[n - 4..])
}

/// [`socket_datagram_icrc`] of a payload of `len` bytes that is not in one piece: `head`
/// (from the BTH on), then bytes that `middle` adds to the CRC it is given (crc32fast's
/// value; `None` if it cannot read them), then `tail`, whose last four bytes are the ICRC's
/// room (not covered). Used for a packet whose payload is gathered from a region
/// (`crate::memory::SharedBytes::crc` reads it there).
pub fn socket_datagram_icrc_parts(
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    len: usize,
    head: &[u8],
    middle: impl FnOnce(u32) -> Option<u32>,
    tail: &[u8],
) -> Option<[u8; 4]> {
    use std::net::IpAddr;
    if len < 4 || len > u16::MAX as usize - UDP_HEADER_LEN || tail.len() < 4 {
        return None;
    }
    let udp_len = (UDP_HEADER_LEN + len) as u16;
    let mut udp = [0u8; UDP_HEADER_LEN];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let crc = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            compute(&ipv4_header_for_socket(s, d, udp_len, true), &udp, head)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            compute(&ipv6_header_for_socket(s, d, udp_len), &udp, head)
        }
        _ => return None,
    }
    .ok()?;
    let crc = middle(crc)?;
    let covered_tail = &tail[..tail.len() - 4];
    if covered_tail.is_empty() {
        // A packet in one piece (`socket_datagram_icrc`): no hasher to set up for nothing.
        return Some(to_wire(crc));
    }
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(covered_tail);
    Some(to_wire(h.finalize()))
}

/// Writes [`socket_datagram_icrc`] into the last four bytes of `payload`; returns false (and
/// leaves the bytes alone) where it is `None`.
pub fn seal_socket_datagram(
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    payload: &mut [u8],
) -> bool {
    let Some(c) = socket_datagram_icrc(src, dst, payload) else {
        return false;
    };
    let n = payload.len();
    payload[n - 4..].copy_from_slice(&c);
    true
}

/// Adjusts the ICRC of an IPv4 RoCE packet (`packet`: BTH .. ICRC) sealed for IPv4
/// identification `from` to the header with identification `to`, which the ICRC covers: a
/// DF socket's GSO send gives segment k identification k, while packets are sealed for 0,
/// what a plain send gets.
pub fn reseal_ipv4_id(packet: &mut [u8], from: u16, to: u16) {
    let at = packet.len() - ICRC_LEN;
    reseal_ipv4_id_of(&mut packet[at..], at, from, to);
}

/// [`reseal_ipv4_id`] for a packet whose ICRC (`icrc`, its four bytes) covers `covered` bytes
/// of RoCE payload but is not stored after them (a packet whose payload is gathered).
pub fn reseal_ipv4_id_of(icrc: &mut [u8], covered: usize, from: u16, to: u16) {
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&icrc[..ICRC_LEN]);
    let crc = u32::from_le_bytes(crc) ^ ipv4_id_delta(from ^ to, covered);
    icrc[..ICRC_LEN].copy_from_slice(&to_wire(crc));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// ConnectX-4 Lx CNP (scapy test/contrib/roce.uts), Ethernet frame without FCS.
    #[test]
    fn vector_connectx4_cnp() {
        let f = hex(
            "e41d2dab2bc27cfe90643b32 0800 45c2003c718c400040119161 0a001101 0a001201 \
             0000 12b7 0028 0000 8100ffff 40000118 00000000 00000000000000000000000000000000 \
             82fd002a",
        );
        let ip = &f[14..34];
        let udp = &f[34..42];
        let roce = &f[42..f.len() - 4];
        let icrc = compute(ip, udp, roce).unwrap();
        assert_eq!(to_wire(icrc), [0x82, 0xfd, 0x00, 0x2a]);
    }

    /// scapy UC SEND ONLY with PadCnt 2, from the IPv4 header to the ICRC.
    #[test]
    fn vector_scapy_uc_send_only() {
        let p = hex(
            "45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf17\
             104630818be28935d90e9a95505401be885e50000078f353f3",
        );
        let icrc = compute(&p[..20], &p[20..28], &p[28..p.len() - 4]).unwrap();
        assert_eq!(to_wire(icrc), [0x78, 0xf3, 0x53, 0xf3]);
    }

    #[test]
    fn the_identification_delta_matches_a_full_computation() {
        let roce: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        let udp = [0xC0, 0x01, 0x12, 0xB7, 0x01, 0x38, 0, 0];
        let mut ip = ipv4_header_for_socket(
            [127, 0, 0, 1].into(),
            [127, 0, 0, 2].into(),
            8 + roce.len() as u16 + 4,
            true,
        );
        let base = compute(&ip, &udp, &roce).unwrap();
        for id in [1u16, 2, 14, 63, 0x8001, 0xFFFF] {
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            let full = compute(&ip, &udp, &roce).unwrap();
            assert_eq!(base ^ ipv4_id_delta(id, roce.len()), full, "id {id}");
            // From one non-zero identification to another.
            assert_eq!(
                full ^ ipv4_id_delta(id ^ 5, roce.len()),
                {
                    let mut ip5 = ip;
                    ip5[4..6].copy_from_slice(&5u16.to_be_bytes());
                    compute(&ip5, &udp, &roce).unwrap()
                },
                "{id} -> 5"
            );
        }
    }

    /// The ICRC as the spec states it: one CRC-32 over the masked pseudo-header and the rest,
    /// built piece by piece and fed to crc32fast whole.
    fn reference(ip: &[u8], udp: &[u8], roce: &[u8]) -> u32 {
        let mut msg = vec![0xFFu8; 8];
        let mut ip = ip.to_vec();
        if ip[0] >> 4 == 4 {
            for i in [1, 8, 10, 11] {
                ip[i] = 0xFF;
            }
        } else {
            ip[0] |= 0x0F;
            for i in [1, 2, 3, 7] {
                ip[i] = 0xFF;
            }
        }
        msg.extend_from_slice(&ip);
        msg.extend_from_slice(&udp[..6]);
        msg.extend_from_slice(&[0xFF, 0xFF]);
        msg.extend_from_slice(roce);
        msg[8 + ip.len() + 8 + 4] = 0xFF;
        let mut h = crc32fast::Hasher::new();
        h.update(&msg);
        h.finalize()
    }

    proptest::proptest! {
        #[test]
        fn matches_the_plain_computation(
            roce in proptest::collection::vec(proptest::prelude::any::<u8>(), 12..1200),
            ip_bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 60),
            udp in proptest::collection::vec(proptest::prelude::any::<u8>(), 8),
            options in 0usize..=10,
            v6 in proptest::prelude::any::<bool>(),
        ) {
            let mut ip = ip_bytes;
            if v6 {
                ip.truncate(IPV6_HEADER_LEN);
                ip[0] = 0x60 | (ip[0] & 0x0F);
            } else {
                ip.truncate(20 + 4 * options);
                ip[0] = 0x45 + options as u8;
            }
            proptest::prop_assert_eq!(compute(&ip, &udp, &roce).unwrap(), reference(&ip, &udp, &roce));
        }
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let p = hex(
            "45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf17\
             104630818be28935d90e9a95505401be885e50000078f353f3",
        );
        let base = compute(&p[..20], &p[20..28], &p[28..p.len() - 4]).unwrap();
        let mut q = p.clone();
        q[1] = 0x5C; // TOS
        q[8] = 3; // TTL
        q[10] = 0; // checksum
        q[26] = 0x12; // UDP checksum
        q[28 + 4] = 0xC0; // FECN + BECN
        assert_eq!(
            compute(&q[..20], &q[20..28], &q[28..q.len() - 4]).unwrap(),
            base
        );
        // ... while an unmasked field does.
        let mut r = p.clone();
        r[4] ^= 1; // IPv4 identification
        assert_ne!(
            compute(&r[..20], &r[20..28], &r[28..r.len() - 4]).unwrap(),
            base
        );
        let mut r = p;
        r[40] ^= 0x80; // payload
        assert_ne!(
            compute(&r[..20], &r[20..28], &r[28..r.len() - 4]).unwrap(),
            base
        );
    }

    #[test]
    fn ipv6_masks_class_flow_and_hop_limit() {
        let src = "fe80::1".parse().unwrap();
        let dst = "fe80::2".parse().unwrap();
        let ip = ipv6_header_for_socket(src, dst, 8 + 12 + 4);
        let udp = [0xC0, 0x00, 0x12, 0xB7, 0x00, 0x18, 0x00, 0x00];
        let bth = [0x11u8, 0, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 1];
        let base = compute(&ip, &udp, &bth).unwrap();
        let mut ip2 = ip;
        ip2[0] = 0x6A;
        ip2[1] = 0xBC;
        ip2[3] = 0x77;
        ip2[7] = 64;
        assert_eq!(compute(&ip2, &udp, &bth).unwrap(), base);
        ip2[8] ^= 1; // source address is covered
        assert_ne!(compute(&ip2, &udp, &bth).unwrap(), base);
    }

    #[test]
    fn socket_header_matches_capture_layout() {
        let ip = ipv4_header_for_socket(
            "192.168.0.7".parse().unwrap(),
            "192.168.0.7".parse().unwrap(),
            0x2c,
            true,
        );
        // The scapy vector's header with TOS, ID, TTL and checksum cleared.
        assert_eq!(ip, hex("450000400000400000110000c0a80007c0a80007")[..]);
    }

    #[test]
    fn rejects_bad_headers() {
        let bth = [0u8; 12];
        let udp = [0u8; 8];
        assert!(matches!(
            compute(&[0x45; 19], &udp, &bth),
            Err(Error::Encapsulation(_))
        ));
        assert!(matches!(
            compute(&[0x46; 20], &udp, &bth),
            Err(Error::Encapsulation(_))
        ));
        assert!(matches!(
            compute(&[0x60; 39], &udp, &bth),
            Err(Error::Encapsulation(_))
        ));
        assert!(matches!(
            compute(&[0x20; 20], &udp, &bth),
            Err(Error::Encapsulation(_))
        ));
        assert!(matches!(
            compute(&[], &udp, &bth),
            Err(Error::Encapsulation(_))
        ));
        assert!(matches!(
            compute(&[0x45; 20], &udp[..7], &bth),
            Err(Error::Encapsulation(_))
        ));
        assert!(matches!(
            compute(&[0x45; 20], &udp, &bth[..11]),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn crc_shift_arithmetic_matches_appending_zeros() {
        for n in [0usize, 1, 2, 7, 100, 4096] {
            let mut data = vec![0xA5u8, 0x3C];
            data.extend(std::iter::repeat_n(0u8, n));
            // Raw register over the bytes = raw over the first two, shifted by n zero bytes.
            let mut c = 0u32;
            for &byte in &data {
                c ^= byte as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
                }
            }
            assert_eq!(mul_mod_p(x_pow_8n(n), raw_crc16(0xA53C)), c, "n = {n}");
        }
    }

    #[test]
    fn solves_the_identification_of_the_scapy_vector() {
        let p = hex(
            "45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf17\
             104630818be28935d90e9a95505401be885e50000078f353f3",
        );
        let found = u32::from_le_bytes([0x78, 0xf3, 0x53, 0xf3]);
        let mut ip = [0u8; 20];
        ip.copy_from_slice(&p[..20]);
        ip[4] = 0;
        ip[5] = 0;
        let roce = &p[28..p.len() - 4];
        assert_eq!(solve_ipv4_id(&ip, &p[20..28], roce, found), Some(0x0478));
        // A corrupted payload has no Identification that explains the ICRC.
        let mut bad = roce.to_vec();
        bad[20] ^= 0x10;
        assert_eq!(solve_ipv4_id(&ip, &p[20..28], &bad, found), None);
    }

    #[test]
    fn the_tables_invert_every_identification_and_nothing_else() {
        for len in [0usize, 12, 1036, 4096 + 28] {
            let t = IdTables::new(len);
            let mut effects = std::collections::HashSet::new();
            for id in 0..=u16::MAX {
                let e = t.effect(id);
                assert_eq!(t.solve(e), Some(id), "len {len} id {id:#x}");
                effects.insert(e);
            }
            // Differences no Identification makes are refused.
            let mut x = 0x9E37_79B9u32 ^ len as u32;
            for _ in 0..2000 {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                assert_eq!(
                    t.solve(x).is_some(),
                    effects.contains(&x),
                    "len {len} {x:#x}"
                );
            }
        }
    }

    #[test]
    fn solves_every_identification_bit_pattern() {
        let src = "192.0.2.11".parse().unwrap();
        let dst = "192.0.2.12".parse().unwrap();
        let roce: Vec<u8> = (0..1036u32).map(|i| (i * 31 + 7) as u8).collect();
        let udp_len = (8 + roce.len() + 4) as u16;
        let udp = [
            0xC1,
            0x69,
            0x12,
            0xB7,
            (udp_len >> 8) as u8,
            udp_len as u8,
            0,
            0,
        ];
        for id in [0u16, 1, 0x8000, 0x3036, 0xC341, 0xFFFF] {
            let mut ip = ipv4_header_for_socket(src, dst, udp_len, true);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            let found = compute(&ip, &udp, &roce).unwrap();
            let blank = ipv4_header_for_socket(src, dst, udp_len, true);
            assert_eq!(solve_ipv4_id(&blank, &udp, &roce, found), Some(id));
        }
    }

    #[test]
    fn socket_verdicts() {
        let src: std::net::SocketAddr = "192.0.2.11:49513".parse().unwrap();
        let dst: std::net::SocketAddr = "192.0.2.12:4791".parse().unwrap();
        let mut payload: Vec<u8> = (0..64u32).map(|i| i as u8).collect();
        payload[0] = 0x04; // any BTH will do for the CRC
        let udp_len = (8 + payload.len()) as u16;
        let mut udp = [0u8; 8];
        udp[0..2].copy_from_slice(&src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&4791u16.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (src.ip(), dst.ip()) else {
            unreachable!()
        };
        let mut ip = ipv4_header_for_socket(s, d, udp_len, true);
        let n = payload.len();
        let c = compute(&ip, &udp, &payload[..n - 4]).unwrap();
        payload[n - 4..].copy_from_slice(&to_wire(c));
        assert_eq!(
            verify_socket_datagram(src, dst, &payload),
            SocketVerdict::Exact
        );
        ip[4..6].copy_from_slice(&0xC341u16.to_be_bytes());
        let c = compute(&ip, &udp, &payload[..n - 4]).unwrap();
        payload[n - 4..].copy_from_slice(&to_wire(c));
        assert_eq!(
            verify_socket_datagram(src, dst, &payload),
            SocketVerdict::RecoveredId(0xC341)
        );
        payload[20] ^= 4;
        assert_eq!(
            verify_socket_datagram(src, dst, &payload),
            SocketVerdict::Bad
        );
        assert_eq!(
            verify_socket_datagram(src, dst, &payload[..10]),
            SocketVerdict::Bad
        );
    }
}
