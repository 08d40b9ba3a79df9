#!/bin/sh
# reduce.sh - the reduction-kernel benchmark: builds reduce_bench, runs it against the
# machine's c = a + b streaming ceiling and memcpy, writes the table and the plot.
#
#   bench/reduce.sh [BUILD_DIR] [reduce_bench options]
#   bench/reduce.sh --plot TSV      (only the summary and the plot, from an earlier table)
#
# BUILD_DIR defaults to build (configured with meson if it does not exist). Options go to
# reduce_bench (default: -r 5, all ISAs and dtypes, 64 KiB to 256 MiB). Writes
#   docs/results/reduce_kernels.tsv  one row per kernel x ISA x dtype x size (median GB/s)
#   docs/results/reduce_kernels.png  GB/s against size: each dtype on the best ISA, and
#                                    fp32 sum on every ISA, beside the ceiling and memcpy
# Needs gnuplot (Debian: gnuplot-nox) for the plot; the table is written without it.
# Run it on an idle machine: the numbers move with anything else that uses memory.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/docs/results
tsv=$out/reduce_kernels.tsv
png=$out/reduce_kernels.png
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "${1:-}" = --plot ]; then
    tsv=${2:?usage: reduce.sh --plot TSV}
    png=${tsv%.tsv}.png
else
    build=${1:-build}
    [ $# -gt 0 ] && shift
    case $build in /*) ;; *) build=$here/$build ;; esac
    if [ ! -d "$build" ]; then
        meson setup "$build" "$here"
    fi
    ninja -C "$build" reduce_bench
    mkdir -p "$out"
    if [ $# -eq 0 ]; then
        set -- -r 5
    fi
    "$build/reduce_bench" "$@" > "$tmp/all.tsv"
    {
        printf '# %s, %s, %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
            "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')" \
            "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) after the run"
        cat "$tmp/all.tsv"
    } > "$tsv"
    echo "wrote $tsv"
fi

# Summary: each kernel at the largest size, as a fraction of the ceiling.
awk -F'\t' '!/^#/ && $1 != "kernel" { if ($5 + 0 > max) max = $5 + 0; row[NR] = $0 }
    END { for (i in row) { split(row[i], f, "\t"); if (f[5] + 0 == max) print row[i] } }' \
    "$tsv" | sort | awk -F'\t' 'BEGIN { print "largest size: kernel isa dtype op GB/s of_ceil" }
    { printf "  %-16s %-7s %-9s %-4s %6s %5s\n", $1, $2, $3, $4, $6, $9 }'

if ! command -v gnuplot > /dev/null 2>&1; then
    echo "gnuplot not found (apt-get install gnuplot-nox): no plot" >&2
    exit 0
fi

# One data file per series: bytes, median GB/s.
best=$(sed -n 's/.*default ISA \([a-z0-9]*\).*/\1/p' "$tsv" | head -n 1)
series() { # kernel isa dtype op -> file
    awk -F'\t' -v k="$1" -v i="$2" -v d="$3" -v o="$4" \
        '$1 == k && $2 == i && $3 == d && $4 == o { print $5, $6 }' "$tsv" > "$tmp/$5"
}
series ceil - - - ceil
series memcpy - - - memcpy
left=""
right=""
for d in $(awk -F'\t' -v b="$best" '$1 == "reduce" && $2 == b && $4 == "sum" { print $3 }' "$tsv" |
    awk '!seen[$0]++'); do
    series reduce "$best" "$d" sum "b_$d"
    left="$left, '$tmp/b_$d' using 1:2 with linespoints title '$d sum'"
done
series reduce "$best" float max b_fmax
left="$left, '$tmp/b_fmax' using 1:2 with linespoints dashtype 2 title 'float max'"
for i in $(awk -F'\t' '$1 == "reduce" { print $2 }' "$tsv" | awk '!seen[$0]++'); do
    series reduce "$i" float sum "i_$i"
    right="$right, '$tmp/i_$i' using 1:2 with linespoints title '$i'"
done
series reduce_nostream "$best" float sum nostream
series reduce2 "$best" float sum fused2
series reduce_n4 "$best" float sum n4
right="$right, '$tmp/nostream' using 1:2 with linespoints dashtype 2 title '$best, no streaming stores'"
right="$right, '$tmp/fused2' using 1:2 with linespoints dashtype 3 title '$best, 2 outputs'"
right="$right, '$tmp/n4' using 1:2 with linespoints dashtype 4 title '$best, 4 inputs'"

gnuplot <<EOF
set terminal pngcairo size 1600,650 font ",10"
set output '$png'
set multiplot layout 1,2
set logscale x 2
set format x "%.0b%B"
set xlabel "buffer size (bytes of each of a, b, c)"
set ylabel "GB/s of output (1 GB = 1e9 B)"
set key outside right top
set grid
set yrange [0:*]
set title "each dtype, sum, $best (the default here)"
plot '$tmp/ceil' using 1:2 with lines lw 3 lc rgb "black" title 'c = a + b ceiling', \
     '$tmp/memcpy' using 1:2 with lines lw 2 lc rgb "gray" title 'memcpy' $left
set title "fp32 sum on every ISA"
plot '$tmp/ceil' using 1:2 with lines lw 3 lc rgb "black" title 'c = a + b ceiling', \
     '$tmp/memcpy' using 1:2 with lines lw 2 lc rgb "gray" title 'memcpy' $right
unset multiplot
EOF
echo "wrote $png"
