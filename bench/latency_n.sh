#!/usr/bin/env bash
# latency_n.sh - small-message latency of all-reduce and broadcast against the number of
# ranks, with the tree and the ring algorithms forced (COLL_ALGO through collbench --algo;
# for broadcast the ring's counterpart is the pipelined chain), what coll's cost model
# predicts for the same points, and dptrain's step time on a small model with each; bench/latency_n.py then fits
# a + b log2(n) and a + b n to every curve and plots them.
#
#   bench/latency_n.sh [BUILD_DIR [OUT_DIR]]      (defaults: build, docs/results/latency_n)
#
# Environment: NLIST (ranks, default "2 3 4 5 6 7 8 10 12 14 16"), ITERS (timed calls per
# size, default 100), CYCLES (sweeps per point, the fastest kept, default 5), TRAIN_NLIST
# (default "2 4 8 16"), TRAIN_STEPS (default 150).
#
# Caveat, printed with the results: this machine has 2 cores; above 2 ranks they time-slice,
# so every extra rank adds scheduling delay on top of the algorithm's own latency. The
# spin-then-sleep waits keep that small, but the fits describe this machine, not a cluster
# with a core per rank.
set -eu

BUILD=${1:-build}
OUT=${2:-docs/results/latency_n}
NLIST=${NLIST:-"2 3 4 5 6 7 8 10 12 14 16"}
ITERS=${ITERS:-100}
CYCLES=${CYCLES:-5}
TRAIN_NLIST=${TRAIN_NLIST:-"2 4 8 16"}
TRAIN_STEPS=${TRAIN_STEPS:-150}
HERE=$(cd "$(dirname "$0")" && pwd)

for exe in collbench collrun dptrain; do
    if [ ! -x "$BUILD/$exe" ]; then
        echo "latency_n.sh: $BUILD/$exe not found: build first" \
            "(meson setup $BUILD && ninja -C $BUILD)" >&2
        exit 1
    fi
done
mkdir -p "$OUT"
export COLL_TIMEOUT_MS=${COLL_TIMEOUT_MS:-120000}

# 1. Collectives: 8 B .. 4 KiB, out of place, results unchecked (-c 0) so only the calls
# are timed; the time is the mean over ranks of each rank's mean per call. The sweep runs
# CYCLES times and latency_n.py keeps the fastest cycle of each point: other work on the
# machine only ever adds time, so the minimum is the estimate least disturbed by it.
csv="$OUT/collectives.csv"
rm -f "$csv"
# The ring's broadcast is the pipelined chain (root to rank 1 to rank 2 ...): "chain".
for coll in allreduce broadcast; do
    linear=ring
    [ "$coll" = broadcast ] && linear=chain
    for algo in tree "$linear"; do
        for n in $NLIST; do
            tmp="$OUT/.run.csv"
            "$BUILD/collbench" "$coll" --np "$n" --algo "$algo" -b 8 -e 4K -f 8 \
                -n "$ITERS" -w 5 -c 0 -a 1 -N "$CYCLES" --outofplace-only --csv "$tmp" >/dev/null
            if [ ! -s "$csv" ]; then
                grep -v '^#' "$tmp" | head -n 1 >"$csv"
            fi
            grep -v '^#' "$tmp" | tail -n +2 >>"$csv"
            echo "$coll $algo n=$n done" >&2
        done
    done
done
rm -f "$OUT/.run.csv"

# 1b. What coll's cost model (alpha-beta per message, as collbench --explain prices each
# schedule) predicts for the same points: the shape the algorithms have where every rank
# has its own core.
model="$OUT/model.csv"
echo "collective,algo,nranks,size_bytes,est_us" >"$model"
for coll in allreduce broadcast; do
    linear=ring
    [ "$coll" = broadcast ] && linear=chain
    for n in $NLIST; do
        "$BUILD/collbench" "$coll" --explain --np "$n" -b 8 -e 4K -f 8 |
            awk -v c="$coll" -v n="$n" -v t=tree -v l="$linear" '
                /^ *[0-9]/ {
                    for (i = 1; i <= NF; i++) {
                        if ($i == t || $i == l) {
                            split($(i + 1), e, "/")
                            printf "%s,%s,%d,%d,%s\n", c, $i, n, $1, e[1]
                        }
                    }
                }' >>"$model"
    done
done

# 2. dptrain's step time on a small model (784-32-10, 25,450 parameters, one 100 KB
# bucket) on synthetic data: the all-reduce is latency-bound, so the algorithm shows.
train="$OUT/train.tsv"
printf 'algo\tnranks\tstep_ms\tcompute_ms\tcomm_ms\twait_ms\n' >"$train"
for algo in tree ring; do
    for n in $TRAIN_NLIST; do
        line=$(COLL_ALGO=allreduce=$algo "$BUILD/collrun" -n "$n" "$BUILD/dptrain" \
            --synthetic 8192 --sizes 784,32,10 --batch 128 --steps "$TRAIN_STEPS" \
            --eval-every 100000 | grep '^summary: .* per step')
        # "summary: S steps in T s; per step: compute A ms, communication B ms (...), waiting C ms"
        echo "$line" | awk -v a="$algo" -v n="$n" '{
            for (i = 1; i <= NF; i++) {
                if ($i == "compute") c = $(i + 1)
                if ($i == "communication") m = $(i + 1)
                if ($i == "waiting") w = $(i + 1)
            }
            printf "%s\t%d\t%.4f\t%s\t%s\t%s\n", a, n, c + m + w, c, m, w }' >>"$train"
        echo "dptrain $algo n=$n done" >&2
    done
done

/usr/bin/python3 "$HERE/latency_n.py" "$OUT"
echo "caveat: $(nproc) cores on this machine; above $(nproc) ranks they time-slice," \
    "which adds to every curve"
