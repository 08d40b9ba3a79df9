#!/usr/bin/env python3
"""collbench_plot.py - plots and comparisons of collbench runs (collbench --plot, --compare).

  collbench_plot.py plot RUN.json -o OUT.png [--title TEXT]
  collbench_plot.py compare RUN... [-o OUT.png] [--placement out|in]

A RUN is one of
  - collbench --json output (one series per type/redop/root in it);
  - the peers' driver's results.tsv (../shared/peers/run_all.sh): one series per
    (lib, np, coll), the median over repetitions;
  - a text file holding an nccl-tests or collbench table (rows of 13 fields).
Where a run has several cycles (-N) or repetitions, each size's median is used.

compare prints, per size, every series' time and busbw and their ratio to the first series
(the baseline): time ratio < 1 and busbw ratio > 1 mean faster than the baseline; then the
geometric mean of the ratios over the sizes both have. Plots show busbw (log2 x) and time
(log-log) against size. They are drawn with matplotlib when it imports, else with gnuplot
(Debian gnuplot-nox: pngcairo, or png); COLLBENCH_PLOTTER=matplotlib|gnuplot picks one.

Exit status: 0 done, 1 plotting failed or no plotter, 2 bad arguments or unreadable input.
Standard library only (plus matplotlib when present).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


class InputError(Exception):
    pass


class Series:
    """One line on a plot: size (bytes) -> lists of (time_us, busbw) samples."""

    def __init__(self, label):
        self.label = label
        self.samples = {}

    def add(self, size, time_us, busbw):
        if time_us is None or busbw is None:
            return
        if not (math.isfinite(time_us) and math.isfinite(busbw)):
            return
        self.samples.setdefault(size, []).append((time_us, busbw))

    def points(self):
        """Sorted (size, median time_us, median busbw)."""
        out = []
        for size in sorted(self.samples):
            s = self.samples[size]
            out.append((size, statistics.median(t for t, _ in s),
                        statistics.median(b for _, b in s)))
        return out


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _stem(path):
    base = os.path.basename(path)
    for ext in (".json", ".tsv", ".txt", ".log", ".out"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


def load_json(path, placement, text):
    try:
        run = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON: {e}")
    if not isinstance(run, dict) or run.get("tool") != "collbench" or "results" not in run:
        raise InputError(f"{path}: not a collbench --json file")
    key = "in_place" if placement == "in" else "out_of_place"
    groups = {}
    for row in run["results"]:
        g = (row.get("type"), row.get("redop"), row.get("root"))
        groups.setdefault(g, []).append(row)
    desc = f"{run.get('collective', '?')} n={run.get('nranks', '?')} {run.get('transport', '')}"
    series = []
    for g, rows in groups.items():
        label = _stem(path)
        if len(groups) > 1:
            label += f" {g[0]}/{g[1]}" + (f"/root {g[2]}" if g[2] is not None and g[2] >= 0 else "")
        s = Series(label)
        s.desc = desc.strip()
        for row in rows:
            col = row.get(key)
            if col:
                s.add(int(row["size_bytes"]), _num(col.get("time_us")), _num(col.get("busbw_GBps")))
        series.append(s)
    return series, run


def load_peers_tsv(path, text):
    lines = text.splitlines()
    head = lines[0].split("\t")
    need = ["lib", "np", "coll", "bytes", "time_us", "busbw_GBps"]
    if any(n not in head for n in need):
        raise InputError(f"{path}: a results.tsv needs the columns {', '.join(need)}")
    ix = {n: head.index(n) for n in need}
    groups = {}
    for ln, line in enumerate(lines[1:], 2):
        f = line.split("\t")
        if len(f) < len(head):
            continue
        key = (f[ix["lib"]], f[ix["np"]], f[ix["coll"]])
        s = groups.get(key)
        if s is None:
            s = groups[key] = Series(f"{key[0]} np={key[1]} {key[2]}")
            s.desc = "peers results.tsv"
        size = _num(f[ix["bytes"]])
        if size is None:
            raise InputError(f"{path}:{ln}: bad bytes '{f[ix['bytes']]}'")
        s.add(int(size), _num(f[ix["time_us"]]), _num(f[ix["busbw_GBps"]]))
    return list(groups.values())


def load_table(path, placement, text):
    s = Series(_stem(path))
    s.desc = "table"
    t_ix, b_ix = (9, 11) if placement == "in" else (5, 7)
    for line in text.splitlines():
        f = line.split()
        if len(f) < 13 or not f[0].isdigit():
            continue
        s.add(int(f[0]), _num(f[t_ix]), _num(f[b_ix]))
    if not s.samples:
        raise InputError(f"{path}: no JSON, no results.tsv header and no table rows")
    return [s]


def load(path, placement):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return load_json(path, placement, text)[0]
    if stripped.startswith("lib\t"):
        return load_peers_tsv(path, stripped)
    return load_table(path, placement, text)


# ---- ratio table -------------------------------------------------------------------------

def fmt_size(n):
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def compare_table(series, out=sys.stdout):
    base = series[0]
    print(f"# baseline [0]: {base.label} ({base.desc})", file=out)
    for i, s in enumerate(series[1:], 1):
        print(f"#          [{i}]: {s.label} ({s.desc})", file=out)
    print("# time in us (ratio to [0]: < 1 is faster); busbw in GB/s (ratio: > 1 is faster)",
          file=out)
    pts = [dict((p[0], p) for p in s.points()) for s in series]
    sizes = sorted(set().union(*[set(p) for p in pts]))
    head = f"{'size':>8}"
    for i in range(len(series)):
        head += f" {'time[' + str(i) + ']':>10}"
        if i:
            head += f" {'ratio':>6}"
    for i in range(len(series)):
        head += f" {'busbw[' + str(i) + ']':>9}"
        if i:
            head += f" {'ratio':>6}"
    print(head, file=out)
    logs_t = [[] for _ in series]
    logs_b = [[] for _ in series]
    for size in sizes:
        line = f"{fmt_size(size):>8}"
        b0 = pts[0].get(size)
        for i, p in enumerate(pts):
            q = p.get(size)
            line += f" {q[1]:10.2f}" if q else f" {'-':>10}"
            if i:
                if q and b0 and b0[1] > 0 and q[1] > 0:
                    r = q[1] / b0[1]
                    logs_t[i].append(math.log(r))
                    line += f" {r:6.2f}"
                else:
                    line += f" {'-':>6}"
        for i, p in enumerate(pts):
            q = p.get(size)
            line += f" {q[2]:9.3f}" if q else f" {'-':>9}"
            if i:
                if q and b0 and b0[2] > 0 and q[2] > 0:
                    r = q[2] / b0[2]
                    logs_b[i].append(math.log(r))
                    line += f" {r:6.2f}"
                else:
                    line += f" {'-':>6}"
        print(line, file=out)
    for i in range(1, len(series)):
        if logs_t[i]:
            gt = math.exp(sum(logs_t[i]) / len(logs_t[i]))
            gb = math.exp(sum(logs_b[i]) / len(logs_b[i])) if logs_b[i] else float("nan")
            print(f"# [{i}] vs [0]: geometric mean time ratio {gt:.3f} over {len(logs_t[i])} "
                  f"sizes, busbw ratio {gb:.3f} over {len(logs_b[i])} sizes", file=out)
        else:
            print(f"# [{i}] vs [0]: no size in common", file=out)


# ---- plotting ----------------------------------------------------------------------------

def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def plot_matplotlib(series, title, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(11, 4.5))
    for s in series:
        pts = [p for p in s.points() if p[0] > 0]
        if not pts:
            continue
        x = [p[0] for p in pts]
        ax_bw.plot(x, [p[2] for p in pts], marker="o", markersize=3, label=s.label)
        ax_t.plot(x, [p[1] for p in pts], marker="o", markersize=3, label=s.label)
    for ax, yl in ((ax_bw, "busbw (GB/s)"), (ax_t, "time (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    ax_bw.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def gnuplot_terminal(gp):
    """pngcairo when gnuplot has it (nicer text), else the libgd png terminal."""
    r = subprocess.run([gp, "-e", "set terminal pngcairo"], capture_output=True, text=True)
    return "pngcairo size 1100,450 noenhanced" if r.returncode == 0 and not r.stderr.strip() \
        else "png size 1100,450 noenhanced"


def gp_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plot_gnuplot(series, title, png):
    gp = shutil.which("gnuplot")
    with tempfile.TemporaryDirectory(prefix="collbench-plot.") as tmp:
        files = []
        for i, s in enumerate(series):
            pts = [p for p in s.points() if p[0] > 0]
            if not pts:
                continue
            path = os.path.join(tmp, f"s{i}.dat")
            with open(path, "w") as f:
                for size, t, bw in pts:
                    f.write(f"{size} {t!r} {bw!r}\n")
            files.append((path, s.label))
        if not files:
            raise InputError("nothing to plot: no size above 0 with a time")
        bw_plot = ", ".join(f"{gp_quote(p)} using 1:3 with linespoints title {gp_quote(l)}"
                            for p, l in files)
        t_plot = ", ".join(f"{gp_quote(p)} using 1:2 with linespoints title {gp_quote(l)}"
                           for p, l in files)
        script = "\n".join([
            f"set terminal {gnuplot_terminal(gp)}",
            f"set output {gp_quote(png)}",
            f"set multiplot layout 1,2 title {gp_quote(title)}",
            "set logscale x 2",
            'set format x "%.0b%B"',
            'set xlabel "size (bytes)"',
            "set grid",
            "set key top left",
            'set ylabel "busbw (GB/s)"',
            f"plot {bw_plot}",
            "set logscale y 10",
            'set ylabel "time (us)"',
            f"plot {t_plot}",
            "unset multiplot",
            "",
        ])
        r = subprocess.run([gp], input=script, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"gnuplot failed: {r.stderr.strip()}")


def plot(series, title, png):
    want = os.environ.get("COLLBENCH_PLOTTER", "")
    if want not in ("", "matplotlib", "gnuplot"):
        raise InputError(f"COLLBENCH_PLOTTER='{want}': matplotlib or gnuplot")
    use_mpl = want == "matplotlib" or (want == "" and have_matplotlib())
    if use_mpl:
        if not have_matplotlib():
            raise RuntimeError("COLLBENCH_PLOTTER=matplotlib, but matplotlib does not import")
        plot_matplotlib(series, title, png)
    elif shutil.which("gnuplot"):
        plot_gnuplot(series, title, png)
    else:
        raise RuntimeError("no plotter: install python3-matplotlib or gnuplot-nox")


# ---- commands ----------------------------------------------------------------------------

def cmd_plot(args):
    series = []
    for placement, name in (("out", "out-of-place"), ("in", "in-place")):
        for s in load(args.run, placement):
            if s.samples:
                s.label = f"{name}" if s.label == _stem(args.run) else f"{s.label} {name}"
                series.append(s)
    if not series:
        raise InputError(f"{args.run}: no timed rows")
    title = args.title
    if not title:
        try:
            with open(args.run) as f:
                run = json.load(f)
            title = (f"coll {run.get('collective')}, {run.get('nranks')} ranks, "
                     f"{run.get('transport')}, {run.get('host')}")
        except (OSError, ValueError):
            title = _stem(args.run)
    plot(series, title, args.output)
    print(f"# plot: {args.output}")


def cmd_compare(args):
    series = []
    for path in args.runs:
        series.extend(load(path, args.placement))
    series = [s for s in series if s.samples]
    if not series:
        raise InputError("no timed rows in the runs given")
    compare_table(series)
    if args.output:
        place = "out-of-place" if args.placement == "out" else "in-place"
        plot(series, args.title or f"collbench compare ({place})", args.output)
        print(f"# plot: {args.output}")


def main(argv):
    ap = argparse.ArgumentParser(prog="collbench_plot.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plot", help="busbw and time vs size of one collbench --json run")
    p.add_argument("run")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--title")
    c = sub.add_parser("compare", help="ratio table (and plot) of several runs")
    c.add_argument("runs", nargs="+")
    c.add_argument("-o", "--output")
    c.add_argument("--placement", choices=("out", "in"), default="out")
    c.add_argument("--title")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "plot":
            cmd_plot(args)
        else:
            cmd_compare(args)
    except InputError as e:
        print(f"collbench_plot.py: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as e:
        print(f"collbench_plot.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
