//! The shim's structs against rdma-core 44's headers: a C program compiled against
//! /usr/include/infiniband/verbs.h prints the size and alignment of every struct and the offset
//! of every field that `ibverbs::ffi` declares: sizes and offsets must be equal, alignments
//! no greater than C's.

mod common;

use std::fmt::Write as _;
use std::process::Command;

#[test]
fn every_size_and_offset_matches_verbs_h() {
    let table = ibverbs::ffi::layout_table();
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n#include <rdma/ib_user_sa.h>\n#include <rdma/ib_user_verbs.h>\nint main(void) {\n",
    );
    for (name, _) in &table {
        let expr = match (name.strip_prefix("sizeof "), name.strip_prefix("alignof ")) {
            (Some(t), _) => format!("sizeof(struct {t})"),
            (_, Some(t)) => format!("_Alignof(struct {t})"),
            _ => {
                let (t, f) = name.split_once('.').unwrap();
                format!("offsetof(struct {t}, {f})")
            }
        };
        writeln!(src, "printf(\"%s %zu\\n\", \"{name}\", (size_t)({expr}));").unwrap();
    }
    src.push_str("return 0; }\n");
    let dir = std::env::temp_dir().join(format!("softroce-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("layout.c");
    std::fs::write(&c, src).unwrap();
    let exe = dir.join("layout");
    let cc = common::program("cc", "gcc");
    let st = Command::new(cc)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "cannot compile against verbs.h (install libibverbs-dev)"
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let c_side: Vec<(String, usize)> = text
        .lines()
        .map(|l| {
            let (n, v) = l.rsplit_once(' ').unwrap();
            (n.to_string(), v.parse().unwrap())
        })
        .collect();
    assert_eq!(c_side.len(), table.len());
    let wrong: Vec<String> = table
        .iter()
        .zip(&c_side)
        .filter(|(r, c)| {
            // An alignment may be lower than C's, never higher: every pointer a C caller
            // passes is then aligned enough for Rust, and a struct embedded in another still
            // lands where C puts it (the offsets say so). ibv_grh and ibv_gid_entry, which C
            // aligns to 8 for `union ibv_gid`, are only read and written through callers'
            // pointers (UD receive buffers, GID tables), so the shim asks only for 4.
            r.0 != c.0
                || if r.0.starts_with("alignof ") {
                    r.1 > c.1
                } else {
                    r.1 != c.1
                }
        })
        .map(|(r, c)| format!("{}: rust {} C {}", r.0, r.1, c.1))
        .collect();
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
    assert!(table.len() > 200, "the table covers every field");
    let _ = std::fs::remove_dir_all(dir);
}
