#!/usr/bin/env bash
# test_elastic.sh - dptrain --elastic: the survivors of a SIGKILL shrink and go on, restarted
# processes join through coll_comm_grow, and nothing hangs or diverges.
#
#   tests/test_elastic.sh path/to/dptrain path/to/elastic_soak.py
#
# Prints TAP. A deterministic death inside an all-reduce (DDP and Streaming DiLoCo) with a
# joiner afterwards, then a short soak (bench/elastic_soak.py): 4 ranks, deaths inside an
# all-reduce, during a checkpoint, while rank 0 offers a join and right after a joiner took
# its offer, plus timed SIGKILLs; the run must end, every recovery resynced the replicas bit
# for bit (dptrain ends the process when they differ), and the accuracy is within 0.5 point
# of an undisturbed run. Each part takes seconds.
set -u

DPTRAIN=${1:?usage: test_elastic.sh DPTRAIN SOAK}
SOAK=${2:?usage: test_elastic.sh DPTRAIN SOAK}
GUARD="timeout -k 5 100"
export COLL_TIMEOUT_MS=${COLL_TIMEOUT_MS:-60000}

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 25" "$TMP"/out.*; }
PIDS=()
tap_cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; }

COMMON=(--synthetic 3000 --sizes 128,64,10 --batch 48 --seed 3 --log-every 100)

# death N VICTIM POINT ARGS...: N first members, VICTIM dies at POINT; a joiner starts once
# the victim is gone. Leaves the outputs in $TMP/out.*.
death() {
    local n=$1 victim=$2 point=$3 dir
    shift 3
    rm -f "$TMP"/out.*
    dir=$(mktemp -d "$TMP/dir.XXXX")
    PIDS=()
    for ((r = 0; r < n; r++)); do
        local die=()
        [ "$r" = "$victim" ] && die=(--die-at "$point")
        $GUARD "$DPTRAIN" "${COMMON[@]}" "$@" --elastic "$dir" --rank "$r" --world "$n" \
            "${die[@]}" >"$TMP/out.$r" 2>&1 &
        PIDS+=($!)
    done
    wait "${PIDS[$victim]}"
    $GUARD "$DPTRAIN" "${COMMON[@]}" "$@" --elastic "$dir" --join-timeout 30 \
        >"$TMP/out.joiner" 2>&1 &
    PIDS+=($!)
    local fail=0
    for ((r = 0; r <= n; r++)); do
        [ "$r" = "$victim" ] && continue
        wait "${PIDS[$r]}" || fail=1
    done
    return $fail
}

# 1. DDP: rank 2 of 3 dies inside a gradient all-reduce at step 10.
if death 3 2 allreduce:10 --steps 600; then
    ok "DDP: the survivors and the joiner finish after a death inside an all-reduce"
else
    not_ok "DDP: the survivors and the joiner finish after a death inside an all-reduce"
fi
check "DDP: the recovery says what was lost and where the run went on" \
    grep -q "elastic: recovery 1: lost rank(s) 2 (pid [0-9]*), 3 -> 2 ranks; resumed at step 1[01] " \
    "$TMP/out.0"
check "DDP: the restarted process joined through grow and took the state" \
    grep -q "elastic: grow 1: 1 rank(s) joined at step" "$TMP/out.0"
check "DDP: every replica ends with identical parameters" \
    grep -q "replicas: all 3 hold identical parameters" "$TMP/out.0"
check "DDP: the joiner was admitted" grep -q "joined as rank 2 of 3" "$TMP/out.joiner"

# 2. Streaming DiLoCo, overlapped: rank 1 of 3 dies in an outer all-reduce.
if death 3 1 allreduce:12 --steps 400 --optim adamw --diloco 6 --fragments 2 --overlap 1; then
    ok "Streaming DiLoCo: the survivors and the joiner finish after a death in an outer sync"
else
    not_ok "Streaming DiLoCo: the survivors and the joiner finish after a death in an outer sync"
fi
check "Streaming DiLoCo: the recovery dropped the inner steps since the last outer step" \
    grep -q "elastic: recovery 1: lost rank(s) 1 .*DiLoCo: inner steps since the last outer" \
    "$TMP/out.0"
check "Streaming DiLoCo: every replica ends with identical parameters" \
    grep -q "replicas: all 3 hold identical parameters" "$TMP/out.0"

# 3. Flags.
"$DPTRAIN" --rank 0 --world 2 >"$TMP/out.flags" 2>&1
check "--rank without --elastic is a usage error" test $? = 2
"$DPTRAIN" --elastic "$TMP" --quant int8 >"$TMP/out.flags" 2>&1
check "--elastic with --quant is a usage error" test $? = 2
start=$(date +%s)
$GUARD "$DPTRAIN" "${COMMON[@]}" --elastic "$(mktemp -d "$TMP/dir.XXXX")" --join-timeout 1 \
    >"$TMP/out.lone" 2>&1
rc=$?
check "a joiner with no job fails after --join-timeout, not later" \
    test "$rc" = 1 -a $(($(date +%s) - start)) -lt 10
check "... and says why" grep -q "not admitted within --join-timeout\|no offer to join" \
    "$TMP/out.lone"

# 4. The short soak.
if $GUARD python3 "$SOAK" --dptrain "$DPTRAIN" --np 4 --kill-every 1.5 --restart-after 0.5 \
    --points --point-steps 50,1500 --reference --timeout 80 --seed 5 -- \
    "${COMMON[@]}" --steps 4000 --eval-every 1000 --ckpt "$TMP/soak.ckpt" --ckpt-every 40 \
    >"$TMP/out.soak" 2>&1; then
    ok "soak: the run ends, the replicas agree, accuracy within 0.5 point of undisturbed"
else
    not_ok "soak: the run ends, the replicas agree, accuracy within 0.5 point of undisturbed"
fi
n=$(grep -c "^elastic: failure" "$TMP/out.soak")
check "soak: the planted deaths and timed kills were recovered ($n recoveries)" test "$n" -ge 3
check "soak: restarted processes joined" grep -q "^elastic: join" "$TMP/out.soak"

tap_done
