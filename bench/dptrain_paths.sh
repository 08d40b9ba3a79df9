#!/usr/bin/env bash
# bench/dptrain_paths.sh BASE_BUILD [NP ...] - dptrain's DDP step (gradient buckets all-reduced
# by non-blocking calls, overlapped with the backward pass) on an earlier build against this
# one (BUILD, default build), interleaved REPS times per NP, same data, seed and steps.
# Prints the median per-step compute, communication (inside coll calls), wait (coll_wait)
# and their sum, and new/base of the sum.
#
#   git worktree add /tmp/old 0030de0 && meson setup /tmp/old/b /tmp/old && \
#       ninja -C /tmp/old/b dptrain collrun
#   bench/dptrain_paths.sh /tmp/old/b 2 4
#
# Environment: REPS (default 3), STEPS (default 150), BUCKET_MB (default 0.25: several
# buckets a step, so that calls overlap), OUT (the raw rows, default
# docs/results/dptrain-paths.tsv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base=$1
shift
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4)
build=${BUILD:-build}
REPS=${REPS:-3}
STEPS=${STEPS:-150}
BUCKET_MB=${BUCKET_MB:-0.25}
tsv=${OUT:-docs/results/dptrain-paths.tsv}
mkdir -p "$(dirname "$tsv")"
echo -e "np\tbuild\tcompute_ms\tcomm_ms\twait_ms\tstep_ms" >"$tsv"
one() { # BUILD_DIR NP: the per-step means of one run, tab-separated
    "$1/collrun" -n "$2" "$1/dptrain" --steps "$STEPS" --bucket-mb "$BUCKET_MB" --seed 7 \
        2>/dev/null | awk '/^summary: .*per step/ {
            for (i = 1; i <= NF; i++) {
                if ($i == "compute") c = $(i + 1)
                if ($i == "communication") m = $(i + 1)
                if ($i == "waiting") w = $(i + 1)
            }
            printf "%s\t%s\t%s\t%.3f\n", c, m, w, c + m + w }'
}
for np in "${nps[@]}"; do
    for rep in $(seq "$REPS"); do
        echo -e "$np\tbase\t$(one "$base" "$np")" >>"$tsv"
        echo -e "$np\tnew\t$(one "$build" "$np")" >>"$tsv"
    done
done
python3 - "$tsv" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]).read().splitlines()[1:]:
    f = l.split('\t')
    if len(f) == 6 and f[5]:
        rows[(int(f[0]), f[1])].append([float(x) for x in f[2:]])
print(f"{'np':<3} {'build':<5} {'compute':>8} {'comm':>8} {'wait':>8} {'step(ms)':>9} {'new/base':>9}")
for np in sorted({k[0] for k in rows}):
    med = {}
    for b in ('base', 'new'):
        if rows.get((np, b)):
            med[b] = [statistics.median(c) for c in zip(*rows[(np, b)])]
    for b in ('base', 'new'):
        if b in med:
            m = med[b]
            ratio = f"{m[3] / med['base'][3]:9.2f}" if b == 'new' and 'base' in med else ''
            print(f"{np:<3} {b:<5} {m[0]:8.2f} {m[1]:8.2f} {m[2]:8.2f} {m[3]:9.2f} {ratio}")
PY
