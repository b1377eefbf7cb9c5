#!/usr/bin/env python3
"""Reads the verbose output of rdma-core's tests/run_tests.py (unittest -v) and writes the
per-module table of tests/rdma_core/RESULTS.md: ran, ok, skipped (with each reason and its
count), failed (FAIL or ERROR, with the test names).

usage: table.py OUTPUT.txt RESULTS.md [--baseline COMMITTED.md]
The table replaces what follows the line `<!-- table -->` of RESULTS.md (the whole file if it
has none). With --baseline, exits 1 if a test failed, the run did not finish, or a module has fewer ok
tests than the committed table."""
import collections, re, sys

RESULT = re.compile(r" \.\.\. (ok|FAIL|ERROR|skipped (.*)|expected failure|unexpected success)$")
ALONE = re.compile(r"^(ok|FAIL|ERROR|skipped (.*)|expected failure|unexpected success)$")
START = re.compile(r"^(test\w*) \((tests\.(test_\w+)\.[\w.]+)\)")


def parse(text):
    """[(module, test id, outcome, skip reason)] in the order run."""
    out, pending = [], None
    for line in text.splitlines():
        m = START.match(line)
        if m:
            pending = (m.group(3), m.group(2))
        r = RESULT.search(line)
        if not r and pending:
            # A test printed to stdout after unittest's " ... ": the outcome follows alone.
            r = ALONE.match(line)
        if r and pending:
            kind = r.group(1)
            outcome = "skip" if kind.startswith("skipped") else "ok" if kind == "ok" else "fail"
            reason = r.group(2) or ""
            out.append((pending[0], pending[1], outcome, reason.strip("'\"")))
            pending = None
    return out


def table(rows, ran_line):
    by = collections.OrderedDict()
    for mod, tid, outcome, reason in sorted(rows):
        e = by.setdefault(mod, {"ok": 0, "skip": collections.Counter(), "fail": []})
        if outcome == "ok":
            e["ok"] += 1
        elif outcome == "skip":
            e["skip"][reason] += 1
        else:
            e["fail"].append(tid.split(".")[-1])
    lines = ["| module | ran | ok | skip | skip reasons | fail |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    tot = [0, 0, 0, 0]
    for mod, e in by.items():
        nskip = sum(e["skip"].values())
        ran = e["ok"] + nskip + len(e["fail"])
        reasons = "; ".join(f"{n}× {r}" for r, n in e["skip"].most_common()).replace("|", "/")
        fails = ", ".join(e["fail"]) if e["fail"] else "0"
        lines.append(f"| {mod} | {ran} | {e['ok']} | {nskip} | {reasons} | {fails} |")
        tot = [tot[0] + ran, tot[1] + e["ok"], tot[2] + nskip, tot[3] + len(e["fail"])]
    lines.append(f"| **total** | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** | | **{tot[3]}** |")
    return by, tot, "\n".join(lines) + "\n"


def committed_ok(path):
    ok = {}
    for line in open(path):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 4 and c[1].startswith("test_"):
            ok[c[1]] = int(c[3])
    return ok


def main():
    args = sys.argv[1:]
    baseline = None
    if "--baseline" in args:
        i = args.index("--baseline")
        baseline = args[i + 1]
        del args[i:i + 2]
    text = open(args[0], errors="replace").read()
    rows = parse(text)
    m = re.search(r"^Ran (\d+) tests? in ([\d.]+)s$", text, re.M)
    by, tot, body = table(rows, m)
    try:
        old = open(args[1]).read()
    except FileNotFoundError:
        old = ""
    head = old.split("<!-- table -->")[0] if "<!-- table -->" in old else ""
    with open(args[1], "w") as f:
        if head:
            f.write(head + "<!-- table -->\n")
        f.write(body)
    print(body, end="")
    problems = []
    if not m:
        problems.append("run_tests.py did not finish (no 'Ran N tests' line)")
    elif int(m.group(1)) != tot[0]:
        problems.append(f"unittest ran {m.group(1)} tests, the table has {tot[0]}")
    if tot[3]:
        problems.append(f"{tot[3]} tests failed")
    if baseline:
        for mod, want in committed_ok(baseline).items():
            got = by.get(mod, {"ok": 0})["ok"]
            if got < want:
                problems.append(f"{mod}: {got} ok, the committed table has {want}")
    print(f"rdma-core: {tot[1]} passed, {tot[3]} failed, {tot[2]} skipped")
    for p in problems:
        print("rdma-core tests: " + p, file=sys.stderr)
    sys.exit(1 if problems else 0)


main()
