#!/usr/bin/env bash
# bench/ab_latency.sh BASE_BUILD [NP ...] - 8 B all-reduce latency of an earlier build against
# this one (BUILD, default build), and this one in checking mode (COLL_CHECK=1), interleaved
# REPS times per NP, blocking calls (-z 1) and non-blocking ones (-z 0); prints the median
# time per call (us) and the ratios to the earlier build. Each build runs under its own
# collrun, with the transport the library picks (shared memory on one host) at every NP, and
# over TCP (COLL_TRANSPORT=tcp) at the ranks of TCP_NPS (default 4 8; empty: none), where
# ranks outnumber this machine's cores and the engine's waits decide the time.
#
# OMPI_COLL=PATH (the peers' mpi_coll built with mpicc.openmpi: ../shared/peers/build.sh) adds
# Open MPI over TCP (pml ob1, btl tcp,self on lo) to the TCP rows' interleave, blocking form,
# and the ratio of this build's time to Open MPI's.
#
#   git worktree add /tmp/base 0030de0 && meson setup /tmp/base/b /tmp/base && \
#       ninja -C /tmp/base/b collbench collrun
#   bench/ab_latency.sh /tmp/base/b 2 4 8
#   TCP_NPS="4 8" OMPI_COLL=/tmp/peers-build/mpi_coll.openmpi bench/ab_latency.sh /tmp/base/b 2
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base=$1
shift
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
read -r -a tcp_nps <<<"${TCP_NPS-4 8}"
build=${BUILD:-build}
REPS=${REPS:-5}
ITERS=${ITERS:-5000}
TCP_ITERS=${TCP_ITERS:-2000} # 50-250 us a call over TCP at 4-8 ranks on 2 cores
ompi=${OMPI_COLL:-}
tsv=${OUT:-docs/results/ab-latency.tsv}
mkdir -p "$(dirname "$tsv")"
echo -e "tp\tnp\tz\tbuild\ttime_us" >"$tsv"
one() { # BUILD_DIR TP NP Z [env...]: the time column of one 8 B row
    local b=$1 tp=$2 np=$3 z=$4 iters=$ITERS
    shift 4
    if [ "$tp" = tcp ]; then
        set -- COLL_TRANSPORT=tcp "$@"
        iters=$TCP_ITERS
    fi
    env "$@" "$b/collrun" -n "$np" "$b/collbench" allreduce -b 8 -e 8 -z "$z" -c 0 \
        -n "$iters" -w 500 2>/dev/null | awk '/^ +8 / { print $6 }'
}
one_ompi() { # NP: Open MPI's time for the same call over TCP (its own table, same columns)
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np "$1" \
        --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include lo "$ompi" -c allreduce -b 8 -e 8 -T 0.5 2>/dev/null |
        awk '/^ +8 / { print $6 }'
}
runs=()
for np in "${nps[@]}"; do runs+=("auto $np"); done
for np in "${tcp_nps[@]}"; do runs+=("tcp $np"); done
for run in "${runs[@]}"; do
    read -r tp np <<<"$run"
    for _ in $(seq "$REPS"); do
        for z in 1 0; do
            echo -e "$tp\t$np\t$z\tbase\t$(one "$base" "$tp" "$np" "$z")"
            echo -e "$tp\t$np\t$z\tnew\t$(one "$build" "$tp" "$np" "$z")"
            echo -e "$tp\t$np\t$z\tcheck\t$(one "$build" "$tp" "$np" "$z" COLL_CHECK=1)"
            if [ "$tp" = tcp ] && [ "$z" = 1 ] && [ -n "$ompi" ]; then
                echo -e "$tp\t$np\t$z\tompi\t$(one_ompi "$np")"
            fi
        done
    done
done >>"$tsv"
python3 - "$tsv" <<'PY'
import sys, statistics, collections
v = collections.defaultdict(list)
for l in open(sys.argv[1]).read().splitlines()[1:]:
    tp, np, z, b, t = l.split('\t')
    if t:
        v[(tp, int(np), int(z), b)].append(float(t))
print("tp    np  form          base(us)  new(us)  new/base  check(us)  check/base"
      "  ompi(us)  new/ompi")
rows = sorted({k[:3] for k in v}, key=lambda x: (x[0] != 'auto', x[0], x[1], -x[2]))
for tp, np, z in rows:
    m = {b: statistics.median(v[(tp, np, z, b)])
         for b in ('base', 'new', 'check', 'ompi') if v[(tp, np, z, b)]}
    if not all(b in m for b in ('base', 'new', 'check')):
        print(f"{tp:<5} {np:<3} {z}: a build printed no time (see the TSV)")
        continue
    form = 'blocking' if z == 1 else 'non-blocking'
    line = (f"{tp:<5} {np:<3} {form:<12} {m['base']:>9.2f} {m['new']:>8.2f}"
            f" {m['new']/m['base']:>9.2f} {m['check']:>10.2f} {m['check']/m['base']:>11.2f}")
    if 'ompi' in m:
        line += f" {m['ompi']:>9.2f} {m['new']/m['ompi']:>9.2f}"
    print(line)
PY
