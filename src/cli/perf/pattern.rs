//! `--check`'s bytes: every message carries a pattern that depends on its iteration, so that
//! a message landing in the wrong place, or an old one, is caught as surely as a corrupted one.
//!
//! The byte at offset `i` is bits 3..10 of `iter * K + 31 * i`: adding 2048 to `i` adds
//! `31 << 11`, which leaves those bits alone, so a message is one 2048-byte block repeated.
//! Filling and checking therefore compute one block and copy or compare it (memcpy and memcmp
//! speed), not a byte at a time: `--check` of 64 KiB messages keeps up with the engine instead
//! of taking most of the run's wall clock (BENCHMARKS.md, send-q4-wall).

use std::result::Result;

use softroce::verbs::MemoryRegion;

/// The pattern's period in bytes (see the module's comment).
const PERIOD: usize = 2048;

/// The unit in which regions are written and read: a whole number of periods, on the stack.
const CHUNK: usize = 16 * PERIOD;

/// The byte at `offset` of message `iter` under --check.
fn pattern_byte(iter: u64, offset: u64) -> u8 {
    (iter
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(offset.wrapping_mul(31))
        >> 3) as u8
}

/// Fills `buf` with message `iter`'s --check pattern.
pub(super) fn fill_pattern(buf: &mut [u8], iter: u64) {
    let first = buf.len().min(PERIOD);
    for (i, b) in buf[..first].iter_mut().enumerate() {
        *b = pattern_byte(iter, i as u64);
    }
    // Doubling copies: the filled prefix is always a whole number of periods.
    let mut filled = first;
    while filled < buf.len() {
        let n = filled.min(buf.len() - filled);
        buf.copy_within(..n, filled);
        filled += n;
    }
}

/// The first byte of `buf` (message `iter`'s bytes from `start` on, `start` a multiple of the
/// period) that differs from the pattern, as an error naming it.
fn first_difference(buf: &[u8], iter: u64, start: u64, expected: &[u8]) -> Result<(), String> {
    for (i, (got, want)) in buf.iter().zip(expected.iter().cycle()).enumerate() {
        if got != want {
            return Err(format!(
                "data check failed: message {iter}, byte {}: got 0x{got:02x}, expected 0x{want:02x}",
                start + i as u64
            ));
        }
    }
    Ok(())
}

/// Compares `buf` with message `iter`'s --check pattern; names the first differing byte.
pub(super) fn check_pattern(buf: &[u8], iter: u64) -> Result<(), String> {
    let mut block = [0u8; PERIOD];
    fill_pattern(&mut block, iter);
    check_against(buf, iter, 0, &block)
}

/// `check_pattern` of the bytes from `start` (a multiple of the period), with the block given.
fn check_against(buf: &[u8], iter: u64, start: u64, block: &[u8; PERIOD]) -> Result<(), String> {
    for (k, part) in buf.chunks(PERIOD).enumerate() {
        if part != &block[..part.len()] {
            return first_difference(part, iter, start + (k * PERIOD) as u64, block);
        }
    }
    Ok(())
}

/// Writes message `iter`'s pattern into `len` bytes of `mr` at `offset`, without a buffer of
/// the message's size.
pub(super) fn write_pattern(
    mr: &MemoryRegion,
    offset: u64,
    len: u64,
    iter: u64,
) -> softroce::ib::Result<()> {
    let mut chunk = [0u8; CHUNK];
    fill_pattern(&mut chunk, iter);
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK as u64);
        mr.write(offset + done, &chunk[..n as usize])?;
        done += n;
    }
    Ok(())
}

/// Verifies that `len` bytes of `mr` at `offset` hold message `iter`'s pattern, reading them a
/// chunk at a time; names the first differing byte.
pub(super) fn check_region(
    mr: &MemoryRegion,
    offset: u64,
    len: u64,
    iter: u64,
) -> Result<(), String> {
    let mut block = [0u8; PERIOD];
    fill_pattern(&mut block, iter);
    let mut chunk = [0u8; CHUNK];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK as u64) as usize;
        mr.read(offset + done, &mut chunk[..n])
            .map_err(|e| e.to_string())?;
        check_against(&chunk[..n], iter, done, &block)?;
        done += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time definition, which the block copies must reproduce exactly (both
    /// ends of a --check run must agree, whatever their version).
    fn reference(len: usize, iter: u64) -> Vec<u8> {
        (0..len as u64).map(|i| pattern_byte(iter, i)).collect()
    }

    #[test]
    fn pattern_depends_on_iteration_and_offset() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        fill_pattern(&mut a, 1);
        fill_pattern(&mut b, 2);
        assert_ne!(a, b);
        assert!(check_pattern(&a, 1).is_ok());
        assert!(check_pattern(&a, 2).is_err());
    }

    #[test]
    fn block_fill_equals_the_byte_definition_at_every_length() {
        for len in [0, 1, 7, 2047, 2048, 2049, 4095, 4096, 65536, 100_003] {
            for iter in [0, 1, 5000, u64::MAX] {
                let mut buf = vec![0xAAu8; len];
                fill_pattern(&mut buf, iter);
                assert_eq!(buf, reference(len, iter), "len {len} iter {iter}");
                assert!(check_pattern(&buf, iter).is_ok());
            }
        }
    }

    #[test]
    fn a_changed_byte_is_named_wherever_it_is() {
        for at in [0usize, 1, 2047, 2048, 40_000, 65_535] {
            let mut buf = reference(65536, 9);
            buf[at] ^= 0x10;
            let want = format!(
                "data check failed: message 9, byte {at}: got 0x{:02x}, expected 0x{:02x}",
                buf[at],
                pattern_byte(9, at as u64)
            );
            assert_eq!(check_pattern(&buf, 9), Err(want));
        }
    }

    #[test]
    fn regions_are_written_and_checked_as_the_definition_says() {
        use softroce::driver::DeviceConfig;
        use softroce::ib::AccessFlags;
        use softroce::verbs::Context;
        let ctx = Context::open(&DeviceConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd.register_mr(200_000, AccessFlags::LOCAL_WRITE).unwrap();
        let (at, len) = (1000, 100_003);
        write_pattern(&mr, at, len, 42).unwrap();
        assert_eq!(
            mr.to_vec(at, len as usize).unwrap(),
            reference(len as usize, 42)
        );
        assert_eq!(check_region(&mr, at, len, 42), Ok(()));
        assert!(check_region(&mr, at, len, 43).is_err());
        // One byte changed past the first chunk is named by its offset in the message.
        let bad = pattern_byte(42, 70_000) ^ 1;
        mr.write(at + 70_000, &[bad]).unwrap();
        let err = check_region(&mr, at, len, 42).unwrap_err();
        assert!(err.contains("message 42, byte 70000:"), "{err}");
        // Past the region's end: an error, not a panic.
        assert!(check_region(&mr, 150_000, 60_000, 42).is_err());
        assert!(write_pattern(&mr, 150_000, 60_000, 42).is_err());
    }

    #[test]
    fn a_message_of_another_iteration_fails() {
        let buf = reference(65536, 3);
        assert!(check_pattern(&buf, 4).is_err());
    }
}
