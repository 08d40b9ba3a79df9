#!/usr/bin/env bash
# bench/tcp_8b.sh - 8-byte all-reduce over TCP: coll beside Open MPI's TCP path, interleaved
# repetition by repetition, with the machine's floor for the 2-rank exchange (tcp_floor,
# no library) in the same repetitions. The issue's target is coll at most 0.8x Open MPI's
# time.
#
#   REPS=8 BUDGET=0.3 bench/tcp_8b.sh [NP...]      default NP: 2 4 8
#
# Needs build/collbench, build/collrun, build/tcp_floor and Open MPI's peer driver
# (MPI_COLL, default /tmp/peers-build/mpi_coll.openmpi; ../shared/peers/build.sh builds
# it). Writes docs/results/tcp-8b.tsv (OUT to change): rep, np, who, time_us; prints the
# medians, the ratio of medians and the median of the per-repetition ratios.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
reps=${REPS:-8}
budget=${BUDGET:-0.3}
out=${OUT:-docs/results/tcp-8b.tsv}
mpi=${MPI_COLL:-/tmp/peers-build/mpi_coll.openmpi}
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
for f in build/collbench build/collrun build/tcp_floor "$mpi"; do
    [ -x "$f" ] || { echo "tcp_8b.sh: no $f" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

coll() {
    COLL_TRANSPORT=tcp build/collrun -n "$1" build/collbench allreduce -c 0 -z 1 -a 3 \
        --time-budget "$budget" -b 8 -e 8 --outofplace-only 2>/dev/null |
        awk '!/^#/ && NF > 5 { print $6; exit }'
}
ompi() {
    mpirun.openmpi -np "$1" --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 \
        --mca btl tcp,self --mca btl_tcp_if_include lo "$mpi" -c allreduce -b 8 -e 8 \
        -T "$budget" 2>/dev/null | awk '!/^#/ && NF > 5 { print $6; exit }'
}
floor() {
    build/tcp_floor -n 20000 -r 1 | awk '$1 == "spin" { print $2 }'
}

mkdir -p "$(dirname "$out")"
printf 'rep\tnp\twho\ttime_us\n' >"$out"
for r in $(seq 1 "$reps"); do
    for np in "${nps[@]}"; do
        printf '%s\t%s\tcoll\t%s\n' "$r" "$np" "$(coll "$np")" >>"$out"
        printf '%s\t%s\tompi\t%s\n' "$r" "$np" "$(ompi "$np")" >>"$out"
        [ "$np" != 2 ] || printf '%s\t2\tfloor\t%s\n' "$r" "$(floor)" >>"$out"
    done
done
python3 - "$out" <<'PY'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
t = {}
for rep, np, who, us in rows:
    if us:
        t.setdefault((int(np), who), {})[int(rep)] = float(us)
print("np\tcoll_us\tompi_us\tfloor_us\tcoll/ompi\tper-rep ratio (median)\ttarget <= 0.8")
for np in sorted({k[0] for k in t}):
    c, o, f = t.get((np, "coll"), {}), t.get((np, "ompi"), {}), t.get((np, "floor"), {})
    if not c or not o:
        continue
    ratio = st.median(c.values()) / st.median(o.values())
    per = st.median(c[r] / o[r] for r in c if r in o)
    print("%d\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%s" % (
        np, st.median(c.values()), st.median(o.values()),
        "%.2f" % st.median(f.values()) if f else "-", ratio, per,
        "met" if per <= 0.8 else "missed"))
PY
