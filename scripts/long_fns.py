#!/usr/bin/env python3
"""Functions longer than N lines (default 100) in the given trees, test code left out: a `fn`
item's lines from its signature to its closing brace, found by brace matching with strings,
chars and comments skipped."""
import os, re, sys
LIMIT = int(os.environ.get('LIMIT', 100))
FN = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"C"\s+)?fn\s+(\w+)')
def body_end(lines, i):
    depth, started = 0, False
    for j in range(i, len(lines)):
        l = re.sub(r'//.*', '', lines[j])
        l = re.sub(r"b?'(\\.|[^'\\])'", "''", l)
        l = re.sub(r'b?"(\\.|[^"\\])*"', '""', l)
        for ch in l:
            if ch == '{':
                depth += 1; started = True
            elif ch == '}':
                depth -= 1
                if started and depth == 0:
                    return j
            elif ch == ';' and not started and depth == 0:
                return None  # a declaration without body
    return None
out = []
for root in sys.argv[1:]:
    for d, _, fs in os.walk(root):
        if '/tests' in d + '/' and os.path.basename(d) == 'tests' or '/tests/' in d + '/':
            continue
        for f in fs:
            if not f.endswith('.rs') or f == 'tests.rs' or f.endswith('_tests.rs'):
                continue
            p = os.path.join(d, f)
            lines = open(p).read().split('\n')
            cut = len(lines)
            for k, l in enumerate(lines):
                if re.match(r'\s*#\[cfg\(test\)\]', l) and k + 1 < len(lines) and re.match(r'\s*(pub(\(\w+\))?\s+)?mod\s+\w+', lines[k + 1]):
                    cut = k; break
            i = 0
            while i < cut:
                m = FN.match(lines[i])
                if m:
                    e = body_end(lines, i)
                    if e is not None:
                        n = e - i + 1
                        if n > LIMIT:
                            out.append((n, p, i + 1, m.group(1)))
                i += 1
for n, p, l, name in sorted(out, reverse=True):
    print(f'{n:5} {p}:{l} {name}')
print(f'{len(out)} functions over {LIMIT} lines')
