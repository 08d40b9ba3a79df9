#!/usr/bin/env bash
# test_torchrun.sh - coll under PyTorch's real launcher:
#   /usr/bin/python3 -m torch.distributed.run --no_python
#
#   tests/test_torchrun.sh path/to/collbench path/to/launch_check
#
# Cases (each torchrun start costs seconds of Python imports, so there are only two; collbench
# under torchrun is in docs/multihost.md): the static rendezvous (the id goes through the agent's TCPStore on MASTER_PORT),
# the c10d rendezvous (nobody serves MASTER_PORT; rank 0 serves the id there), and the bad
# inputs of the torch environment run without torchrun (a name that does not resolve, a
# store nobody serves, RANK >= WORLD_SIZE, torchrun's and mpirun's variables disagreeing).
# Prints TAP; SKIPs when python3-torch is not installed.
set -u

COLLBENCH=$(readlink -f "${1:?usage: test_torchrun.sh COLLBENCH LAUNCH_CHECK}")
: "$COLLBENCH" # same arguments as the other launcher tests
CHECK=$(readlink -f "${2:?usage: test_torchrun.sh COLLBENCH LAUNCH_CHECK}")
PY=/usr/bin/python3

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
# the ranks' own lines first: torch's traceback after them is long
ranks_lines() { grep -E 'launch_check|coll (WARN|ERROR)' | head -n 20; }
tap_diag() { tap_show ranks_lines "$TMP/out"; tap_show "tail -n 25" "$TMP/out"; }

[ -x "$PY" ] && "$PY" -c 'import torch.distributed.run' 2>/dev/null ||
    skip_all "python3-torch is not installed (apt-get install python3-torch)"

run() { "$@" >"$TMP/out" 2>&1; }

export OMP_NUM_THREADS=1 COLL_TIMEOUT_MS=30000 COLL_BOOTSTRAP_TIMEOUT_MS=20000
# A free port for each run: torchrun's agent binds MASTER_PORT itself. Taken from
# 20000-29999, below Linux's ephemeral range, so that no socket bound to port 0 meanwhile
# (another rank's listener, a client) can be handed it before torchrun binds it.
port() { "$PY" "$(dirname "${BASH_SOURCE[0]}")/free_port.py"; }
# Debian's torch 1.13 on Python 3.11 cannot parse --redirects/--tee 0 (enum Flag change), so
# every run tees stdout (1) into a log directory and keeps it on the console.
TR="timeout -k 5 60 $PY -m torch.distributed.run --redirects 1 --tee 1 --monitor_interval 0.2"

static_ok() {
    run $TR --log_dir "$TMP/l1" --nproc_per_node 4 --master_addr 127.0.0.1 \
        --master_port "$(port)" --no_python "$CHECK" RANK WORLD_SIZE &&
        [ "$(grep -c 'launch_check: rank [0-3] of 4 .* OK' "$TMP/out")" -eq 4 ]
}
check "torchrun --nproc_per_node 4 (agent store): launch_check, two comms" static_ok

# Under c10d, torchrun's agent picks MASTER_PORT by binding port 0 and lets it go before rank
# 0 binds it seconds later: any socket bound to port 0 meanwhile on this machine (another
# test's rank, a comm's listener) can take it for good, which rank 0 reports as "Address
# already in use" after waiting 5 s. That is torchrun's race, not coll's: one more try then.
c10d_once() {
    run $TR --log_dir "$TMP/l3" --nproc_per_node 3 --rdzv_backend c10d \
        --rdzv_endpoint "127.0.0.1:$(port)" --no_python "$CHECK" RANK WORLD_SIZE &&
        [ "$(grep -c 'launch_check: rank [0-2] of 3 .* OK' "$TMP/out")" -eq 3 ]
}
c10d_ok() {
    c10d_once && return 0
    grep -q "cannot serve the unique id on MASTER_PORT=.*Address already in use" "$TMP/out" ||
        return 1
    echo "# MASTER_PORT was taken meanwhile (torchrun's race); once more"
    c10d_once
}
check "torchrun c10d rendezvous (rank 0 serves MASTER_PORT): launch_check" c10d_ok

# ---- bad input, in the environment torchrun would set ----------------------------------
torch_env() {
    env -u COLL_UNIQUE_ID -u COLL_RANK -u COLL_SIZE -u OMPI_COMM_WORLD_RANK \
        -u OMPI_COMM_WORLD_SIZE -u SLURM_PROCID TORCHELASTIC_USE_AGENT_STORE=True \
        COLL_BOOTSTRAP_TIMEOUT_MS=1500 "$@"
}
noresolve() {
    ! run torch_env MASTER_ADDR=no-such-host.invalid MASTER_PORT=29999 RANK=1 WORLD_SIZE=2 \
        "$CHECK" RANK && grep -q "MASTER_ADDR='no-such-host.invalid'.*does not resolve" "$TMP/out"
}
check "MASTER_ADDR that does not resolve: error names it" noresolve

unreachable() {
    local p
    p=$(port)
    ! run torch_env MASTER_ADDR=127.0.0.1 MASTER_PORT="$p" RANK=1 WORLD_SIZE=2 "$CHECK" RANK &&
        grep -q "MASTER_ADDR='127.0.0.1' MASTER_PORT=$p is not reachable within 1500 ms" "$TMP/out"
}
check "nobody serves MASTER_PORT: error names it within the timeout" unreachable

rank_range() {
    ! run torch_env MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 RANK=4 WORLD_SIZE=4 "$CHECK" RANK &&
        grep -q "RANK=4 is out of range for WORLD_SIZE=4" "$TMP/out"
}
check "RANK >= WORLD_SIZE: error names both" rank_range

missing() {
    ! run torch_env MASTER_PORT=29999 RANK=0 WORLD_SIZE=2 "$CHECK" RANK &&
        grep -q "MASTER_ADDR is not set" "$TMP/out"
}
check "MASTER_ADDR missing: error names it" missing

disagree() {
    ! run torch_env MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 RANK=1 WORLD_SIZE=4 \
        OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4 "$CHECK" RANK &&
        grep -q "launcher environments disagree: torchrun's RANK=1.*OMPI_COMM_WORLD_RANK=2" \
            "$TMP/out"
}
check "torchrun's and mpirun's variables disagree: error names both" disagree

tap_done
