//! ibverbs/tests/c/beyond_rxe.c: the verbs rxe lacks (spec-notes/beyond-rxe.md) through the C
//! ABI: on-demand paging (caps, a region over memory mapped after registration, the implicit
//! region, ibv_advise_mr and its errors), ibv_rereg_mr of access rights under the same keys,
//! device memory (copies, zero-based regions the peer writes into, EBUSY while registered),
//! thread and parent domains (a region made through a parent domain serving a QP of its PD),
//! and completion timestamps within the clocks read around the operation. Compiled against
//! Debian's headers, linked with -libverbs, run with the shim first on LD_LIBRARY_PATH.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn beyond_rxe_c_passes_every_check() {
    let t = CTest::build("tests/c/beyond_rxe.c", &[], &["-libverbs"]);
    t.check(
        under_shim(t.exe(), "127.0.0.21"),
        Duration::from_secs(60),
        100,
    );
}

/// ibverbs/tests/c/tm.c: tag matching in software (spec-notes/beyond-rxe.md rule 13): tm_caps,
/// a TM SRQ, ibv_post_srq_ops with its completions and TM errors, ibv_wc_read_tm_info, and
/// matched, unexpected and NO_TAG messages over RC with the unexpected count's sync.
#[test]
fn tag_matching_c_passes_every_check() {
    let t = CTest::build("tests/c/tm.c", &[], &["-libverbs"]);
    t.check(
        under_shim(t.exe(), "127.0.0.58"),
        Duration::from_secs(60),
        60,
    );
}
