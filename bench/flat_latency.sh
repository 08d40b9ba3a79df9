#!/usr/bin/env bash
# bench/flat_latency.sh [NP ...] - small all-reduce latency on one host, in one run: Open MPI's
# shared-memory path, coll's general path (COLL_SHM_FLAT=0) and coll's shared-memory fast
# path (the default), interleaved REPS times per NP; prints the median time per call (us)
# of each and the ratio coll / Open MPI.
#
#   bench/flat_latency.sh 2 4 8           # default NPs: 2 4 8
#   SIZES="8 1K 4K" REPS=5 BUDGET=0.2 bench/flat_latency.sh 2
#   MODES="general sliced" SIZES="16K 64K 256K 1M" bench/flat_latency.sh 2 4 8
#
# COMPILE=0 runs the build's binaries as they are (no meson compile first).
# BIND (default 1): with NP <= cores, each coll rank runs on a core of its own (collrun
# --bind-to core), as Open MPI's mpirun binds its ranks by default there; on a machine
# busy with other work an unbound pair of ranks often shares one core. BIND=0: unbound.
#
# MODES (default "ompi general flat"): ompi, general, flat (the default configuration) and
# sliced (COLL_SHM_SLICED_BYTES=16M: the sliced all-reduce above COLL_SHM_FLAT_BYTES). The
# ratios printed are each mode's time over the first mode's.
# Timing rules as bench/peers.sh: blocking back-to-back calls, float32 sum, the slowest
# rank's average (-a 3), iterations picked by a time budget per size (BUDGET seconds, at
# most 20000 calls, as the peers' driver). BUILD (default build) is the meson build dir
# whose collrun and collbench run; the Open MPI driver comes from ../shared/peers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
peers=${PEERS_DIR:-$root/../shared/peers}
build=${BUILD:-build}
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
REPS=${REPS:-3}
BUDGET=${BUDGET:-0.1}
SIZES=${SIZES:-8}
export BUILD_DIR=${BUILD_DIR:-${TMPDIR:-/tmp}/peers-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

command -v mpirun.openmpi >/dev/null || "$peers/setup.sh" >/dev/null
"$peers/build.sh"
[ -x "$build/collbench" ] || meson setup "$build" >/dev/null
[ "${COMPILE:-1}" = 0 ] || meson compile -C "$build" >/dev/null

bytes() { # "4K" -> 4096
    case $1 in *K) echo $(( ${1%K} * 1024 ));; *M) echo $(( ${1%M} * 1048576 ));; *) echo "$1";; esac
}

# time_us LIB NP BYTES: the out-of-place time column of the row for BYTES
time_us() {
    local lib=$1 np=$2 b=$3 out
    case $lib in
        ompi)
            out=$(timeout -k 5 120 mpirun.openmpi -np "$np" --oversubscribe --mca oob_tcp_if_include lo \
                "$BUILD_DIR/mpi_coll.openmpi" -c allreduce -b "$b" -e "$b" -f 2 -T "$BUDGET" 2>/dev/null) ;;
        general|flat|sliced)
            local bench=("$build/collbench" allreduce -b "$b" -e "$b" -c 1 -z 1 -a 3
                         --time-budget "$BUDGET") bind=()
            # collrun's binding, not taskset around each rank: collrun also tells the ranks
            # how many CPUs they share, and a rank that saw only its own would think itself
            # oversubscribed and yield in every wait
            if [ "${BIND:-1}" = 1 ] && [ "$np" -le "$(nproc)" ]; then
                bind=(--bind-to core)
            fi
            out=$(COLL_SHM_FLAT=$([ "$lib" = general ] && echo 0 || echo 1) \
                COLL_SHM_SLICED_BYTES=$([ "$lib" = sliced ] && echo 16M || echo 0) \
                timeout -k 5 120 "$build/collrun" -n "$np" "${bind[@]}" "${bench[@]}" \
                2>/dev/null) ;;
    esac
    awk -v b="$b" '$1 == b && $1 ~ /^[0-9]+$/ { print $6; exit }' <<<"$out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "nan" }'; }

read -r -a modes <<<"${MODES:-ompi general flat}"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); REPS=$REPS BUDGET=$BUDGET BIND=${BIND:-1}"
{
    printf 'np\tbytes'
    for m in "${modes[@]}"; do printf '\t%s_us' "$m"; done
    for m in "${modes[@]:1}"; do printf '\t%s/%s' "$m" "${modes[0]}"; done
    printf '\n'
    for np in "${nps[@]}"; do
        for s in $SIZES; do
            b=$(bytes "$s")
            declare -A t=()
            for ((r = 0; r < REPS; r++)); do
                for lib in "${modes[@]}"; do
                    t[$lib]+="$(time_us "$lib" "$np" "$b")"$'\n'
                done
            done
            printf '%s\t%s' "$np" "$b"
            med=()
            for lib in "${modes[@]}"; do
                med+=("$(median <<<"${t[$lib]}")")
                printf '\t%s' "${med[-1]}"
            done
            for ((k = 1; k < ${#modes[@]}; k++)); do
                awk -v a="${med[k]}" -v o="${med[0]}" 'BEGIN { printf "\t%.2f", a / o }'
            done
            printf '\n'
            unset t
        done
    done
} | column -t
