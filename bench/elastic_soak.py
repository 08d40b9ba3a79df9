#!/usr/bin/env python3
"""elastic_soak.py - dptrain under failures: a rank killed with SIGKILL every --kill-every
seconds and started again --restart-after seconds later, for the whole run.

    bench/elastic_soak.py --dptrain build/dptrain [--np 8] [--kill-every 15]
        [--restart-after 5] [--mode elastic|restart|both] [--points] -- DPTRAIN-ARGS

--mode elastic: dptrain --elastic DIR; the survivors shrink and go on, the restarted process
  joins through grow (docs/training.md, "Elastic training").
--mode restart: the launcher's way, for comparison: collrun runs the job with --ckpt; a kill
  ends every rank, and collrun starts the whole job again from the last checkpoint.
--mode both: each of the two, after an undisturbed run of the same steps (the accuracy
  reference; --reference runs it before a single mode too).
--points: besides the timed kills, the first processes die at chosen points (dptrain
  --die-at): inside an all-reduce, during a checkpoint, while rank 0 offers a join, and a
  joiner right after it took its offer.

Prints one line per failure (steps lost, seconds of stall from the kill to the first step
after it) and a summary per mode; exits 1 when a run fails, hangs (--timeout) or ends with
an accuracy more than --max-drop points below the undisturbed run's (with --mode both).
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RECOVERY = re.compile(r'^elastic: recovery (\d+): lost rank\(s\)(.*?), (\d+) -> (\d+) ranks; '
                      r'resumed at step (\d+) .*?, (\d+) step\(s\) of work redone .*?'
                      r'stall ([\d.]+) s, at ([\d.]+)')
GROW = re.compile(r'^elastic: grow (\d+): (\d+) rank\(s\) joined at step (\d+), (\d+) ranks, '
                  r'in ([\d.]+) s')
ACC = re.compile(r'^summary: (?:[\d.]+ s per epoch \(mean of \d+\), )?final test accuracy '
                 r'([\d.]+)')
STEP = re.compile(r'^step (\d+)')
RESUMED = re.compile(r"^dptrain: resumed from '.*' at step (\d+)")


def log(msg):
    print(msg, flush=True)


def read(path):
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except OSError:
        return ''


class Proc:
    ncpu = len(os.sched_getaffinity(0))

    def __init__(self, argv, out, env=None, cpu=None):
        self.out = out
        self.f = open(out, 'w')
        # pinned round robin as collrun pins its ranks, so that the modes compare fairly
        pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu % Proc.ncpu}))
        self.p = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.STDOUT, env=env,
                                  preexec_fn=pin)
        self.start = time.time()

    def done(self):
        return self.p.poll() is not None


def undisturbed(a, extra, work):
    out = os.path.join(work, 'undisturbed.log')
    d = os.path.join(work, 'undisturbed.d')
    os.mkdir(d)
    t0 = time.time()
    procs = [Proc([a.dptrain] + extra + ['--elastic', d, '--rank', str(r), '--world',
                                         str(a.np)], out + '.%d' % r, cpu=r)
             for r in range(a.np)]
    for p in procs:
        p.p.wait(timeout=a.timeout)
    text = read(out + '.0')
    m = [ACC.match(line) for line in text.splitlines()]
    acc = [float(x.group(1)) for x in m if x]
    if any(p.p.returncode for p in procs) or not acc:
        log('undisturbed run failed:\n' + text[-3000:])
        sys.exit(1)
    log('undisturbed: %d ranks, %.1f s, final test accuracy %.4f' % (a.np, time.time() - t0,
                                                                     acc[0]))
    return acc[0], time.time() - t0


def soak_elastic(a, extra, work, rng):
    d = os.path.join(work, 'elastic.d')
    os.mkdir(d)
    procs, restarts, kills, n = [], [], [], 0
    points = ['allreduce', 'ckpt', 'offer'] if a.points else []

    def launch(rank=None, die=None):
        nonlocal n
        argv = [a.dptrain] + extra + ['--elastic', d]
        if rank is not None:
            argv += ['--rank', str(rank), '--world', str(a.np)]
        if die:
            argv += ['--die-at', die]
        p = Proc(argv, os.path.join(work, 'elastic.%d.log' % n), cpu=n)
        p.die = die
        p.member = rank is not None
        n += 1
        procs.append(p)
        return p

    # the planted deaths spread over LO..HI steps, so that each replacement is in before
    # the next one dies
    lo, hi = a.point_steps
    for r in range(a.np):
        die = None
        if points and r in (1, 0, 2):
            i = (1, 0, 2).index(r)
            die = '%s:%d' % (points[i], lo + (hi - lo) * i // 2)
        launch(r, die)
    t0 = time.time()
    next_kill = None  # the clock starts once the job has formed and synced
    take_pending = bool(points)
    finished = None
    while True:
        now = time.time()
        if now - t0 > a.timeout:
            log('elastic: HANG: the run did not end within %d s' % a.timeout)
            for p in procs:
                if not p.done():
                    p.p.kill()
            return None
        for p in procs:
            if p.done() and not hasattr(p, 'seen'):
                p.seen = True
                if p.p.returncode == 0:
                    finished = finished or now
                elif finished is None:
                    # killed by us, by --die-at, or ended by a failure: back later
                    why = 'SIGKILL by --die-at %s' % p.die if p.die else \
                        'exit %d' % p.p.returncode
                    if not getattr(p, 'killed', False):
                        kills.append((now, why))
                        log('elastic: %s (%s)' % (why, os.path.basename(p.out)))
                    restarts.append(now + a.restart_after)
        if finished is not None:
            if all(p.done() for p in procs):
                break
            # joiners that never got in are told to stop; members end by themselves
            for p in procs:
                if not p.done() and not p.member and 'joined as rank' not in read(p.out) \
                        and now - finished > 2:
                    p.p.terminate()
            if now - finished > 60:
                log('elastic: HANG: members did not end within 60 s of the first')
                return None
            time.sleep(0.1)
            continue
        for t in [t for t in restarts if t <= now]:
            restarts.remove(t)
            die = None
            if take_pending:
                die, take_pending = 'take:0', False
            launch(None, die)
        live = [p for p in procs if not p.done() and
                (p.member or 'holds the job\'s state' in read(p.out))]
        if not live and not [p for p in procs if not p.done() and not p.member and
                             'joined as rank' in read(p.out)]:
            log('elastic: FAILED: every process that held the model is gone')
            for p in procs:
                if not p.done():
                    p.p.kill()
            return None
        if next_kill is None and 'ranks in sync at step' in read(procs[0].out):
            next_kill = now + a.kill_every
        if next_kill is not None and now >= next_kill:
            # one rank down at a time, as a kill every 15 s with a restart 5 s later is:
            # none while a victim is still to be restarted or a joiner is not in yet (the
            # planted --points deaths come on top)
            settling = restarts or [p for p in procs if not p.done() and not p.member and
                                    'holds the job\'s state' not in read(p.out)]
            if len(live) >= 2 and not settling:
                v = rng.choice(live)
                v.killed = True
                v.p.send_signal(signal.SIGKILL)
                kills.append((now, 'SIGKILL by the soak'))
                log('elastic: t=%.1f s: SIGKILL %s' % (now - t0, os.path.basename(v.out)))
            next_kill = now + a.kill_every
        time.sleep(0.05)
    wall = time.time() - t0
    text = '\n'.join(read(p.out) for p in procs)
    recs = [m for m in (RECOVERY.match(line) for line in text.splitlines()) if m]
    grows = [m for m in (GROW.match(line) for line in text.splitlines()) if m]
    accs = [float(m.group(1)) for m in (ACC.match(line) for line in text.splitlines()) if m]
    stalls = []
    for m in recs:
        at = float(m.group(8))
        before = [k for k in kills if k[0] <= at]
        kill_t = before[-1][0] if before else None
        stall = at - kill_t if kill_t else float(m.group(7))
        log('elastic: failure %s: lost%s, %s -> %s ranks, resumed at step %s, steps lost %s, '
            'stall %.2f s from the kill (%.3f s from detection)' % (
                m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6),
                stall, float(m.group(7))))
        stalls.append(stall)
    for g in grows:
        log('elastic: join %s: %s rank(s) at step %s -> %s ranks, grow took %s s' % g.groups())
    if not accs:
        log('elastic: FAILED: no process finished the run')
        return None
    res = {
        'wall': wall, 'kills': len(kills), 'recoveries': len(recs), 'joins': len(grows),
        'acc': accs[0],
        'lost': [int(m.group(6)) for m in recs], 'stall': stalls,
        'replicas_ok': 'replicas: all' in text,
    }
    log('elastic: summary: %.1f s, %d failures, %d recoveries, %d joins, steps lost per '
        'failure %s, stall per failure mean %.2f s max %.2f s, final accuracy %.4f' % (
            wall, len(kills), len(recs), len(grows),
            '%.2f' % (sum(res['lost']) / len(recs)) if recs else '-',
            sum(res['stall']) / len(recs) if recs else 0, max(res['stall'], default=0),
            res['acc']))
    return res


def soak_restart(a, extra, work, rng):
    ckpt = os.path.join(work, 'restart.ckpt')
    t0 = time.time()
    runs, kills, lost, stall = 0, [], [], []
    last_kill = None
    while True:
        resume = ['--resume', ckpt] if os.path.exists(ckpt) else []
        out = os.path.join(work, 'restart.%d.log' % runs)
        p = Proc([a.collrun, '-n', str(a.np), a.dptrain] + extra +
                 ['--ckpt', ckpt, '--ckpt-every', str(a.ckpt_every)] + resume, out)
        runs += 1
        started_step = None
        first_step_t = None
        kill_at = time.time() + a.kill_every
        while not p.done():
            if time.time() - t0 > a.timeout:
                p.p.kill()
                log('restart: HANG')
                return None
            text = read(out)
            if started_step is None:
                m = [RESUMED.match(line) for line in text.splitlines()] if resume else []
                m = [x for x in m if x]
                started_step = int(m[0].group(1)) if m else (0 if not resume else None)
                if started_step is not None and resume and last_kill:
                    lost.append(max(0, last_kill[1] - started_step))
            steps = [int(x.group(1)) for x in (STEP.match(line) for line in text.splitlines())
                     if x]
            if last_kill and first_step_t is None and steps:
                first_step_t = time.time()
                stall.append(first_step_t - last_kill[0])
            if time.time() >= kill_at:
                # a random rank of the job: collrun's children
                kids = subprocess.run(['pgrep', '-P', str(p.p.pid)], capture_output=True,
                                      text=True).stdout.split()
                if kids:
                    os.kill(int(rng.choice(kids)), signal.SIGKILL)
                    last_kill = (time.time(), max(steps, default=started_step or 0))
                    kills.append(last_kill)
                    log('restart: t=%.1f s: SIGKILL a rank at about step %d' % (
                        time.time() - t0, last_kill[1]))
                    kill_at = float('inf')
            time.sleep(0.05)
        text = read(out)
        if p.p.returncode == 0:
            break
        if not last_kill or (kills and kills[-1][0] < p.start):
            log('restart: FAILED without a kill:\n' + text[-3000:])
            return None
        # the launcher's restart: all ranks again from the checkpoint, restart_after later
        time.sleep(max(0.0, last_kill[0] + a.restart_after - time.time()))
    wall = time.time() - t0
    accs = [float(m.group(1)) for m in (ACC.match(line) for line in read(out).splitlines())
            if m]
    if not accs:
        log('restart: FAILED: no final accuracy')
        return None
    log('restart: summary: %.1f s, %d failures, steps lost per failure %s, stall per failure '
        'mean %.2f s, final accuracy %.4f' % (
            wall, len(kills), '%.1f' % (sum(lost) / len(lost)) if lost else '-',
            sum(stall) / len(stall) if stall else 0, accs[0]))
    return {'wall': wall, 'acc': accs[0], 'lost': lost, 'stall': stall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--dptrain', required=True)
    ap.add_argument('--collrun', default=None)
    ap.add_argument('--np', type=int, default=8)
    ap.add_argument('--kill-every', type=float, default=15)
    ap.add_argument('--restart-after', type=float, default=5)
    ap.add_argument('--mode', choices=['elastic', 'restart', 'both'], default='elastic')
    ap.add_argument('--points', action='store_true')
    ap.add_argument('--reference', action='store_true')
    ap.add_argument('--point-steps', type=lambda s: [int(x) for x in s.split(',')],
                    default=[20, 200], help='LO,HI: steps of the --points deaths')
    ap.add_argument('--ckpt-every', type=int, default=50)
    ap.add_argument('--timeout', type=int, default=3600)
    ap.add_argument('--max-drop', type=float, default=0.5, help='accuracy points')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--keep', action='store_true', help='keep the logs')
    ap.add_argument('extra', nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.extra[1:] if a.extra[:1] == ['--'] else a.extra
    a.collrun = a.collrun or os.path.join(os.path.dirname(a.dptrain), 'collrun')
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix='elastic_soak.')
    ok = True
    try:
        ref = undisturbed(a, extra, work)[0] if a.mode == 'both' or a.reference else None
        for mode in (['elastic', 'restart'] if a.mode == 'both' else [a.mode]):
            res = (soak_elastic if mode == 'elastic' else soak_restart)(a, extra, work, rng)
            if res is None:
                ok = False
                continue
            if ref is not None:
                drop = (ref - res['acc']) * 100
                good = drop <= a.max_drop
                ok &= good
                log('%s: accuracy %.4f against %.4f undisturbed: %+.2f points (%s)' % (
                    mode, res['acc'], ref, -drop, 'ok' if good else 'FAIL'))
            if mode == 'elastic' and not res['replicas_ok']:
                ok = False
                log('elastic: FAIL: no replica check at the end')
    finally:
        if a.keep or not ok:
            log('logs in %s' % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
