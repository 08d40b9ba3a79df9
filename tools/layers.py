#!/usr/bin/env python3
"""layers.py - the include graph of src/ between folders, checked against the layers.

    tools/layers.py              the folder graph (arrows with the number of includes)
    tools/layers.py --dot        the same as Graphviz dot
    tools/layers.py --src DIR    the graph of another tree's src/ (an earlier commit)
    tools/layers.py --check      exit 1 when an include goes from a lower layer to a higher
                                 one, or between folders of one layer, and is not one of
                                 the known exceptions below (each says why it is there);
                                 and the same for calls (below)
    tools/layers.py --calls      the folder graph of calls (arrows with the number of
                                 (file, symbol) pairs), from the build's objects, and the
                                 largest cycle of files by calls (--verbose: which)
    --build DIR                  the build directory whose objects --check and --calls read
                                 (default: build/ beside tools/)

Calls: an include can be honest while the link is not (a function declared in a low header
and defined higher up). So --check also reads each object of src/ in the build (nm: its
undefined symbols, and which object defines each) and fails on a symbol that one folder's
object takes from a higher layer's or a sideways folder's object. Without the build's
objects, --check says so and fails.

Layers, lowest first; a folder may include its own files and those of lower layers:

    base       log, params, statuses, hashing, addresses, the syscall table, wire formats
    reduce     the per-element math and host reductions (the CUDA kernels share elem.h)
    algo, transport, cuda
               schedules and their cost, transports, CUDA
    core       the engine, executor, plans, bootstrap, topology, traces, agreement
    path       the ways a call runs (flat, sched) and the chooser
    api        the public calls (the stream-ordered ones and their CUDA IPC path too),
               comms, launchers, the quantized all-reduce
    compat     the NCCL library, on the public API

Known exceptions (an include or a call that must cross the layers, with the reason) go in
KNOWN and KNOWN_CALLS below; there is none. The test fails on a new exception as on a
stale one.
"""
import collections
import os
import re
import subprocess
import sys

LAYERS = [
    ('base',),
    ('reduce',),
    ('algo', 'transport', 'cuda'),
    ('core',),
    ('path',),
    ('api',),
    ('compat',),
]
RANK = {f: i for i, group in enumerate(LAYERS) for f in group}

# (from file, to file): why the arrow is still there
KNOWN = {
}

# (from file, symbol): why the call is still there
KNOWN_CALLS = {}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def graph(src):
    files = {}
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith(('.c', '.h', '.cu')):
                p = os.path.join(d, n)
                files[os.path.relpath(p, src)] = p
    arrows = []
    for rel, path in sorted(files.items()):
        text = open(path, encoding='utf-8', errors='replace').read()
        for inc in INCLUDE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if target not in files:
                target = os.path.normpath(inc)  # "core/exec.h" from the src/ include dir
            if target not in files:
                continue  # public or generated headers (coll.h, coll_config.h)
            arrows.append((rel, target))
    return arrows


def folder(rel):
    return rel.split('/', 1)[0] if '/' in rel else '.'


def objects(src, build):
    """{source file relative to src/: its object in build} for every .c of src/ that the
    build compiled (meson names an object after its source's path, '/' as '_')."""
    rels = {}
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith('.c'):
                rel = os.path.relpath(os.path.join(d, n), src)
                rels['src_' + rel.replace('/', '_') + '.o'] = rel
    # the build's own objects only: a build nested in it (the fuzz harnesses' under
    # tests/fuzz) is made at its test's run and can be older than the sources
    d = os.path.join(build, 'libcoll_internal.a.p')
    names = os.listdir(d) if os.path.isdir(d) else []
    return {rels[n]: os.path.join(d, n) for n in names if n in rels}


def nm(path, *flags):
    out = subprocess.run(['nm', '-P', *flags, path], check=True, capture_output=True,
                         text=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def calls(src, build):
    """[(file, symbol, defining file)] for every symbol a src/ object takes from another."""
    objs = objects(src, build)
    where, undef = {}, {}
    for rel, path in objs.items():
        for f in nm(path, '--defined-only', '--extern-only'):
            if len(f) >= 2 and f[1] not in 'UwvN':
                where[f[0]] = rel
        undef[rel] = sorted({f[0] for f in nm(path, '--undefined-only') if f})
    return objs, [(rel, sym, where[sym]) for rel in sorted(undef) for sym in undef[rel]
                  if sym in where and where[sym] != rel]


def cycles(cs):
    """The strongly connected components (two files or more) of the file call graph."""
    succ = collections.defaultdict(set)
    for a, _, b in cs:
        succ[a].add(b)
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's, iterative: a few hundred files, but no recursion limit
        work = [(v, iter(sorted(succ[v])))]
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[u])
                if low[u] == index[u]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == u:
                            break
                    if len(comp) > 1:
                        out.append(comp)
            elif w not in index:
                index[w] = low[w] = n[0]
                n[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(succ[w]))))
            elif w in on:
                low[u] = min(low[u], index[w])

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return out


def judge(edges, known, gone, label):
    """Print and return (violations, stale exceptions) of edges (a, b, key, what, verb): an
    edge from a's folder to b's is fine within a folder or downwards, or when (a, key) is a
    known exception; an exception no edge uses any more is stale."""
    bad, seen = [], set()
    for a, b, key, what, verb in edges:
        fa, fb = folder(a), folder(b)
        if fa == fb or RANK.get(fa, 99) > RANK.get(fb, 99):
            continue
        if (a, key) in known:
            seen.add((a, key))
            continue
        bad.append(f'{a} {what}: {fa} (layer {RANK.get(fa, "?")}) may not {verb} '
                   f'{fb} (layer {RANK.get(fb, "?")})')
    stale = [f'{a}: {k}' for a, k in known if (a, k) not in seen]
    for m in bad:
        print(f'{label}:', m)
    for m in stale:
        print(f'stale exception ({gone}):', m)
    return bad, stale


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    src = os.path.join(here, '..', 'src')
    if '--src' in args:  # another tree's src/, e.g. an earlier commit's worktree
        src = args[args.index('--src') + 1]
    arrows = graph(src)
    build = os.path.join(here, '..', 'build')
    if '--build' in args:
        build = args[args.index('--build') + 1]
    if '--calls' in args:
        objs, cs = calls(src, build)
        if not objs:
            print(f'no objects of src/ under {build}: build first (meson compile -C build)')
            return 1
        ccount = collections.Counter((folder(a), folder(b)) for a, _, b in cs
                                     if folder(a) != folder(b))
        for (a, b), n in sorted(ccount.items()):
            up = RANK.get(a, 99) <= RANK.get(b, 99)
            print(f'{a:>10} -> {b:<10} {n:3d}{"   (upward or sideways)" if up else ""}')
        big = max(cycles(cs), key=len, default=[])
        print(f'{len(objs)} objects; the largest cycle of files by calls: {len(big)} files'
              + (f' ({", ".join(sorted(big))})' if '--verbose' in args else ''))
        return 0
    counts = collections.Counter((folder(a), folder(b)) for a, b in arrows
                                 if folder(a) != folder(b))
    if '--dot' in args:
        print('digraph layers {\n  rankdir=BT;')
        for (a, b), n in sorted(counts.items()):
            bad = RANK.get(a, 99) <= RANK.get(b, 99)
            print(f'  "{a}" -> "{b}" [label="{n}"{", color=red" if bad else ""}];')
        print('}')
        return 0
    if '--check' not in args:
        for (a, b), n in sorted(counts.items()):
            up = RANK.get(a, 99) <= RANK.get(b, 99)
            print(f'{a:>10} -> {b:<10} {n:3d}{"   (upward or sideways)" if up else ""}')
        return 0
    bad, stale = judge(((a, b, b, f'includes {b}', 'see') for a, b in arrows), KNOWN,
                       'the include is gone: remove it from KNOWN', 'layer violation')
    print(f'{len(arrows)} includes, {len(KNOWN) - len(stale)} known exceptions, {len(bad)} '
          f'violations, {len(stale)} stale')
    objs, cs = calls(src, build)
    if not objs:
        print(f'no objects of src/ under {build}: the calls are not checked (build first, '
              f'or name the build with --build DIR)')
        return 1
    cbad, cstale = judge(((a, b, sym, f'calls {sym} in {b}', 'call') for a, sym, b in cs),
                         KNOWN_CALLS, 'the call is gone: remove it from KNOWN_CALLS',
                         'call violation')
    print(f'{len(objs)} objects, {len(cs)} calls between files, '
          f'{len(KNOWN_CALLS) - len(cstale)} known exceptions, {len(cbad)} violations, '
          f'{len(cstale)} stale')
    return 1 if bad or stale or cbad or cstale else 0


if __name__ == '__main__':
    sys.exit(main())
