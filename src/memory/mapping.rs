//! What the kernel says of the process's mappings over a range of application memory, asked
//! without touching a byte of it: the check that stands in for rxe's pinning when the
//! libibverbs shim registers the application's memory.
//!
//! rxe pins a region's pages at registration (`ib_umem_get`, `pin_user_pages_fast`) and the
//! registration fails with EFAULT where the kernel cannot pin: a page not mapped, a mapping
//! that cannot be read (`PROT_NONE`), or a read-only mapping when the region is registered
//! with a right that writes it (`ib_access_writable`: local or remote write, remote atomics,
//! window binding; the pin then asks `FOLL_WRITE`). softroce pins nothing, so it reads the
//! answer from `/proc/self/maps`: one pass over the mappings (the file lists them in address
//! order), stopped at the first mapping past the range, so the cost follows the number of
//! mappings below the range's end and not its size. Measured (2026-11-28, this 2-core VM):
//! 20 us for a process with 26 mappings, 0.5 ms with 2,000, whatever the region's size;
//! mincore(2) over 1 GiB costs 0.14 ms untouched and 0.5 ms resident (it walks the page
//! tables), and says nothing of protections. Without a readable `/proc` (a chroot without
//! it) the check falls back to mincore, which finds unmapped pages only.
//!
//! Linux 6.1's `ib_umem_get` also pins a read-only registration with
//! `FOLL_WRITE | FOLL_FORCE`, which takes a private `PROT_NONE` or read-only mapping (by
//! copy-on-write) and refuses a read-only shared one; Linux 6.2 removed the forced write
//! ("RDMA/umem: remove FOLL_FORCE usage"), so a read-only registration needs readable pages
//! and nothing more. softroce follows 6.2 and later there: the forced write was never rxe's
//! choice, and its copy-on-write left the application and the region on different pages.

use std::io::{BufRead, BufReader};

/// Why a range cannot be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappingFault {
    /// Some page of the range is not mapped (or the range wraps the address space).
    NotMapped,
    /// Some page is mapped without read permission.
    NotReadable,
    /// Write access was asked for and some page is mapped read-only.
    NotWritable,
}

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    }
}

/// Checks that every page of `len` bytes at `addr` is mapped and readable, and writable if
/// `write`, without touching the memory (module doc). An empty range is always fine.
pub fn check(addr: usize, len: usize, write: bool) -> Result<(), MappingFault> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(MappingFault::NotMapped)?;
    match std::fs::File::open("/proc/self/maps") {
        Ok(f) => check_lines(BufReader::new(f), addr, end, write),
        Err(_) => {
            if all_mapped(addr, end) {
                Ok(())
            } else {
                Err(MappingFault::NotMapped)
            }
        }
    }
}

/// One line of /proc/PID/maps: `start-end perms ...` (hexadecimal addresses); the start, the
/// end, and whether the mapping is readable and writable.
fn parse_line(line: &str) -> Option<(usize, usize, bool, bool)> {
    let mut cols = line.split_ascii_whitespace();
    let (start, end) = cols.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = cols.next()?.as_bytes();
    Some((
        start,
        end,
        perms.first() == Some(&b'r'),
        perms.get(1) == Some(&b'w'),
    ))
}

/// [`check`] over the lines of a maps file: `addr .. end` must be covered, with no gap, by
/// mappings with the permissions asked for.
fn check_lines(
    maps: impl BufRead,
    addr: usize,
    end: usize,
    write: bool,
) -> Result<(), MappingFault> {
    // The first byte not yet found mapped.
    let mut covered = addr;
    for line in maps.lines() {
        let Ok(line) = line else { break };
        let Some((start, stop, r, w)) = parse_line(&line) else {
            continue;
        };
        if stop <= covered {
            continue;
        }
        if start > covered {
            // A hole before this mapping (or the mapping lies past the range altogether).
            return Err(MappingFault::NotMapped);
        }
        if !r {
            return Err(MappingFault::NotReadable);
        }
        if write && !w {
            return Err(MappingFault::NotWritable);
        }
        covered = stop;
        if covered >= end {
            return Ok(());
        }
    }
    Err(MappingFault::NotMapped)
}

/// Whether every page of `addr .. end` is mapped, asked of mincore (ENOMEM names an unmapped
/// page) a chunk of pages at a time, touching nothing.
fn all_mapped(addr: usize, end: usize) -> bool {
    const CHUNK_PAGES: usize = 4096;
    let page = page_size();
    let mut at = addr & !(page - 1);
    let mut vec = [0u8; CHUNK_PAGES];
    while at < end {
        let bytes = (end - at).min(CHUNK_PAGES * page);
        // SAFETY: mincore reads no memory of the range; it writes one byte per page of it
        // into `vec`, which holds CHUNK_PAGES, at least bytes / page rounded up.
        let r = unsafe { libc::mincore(at as *mut libc::c_void, bytes, vec.as_mut_ptr()) };
        if r != 0 {
            return false;
        }
        at += bytes;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Held by the tests that map, unmap and protect pages: a hole one test leaves is where
    /// the kernel puts the next mapping another test running meanwhile asks for.
    static ADDRESS_SPACE: Mutex<()> = Mutex::new(());

    /// An anonymous private mapping of `pages` pages with `prot`.
    fn map(pages: usize, prot: libc::c_int) -> usize {
        // SAFETY: a fresh anonymous mapping, no address asked for.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * page_size(),
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        m as usize
    }

    fn unmap(addr: usize, pages: usize) {
        // SAFETY: pages of a mapping this test made and no longer uses.
        assert_eq!(
            unsafe { libc::munmap(addr as *mut _, pages * page_size()) },
            0
        );
    }

    #[test]
    fn a_range_with_a_page_not_mapped_is_refused() {
        let _g = ADDRESS_SPACE.lock().unwrap_or_else(|e| e.into_inner());
        let page = page_size();
        let base = map(3, libc::PROT_READ | libc::PROT_WRITE);
        unmap(base + page, 1);
        assert_eq!(check(base, page, true), Ok(()));
        assert_eq!(check(base + 10, page - 20, true), Ok(()));
        assert_eq!(check(base, 2 * page, false), Err(MappingFault::NotMapped));
        assert_eq!(
            check(base + page - 1, 2, false),
            Err(MappingFault::NotMapped)
        );
        assert_eq!(check(base + 2 * page, page, true), Ok(()));
        assert_eq!(
            check(0xDEAD_0000, 4096, false),
            Err(MappingFault::NotMapped)
        );
        assert_eq!(
            check(usize::MAX - 10, 100, false),
            Err(MappingFault::NotMapped)
        );
        assert_eq!(check(base, 0, true), Ok(()));
        // The fallback without /proc gives the same answers about holes.
        assert!(all_mapped(base, base + page));
        assert!(!all_mapped(base, base + 2 * page));
        assert!(!all_mapped(0xDEAD_0000, 0xDEAD_1000));
        unmap(base, 1);
        unmap(base + 2 * page, 1);
    }

    #[test]
    fn write_access_needs_a_writable_mapping_and_every_access_a_readable_one() {
        let _g = ADDRESS_SPACE.lock().unwrap_or_else(|e| e.into_inner());
        let page = page_size();
        let ro = map(2, libc::PROT_READ);
        assert_eq!(check(ro, 2 * page, false), Ok(()));
        assert_eq!(check(ro, 2 * page, true), Err(MappingFault::NotWritable));
        let none = map(1, libc::PROT_NONE);
        assert_eq!(check(none, page, false), Err(MappingFault::NotReadable));
        assert_eq!(check(none, page, true), Err(MappingFault::NotReadable));
        // A writable range whose last page was made read-only after the mapping.
        let rw = map(2, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the second page of the mapping made above.
        assert_eq!(
            unsafe { libc::mprotect((rw + page) as *mut _, page, libc::PROT_READ) },
            0
        );
        assert_eq!(check(rw, page, true), Ok(()));
        assert_eq!(check(rw, 2 * page, true), Err(MappingFault::NotWritable));
        assert_eq!(check(rw, 2 * page, false), Ok(()));
        unmap(ro, 2);
        unmap(none, 1);
        unmap(rw, 2);
    }

    #[test]
    fn maps_lines_are_read_in_order_and_holes_between_them_found() {
        let maps = "1000-3000 rw-p 00000000 00:00 0\n\
                    3000-4000 r--p 00000000 00:00 0 /lib/x.so\n\
                    5000-6000 rw-s 00000000 00:01 7 /dev/shm/y\n\
                    garbage line\n\
                    7000-8000 ---p 00000000 00:00 0\n";
        let run = |a, e, w| check_lines(maps.as_bytes(), a, e, w);
        assert_eq!(run(0x1000, 0x3000, true), Ok(()));
        assert_eq!(run(0x2000, 0x4000, false), Ok(()));
        assert_eq!(run(0x2000, 0x4000, true), Err(MappingFault::NotWritable));
        assert_eq!(run(0x3800, 0x5800, false), Err(MappingFault::NotMapped));
        assert_eq!(run(0x5000, 0x6000, true), Ok(()));
        assert_eq!(run(0x7000, 0x7001, false), Err(MappingFault::NotReadable));
        assert_eq!(run(0x8000, 0x9000, false), Err(MappingFault::NotMapped));
        assert_eq!(run(0x500, 0x1800, false), Err(MappingFault::NotMapped));
    }
}
