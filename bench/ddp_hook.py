#!/usr/bin/env python3
"""ddp_hook.py - DDP training on Fashion-MNIST with one gradient-communication scheme, under
torchrun; rank 0 prints one JSON line of results. bench/ddp_hook.sh runs every scheme.

    torchrun --nproc_per_node 4 ... ddp_hook.py --backend coll --hook int8 [--epochs 2]

--hook: none (DDP's own all-reduce), int8 / int4 / fp16q (coll_torch.quantized_hook with
error feedback; coll backend only), fp16 (PyTorch's fp16_compress_hook), powersgd
(PyTorch's powerSGD_hook, rank 2, from step 10).

Reported, per rank and per step: bytes this rank's coll comm sent (coll only: its own
counter, coll_comm_bytes_sent), payload bytes handed to all-reduce calls (every backend:
counted at torch.distributed.all_reduce and at the quantized hook), the wall time of a
step (forward, backward with its communication, optimizer), and the test accuracy after
the last epoch. The data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 2051:  # images: n x rows x cols bytes
        rows, cols = struct.unpack(">II", raw[8:16])
        a = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, rows * cols)
        return torch.from_numpy(a.astype(np.float32) / 255.0)
    if magic == 2049:  # labels
        return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8, offset=8).astype(np.int64))
    raise ValueError("%s: not an IDX file (magic %d)" % (name, magic))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="coll")
    ap.add_argument("--hook", default="none")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many (0: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)

    if args.backend == "coll":
        import coll_torch
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()

    payload = [0]
    plain_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor, *a, **kw):
        payload[0] += tensor.numel() * tensor.element_size()
        return plain_all_reduce(tensor, *a, **kw)

    dist.all_reduce = counting_all_reduce

    net = DDP(model())
    if args.hook in ("int8", "int4", "fp16q"):
        assert args.backend == "coll", "the quantized hook runs on coll only"
        codec = {"fp16q": "fp16"}.get(args.hook, args.hook)
        state = coll_torch.QuantHookState(codec, feedback=True)
        per_elem = {"int8": 1 + 4 / 256, "int4": 0.5 + 4 / 256, "fp16": 2}[codec]

        def hook(st, bucket):
            payload[0] += int(bucket.buffer().numel() * per_elem)
            return coll_torch.quantized_hook(st, bucket)

        net.register_comm_hook(state, hook)
    elif args.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                   start_powerSGD_iter=10, use_error_feedback=True,
                                   warm_start=True, random_seed=0)
        net.register_comm_hook(state, psgd.powerSGD_hook)
    elif args.hook != "none":
        raise SystemExit("unknown hook " + args.hook)

    xs, ys = load_idx("train-images-idx3-ubyte.gz"), load_idx("train-labels-idx1-ubyte.gz")
    tx, ty = load_idx("t10k-images-idx3-ubyte.gz"), load_idx("t10k-labels-idx1-ubyte.gz")
    mean, std = xs.mean(), xs.std()
    xs, tx = (xs - mean) / std, (tx - mean) / std
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)

    step_s, steps = [], 0
    sent0 = coll_torch.bytes_sent() if args.backend == "coll" else 0
    pay0 = payload[0]
    for epoch in range(args.epochs):
        perm = torch.randperm(len(xs), generator=torch.Generator().manual_seed(epoch))
        mine = perm[rank::n]
        nb = len(perm) // (n * args.batch)  # the same number of steps on every rank
        if args.max_steps:
            nb = min(nb, args.max_steps)
        for b in range(nb):
            idx = mine[b * args.batch:(b + 1) * args.batch]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            step_s.append(time.perf_counter() - t0)
            steps += 1
    sent = (coll_torch.bytes_sent() - sent0) if args.backend == "coll" else None
    pay = payload[0] - pay0
    if args.hook == "none":  # DDP's reducer calls the group directly: its buckets, fp32
        pay = steps * 4 * sum(p.numel() for p in net.parameters())
    with torch.no_grad():
        acc = (net.module(tx).argmax(1) == ty).float().mean().item()
    # every rank's step times: the slowest rank sets the pace
    times = [None] * n
    dist.all_gather_object(times, float(np.median(step_s[10:])))
    if rank == 0:
        print(json.dumps({
            "backend": args.backend, "hook": args.hook, "ranks": n, "epochs": args.epochs,
            "steps": steps, "params": sum(p.numel() for p in net.parameters()),
            "accuracy": round(acc, 4),
            "bytes_sent_per_step": None if sent is None else round(sent / steps),
            "payload_per_step": round(pay / steps),
            "step_ms_median": round(1000 * max(times), 3),
            "final_loss": round(loss.item(), 4)}), flush=True)
    dist.barrier()
    # Not destroy_process_group: PyTorch 1.13's gloo group can hang at teardown when DDP's
    # reducer drops the last reference (its worker waits for the GIL the destructor holds).
    os._exit(0)


if __name__ == "__main__":
    main()
