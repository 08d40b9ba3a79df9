#!/usr/bin/env python3
"""soak.py - reliability soak: random collectives, sizes, algorithms and transports, with
random faults, every result checked, for a given time.

    bench/soak.py DURATION [--build build] [--seed N] [--timeout-ms 2000] [--json FILE]

Each trial starts a bootstrap root (rel_rank id) and 2-6 ranks (rel_rank run, started here
with COLL_UNIQUE_ID / COLL_RANK / COLL_SIZE: no launcher kills the survivors before they
report), over shared memory or TCP, with a random COLL_ALGO. Once every rank has run a
collective, it injects one fault at a random moment:

  none      the ranks run a fixed number of collectives; all must end DONE, with no error
  kill      kill -9 of one rank
  stop      SIGSTOP of one rank (killed at the end of the trial)
  linkdown  (root only, where network namespaces work) ranks split over two namespaces
            joined by a veth pair, over TCP; one end of the veth is set down

With a fault, every other rank must return an error (rel_rank prints ERROR with the time);
a rank still running COLL_TIMEOUT_MS + 10 s after the fault is a hang, a WRONG line a wrong
result. Prints the totals and the detection time percentiles per fault kind (time from the
injection to the survivor's error return, over all survivors).
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

ALGOS = {
    'allreduce': ['ring', 'tree', 'dbtree', 'rd', 'rabenseifner', 'binomial'],
    'broadcast': ['tree', 'dbtree', 'chain', 'binomial', 'vdg'],
}


def now_ns():
    return time.time_ns()


class Netns:
    """Two namespaces joined by a veth pair, set up once and repaired after each link down."""

    def __init__(self):
        tag = 'cs%d' % (os.getpid() % 10000)
        self.a, self.b = tag + 'a', tag + 'b'
        self.va, self.vb = tag + 'va', tag + 'vb'
        self.ok = False
        if os.geteuid() != 0:
            return
        net = 20 + os.getpid() % 200
        cmds = [['ip', 'netns', 'add', self.a], ['ip', 'netns', 'add', self.b],
                ['ip', 'link', 'add', self.va, 'type', 'veth', 'peer', 'name', self.vb],
                ['ip', 'link', 'set', self.va, 'netns', self.a],
                ['ip', 'link', 'set', self.vb, 'netns', self.b],
                ['ip', '-n', self.a, 'addr', 'add', '10.232.%d.1/24' % net, 'dev', self.va],
                ['ip', '-n', self.b, 'addr', 'add', '10.232.%d.2/24' % net, 'dev', self.vb],
                ['ip', '-n', self.a, 'link', 'set', 'lo', 'up'],
                ['ip', '-n', self.b, 'link', 'set', 'lo', 'up']]
        for c in cmds:
            if subprocess.run(c, capture_output=True).returncode != 0:
                self.down()
                return
        self.ok = self.up()

    def up(self):
        return all(subprocess.run(['ip', '-n', ns, 'link', 'set', dev, 'up'],
                                  capture_output=True).returncode == 0
                   for ns, dev in ((self.a, self.va), (self.b, self.vb)))

    def cut(self):
        subprocess.run(['ip', '-n', self.a, 'link', 'set', self.va, 'down'], capture_output=True)

    def down(self):
        for ns in (self.a, self.b):
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []


def trial(args, rng, netns, work, k):
    kinds = ['none', 'kill', 'kill', 'stop', 'stop'] + (['linkdown'] if netns.ok else [])
    fault = rng.choice(kinds)
    np_ = rng.choice([2, 4]) if fault == 'linkdown' else rng.randint(2, 6)
    transport = 'tcp' if fault == 'linkdown' else rng.choice(['shm', 'tcp'])
    algo = []
    for c, names in ALGOS.items():
        if rng.random() < 0.5:
            algo.append('%s=%s' % (c, rng.choice(names)))
    maxcount = rng.choice([1024, 16384, 262144])
    iters = rng.randint(20, 120) if fault == 'none' else 0
    seed = rng.randrange(1 << 30)
    base = dict(os.environ, COLL_TRANSPORT=transport, COLL_TIMEOUT_MS=str(args.timeout_ms),
                COLL_BOOTSTRAP_TIMEOUT_MS='20000', COLL_ALGO=','.join(algo))
    pre_a, pre_b = [], []
    if fault == 'linkdown':
        pre_a = ['ip', 'netns', 'exec', netns.a]
        pre_b = ['ip', 'netns', 'exec', netns.b]
    idenv = dict(base)
    if fault == 'linkdown':
        idenv['COLL_SOCKET_IFNAME'] = '=' + netns.va
    idp = subprocess.Popen(pre_a + [args.rel, 'id'], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, env=idenv, text=True)
    uid = idp.stdout.readline().strip()
    procs, outs = [], []
    for r in range(np_):
        env = dict(base, COLL_UNIQUE_ID=uid, COLL_RANK=str(r), COLL_SIZE=str(np_),
                   COLL_LOCAL_RANK=str(r), COLL_LOCAL_SIZE=str(np_))
        pre = []
        if fault == 'linkdown':
            side_a = r < np_ // 2
            pre = pre_a if side_a else pre_b
            env['COLL_SOCKET_IFNAME'] = '=' + (netns.va if side_a else netns.vb)
        out = os.path.join(work, 'r%d.out' % r)
        outs.append(out)
        with open(out, 'w') as f, open(os.path.join(work, 'r%d.err' % r), 'w') as e:
            procs.append(subprocess.Popen(pre + [args.rel, 'run', str(seed), str(iters),
                                                 str(maxcount)],
                                          stdout=f, stderr=e, env=env))
    res = dict(trial=k, fault=fault, np=np_, transport=transport, algo=','.join(algo),
               maxcount=maxcount, hang=0, wrong=0, detected=0, expected=0, false_errors=0,
               detect_ms=[], victim=None, note='')
    t_start = time.monotonic()
    # every rank past its first collective (or already ended)
    while time.monotonic() - t_start < 30:
        if all('READY' in read_lines(o) or procs[i].poll() is not None
               for i, o in enumerate(outs)):
            break
        time.sleep(0.02)
    inject_ns = None
    victim = None
    if fault != 'none':
        time.sleep(rng.uniform(0, 0.3))
        if fault == 'linkdown':
            inject_ns = now_ns()
            netns.cut()
        else:
            victim = rng.randrange(np_)
            res['victim'] = victim
            inject_ns = now_ns()
            procs[victim].send_signal(signal.SIGKILL if fault == 'kill' else signal.SIGSTOP)
    limit = time.monotonic() + args.timeout_ms / 1000.0 + 10 + (60 if fault == 'none' else 0)
    while time.monotonic() < limit:
        if all(p.poll() is not None for i, p in enumerate(procs) if i != victim):
            break
        time.sleep(0.02)
    for i, p in enumerate(procs):
        if p.poll() is None:
            if i != victim:
                res['hang'] += 1
            p.kill()
        if i == victim and fault == 'stop':
            p.send_signal(signal.SIGCONT)
        p.wait()
    idp.stdin.close()
    idp.wait()
    if fault == 'linkdown':
        netns.up()
    for i, o in enumerate(outs):
        if i == victim:
            continue
        lines = read_lines(o)
        if any(x.startswith('WRONG') for x in lines):
            res['wrong'] += 1
        err = [x for x in lines if x.startswith('ERROR')]
        if fault == 'none':
            if err or not any(x.startswith('DONE') for x in lines):
                res['false_errors'] += 1
                res['note'] += ' rank %d: %s' % (i, (err or lines[-1:] or ['no output'])[0])
            continue
        res['expected'] += 1
        if err:
            res['detected'] += 1
            t = int(err[0].split()[2])
            res['detect_ms'].append((t - inject_ns) / 1e6)
    return res


def pct(v, q):
    if not v:
        return float('nan')
    v = sorted(v)
    return v[min(len(v) - 1, int(q / 100.0 * len(v)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('duration', type=float, help='seconds')
    ap.add_argument('--build', default='build')
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--timeout-ms', type=int, default=2000)
    ap.add_argument('--json', default=None)
    args = ap.parse_args()
    args.rel = os.path.abspath(os.path.join(args.build, 'tests', 'rel_rank'))
    if not os.access(args.rel, os.X_OK):
        sys.exit('soak.py: %s not built (ninja -C %s tests/rel_rank)' % (args.rel, args.build))
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    work = '/tmp/soak.%d' % os.getpid()
    os.makedirs(work, exist_ok=True)
    netns = Netns()
    results = []
    t_end = time.monotonic() + args.duration
    try:
        k = 0
        while time.monotonic() < t_end:
            r = trial(args, rng, netns, work, k)
            results.append(r)
            flag = ''
            if r['hang'] or r['wrong'] or r['false_errors'] or r['detected'] < r['expected']:
                flag = '  <-- ' + r['note']
            print('trial %4d %-8s np=%d %-3s %-28s detected %d/%d hang %d wrong %d%s' % (
                k, r['fault'], r['np'], r['transport'], r['algo'] or '-', r['detected'],
                r['expected'], r['hang'], r['wrong'], flag), flush=True)
            k += 1
    finally:
        netns.down()
        subprocess.run(['rm', '-rf', work])
    tot = lambda key: sum(r[key] for r in results)
    print()
    print('seed %d, %d trials in %.0f s, COLL_TIMEOUT_MS=%d, namespaces %s' % (
        seed, len(results), args.duration, args.timeout_ms, 'yes' if netns.ok else 'no'))
    print('faults injected: %d (%s)' % (
        sum(1 for r in results if r['fault'] != 'none'),
        ', '.join('%s %d' % (f, sum(1 for r in results if r['fault'] == f))
                  for f in ('kill', 'stop', 'linkdown'))))
    print('survivors that had to detect: %d, errors detected: %d' % (tot('expected'),
                                                                      tot('detected')))
    print('hangs: %d, wrong results: %d, errors without a fault: %d' % (
        tot('hang'), tot('wrong'), tot('false_errors')))
    print('detection time (ms, injection to error return, per surviving rank):')
    print('  %-9s %6s %8s %8s %8s %8s' % ('fault', 'n', 'p50', 'p90', 'p99', 'max'))
    for f in ('kill', 'stop', 'linkdown'):
        v = [x for r in results if r['fault'] == f for x in r['detect_ms']]
        if v:
            print('  %-9s %6d %8.1f %8.1f %8.1f %8.1f' % (f, len(v), pct(v, 50), pct(v, 90),
                                                       pct(v, 99), max(v)))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(seed=seed, results=results), f, indent=1)
    bad = tot('hang') + tot('wrong') + tot('false_errors') + tot('expected') - tot('detected')
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
