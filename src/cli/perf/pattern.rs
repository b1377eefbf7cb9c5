//! `--check`'s bytes: every message carries a pattern that depends on its iteration, so that
//! a message landing in the wrong place, or an old one, is caught as surely as a corrupted one.

use std::result::Result;

/// The byte at `offset` of message `iter` under --check.
fn pattern_byte(iter: u64, offset: u64) -> u8 {
    (iter
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(offset.wrapping_mul(31))
        >> 3) as u8
}

/// Fills `buf` with message `iter`'s --check pattern.
pub(super) fn fill_pattern(buf: &mut [u8], iter: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(iter, i as u64);
    }
}

/// Compares `buf` with message `iter`'s --check pattern; names the first differing byte.
pub(super) fn check_pattern(buf: &[u8], iter: u64) -> Result<(), String> {
    match buf
        .iter()
        .enumerate()
        .find(|(i, b)| **b != pattern_byte(iter, *i as u64))
    {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "data check failed: message {iter}, byte {i}: got 0x{b:02x}, expected 0x{:02x}",
            pattern_byte(iter, i as u64)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
