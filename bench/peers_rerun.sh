#!/usr/bin/env bash
# bench/peers_rerun.sh NAME NP - rerun some of docs/performance.md's rows with more
# repetitions, and judge the targets on the median of the repetitions instead of the mean,
# so that one slow repetition (this machine has them, in coll's runs and the peers' alike)
# does not decide a row.
#
#   LIBS="coll ompi-shm" COLLS=allreduce REPS=6 bench/peers_rerun.sh shm-allreduce 8
#
# Same drivers, sizes and timing rules as bench/peers.sh (../shared/peers/run_all.sh, the
# libraries interleaved repetition by repetition); LIBS, COLLS, REPS (default 6), BUDGET
# (default 0.2) and MAXBYTES as there. Writes docs/results/rerun-NAME-npNP.tsv and prints
# the targets table of those rows (median of repetitions, bench/perf_report.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -eq 2 ] || { echo "usage: bench/peers_rerun.sh NAME NP" >&2; exit 2; }
name=$1 np=$2
export OUT_DIR=${OUT_DIR:-/tmp/coll-peers-rerun/$name}
export REPS=${REPS:-6}
export LIBS=${LIBS:-"coll ompi-shm"}
export COLLS=${COLLS:-allreduce}
. bench/peers_prepare.sh
"$peers/run_all.sh" "$np"
out=docs/results/rerun-$name-np$np.tsv
mkdir -p docs/results
cp "$OUT_DIR/np$np/results.tsv" "$out"
python3 bench/perf_report.py --targets-only --stat median "$out"
echo "wrote $out"
