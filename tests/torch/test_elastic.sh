#!/usr/bin/env bash
# test_elastic.sh - a rank's death under backend="coll", and torchrun --max-restarts over it:
# tests/torch/elastic_check.py at 4 ranks, rank 2 SIGKILLing itself once at step 7 of 20
# (rank 0 checkpoints every 5 steps), under torchrun --max-restarts 1. TAP.
#
#   test_elastic.sh PYTHON PKGDIR (PKGDIR holds the built coll_torch package, or "-": no torch)
#
# Asserted: in the first attempt each of the 3 survivors raised a RuntimeError carrying
# coll's message, within HANG_S of the kill, and its destroy_process_group returned; torchrun
# restarted the group once; in the second attempt every rank resumed from the checkpoint of
# step 5 and ended at step 20 with the value computed locally; torchrun exited 0.
# COLL_TIMEOUT_MS is unset and the group keeps PyTorch's 30-minute timeout, so an error
# within HANG_S comes from the death itself, not from a deadline. HANG_S only tells a hang
# from an answer (the answer takes milliseconds): it is no measure of speed. The survivors
# defer the agent's SIGTERM to the end of a step (elastic_check.py), so a survivor stuck in
# a collective stays stuck until torchrun's SIGKILL 30 s later, and shows as one.
#
# Three kills run: before an all-reduce (torchrun --max-restarts 1, as above), and with no
# restart (survivors only) before the async all-reduce waited on with work.wait(), and
# while every rank waits on a receive from any rank that nobody sends.
set -u
py=$1 pkgdir=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ "$pkgdir" = "-" ]; then
    echo "1..0 # SKIP coll_torch was not built (no PyTorch for $py, or a sanitizer build)"
    exit 0
fi
if ! "$py" -c 'import torch.distributed.run' 2>/dev/null; then
    echo "1..0 # SKIP PyTorch is not importable by $py (python3-torch, libtorch-dev)"
    exit 0
fi
HANG_S=15
NP=4
echo "1..3"
fail=0
n=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A free port from 20000-29999, below Linux's ephemeral range (test_torchrun.sh says why).
port() { "$py" "$here/../free_port.py"; }

# run DIR RESTARTS PHASE: torchrun's output in DIR/out, its status in $rc. --redirects/--tee:
# torchrun 1.13 on Python 3.11 fails without them.
run() {
    local d=$1 restarts=$2 phase=$3 try
    for try in 1 2 3; do
        rm -rf "$d"
        mkdir -p "$d"
        env -u COLL_TIMEOUT_MS PYTHONPATH="$pkgdir${PYTHONPATH:+:$PYTHONPATH}" \
            OMP_NUM_THREADS=1 timeout -k 5 400 "$py" -m torch.distributed.run \
            --redirects 1 --tee 1 --log_dir "$d/logs" --monitor_interval 0.5 \
            --max_restarts "$restarts" --nproc_per_node $NP \
            --master_addr 127.0.0.1 --master_port "$(port)" \
            "$here/elastic_check.py" "$d" --steps 20 --every 5 \
            --kill-rank 2 --kill-step 7 --kill-phase "$phase" >"$d/out" 2>&1
        rc=$?
        if [ $rc -ne 0 ] && grep -q "failed to bind .*Address already in use" "$d/out"; then
            echo "# the store's port was taken before torchrun bound it (try $try)"
            continue
        fi
        return
    done
}

# survivors DIR: the first attempt's 3 survivors each raised coll's error within HANG_S
# and destroyed the group; problems go to stdout as TAP comments.
error_re=', ([0-9.]+) s after the kill: RuntimeError: ProcessGroupColl: .*failed.*: .*rank [0-9]'
survivors() {
    local d=$1 r line s ok=0
    for r in 0 1 3; do
        line=$(grep -h "error in" "$d/report.0.$r" 2>/dev/null)
        # "..., 0.110 s after the kill: RuntimeError: ProcessGroupColl: allreduce failed: a
        # peer failed, ...: rank 1: rank 2 (host, pid 123) exited in the middle of ..."
        if ! [[ $line =~ $error_re ]]; then
            echo "# rank $r raised no coll error in the first attempt: '${line:-nothing}'"
            ok=1
            continue
        fi
        s=${BASH_REMATCH[1]}
        if ! awk -v s="$s" -v m=$HANG_S 'BEGIN { exit !(s <= m) }'; then
            echo "# rank $r: its error came $s s after the kill (more than $HANG_S s: a hang)"
            ok=1
        fi
        if ! grep -q "destroy_process_group after the error took" "$d/report.0.$r"; then
            echo "# rank $r: destroy_process_group after the error did not return"
            ok=1
        fi
        echo "# ${line#*: }" | cut -c1-200
    done
    grep -q "destroy_process_group" "$d/report.0.2" 2>/dev/null &&
        { echo "# rank 2 was not killed"; ok=1; }
    return $ok
}

diag() {
    grep -E "elastic_check|Error|error" "$1/out" | sed 's/^/# /' | head -40
    tail -15 "$1/out" | sed 's/^/# /'
}

# ---- 1: torchrun --max-restarts 1, rank 2 killed before the all-reduce of step 7 --------
n=$((n + 1))
d=$work/restart
run "$d" 1 allreduce
bad=0
survivors "$d" || bad=1
# torchrun makes a log folder per attempt (attempt_0, attempt_1, ...)
attempts=$(find "$d/logs" -mindepth 2 -maxdepth 2 -type d -name 'attempt_*' | wc -l)
if [ "$attempts" -ne 2 ]; then
    echo "# torchrun started the group $attempts times, not twice (one restart)"
    bad=1
fi
# elastic_check.py's recurrence, from step 0, without a checkpoint or a collective
want=$("$py" -c "
v, m = 1, 1000003
for i in range(20):
    v = sum((v * (r + 1) + i) % m for r in range($NP)) % m
print(v)")
for r in $(seq 0 $((NP - 1))); do
    line="rank $r attempt 1: done: step 20 resumed from 5 value \[$want\] expected \[$want\]"
    if ! grep -q "$line" "$d/report.1.$r" 2>/dev/null; then
        echo "# rank $r did not end the second attempt at step 20 with [$want] from step 5"
        bad=1
    fi
done
if [ $rc -ne 0 ]; then
    echo "# torchrun exited $rc"
    bad=1
fi
if [ $bad -eq 0 ]; then
    echo "ok $n - torchrun --max-restarts 1: 3 survivors raised coll's error, one restart," \
        "all $NP ranks resumed from step 5 and ended at step 20 with $want"
else
    diag "$d"
    echo "not ok $n - torchrun --max-restarts 1 over a rank's SIGKILL"
    fail=1
fi

# ---- 2: no restart, rank 2 killed before an async all-reduce: work.wait() raises ---------
n=$((n + 1))
d=$work/async
run "$d" 0 async
bad=0
survivors "$d" || bad=1
for r in 0 1 3; do
    grep -q "error in async at step 7" "$d/report.0.$r" 2>/dev/null ||
        { echo "# rank $r: the error did not come from work.wait() of step 7"; bad=1; }
done
if [ $rc -eq 0 ]; then
    echo "# torchrun exited 0 with a rank killed and no restart"
    bad=1
fi
if [ $bad -eq 0 ]; then
    echo "ok $n - async all_reduce: work.wait() raised coll's error on the 3 survivors"
else
    diag "$d"
    echo "not ok $n - a rank's SIGKILL before an async all_reduce"
    fail=1
fi
# ---- 3: no restart, rank 2 killed while all wait on irecv(src=None): the wait raises ----
n=$((n + 1))
d=$work/recv
run "$d" 0 recv
bad=0
survivors "$d" || bad=1
for r in 0 1 3; do
    grep -q "error in recv at step 7, .*the channel from rank 2 failed" "$d/report.0.$r" \
        2>/dev/null || { echo "# rank $r: its receive did not fail for rank 2's death"; bad=1; }
done
if [ $bad -eq 0 ]; then
    echo "ok $n - irecv from any rank: the wait raised on the 3 survivors (rank 2's channel)"
else
    diag "$d"
    echo "not ok $n - a rank's SIGKILL while the others wait on a receive from any rank"
    fail=1
fi
exit $fail
