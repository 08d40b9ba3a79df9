#!/usr/bin/env bash
# bench/shm_large.sh [NP ...] - large-message shared-memory collectives (all-reduce,
# broadcast, reduce, 1-64 MiB) of coll beside Open MPI's shared-memory path, in one run, and
# the coll / Open MPI busbw ratio per cell (median over REPS interleaved repetitions).
#
#   BUILD=build-shm REPS=3 bench/shm_large.sh 2 4 8
#
# Runs ../shared/peers/run_all.sh with LIBS (default "coll ompi-shm"); coll is
# `collrun -n NP collbench COLL -c 1 -z 1 -a 3 --time-budget BUDGET` from BUILD (default
# build), plus COLL_ENV (e.g. COLL_ENV="COLL_SHM_SLICED_BYTES=0") in its environment.
# Knobs: REPS (3), BUDGET (0.1), MAXBYTES (64M), COLLS, OUT_DIR (/tmp/coll-shm-large).
# PLOTS=DIR draws DIR/shm-large-COLL-npNP.png (busbw vs size, gnuplot); with BEFORE=DIR2 (the
# OUT_DIR of an earlier run) its coll and ompi-shm are drawn too, as "... (before)".
# RATIOS_ONLY=1 skips the runs and reports on what OUT_DIR holds.
# Prints the load average before and after; writes nothing under the source tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
peers=${PEERS_DIR:-$root/../shared/peers}
[ -x "$peers/run_all.sh" ] || { echo "shm_large.sh: $peers/run_all.sh not found" >&2; exit 2; }
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
build=${BUILD:-build}
export OUT_DIR=${OUT_DIR:-/tmp/coll-shm-large}
export REPS=${REPS:-3}
export LIBS=${LIBS:-"coll ompi-shm"}
export COLLS=${COLLS:-"allreduce bcast reduce"}
export BUDGET=${BUDGET:-0.1}
export MAXBYTES=${MAXBYTES:-64M}
export TIMEOUT=${TIMEOUT:-120}
export COLL_CMD="env ${COLL_ENV:-COLL_DEBUG=WARN} $root/$build/collrun -n {np} \
$root/$build/collbench {coll} -c 1 -z 1 -a 3 --time-budget $BUDGET"

[ -x "$build/collbench" ] || { echo "shm_large.sh: build $build first" >&2; exit 2; }
"$peers/setup.sh" >/dev/null
files=()
[ -n "${RATIOS_ONLY:-}" ] || echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for np in "${nps[@]}"; do
    [ -n "${RATIOS_ONLY:-}" ] || "$peers/run_all.sh" "$np" >/dev/null
    files+=("$OUT_DIR/np$np/results.tsv")
done
[ -n "${RATIOS_ONLY:-}" ] || echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${PLOTS:-}" ]; then
    mkdir -p "$PLOTS"
    PYTHONPATH=$root/bench python3 - "$PLOTS" "${BEFORE:-}" "${files[@]}" <<'PY'
import os, sys, perf_report
plots, before, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
data = perf_report.load(paths)
libs = ["coll", "ompi-shm"]
if before:
    old = perf_report.load([os.path.join(before, os.path.basename(os.path.dirname(p)),
                                         "results.tsv") for p in paths])
    for (np_, coll, lib, b), v in old.items():
        if lib in ("coll", "ompi-shm"):
            data[(np_, coll, lib + " (before)", b)] = v
    libs = ["coll (before)", "ompi-shm (before)"] + libs
for np_, coll in sorted({(k[0], k[1]) for k in data}):
    perf_report.plot(data, np_, coll, libs,
                     os.path.join(plots, "shm-large-%s-np%d.png" % (coll, np_)))
PY
fi
python3 - "${files[@]}" <<'PY'
import csv, statistics, sys
rows = {}
for path in sys.argv[1:]:
    with open(path) as fh:
        for r in csv.DictReader(fh, delimiter='\t'):
            b = int(r['bytes'])
            if b < 1 << 20:
                continue
            key = (r['coll'], int(r['np']), b)
            rows.setdefault(key, {}).setdefault(r['lib'], []).append(float(r['busbw_GBps']))
print('| collective | NP | MiB | coll busbw | ompi-shm busbw | ratio |')
print('|---|---:|---:|---:|---:|---:|')
for (coll, np, b) in sorted(rows):
    libs = rows[(coll, np, b)]
    c = statistics.median(libs.get('coll', [0])) if 'coll' in libs else float('nan')
    o = statistics.median(libs['ompi-shm']) if 'ompi-shm' in libs else float('nan')
    ratio = c / o if o and o == o else float('nan')
    print(f'| {coll} | {np} | {b >> 20} | {c:.3g} | {o:.3g} | {ratio:.2f} |')
PY
