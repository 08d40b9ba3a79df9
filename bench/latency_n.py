#!/usr/bin/env python3
"""latency_n.py OUT_DIR - fits and plots what bench/latency_n.sh measured.

Reads OUT_DIR/collectives.csv (collbench --csv rows; of several cycles of one point the
fastest is kept) and OUT_DIR/train.tsv. For every
(collective, algorithm, size) it fits t(n) = a + b log2(n) and t(n) = a + b n by least
squares and prints both with their RMS residuals (the better fit has the smaller one);
writes OUT_DIR/fits.tsv, OUT_DIR/latency_n.png (time vs n at 8 B and 4 KiB, both fits
drawn), OUT_DIR/latency_n_model.png (the same for coll's cost model, OUT_DIR/model.csv)
and OUT_DIR/train_step.png (dptrain's step time vs n, tree and ring).
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def fit(xs, ys):
    """Least squares y = a + b x; returns a, b and the RMS residual."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    rms = math.sqrt(sum((a + b * x - y) ** 2 for x, y in zip(xs, ys)) / n)
    return a, b, rms


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/results/latency_n"
    data = {}  # (coll, algo_forced, size) -> {n: time_us}
    with open(os.path.join(out, "collectives.csv")) as f:
        for row in csv.DictReader(f):
            key = (row["collective"], row["algo"], int(row["size_bytes"]))
            n, t = int(row["nranks"]), float(row["time_us"])
            pts = data.setdefault(key, {})
            pts[n] = min(t, pts.get(n, t))  # fastest of the sweep's cycles

    rows = []
    print("%-10s %-9s %6s  %-28s %-28s %s" % ("collective", "algo", "bytes",
                                             "a + b log2(n) [us] (rms)", "a + b n [us] (rms)",
                                             "better"))
    for (coll, algo, size), pts in sorted(data.items()):
        ns = sorted(pts)
        if len(ns) < 3:
            continue
        ts = [pts[n] for n in ns]
        la, lb, lr = fit([math.log2(n) for n in ns], ts)
        na, nb, nr = fit([float(n) for n in ns], ts)
        better = "log" if lr < nr else "linear"
        rows.append((coll, algo, size, la, lb, lr, na, nb, nr, better))
        print("%-10s %-9s %6d  %7.1f + %6.1f log2n (%5.1f)   %7.1f + %6.2f n (%5.1f)   %s" %
              (coll, algo, size, la, lb, lr, na, nb, nr, better))
    with open(os.path.join(out, "fits.tsv"), "w") as f:
        f.write("collective\talgo\tbytes\tlog_a_us\tlog_b_us\tlog_rms_us\tlin_a_us\t"
                "lin_b_us\tlin_rms_us\tbetter\n")
        for r in rows:
            f.write("%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\n" % r)

    colls = sorted({k[0] for k in data})
    sizes = sorted({k[2] for k in data})
    show = [s for s in (8, 4096) if s in sizes] or sizes[:1]
    fig, axes = plt.subplots(len(colls), len(show), figsize=(6 * len(show), 4.2 * len(colls)),
                             squeeze=False)
    colors = {}
    for i, coll in enumerate(colls):
        for j, size in enumerate(show):
            ax = axes[i][j]
            for (c, algo, s), pts in sorted(data.items()):
                if c != coll or s != size:
                    continue
                ns = sorted(pts)
                ts = [pts[n] for n in ns]
                col = colors.setdefault(algo, "C%d" % len(colors))
                ax.plot(ns, ts, "o", color=col, label="%s (measured)" % algo)
                la, lb, _ = fit([math.log2(n) for n in ns], ts)
                na, nb, _ = fit([float(n) for n in ns], ts)
                xs = [ns[0] + (ns[-1] - ns[0]) * k / 100 for k in range(101)]
                ax.plot(xs, [la + lb * math.log2(x) for x in xs], "-", color=col,
                        label="%s: %.0f + %.1f log2 n" % (algo, la, lb))
                ax.plot(xs, [na + nb * x for x in xs], "--", color=col,
                        label="%s: %.0f + %.2f n" % (algo, na, nb))
            ax.set_title("%s, %d B" % (coll, size))
            ax.set_xlabel("ranks n (2 cores: above 2 they time-slice)")
            ax.set_ylabel("time per call (us, mean over ranks)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "latency_n.png"), dpi=110)
    print("wrote %s" % os.path.join(out, "latency_n.png"))

    model_path = os.path.join(out, "model.csv")
    if os.path.exists(model_path):
        model = {}
        with open(model_path) as f:
            for row in csv.DictReader(f):
                key = (row["collective"], row["algo"], int(row["size_bytes"]))
                model.setdefault(key, {})[int(row["nranks"])] = float(row["est_us"])
        print("cost model (collbench --explain):")
        fig, axes = plt.subplots(1, len(colls), figsize=(6 * len(colls), 4.2), squeeze=False)
        for i, coll in enumerate(colls):
            ax = axes[0][i]
            for (c, algo, s), pts in sorted(model.items()):
                if c != coll or s != 8:
                    continue
                ns = sorted(pts)
                ts = [pts[n] for n in ns]
                la, lb, lr = fit([math.log2(n) for n in ns], ts)
                na, nb, nr = fit([float(n) for n in ns], ts)
                print("  %-10s %-6s 8 B: a + b log2 n = %.1f + %.1f log2 n (rms %.1f); "
                      "a + b n = %.1f + %.2f n (rms %.1f)" % (coll, algo, la, lb, lr, na, nb,
                                                              nr))
                col = colors.setdefault(algo, "C%d" % len(colors))
                ax.plot(ns, ts, "o", color=col, label="%s (model)" % algo)
                xs = [ns[0] + (ns[-1] - ns[0]) * k / 100 for k in range(101)]
                ax.plot(xs, [la + lb * math.log2(x) for x in xs], "-", color=col,
                        label="%s: %.1f + %.1f log2 n" % (algo, la, lb))
                ax.plot(xs, [na + nb * x for x in xs], "--", color=col,
                        label="%s: %.1f + %.2f n" % (algo, na, nb))
            ax.set_title("%s, 8 B: coll's cost model" % coll)
            ax.set_xlabel("ranks n")
            ax.set_ylabel("predicted time (us)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "latency_n_model.png"), dpi=110)
        print("wrote %s" % os.path.join(out, "latency_n_model.png"))

    train = os.path.join(out, "train.tsv")
    if os.path.exists(train):
        by = {}
        with open(train) as f:
            for row in csv.DictReader(f, delimiter="\t"):
                by.setdefault(row["algo"], []).append((int(row["nranks"]),
                                                       float(row["step_ms"]),
                                                       float(row["wait_ms"])))
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for algo, pts in sorted(by.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="%s: step" % algo)
            ax.plot([p[0] for p in pts], [p[2] for p in pts], "x:", label="%s: of which wait"
                    % algo)
            print("dptrain 784-32-10 %s: %s" % (algo, ", ".join(
                "n=%d %.2f ms/step (wait %.2f)" % p for p in pts)))
        ax.set_xlabel("ranks n (2 cores)")
        ax.set_ylabel("ms per step")
        ax.set_title("dptrain step time, 784-32-10, global batch 128")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "train_step.png"), dpi=110)
        print("wrote %s" % os.path.join(out, "train_step.png"))


if __name__ == "__main__":
    main()
