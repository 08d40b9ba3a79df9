"""ddp_check.py - coll as a torch.distributed backend, run by torchrun on every rank.

    python3 -m torch.distributed.run --nproc_per_node N ddp_check.py [--steps S] [--bench]

The default process group is backend="coll". A second group over the same ranks uses
gloo. First every collective is checked on the coll group (sync and async). Then the same
model, from the same seed, is trained with DistributedDataParallel twice, once over each
group, on the same per-rank data: the parameters must end equal within float tolerance
(the two backends may sum in different orders). With --bench, rank 0 prints the mean step
time of each backend instead of failing on a difference it does not check.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import coll_torch  # noqa: F401  (registers backend "coll")


def fail(msg):
    print("rank %d: FAIL: %s" % (dist.get_rank(), msg), file=sys.stderr, flush=True)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def check_ops(rank, n):
    f = torch.float32
    t = torch.arange(12, dtype=f) + rank
    dist.all_reduce(t)
    expect(torch.equal(t, n * torch.arange(12, dtype=f) + n * (n - 1) / 2), "all_reduce sum")
    t = torch.full((5,), float(rank))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    expect(torch.equal(t, torch.full((5,), float(n - 1))), "all_reduce max")
    t = torch.ones(1000, dtype=torch.float64) * (rank + 1)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    expect(fut.done() and torch.equal(t, torch.full((1000,), n * (n + 1) / 2, dtype=torch.float64)),
           "async all_reduce and its future")
    t = torch.arange(6, dtype=torch.int64).reshape(2, 3).t()  # not contiguous
    dist.all_reduce(t)
    expect(torch.equal(t, n * torch.arange(6, dtype=torch.int64).reshape(2, 3).t()),
           "all_reduce of a non-contiguous tensor")

    t = torch.full((7,), float(rank))
    dist.broadcast(t, src=n - 1)
    expect(torch.equal(t, torch.full((7,), float(n - 1))), "broadcast")
    t = torch.full((3,), float(rank + 1))
    dist.reduce(t, dst=0)
    if rank == 0:
        expect(torch.equal(t, torch.full((3,), n * (n + 1) / 2)), "reduce")

    outs = [torch.zeros(4) for _ in range(n)]
    dist.all_gather(outs, torch.full((4,), float(rank)))
    expect(all(torch.equal(o, torch.full((4,), float(r))) for r, o in enumerate(outs)), "all_gather")
    out = torch.zeros(4)
    dist.reduce_scatter(out, [torch.full((4,), float(rank * 10 + j)) for j in range(n)])
    expect(torch.equal(out, torch.full((4,), sum(r * 10 + rank for r in range(n)) * 1.0)),
           "reduce_scatter")

    ins = [torch.full((2,), float(rank * 100 + j)) for j in range(n)]
    outs = [torch.zeros(2) for _ in range(n)]
    dist.all_to_all(outs, ins)
    expect(all(torch.equal(o, torch.full((2,), float(r * 100 + rank))) for r, o in enumerate(outs)),
           "all_to_all")
    inp = torch.arange(n * 2, dtype=f) + 1000 * rank
    out = torch.zeros(n * 2)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(2, dtype=f) + 2 * rank + 1000 * r for r in range(n)])
    expect(torch.equal(out, want), "all_to_all_single")

    dist.barrier()

    # send/recv: 0 -> 1 then 1 -> 0, blocking; then a ring through batch_isend_irecv
    if n > 1 and rank < 2:
        t = torch.arange(5, dtype=f) * (rank + 1)
        if rank == 0:
            dist.send(t, dst=1)
            dist.recv(t, src=1)
            expect(torch.equal(t, torch.arange(5, dtype=f) * 2), "recv from 1")
        else:
            r = torch.zeros(5)
            dist.recv(r, src=0)
            expect(torch.equal(r, torch.arange(5, dtype=f)), "recv from 0")
            dist.send(t, dst=0)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    s, r = torch.full((100000,), float(rank)), torch.zeros(100000)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, s, nxt), dist.P2POp(dist.irecv, r, prv)])
    for q in reqs:
        q.wait()
    expect(torch.equal(r, torch.full((100000,), float(prv))), "batch_isend_irecv ring")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.body(x)


def train(group, rank, steps, batch):
    torch.manual_seed(1234)
    model = DDP(Net(), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    xs = torch.randn(steps, batch, 32, generator=gen)
    ys = torch.randint(0, 10, (steps, batch), generator=gen)
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return [p.detach().clone() for p in model.parameters()], times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("coll")
    rank, n = dist.get_rank(), dist.get_world_size()
    expect(dist.get_backend() == "coll", "default backend is %s" % dist.get_backend())
    gloo = dist.new_group(backend="gloo")
    if not args.bench:
        check_ops(rank, n)
    p_coll, t_coll = train(None, rank, args.steps, args.batch)
    p_gloo, t_gloo = train(gloo, rank, args.steps, args.batch)
    worst = max((a - b).abs().max().item() for a, b in zip(p_coll, p_gloo))
    moved = max((a - b).abs().max().item() for a, b in zip(p_coll, Net().parameters()))
    if args.bench:
        if rank == 0:
            skip = min(3, args.steps - 1)  # first steps build DDP's buckets
            mc = sum(t_coll[skip:]) / len(t_coll[skip:])
            mg = sum(t_gloo[skip:]) / len(t_gloo[skip:])
            print("ddp np=%d steps=%d batch=%d: coll %.3f ms/step, gloo %.3f ms/step, "
                  "coll/gloo %.3f, max param diff %.2e" % (n, args.steps, args.batch, mc * 1e3,
                                                           mg * 1e3, mc / mg, worst))
    else:
        expect(worst <= 1e-5, "coll and gloo parameters differ by %g" % worst)
        expect(moved > 1e-3, "training did not move the parameters")
        if rank == 0:
            print("ddp np=%d: coll and gloo parameters agree (max diff %.2e after %d steps)"
                  % (n, worst, args.steps))
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
