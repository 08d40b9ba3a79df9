#!/usr/bin/env bash
# test_gpu_check.sh - bench/gpu_check.sh, the GPU checks in one timed run, against the CUDA
# runtime emulation (tests/fakecudart) with a stand-in nvidia-smi, the build directory as
# the kit. On a healthy runtime the smoke, tests and bench stages pass, the summary lists
# every step and the results are packed. With the first reduce-copy kernel of every process
# corrupted (COLL_FAKECUDA_CORRUPT_RC=1), the smoke stage fails, the run exits 1, and the
# sweeps fall back to staging (COLL_CUDA_IPC=0), as they would on a GPU where CUDA IPC
# failed. The emulator's times mean nothing. TAP.
#
#   tests/test_gpu_check.sh SRCDIR BUILDDIR FAKECUDART
set -u

USAGE="usage: test_gpu_check.sh SRCDIR BUILDDIR FAKECUDART"
SRC=${1:?$USAGE}
BUILD=${2:?$USAGE}
FAKECUDART=${3:?$USAGE}
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

mkdir -p "$TMP/bin"
printf '#!/bin/sh\necho "GPU 0: Emulated (UUID: none)"\n' >"$TMP/bin/nvidia-smi"
chmod +x "$TMP/bin/nvidia-smi"
export PATH="$TMP/bin:$PATH" COLL_CUDA_LIBRARY=$FAKECUDART COLL_FAKECUDA_DEVICES=2
export COLL_FAKECUDA_HOSTFN_HOLDS=1 COLL_FAKECUDA_MALLOC_SYNC=1 COLL_FAKECUDA_DELAY_US=0
export GPU_CHECK_KERNELS=0 GPU_CHECK_BENCH_ARGS="-e 64K -f 64 -n 2 -w 1 --no-torch"
export GPU_CHECK_BUDGET=300
unset COLL_CUDA_DISABLE COLL_CUDA_IPC COLL_TRANSPORT COLL_FAKECUDA_CORRUPT_RC

result() { # DIR STEP: the step's result in the summary
    awk -F '\t' -v s="$2" '$1 == s { print $2 }' "$1/summary.tsv"
}

# ---- a healthy runtime -------------------------------------------------------------------
GC=$TMP/good
rc=0
timeout -k 5 240 bash "$SRC/bench/gpu_check.sh" run "$BUILD" "$GC" smoke tests bench \
    >"$TMP/good.out" 2>&1 || rc=$?
tap_diag() { tap_show "tail -n 25" "$TMP/good.out"; }
check "healthy: exit 0" [ "$rc" = 0 ]
steps=$(awk -F '\t' 'NR > 1 { n++ } END { print n + 0 }' "$GC/summary.tsv" 2>/dev/null)
check "healthy: 14 steps in the summary ($steps)" [ "$steps" = 14 ]
bad=$(awk -F '\t' 'NR > 1 && $2 != "passed"' "$GC/summary.tsv" 2>/dev/null)
check "healthy: every step passed" [ -z "$bad" ]
check "healthy: the probe logged the stream waits" \
    grep -q "stream waits: cuStreamWaitValue32" "$GC/probe_np1.log"
check "healthy: results packed" tar tzf "$GC.tgz" good/summary.tsv
check "healthy: the sweep table" grep -q '^| 8 |' "$GC/results/gpu-allreduce.md"
check "healthy: the sweeps kept CUDA IPC" bash -c "! grep -q 'sweeps run with' '$TMP/good.out'"

# ---- every process's first reduce-copy kernel corrupted ------------------------------------
GC=$TMP/bad
rc=0
COLL_FAKECUDA_CORRUPT_RC=1 timeout -k 5 240 bash "$SRC/bench/gpu_check.sh" run "$BUILD" "$GC" \
    smoke bench >"$TMP/bad.out" 2>&1 || rc=$?
tap_diag() { tap_show "tail -n 25" "$TMP/bad.out"; }
check "corrupted kernel: exit 1 ($rc)" [ "$rc" = 1 ]
check "corrupted kernel: test_cuda failed" [ "$(result "$GC" test_cuda)" != passed ]
check "corrupted kernel: mp_cuda_ipc failed" \
    [ "$(result "$GC" mp_cuda_ipc_colls_np2)" != passed ]
check "corrupted kernel: the sweeps fell back to staging" \
    grep -q "sweeps run with COLL_CUDA_IPC=0" "$TMP/bad.out"
check "corrupted kernel: the staged sweeps passed" [ "$(result "$GC" gpu_bench)" = passed ]

# ---- bad arguments -----------------------------------------------------------------------
rc=0
bash "$SRC/bench/gpu_check.sh" run "$BUILD" "$TMP/x" warp >"$TMP/arg.out" 2>&1 || rc=$?
tap_diag() { tap_show cat "$TMP/arg.out"; }
check "an unknown stage: exit 2" [ "$rc" = 2 ]
check "an unknown stage: named" grep -q "unknown stage 'warp'" "$TMP/arg.out"
rc=0
bash "$SRC/bench/gpu_check.sh" run "$TMP/nokit" >"$TMP/arg.out" 2>&1 || rc=$?
check "no kit: exit 2" [ "$rc" = 2 ]
tap_done
