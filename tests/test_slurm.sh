#!/usr/bin/env bash
# test_slurm.sh - coll under a real single-node Slurm (Debian's slurm-wlm and munge).
#
#   tests/test_slurm.sh path/to/collbench path/to/launch_check
#
# Starts a private munged (own socket and key), slurmctld and slurmd with a generated
# slurm.conf in a scratch directory (own ports, state, spool, logs), runs `srun -n 4`
# collbench and launch_check with the id passed through a private file (plain srun) and
# through PMIx (srun --mpi=pmix), checks the bad-input errors, then stops every daemon by
# its pid file, also when a case fails. Prints TAP; SKIPs when Slurm or munge is missing
# or this is not root (the daemons run as root here).
set -u

COLLBENCH=$(readlink -f "${1:?usage: test_slurm.sh COLLBENCH LAUNCH_CHECK}")
CHECK=$(readlink -f "${2:?usage: test_slurm.sh COLLBENCH LAUNCH_CHECK}")

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 25" "$TMP/out"; }

for p in slurmctld slurmd srun sinfo munged; do
    command -v "$p" >/dev/null 2>&1 || skip_all "$p not installed (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" -eq 0 ] || skip_all "the test's slurmd and slurmctld must run as root"

chmod 755 "$TMP"
stop_pidfile() {
    local f=$1 pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f" 2>/dev/null)
    case $pid in '' | *[!0-9]*) return 0 ;; esac
    # only a daemon of this run: its command line names this run's directory
    grep -qF "$TMP" "/proc/$pid/cmdline" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
}
tap_cleanup() {
    stop_pidfile "$TMP/slurmd.pid"
    stop_pidfile "$TMP/slurmctld.pid"
    stop_pidfile "$TMP/munged.pid"
}

# ---- start munged, slurmctld, slurmd -------------------------------------------------
HOST=$(hostname)
base=$((20000 + ($$ % 20000)))
mkdir -p "$TMP/state" "$TMP/spool"   # not ids/: coll creates it, mode 700
dd if=/dev/urandom of="$TMP/munge.key" bs=1 count=1024 status=none
chmod 600 "$TMP/munge.key"
munged --force --socket="$TMP/munge.sock" --key-file="$TMP/munge.key" --pid-file="$TMP/munged.pid" \
    --log-file="$TMP/munged.log" --seed-file="$TMP/munged.seed" >"$TMP/out" 2>&1 ||
    skip_all "munged does not start: $(head -c 200 "$TMP/out")"

cat >"$TMP/slurm.conf" <<EOF
ClusterName=colltest
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$TMP/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd.log
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SrunPortRange=$((base + 2))-$((base + 200))
NodeName=$HOST CPUs=8 State=UNKNOWN
PartitionName=colltest Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
export SLURM_CONF="$TMP/slurm.conf"
slurmctld -f "$SLURM_CONF" >>"$TMP/out" 2>&1 || skip_all "slurmctld does not start"
slurmd -f "$SLURM_CONF" >>"$TMP/out" 2>&1 || skip_all "slurmd does not start"
up=0
for _ in $(seq 150); do
    case $(sinfo -h -o %T 2>/dev/null) in idle* | mix* | alloc*) up=1; break ;; esac
    sleep 0.1
done
if [ $up -ne 1 ]; then
    echo "# slurmctld log:"; tail -n 5 "$TMP/slurmctld.log" 2>/dev/null | sed 's/^/#   /'
    echo "# slurmd log:"; tail -n 5 "$TMP/slurmd.log" 2>/dev/null | sed 's/^/#   /'
    skip_all "the node did not come up within 15 s"
fi

# ---- cases ---------------------------------------------------------------------------
export COLL_TIMEOUT_MS=30000 COLL_BOOTSTRAP_TIMEOUT_MS=20000 COLL_ID_DIR="$TMP/ids"
SRUN="timeout -k 5 60 srun -t 2 -n 4"

run() { "$@" >"$TMP/out" 2>&1; }

collbench_ok() {
    run $SRUN "$COLLBENCH" allreduce -b 8 -e 64K -f 8 -c 1 -n 2 -w 1 &&
        grep -q "Out of bounds values : 0 OK" "$TMP/out" &&
        [ "$(grep -c '^#  Rank ' "$TMP/out")" -eq 4 ]
}
check "srun -n 4 collbench allreduce: 4 ranks, every result checked" collbench_ok

four_ok() { [ "$(grep -c 'launch_check: rank [0-3] of 4 .* OK' "$TMP/out")" -eq 4 ]; }
plain_ok() { run $SRUN "$CHECK" SLURM_PROCID SLURM_NTASKS && four_ok; }
check "srun -n 4 launch_check: id through a private file in COLL_ID_DIR" plain_ok
check "rank 0 removed the id file after init" bash -c "[ -z \"\$(ls -A '$TMP/ids')\" ]"
check "the id directory is private (mode 700)" \
    bash -c "[ \"\$(stat -c %a '$TMP/ids')\" = 700 ]"

if srun --mpi=list 2>&1 | grep -q pmix; then
    # libpmix's own allocations at exit: see test_mpirun.sh
    pmix_asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    pmix_ok() { ASAN_OPTIONS=$pmix_asan run $SRUN --mpi=pmix "$CHECK" SLURM_PROCID SLURM_NTASKS && four_ok; }
    check "srun -n 4 --mpi=pmix launch_check: id through PMIx" pmix_ok
    pmix_bench() {
        ASAN_OPTIONS=$pmix_asan run $SRUN --mpi=pmix "$COLLBENCH" broadcast -b 8 -e 4K -f 8 -c 1 -n 2 -w 1 &&
            grep -q "Out of bounds values : 0 OK" "$TMP/out"
    }
    check "srun -n 4 --mpi=pmix collbench broadcast" pmix_bench
else
    skip "srun -n 4 --mpi=pmix" "srun offers no pmix plugin"
fi

# Bad input: an id directory no other rank can see makes every non-root rank fail with a
# message naming the file and the root's host, within COLL_BOOTSTRAP_TIMEOUT_MS.
unshared() {
    COLL_BOOTSTRAP_TIMEOUT_MS=2000 run $SRUN bash -c \
        'COLL_ID_DIR=$0/rank$SLURM_PROCID exec "$1" SLURM_PROCID' "$TMP/ids" "$CHECK"
    ! four_ok && grep -q "wrote no unique id to '$TMP/ids/rank[1-3]/slurm-" "$TMP/out" &&
        grep -q "SLURM_STEP_NODELIST" "$TMP/out"
}
check "id directory not shared: error names the file and the root host" unshared

contradict() {
    run $SRUN bash -c 'SLURM_NTASKS=2 exec "$0" SLURM_PROCID' "$CHECK"
    grep -q "SLURM_PROCID=[23] is out of range for SLURM_NTASKS=2" "$TMP/out"
}
check "SLURM_PROCID >= SLURM_NTASKS: error names both variables" contradict

tap_done
