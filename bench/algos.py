#!/usr/bin/env python3
"""Every algorithm measured at every size, next to the cost model's prediction.

    bench/algos.py [--np 2 4 8] [--colls allreduce broadcast reduce allgather]
                   [--max 64M] [--budget 0.05] [--transport shm|tcp] [--out FILE]

--transport: the transport between the ranks (all on this host): shm (the default, written
to docs/algorithms.md) or tcp (docs/algorithms-tcp.md); results and plots carry its name.

1. `collbench --calibrate` (2 ranks, over the transport) updates docs/results/calib.txt:
   this machine's alpha and beta for that link class, and gamma. Every later run reads it
   (COLL_CALIB_FILE).
2. For each NP, collective and algorithm: `collrun -n NP collbench COLL` with
   COLL_ALGO=COLL=ALGO, blocking calls, slowest rank, 8 B .. --max (x4), JSON record.
3. `collrun -n NP collbench COLL --explain`: the model's prediction for every algorithm at
   the same chunk size (COLL_CHUNK_BYTES is fixed for both), over the comm's own links, and
   the selector's pick.
4. docs/algorithms.md: prediction error per algorithm, how often the pick is within 10% of
   the fastest measured algorithm, the measured and predicted tree/ring crossover, and
   plots (gnuplot).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = {
    "allreduce": ["ring", "tree", "dbtree", "binomial", "rd", "rabenseifner"],
    "broadcast": ["chain", "binomial", "tree", "dbtree", "vdg"],
    "reduce": ["chain", "binomial", "tree", "dbtree", "rabenseifner"],
    "allgather": ["ring", "rd", "bruck"],
    "reducescatter": ["ring", "rd"],
    "alltoall": ["pairwise", "bruck", "linear"],
}
CALL_NAME = {"reducescatter": "reduce_scatter"}  # COLL_ALGO's collective names
CHUNK = "128K"


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def run(cmd, env, timeout=900):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def human(n):
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d%s" % (n // k, unit)
    return str(n)


def measure(a, env, np_, coll, algo):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    e = dict(env, COLL_ALGO="%s=%s" % (CALL_NAME.get(coll, coll), algo))
    cmd = [a.build + "/collrun", "-n", str(np_), "--timeout", "600", a.build + "/collbench",
           coll, "-b", "8", "-e", a.max, "-f", "4", "-z", "1", "-a", "3", "-w", "1",
           "--outofplace-only", "--time-budget", str(a.budget), "--json", path]
    rc, out, err = run(cmd, e)
    res = {}
    if rc == 0:
        with open(path) as f:
            d = json.load(f)
        for r in d["results"]:
            if r.get("algo") not in (algo, None):
                sys.exit("%s %s: ran %s, not the forced %s" % (coll, algo, r.get("algo"), algo))
            res[r["size_bytes"]] = r["out_of_place"]["time_us"]
    else:
        print("  %s np=%d %s failed (rc %d): %s" % (coll, np_, algo, rc, err.strip()[-300:]))
    os.unlink(path)
    return res


def explain(a, env, np_, coll):
    cmd = [a.build + "/collrun", "-n", str(np_), "--timeout", "600", a.build + "/collbench",
           coll, "--explain", "-b", "8", "-e", a.max, "-f", "4"]
    rc, out, err = run(cmd, env)
    if rc != 0:
        sys.exit("explain failed: " + err)
    pred, pick = {}, {}
    for line in out.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        size = int(f[0])
        pick[size] = f[2]
        pred[size] = {}
        for name, est in re.findall(r"(\w+) ([0-9.]+)/\d+", line.split("ranking:")[-1]
                                    if "ranking:" in line else " ".join(f[5:])):
            pred[size][name] = float(est)
    return pred, pick


def plot(path, title, series, ylabel):
    if not shutil.which("gnuplot"):
        return False
    with tempfile.TemporaryDirectory() as d:
        plots = []
        for name, pts, style in series:
            fn = os.path.join(d, re.sub(r"\W", "_", name) + ".dat")
            with open(fn, "w") as f:
                for x, y in sorted(pts.items()):
                    f.write("%d %g\n" % (x, y))
            plots.append('"%s" using 1:2 with %s title "%s"' % (fn, style, name))
        script = """set terminal pngcairo size 800,480 noenhanced
set output "%s"
set title "%s"
set logscale x 2
set logscale y 10
set format x "%%.0s%%cB"
set xlabel "message size"
set ylabel "%s"
set grid
set key left top
plot %s
""" % (path, title, ylabel, ", ".join(plots))
        subprocess.run(["gnuplot"], input=script.encode(), check=True)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--colls", nargs="+", default=["allreduce", "broadcast", "reduce",
                                                   "allgather"])
    ap.add_argument("--max", default="64M")
    ap.add_argument("--budget", type=float, default=0.05)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--calib", default=os.path.join(ROOT, "docs", "results", "calib.txt"))
    a = ap.parse_args()
    a.tag = "" if a.transport == "shm" else "-" + a.transport
    if a.out is None:
        a.out = os.path.join(ROOT, "docs", "algorithms%s.md" % a.tag)
    resdir = os.path.dirname(a.calib)
    os.makedirs(resdir, exist_ok=True)
    env = dict(os.environ, COLL_CALIB_FILE=a.calib, COLL_CHUNK_BYTES=CHUNK,
               COLL_TIMEOUT_MS="120000", COLL_TRANSPORT=a.transport)
    env.pop("COLL_ALGO", None)
    print("calibrating %s (2 ranks) into %s" % (a.transport, a.calib))
    rc, out, err = run([a.build + "/collrun", "-n", "2", a.build + "/collbench", "allreduce",
                        "--calibrate", "-b", "8", "-e", "8M"], env)
    if rc != 0:
        sys.exit("calibration failed: " + err)
    data = {}
    for np_ in a.np:
        for coll in a.colls:
            pred, pick = explain(a, env, np_, coll)
            meas = {}
            for algo in ALGOS[coll]:
                print("  np=%d %s %s" % (np_, coll, algo), flush=True)
                meas[algo] = measure(a, env, np_, coll, algo)
            data["%d/%s" % (np_, coll)] = {"pred": pred, "pick": pick, "meas": meas}
    with open(os.path.join(resdir, "algos%s.json" % a.tag), "w") as f:
        json.dump(data, f, indent=1, default=str)
    write_report(a, data)


def write_report(a, data):
    out = []
    w = out.append
    w("# Algorithms: measured, predicted, chosen\n")
    w("Generated by `bench/algos.py --transport %s --np %s --colls %s --max %s` on this "
      "machine (2 cores, all ranks on it, talking over %s; NP above 2 is oversubscribed). "
      "The cost model's parameters come from "
      "`collbench --calibrate` ([results/calib.txt](results/calib.txt)); every algorithm ran "
      "at every size with COLL_ALGO forcing it and COLL_CHUNK_BYTES=%s, blocking calls, the "
      "slowest rank's mean; the predictions are `collbench --explain` at the same chunk size. "
      "Raw data: [results/algos%s.json](results/algos%s.json).\n"
      % (a.transport, " ".join(map(str, a.np)), " ".join(a.colls), a.max,
         "shared memory" if a.transport == "shm" else "TCP loopback", CHUNK, a.tag, a.tag))
    hits = total = 0
    rows = []
    errs = {}
    for key, d in data.items():
        np_, coll = key.split("/")
        sizes = sorted(set().union(*[set(m) for m in d["meas"].values()]) if d["meas"] else [])
        for s in sizes:
            measured = {al: t[s] for al, t in d["meas"].items() if s in t}
            if not measured:
                continue
            best_al = min(measured, key=measured.get)
            picked = d["pick"].get(s)
            ok = picked in measured and measured[picked] <= 1.10 * measured[best_al]
            total += 1
            hits += ok
            rows.append((int(np_), coll, s, best_al, picked, measured.get(picked), measured[best_al],
                         ok))
            for al, t in measured.items():
                p = d["pred"].get(s, {}).get(al)
                if p:
                    errs.setdefault((coll, al), []).append(abs(p - t) / t)
    w("## Does the selector pick a fast algorithm?\n")
    w("The selector's pick is within 10%% of the fastest measured algorithm at **%d of %d** "
      "(NP, collective, size) points (%.0f%%; the target is 90%%).\n"
      % (hits, total, 100.0 * hits / max(total, 1)))
    w("| NP | collective | size | fastest measured | picked | picked (us) | fastest (us) | within 10% |")
    w("|---:|---|---:|---|---|---:|---:|:---:|")
    for r in rows:
        w("| %d | %s | %s | %s | %s | %s | %.1f | %s |"
          % (r[0], r[1], human(r[2]), r[3], r[4], "%.1f" % r[5] if r[5] else "-", r[6],
             "yes" if r[7] else "**no**"))
    w("\n## Prediction error per algorithm\n")
    w("|prediction - measured| / measured over every NP and size: median and 90th percentile.\n")
    w("| collective | algorithm | points | median error | p90 error |")
    w("|---|---|---:|---:|---:|")
    for (coll, al), e in sorted(errs.items()):
        e = sorted(e)
        w("| %s | %s | %d | %.0f%% | %.0f%% |" % (coll, al, len(e), 100 * statistics.median(e),
                                                100 * e[int(0.9 * (len(e) - 1))]))
    w("\n## Tree versus ring all-reduce: the crossover\n")
    w("| NP | measured: ring faster from | predicted: ring faster from |")
    w("|---:|---:|---:|")
    for key, d in data.items():
        np_, coll = key.split("/")
        if coll != "allreduce" or "ring" not in d["meas"] or "tree" not in d["meas"]:
            continue
        ring, tree = d["meas"]["ring"], d["meas"]["tree"]

        def cross(r, t):
            sizes = sorted(set(r) & set(t))
            for i, s in enumerate(sizes):
                if all(r[x] <= t[x] for x in sizes[i:]):
                    return human(s)
            return "never"
        pr = {s: v["ring"] for s, v in d["pred"].items() if "ring" in v}
        pt = {s: v["tree"] for s, v in d["pred"].items() if "tree" in v}
        w("| %s | %s | %s |" % (np_, cross(ring, tree), cross(pr, pt)))
        png = os.path.join(os.path.dirname(a.out), "results",
                           "algos%s-allreduce-np%s.png" % (a.tag, np_))
        series = []
        for al in ("ring", "tree", "rd", "rabenseifner"):
            if al in d["meas"]:
                series.append(("%s measured" % al, d["meas"][al], "linespoints"))
                series.append(("%s predicted" % al,
                               {s: v[al] for s, v in d["pred"].items() if al in v}, "lines dt 2"))
        if plot(png, "all-reduce, %s ranks over %s: measured (points) and predicted (dashed)"
                % (np_, a.transport),
                series, "time (us)"):
            w("\n![all-reduce NP=%s](results/%s)\n" % (np_, os.path.basename(png)))
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
