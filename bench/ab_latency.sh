#!/usr/bin/env bash
# bench/ab_latency.sh BASE_BUILD [NP ...] - 8 B all-reduce latency of an earlier build against
# this one (BUILD, default build), and this one in checking mode (COLL_CHECK=1), interleaved
# REPS times per NP, blocking calls (-z 1) and non-blocking ones (-z 0); prints the median
# time per call (us) and the ratios to the earlier build.
#
#   git worktree add /tmp/base 0030de0 && meson setup /tmp/base/b /tmp/base && \
#       ninja -C /tmp/base/b collbench collrun
#   bench/ab_latency.sh /tmp/base/b 2 4 8
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base=$1
shift
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
build=${BUILD:-build}
REPS=${REPS:-5}
ITERS=${ITERS:-5000}
tsv=${OUT:-docs/results/ab-latency.tsv}
mkdir -p "$(dirname "$tsv")"
echo -e "np\tz\tbuild\ttime_us" >"$tsv"
one() { # BUILD_DIR NP Z [env...]: the time column of one 8 B row
    local b=$1 np=$2 z=$3
    shift 3
    env "$@" "$b/collrun" -n "$np" "$b/collbench" allreduce -b 8 -e 8 -z "$z" -c 0 \
        -n "$ITERS" -w 500 2>/dev/null | awk '/^ +8 / { print $6 }'
}
for np in "${nps[@]}"; do
    for rep in $(seq "$REPS"); do
        for z in 1 0; do
            echo -e "$np\t$z\tbase\t$(one "$base" "$np" "$z")" >>"$tsv"
            echo -e "$np\t$z\tnew\t$(one "$build" "$np" "$z")" >>"$tsv"
            echo -e "$np\t$z\tcheck\t$(one "$build" "$np" "$z" COLL_CHECK=1)" >>"$tsv"
        done
    done
done
python3 - "$tsv" <<'PY'
import sys, statistics, collections
v = collections.defaultdict(list)
for l in open(sys.argv[1]).read().splitlines()[1:]:
    np, z, b, t = l.split('\t')
    if t:
        v[(int(np), int(z), b)].append(float(t))
print("np  form          base(us)  new(us)  new/base  check(us)  check/base")
for np, z in sorted({(k[0], k[1]) for k in v}, key=lambda x: (x[0], -x[1])):
    m = {b: statistics.median(v[(np, z, b)]) for b in ('base', 'new', 'check') if v[(np, z, b)]}
    form = 'blocking' if z == 1 else 'non-blocking'
    print(f"{np:<3} {form:<12} {m['base']:>9.2f} {m['new']:>8.2f} {m['new']/m['base']:>9.2f}"
          f" {m['check']:>10.2f} {m['check']/m['base']:>11.2f}")
PY
