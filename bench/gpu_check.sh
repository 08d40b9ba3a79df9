#!/usr/bin/env bash
# bench/gpu_check.sh - the CUDA checks and measurements in one short run on a machine with an
# NVIDIA GPU, from programs built elsewhere (a machine with nvcc and no GPU builds them).
#
#   bench/gpu_check.sh kit [BUILD [KIT]]          on the build machine
#   bench/gpu_check.sh run [KIT [DIR [STAGE...]]]  on the GPU machine
#
# kit: copies the programs a GPU run needs, with their libraries, from BUILD (default
#      build-dev) into KIT (default build-gpukit): collbench, collrun, cuda_rc_bench, libcoll,
#      the NCCL library and the CUDA test programs. The build should need nothing a GPU
#      machine may lack (set it up with -Dhwloc=disabled -Dibverbs=disabled and no pmix:
#      PKG_CONFIG_LIBDIR=/nonexistent meson setup build-dev ...); libcudart is found at run
#      time, as always.
# run: runs STAGEs (default "smoke bench tests") and writes each step's log, a summary
#      (summary.tsv: step, result, seconds) and the bench/gpu.sh results under DIR (default
#      gpu-check), then packs DIR into DIR.tgz. Stages:
#        smoke     collbench on one rank with COLL_DEBUG=INFO (the runtime, the stream waits,
#                  the IPC decision), test_cuda (every kernel against the CPU reference on
#                  the GPU) and the CUDA IPC collectives between 2 processes (mp_cuda_ipc)
#        tests     mp_cuda_ipc (4 processes, staged, a
#                  refused mix, a killed rank), mp_cuda_stream (device buffers over shm and
#                  tcp, bad arguments, a killed rank), nccl_device (NCCL's API on device
#                  buffers); each must pass: a SKIP here is a failure
#        bench     bench/gpu.sh --no-build: the reduce-copy kernels against a device copy
#                  (a step of its own), then collbench --memtype cuda all-reduce with 1, 2
#                  and 4 ranks and PyTorch's NCCL beside it (with COLL_CUDA_IPC=0 where the
#                  smoke stage saw CUDA IPC fail)
#        sanitize  bench/gpu.sh --no-build --sanitize: compute-sanitizer memcheck and
#                  racecheck
#      GPU_CHECK_PACK: where the .tgz goes (default DIR.tgz).
#      GPU_CHECK_BENCH_ARGS: more bench/gpu.sh arguments for the sweeps of the bench stage;
#      GPU_CHECK_KERNELS=0 leaves out its kernel step.
#      GPU_CHECK_BUDGET (seconds, default 420) bounds the whole run: a step gets what is
#      left, and a step with under 15 s left is not started ("no time").
# Exit status: 0 every step passed; 1 a step failed or did not run; 2 bad arguments.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

bad() { echo "gpu_check.sh: $*" >&2; exit 2; }

if [ "${1:-}" = kit ]; then
    build=${2:-build-dev} kit=${3:-build-gpukit}
    [ -x "$build/collbench" ] || bad "no $build/collbench: build $build first"
    rm -rf "$kit"
    mkdir -p "$kit/tests" "$kit/src/compat"
    cp -a "$build"/collbench "$build"/collrun "$build"/cuda_rc_bench "$build"/libcoll.so* "$kit/"
    for t in test_cuda mp_cuda_ipc mp_cuda_stream nccl_device libcoll_fakecudart.so; do
        cp -a "$build/tests/$t" "$kit/tests/" || bad "no $build/tests/$t (build the tests)"
    done
    cp -a "$build"/src/compat/libnccl.so* "$kit/src/compat/"
    if command -v ldd >/dev/null; then
        ldd "$kit"/collbench "$kit"/collrun "$kit"/tests/* 2>/dev/null |
            grep -E 'hwloc|ibverbs|pmix' && bad "$build links hwloc, ibverbs or pmix"
    fi
    du -sh "$kit"
    exit 0
fi
[ "${1:-}" = run ] || bad "usage: bench/gpu_check.sh kit [BUILD [KIT]] | run [KIT [DIR [STAGE...]]]"
kit=${2:-build-gpukit}
dir=${3:-gpu-check}
shift $(($# < 3 ? $# : 3))
stages=${*:-smoke bench tests}
for s in $stages; do
    case $s in smoke | tests | bench | sanitize) ;; *) bad "unknown stage '$s'" ;; esac
done
[ -x "$kit/collbench" ] || bad "no $kit/collbench: make the kit with 'bench/gpu_check.sh kit'"
budget=${GPU_CHECK_BUDGET:-420}
start=$(date +%s)
deadline=$((start + budget))
rm -rf "$dir"
mkdir -p "$dir"
summary=$dir/summary.tsv
printf 'step\tresult\tseconds\n' >"$summary"
failed=0

pack() { tar czf "${GPU_CHECK_PACK:-$dir.tgz}" -C "$(dirname "$dir")" "$(basename "$dir")" 2>/dev/null || true; }

# step NAME TIMEOUT CMD...: runs CMD under the time left, logs it, records the result.
# TAP "not ok", a "# SKIP" or a non-zero exit is a failure.
step() {
    local name=$1 limit=$2 left rc=0 t0 t1 result
    shift 2
    left=$((deadline - $(date +%s) - 5))
    if [ "$left" -lt 15 ]; then
        printf '%s\tno time\t0\n' "$name" >>"$summary"
        failed=1
        return
    fi
    [ "$limit" -le "$left" ] || limit=$left
    echo "== $name (up to ${limit}s)"
    t0=$(date +%s.%N)
    timeout -k 5 "$limit" "$@" >"$dir/$name.log" 2>&1 </dev/null || rc=$?
    t1=$(date +%s.%N)
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        result="timed out"
    elif [ "$rc" != 0 ]; then
        result="failed ($rc)"
    elif grep -q -E '^not ok|# SKIP' "$dir/$name.log"; then
        result="failed (not ok or SKIP)"
    else
        result=passed
    fi
    [ "$result" = passed ] || failed=1
    awk -v n="$name" -v r="$result" -v a="$t0" -v b="$t1" \
        'BEGIN { printf "%s\t%s\t%.1f\n", n, r, b - a }' >>"$summary"
    echo "   $result"
    [ "$result" = passed ] || tail -n 15 "$dir/$name.log" | sed 's/^/   | /'
    pack
}

# ---- the machine and the runtime ---------------------------------------------------------
{
    date -u +%FT%TZ
    uname -a
    nvidia-smi 2>&1 || echo "no nvidia-smi"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm \
        --format=csv 2>&1 || true
    command -v nvcc && nvcc --version | tail -n 2
    command -v compute-sanitizer || echo "no compute-sanitizer on PATH"
    df -h /dev/shm
    nproc
} >"$dir/machine.log" 2>&1
if [ -z "${COLL_CUDA_LIBRARY:-}" ]; then
    for c in $(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.13 /{print $NF}') \
        /usr/local/cuda/lib64/libcudart.so.13 \
        /usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13 \
        $(find /usr /opt -name 'libcudart.so.13' 2>/dev/null | head -n 3); do
        if [ -e "$c" ]; then
            COLL_CUDA_LIBRARY=$c
            break
        fi
    done
fi
[ -n "${COLL_CUDA_LIBRARY:-}" ] || { echo "no libcudart.so.13 found" | tee -a "$dir/machine.log"; }
export COLL_CUDA_LIBRARY
echo "COLL_CUDA_LIBRARY=$COLL_CUDA_LIBRARY" | tee -a "$dir/machine.log"
head -n 30 "$dir/machine.log" | grep -E 'NVIDIA|Driver|CUDA|name,' || true

export K=$kit T=$kit/tests
# shellcheck disable=SC2317 # ipc and stream run through bash -c (export -f)
ipc() { # MODE NP IPC: mp_cuda_ipc as CI runs it, on the real runtime
    env COLL_CUDA_STAGING_BYTES=65536 COLL_CUDA_IPC="$3" \
        COLL_TIMEOUT_MS="$([ "$1" = kill ] && echo 10000 || echo 30000)" \
        "$K/collrun" -n "$2" --timeout 50 "$T/mp_cuda_ipc" "$1"
}
# shellcheck disable=SC2317
stream() { # MODE NP TRANSPORT
    env COLL_CUDA_STAGING_BYTES=65536 COLL_TRANSPORT="$3" \
        COLL_CUDA_IPC="$([ "$3" = tcp ] && echo 0 || echo auto)" \
        COLL_TIMEOUT_MS="$([ "$1" = kill ] && echo 10000 || echo 30000)" \
        "$K/collrun" -n "$2" --timeout 50 "$T/mp_cuda_stream" "$1"
}
export -f ipc stream
for s in $stages; do
    case $s in
    smoke)
        # one rank, device buffers, with the library's INFO lines: which runtime, which way
        # streams wait (cuStreamWaitValue32 or host functions), whether IPC was taken
        step probe_np1 60 env COLL_DEBUG=INFO "$K/collbench" allreduce --memtype cuda \
            -b 8 -e 1M -f 32 -n 5 -w 1 -c 1
        step test_cuda 120 "$T/test_cuda"
        step mp_cuda_ipc_colls_np2 60 bash -c 'ipc colls 2 1'
        ;;
    tests)
        step mp_cuda_ipc_colls_np4 60 bash -c 'ipc colls 4 1'
        step mp_cuda_ipc_staged_np2 60 bash -c 'ipc staged 2 0'
        step mp_cuda_ipc_forced_np2 60 bash -c 'ipc forced 2 ""'
        step mp_cuda_ipc_kill_np4 60 bash -c 'ipc kill 4 1'
        step mp_cuda_stream_all_np2_shm 60 bash -c 'stream all 2 shm'
        step mp_cuda_stream_all_np2_tcp 60 bash -c 'stream all 2 tcp'
        step mp_cuda_stream_all_np4_shm 60 bash -c 'stream all 4 shm'
        step mp_cuda_stream_badargs_np2_shm 60 bash -c 'stream badargs 2 shm'
        step mp_cuda_stream_kill_np2_shm 60 bash -c 'stream kill 2 shm'
        step nccl_device_colls_np2 60 env COLL_CUDA_STAGING_BYTES=65536 COLL_TIMEOUT_MS=30000 \
            "$K/collrun" -n 2 --timeout 50 "$T/nccl_device" colls
        ;;
    bench)
        # the kernels first, on their own: they need no collective path
        [ "${GPU_CHECK_KERNELS:-1}" = 0 ] ||
            step gpu_kernels 120 bench/gpu.sh --build "$K" --no-build --out "$dir/results" \
                --no-colls
        # where the smoke stage saw CUDA IPC fail, the sweeps measure staging instead
        ipc_env=
        if awk -F '\t' '$1 == "mp_cuda_ipc_colls_np2" && $2 != "passed" { f = 1 }
                END { exit !f }' "$summary"; then
            ipc_env=COLL_CUDA_IPC=0
            echo "   (CUDA IPC failed in the smoke stage: the sweeps run with $ipc_env)"
        fi
        # shellcheck disable=SC2086
        step gpu_bench 200 env $ipc_env bench/gpu.sh --build "$K" --no-build \
            --out "$dir/results" --no-kernels ${GPU_CHECK_BENCH_ARGS:-}
        ;;
    sanitize)
        step gpu_sanitize 400 bench/gpu.sh --build "$K" --no-build --out "$dir/results" \
            --no-colls --no-kernels --sanitize
        ;;
    esac
done
pack
echo "== summary ($(($(date +%s) - start)) s)"
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
for md in "$dir"/results/gpu-kernels.md "$dir"/results/gpu-allreduce.md "$dir"/results/gpu-sanitize.md; do
    [ -f "$md" ] && { echo "== $md"; grep '^|' "$md"; }
done
exit $failed
