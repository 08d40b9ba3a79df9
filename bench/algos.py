#!/usr/bin/env python3
"""Every algorithm of every collective measured at every size, next to the cost model's
prediction and the selector's pick.

    bench/algos.py [--np 2 4 8] [--colls allreduce broadcast ...] [--max 16M]
                   [--budget 0.01] [--rounds 3] [--cycles 2] [--transport shm|tcp]
                   [--build DIR] [--out FILE] [--save JSON] [--stat min|median]
                   [--runs JSON [JSON ...]] [--calib FILE] [--base-build DIR [--base-no-4m]]

--transport: the transport between the ranks (all on this host): shm (the default, written
to docs/algorithms.md) or tcp (docs/algorithms-tcp.md); results and plots carry its name.
A run of every collective at NP 2, 4 and 8 up to 8 MiB takes 4-6 minutes here.

A run (without --runs):
1. `collbench --calibrate` (2 ranks, over the transport) writes this machine's cost model
   parameters into results/calib-shm.txt (-tcp) beside --out; the run's predictions read it
   (COLL_CALIB_FILE), and the run's record keeps a copy.
2. For each NP, collective and algorithm: `collrun -n NP collbench COLL` with
   COLL_ALGO=COLL=ALGO, blocking calls, slowest rank, 8 B .. --max (x4), --cycles sweeps
   per run; twice for the algorithms that pipeline: in 128 KiB chunks ("ring") and in
   4 MiB chunks ("ring:4M", the selector's largest: one chunk per block up to 4 MiB; sizes
   above 128 KiB only, where they differ). The variants of one (NP, collective) take
   turns, --rounds times, so that a burst of load elsewhere hits them alike; a point is
   the best of its samples: load from elsewhere only ever adds time (a rank that waits for
   a core), and the best sample is the algorithm's time when it has the cores, which is
   what the model prices (--stat median for the median). The record goes to --save
   (default results/algos[-tcp].json beside --out), every sample included.
3. `collrun -n NP collbench COLL --explain`, once per chunk setting: the model's price of
   every variant over the comm's own links. The selector's pick at a size is the variant
   the model prices lowest among those measured: so "picked" and "fastest" are the same
   candidates, measured in the same run.
4. The report: for each collective and overall, how often the pick is within 10% of the
   fastest measured variant, and how often the run agrees with itself (the ceiling); the
   model's error per algorithm; the measured and predicted tree/ring crossover; plots
   (matplotlib).

--runs A.json B.json: measure nothing; take the measurements of earlier runs (each with
the calibration it was predicted with, or --calib), predict them with this build's model,
and report every run's share (the first run's rows in detail). --base-build DIR: predict
the same measurements with another build's model too (e.g. the model before a change),
and report both shares side by side. So a change to the model is judged on measurements it
was not fitted to: run twice, change the model against the first, read the second.
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
ALGOS = {
    "allreduce": ["ring", "tree", "dbtree", "binomial", "rd", "rabenseifner"],
    "broadcast": ["chain", "binomial", "tree", "dbtree", "vdg"],
    "reduce": ["chain", "binomial", "tree", "dbtree", "rabenseifner"],
    "allgather": ["ring", "rd", "bruck"],
    "reducescatter": ["ring", "rd"],
    "alltoall": ["pairwise", "bruck", "linear"],
    "gather": ["binomial", "linear"],
    "scatter": ["binomial", "linear"],
    "barrier": ["dissemination", "linear"],
}
DEFAULT_COLLS = ["allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall",
                 "gather", "scatter"]
# builders that cut messages into chunk_count pieces (src/algo/*.c); the others send whole
# blocks whatever COLL_CHUNK_BYTES says
PIPELINED = {"ring", "tree", "dbtree", "chain", "binomial", "vdg"}
# The shared-memory fast path for small blocking calls (src/transport/shm_flat.c), where the
# library has it: it bypasses the schedule, so the model does not price it. Where the library
# takes it (`collbench --explain -z 1` says `flat`) it is the pick; where it does not (small
# reduce and broadcast on a host with more ranks than CPUs) the model picks as elsewhere.
FLAT = "flat"
TAKES_FLAT = "(takes flat)"  # a key of explain()'s prices: the library runs this size flat
FLAT_MAX = "4K"  # COLL_SHM_FLAT_BYTES' default
# ... and these take it at every size, in pieces of COLL_SHM_SLICED_BYTES (2 to 16 ranks)
FLAT_ANY_SIZE = {"allreduce", "broadcast", "reduce"}
CALL_NAME = {}  # COLL_ALGO names collectives as coll__coll_name does
CHUNK = "128K"
WHOLE = "4M"  # the selector's largest chunk: one copy per block up to 4 MiB
WHOLE_FROM = 128 << 10  # above this, the two chunk settings differ


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    if not m:
        sys.exit("algos.py: '%s' is not a size" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def run(cmd, env, timeout=900):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def human(n):
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d%s" % (n // k, unit)
    return "%d" % n


def variant(algo, whole):
    return algo + (":4M" if whole else "")


def has_flat(build, env, coll):
    """Whether this build runs coll by the shared-memory fast path when told to."""
    e = dict(env, COLL_ALGO="%s=%s" % (coll, FLAT))
    rc, out, err = run([build + "/collrun", "-n", "2", build + "/collbench", coll,
                        "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-z", "1"], e, timeout=120)
    return rc == 0


def measure(a, env, np_, coll, algo, whole):
    """{size: [us per cycle]}: --cycles sweeps in one run, the slowest rank's mean each."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    e = dict(env, COLL_ALGO="%s=%s" % (CALL_NAME.get(coll, coll), algo),
             COLL_CHUNK_BYTES=WHOLE if whole else CHUNK)
    lo = "8" if not whole else str(WHOLE_FROM * 4)
    if coll == "barrier":
        hi = "8"
    elif algo == FLAT and not (coll in FLAT_ANY_SIZE and 2 <= np_ <= 16):
        hi = FLAT_MAX
    else:
        hi = a.max
    cmd = [a.build + "/collrun", "-n", str(np_), "--timeout", "600", a.build + "/collbench",
           coll, "-b", lo, "-e", hi, "-f", "4", "-z", "1", "-a", "3", "-w", "1",
           "-N", str(a.cycles), "--outofplace-only", "--time-budget", str(a.budget),
           "--json", path]
    rc, out, err = run(cmd, e)
    res = {}
    if rc == 0:
        with open(path) as f:
            d = json.load(f)
        for r in d["results"]:
            # collbench names no algorithm for the fast path, which has no schedule
            if r.get("algo") not in (algo, None) and not (algo == FLAT and r.get("algo") == "?"):
                sys.exit("%s %s: ran %s, not the forced %s" % (coll, algo, r.get("algo"), algo))
            res.setdefault(str(r["size_bytes"]), []).append(r["out_of_place"]["time_us"])
    else:
        print("  %s np=%d %s failed (rc %d): %s" % (coll, np_, algo, rc, err.strip()[-300:]))
    os.unlink(path)
    return res


def explain(build, env, np_, coll, hi, chunk):
    """{size: {variant: us}} as the model prices every algorithm at one chunk setting."""
    e = dict(env, COLL_CHUNK_BYTES=chunk)
    e.pop("COLL_ALGO", None)
    cmd = [build + "/collrun", "-n", str(np_), "--timeout", "600", build + "/collbench",
           coll, "--explain", "-z", "1", "-b", "8", "-e", "8" if coll == "barrier" else hi,
           "-f", "4"]
    rc, out, err = run(cmd, e)
    if rc != 0:
        sys.exit("explain failed: " + err)
    pred = {}
    for line in out.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        size = f[0]
        pred[size] = {TAKES_FLAT: 0.0} if f[2] == FLAT else {}
        for name, est in re.findall(r"(\w+) ([0-9.]+)/\d+", " ".join(f[5:])):
            pred[size][variant(name, chunk == WHOLE)] = float(est)
    return pred


def predict_run(build, run_, calib_path, whole=True):
    """The model's prices for every (NP, collective) of a run, both chunk settings (whole
    False: 128 KiB only, for a selector that never tried 4 MiB chunks)."""
    env = dict(os.environ, COLL_CALIB_FILE=calib_path, COLL_TIMEOUT_MS="120000",
               COLL_TRANSPORT=run_["transport"])
    out = {}
    for key in run_["meas"]:
        np_, coll = key.split("/")
        pred = explain(build, env, int(np_), coll, run_["max"], CHUNK)
        if whole and coll != "barrier" and parse_size(run_["max"]) > WHOLE_FROM:
            for s, v in explain(build, env, int(np_), coll, run_["max"], WHOLE).items():
                if int(s) > WHOLE_FROM:
                    pred.setdefault(s, {}).update(
                        {k: t for k, t in v.items() if k.split(":")[0] in PIPELINED})
        out[key] = pred
    return out


def evaluate(run_, pred):
    """Per point: the fastest measured variant, the model's pick among the measured ones."""
    rows = []
    for key, meas in run_["meas"].items():
        np_, coll = key.split("/")
        sizes = sorted(set().union(*[set(m) for m in meas.values()]), key=int)
        for s in sizes:
            if s == "0":  # fewer bytes than ranks: an empty call, nothing to choose
                continue
            measured = {v: t[s] for v, t in meas.items() if s in t}
            priced = {v: p for v, p in pred.get(key, {}).get(s, {}).items() if v in measured}
            if not measured or not priced:
                continue
            best = min(measured, key=measured.get)
            takes = TAKES_FLAT in pred.get(key, {}).get(s, {})
            pick = FLAT if FLAT in measured and takes else min(priced, key=priced.get)
            rows.append({"np": int(np_), "coll": coll, "size": int(s), "best": best,
                         "pick": pick, "t_pick": measured[pick], "t_best": measured[best],
                         "ok": measured[pick] <= 1.10 * measured[best],
                         "flat": FLAT in measured})
    return rows


def ceiling(run_, stat):
    """How reproducible the run is: per collective, the share of points where the variant
    fastest in the first half of the samples (the first rounds) is within 10% of the
    fastest in the second half. No model can do better than the run agrees with itself."""
    f = min if stat == "min" else statistics.median
    rows = []
    for key, samples in run_.get("samples", {}).items():
        coll = key.split("/")[1]
        for s in set().union(*[set(m) for m in samples.values()]):
            halves = {v: (t[s][:len(t[s]) // 2], t[s][len(t[s]) // 2:])
                      for v, t in samples.items() if s in t and len(t[s]) >= 2}
            if s == "0" or not halves:
                continue
            first = {v: f(h[0]) for v, h in halves.items()}
            second = {v: f(h[1]) for v, h in halves.items()}
            pick = min(first, key=first.get)
            rows.append({"coll": coll, "ok": second[pick] <= 1.10 * min(second.values())})
    return shares(rows) if rows else None


def shares(rows):
    per = {}
    for r in rows:
        h, t = per.get(r["coll"], (0, 0))
        per[r["coll"]] = (h + r["ok"], t + 1)
    per["all"] = (sum(r["ok"] for r in rows), len(rows))
    return per


def pct(ht):
    return "%d/%d (%.0f%%)" % (ht[0], ht[1], 100.0 * ht[0] / max(ht[1], 1))


def do_measure(a):
    env = dict(os.environ, COLL_CALIB_FILE=a.calib, COLL_TIMEOUT_MS="120000",
               COLL_TRANSPORT=a.transport)
    env.pop("COLL_ALGO", None)
    env.pop("COLL_CHUNK_BYTES", None)
    print("calibrating %s (2 ranks) into %s" % (a.transport, a.calib), flush=True)
    rc, out, err = run([a.build + "/collrun", "-n", "2", a.build + "/collbench", "allreduce",
                        "--calibrate", "-b", "8", "-e", "8M"], env)
    if rc != 0:
        sys.exit("calibration failed: " + err)
    with open(a.calib) as f:
        calib = f.read()
    flat = {c for c in a.colls if a.transport == "shm" and has_flat(a.build, env, c)}
    run_ = {"transport": a.transport, "max": a.max, "np": a.np, "colls": a.colls,
            "calib": calib, "rounds": a.rounds, "cycles": a.cycles,
            "load": [os.getloadavg()[0]], "meas": {}, "samples": {}}
    for np_ in a.np:
        for coll in a.colls:
            samples = {}
            algos = ALGOS[coll] + ([FLAT] if coll in flat else [])
            print("  np=%d %s: %s" % (np_, coll, " ".join(algos)), flush=True)
            # the variants take turns within each round: a burst of load hits them alike
            for _ in range(a.rounds):
                for algo in algos:
                    whole = [False]
                    if algo in PIPELINED and coll != "barrier" and parse_size(a.max) > WHOLE_FROM:
                        whole.append(True)
                    for wh in whole:
                        for s, t in measure(a, env, np_, coll, algo, wh).items():
                            samples.setdefault(variant(algo, wh), {}).setdefault(s, []).extend(t)
            key = "%d/%s" % (np_, coll)
            run_["samples"][key] = samples
            run_["meas"][key] = {v: {s: min(t) for s, t in m.items()}
                                 for v, m in samples.items()}
        run_["load"].append(os.getloadavg()[0])
    with open(a.save, "w") as f:
        json.dump(run_, f, indent=1)
    print("wrote", a.save)
    return run_


def restat(run_, stat):
    """Each point of run_ from its samples, by stat."""
    f = min if stat == "min" else statistics.median
    for key, samples in run_.get("samples", {}).items():
        run_["meas"][key] = {v: {s: f(t) for s, t in m.items()} for v, m in samples.items()}


def calib_file(run_, override, d, sets=(), name="calib.txt"):
    """The calibration to price run_ with: its own (or override), then the KEY=VALUE pairs
    of sets, which win (a calibration file's later line for a key replaces an earlier)."""
    if override and not sets:
        return override
    if override:
        with open(override) as f:
            text = f.read()
    else:
        text = run_["calib"]
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n")
        for kv in sets:
            k, _, v = kv.partition("=")
            f.write("%s %s\n" % (k, v))
    return path


def plot(path, title, meas, pred, pick):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("algos.py: no matplotlib in this python (%s): no plots; Debian's "
              "/usr/bin/python3 with python3-matplotlib has it" % sys.executable,
              file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(9, 5.2))
    names = sorted(meas)
    colors = {}
    for i, v in enumerate(names):
        c = "C%d" % (i % 10)
        colors[v] = c
        xs = sorted(meas[v], key=int)
        ax.plot([int(x) for x in xs], [meas[v][x] for x in xs], "o-", color=c, label=v, ms=3)
        ps = sorted((s for s in pred if v in pred[s]), key=int)
        if ps:
            ax.plot([int(x) for x in ps], [pred[x][v] for x in ps], "--", color=c, lw=0.9)
    xs = sorted(pick, key=int)
    ax.plot([int(x) for x in xs], [meas[pick[x]][x] for x in xs], "k*", ms=9,
            label="selector's pick (measured)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time (us)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def crossover(r, t):
    """Smallest size from which r is faster than t at every larger size, or None."""
    sizes = sorted(set(r) & set(t), key=int)
    for i, s in enumerate(sizes):
        if all(r[x] <= t[x] for x in sizes[i:]):
            return int(s)
    return None


MODEL_NOTES = """
What the model prices (src/algo/cost.c, parameters from `collbench --calibrate`):

- **alpha, beta** per link class from a ping-pong between two ranks (the best of many short
  trials for small messages, so that a trial that shared its cores with other work does not
  set alpha); **gamma** per dtype and **copy** from host loops over 1 MiB.
- **rdv** (shm): what a message of 16 KiB or more costs beyond alpha + m beta, where the shm
  transport hands it over by rendezvous (the receiver's `process_vm_readv`, a completion
  back). A ping-pong shows almost none of it, since there the receiver is always waiting;
  so it is fitted to a short collective instead: a 2-rank chain reduce of 2 MiB in
  128 KiB chunks and whole, same bytes, same reductions, same cache state, 15 more
  hand-overs. The model prices both without rdv; the measured difference it does not
  explain, over 15, is rdv.
- **mem, cache_bytes**: beta, gamma and copy are in-cache figures. A copy timed over working
  sets of 1-256 MiB gives the ratio of its out-of-cache to in-cache cost (mem) and the size
  that best explains the curve (cache_bytes); a call whose buffers on one host exceed it
  pays the share 1 - cache_bytes / W of its bytes at mem times those costs.
- **lat** per link class: the part of alpha that is latency. A message holds its ports for
  alpha - lat + m beta and arrives lat later, so the n - 1 small messages a rank sends at
  once (linear and pairwise all-to-all, a flat gather) overlap their latencies, while log n
  dependent rounds (Bruck) pay the whole alpha each (LogP's L against its o and g). A TCP
  message keeps its receiver's core through the latency too (the wake-up needs it).
  `--calibrate` times a burst of 16 grouped 8-byte sends against a lone one: what each
  further send costs the sender is the occupancy; lat is alpha minus it.
- **step**: the executor's time per schedule step (send, receive, reduce, copy), on the
  rank's CPU, one step at a time with its reductions and copies: a schedule of many small
  steps (Bruck's packing copies, a tree's chunked forwards) pays for their number.
  `--calibrate` sets it to the shm burst's per-send time.
- **chunk sizes**: the selector prices 32 KiB, 128 KiB, 512 KiB and 4 MiB chunks; 4 MiB is
  one copy per block up to there (the `:4M` variants here).

The model stays a critical-path alpha-beta-gamma simulation of every rank's schedule;
nothing in it names an algorithm, a rank count or a size.
"""


def write_report(a, runs, preds, base_preds):
    out = []
    w = out.append
    first, pred = runs[0], preds[0]
    rows = evaluate(first, pred)
    tag = a.tag
    w("# Algorithms: measured, predicted, chosen (%s)\n" % (
        "shared memory" if a.transport == "shm" else "TCP"))
    w("Generated by `bench/algos.py --transport %s --np %s --colls %s --max %s`%s on this "
      "machine (2 cores, all ranks on it, talking over %s; NP above 2 is oversubscribed). "
      "Every algorithm ran at every size with COLL_ALGO forcing it, blocking calls; a "
      "point is the %s of %d samples (%d rounds in which the variants take turns, %d "
      "sweeps per run), each the slowest rank's mean; the algorithms that pipeline ran "
      "twice, in 128 KiB chunks (`ring`) and in 4 MiB chunks (`ring:4M`, above 128 KiB; "
      "one copy per block up to 4 MiB). The model's parameters come from "
      "`collbench --calibrate` at the start of the run; its predictions are `collbench "
      "--explain` over the comm's own links at the same chunk settings, and the pick at a "
      "size is the variant the model prices lowest among those measured. Run 1's "
      "calibration: [results/%s](results/%s)%s. Raw data: "
      "[results/%s](results/%s)%s.\n"
      % (a.transport, " ".join(map(str, first["np"])), " ".join(first["colls"]), first["max"],
         " (then `--runs` over its records)" if a.runs else "",
         "shared memory" if a.transport == "shm" else "TCP loopback",
         "best" if a.stat == "min" else "median",
         first.get("rounds", 1) * first.get("cycles", 1), first.get("rounds", 1),
         first.get("cycles", 1), a.calib_name, a.calib_name,
         ", with %s" % ", ".join("`%s`" % kv for kv in a.set) if a.set else "",
         os.path.basename(a.runs[0]) if a.runs else "algos%s.json" % tag,
         os.path.basename(a.runs[0]) if a.runs else "algos%s.json" % tag,
         "".join(", [results/%s](results/%s)" % (os.path.basename(p), os.path.basename(p))
                 for p in (a.runs or [])[1:])))
    w("## Does the selector pick a fast algorithm?\n")
    colls = [c for c in first["colls"] if any(r["coll"] == c for r in rows)]
    head = "| run | load avg (start, end) | " + " | ".join(colls) + " | all |"
    w("Share of (NP, size) points where the pick is within 10%% of the fastest measured "
      "variant (target: 90%%)%s.\n" % (
          "; *before*: the same measurements priced by the model of %s%s" % (
              a.base_name, ", at 128 KiB chunks only, as its selector had no 4 MiB chunk"
              if a.base_no_4m else "") if base_preds else ""))
    w(head)
    w("|---|---|" + "---:|" * (len(colls) + 1))
    for i, (run_, p) in enumerate(zip(runs, preds)):
        s = shares(evaluate(run_, p))
        load = run_.get("load", [0])
        label = "run %d" % (i + 1)
        if base_preds:
            sb = shares(evaluate(run_, base_preds[i]))
            w("| %s, before | %.1f, %.1f | %s | %s |" % (
                label, load[0], load[-1],
                " | ".join(pct(sb.get(c, (0, 0))) for c in colls), pct(sb["all"])))
            label += ", after"
        w("| %s | %.1f, %.1f | %s | **%s** |" % (
            label, load[0], load[-1], " | ".join(pct(s.get(c, (0, 0))) for c in colls),
            pct(s["all"])))
        rows_i = evaluate(run_, p)
        if any(r_["flat"] for r_ in rows_i):
            sm = shares([r_ for r_ in rows_i if not r_["flat"]])
            w("| run %d, after, without the `flat` points | | %s | %s |" % (
                i + 1, " | ".join(pct(sm.get(c, (0, 0))) for c in colls), pct(sm["all"])))
        ce = ceiling(run_, a.stat)
        if ce:
            w("| run %d, ceiling | | %s | %s |" % (
                i + 1, " | ".join(pct(ce.get(c, (0, 0))) for c in colls), pct(ce["all"])))
    w("\n*ceiling*: how well the run agrees with itself. The first half of each point's "
      "samples (its first rounds) names a fastest variant; the row is the share of points "
      "where that variant is within 10% of the fastest by the second half. A model, "
      "however right, cannot be judged above it.\n")
    ceils = [ceiling(r_, a.stat) for r_ in runs]
    if all(c and 100.0 * c["all"][0] / max(c["all"][1], 1) < 90 for c in ceils):
        w("**Reading.** The target is 90% of points. These runs do not agree with "
          "themselves to that precision (every ceiling is below 90%: the machine was "
          "shared with other work, load average as above, and time-slicing moves a "
          "point by more than 10% from one round to the next), so the target cannot be "
          "judged from them. What they do show is the model against the noise: where its "
          "share reaches the run's ceiling, its misses are points the run itself cannot "
          "decide; and *before* against *after* on the same measurements is the change of "
          "the model alone. The target needs a run on a quiet machine, whose ceiling is "
          "above 90%.\n")
    w(MODEL_NOTES)
    if any(FLAT in m for r_ in runs for m in r_["meas"].values()):
        w("`flat` is the shared-memory fast path for blocking calls (all of them up to "
          "COLL_SHM_FLAT_BYTES, and all-reduce, broadcast and reduce at every size on 2 to "
          "16 ranks, in pieces): it bypasses the schedule, so the model does not price it. "
          "Where the library takes it (`collbench --explain -z 1` says so; not for small "
          "reduce and broadcast on a host with more ranks than CPUs) the pick is `flat`, "
          "whatever the model says, and the rows *without the `flat` points* leave "
          "them out (they judge the model where it still chooses: non-blocking and grouped "
          "calls, and the other collectives).\n")
    w("\nEvery point of run 1:\n")
    w("| NP | collective | size | fastest measured | picked | picked (us) | fastest (us) | "
      "within 10% |")
    w("|---:|---|---:|---|---|---:|---:|:---:|")
    for r in rows:
        w("| %d | %s | %s | %s | %s | %.1f | %.1f | %s |"
          % (r["np"], r["coll"], human(r["size"]), r["best"], r["pick"], r["t_pick"],
             r["t_best"], "yes" if r["ok"] else "**no**"))

    w("\n## Prediction error per algorithm\n")
    w("|prediction - measured| / measured over every NP and size of run 1, median and 90th "
      "percentile; *bias*: the median of (prediction - measured) / measured (negative: the "
      "model is optimistic).\n")
    w("| collective | variant | points | median error | p90 error | bias |")
    w("|---|---|---:|---:|---:|---:|")
    errs = {}
    for key, meas in first["meas"].items():
        coll = key.split("/")[1]
        for v, t in meas.items():
            for s, x in t.items():
                p = pred.get(key, {}).get(s, {}).get(v) if s != "0" else None
                if p and x > 0:
                    errs.setdefault((coll, v), []).append((p - x) / x)
    order = {c: i for i, c in enumerate(first["colls"])}
    for (coll, v), e in sorted(errs.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        ab = sorted(abs(x) for x in e)
        w("| %s | %s | %d | %.0f%% | %.0f%% | %+.0f%% |" % (
            coll, v, len(e), 100 * statistics.median(ab), 100 * ab[int(0.9 * (len(ab) - 1))],
            100 * statistics.median(e)))

    w("\n## Tree versus ring all-reduce: the crossover\n")
    w("The smallest size from which ring (128 KiB chunks) is faster than tree at every "
      "larger size swept, measured and as the model prices them.\n")
    w("| NP | measured | predicted |")
    w("|---:|---:|---:|")
    for key, meas in first["meas"].items():
        np_, coll = key.split("/")
        if coll != "allreduce" or "ring" not in meas or "tree" not in meas:
            continue
        p = pred.get(key, {})
        pr = {s: v["ring"] for s, v in p.items() if "ring" in v}
        pt = {s: v["tree"] for s, v in p.items() if "tree" in v}
        m, q = crossover(meas["ring"], meas["tree"]), crossover(pr, pt)
        w("| %s | %s | %s |" % (np_, human(m) if m else "never", human(q) if q else "never"))

    w("\n## Plots\n")
    w("Measured (points, solid) and predicted (dashed, same colour) time per variant; the "
      "stars are the selector's pick, at its measured time.\n")
    for key, meas in first["meas"].items():
        np_, coll = key.split("/")
        pick = {r_["size"]: r_["pick"] for r_ in rows if r_["np"] == int(np_) and
                r_["coll"] == coll}
        png = os.path.join(os.path.dirname(a.out), "results",
                           "algos%s-%s-np%s.png" % (tag, coll, np_))
        if plot(png, "%s, %s ranks over %s" % (coll, np_, a.transport), meas,
                pred.get(key, {}), {str(k): v for k, v in pick.items()}):
            w("![%s NP=%s](results/%s)\n" % (coll, np_, os.path.basename(png)))
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", a.out)
    for i, (run_, p) in enumerate(zip(runs, preds)):
        s = shares(evaluate(run_, p))
        print("run %d: %s" % (i + 1, ", ".join("%s %s" % (c, pct(v)) for c, v in s.items())))
        ce = ceiling(run_, a.stat)
        if ce:
            print("  ceiling: %s" % ", ".join("%s %s" % (c, pct(v)) for c, v in ce.items()))
        if base_preds:
            s = shares(evaluate(run_, base_preds[i]))
            print("  before: %s" % ", ".join("%s %s" % (c, pct(v)) for c, v in s.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--np", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--colls", nargs="+", default=DEFAULT_COLLS, choices=sorted(ALGOS))
    ap.add_argument("--max", default="16M")
    ap.add_argument("--budget", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--base-build", default=None)
    ap.add_argument("--base-name", default="", help="what to call the base build's model")
    ap.add_argument("--base-no-4m", action="store_true",
                    help="the base build's selector never tried 4 MiB chunks: price it at "
                         "128 KiB only")
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--save", default=None)
    ap.add_argument("--runs", nargs="+", default=None)
    ap.add_argument("--stat", default="min", choices=["min", "median"],
                    help="a point from its samples: the best (default) or the median")
    ap.add_argument("--calib", default=None,
                    help="with --runs: price with this file, not the runs' own calibration")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="calibration keys to override wherever a run is priced")
    ap.add_argument("--base-set", nargs="+", default=None, metavar="KEY=VALUE",
                    help="without --base-build: price the 'before' rows with this build and "
                         "these keys overridden too (e.g. a new term turned off)")
    a = ap.parse_args()
    parse_size(a.max)
    for kv in a.set + (a.base_set or []):
        if "=" not in kv:
            sys.exit("--set/--base-set: '%s' is not KEY=VALUE" % kv)
    a.build = os.path.abspath(a.build)
    a.tag = "" if a.transport == "shm" else "-" + a.transport
    if a.out is None:
        a.out = os.path.join(ROOT, "docs", "algorithms%s.md" % a.tag)
    resdir = os.path.join(os.path.dirname(os.path.abspath(a.out)), "results")
    os.makedirs(resdir, exist_ok=True)
    if a.save is None:
        a.save = os.path.join(resdir, "algos%s.json" % a.tag)
    if a.runs:
        runs = []
        for path in a.runs:
            with open(path) as f:
                runs.append(json.load(f))
            restat(runs[-1], a.stat)
            if runs[-1]["transport"] != a.transport:
                sys.exit("%s is a %s run, not %s" % (path, runs[-1]["transport"], a.transport))
    else:
        a.calib_out = os.path.join(resdir, "calib-%s.txt" % a.transport)
        a.calib = a.calib_out
        runs = [do_measure(a)]
        restat(runs[0], a.stat)
        a.calib = None
    a.calib_name = "calib-%s.txt" % a.transport
    with open(os.path.join(resdir, a.calib_name), "w") as f:
        f.write(runs[0]["calib"])  # the calibration run 1 was priced with, beside its report
    preds, base_preds = [], []
    if a.base_build and not a.base_name:
        a.base_name = os.path.basename(os.path.normpath(a.base_build))
    if a.base_set is not None and not a.base_build:
        a.base_build = a.build
        if not a.base_name:
            a.base_name = "this build with %s" % ", ".join("`%s`" % kv for kv in a.base_set)
    with tempfile.TemporaryDirectory() as d:
        for i, run_ in enumerate(runs):
            cf = calib_file(run_, a.calib, d, a.set)
            preds.append(predict_run(a.build, run_, cf))
            if a.base_build:
                bf = calib_file(run_, a.calib, d, a.set + (a.base_set or []), "base.txt")
                base_preds.append(predict_run(os.path.abspath(a.base_build), run_, bf,
                                              whole=not a.base_no_4m))
    write_report(a, runs, preds, base_preds)


if __name__ == "__main__":
    main()
