#!/usr/bin/env bash
# bench/sweep.sh [NP] [COLL] - a collbench sweep over NP local ranks (default 4) of COLL
# (default allreduce), 8 B to 64 MiB, results verified; prints nccl-tests' table and writes
# the table and a plot (busbw and time vs size, log axes) under docs/results/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
np=${1:-4}
coll=${2:-allreduce}
out=${OUT:-docs/results}
mkdir -p "$out"
txt="$out/sweep-$coll-np$np.txt"
build/collrun -n "$np" build/collbench "$coll" -b 8 -e 64M -f 2 -c 1 --time-budget 0.2 | tee "$txt"
if command -v gnuplot >/dev/null; then
    data=$(mktemp)
    awk '$1 ~ /^[0-9]+$/ { print $1, $6, $8 }' "$txt" >"$data"
    gnuplot <<GP
set terminal pngcairo size 900,420 noenhanced
set output "$out/sweep-$coll-np$np.png"
set multiplot layout 1,2 title "coll $coll, $np ranks, $(hostname)"
set logscale x 2
set xlabel "bytes"
set grid
set ylabel "busbw (GB/s)"
plot "$data" using 1:3 with linespoints title "busbw"
set logscale y 10
set ylabel "time (us)"
plot "$data" using 1:2 with linespoints title "time"
unset multiplot
GP
    rm -f "$data"
    echo "plot: $out/sweep-$coll-np$np.png"
fi
