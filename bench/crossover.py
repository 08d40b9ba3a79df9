#!/usr/bin/env python3
"""Measured tree/ring all-reduce crossover beside the cost model's, for docs/teaching.md.

    bench/crossover.py [--build build] [--np 2 4 8] [--algos ring tree binomial]
                       [--repeats 3] [--max 16M] [--budget 0.05] [--calib FILE]

For each NP, `collrun -n NP collbench allreduce` runs --repeats times per algorithm with
COLL_ALGO forced (blocking calls, slowest rank), the algorithms taking turns within each
repeat so that a burst of load elsewhere hits them alike; the median time per size is kept,
because the machine is shared and single runs are noisy. The load average is printed
before and after each NP. The crossover is the smallest size from
which ring is faster than the other algorithm at every larger size measured. The prediction
is `collviz allreduce --compare ring,ALGO` with the same calibration file.

Prints one Markdown table per NP (median us per size) and a summary table; it only reads
and prints, so paste what it prints where it belongs.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    if not m:
        sys.exit("crossover.py: '%s' is not a size" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def human(n):
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d%s" % (n // k, unit)
    return str(n)


def measure(a, env, np_, algo):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [os.path.join(a.build, "collrun"), "-n", str(np_), "--timeout", "600",
           os.path.join(a.build, "collbench"), "allreduce", "-b", "8", "-e", a.max, "-f", "4",
           "-z", "1", "-a", "3", "-w", "2", "-c", "0", "--outofplace-only",
           "--time-budget", str(a.budget), "--json", path]
    e = dict(env, COLL_ALGO="allreduce=" + algo)
    r = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=900)
    res = {}
    if r.returncode == 0:
        with open(path) as f:
            for row in json.load(f)["results"]:
                res[row["size_bytes"]] = row["out_of_place"]["time_us"]
    else:
        print("# np=%d %s failed (rc %d): %s" % (np_, algo, r.returncode, r.stderr[-300:]),
              file=sys.stderr)
    os.unlink(path)
    return res


def crossover(ring, other):
    """Smallest measured size from which ring is faster at every larger size, or None."""
    sizes = sorted(s for s in ring if s in other)
    best = None
    for s in reversed(sizes):
        if ring[s] < other[s]:
            best = s
        else:
            break
    return best


def predicted(a, np_, algo):
    cmd = [os.path.join(a.build, "collviz"), "allreduce", "-n", str(np_), "--compare",
           "ring," + algo, "--bytes", "8:" + a.max, "--cost", a.calib]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.search(r"crossover: ring is faster from about .* \((\d+) bytes\)", r.stdout)
    if m:
        return "%s B" % m.group(1)
    faster = [ln.split()[-1] for ln in r.stdout.splitlines()[2:] if "crossover" not in ln]
    return "%s at every size" % faster[0] if faster and len(set(faster)) == 1 else "none"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--np", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--algos", nargs="+", default=["ring", "tree", "binomial"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max", default="16M")
    p.add_argument("--budget", type=float, default=0.05)
    p.add_argument("--calib", default=os.path.join(ROOT, "docs", "results", "calib.txt"))
    a = p.parse_args()
    parse_size(a.max)
    if "ring" not in a.algos:
        a.algos.insert(0, "ring")
    env = dict(os.environ, COLL_CALIB_FILE=a.calib, COLL_TIMEOUT_MS="120000")
    summary = []
    for np_ in a.np:
        med, runs = {}, {algo: [] for algo in a.algos}
        load0 = os.getloadavg()[0]
        for _ in range(a.repeats):
            for algo in a.algos:
                runs[algo].append(measure(a, env, np_, algo))
        for algo in a.algos:
            sizes = sorted(set().union(*runs[algo]))
            med[algo] = {s: statistics.median([r[s] for r in runs[algo] if s in r])
                         for s in sizes}
        sizes = sorted(med["ring"])
        print("\nNP=%d, all-reduce, median of %d runs, time in us (slowest rank); load "
              "average %.1f before, %.1f after\n" % (np_, a.repeats, load0, os.getloadavg()[0]))
        print("| bytes | " + " | ".join(a.algos) + " |")
        print("|---:|" + "---:|" * len(a.algos))
        for s in sizes:
            print("| %s | %s |" % (human(s), " | ".join(
                "%.1f" % med[al][s] if s in med[al] else "-" for al in a.algos)))
        for algo in a.algos:
            if algo != "ring":
                summary.append((np_, algo, crossover(med["ring"], med[algo]),
                                predicted(a, np_, algo)))
    print("\n| NP | ring vs | measured: ring faster from | predicted (calibrated) |")
    print("|---:|---|---:|---:|")
    for np_, algo, m, pr in summary:
        print("| %d | %s | %s | %s |" % (np_, algo, human(m) if m else "not in range", pr))


if __name__ == "__main__":
    main()
