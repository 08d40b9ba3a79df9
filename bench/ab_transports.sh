#!/usr/bin/env bash
# bench/ab_transports.sh LABEL=BUILD_DIR ... - builds side by side over shared memory and TCP:
# 8 B all-reduce and broadcast time and 16 MiB all-reduce busbw at each NP (NPS, default
# 2 4 8), every build under its own collrun, all interleaved REPS times (default 5) in one
# run; prints medians and each build's ratio to the first one. OMPI_COLL=PATH (the peers'
# mpi_coll built with mpicc.openmpi: ../shared/peers/build.sh) adds Open MPI over TCP (pml
# ob1, btl tcp,self on lo) at 8 B to the same interleave. TPS (default "shm tcp") and CALLS
# (default "allreduce:8 broadcast:8 allreduce:16777216") narrow the rows.
#
#   bench/ab_transports.sh old=/tmp/base/b new=build
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -gt 0 ] || { echo "usage: $0 LABEL=BUILD_DIR ..." >&2; exit 2; }
builds=("$@")
read -r -a nps <<<"${NPS:-2 4 8}"
read -r -a tps <<<"${TPS:-shm tcp}"
read -r -a calls <<<"${CALLS:-allreduce:8 broadcast:8 allreduce:16777216}"
REPS=${REPS:-5}
ompi=${OMPI_COLL:-}
tsv=${OUT:-docs/results/ab-transports.tsv}
mkdir -p "$(dirname "$tsv")"
echo -e "tp\tnp\tcoll\tbytes\tbuild\ttime_us\tbusbw" >"$tsv"
one() { # BUILD_DIR TP NP COLL BYTES ITERS: "time busbw" of the row
    env COLL_TRANSPORT="$2" "$1/collrun" -n "$3" "$1/collbench" "$4" -b "$5" -e "$5" -z 1 -c 0 \
        -n "$6" -w "$(( $6 / 10 + 1 ))" 2>/dev/null | awk -v s="$5" '$1 == s { print $6, $8 }'
}
one_ompi() { # NP COLL: Open MPI's "time busbw" at 8 B over TCP
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np "$1" \
        --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include lo "$ompi" -c "$2" -b 8 -e 8 -T 0.3 2>/dev/null |
        awk '$1 == 8 { print $6, $8 }'
}
for _ in $(seq "$REPS"); do
    for np in "${nps[@]}"; do
        for tp in "${tps[@]}"; do
            for c in "${calls[@]}"; do
                coll=${c%%:*} bytes=${c#*:}
                iters=5000
                [ "$tp" = tcp ] && iters=1000
                [ "$bytes" -gt 8 ] && iters=10
                for spec in "${builds[@]}"; do
                    r=$(one "${spec#*=}" "$tp" "$np" "$coll" "$bytes" "$iters")
                    echo -e "$tp\t$np\t$coll\t$bytes\t${spec%%=*}\t${r// /$'\t'}"
                done
                if [ -n "$ompi" ] && [ "$tp" = tcp ] && [ "$bytes" = 8 ]; then
                    r=$(one_ompi "$np" "${coll/broadcast/bcast}")
                    echo -e "$tp\t$np\t$coll\t$bytes\tompi-tcp\t${r// /$'\t'}"
                fi
            done
        done
    done
done >>"$tsv"
python3 - "$tsv" "${builds[@]%%=*}" <<'PY'
import sys, statistics, collections
v = collections.defaultdict(list)
for l in open(sys.argv[1]).read().splitlines()[1:]:
    f = l.split('\t')
    if len(f) == 7 and f[5]:
        v[(f[0], int(f[1]), f[2], int(f[3]), f[4])].append((float(f[5]), float(f[6])))
labels = sys.argv[2:] + ['ompi-tcp']
first = labels[0]
print("tp   np  call              " + "".join(f"{b:>12}" for b in labels)
      + "".join(f"  {b}/{first}" for b in labels[1:]))
for tp, np, coll, nbytes in sorted({k[:4] for k in v}, key=lambda k: (k[0], k[1], k[3], k[2])):
    big = nbytes > 8
    med = {}
    for b in labels:
        s = v.get((tp, np, coll, nbytes, b))
        if s:
            med[b] = statistics.median(x[1] if big else x[0] for x in s)
    what = f"{coll} {'16M busbw' if big else '8B us'}"
    line = f"{tp:<4} {np:<3} {what:<17} " + "".join(
        f"{med[b]:>12.2f}" if b in med else f"{'-':>12}" for b in labels)
    for b in labels[1:]:
        r = f"{med[b] / med[first]:.2f}" if b in med and first in med and med[first] else "-"
        line += f"  {r:>{len(b) + len(first) + 1}}"
    print(line)
PY
