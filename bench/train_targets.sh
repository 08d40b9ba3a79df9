#!/usr/bin/env bash
# train_targets.sh - the Fashion-MNIST runs behind docs/training.md's quantization and
# Streaming DiLoCo targets: fp32 DDP, int8 and int4 gradients with error feedback, and
# Streaming DiLoCo (overlapped, mixed, 4-bit outer gradients), same ranks and epochs.
#
#   bench/train_targets.sh [BUILD [OUT]]     (defaults: build, docs/results/train)
#
# Environment: NP (ranks, default 4), EPOCHS (default 3), PAR (runs at once, default 2),
# EXTRA (more dptrain flags for every run, e.g. "--synthetic 2000 --sizes 32,16,10").
# Each run writes OUT/NAME.log and, through --plot, OUT/NAME-{accuracy,bytes,time}.png.
# CPU heavy: about NP x EPOCHS x 8 CPU seconds per run.
set -eu

BUILD=${1:-build}
OUT=${2:-docs/results/train}
NP=${NP:-4}
EPOCHS=${EPOCHS:-3}
PAR=${PAR:-2}
mkdir -p "$OUT"
export COLL_TIMEOUT_MS=${COLL_TIMEOUT_MS:-300000}

# shellcheck disable=SC2086
run() {
    local name=$1
    shift
    "$BUILD/collrun" -n "$NP" "$BUILD/dptrain" --epochs "$EPOCHS" --cosine --eval-every 100 \
        --plot "$OUT/$name" ${EXTRA:-} "$@" >"$OUT/$name.log" 2>&1 || echo "$name failed" >&2
}

jobs_=0
for spec in "ddp-fp32|" "ddp-int8|--quant int8" "ddp-int4|--quant int4" \
    "sdiloco-e3m0|--optim adamw --diloco 20 --fragments 3 --overlap 2 --mix 0.5 --quant e3m0"; do
    name=${spec%%|*}
    args=${spec#*|}
    # shellcheck disable=SC2086
    run "$name" $args &
    jobs_=$((jobs_ + 1))
    if [ "$jobs_" -ge "$PAR" ]; then
        wait -n
        jobs_=$((jobs_ - 1))
    fi
done
wait

printf '%-14s %9s %14s %s\n' run accuracy "MB sent (r0)" "s/epoch"
for f in "$OUT"/*.log; do
    name=$(basename "$f" .log)
    acc=$(awk '/final test accuracy/ { print $NF }' "$f")
    mb=$(awk '/bytes sent by rank 0/ { print $(NF-2) }' "$f")
    ep=$(awk '/s per epoch/ { print $2 }' "$f")
    printf '%-14s %9s %14s %s\n' "$name" "$acc" "$mb" "$ep"
done

# Every run on one plot: test accuracy against the bytes rank 0 has sent (log scale).
if command -v gnuplot >/dev/null; then
    plots=""
    for f in "$OUT"/*-eval.dat; do
        name=$(basename "$f" -eval.dat)
        plots="$plots${plots:+, }'$f' using (\$3/1e6):2 with linespoints title '$name'"
    done
    gnuplot <<GP
set terminal pngcairo size 900,520 noenhanced
set output '$OUT/accuracy-vs-bytes.png'
set title 'Fashion-MNIST, $NP ranks, $EPOCHS epochs: test accuracy vs MB sent by rank 0'
set logscale x
set xlabel 'MB sent by rank 0 (coll_comm_bytes_sent)'
set ylabel 'test accuracy'
set key bottom right
set grid
plot $plots
GP
    echo "wrote $OUT/accuracy-vs-bytes.png"
fi
