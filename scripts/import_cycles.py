#!/usr/bin/env python3
"""Reports import cycles inside each folder (with --siblings: only those among its files and
subfolders, mod.rs left out) of a crate's src/: for every folder, a graph whose
nodes are its files and subfolders (mod.rs / lib.rs as "mod") and whose edges are the
`crate::`, `super::`, `self::` and bare child-module paths (in use statements and inline) that
reach a sibling. Test modules (`#[cfg(test)] mod tests`) are left out."""
import os, re, sys

def strip(text):
    text = re.split(r'#\[cfg\(test\)\]\s*mod tests\b', text)[0]
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    text = re.sub(r'b?"(\\.|[^"\\])*"', '""', text)
    return text

def inline_mods(text):
    """A function from a text position to how many inline `mod x { .. }` blocks enclose it."""
    spans, stack, depth = [], [], 0
    opens = {m.end() - 1 for m in re.finditer(r'\bmod\s+\w+\s*\{', text)}
    for i, ch in enumerate(text):
        if ch == '{':
            depth += 1
            if i in opens:
                stack.append((i, depth))
        elif ch == '}':
            if stack and stack[-1][1] == depth:
                spans.append((stack.pop()[0], i))
            depth -= 1
    return lambda pos: sum(1 for a, b in spans if a < pos < b)

def expand(tree):
    """use-tree text -> list of paths (lists of segments)"""
    tree = tree.strip()
    i = tree.find('{')
    if i < 0:
        t = re.sub(r'\s+as\s+\w+$', '', tree)
        return [[s for s in t.split('::') if s]]
    prefix = [s for s in tree[:i].split('::') if s]
    inner = tree[i+1:tree.rfind('}')]
    parts, depth, cur = [], 0, ''
    for ch in inner:
        if ch == ',' and depth == 0:
            parts.append(cur); cur = ''
            continue
        depth += ch == '{'
        depth -= ch == '}'
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            for q in expand(p):
                out.append(prefix + q)
    return out

def modpath(root, f):
    rel = os.path.relpath(f, root)[:-3].split(os.sep)
    if rel[-1] in ('mod', 'lib'):
        rel = rel[:-1]
    return rel

def is_module(root, segs):
    p = os.path.join(root, *segs)
    return os.path.isfile(p + '.rs') or os.path.isdir(p)

def resolve(root, cur, segs, is_dir_mod):
    # cur: module path of the file; returns absolute module path list or None
    if not segs:
        return None
    base = list(cur)
    s = list(segs)
    if s[0] == 'crate':
        base, s = [], s[1:]
    elif s[0] in ('super', 'self'):
        while s and s[0] in ('super', 'self'):
            if s[0] == 'super':
                base = base[:-1]
            s = s[1:]
    elif is_module(root, cur + [s[0]]):
        pass  # a child module named bare
    else:
        return None
    return base + s

ITEM = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:extern\s+"C"\s+)?(?:const\s+)?(?:fn|struct|enum|const|static|type|trait|union|mod|macro_rules!)\s+(\w+)', re.M)

def defined(root, segs):
    """Names a module defines itself (not through `use`)."""
    for p in (os.path.join(root, *segs) + '.rs', os.path.join(root, *segs, 'mod.rs'),
              os.path.join(root, 'lib.rs') if not segs else None):
        if p and os.path.isfile(p):
            return set(ITEM.findall(strip(open(p).read())))
    return set()

def reexported(root, segs, name):
    """The child module of `segs` that `name` comes from when `segs`'s mod.rs only re-exports
    it (`pub use child::name`, `pub use child::*`); None otherwise."""
    for p in (os.path.join(root, *segs, 'mod.rs'), os.path.join(root, 'lib.rs') if not segs else None):
        if not p or not os.path.isfile(p):
            continue
        text = strip(open(p).read())
        if name in set(ITEM.findall(text)):
            return None
        for m in re.finditer(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', text):
            for path in expand(m.group(1)):
                path = [x for x in path if x != 'self']
                if path and path[0] in ('super', 'crate'):
                    continue
                if len(path) >= 2 and path[-1] == name and is_module(root, segs + [path[0]]):
                    return path[0]
                if len(path) >= 2 and path[-1] == '*' and is_module(root, segs + [path[0]]) \
                        and name in defined(root, segs + path[:-1]):
                    return path[0]
    return None

def main(root):
    files = []
    for d, _, fs in os.walk(root):
        files += [os.path.join(d, f) for f in fs if f.endswith('.rs')]
    graphs = {}
    for f in files:
        cur = modpath(root, f)
        text = strip(open(f).read())
        paths = []
        inline = inline_mods(text)
        for m in re.finditer(r'\buse\s+([^;]+);', text):
            paths += [(q, inline(m.start())) for q in expand(m.group(1))]
        for m in re.finditer(r'\b((?:crate|super|self)(?:::\w+)+)', text):
            paths.append((m.group(1).split('::'), inline(m.start())))
        for p, inner in paths:
            if p and p[-1] == '*':
                p = p[:-1]
            # Inside an inline `mod x { .. }`, `super` first climbs out of it.
            k = 0
            while inner and k < len(p) and p[k] == 'super':
                inner, k = inner - 1, k + 1
            if k and inner == 0 and p[k:k+1] != ['super']:
                p = ['self'] + p[k:]
            elif k and inner == 0:
                p = p[k:]
            elif inner:
                continue  # a path relative to an inline module's own items
            a = resolve(root, cur, p, f.endswith(('mod.rs', 'lib.rs')))
            if a is None:
                continue
            # common folder: the longest module path that is a prefix of both and is a folder
            for k in range(len(cur) + 1):
                folder = cur[:k]
                if a[:k] != folder:
                    break
                src = cur[k] if k < len(cur) else 'mod'
                if k < len(a) and is_module(root, folder + [a[k]]):
                    dst = a[k]
                elif k < len(a):
                    dst = reexported(root, folder, a[k]) or 'mod'
                else:
                    dst = 'mod'
                if src != dst:
                    graphs.setdefault('/'.join(folder) or '.', {}).setdefault(src, set()).add(dst)
    found = False
    for folder, g in sorted(graphs.items()):
        if SIBLINGS_ONLY:
            g = {k: {x for x in v if x != 'mod'} for k, v in g.items() if k != 'mod'}
        cycles = scc(g)
        for c in cycles:
            found = True
            print(f'{root}/{folder}: cycle among {sorted(c)}')
            for n in sorted(c):
                print(f'    {n} -> {sorted(x for x in g.get(n, ()) if x in c)}')
    if not found:
        print(f'{root}: no import cycle inside any folder ({len(graphs)} folders with edges)')
    return found

def scc(g):
    idx, low, on, st, out, n = {}, {}, set(), [], [], [0]
    nodes = set(g) | {y for v in g.values() for y in v}
    def visit(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in idx:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)
    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in idx:
            visit(v)
    return out

SIBLINGS_ONLY = False

if __name__ == '__main__':
    bad = False
    if sys.argv[1:2] == ['--siblings']:
        SIBLINGS_ONLY = True
        sys.argv.pop(1)
    for r in sys.argv[1:]:
        bad |= main(r)
    sys.exit(1 if bad else 0)
