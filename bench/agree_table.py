#!/usr/bin/env python3
"""agree_table.py TABLE - docs/reliability.md's time-to-error table from the lines
tests/test_agree.sh TABLE writes (mode path np case result ms where...): per mode, path and
case, the slowest rank's time to its error (ms) at each rank count, and where the ranks
erred (in the call, at the next call, at coll_comm_destroy).

    tests/test_agree.sh build/collrun build/tests/mp_agree /tmp/agree.txt
    bench/agree_table.py /tmp/agree.txt
"""
import collections
import sys

rows = collections.OrderedDict()
nps = set()
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 6:
        continue
    mode, path, np, case, res, ms = f[:6]
    where = ' '.join(f[6:])
    nps.add(int(np))
    rows.setdefault((mode, path, case), {})[int(np)] = (res, float(ms), where)
nps = sorted(nps)
print('| mode | path | case | ' + ' | '.join(f'np {n}' for n in nps) + ' |')
print('|---|---|---|' + '---:|' * len(nps))
for (mode, path, case), byn in rows.items():
    cells = []
    for n in nps:
        if n not in byn:
            cells.append('')
            continue
        res, ms, where = byn[n]
        tag = {'call': 'c', 'next': 'n', 'destroy': 'd'}
        w = ','.join(tag.get(x.split(':')[0], x.split(':')[0]) for x in where.split())
        cells.append(f'{"FAIL " if res != "ok" else ""}{ms:.0f} ({w})' if case != 'nbmix'
                     else ('ok' if res == 'ok' else 'FAIL'))
    print(f'| {mode} | {path} | {case} | ' + ' | '.join(cells) + ' |')
