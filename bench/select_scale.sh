#!/usr/bin/env bash
# bench/select_scale.sh [BUILD] [OUT] - what a selector's decision costs as n grows: the
# closed forms (COLL_SELECT=cost, what a running rank calls at the first call of a size)
# against the schedule walker (COLL_SELECT=exact, --explain --exact), timed inside
# `collbench --explain --np N --per-host 8` around each coll__ix_choose (the selector a
# rank calls), with the process's peak RSS (/usr/bin/time). Writes OUT/select-scale.tsv
# (default docs/results) and, with gnuplot, OUT/select-scale.png.
#
#   SEL_SIZES   collbench's size flags (default "-b 8 -e 16M -f 4": 11 sizes)
#   SEL_NS      rank counts (default 2 4 8 ... 4096, and 100000 for the closed forms)
#   SEL_EXACT_MAXN  the walker's largest n (default 64: 256 ranks are minutes a size)
#
# Timings: run under flock /tmp/coll-bench.lock on a shared machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-docs/results}
sizes=${SEL_SIZES:--b 8 -e 16M -f 4}
ns=${SEL_NS:-2 4 8 16 32 64 128 256 512 1024 2048 4096 100000}
exact_max=${SEL_EXACT_MAXN:-64}
bench="$build/collbench"
[ -x "$bench" ] || { echo "select_scale.sh: no $bench" >&2; exit 2; }
mkdir -p "$out"
tsv="$out/select-scale.tsv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf 'n\tmode\tdecisions\tmean_us\tmax_us\twall_s\tmaxrss_kB\n' >"$tsv"
for n in $ns; do
    for mode in closed exact; do
        extra=()
        if [ "$mode" = exact ]; then
            [ "$n" -le "$exact_max" ] || continue
            extra=(--exact)
        fi
        # shellcheck disable=SC2086 # sizes are flags
        /usr/bin/time -f '%e %M' -o "$tmp/time" env -u COLL_SELECT -u COLL_ALGO \
            "$bench" allreduce --explain "${extra[@]}" --np "$n" --per-host 8 $sizes \
            >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
        read -r wall rss <"$tmp/time"
        line=$(grep '^# selector:' "$tmp/out")
        # "# selector: D decisions, M us each on average, X us at most"
        d=$(awk '{print $3}' <<<"$line")
        mean=$(awk '{print $5}' <<<"$line")
        max=$(awk '{print $10}' <<<"$line")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$mode" "$d" "$mean" "$max" "$wall" "$rss" |
            tee -a "$tsv"
    done
done

if command -v gnuplot >/dev/null; then
    awk -F'\t' 'NR > 1 && $2 == "closed" { print $1, $4, $5, $7 }' "$tsv" >"$tmp/closed"
    awk -F'\t' 'NR > 1 && $2 == "exact" { print $1, $4, $5, $7 }' "$tsv" >"$tmp/exact"
    gnuplot <<EOF
set terminal pngcairo size 900,420 font ",10" noenhanced
set output "$out/select-scale.png"
set multiplot layout 1,2 title "all-reduce selection at the first call of a size, 8 ranks per host"
set logscale xy
set xlabel "ranks"
set ylabel "time per decision (us)"
set key top left
set grid
plot "$tmp/closed" using 1:2 with linespoints title "closed forms (mean)", \
     "$tmp/closed" using 1:3 with linespoints dt 2 title "closed forms (max)", \
     "$tmp/exact" using 1:2 with linespoints title "schedule walker (mean)", \
     "$tmp/exact" using 1:3 with linespoints dt 2 title "schedule walker (max)"
set ylabel "collbench --explain peak RSS (MB)"
plot "$tmp/closed" using 1:(\$4/1024) with linespoints title "closed forms", \
     "$tmp/exact" using 1:(\$4/1024) with linespoints title "schedule walker"
unset multiplot
EOF
    echo "wrote $out/select-scale.png"
fi
