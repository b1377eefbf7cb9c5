//! Keeps the "Implemented in:" pointers of spec-notes/*.md true.
//!
//! Each rule ends with `(Source: ...; Implemented in: ...)`. The clause after "Implemented in:"
//! (up to the parenthesis that closes it; it may also hold "Tested in:") names files as paths
//! from the repository root, each optionally followed by items in backticks. This test checks
//! that every named path exists, that every backticked item occurs in the file named before
//! it, and that a clause naming no file says why ("not implemented" or "not code"). A file that
//! moves or a function that is renamed then fails here instead of leaving a stale pointer.

use std::path::{Path, PathBuf};

/// One "Implemented in:" clause of a note.
#[derive(Debug)]
struct Clause {
    /// The note and line the clause starts on, for messages.
    at: String,
    /// The clause text with whitespace collapsed.
    text: String,
}

/// Finds every "Implemented in:" clause (the words may be split across lines).
fn clauses(note: &str, text: &str) -> Vec<Clause> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find("Implemented") {
        let start = from + rel;
        from = start + "Implemented".len();
        let rest = &text[from..];
        let after_ws = rest.trim_start();
        if !after_ws.starts_with("in:") {
            continue;
        }
        let body = from + (rest.len() - after_ws.len()) + "in:".len();
        // The clause ends at the parenthesis that closes the "(Source: ..." it sits in.
        let mut depth = 1usize;
        let mut end = body;
        while end < bytes.len() {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        let line = text[..start].matches('\n').count() + 1;
        out.push(Clause {
            at: format!("{note}:{line}"),
            text: text[body..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        });
        from = end.max(from);
    }
    out
}

/// A reference in a clause: a file path or an item (backticked) that belongs to the last path.
#[derive(Debug, PartialEq)]
enum Ref {
    Path(String),
    Item(String),
}

const FILE_SUFFIXES: [&str; 6] = [".rs", ".c", ".h", ".sh", ".md", ".toml"];
const ROOTS: [&str; 5] = ["src/", "tests/", "fuzz/", "bench/", "spec-notes/"];

/// Splits a clause into paths and backticked items, in order. A word counts as a path when it
/// starts at a top-level folder or ends like a source file (so a bare `responder.rs` is caught
/// as a path that does not exist from the root).
fn refs(clause: &str) -> Vec<Ref> {
    let mut out = Vec::new();
    for (i, part) in clause.split('`').enumerate() {
        if i % 2 == 1 {
            out.push(Ref::Item(part.to_string()));
            continue;
        }
        for word in part.split(|c: char| c.is_whitespace() || ",;()".contains(c)) {
            let word = word.trim_end_matches(['.', ':']);
            let path_like = ROOTS.iter().any(|r| word.starts_with(r))
                || FILE_SUFFIXES
                    .iter()
                    .any(|s| word.ends_with(s) && word.len() > s.len());
            if path_like && !word.contains("::") {
                out.push(Ref::Path(word.to_string()));
            }
        }
    }
    out
}

/// Checks one clause against the tree under `root`; returns the problems found.
fn check(root: &Path, c: &Clause) -> Vec<String> {
    let mut problems = Vec::new();
    if c.text.contains("not yet written") {
        problems.push(format!(
            "{}: says \"not yet written\": name the file or say \"not implemented\" and why: {}",
            c.at, c.text
        ));
    }
    let refs = refs(&c.text);
    let mut last: Option<PathBuf> = None;
    for r in &refs {
        match r {
            Ref::Path(p) => {
                let full = root.join(p);
                if !full.exists() {
                    problems.push(format!("{}: {p} does not exist", c.at));
                }
                last = Some(full);
            }
            Ref::Item(item) => {
                let Some(file) = last.as_ref().filter(|f| f.is_file()) else {
                    continue;
                };
                let source = std::fs::read_to_string(file).unwrap_or_default();
                // `Type::method` or `a/b`: each part must occur in the file.
                for name in item.split(['/', ':']).filter(|s| !s.is_empty()) {
                    if !source.contains(name) {
                        problems.push(format!(
                            "{}: `{name}` does not occur in {}",
                            c.at,
                            file.strip_prefix(root).unwrap_or(file).display()
                        ));
                    }
                }
            }
        }
    }
    let names_a_path = refs.iter().any(|r| matches!(r, Ref::Path(_)));
    if !names_a_path && !c.text.contains("not implemented") && !c.text.contains("not code") {
        problems.push(format!(
            "{}: names no file and does not say \"not implemented\": {}",
            c.at, c.text
        ));
    }
    problems
}

#[test]
fn every_implemented_in_pointer_names_existing_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut notes: Vec<PathBuf> = std::fs::read_dir(root.join("spec-notes"))
        .expect("spec-notes/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        // README.md describes the form with a placeholder clause.
        .filter(|p| p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    notes.sort();
    let mut total = 0;
    let mut problems = Vec::new();
    for note in &notes {
        let text = std::fs::read_to_string(note).expect("readable note");
        let name = note
            .strip_prefix(root)
            .unwrap_or(note)
            .display()
            .to_string();
        for c in clauses(&name, &text) {
            total += 1;
            problems.extend(check(root, &c));
        }
    }
    // The notes hold well over a hundred rules; finding few would mean the parser broke.
    assert!(total > 100, "found only {total} clauses in {notes:?}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_catches_missing_files_items_and_placeholders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = "1. **R.** (Source: x; Implemented in: src/wire/bth.rs `BthRepr`, responder.rs)\n\
                2. **S.** (Source: y; Implemented\n   in: src/wire/psn.rs `no_such_item_here`)\n\
                3. **T.** (Source: z (nested); Implemented in: transport (not yet written))\n\
                4. **U.** (Source: z; Implemented in: not implemented: no UD QPs)\n";
    let cs = clauses("sample.md", text);
    assert_eq!(cs.len(), 4, "{cs:?}");
    assert_eq!(cs[1].at, "sample.md:2");
    assert_eq!(cs[1].text, "src/wire/psn.rs `no_such_item_here`");
    let p0 = check(root, &cs[0]);
    assert_eq!(
        p0,
        vec!["sample.md:1: responder.rs does not exist".to_string()]
    );
    let p1 = check(root, &cs[1]);
    assert_eq!(p1.len(), 1);
    assert!(p1[0].contains("`no_such_item_here` does not occur in src/wire/psn.rs"));
    let p2 = check(root, &cs[2]);
    assert_eq!(p2.len(), 2, "{p2:?}");
    assert!(check(root, &cs[3]).is_empty());
}
