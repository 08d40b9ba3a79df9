#!/usr/bin/env bash
# bench/extrapolate.sh [BUILD] - what the cost model predicts for all-reduce on clusters this
# machine cannot emulate: N ranks as hosts of 8 (shared memory inside, one NIC per host
# between), over 100, 200 and 400 Gbit/s, at 256 MiB. Prints a table (markdown) of the
# predicted time, the algorithm the model ranks first, and busbw (nccl-tests' definition:
# 2 (N-1)/N x bytes / time).
#
# The link figures are stated, not measured: inter-host alpha 5 us (a good TCP or RoCE
# stack; verbs is nearer 2 us), beta = 8 / rate; intra-host shared memory alpha 1 us, 20 GB/s
# per copy (a server's memory; this 2-core VM measures less). One chunk size (1 MiB) keeps
# the 1024-rank simulations to a few minutes each.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
bytes=$((256 << 20))
per_host=8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "| ranks | hosts | link | best algorithm | predicted time (ms) | busbw (GB/s) | NIC line rate (GB/s) |"
echo "|---:|---:|---|---|---:|---:|---:|"
for gbit in 100 200 400; do
    cal=$tmp/cal-$gbit.txt
    python3 - "$gbit" >"$cal" <<'EOF'
import sys
rate = float(sys.argv[1]) * 1e9 / 8  # bytes per second
print("tcp.alpha 5e-06")
print("tcp.beta %r" % (1 / rate))
print("shm.alpha 1e-06")
print("shm.beta %r" % (1 / 20e9))
EOF
    for n in ${RANKS:-64 256 1024}; do
        line=$(COLL_CHUNK_BYTES=1M COLL_CALIB_FILE=$cal "$build/collbench" allreduce --explain \
            --np "$n" --per-host "$per_host" -b "$bytes" -e "$bytes" | grep -v '^#' | tail -n 1)
        # a row: size count selected chunk est, then the ranking "algo est/chunk ...", best
        # first
        best=$(echo "$line" | awk '{print $6, $7}')
        algo=${best%% *}
        us=${best#* }
        us=${us%%/*}
        python3 - "$n" "$per_host" "$gbit" "$algo" "$us" "$bytes" <<'EOF'
import sys
n, per, gbit, algo, us, b = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5]), int(sys.argv[6])
t = us * 1e-6
busbw = 2 * (n - 1) / n * b / t / 1e9
print("| %d | %d | %s Gbit/s | %s | %.1f | %.1f | %.1f |" % (n, n // per, gbit, algo, t * 1e3, busbw, float(gbit) / 8))
EOF
    done
done
