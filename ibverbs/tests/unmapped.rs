//! ibverbs/tests/c/unmapped.c: registered memory that the application unmaps or protects while
//! it is registered, then written, read and added into by a peer QP: the process survives (no
//! SIGSEGV from the engine) and the initiator gets a remote access error, as from an
//! on-demand-paging device (spec-notes/memory-placement.md rule 15). Compiled against Debian's
//! headers, linked with -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn memory_unmapped_or_protected_while_registered_fails_the_access_not_the_process() {
    let t = CTest::build("tests/c/unmapped.c", &[], &["-libverbs"]);
    t.check(
        under_shim(t.exe(), "127.0.19.23"),
        Duration::from_secs(60),
        60,
    );
}
