#!/usr/bin/env bash
# bench/peers.sh [NP ...] - coll beside Open MPI (shared memory and TCP) and Gloo, in one run
# on this machine, then docs/performance.md with tables and plots.
#
#   bench/peers.sh 2 4 8          # default NPs: 2 4 8
#
# Uses ../shared/peers (installs the peers from Debian packages with its setup.sh, builds
# their drivers, runs every library per NP with the same sizes and timing rules). coll runs
# as `collrun -n NP collbench COLL -c 1 -z 1 -a 3 --time-budget BUDGET` (through
# bench/peers_coll.sh): blocking back-to-back calls, the slowest rank's average (-a 3),
# verified, like the peers' driver; all-reduce and reduce out of place, broadcast in place,
# as the MPI calls are (MPI_Bcast has one buffer).
# coll runs twice: "coll" lets ranks of this host use shared memory (the default), "coll-tcp"
# forces TCP. Knobs: REPS (default 2), LIBS, COLLS, BUDGET, MAXBYTES (as run_all.sh), OUT_DIR
# (default /tmp/coll-peers).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
export OUT_DIR=${OUT_DIR:-/tmp/coll-peers}
export REPS=${REPS:-2}
export LIBS=${LIBS:-"coll coll-tcp ompi-shm ompi-tcp gloo"}
export COLLS=${COLLS:-"allreduce bcast reduce"}
. bench/peers_prepare.sh
"$peers/ceilings.sh" || echo "peers.sh: ceilings failed" >&2
results=()
for np in "${nps[@]}"; do
    "$peers/run_all.sh" "$np"
    results+=("$OUT_DIR/np$np/results.tsv")
done
mkdir -p docs/results
for f in "${results[@]}"; do
    np=$(basename "$(dirname "$f")")
    cp "$f" "docs/results/peers-$np.tsv"
done
[ -f "$OUT_DIR/ceilings.tsv" ] && cp "$OUT_DIR/ceilings.tsv" docs/results/ceilings.tsv
python3 bench/perf_report.py --stat median --out docs/performance.md --plots docs/results \
    --ceilings docs/results/ceilings.tsv "${results[@]}"
echo "wrote docs/performance.md"
