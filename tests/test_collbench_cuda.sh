#!/usr/bin/env bash
# test_collbench_cuda.sh - collbench --memtype cuda end to end: buffers from cudaMalloc, the
# stream-ordered calls, patterns copied to and from the device and checked, over real ranks
# (shm and tcp), against the CUDA runtime named by FAKECUDART (tests/fakecudart, whose device
# memory faults when host code touches it); then what collbench says without a runtime, for
# collectives that have no stream-ordered call and for a device that does not exist. TAP.
#
#   tests/test_collbench_cuda.sh COLLRUN COLLBENCH FAKECUDART [COLLBENCH_HOOKED]
#
# COLLBENCH_HOOKED (collbench built with -DCOLLBENCH_TEST_HOOKS) flips an element of one
# rank's result after it is read back from the device, so that the check is seen to catch
# it. Sizes are small and a staging memory of 64 KiB makes the larger ones several pieces.
# shellcheck disable=SC2016
set -u

USAGE="usage: test_collbench_cuda.sh COLLRUN COLLBENCH FAKECUDART [COLLBENCH_HOOKED]"
COLLRUN=${1:?$USAGE}
COLLBENCH=${2:?$USAGE}
FAKECUDART=${3:?$USAGE}
HOOKED=${4:-}
GUARD="timeout -k 5 60"
export COLL_TIMEOUT_MS=30000 COLL_CUDA_STAGING_BYTES=65536
# As a GPU does: while a host function blocks, no other stream's copy or kernel runs.
export COLL_FAKECUDA_HOSTFN_HOLDS=1 COLL_FAKECUDA_MALLOC_SYNC=1
# Device buffers staged through page-locked host memory over the transport under test
# (CUDA IPC between the ranks of one host, which would bypass it, is tested on its own).
export COLL_CUDA_IPC=0
unset COLL_CUDA_DISABLE COLL_TRANSPORT

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 15" "$TMP/out" "$TMP/err"; }

# cuda NP ARGS...: collbench --memtype cuda under collrun with the emulated runtime;
# bench ARGS...: collbench alone. Output in $TMP/out and err, status in $rc.
cuda() {
    local np=$1
    shift
    COLL_CUDA_LIBRARY=$FAKECUDART $GUARD "$COLLRUN" -n "$np" --timeout 60 "$COLLBENCH" \
        --memtype cuda "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
bench() {
    $GUARD "$COLLBENCH" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
rows() { grep -cE '^ +[0-9]+ ' "$TMP/out"; }
# every row checked (a number, not N/A, in each #wrong column that ran) and right
all_checked_right() {
    [ "$(rows)" -gt 0 ] &&
        awk '$1 ~ /^[0-9]+$/ { if (NF != 13 || $9 != "0" || ($13 != "0" && $10 != "N/A")) bad++ }
             END { exit bad ? 1 : 0 }' "$TMP/out" &&
        grep -q '^# Out of bounds values : 0 OK$' "$TMP/out"
}
says_cuda() {
    grep -q '^# Using CUDA device memory' "$TMP/out" &&
        grep -q '"memtype": "cuda"' "$TMP/run.json"
}

[ -r "$FAKECUDART" ] || skip_all "no emulated CUDA runtime at '$FAKECUDART'"

# ---------------------------------------------------------------------------------------
# Every collective with a stream-ordered call, checked on 2 ranks over shm and tcp: sizes
# from one element to 4 pieces of staging, out of place and in place.
for t in shm tcp; do
    for c in allreduce broadcast reduce allgather reducescatter alltoall sendrecv; do
        ops=sum
        place=
        case $c in
        allreduce | reducescatter) ops=all ;;
        sendrecv) place=--outofplace-only ;; # in place it is timed, not checked (nccl-tests)
        esac
        COLL_TRANSPORT=$t cuda 2 "$c" -b 8 -e 32K -f 64 -o "$ops" -r 1 -n 1 -w 0 -c 1 \
            --json "$TMP/run.json" ${place:+"$place"}
        if [ "$rc" = 0 ] && all_checked_right && says_cuda; then
            ok "$c, 2 ranks, $t, device buffers: $(rows) rows checked right, JSON memtype cuda"
        else
            not_ok "$c, 2 ranks, $t, device buffers: every row checked right" "exit status $rc"
        fi
    done
done
# The broadcast above checked root 1: a device-resident root. Every dtype once, over pieces.
COLL_TRANSPORT=shm cuda 2 allreduce -b 256K -e 256K -d all -n 1 -w 0 -c 1 --json "$TMP/run.json"
check "allreduce 256 KiB (32 staging pieces), every dtype: checked right" \
    eval '[ "$rc" = 0 ] && all_checked_right && [ "$(rows)" = 12 ]'

# -m 2 (a group of stream-ordered calls), -z 1 (a synchronize per call), -c 2.
COLL_TRANSPORT=shm cuda 2 allreduce -b 4K -e 64K -f 16 -m 2 -z 1 -n 2 -w 1 -c 2 \
    --json "$TMP/run.json"
check "-m 2 -z 1 -c 2 on device buffers: checked right" \
    eval '[ "$rc" = 0 ] && all_checked_right'

# Two devices: rank r takes device r (its local rank), as nccl-tests; --device pins one.
COLL_FAKECUDA_DEVICES=2 cuda 2 allreduce -b 1K -e 1K -n 1 -w 0 --json "$TMP/run.json"
check "2 devices: ranks 0 and 1 on devices 0 and 1 (header and JSON)" \
    eval '[ "$rc" = 0 ] && grep -q "Rank  1 Pid .* device  1$" "$TMP/out" &&
          grep -q "\"rank\": 1, .*\"cuda_device\": 1}" "$TMP/run.json"'
COLL_FAKECUDA_DEVICES=2 cuda 2 allreduce -b 1K -e 1K -n 1 -w 0 --device 1 \
    --json "$TMP/run.json"
check "--device 1: both ranks on device 1" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "device  1$" "$TMP/out")" = 2 ] && all_checked_right'

# Through CUDA IPC (3 ranks on 3 devices, forced): pieces reduced from the peers' scratch,
# and collbench's own host collectives between the timed calls do not run into the IPC
# barriers (the last piece is released only after the last barrier).
for c in allreduce broadcast reduce; do
    COLL_CUDA_IPC=1 COLL_FAKECUDA_DEVICES=3 cuda 3 "$c" -b 8 -e 1M -f 8 -n 2 -w 1 -c 1 \
        --json "$TMP/run.json"
    check "$c through CUDA IPC, 3 ranks on 3 devices, 8 B to 256 KiB: checked right" \
        eval '[ "$rc" = 0 ] && all_checked_right && [ "$(rows)" = 6 ]'
done

# A wrong element in a result read back from the device is reported.
if [ -n "$HOOKED" ]; then
    COLLBENCH_FAULT=elem COLL_CUDA_LIBRARY=$FAKECUDART $GUARD "$COLLRUN" -n 2 --timeout 60 \
        "$HOOKED" allgather --memtype cuda -b 4K -e 4K -n 1 -w 0 -c 1 \
        >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    check "a flipped element of a device result: FAILED, exit 1" \
        eval '[ "$rc" = 1 ] && grep -q "^# Out of bounds values : [1-9][0-9]* FAILED$" "$TMP/out"'
    # a rank that never calls: -T aborts the comm, which releases the other's stream
    COLLBENCH_FAULT=hang COLL_CUDA_LIBRARY=$FAKECUDART $GUARD "$COLLRUN" -n 2 --timeout 60 \
        "$HOOKED" allreduce --memtype cuda -b 64K -e 64K -n 1 -w 0 -c 1 -T 1 \
        >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    # (124 from the rank whose -T fired first; 1 when a peer's abort reached it before)
    check "a rank stalls in a device collective: -T fires, every rank ends (exit $rc)" \
        eval '{ [ "$rc" = 124 ] || [ "$rc" = 1 ]; } && grep -q "test timeout" "$TMP/err"'
else
    skip "a flipped element of a device result" "no COLLBENCH_HOOKED"
    skip "a rank stalls in a device collective" "no COLLBENCH_HOOKED"
fi

# ---------------------------------------------------------------------------------------
# The chooser names the stream path for a call on device buffers (src/path/path.h), with its
# reason and its row of the cost model beside the host paths' (staging here: COLL_CUDA_IPC=0).
COLL_CUDA_LIBRARY=$FAKECUDART bench allreduce --memtype cuda --explain --np 2 -b 64K -e 64K
check "--explain --memtype cuda: the stream path, staging, priced beside the host rows" \
    eval '[ "$rc" = 0 ] && grep -qE "^ +65536 +16384 +stream " "$TMP/out" &&
          grep -qE "selector: stream-ordered, device buffers through page-locked staging.*\[priced: stream [0-9.]+ us, .*sched [a-z]+ [0-9.]+ us\]" "$TMP/out"'
cuda 2 allreduce -b 64K -e 64K -n 1 -w 0 --json "$TMP/run.json"
check "a run on device buffers records the stream path as what ran it" \
    eval '[ "$rc" = 0 ] && grep -q "\"algo\": \"stream\"" "$TMP/run.json"'

# ---------------------------------------------------------------------------------------
# Without a runtime, without a stream-ordered call, without the device: a message, no crash.
COLL_CUDA_LIBRARY=/nonexistent/libcudart.so bench allreduce --memtype cuda -b 8 -e 8
check "no CUDA runtime: exit 1, 'no usable CUDA runtime', names the library" \
    eval '[ "$rc" = 1 ] && grep -q "no usable CUDA runtime" "$TMP/err" &&
          grep -q "/nonexistent/libcudart.so" "$TMP/err"'
COLL_CUDA_LIBRARY=/nonexistent/libcudart.so $GUARD "$COLLRUN" -n 2 --timeout 60 "$COLLBENCH" \
    allreduce --memtype cuda -b 8 -e 8 >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
check "no CUDA runtime under collrun -n 2: exit 1, one message" \
    eval '[ "$rc" = 1 ] && [ "$(grep -c "no usable CUDA runtime" "$TMP/err")" = 1 ]'
COLL_CUDA_DISABLE=1 COLL_CUDA_LIBRARY=$FAKECUDART bench allreduce --memtype cuda -b 8 -e 8
check "COLL_CUDA_DISABLE=1: exit 1, says CUDA is disabled" \
    eval '[ "$rc" = 1 ] && grep -q "COLL_CUDA_DISABLE" "$TMP/err"'
for c in gather scatter barrier; do
    COLL_CUDA_LIBRARY=$FAKECUDART bench "$c" --memtype cuda -b 8 -e 8
    check "$c --memtype cuda: refused (no stream-ordered call), exit 2" \
        eval '[ "$rc" = 2 ] && grep -q "no stream-ordered $c" "$TMP/err"'
done
COLL_CUDA_LIBRARY=$FAKECUDART bench allreduce --memtype cuda --device 1 -b 8 -e 8
check "--device 1 with one device: exit 2, says how many there are" \
    eval '[ "$rc" = 2 ] && grep -q "sees 1 CUDA device" "$TMP/err"'
bench allreduce --device 0 -b 8 -e 8
check "--device without --memtype cuda: exit 2" \
    eval '[ "$rc" = 2 ] && grep -q "needs --memtype cuda" "$TMP/err"'
bench allreduce --memtype cuda --calibrate
check "--calibrate --memtype cuda: exit 2" eval '[ "$rc" = 2 ] && [ -s "$TMP/err" ]'

tap_done
