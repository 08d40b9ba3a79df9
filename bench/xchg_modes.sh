#!/usr/bin/env bash
# bench/xchg_modes.sh - why one size of one collective on the emulated hosts is two
# different calls: times every call as bench/simval.sh does (a warm-up, the start barrier,
# one timed call, collbench -w 1 -n 1 -a 4), with COLL_TRACE on, and reads from the ranks'
# traces when each rank entered the timed call. It prints the calls' spans (last start to
# last end) grouped by how far apart the ranks started, which is what splits them.
#
#   RATE=10gbit HOSTS=2 COLL=allreduce ALGO=rd SIZE=32K CYCLES=1000 bench/xchg_modes.sh [BUILD] [OUT]
#
# ALGO (COLL_ALGO for COLL, default the selector's) and SIZE as collbench takes them. OUT
# (default docs/results) gets xchg-modes-RATE-HOSTS-COLL-SIZE[-TAG].txt. Needs root (the bed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-docs/results}
rate=${RATE:-10gbit}
hosts=${HOSTS:-2}
coll=${COLL:-allreduce}
size=${SIZE:-32K}
cycles=${CYCLES:-1000}
bed=bench/netns_hosts.sh
for p in "$build/collrun" "$build/collbench"; do
    [ -x "$p" ] || { echo "xchg_modes.sh: no $p (build first)" >&2; exit 2; }
done
why=$($bed check) || { echo "xchg_modes.sh: the bed cannot run here: $why" >&2; exit 2; }
algo=()
[ -n "${ALGO:-}" ] && algo=(--algo "$coll=$ALGO")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
report=$out/xchg-modes-$rate-$hosts-$coll-$size${TAG:+-$TAG}.txt
COLL_TRACE="$tmp/trace.%r.json" flock /tmp/coll-netns.lock $bed run "$hosts" 1 -r "$rate" \
    -c "$build/collrun" -- "$build/collbench" "$coll" -b "$size" -e "$size" -w 1 -n 1 -c 0 \
    -N "$cycles" -a 4 --outofplace-only "${algo[@]}" >/dev/null
bytes=$(numfmt --from=iec "${size%B}")
python3 - "$tmp" "$hosts" "$coll" "$bytes" "$rate" "${NETNS_CC:-cubic}" <<'EOF' | tee "$report"
import json, statistics, sys
tmp, hosts, coll, size, rate, cc = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), \
    *sys.argv[5:]
SIZES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4,
         "uint32": 4, "double": 8, "int64": 8, "uint64": 8}

def load(path):
    text = open(path).read().rstrip().rstrip(",")
    return json.loads(text if text.endswith("]") else text + "]")

def timed_calls(events):
    """the timed calls: each follows the start barrier (an all-reduce of one int32) and moves
    size bytes (collbench's own all-reduces, of its times, do not)"""
    calls = [e for e in events if e.get("cat") == "coll"]
    out = []
    for prev, e in zip(calls, calls[1:]):
        p0, e0 = prev["args"]["parts"][0], e["args"]["parts"][0]
        if (p0["coll"] == "allreduce" and p0["count"] == 1 and e0["coll"] == coll and
                e0["count"] * SIZES.get(e0["dtype"], 1) == size):
            out.append((e["ts"], e["ts"] + e["dur"], e["name"]))
    return out

ranks = [timed_calls(load("%s/trace.%d.json" % (tmp, r))) for r in range(hosts)]
n = min(len(r) for r in ranks)
rows = []
for i in range(n):
    starts = [r[i][0] for r in ranks]
    ends = [r[i][1] for r in ranks]
    rows.append((max(ends) - max(starts), max(starts) - min(starts)))
spans = sorted(s for s, _ in rows)
fast = spans[len(spans) // 10]
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
if not n:
    sys.exit("xchg_modes.sh: no timed %s of %d B in the traces" % (coll, size))
print("%s, %d B, %d hosts at %s (%s): %d timed calls (%s), each after a warm-up and the "
      "start barrier" % (coll, size, hosts, rate, cc, n, ranks[0][0][2]))
print("span (last start to last end), us: p10 %.1f, p25 %.1f, median %.1f, p75 %.1f, p90 %.1f"
      % tuple(q(spans, f) for f in (0.1, 0.25, 0.5, 0.75, 0.9)))
print("slow: a span over 1.6 x the p10 (%.1f us)" % (1.6 * fast))
print("| ranks started within (us) | calls | span median (us) | slow |")
print("|---|---:|---:|---:|")
for lo, hi in ((0, 5), (5, 10), (10, 20), (20, 40), (40, 80), (80, float("inf"))):
    v = [s for s, k in rows if lo <= k < hi]
    if v:
        print("| %g-%s | %d | %.1f | %d%% |" % (lo, "" if hi == float("inf") else "%g" % hi,
                                              len(v), statistics.median(v),
                                              100 * sum(s > 1.6 * fast for s in v) // len(v)))
EOF
