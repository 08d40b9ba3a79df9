#!/usr/bin/env bash
# bench/tcp_ring.sh - all-reduce over TCP at NP local ranks beside the machine's ceiling for
# it: tcp_ring (NP processes in a ring over loopback, each sending and receiving at once, no
# library, no reduction) against coll's and Open MPI's TCP all-reduce busbw, interleaved
# repetition by repetition. A ring all-reduce's busbw is the rate at which one rank sends,
# 2 (NP - 1) / NP of the vector; tcp_ring moves that many bytes per rank (in whole MiB) with
# nothing else to do, on warm connections, so coll/ceiling says how much of a plain ring's
# rate coll keeps while it also reduces and keeps its protocol. Not a hard ceiling: a
# library with more sockets or better timing may beat this plain poll loop.
#
#   REPS=4 SIZES="4M 16M 64M" bench/tcp_ring.sh [NP...]      default NP: 8
#
# Needs build/collbench, build/collrun, build/tcp_ring and Open MPI's peer driver (MPI_COLL,
# default /tmp/peers-build/mpi_coll.openmpi; ../shared/peers/build.sh builds it). Writes
# docs/results/tcp-ring.tsv (OUT to change): rep, np, who, bytes, GB/s; prints medians.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
reps=${REPS:-4}
sizes=${SIZES:-"4M 16M 64M"}
budget=${BUDGET:-0.2}
out=${OUT:-docs/results/tcp-ring.tsv}
mpi=${MPI_COLL:-/tmp/peers-build/mpi_coll.openmpi}
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(8)
for f in build/collbench build/collrun build/tcp_ring "$mpi"; do
    [ -x "$f" ] || { echo "tcp_ring.sh: no $f" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bytes_of() { numfmt --from=iec "$1"; }
coll() {
    COLL_TRANSPORT=tcp build/collrun -n "$1" build/collbench allreduce -c 1 -z 1 -a 3 \
        --time-budget "$budget" -b "$2" -e "$2" --outofplace-only 2>/dev/null |
        awk '!/^#/ && NF > 5 { print $8; exit }'
}
ompi() {
    mpirun.openmpi -np "$1" --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 \
        --mca btl tcp,self --mca btl_tcp_if_include lo "$mpi" -c allreduce -b "$2" -e "$2" \
        -T "$budget" 2>/dev/null | awk '!/^#/ && NF > 5 { print $8; exit }'
}
# the ring's rate for the bytes one rank of a ring all-reduce of $2 bytes sends,
# 2 (NP - 1) / NP of them, in whole MiB
ring() {
    local mib=$(( ($2 * 2 * ($1 - 1) / $1 + (1 << 19)) >> 20 ))
    [ "$mib" -ge 1 ] || mib=1
    build/tcp_ring -p "$1" -s "$mib" -r 1 | awk '$1 == "median" { print $6 }'
}

mkdir -p "$(dirname "$out")"
printf 'rep\tnp\twho\tbytes\tgbps\n' >"$out"
for r in $(seq 1 "$reps"); do
    for np in "${nps[@]}"; do
        for s in $sizes; do
            b=$(bytes_of "$s")
            printf '%s\t%s\tceiling\t%s\t%s\n' "$r" "$np" "$b" "$(ring "$np" "$b")" >>"$out"
            printf '%s\t%s\tcoll\t%s\t%s\n' "$r" "$np" "$b" "$(coll "$np" "$s")" >>"$out"
            printf '%s\t%s\tompi\t%s\t%s\n' "$r" "$np" "$b" "$(ompi "$np" "$s")" >>"$out"
        done
    done
done
python3 - "$out" <<'PY'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
v = {}
for rep, np, who, b, g in rows:
    if g:
        v.setdefault((int(np), who, b), []).append(float(g))
print("np\tbytes\tceiling GB/s\tcoll busbw\tompi busbw\tcoll/ceiling\tompi/ceiling\tcoll/ompi")
for np in sorted({k[0] for k in v}):
    for b in sorted({k[2] for k in v if k[0] == np and k[1] == "coll"}, key=int):
        c, o = st.median(v[(np, "coll", b)]), st.median(v.get((np, "ompi", b), [float("nan")]))
        ceil = st.median(v.get((np, "ceiling", b), [float("nan")]))
        print("%d\t%d MiB\t%.3f\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f" % (
            np, int(b) >> 20, ceil, c, o, c / ceil, o / ceil, c / o))
PY
echo "wrote $out"
