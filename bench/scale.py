#!/usr/bin/env python3
"""scale.py DIR - docs/scale.md's tables and plots from bench/scale.sh's scale-*.json.

Prints the tables (markdown) and writes DIR/scale-logn.png, scale-crossover.png,
scale-validate.png and scale-cost.png with gnuplot when it is installed. Standard library
only: the fits are least squares by hand.
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys


def load(path):
    """The record, or an empty one when the file is missing or cut short (a run in progress
    or stopped)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return {"rows": [], "results": [], "nranks": 0}
    for tail in ("", "\n  ]\n}\n"):  # collsim writes row by row: a stopped run's rows
        try:
            return json.loads(text + tail)
        except ValueError:
            pass
    return {"rows": [], "results": [], "nranks": 0}


def rows_of(path):
    return load(path)["rows"]


def fit(xs, ys):
    """y = a + b x by least squares; returns a, b, R^2."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx if sxx else 0.0
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, (1 - res / ss) if ss else 1.0


def gnuplot(script):
    if not shutil.which("gnuplot"):
        return False
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    return True


def human(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return "%g %s" % (b / div, unit)
    return "%d B" % b


def logn(d):
    out = []
    series = {}
    for coll in ("allreduce", "broadcast"):
        for path in glob.glob(os.path.join(d, "scale-logn-%s-[0-9]*.json" % coll)):
            n = load(path)["nranks"]
            for r in load(path)["rows"]:
                series.setdefault((coll, r["algo"]), {})[n] = r["time_us"]
        for path in glob.glob(os.path.join(d, "scale-logn-%s-auto-*.json" % coll)):
            n = load(path)["nranks"]
            for r in load(path)["rows"]:
                series.setdefault((coll, "selector"), {})[n] = (r["time_us"], r["algo"])
    if not series:
        return out
    ns = sorted({n for s in series.values() for n in s})
    out.append("### 8-byte latency against n (us), one rank per host, 100 Gbit/s fat tree\n")
    keys = [k for k in sorted(series) if k[1] != "selector"]
    out.append("| n | " + " | ".join("%s %s" % k for k in keys) + " | selector's pick |")
    out.append("|---:|" + "---:|" * len(keys) + "---|")
    for n in ns:
        cells = ["%.1f" % series[k][n] if n in series[k] else "" for k in keys]
        sel = series.get(("allreduce", "selector"), {}).get(n)
        out.append("| %d | %s | %s |" % (n, " | ".join(cells),
                                         "%s %.1f" % (sel[1], sel[0]) if sel else ""))
    out.append("\n### Fits over n = %d .. %d: time = a + b log2(n) and time = a + b n\n" %
               (ns[0], ns[-1]))
    out.append("| collective | algorithm | b per log2(n) step (us) | R^2 (log) | b per rank (us) "
               "| R^2 (linear) | better fit |")
    out.append("|---|---|---:|---:|---:|---:|---|")
    for k in keys:
        pts = sorted(series[k].items())
        if len(pts) < 3:
            continue
        xs = [n for n, _ in pts]
        ys = [t for _, t in pts]
        _, bl, rl = fit([math.log2(x) for x in xs], ys)
        _, bn, rn = fit(xs, ys)
        out.append("| %s | %s | %.2f | %.4f | %.4f | %.4f | %s |" %
                   (k[0], k[1], bl, rl, bn, rn, "log2(n)" if rl > rn else "n"))
    dat = os.path.join(d, "scale-logn.dat")
    with open(dat, "w") as f:
        for k in keys:
            f.write("# %s %s\n" % k)
            for n, t in sorted(series[k].items()):
                f.write("%d %g\n" % (n, t))
            f.write("\n\n")
    plots = ", ".join("'%s' index %d with linespoints title '%s %s'" % (dat, i, k[0], k[1])
                      for i, k in enumerate(keys))
    gnuplot("""set terminal pngcairo size 1000,650
set output '%s'
set logscale xy 2
set xlabel 'ranks (one per host)'
set ylabel '8-byte time (us)'
set title 'coll schedules on SimGrid: 100 Gbit/s fat tree, 1 us links'
set key left top
set grid
plot %s
""" % (os.path.join(d, "scale-logn.png"), plots))
    os.remove(dat)
    return out


def crossover(d):
    out = []
    pts = []
    for path in sorted(glob.glob(os.path.join(d, "scale-crossover-*.json")),
                       key=lambda p: load(p)["nranks"]):
        doc = load(path)
        n = doc["nranks"]
        by = {}
        for r in doc["rows"]:
            by.setdefault(r["size"], {})[r["algo"]] = r["time_us"]
        by = {k: v for k, v in by.items() if "ring" in v and "tree" in v}  # a stopped run
        if not by:
            continue
        cross = None
        for size in sorted(by):
            t = by[size]
            if "ring" in t and "tree" in t and t["ring"] <= t["tree"]:
                cross = size
                break
        pts.append((n, cross, by))
    if not pts:
        return out
    out.append("### All-reduce: the smallest size at which ring is no slower than tree\n")
    out.append("| n | crossover size | tree / ring at 8 B | tree / ring at the largest size |")
    out.append("|---:|---:|---:|---:|")
    for n, cross, by in pts:
        lo, hi = min(by), max(by)
        out.append("| %d | %s | %.2f | %.2f |" % (
            n, human(cross) if cross else "above %s" % human(hi),
            by[lo]["tree"] / by[lo]["ring"], by[hi]["tree"] / by[hi]["ring"]))
    dat = os.path.join(d, "scale-crossover.dat")
    with open(dat, "w") as f:
        for n, _, by in pts:
            f.write("# n=%d\n" % n)
            for size in sorted(by):
                f.write("%d %g\n" % (size, by[size]["tree"] / by[size]["ring"]))
            f.write("\n\n")
    plots = ", ".join("'%s' index %d with linespoints title 'n = %d'" % (dat, i, p[0])
                      for i, p in enumerate(pts))
    gnuplot("""set terminal pngcairo size 1000,650
set output '%s'
set logscale x 2
set logscale y
set format x '%%.0s%%cB'
set xlabel 'all-reduce size'
set ylabel 'tree time / ring time (below 1: tree wins)'
set title 'Tree against ring on SimGrid: 100 Gbit/s fat tree'
set grid
plot %s, 1 with lines lt 0 notitle
""" % (os.path.join(d, "scale-crossover.png"), plots))
    os.remove(dat)
    return out


def selector(d):
    """The pick against the fastest simulated algorithm per (n, size). Rows over collsim's
    --max-messages carry "skipped" and no time: a point whose pick was not simulated is not
    judged; the fastest is over the algorithms that were."""
    out = []
    table = []
    per_n = {}
    unjudged = []
    budgets = {}
    for path in sorted(glob.glob(os.path.join(d, "scale-selector-all-*.json")),
                       key=lambda p: load(p)["nranks"]):
        doc = load(path)
        n = doc["nranks"]
        budgets[n] = doc.get("max_messages", 0)
        auto = {r["size"]: r for r in rows_of(path.replace("-all-", "-auto-"))}
        best, skipped, seen = {}, {}, {}
        for r in doc["rows"]:
            seen.setdefault(r["size"], set()).add(r["algo"])
            if "skipped" in r:
                skipped.setdefault(r["size"], []).append(r["algo"])
                continue
            if r["size"] not in best or r["time_us"] < best[r["size"]]["time_us"]:
                best[r["size"]] = r
        for size in sorted(set(seen) | set(auto)):
            a = auto.get(size)
            if a is None or size not in best:
                unjudged.append((n, size, "the pick's run was not reached" if a is None
                                 else "the algorithms' run was not reached" if size not in seen
                                 else "no algorithm simulated"))
                continue
            if "skipped" in a:
                unjudged.append((n, size, "the pick (%s) is over the message budget" %
                                 a["algo"]))
                continue
            b = best[size]
            ratio = a["time_us"] / b["time_us"]
            t = per_n.setdefault(n, [0, 0])
            t[0] += ratio <= 1.10
            t[1] += 1
            coarse = lambda r: "*" if r.get("coarsened_from") else ""
            every = {a for t in seen.values() for a in t}
            note = ", ".join(skipped.get(size, []))
            missed = sorted(every - seen[size])
            if missed:  # the run was stopped before them (SCALE_SEL_TIMEOUT)
                note += ("; " if note else "") + "not reached: " + ", ".join(missed)
            table.append("| %d | %s | %s %s%s | %.1f | %s %s%s | %.1f | %.2f | %s |" % (
                n, human(size), a["algo"], human(a["chunk_bytes"]), coarse(a), a["time_us"],
                b["algo"], human(b["chunk_bytes"]), coarse(b), b["time_us"], ratio,
                note))
    if not per_n:
        return out
    within = sum(t[0] for t in per_n.values())
    total = sum(t[1] for t in per_n.values())
    out.append("### The selector's pick against the fastest simulated algorithm (8 ranks per "
               "host, 100 Gbit/s fat tree)\n")
    out.append("Within 10%% of the fastest at %d of %d points (%.0f%%).\n" %
               (within, total, 100.0 * within / total))
    out.append("| n | message budget | points within 10% | share |")
    out.append("|---:|---:|---:|---:|")
    for n in sorted(per_n):
        out.append("| %d | %s | %d of %d | %.0f%% |" % (
            n, "{:,}".format(budgets[n]) if budgets[n] else "none", per_n[n][0], per_n[n][1],
            100.0 * per_n[n][0] / per_n[n][1]))
    out.append("")
    out.append("| n | size | pick (chunk) | its time (us) | fastest (chunk) | its time (us) | "
               "pick / fastest | not simulated (over the budget; not reached) |")
    out.append("|---:|---:|---|---:|---|---:|---:|---|")
    out.extend(table)
    out.append("\n\\* coarsened: the chunk was raised to the size's floor, 2 x n x size / "
               "budget (collsim --max-messages).")
    if unjudged:
        out.append("\nNot judged: " + "; ".join("%d ranks %s (%s)" % (n, human(s), why)
                                                  for n, s, why in unjudged) + ".")
    return out


def chunks(d):
    """Ring all-reduce in 32 and 128 KiB chunks under both intra-host models."""
    out = []
    t = {}
    for path in glob.glob(os.path.join(d, "scale-chunks-*.json")):
        _, _, model, chunk = os.path.basename(path)[:-5].split("-")
        for r in rows_of(path):
            t[(model, chunk, r["size"])] = r
    if not t:
        return out
    out.append("### Ring all-reduce, 64 ranks (8 per host), 100 Gbit/s fat tree: 32 KiB chunks "
               "against 128 KiB (time us; the cost model's in brackets)\n")
    out.append("| size | intra-host model | 32 KiB | 128 KiB | 32 KiB / 128 KiB |")
    out.append("|---:|---|---:|---:|---:|")
    for size in sorted({k[2] for k in t}):
        for model, name in (("loopback", "loopback, SimGrid's sharing (before)"),
                            ("ports", "memory ports, streams")):
            a, b = t.get((model, "32K", size)), t.get((model, "128K", size))
            if a and b:
                out.append("| %s | %s | %.1f (%.1f) | %.1f (%.1f) | %.2f |" % (
                    human(size), name, a["time_us"], a["model_us"], b["time_us"],
                    b["model_us"], a["time_us"] / b["time_us"]))
    return out


def hier(d):
    out = []
    for path in sorted(glob.glob(os.path.join(d, "scale-hier-*.json"))):
        doc = load(path)
        by = {}
        for r in doc["rows"]:
            by.setdefault(r["size"], {})[r["algo"]] = r
        algos = sorted({a for t in by.values() for a in t})
        out.append("### %d ranks, %d hosts x %d, fabric %s, intra-host %s (time us; the cost "
                   "model's in brackets)\n" % (doc["nranks"], doc["hosts"], doc["per_host"],
                                               doc["platform"],
                                               doc.get("intra_model", "loopback")))
        out.append("| size | " + " | ".join(algos) + " |")
        out.append("|---:|" + "---:|" * len(algos))
        for size in sorted(by):
            out.append("| %s | %s |" % (human(size), " | ".join(
                "%.1f (%.1f)" % (by[size][a]["time_us"], by[size][a]["model_us"])
                if a in by[size] else "" for a in algos)))
        out.append("")
    return out


def extrap(d):
    out = []
    rows = []
    for path in glob.glob(os.path.join(d, "scale-extrap-*.json")):
        gbit = int(os.path.basename(path).split("-")[2])
        doc = load(path)
        for r in doc["rows"]:
            rows.append((gbit, doc["nranks"], doc["hosts"], r,
                         doc.get("intra_model", "loopback")))
    if not rows:
        return out
    out.append("### bench/extrapolate.sh's clusters on SimGrid: 256 MiB all-reduce, hosts of 8, "
               "1 MiB chunks\n")
    out.append("| ranks | hosts | link | selector's pick | simulated (ms) | cost model (ms) | "
               "simulated busbw (GB/s) | NIC line rate (GB/s) | intra-host |")
    out.append("|---:|---:|---|---|---:|---:|---:|---:|---|")
    for gbit, n, h, r, im in sorted(rows, key=lambda x: (x[0], x[1])):
        out.append("| %d | %d | %d Gbit/s | %s | %.2f | %.2f | %.2f | %.1f | %s |" % (
            n, h, gbit, r["algo"], r["time_us"] / 1e3, r["model_us"] / 1e3, r["busbw_GBps"],
            gbit / 8, im))
    return out


def compare(d, meas_prefix, sim_prefix, title, png, plot_title):
    out = []
    pts = []
    for path in sorted(glob.glob(os.path.join(d, meas_prefix + "*.json"))):
        shape, algo = os.path.basename(path)[len(meas_prefix):-5].split("-")
        meas = {}
        for r in load(path)["results"]:
            t = r.get("out_of_place") or {}
            # the slowest rank's mean per call: the simulation's time is when the last rank
            # is done
            if t.get("time_max_us") is not None:
                meas[r["size_bytes"]] = (t["time_max_us"], t["time_us"])
        sim = {r["size"]: r for r in rows_of(path.replace(meas_prefix, sim_prefix))}
        # the same run over SimGrid's loopback within a host (the model before the ports)
        old = {r["size"]: r for r in rows_of(path.replace(meas_prefix,
                                                           sim_prefix + "loopback-"))}
        for size in sorted(meas):
            if size in sim:
                pts.append((shape, algo, size, meas[size][0], sim[size]["time_us"],
                            sim[size]["model_us"], meas[size][1],
                            old[size]["time_us"] if size in old else None))
    if not pts:
        return out
    out.append(title + "\n")
    out.append("| ranks | algorithm | size | measured, slowest rank (us) | simulated (us) "
               "| error | cost model (us) | measured, mean of ranks (us) | simulated, "
               "loopback (us) | error, loopback |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    good = good_old = nold = 0
    for shape, algo, size, m, s, mod, mean, o in pts:
        err = (s - m) / m
        good += abs(err) <= 0.25
        if o is not None:
            nold += 1
            good_old += abs(o - m) / m <= 0.25
        out.append("| %s | %s | %s | %.1f | %.1f | %+.0f%% | %.1f | %.1f | %s | %s |" % (
            shape, algo, human(size), m, s, 100 * err, mod, mean,
            "%.1f" % o if o is not None else "", "%+.0f%%" % (100 * (o - m) / m)
            if o is not None else ""))
    out.append("\nWithin 25%%: %d of %d points (over SimGrid's loopback: %d of %d).\n" %
               (good, len(pts), good_old, nold))
    dat = os.path.join(d, png + ".dat")
    keys = sorted({(p[0], p[1]) for p in pts})
    with open(dat, "w") as f:
        for k in keys:
            f.write("# %s %s\n" % k)
            for p in pts:
                if (p[0], p[1]) == k:
                    f.write("%d %g %g\n" % (p[2], p[3], p[4]))
            f.write("\n\n")
    plots = []
    for i, k in enumerate(keys):
        plots.append("'%s' index %d using 1:2 with linespoints lc %d pt 7 title 'measured "
                     "%s %s'" % (dat, i, i + 1, k[0], k[1]))
        plots.append("'%s' index %d using 1:3 with linespoints lc %d dt 2 pt 6 title "
                     "'simulated %s %s'" % (dat, i, i + 1, k[0], k[1]))
    gnuplot("""set terminal pngcairo size 1000,650
set output '%s'
set logscale xy
set format x '%%.0s%%cB'
set xlabel 'all-reduce size'
set ylabel 'time (us)'
set title '%s'
set key left top
set grid
plot %s
""" % (os.path.join(d, png), plot_title, ", ".join(plots)))
    os.remove(dat)
    return out


def validate(d):
    return (compare(d, "scale-measured-", "scale-simulated-",
                    "### Measured (collbench, shared memory, one host) against simulated "
                    "(collsim --calib); ranks = ranks on the host",
                    "scale-validate.png",
                    "collbench on this machine (shared memory) against collsim") +
            compare(d, "scale-netns-measured-", "scale-netns-simulated-",
                    "### Measured on bench/netns_hosts.sh's hosts (1 Gbit/s) against "
                    "simulated; ranks = hosts x ranks per host",
                    "scale-netns.png",
                    "collbench on emulated hosts (netns, 1 Gbit/s) against collsim"))


def cost(d):
    out = []
    pts = []
    for path in glob.glob(os.path.join(d, "scale-*.json")):
        if "measured" in path:
            continue
        doc = load(path)
        for r in doc.get("rows", []):
            if r.get("messages", 0) >= 1000:
                pts.append((r["messages"], r["sim_wall_s"], r["algo"], doc["nranks"]))
    if len(pts) < 2:
        return out
    msgs = sum(p[0] for p in pts)
    secs = sum(p[1] for p in pts)
    out.append("### Simulation cost (process CPU seconds; runs of 1,000 messages or more)\n")
    out.append("Over %d runs: %.2f million messages in %.1f s, %.1f s per million messages.\n" %
               (len(pts), msgs / 1e6, secs, secs / msgs * 1e6))
    out.append("| algorithm | runs | million messages | CPU s | s per million messages |")
    out.append("|---|---:|---:|---:|---:|")
    for algo in sorted({p[2] for p in pts}):
        sel = [p for p in pts if p[2] == algo]
        m, s = sum(p[0] for p in sel), sum(p[1] for p in sel)
        out.append("| %s | %d | %.3f | %.1f | %.1f |" % (algo, len(sel), m / 1e6, s,
                                                       s / m * 1e6))
    dat = os.path.join(d, "scale-cost.dat")
    with open(dat, "w") as f:
        for p in pts:
            f.write("%d %g\n" % (p[0], p[1]))
    gnuplot("""set terminal pngcairo size 900,600
set output '%s'
set logscale xy
set xlabel 'simulated messages'
set ylabel 'CPU seconds'
set title 'What a collsim run costs'
set grid
plot '%s' using 1:2 with points pt 7 notitle
""" % (os.path.join(d, "scale-cost.png"), dat))
    os.remove(dat)
    return out


def main():
    """scale.py [DIR] [--doc FILE]: the tables to stdout, or (--doc) each into FILE between
    its <!-- BEGIN scale:NAME --> and <!-- END scale:NAME --> lines."""
    args = [a for a in sys.argv[1:] if a != "--doc"]
    doc = None
    if "--doc" in sys.argv[1:]:
        doc = sys.argv[sys.argv.index("--doc") + 1]
        args.remove(doc)
    d = args[0] if args else "docs/results"
    parts = (logn, crossover, selector, chunks, hier, extrap, validate, cost)
    if not doc:
        for part in parts:
            lines = part(d)
            if lines:
                print("\n".join(lines))
                print()
        return
    with open(doc) as f:
        text = f.read()
    for part in parts:
        begin = "<!-- BEGIN scale:%s -->" % part.__name__
        end = "<!-- END scale:%s -->" % part.__name__
        if begin not in text or end not in text:
            continue
        lines = part(d)
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n" + "\n".join(lines) + "\n" + end + tail
    with open(doc, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
