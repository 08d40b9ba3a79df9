#!/usr/bin/env python3
"""paths_table.py [TSV] [--best] - docs/performance.md's "One data path" tables from
bench/paths.sh's docs/results/paths.tsv: per rank count and collective, the 8 B time of
blocking, non-blocking and grouped calls (medians of the runs) and their ratios, and the
lowest non-blocking/blocking and grouped/blocking busbw ratio from 64 KiB to 64 MiB.

--best: each form's best run instead of the median (the shortest time, the highest busbw).
Where ranks outnumber cores, a run's speed depends on where the kernel put its ranks and
threads (4 ranks on 2 cores: a 16 MiB all-reduce at about 1.6 or about 4.6 GB/s, whatever
the call's form), and the median of a few runs falls in either mode; load from elsewhere
only adds time, so the best run is each form's speed when it has the machine.

--plot PNG: also draw, per rank count, each collective's non-blocking and grouped speed as a
fraction of the blocking one (time ratio blocking / form) at every size (gnuplot)."""
import collections
import os
import statistics
import subprocess
import sys
import tempfile

argv = sys.argv[1:]
png = None
if '--plot' in argv:
    i = argv.index('--plot')
    png = argv[i + 1]
    del argv[i:i + 2]
args = [a for a in argv if a != '--best']
best = '--best' in argv
path = args[0] if args else 'docs/results/paths.tsv'
rows = collections.defaultdict(list)
for line in open(path).read().splitlines()[1:]:
    np_, c, m, size, t, bw = line.split('\t')
    rows[(int(np_), c, int(size), m)].append((float(t), float(bw)))


def med(np_, c, size, m, i):
    v = rows.get((np_, c, size, m))
    if not v:
        return float('nan')
    if best:
        return min(x[0] for x in v) if i == 0 else max(x[1] for x in v)
    return statistics.median(x[i] for x in v)


keys = sorted({(k[0], k[1]) for k in rows})
print('| ranks | collective | smallest (B) | blocking (us) | non-blocking | grouped | nb/blk | grp/blk '
      '| busbw nb/blk, 64 KiB-64 MiB (lowest) | grp/blk (lowest) |')
print('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')
for np_, c in keys:
    # the smallest size that gives every rank an element (all-gather and reduce-scatter
    # sizes are the whole buffer: below 4 B per rank the call moves nothing)
    small = min(s for (n, cc, s, m) in rows if n == np_ and cc == c and
                (s >= 4 * np_ or cc not in ('allgather', 'reducescatter')) and s > 0)
    b, n, g = (med(np_, c, small, m, 0) for m in ('blocking', 'nonblocking', 'grouped'))
    sizes = sorted({s for (n2, c2, s, m) in rows if n2 == np_ and c2 == c and s >= 65536})
    rn = [med(np_, c, s, 'nonblocking', 1) / med(np_, c, s, 'blocking', 1) for s in sizes]
    rg = [med(np_, c, s, 'grouped', 1) / med(np_, c, s, 'blocking', 1) for s in sizes]
    print(f'| {np_} | {c} | {small} | {b:.2f} | {n:.2f} | {g:.2f} | {n / b:.2f} | {g / b:.2f} '
          f'| {min(rn):.2f} | {min(rg):.2f} |')


def plot(png):
    """One panel per rank count: blocking time / form time against size, per collective."""
    colls = sorted({k[1] for k in rows})
    nps = sorted({k[0] for k in rows})
    tmp = tempfile.mkdtemp()
    cmds = [f"set terminal pngcairo size 1500,480 font ',9'; set output '{png}'",
            f"set multiplot layout 1,{len(nps)} title 'non-blocking (solid) and grouped "
            f"(dashed) calls: blocking time / their time ({'best' if best else 'median'} of "
            f"the runs; 1 = as fast)'",
            "set logscale x 2; set format x '%.0b %BB'; set yrange [0:1.6]; set grid",
            "set xlabel 'size'; set key bottom left font ',8'"]
    for np_ in nps:
        plots = []
        for k, c in enumerate(colls):
            f = os.path.join(tmp, f'{np_}-{c}.dat')
            with open(f, 'w') as out:
                for s in sorted({s for (n2, c2, s, m) in rows if n2 == np_ and c2 == c}):
                    b, n, g = (med(np_, c, s, m, 0) for m in ('blocking', 'nonblocking', 'grouped'))
                    out.write(f'{s} {b / n:.4f} {b / g:.4f}\n')
            plots.append(f"'{f}' u 1:2 w lp lc {k + 1} pt 7 ps 0.5 dt 1 t '{c}'")
            plots.append(f"'{f}' u 1:3 w lp lc {k + 1} pt 7 ps 0.5 dt 2 notitle")
        cmds.append(f"set title '{np_} ranks'; set ylabel 'blocking / form'")
        cmds.append('plot 1 w l lc rgb "black" notitle, ' + ', '.join(plots))
    cmds.append('unset multiplot')
    subprocess.run(['gnuplot'], input='\n'.join(cmds), text=True, check=True)


if png:
    plot(png)
