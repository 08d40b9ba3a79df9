#!/usr/bin/env python3
"""simval.py - bench/simval.sh's bookkeeping: collbench's runs and collsim's into one TSV,
the tables of docs/scale.md ("Validation against measurement") and a plot.

  simval.py picks MEASURED.json...      size, algorithm and chunk the library used, a line
                                        per size (what collsim is to run)
  simval.py tsv DIR                     DIR/RATE-K-COLL*.json and DIR/sim/ -> TSV on stdout
  simval.py table TSV [--plot PNG] [--points] [--bands]
                                        geomean |error| and worst ratio per (rate, hosts,
                                        collective) and overall (markdown); --points adds the
                                        per-point table; --bands the same per (rate, hosts)
                                        and band of sizes (the terms that bound each band
                                        differ); --plot draws measured against simulated
                                        per collective and the error against size
  simval.py spread TSV_A TSV_B          the bed against itself: the same tables with sweep
                                        A's measured times in collsim's place, against B's
                                        (the points both ran with the same algorithm and
                                        chunk): how far two sweeps of the bed differ

Measured: per size, the median over collbench's cycles (-N) of the call's span, from the
last rank's start to the last rank's end (time_span_us, collbench -a 4: collsim starts every
rank at once), or of the slowest rank's own time (time_max_us, -a 3) where a record has no
span (runs before it) or SIMVAL_TIME=max says so; each cycle times its calls after warming
up. Error: simulated / measured - 1.
Standard library only (gnuplot for the plot when installed).
"""
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

COLLS = ["allreduce", "broadcast", "reduce", "allgather"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def measured(paths):
    """size -> (median time us, algo, chunk bytes, cycles, spread (max/min over cycles))"""
    per = {}
    for p in paths:
        d = load(p)
        if not d:
            continue
        for r in d.get("results", []):
            c = r.get("out_of_place") or r.get("in_place")
            if not c or not r["size_bytes"]:  # all-gather of 8 B on 4 ranks: nothing to move
                continue
            t = c["time_max_us"]
            if os.environ.get("SIMVAL_TIME", "span") == "span" and \
                    c.get("time_span_us") is not None:
                t = c["time_span_us"]
            per.setdefault(r["size_bytes"], []).append((t, r["algo"], r["chunk_bytes"]))
    out = {}
    for size, rows in per.items():
        ts = [t for t, _, _ in rows]
        algos = {(a, ch) for _, a, ch in rows}
        # the library decides once per size and comm: every cycle names the same
        algo, chunk = sorted(algos)[0]
        out[size] = (statistics.median(ts), algo, chunk, len(ts), max(ts) / min(ts),
                     len(algos))
    return out


def passes(base):
    """measured() of each pass of a case (simval.sh SIMVAL_PASSES: BASE.json, BASE.p2.json,
    ...), the pass with the smaller median per size: a pass that met minutes of a disturbed
    machine has a twin; cycles and spread are over every pass's cycles"""
    runs = []
    for p in range(1, 100):
        sfx = "" if p == 1 else ".p%d" % p
        files = [base + sfx + ".json", base + "-64M" + sfx + ".json"]
        if not any(os.path.exists(f) for f in files):
            break
        runs.append(measured(files))
    out = {}
    for size in sorted({s for r in runs for s in r}):
        got = [r[size] for r in runs if size in r]
        best = min(got, key=lambda x: x[0])
        n = sum(g[3] for g in got)
        spread = max(max(g[4] for g in got), max(g[0] for g in got) / min(g[0] for g in got))
        out[size] = (best[0], best[1], best[2], n, spread, best[5])
    return out


def cmd_picks(paths):
    for size, (_, algo, chunk, _, _, _) in sorted(measured(paths).items()):
        print(size, algo, chunk if chunk > 0 else 128 << 10)


def cmd_tsv(d):
    print("rate\thosts\tcoll\tsize\talgo\tchunk\tmeasured_us\tsimulated_us\terror\tcycles"
          "\tspread\tload")
    keys = set()
    for p in glob.glob(os.path.join(d, "*-*-*.json")):
        m = re.match(r"([^-]+)-(\d+)-([a-z]+)(-64M)?\.json$", os.path.basename(p))
        if m:
            keys.add((m.group(1), int(m.group(2)), m.group(3)))
    for rate, k, coll in sorted(keys, key=lambda x: (rate_val(x[0]), x[1], COLLS.index(x[2])
                                                        if x[2] in COLLS else 99)):
        base = os.path.join(d, "%s-%d-%s" % (rate, k, coll))
        try:
            with open(base + ".load") as f:
                ld = f.read().strip()
        except OSError:
            ld = "?"
        for size, (t, algo, chunk, n, spread, _) in sorted(passes(base).items()):
            s = load(os.path.join(d, "sim", "%s-%d-%s-%d.json" % (rate, k, coll, size)))
            sim = s["rows"][0]["time_us"] if s and s.get("rows") else float("nan")
            err = sim / t - 1 if t > 0 else float("nan")
            print("%s\t%d\t%s\t%d\t%s\t%d\t%.2f\t%.2f\t%+.4f\t%d\t%.2f\t%s" % (
                rate, k, coll, size, algo, chunk, t, sim, err, n, spread, ld))


def rate_val(r):
    m = re.match(r"([\d.]+)([kmg]?)bit", r)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] if m else 0


def read_tsv(path):
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(head, l.rstrip("\n").split("\t"))) for l in f if l.strip()]
    for r in rows:
        for k in ("measured_us", "simulated_us", "error", "spread"):
            r[k] = float(r[k])
        r["size"], r["hosts"] = int(r["size"]), int(r["hosts"])
    return rows


def human(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return "%g %s" % (b / div, unit)
    return "%d B" % b


def summary(rows):
    """geomean of |log ratio| as a percentage, the worst ratio (>= 1, either way), points
    within 15% and within 2x"""
    lr = [abs(math.log(r["simulated_us"] / r["measured_us"])) for r in rows
          if r["simulated_us"] > 0 and r["measured_us"] > 0]
    if not lr:
        return None
    g = math.exp(sum(lr) / len(lr)) - 1
    return g, math.exp(max(lr)), sum(1 for x in lr if x <= math.log(1.15)), \
        sum(1 for x in lr if x <= math.log(2)), len(lr)


BANDS = [("8 B-4 KiB", 0, 4096), ("32-256 KiB", 32768, 262144), ("2-64 MiB", 2 << 20, 64 << 20)]


def cmd_spread(path_a, path_b):
    """The bed against itself: sweep A's measured times in the simulator's place, judged
    against sweep B's, at the points both measured with the same algorithm and chunk (the
    library's pick follows each sweep's calibration). What a perfect simulator would score
    against B, if A were it."""
    a = {(r["rate"], r["hosts"], r["coll"], r["size"], r["algo"], r["chunk"]): r
         for r in read_tsv(path_a)}
    rows = []
    for r in read_tsv(path_b):
        o = a.get((r["rate"], r["hosts"], r["coll"], r["size"], r["algo"], r["chunk"]))
        if o and o["measured_us"] > 0 and r["measured_us"] > 0:
            rows.append(dict(r, simulated_us=o["measured_us"],
                             error=o["measured_us"] / r["measured_us"] - 1))
    print_tables(rows, None, False, True)


def cmd_table(path, plot, points, bands):
    print_tables(read_tsv(path), plot, points, bands)


def print_tables(rows, plot, points, bands):
    groups = {}
    for r in rows:
        groups.setdefault((r["rate"], r["hosts"], r["coll"]), []).append(r)
    print("| rate | hosts | collective | points | geomean \\|error\\| | worst ratio | within 15%"
          " | within 2x | met |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    met = 0
    for key in sorted(groups, key=lambda x: (rate_val(x[0]), x[1], COLLS.index(x[2])
                                             if x[2] in COLLS else 99)):
        s = summary(groups[key])
        if not s:
            continue
        ok = s[0] <= 0.15 and s[1] <= 2
        met += ok
        print("| %s | %d | %s | %d | %.1f%% | %.2f | %d | %d | %s |" % (
            key[0], key[1], key[2], s[4], 100 * s[0], s[1], s[2], s[3], "yes" if ok else "no"))
    s = summary(rows)
    if s:
        print("| all | | | %d | %.1f%% | %.2f | %d | %d | %d of %d cases |" % (
            s[4], 100 * s[0], s[1], s[2], s[3], met, len(groups)))
    if bands:
        print()
        print("| rate | hosts | sizes | points | geomean \\|error\\| | worst ratio | within 15% |"
              " median error |")
        print("|---|---:|---|---:|---:|---:|---:|---:|")
        for rate, k in sorted({(r["rate"], r["hosts"]) for r in rows},
                              key=lambda x: (rate_val(x[0]), x[1])):
            for name, lo, hi in BANDS:
                sel = [r for r in rows if r["rate"] == rate and r["hosts"] == k and
                       lo <= r["size"] <= hi]
                b = summary(sel)
                if b:
                    print("| %s | %d | %s | %d | %.1f%% | %.2f | %d | %+.0f%% |" % (
                        rate, k, name, b[4], 100 * b[0], b[1], b[2],
                        100 * statistics.median(r["error"] for r in sel)))
    if points:
        print()
        print("| rate | hosts | collective | size | algorithm | measured (us) | simulated (us)"
              " | error | spread of cycles |")
        print("|---|---:|---|---:|---|---:|---:|---:|---:|")
        for r in rows:
            print("| %s | %d | %s | %s | %s | %.1f | %.1f | %+.0f%% | %.2f |" % (
                r["rate"], r["hosts"], r["coll"], human(r["size"]), r["algo"],
                r["measured_us"], r["simulated_us"], 100 * r["error"], r["spread"]))
    if plot:
        draw(rows, plot)


def draw(rows, png):
    if not shutil.which("gnuplot"):
        print("simval.py: no gnuplot: no plot", file=sys.stderr)
        return
    tmp = png + ".dat"
    cases = sorted({(r["rate"], r["hosts"]) for r in rows}, key=lambda x: (rate_val(x[0]), x[1]))
    colls = [c for c in COLLS if any(r["coll"] == c for r in rows)]
    index = {}  # (coll, case) -> the data file's index, for those with rows
    with open(tmp, "w") as f:
        for coll in colls:
            for case in cases:
                sel = [r for r in rows if r["coll"] == coll and (r["rate"], r["hosts"]) == case]
                if not sel:
                    continue
                index[coll, case] = len(index)
                for r in sel:
                    f.write("%d %g %g %g\n" % (r["size"], r["measured_us"], r["simulated_us"],
                                               100 * r["error"]))
                f.write("\n\n")
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    script = ["set terminal pngcairo size 1400,1000 font ',9'", "set output '%s'" % png,
              "set multiplot layout 3,2", "set logscale x 2", "set format x '%.0b %BB'",
              "set key top left", "set grid"]
    for coll in colls:
        script += ["set title '%s: measured (points) and simulated (lines)'" % coll,
                   "set logscale y", "set ylabel 'time (us)'"]
        plots = []
        for j, case in enumerate(cases):
            if (coll, case) not in index:
                continue
            col = colors[j % len(colors)]
            plots.append("'%s' index %d using 1:2 with points pt 7 lc rgb '%s' title '%s %d "
                         "hosts'" % (tmp, index[coll, case], col, case[0], case[1]))
            plots.append("'%s' index %d using 1:3 with lines lc rgb '%s' notitle" % (
                tmp, index[coll, case], col))
        script.append("plot " + ", ".join(plots))
    script += ["unset logscale y", "set ylabel 'error (%)'", "set yrange [-100:400]"]
    for half in (colls[:2], colls[2:]):
        if not half:
            continue
        script.append("set title 'simulated / measured - 1: %s'" % ", ".join(half))
        plots = []
        for coll in half:
            for j, case in enumerate(cases):
                if (coll, case) in index:
                    plots.append("'%s' index %d using 1:4 with linespoints lc rgb '%s' dt %d "
                                 "title '%s %s %d'" % (tmp, index[coll, case],
                                                       colors[j % len(colors)],
                                                       1 + colls.index(coll) % 2, coll, *case))
        script.append("plot " + ", ".join(plots) + ", 15 lc rgb 'gray' notitle, -15 lc rgb "
                      "'gray' notitle")
    script.append("unset multiplot")
    try:
        subprocess.run(["gnuplot"], input="\n".join(script).encode(), check=True)
    finally:
        os.unlink(tmp)


def main(argv):
    if len(argv) >= 2 and argv[0] == "picks":
        cmd_picks(argv[1:])
    elif len(argv) == 2 and argv[0] == "tsv":
        cmd_tsv(argv[1])
    elif len(argv) == 3 and argv[0] == "spread":
        cmd_spread(argv[1], argv[2])
    elif len(argv) >= 2 and argv[0] == "table":
        plot = argv[argv.index("--plot") + 1] if "--plot" in argv else None
        cmd_table(argv[1], plot, "--points" in argv, "--bands" in argv)
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
