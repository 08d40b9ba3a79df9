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
    tools/layers.py --graph PREFIX   the folder graphs of includes and of calls as Graphviz
                                 dot (PREFIX-includes.dot, PREFIX-calls.dot), drawn as PNG
                                 (dot's, or else gnuplot's matrix of counts), and as text
                                 with the files and lines per folder (PREFIX.txt)
    tools/layers.py --self-test  the checks run on a small tree made on the spot: they must
                                 pass it, and fail each violation put into it

Tools: collsim, collviz and the others in tools/ see the library through api/introspect.h
(and what it includes) and the public coll.h only. --check also fails on a file of tools/
that includes any other header of src/, and on a tool's object (compile_commands.json
names them) that takes from the library's objects a symbol none of those headers declares.

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
    path       the ways a call runs (stream with its CUDA IPC, quant, flat, sched) and
               the chooser
    api        the public calls, comms, launchers
    compat     the NCCL library, on the public API

Known exceptions (an include or a call that must cross the layers, with the reason) go in
KNOWN and KNOWN_CALLS below; there is none. The test fails on a new exception as on a
stale one.
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

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

# Of src/, what a file of tools/ may include (with what it includes in turn).
TOOL_HEADERS = ('api/introspect.h',)


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


COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', re.S)
IDENT = re.compile(r'\b[A-Za-z_]\w*\b')


def resolve(src, path, inc):
    """The file a quoted include of path names: beside path, else under src/ (the include
    directory); None for a header of neither (coll.h, generated ones)."""
    for cand in (os.path.join(os.path.dirname(path), inc), os.path.join(src, inc)):
        if os.path.isfile(cand):
            return os.path.normpath(cand)
    return None


def closure(src, rel):
    """rel and every file of src/ it includes, transitively."""
    seen, todo = set(), [os.path.normpath(os.path.join(src, rel))]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        text = open(p, encoding='utf-8', errors='replace').read()
        for inc in INCLUDE.findall(text):
            t = resolve(src, p, inc)
            if t and under(t, src):
                todo.append(t)
    return sorted(seen)


def under(path, d):
    return os.path.realpath(path).startswith(os.path.realpath(d) + os.sep)


def declared(paths):
    """Every identifier of these headers outside comments and strings: a symbol a tool
    takes from the library must be one of them."""
    names = set()
    for p in paths:
        names |= set(IDENT.findall(COMMENT.sub(' ', open(p, encoding='utf-8',
                                                          errors='replace').read())))
    return names


def tool_objects(root, build):
    """{source file relative to root: [objects]} for every .c of tools/ the build compiled
    (compile_commands.json)."""
    path = os.path.join(build, 'compile_commands.json')
    if not os.path.isfile(path):
        return {}
    out = collections.defaultdict(list)
    for e in json.load(open(path)):
        f = os.path.normpath(os.path.join(e['directory'], e['file']))
        if under(f, os.path.join(root, 'tools')):
            out[os.path.relpath(f, root)].append(os.path.join(e['directory'], e['output']))
    return out


def tool_check(root, src, build):
    """(tool objects, violations): includes of src/ beyond TOOL_HEADERS in tools/, and
    library symbols a tool's object takes that neither TOOL_HEADERS' closure nor the public
    header declares."""
    bad = []
    for d, _, names in os.walk(os.path.join(root, 'tools')):
        for n in sorted(names):
            if not n.endswith(('.c', '.h')):
                continue
            p = os.path.join(d, n)
            for inc in INCLUDE.findall(open(p, encoding='utf-8', errors='replace').read()):
                t = resolve(src, p, inc)
                if t and under(t, src) and os.path.relpath(t, src) not in TOOL_HEADERS:
                    bad.append(f'{os.path.relpath(p, root)} includes src/'
                               f'{os.path.relpath(t, src)}: a tool sees the library through '
                               f'{", ".join(TOOL_HEADERS)} and coll.h only')
    tobjs = tool_objects(root, build)
    where = {}
    for rel, path in objects(src, build).items():
        for f in nm(path, '--defined-only', '--extern-only'):
            if len(f) >= 2 and f[1] not in 'UwvN':
                where[f[0]] = rel
    headers = [h for rel in TOOL_HEADERS for h in closure(src, rel)]
    public = os.path.join(root, 'include', 'coll.h')
    allowed = declared(headers + ([public] if os.path.isfile(public) else []))
    for rel in sorted(tobjs):
        for obj in tobjs[rel]:
            for sym in sorted({f[0] for f in nm(obj, '--undefined-only') if f}):
                if sym in where and sym not in allowed:
                    bad.append(f'{rel} calls {sym} in {where[sym]}: not declared by '
                               f'{", ".join(TOOL_HEADERS)}, the headers it includes, or coll.h')
    return tobjs, sorted(set(bad))


def counts_per_folder(root, src):
    """{folder: (files, lines, largest file, its lines)} of .c, .h and .cu files: src/'s
    folders, and tools/ and bench/ whole."""
    out = {}

    def count(d, key):
        n = lines = big_n = 0
        big = ''
        for dd, _, names in os.walk(d):
            for name in names:
                if name.endswith(('.c', '.h', '.cu')):
                    p = os.path.join(dd, name)
                    k = sum(1 for _ in open(p, 'rb'))
                    n, lines = n + 1, lines + k
                    if k > big_n:
                        big, big_n = os.path.relpath(p, root), k
        if n:
            out[key] = (n, lines, big, big_n)

    for f in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, f)):
            count(os.path.join(src, f), 'src/' + f)
    for f in ('tools', 'bench'):
        if os.path.isdir(os.path.join(root, f)):
            count(os.path.join(root, f), f + '/')
    return out


def dot_text(name, counts):
    lines = [f'digraph {name} {{', '  rankdir=BT;']
    for (a, b), n in sorted(counts.items()):
        bad = RANK.get(a, 99) <= RANK.get(b, 99)
        lines.append(f'  "{a}" -> "{b}" [label="{n}"{", color=red" if bad else ""}];')
    return '\n'.join(lines + ['}']) + '\n'


def matrix_text(title, counts):
    """Rows: from folders, columns: to folders, lowest layer first; '.' for no arrow, '!'
    after an arrow up or sideways."""
    names = sorted({f for e in counts for f in e}, key=lambda f: (RANK.get(f, 99), f))
    w = max([len(n) for n in names] + [4])
    out = [title, ' ' * (w + 1) + ''.join(f'{n[:6]:>7}' for n in names)]
    for a in names:
        cells = []
        for b in names:
            n = counts.get((a, b), 0)
            up = n and RANK.get(a, 99) <= RANK.get(b, 99)
            cells.append(f'{(str(n) + ("!" if up else "")) if n else ".":>7}')
        out.append(f'{a:>{w}} ' + ''.join(cells))
    return '\n'.join(out) + '\n'


def plot_matrix(path, title, counts):
    """A PNG of the matrix by gnuplot: the count in each cell, arrows up or sideways in
    red. False when gnuplot is missing or fails."""
    if not shutil.which('gnuplot') or not counts:
        return False
    names = sorted({f for e in counts for f in e}, key=lambda f: (RANK.get(f, 99), f))
    idx = {n: i for i, n in enumerate(names)}
    cmds = [f"set terminal pngcairo size {200 + 70 * len(names)},{160 + 50 * len(names)}",
            f"set output '{path}'", f"set title '{title}'", 'unset key', 'set border 0',
            'set xlabel "to"', 'set ylabel "from"', 'set tics scale 0',
            f'set xrange [-0.5:{len(names) - 0.5}]', f'set yrange [{len(names) - 0.5}:-0.5]',
            'set xtics (' + ', '.join(f'"{n}" {i}' for n, i in idx.items()) + ')',
            'set ytics (' + ', '.join(f'"{n}" {i}' for n, i in idx.items()) + ')',
            'set grid front', 'set xtics offset 0,0 rotate by 30 right']
    for (a, b), n in counts.items():
        up = RANK.get(a, 99) <= RANK.get(b, 99)
        red = " textcolor rgb 'red'" if up else ''
        cmds.append(f'set label "{n}" at {idx[b]},{idx[a]} center front{red}')
        cmds.append(f'set object rect center {idx[b]},{idx[a]} size 0.9,0.9 fc rgb '
                    f'"{"#f4b0b0" if up else "#c8d8f0"}" fs solid noborder back')
    cmds.append('plot NaN')
    r = subprocess.run(['gnuplot'], input='\n'.join(cmds) + '\n', text=True,
                       capture_output=True)
    return r.returncode == 0 and os.path.isfile(path)


def write_graphs(prefix, root, src, build):
    """--graph: the include and call graphs between folders, and the files per folder."""
    arrows = graph(src)
    inc = collections.Counter((folder(a), folder(b)) for a, b in arrows
                              if folder(a) != folder(b))
    objs, cs = calls(src, build)
    cal = collections.Counter((folder(a), folder(b)) for a, _, b in cs
                              if folder(a) != folder(b))
    written = []
    for name, counts in (('includes', inc), ('calls', cal)):
        if name == 'calls' and not objs:
            continue
        p = f'{prefix}-{name}.dot'
        with open(p, 'w') as f:
            f.write(dot_text(name, counts))
        written.append(p)
        png = f'{prefix}-{name}.png'
        if shutil.which('dot'):
            if subprocess.run(['dot', '-Tpng', '-o', png, p]).returncode == 0:
                written.append(png)
        elif plot_matrix(png, f'{name} between folders (red: up or sideways)', counts):
            written.append(png)
    with open(f'{prefix}.txt', 'w') as f:
        f.write(matrix_text(f'includes between folders ({len(arrows)} includes in all; '
                            'row includes column; "!" up or sideways)', inc))
        if objs:
            f.write('\n' + matrix_text(f'calls between folders ({len(objs)} objects; row '
                                       'calls column, (file, symbol) pairs)', cal))
            big = max(cycles(cs), key=len, default=[])
            f.write(f'largest cycle of files by calls: {len(big)} files\n')
        else:
            f.write(f'\nno objects of src/ under {build}: no call graph\n')
        f.write('\nfiles and lines per folder (.c, .h, .cu)\n')
        for k, (n, lines, big, big_n) in counts_per_folder(root, src).items():
            f.write(f'{k:<16} {n:4d} {lines:7,d}   largest {big} ({big_n:,})\n')
    written.append(f'{prefix}.txt')
    print('wrote', ', '.join(written))
    return 0


def self_test():
    """The checks on a small tree: a library of four objects, a tool that keeps the rules,
    then one that includes a header beyond introspect.h, one that declares a library
    function itself, and a library file that includes a higher layer's header."""
    cc = os.environ.get('CC', 'cc')
    with tempfile.TemporaryDirectory() as root:
        def put(rel, text):
            p = os.path.join(root, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, 'w') as f:
                f.write(text)
        src, build = os.path.join(root, 'src'), os.path.join(root, 'build')
        put('include/coll.h', 'int coll_public(void);\n')
        put('src/base/base.h', 'int coll__base_ok(void);\n')
        put('src/api/introspect.h', '#include "../base/base.h"\nint coll__ix_ok(void);\n')
        put('src/core/secret.h', '#include "../base/base.h"\nint coll__secret(void);\n')
        put('src/base/base.c', '#include "base.h"\nint coll__base_ok(void) { return 0; }\n')
        put('src/core/secret.c', '#include "secret.h"\n'
            'int coll__secret(void) { return coll__base_ok(); }\n')
        put('src/api/introspect.c', '#include "introspect.h"\n'
            'int coll__ix_ok(void) { return 1; }\n')
        put('src/api/api.c', 'int coll_public(void);\nint coll_public(void) { return 2; }\n')
        lib = os.path.join(build, 'libcoll_internal.a.p')
        os.makedirs(lib)

        def compile_(rel, obj):
            subprocess.run([cc, '-c', '-I', os.path.join(root, 'include'), '-I', src,
                            os.path.join(root, rel), '-o', obj], check=True)
        for rel in ('src/base/base.c', 'src/core/secret.c', 'src/api/introspect.c',
                    'src/api/api.c'):
            compile_(rel, os.path.join(lib, rel.replace('/', '_') + '.o'))
        tools = []

        def tool(rel, text):
            put(rel, text)
            obj = os.path.join(build, rel.replace('/', '_') + '.o')
            compile_(rel, obj)
            tools.append({'directory': build, 'file': os.path.join('..', rel),
                          'output': os.path.relpath(obj, build)})
            with open(os.path.join(build, 'compile_commands.json'), 'w') as f:
                json.dump(tools, f)

        def expect(case, want, got):
            print(f'self-test: {case}: {len(got)} violation(s){"".join("; " + g for g in got)}')
            if len(got) != want:
                print(f'self-test: {case}: expected {want}')
                return 1
            return 0

        fails = 0
        tool('tools/good/good.c', '#include "api/introspect.h"\n#include "coll.h"\n'
             'int main(void) { return coll__ix_ok() + coll__base_ok() + coll_public(); }\n')
        objs, bad = tool_check(root, src, build)
        fails += expect('a tool on introspect.h and coll.h', 0, bad)
        fails += 0 if objs else expect('the tool objects found', 1, [])
        tool('tools/peek/peek.c', '#include "api/introspect.h"\n#include "core/secret.h"\n'
             'int main(void) { return coll__ix_ok(); }\n')
        fails += expect('a tool that includes core/secret.h', 1, tool_check(root, src, build)[1])
        os.remove(os.path.join(root, 'tools/peek/peek.c'))
        tools.pop()
        tool('tools/sneak/sneak.c', 'int coll__secret(void);\n'
             'int main(void) { return coll__secret(); }\n')
        fails += expect('a tool that declares coll__secret itself', 1,
                        tool_check(root, src, build)[1])
        put('src/base/up.c', '#include "../core/secret.h"\n')
        up, _ = judge(((a, b, b, f'includes {b}', 'see') for a, b in graph(src)), {},
                      'unused', 'layer violation')
        fails += expect('base including core', 1, up)
        if fails:
            return 1
    print('self-test: ok')
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    if '--self-test' in args:
        return self_test()
    src = os.path.join(here, '..', 'src')
    if '--src' in args:  # another tree's src/, e.g. an earlier commit's worktree
        src = args[args.index('--src') + 1]
    root = os.path.dirname(os.path.abspath(src))
    arrows = graph(src)
    build = os.path.join(here, '..', 'build')
    if '--build' in args:
        build = args[args.index('--build') + 1]
    if '--graph' in args:
        return write_graphs(args[args.index('--graph') + 1], root, src, build)
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
    tobjs, tbad = tool_check(root, src, build)
    for m in tbad:
        print('tool violation:', m)
    print(f'{len(tobjs)} tool sources built, {len(tbad)} tool violations')
    if not tobjs:
        print(f'no objects of tools/ under {build} (compile_commands.json): the tools are not '
              f'checked (build first)')
        return 1
    return 1 if bad or stale or cbad or cstale or tbad else 0


if __name__ == '__main__':
    sys.exit(main())
