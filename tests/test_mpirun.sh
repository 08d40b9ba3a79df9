#!/usr/bin/env bash
# test_mpirun.sh - coll under Open MPI's real mpirun (openmpi-bin), the unique id passed
# through the launcher's PMIx server.
#
#   tests/test_mpirun.sh path/to/collbench path/to/launch_check
#
# Prints TAP; SKIPs when mpirun is not installed or coll was built without PMIx.
set -u

COLLBENCH=$(readlink -f "${1:?usage: test_mpirun.sh COLLBENCH LAUNCH_CHECK}")
CHECK=$(readlink -f "${2:?usage: test_mpirun.sh COLLBENCH LAUNCH_CHECK}")
MPIRUN=$(command -v mpirun.openmpi || true)

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 25" "$TMP/out"; }

[ -n "$MPIRUN" ] || skip_all "mpirun.openmpi is not installed (apt-get install openmpi-bin)"

run() { "$@" >"$TMP/out" 2>&1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under a sanitized build: libpmix 4.2 keeps allocations of its own init (and of plugins
# it unloads) that the leak checker reports at exit; coll's own allocations are checked for
# leaks by every other test. Address and undefined-behaviour checks stay on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export COLL_TIMEOUT_MS=30000 COLL_BOOTSTRAP_TIMEOUT_MS=20000
MR="timeout -k 5 60 $MPIRUN --oversubscribe --mca oob_tcp_if_include lo"

# A build without PMIx says so: skip rather than fail.
run $MR -np 1 "$CHECK" OMPI_COMM_WORLD_RANK
grep -q "built without it" "$TMP/out" &&
    skip_all "coll was built without PMIx (install libpmix-dev and rebuild)"

four_ok() {
    run $MR -np 4 "$CHECK" OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE &&
        [ "$(grep -c 'launch_check: rank [0-3] of 4 .* OK' "$TMP/out")" -eq 4 ]
}
check "mpirun -np 4 launch_check: id through PMIx, two comms" four_ok

bench_ok() {
    run $MR -np 4 "$COLLBENCH" allreduce -b 8 -e 64K -f 8 -c 1 -n 2 -w 1 &&
        grep -q "Out of bounds values : 0 OK" "$TMP/out" &&
        [ "$(grep -c '^#  Rank ' "$TMP/out")" -eq 4 ]
}
check "mpirun -np 4 collbench allreduce -c 1" bench_ok

topo_ok() {
    run $MR -np 3 "$COLLBENCH" --topo && grep -q "3 ranks on 1 hosts" "$TMP/out"
}
check "mpirun -np 3 collbench --topo: one host, three ranks" topo_ok

# Bad input: a PMIx rank that is not the launcher's rank.
pmix_disagree() {
    ! run $MR -np 2 bash -c 'OMPI_COMM_WORLD_RANK=$((1 - OMPI_COMM_WORLD_RANK)) exec "$0" PMIX_RANK' \
        "$CHECK" && grep -q "PMIX_RANK='[01]' disagrees with OMPI_COMM_WORLD_RANK=[01]" "$TMP/out"
}
check "PMIX_RANK disagrees with OMPI_COMM_WORLD_RANK: error names both" pmix_disagree

range() {
    ! run $MR -np 2 bash -c 'OMPI_COMM_WORLD_SIZE=1 exec "$0" OMPI_COMM_WORLD_RANK' "$CHECK" &&
        grep -q "OMPI_COMM_WORLD_RANK=1 is out of range for OMPI_COMM_WORLD_SIZE=1" "$TMP/out"
}
check "OMPI_COMM_WORLD_RANK >= OMPI_COMM_WORLD_SIZE: error names both" range

tap_done
