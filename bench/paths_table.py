#!/usr/bin/env python3
"""paths_table.py [TSV] [--best] - docs/performance.md's "One data path" tables from
bench/paths.sh's docs/results/paths.tsv: per rank count and collective, the 8 B time of
blocking, non-blocking and grouped calls (medians of the runs) and their ratios, and the
lowest non-blocking/blocking and grouped/blocking busbw ratio from 64 KiB to 64 MiB.

--best: each form's best run instead of the median (the shortest time, the highest busbw).
Where ranks outnumber cores, a run's speed depends on where the kernel put its ranks and
threads (4 ranks on 2 cores: a 16 MiB all-reduce at about 1.6 or about 4.6 GB/s, whatever
the call's form), and the median of a few runs falls in either mode; load from elsewhere
only adds time, so the best run is each form's speed when it has the machine."""
import collections
import statistics
import sys

args = [a for a in sys.argv[1:] if a != '--best']
best = '--best' in sys.argv[1:]
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
