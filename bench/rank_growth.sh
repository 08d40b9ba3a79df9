#!/usr/bin/env bash
# bench/rank_growth.sh [BUILD] [OUT] - per-rank memory and set-up time of a comm as n grows:
# collrun -n N rank_growth for N in RG_NS (default 2 4 8 16 32 64 128), each REPS (default
# 2) times, one line per run into OUT/rank-growth.tsv (default docs/results), and a plot
# (OUT/rank-growth.png, gnuplot). All N ranks run on this machine (time-sliced when they
# outnumber the cores: the times measure this machine as much as coll), so run it under
# flock /tmp/coll-bench.lock. Columns: see bench/rank_growth.c.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-docs/results}
ns=${RG_NS:-2 4 8 16 32 64 128}
reps=${RG_REPS:-2}
[ -x "$build/rank_growth" ] || { echo "rank_growth.sh: no $build/rank_growth" >&2; exit 2; }
mkdir -p "$out"
tsv="$out/rank-growth.tsv"
# RG_PLOT_ONLY=1: redraw the plot from the existing table
[ "${RG_PLOT_ONLY:-0}" = 1 ] && ns=""
[ -n "$ns" ] && printf 'n\tinit_med_ms\tinit_max_ms\tfirst8_med_us\tfirst1m_med_us\trss_init_med_kB\thwm_med_kB\thwm_max_kB\tgrow_init_med_kB\tgrow_calls_med_kB\n' >"$tsv"
for n in $ns; do
    for ((i = 0; i < reps; i++)); do
        line=$(env -u COLL_ALGO -u COLL_SELECT "$build/collrun" -n "$n" --timeout 600 \
            "$build/rank_growth")
        tr ' ' '\t' <<<"$line" | tee -a "$tsv"
    done
done
if command -v gnuplot >/dev/null; then
    gnuplot <<EOG
set terminal pngcairo size 900,420 font ",10" noenhanced
set output "$out/rank-growth.png"
set multiplot layout 1,2 title "one rank of an n-rank comm on this 2-core machine (collrun -n n)"
set logscale x 2
set xlabel "ranks"
set key top left
set grid
set ylabel "MB per rank"
plot "$tsv" using 1:(\$6/1024) skip 1 with points title "VmRSS after init (median)", \
     "$tsv" using 1:(\$7/1024) skip 1 with points title "VmHWM after the first calls (median)", \
     "$tsv" using 1:(\$9/1024) skip 1 with points title "init's growth (median)"
set ylabel "ms"
set logscale y
plot "$tsv" using 1:2 skip 1 with points title "coll_comm_init_env (median)", \
     "$tsv" using 1:(\$4/1000) skip 1 with points title "first 8 B all-reduce (median)", \
     "$tsv" using 1:(\$5/1000) skip 1 with points title "first 1 MiB all-reduce (median)"
unset multiplot
EOG
    echo "wrote $out/rank-growth.png"
fi
