#!/usr/bin/env bash
# test_cuda_rc_bench.sh - bench/cuda_rc_bench.c against the CUDA runtime emulation
# (tests/fakecudart): it checks the kernels, measures at tiny sizes and prints the rows and
# summaries it should, with bandwidth counted as bytes read + written; a wrong kernel result
# (COLL_FAKECUDA_CORRUPT_RC) fails it naming the case and the element; bad arguments,
# no runtime, no device and COLL_CUDA_DISABLE are refused with their exit statuses. Every
# run is strict (an illegal CUDA call aborts) and checks for leaks (device or pinned memory
# still allocated at exit aborts), on the error paths too. The emulator's times mean
# nothing. TAP.
#
#   tests/test_cuda_rc_bench.sh CUDA_RC_BENCH FAKECUDART
# shellcheck disable=SC2016
set -u

USAGE="usage: test_cuda_rc_bench.sh CUDA_RC_BENCH FAKECUDART"
BENCH=${1:?$USAGE}
FAKECUDART=${2:?$USAGE}
export COLL_CUDA_LIBRARY=$FAKECUDART COLL_FAKECUDA_STRICT=1 COLL_FAKECUDA_CHECK_LEAKS=1
unset COLL_CUDA_DISABLE COLL_FAKECUDA_CORRUPT_RC COLL_FAKECUDA_DEVICES

TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_cuda_rc_bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1))
    failed=$((failed + 1))
    echo "not ok $n - $1"
    echo "# exit status $rc"
    for f in "$TMP"/out "$TMP"/err; do
        [ -s "$f" ] && sed 's/^/#   /' "$f" | tail -n 15
    done
}
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}
bench() {
    timeout -k 5 60 "$BENCH" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
# data rows: every line but the comments and the header
rows() { grep -v '^#' "$TMP/out" | grep -vc '^kernel	'; }
# every row: 12 fields, kernel copy or reduce_copy, counts and bytes whole, times positive,
# rates at least 0.00 (see rate()), gbps = (nsrcs + ndsts) bytes / time (copy: 2 bytes),
# min <= median <= max, ratio = gbps / copy_gbps (1 for copy rows); rounding of the printed digits allowed.
rows_sound() {
    awk -F '\t' '
        /^#/ || $1 == "kernel" { next }
        function num(v) { return v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0 }
        # a rate printed with two decimals reads 0.00 when a call took milliseconds (the
        # emulated runtime on a loaded machine): below the printed precision, not wrong
        function rate(v) { return v ~ /^[0-9]+\.[0-9]+$/ }
        function near(a, b) { d = a - b; if (d < 0) d = -d; return d <= 0.006 + 0.01 * b }
        {
            if (NF != 12 || ($1 != "copy" && $1 != "reduce_copy")) { bad++; next }
            for (i = 4; i <= 7; i++) if (!num($i)) bad++
            for (i = 8; i <= 11; i++) if (!rate($i)) bad++
            if (!num($12)) bad++
            traffic = ($1 == "copy" ? 2 : $4 + $5) * $6
            if (!near($8, traffic / ($7 * 1000))) bad++
            if (!($9 <= $8 && $8 <= $10)) bad++
            d = $12 * $11 - $8; if (d < 0) d = -d
            if (d > 0.006 + 0.006 * $12 + 0.001 * $11) bad++
            if ($1 == "copy" && $12 != "1.000") bad++
        }
        END { exit bad ? 1 : 0 }' "$TMP/out"
}

if [ ! -x "$BENCH" ] || [ ! -r "$FAKECUDART" ]; then
    echo "1..0 # SKIP no cuda_rc_bench or emulated CUDA runtime"
    exit 0
fi
bench -b 4K -e 4K -r 1 -n 1 -w 0 -d float -k 2
if [ "$rc" = 1 ] && grep -q "built without CUDA kernels" "$TMP/err"; then
    echo "1..0 # SKIP coll was built without the CUDA kernels (no nvcc)"
    exit 0
fi

# ---------------------------------------------------------------------------------------
# Four dtypes (1, 2, 4 and 8 bytes), 2 and 3 inputs, 4 KiB to 64 KiB: 3 sizes x (a copy +
# 4 x 2 reduce-copies) = 27 rows, and a summary per dtype (no size reaches 64 MiB).
bench -b 4K -e 64K -r 2 -n 2 -w 1 -d f8e4m3,half,float,int64 -k 2,3
check "4 dtypes, k 2 and 3, 3 sizes: exit 0, 27 rows, each sound" \
    eval '[ "$rc" = 0 ] && [ "$(rows)" = 27 ] && rows_sound'
header=$(printf '%s\t' kernel dtype op nsrcs ndsts bytes time_us gbps gbps_min gbps_max copy_gbps)
header=${header}ratio
check "the header names the columns; the first line says 8 cases were checked" \
    eval 'grep -qx "$header" "$TMP/out" &&
          head -n 1 "$TMP/out" | grep -q "; 8 cases checked against the CPU reference"'
check "one summary per dtype, no verdict below 64 MiB" \
    eval '[ "$(grep -c "^# summary .*: no size of 64 MiB or more measured, no verdict$" \
              "$TMP/out")" = 4 ] &&
          grep -q "^# summary half:" "$TMP/out" && grep -q "^# summary int64:" "$TMP/out"'

# Two outputs, two ops, 8 inputs, dtypes by collbench's other names: 1 + 2 x 2 x 2 rows.
bench -b 4K -e 4K -r 1 -n 1 -w 0 -d bf16,fp8_e5m2 -o sum,max -k 8 --dsts 2
check "--dsts 2 -o sum,max -k 8 -d bf16,fp8_e5m2: 9 rows, 1- and 2-output rows sound" \
    eval '[ "$rc" = 0 ] && [ "$(rows)" = 9 ] && rows_sound &&
          [ "$(awk -F "\t" "\$1 == \"reduce_copy\" && \$5 == 2" "$TMP/out" | wc -l)" = 4 ] &&
          grep -q "^reduce_copy	f8e5m2	max	8	2	4096	" "$TMP/out" &&
          grep -q "^reduce_copy	bfloat16	sum	8	1	4096	" "$TMP/out"'

# ---------------------------------------------------------------------------------------
# A wrong element in a kernel's result. Checks run per dtype (half, then float) and k, each
# as a misaligned launch of 1027 elements, then an aligned one of 64 KiB less one element:
# launch 5 is float k=2 misaligned, launch 6 the aligned one after it.
says_failed() { grep -q "^cuda_rc_bench: check failed: $1: output 0, element $2 is 0x" "$TMP/err"; }
COLL_FAKECUDA_CORRUPT_RC=5 bench -b 4K -e 64K -r 1 -d float,half -k 2,3
check "a corrupted misaligned result: exit 1, names float sum k=2, element 513, no rows" \
    eval '[ "$rc" = 1 ] && [ ! -s "$TMP/out" ] &&
          says_failed "float sum, 2 inputs, 1 output, 1027 elements at element offset 1" 513'
COLL_FAKECUDA_CORRUPT_RC=6 bench -b 4K -e 64K -r 1 -d float,half -k 2,3
check "a corrupted aligned result: exit 1, names 16383 elements, element 8191" \
    eval '[ "$rc" = 1 ] &&
          says_failed "float sum, 2 inputs, 1 output, 16383 elements at element offset 0" 8191'
# one output (launches 1, 2), then two (3, 4)
COLL_FAKECUDA_CORRUPT_RC=4 bench -b 4K -e 4K -r 1 -d uint8 -k 4 --dsts 2
check "a corrupted result with two outputs (uint8, k=4): exit 1, names output 0, element 2047" \
    eval '[ "$rc" = 1 ] &&
          says_failed "uint8 sum, 4 inputs, 2 outputs, 4095 elements at element offset 0" 2047'

# ---------------------------------------------------------------------------------------
# Refusals.
for args in "-k 9" "-k 0" "-d float,nosuch" "-o sum,mean" "--dsts 3" "-b 1M -e 4K" "-b 8" \
    "-r 0" "-n 0" "--nonsense" "extra"; do
    # shellcheck disable=SC2086
    bench $args
    check "bad arguments '$args': exit 2 with the usage line" \
        eval '[ "$rc" = 2 ] && grep -q "^usage: cuda_rc_bench " "$TMP/err" && [ ! -s "$TMP/out" ]'
done
bench -h
check "-h: exit 0, the usage line on stdout" \
    eval '[ "$rc" = 0 ] && grep -q "^usage: cuda_rc_bench " "$TMP/out"'
bench --device 1 -b 4K -e 4K
check "--device 1 with one device: exit 2, says how many there are" \
    eval '[ "$rc" = 2 ] && grep -q "sees 1 CUDA device" "$TMP/err"'
COLL_CUDA_DISABLE=1 bench -b 4K -e 4K
check "COLL_CUDA_DISABLE=1: exit 1, says CUDA is disabled by it" \
    eval '[ "$rc" = 1 ] && grep -q "no usable CUDA: .*COLL_CUDA_DISABLE" "$TMP/err"'
COLL_CUDA_LIBRARY=/nonexistent/libcudart.so bench -b 4K -e 4K
check "no CUDA runtime: exit 1, names the library" \
    eval '[ "$rc" = 1 ] &&
          grep -q "no usable CUDA: no CUDA runtime: .*/nonexistent/libcudart.so" "$TMP/err"'
COLL_FAKECUDA_DEVICES=0 bench -b 4K -e 4K
check "no CUDA device: exit 1, says so" \
    eval '[ "$rc" = 1 ] && grep -q "no usable CUDA: no CUDA device" "$TMP/err"'

echo "1..$n"
[ "$failed" -eq 0 ]
