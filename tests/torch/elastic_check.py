#!/usr/bin/env python3
"""elastic_check.py - a training-like loop on backend "coll" that survives a rank's death
under torchrun --max-restarts.

    torchrun --max-restarts 1 ... elastic_check.py DIR [--steps N] [--every K]
             [--kill-rank R --kill-step S --kill-phase allreduce|broadcast|barrier|async|recv]

Each step runs an all-reduce (the "model" state v, an int64 vector, so every result is
exact), a broadcast from a root that moves with the step, a barrier and an async all-reduce
waited on with work.wait(); with --kill-phase recv, step S also has every rank wait on a
receive from any rank that nobody sends (only the death can end it). Rank 0 writes a
checkpoint (step, v) to DIR every K steps; a (re)started run resumes from it. Rank R
SIGKILLs itself once, just before the given phase of step S; the file DIR/killed (made with
O_EXCL, holding the time of the kill) keeps a restarted run from doing it again.

Lines for the test (stdout, also DIR/report.ATTEMPT.RANK):
    elastic_check: rank 1 attempt 0: error in broadcast at step 7, 0.012 s after the kill:
        RuntimeError: ProcessGroupColl: broadcast failed: ...
    elastic_check: rank 1 attempt 0: destroy_process_group after the error took 0.003 s
    elastic_check: rank 1 attempt 1: done: step 20 resumed from 5 value [...] expected [...]
    elastic_check: rank 1 attempt 1: destroy_process_group took 0.030 s
A survivor exits 1 after its error, as an unhandled exception would. SIGTERM (the agent
stopping the group) is noted and honoured between steps only: a survivor blocked in a
collective when it comes would otherwise be killed before it could show whether the
collective ever returns, which is what is under test.
"""
import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import coll_torch  # noqa: F401  (registers backend "coll")

N = 1024
MOD = 1000003

terminated = False


def on_sigterm(signum, frame):
    global terminated
    terminated = True


def step_value(v, i, rank, world):
    """What every rank adds to the all-reduce of step i (and so what the next v is)."""
    return (v * (rank + 1) + i) % MOD


def expected(v, start, stop, world):
    for i in range(start, stop):
        v = sum(step_value(v, i, r, world) for r in range(world)) % MOD
    return v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--kill-phase", default="allreduce",
                   choices=["allreduce", "broadcast", "barrier", "async", "recv"])
    a = p.parse_args()

    signal.signal(signal.SIGTERM, on_sigterm)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("coll")
    rank, world = dist.get_rank(), dist.get_world_size()
    tag = "elastic_check: rank %d attempt %d:" % (rank, attempt)

    def report(line):
        line = "%s %s" % (tag, line)
        print(line, flush=True)
        with open(os.path.join(a.dir, "report.%d.%d" % (attempt, rank)), "a") as f:
            f.write(line + "\n")

    ckpt = os.path.join(a.dir, "checkpoint")
    start, v0 = 0, 1
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            start, v0 = (int(x) for x in f.read().split())
    v = torch.full((N,), v0, dtype=torch.int64)
    marker = os.path.join(a.dir, "killed")

    def maybe_die(i, phase):
        if rank != a.kill_rank or i != a.kill_step or phase != a.kill_phase:
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, b"%.6f\n" % time.time())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    i, phase = start, "init"
    try:
        for i in range(start, a.steps):
            phase = "allreduce"
            maybe_die(i, phase)
            t = (v * (rank + 1) + i) % MOD
            dist.all_reduce(t)
            v = t % MOD

            phase = "broadcast"
            maybe_die(i, phase)
            root = i % world
            b = torch.tensor([i * 7 + 1 if rank == root else -1], dtype=torch.int64)
            dist.broadcast(b, src=root)
            if b.item() != i * 7 + 1:
                raise AssertionError("broadcast from %d at step %d gave %d" %
                                     (root, i, b.item()))

            phase = "barrier"
            maybe_die(i, phase)
            dist.barrier()

            phase = "async"
            maybe_die(i, phase)
            c = torch.full((4,), rank + i, dtype=torch.int64)
            w = dist.all_reduce(c, async_op=True)
            w.wait()
            want = sum(r + i for r in range(world))
            if c.tolist() != [want] * 4:
                raise AssertionError("async all_reduce at step %d gave %s, not %d" %
                                     (i, c.tolist(), want))

            if a.kill_phase == "recv" and i == a.kill_step:
                phase = "recv"
                maybe_die(i, phase)
                r = torch.zeros(1, dtype=torch.int64)
                dist.irecv(r, tag=99).wait()  # from any rank; nobody sends: only the death ends it
                raise AssertionError("a receive from any rank returned %d with no sender" %
                                     r.item())

            if rank == 0 and (i + 1) % a.every == 0:
                tmp = ckpt + ".tmp"
                with open(tmp, "w") as f:
                    f.write("%d %d\n" % (i + 1, int(v[0])))
                os.replace(tmp, ckpt)
            if terminated:
                report("SIGTERM between steps (step %d)" % i)
                sys.exit(143)
    except RuntimeError as e:
        now = time.time()
        try:
            with open(marker) as f:
                since = "%.3f s after the kill" % (now - float(f.read()))
        except (OSError, ValueError):
            since = "with no kill recorded"
        msg = " ".join(str(e).split())
        report("error in %s at step %d, %s: RuntimeError: %s" % (phase, i, since, msg))
        t0 = time.monotonic()
        dist.destroy_process_group()
        report("destroy_process_group after the error took %.3f s" % (time.monotonic() - t0))
        sys.exit(1)

    want = expected(1, 0, a.steps, world)
    got = sorted(set(v.tolist()))
    report("done: step %d resumed from %d value %s expected [%d]" % (a.steps, start, got, want))
    t0 = time.monotonic()
    dist.destroy_process_group()
    report("destroy_process_group took %.3f s" % (time.monotonic() - t0))
    sys.exit(0 if got == [want] else 2)


if __name__ == "__main__":
    main()
