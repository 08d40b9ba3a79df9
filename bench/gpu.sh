#!/usr/bin/env bash
# bench/gpu.sh - coll on an NVIDIA GPU: builds coll, measures the reduce-copy kernels
# against a device-to-device copy (cuda_rc_bench), runs `collbench --memtype cuda` sweeps
# with 1, 2 and 4 ranks on one GPU, and, where PyTorch with CUDA is installed, PyTorch's
# NCCL process group all-reduce on the same sizes beside them; writes the runs as TSV and
# JSON and markdown tables. With --sanitize, also runs NVIDIA's compute-sanitizer.
#
#   bench/gpu.sh [--build DIR] [--out DIR] [--np "1 2 4"] [--colls "allreduce ..."]
#                [--device N] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
#                [--no-torch] [--no-kernels] [--no-colls] [--sanitize] [--python PY]
#                [--no-build] [--dry-run]
#
#   --build DIR    build directory (default build-gpu; set up with meson if missing)
#   --out DIR      where the results go (default docs/results)
#   --np LIST      rank counts, all on the one GPU (default "1 2 4")
#   --colls LIST   collbench collectives (default allreduce; PyTorch runs all-reduce only)
#   --device N     the GPU (default 0): every rank of every run uses it
#   -b, -e, -f     sizes, as collbench (default 8 B to 256 MiB, factor 4)
#   -n, -w         timed and warmup iterations per size (default 20 and 5)
#   --no-torch     collbench only
#   --no-kernels   skip the reduce-copy kernel measurement
#   --no-colls     skip the collbench and PyTorch sweeps (--no-colls --sanitize: kernels
#                  and sanitizers only)
#   --sanitize     also run compute-sanitizer (on PATH, else /usr/local/cuda/bin) with
#                  --tool memcheck (--leak-check full) and --tool racecheck over
#                  build/tests/test_cuda, cuda_rc_bench at 1 to 4 MiB, and
#                  `collrun -n 2 mp_cuda_ipc colls` (CUDA IPC between two ranks on the
#                  GPU, the runtime named by COLL_CUDA_LIBRARY or found as libcudart.so.13
#                  or libcudart.so); builds the tests for it
#   --python PY    the python with PyTorch (default python3)
#   --no-build     use the programs in --build as they are (a kit built on another machine,
#                  see bench/gpu_check.sh); build nothing
#   --dry-run      print what would run; check nothing, run nothing
#
# Writes, under --out:
#   gpu-coll-COLL-npN.json     collbench's records (memtype "cuda"), one file per run
#   gpu-torch-allreduce-npN.json  PyTorch NCCL all-reduce: the same sizes and arithmetic,
#                              or status "refused" with NCCL's reason (NCCL does not run
#                              several ranks on one GPU: "Duplicate GPU detected")
#   gpu-COLL.md                a table: time and busbw per size, coll at each NP beside NCCL
#   gpu-kernels.tsv            cuda_rc_bench: every dtype, sum, 2 and 4 inputs, 1 MiB to
#                              1 GiB; GB/s of bytes read + written, reduce-copy and copy
#   gpu-kernels.md             per dtype and inputs: GB/s and the ratio at the largest
#                              size, the worst ratio from 64 MiB up, met or missed (>= 0.9)
#   gpu-sanitize.md            --sanitize: per tool and program, clean or the error count;
#                              the logs beside it (gpu-sanitize-TOOL-PROGRAM.log)
#
# Timing, both sides alike: the host clock around a batch of calls and the stream
# synchronisation that ends it, per rank, averaged over the ranks; busbw is nccl-tests'
# (all-reduce: algbw x 2(n-1)/n). Results are checked by collbench (-c 1) before timing.
# The kernels are checked against their CPU reference on the GPU before they are timed.
# Exit status: 0 done (a refusal by NCCL or a missed kernel target is a result, not a
# failure); 1 no GPU, a failed build, a failed collbench or cuda_rc_bench run, no
# compute-sanitizer for --sanitize, or a sanitizer run that was not clean; 2 bad arguments.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; }
die() { echo "gpu.sh: $*" >&2; exit 1; }
bad() { echo "gpu.sh: $*" >&2; echo "Try 'bench/gpu.sh --help'." >&2; exit 2; }

build="build-gpu"
out=docs/results
nps="1 2 4"
colls=allreduce
device=0
minb=8
maxb=256M
factor=4
iters=20
warmup=5
torch=1
kernels=1
colls_on=1
sanitize=0
py=python3
dry=0
nobuild=0
while [ $# -gt 0 ]; do
    opt=$1
    case $opt in
    -h | --help) usage; exit 0 ;;
    --no-torch) torch=0; shift; continue ;;
    --no-kernels) kernels=0; shift; continue ;;
    --no-colls) colls_on=0; shift; continue ;;
    --sanitize) sanitize=1; shift; continue ;;
    --dry-run) dry=1; shift; continue ;;
    --no-build) nobuild=1; shift; continue ;;
    --build | --out | --np | --colls | --device | -b | -e | -f | -n | -w | --python) ;;
    *) bad "unknown argument '$opt'" ;;
    esac
    [ $# -ge 2 ] || bad "$opt needs a value"
    val=$2
    shift 2
    case $opt in
    --build) build=$val ;;
    --out) out=$val ;;
    --np) nps=$val ;;
    --colls) colls=$val ;;
    --device) device=$val ;;
    -b) minb=$val ;;
    -e) maxb=$val ;;
    -f) factor=$val ;;
    -n) iters=$val ;;
    -w) warmup=$val ;;
    --python) py=$val ;;
    esac
done
is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }
is_size() { case $1 in '' | *[!0-9KMGkmg]* | [KMGkmg]*) return 1 ;; *) return 0 ;; esac; }
[ -n "$build" ] || bad "--build needs a directory"
[ -n "$out" ] || bad "--out needs a directory"
is_uint "$device" || bad "--device '$device': a device number"
is_size "$minb" || bad "-b '$minb': a size (8, 64K, 256M)"
is_size "$maxb" || bad "-e '$maxb': a size (8, 64K, 256M)"
{ is_uint "$factor" && [ "$factor" -ge 2 ]; } || bad "-f '$factor': a factor of 2 or more"
{ is_uint "$iters" && [ "$iters" -ge 1 ]; } || bad "-n '$iters': one iteration or more"
is_uint "$warmup" || bad "-w '$warmup': a count"
read -r -a np_list <<<"$nps"
[ ${#np_list[@]} -gt 0 ] || bad "--np needs rank counts"
for np in "${np_list[@]}"; do
    { is_uint "$np" && [ "$np" -ge 1 ] && [ "$np" -le 64 ]; } || bad "--np: '$np' is not 1..64"
done
[ -n "$colls" ] || bad "--colls needs collectives"
for c in $colls; do
    case $c in
    allreduce | broadcast | reduce | allgather | reducescatter | alltoall | sendrecv) ;;
    gather | scatter | barrier) bad "--colls: $c has no stream-ordered call (no --memtype cuda)" ;;
    *) bad "--colls: unknown collective '$c'" ;;
    esac
done

[ "$colls_on" = 1 ] || { colls=; torch=0; }

run() {
    echo "+ $*" >&2
    [ "$dry" = 1 ] || "$@"
}

# ---- a GPU, or nothing to do ------------------------------------------------------------
if [ "$dry" = 0 ]; then
    if command -v nvidia-smi >/dev/null 2>&1; then
        gpus=$(nvidia-smi -L 2>/dev/null || true)
    else
        gpus=
    fi
    if [ -z "$gpus" ] && [ ! -e /dev/nvidiactl ]; then
        die "no NVIDIA GPU here (nvidia-smi lists none, no /dev/nvidiactl): nothing measured"
    fi
fi

# ---- build --------------------------------------------------------------------------------
# The sanitizers run two test programs, so --sanitize builds the tests too.
with_tests=false
[ "$sanitize" = 1 ] && with_tests=true
targets="collbench collrun cuda_rc_bench"
[ "$sanitize" = 1 ] && targets="$targets tests/test_cuda tests/mp_cuda_ipc"
if [ "$nobuild" = 1 ]; then
    for t in $targets; do
        [ "$dry" = 1 ] || [ -x "$build/$t" ] || die "--no-build: no $build/$t"
    done
else
    if [ ! -f "$build/build.ninja" ]; then
        run meson setup "$build" -Dtests=$with_tests >&2 || die "meson setup $build failed"
    elif [ "$sanitize" = 1 ]; then
        run meson configure "$build" -Dtests=true >&2 || die "meson configure $build failed"
    fi
    # shellcheck disable=SC2086
    run ninja -C "$build" $targets >&2 || die "the build in $build failed"
fi
collbench=$build/collbench
collrun=$build/collrun
rc_bench=$build/cuda_rc_bench

# collbench itself decides whether the runtime and the device are usable (the same loader
# as the library: COLL_CUDA_LIBRARY, libcudart.so.13, libcudart.so). Only where collectives
# are to run: the kernel stage needs none of the collective paths, so it still measures
# when they are broken.
if [ "$dry" = 0 ]; then
    if [ -n "$colls" ]; then
        probe=$(timeout -k 5 60 "$collbench" allreduce --memtype cuda --device "$device" -b 8 \
            -e 8 -n 1 -w 0 2>&1) ||
            die "collbench cannot use device $device: $(printf '%s\n' "$probe" | tail -n 1)"
    fi
    mkdir -p "$out"
fi

when=$(date -u +%FT%TZ)
gpu_name=unknown
if [ "$dry" = 0 ] && command -v nvidia-smi >/dev/null 2>&1; then
    gpu_name=$(nvidia-smi -i "$device" --query-gpu=name,driver_version --format=csv,noheader \
        2>/dev/null | head -n 1 || echo unknown)
fi

# ---- the reduce-copy kernels against a device-to-device copy -----------------------------
# cuda_rc_bench's defaults: 1 MiB to 1 GiB, every dtype, sum; 2 and 4 inputs, one output.
if [ "$kernels" = 1 ]; then
    tsv=$out/gpu-kernels.tsv
    echo "== reduce-copy kernels against a device-to-device copy on GPU $device ($gpu_name)" >&2
    echo "+ $rc_bench --device $device -k 2,4 > $tsv" >&2
    if [ "$dry" = 0 ]; then
        "$rc_bench" --device "$device" -k 2,4 >"$tsv" ||
            die "cuda_rc_bench failed (see above); $tsv is incomplete"
        grep '^# summary' "$tsv" >&2 || true
        "$py" - "$tsv" "$when" "$gpu_name" >"$out/gpu-kernels.md" <<'PY' ||
import sys

tsv, when, gpu = sys.argv[1:4]
rows, copy = [], {}
for line in open(tsv):
    f = line.rstrip("\n").split("\t")
    if line.startswith("#") or f[0] == "kernel" or len(f) != 12:
        continue
    if f[0] == "copy":
        copy[int(f[5])] = float(f[7])
    else:
        rows.append((f[1], f[2], int(f[3]), int(f[4]), int(f[5]), float(f[7]), float(f[11])))
big = 64 << 20
print("# Reduce-copy kernels against a device-to-device copy\n")
print("%s, %s. Made by bench/gpu.sh from gpu-kernels.tsv (cuda_rc_bench). GB/s are memory "
      "traffic, bytes read + bytes written per second (1 GB = 1e9 B): k inputs and one "
      "output of N bytes move (k + 1) N, the copy (cudaMemcpyAsync device to device) 2 N. "
      "Ratio = reduce-copy GB/s / copy GB/s at the same size; target: at least 0.9 at "
      "64 MiB and up.\n" % (gpu, when))
print("| dtype | op | inputs | size | reduce-copy GB/s | copy GB/s | ratio "
      "| worst ratio >= 64 MiB | target |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|")
for key in dict.fromkeys((r[0], r[1], r[2], r[3]) for r in rows):
    mine = [r for r in rows if r[:4] == key]
    top = max(mine, key=lambda r: r[4])
    large = [r[6] for r in mine if r[4] >= big]
    worst = min(large) if large else None
    print("| %s | %s | %d%s | %d MiB | %.1f | %.1f | %.3f | %s | %s |" % (
        key[0], key[1], key[2], "" if key[3] == 1 else " (%d outputs)" % key[3],
        top[4] >> 20, top[5], copy.get(top[4], 0), top[6],
        "%.3f" % worst if worst is not None else "-",
        "no size >= 64 MiB" if worst is None else ("met" if worst >= 0.9 else "**missed**")))
PY
            die "cannot write $out/gpu-kernels.md"
        echo "== table: $out/gpu-kernels.md" >&2
    fi
fi

# ---- coll ---------------------------------------------------------------------------------
for c in $colls; do
    for np in "${np_list[@]}"; do
        json=$out/gpu-coll-$c-np$np.json
        echo "== coll $c, $np rank(s) on GPU $device ($gpu_name)" >&2
        run "$collrun" -n "$np" --timeout 1800 "$collbench" "$c" --memtype cuda \
            --device "$device" -b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" \
            -c 1 --json "$json" || die "collbench $c at $np rank(s) failed (see above)"
    done
done

# ---- PyTorch's NCCL process group, all-reduce ---------------------------------------------
# Each rank: the same sizes (float32, count = size / 4), warmup, a barrier, then `iters`
# all-reduces timed by the host clock up to torch.cuda.synchronize(); the ranks' times are
# averaged. NCCL refuses several ranks on one GPU: the error is caught and recorded.
torch_py=$(mktemp "${TMPDIR:-/tmp}/gpu_torch.XXXXXX.py")
trap 'rm -f "$torch_py"' EXIT
cat >"$torch_py" <<'PY'
import json, os, sys, time, datetime, socket
import torch
import torch.distributed as dist

out, device, minb, maxb, factor, iters, warmup = sys.argv[1:8]
device, minb, maxb = int(device), int(minb), int(maxb)
factor, iters, warmup = int(factor), int(iters), int(warmup)
rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(device)
rec = {"tool": "torch-nccl", "collective": "allreduce", "memtype": "cuda", "nranks": n,
       "device": device, "gpu": torch.cuda.get_device_name(device),
       "torch_version": torch.__version__, "host": socket.gethostname(),
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "status": "ok", "results": []}
try:
    nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
except Exception:
    nccl = "unknown"
rec["nccl_version"] = nccl


def finish(code):
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
    sys.exit(code)


size = minb
try:
    try:
        dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    except TypeError:  # a PyTorch without device_id
        dist.init_process_group("nccl")
    while size <= maxb:
        count = size // 4
        if count:
            x = torch.ones(count, dtype=torch.float32, device="cuda")
            for _ in range(warmup):
                dist.all_reduce(x)
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            t = torch.tensor([(time.perf_counter() - t0) / iters], device="cuda")
            dist.all_reduce(t)
            us = t.item() / n * 1e6
            algbw = count * 4 / (us * 1e3)
            rec["results"].append({"size_bytes": count * 4, "count": count, "type": "float",
                                   "redop": "sum", "time_us": us, "algbw_GBps": algbw,
                                   "busbw_GBps": algbw * 2 * (n - 1) / n})
            if rank == 0:
                print("%12d %10.2f us %8.2f GB/s busbw" % (count * 4, us,
                      algbw * 2 * (n - 1) / n), flush=True)
        size *= factor
except Exception as e:  # NCCL's refusal: at init (device_id) or at the first collective
    msg = str(e).strip().splitlines()
    rec["status"] = "refused" if "Duplicate GPU" in str(e) else "failed"
    rec["error"] = next((l for l in msg if "Duplicate GPU" in l), msg[-1] if msg else repr(e))
    print("rank %d: NCCL %s: %s" % (rank, rec["status"], rec["error"]), file=sys.stderr)
    finish(0)
dist.destroy_process_group()
finish(0)
PY

to_bytes() {
    local v=$1 m=1
    case $v in *[Kk]) m=1024 ;; *[Mm]) m=1048576 ;; *[Gg]) m=1073741824 ;; esac
    v=${v%[KkMmGg]}
    echo $((v * m))
}
have_torch=0
if [ "$torch" = 1 ]; then
    if [ "$dry" = 1 ] ||
        "$py" -c 'import sys, torch, torch.distributed as d
sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)' 2>/dev/null; then
        have_torch=1
    else
        echo "== PyTorch: skipped ('$py' has no torch with CUDA and NCCL)" >&2
    fi
fi
if [ "$have_torch" = 1 ]; then
    for np in "${np_list[@]}"; do
        json=$out/gpu-torch-allreduce-np$np.json
        log=$out/gpu-torch-allreduce-np$np.log
        echo "== PyTorch NCCL all-reduce, $np rank(s) on GPU $device" >&2
        rc=0
        if [ "$dry" = 1 ]; then
            run "$py" -m torch.distributed.run --standalone --nproc_per_node "$np" "$torch_py" \
                "$json" "$device" "$(to_bytes "$minb")" "$(to_bytes "$maxb")" "$factor" \
                "$iters" "$warmup"
            continue
        fi
        rm -f "$json"
        timeout -k 10 900 "$py" -m torch.distributed.run --standalone --nproc_per_node "$np" \
            "$torch_py" "$json" "$device" "$(to_bytes "$minb")" "$(to_bytes "$maxb")" \
            "$factor" "$iters" "$warmup" >"$log" 2>&1 || rc=$?
        grep -E '^ *[0-9]+ .* busbw$|NCCL (refused|failed)' "$log" | head -n 40 >&2 || true
        if [ ! -s "$json" ]; then
            # a rank died before rank 0 could write: record why from the log
            why=$(grep -m1 -o 'Duplicate GPU detected[^"]*' "$log" || true)
            status=failed
            [ -n "$why" ] && status=refused
            [ -n "$why" ] || why="exit status $rc; see $log"
            "$py" -c 'import json, sys
json.dump({"tool": "torch-nccl", "collective": "allreduce", "nranks": int(sys.argv[2]),
           "status": sys.argv[3], "error": sys.argv[4], "results": []}, open(sys.argv[1], "w"))' \
                "$json" "$np" "$status" "$why"
        fi
        if grep -q '"status": "refused"' "$json"; then
            echo "   NCCL refused $np ranks on one GPU (Duplicate GPU detected): recorded" >&2
        elif ! grep -q '"status": "ok"' "$json"; then
            echo "   PyTorch/NCCL at $np rank(s) failed: see $log" >&2
        else
            rm -f "$log"
        fi
    done
fi
# ---- compute-sanitizer ----------------------------------------------------------------------
# memcheck (out-of-bounds and misaligned accesses, hardware exceptions, device memory never
# freed) and racecheck (shared-memory hazards) over the one-process kernel test, the
# benchmark's checked launches and two ranks reducing through CUDA IPC. mp_cuda_ipc loads
# the runtime that COLL_CUDA_LIBRARY names, as the library then does: here the real one.
# --target-processes all: test_cuda runs each case in a forked process. Every log ends with
# one "ERROR SUMMARY: N errors" per process; --error-exitcode tells errors from failures.
sanitize_failed=0
if [ "$sanitize" = 1 ]; then
    san=$(command -v compute-sanitizer || true)
    [ -n "$san" ] || [ ! -x /usr/local/cuda/bin/compute-sanitizer ] ||
        san=/usr/local/cuda/bin/compute-sanitizer
    if [ -z "$san" ]; then
        [ "$dry" = 1 ] || die "--sanitize: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
        echo "== (no compute-sanitizer here; the commands would be:)" >&2
        san=compute-sanitizer
    fi
    cudart=${COLL_CUDA_LIBRARY:-}
    for lib in libcudart.so.13 libcudart.so; do
        [ -z "$cudart" ] || break
        "$py" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$lib" 2>/dev/null && cudart=$lib
    done
    cudart=${cudart:-libcudart.so.13}
    results=()
    sanitize_one() { # TOOL NAME COMMAND...: run, log, and record "tool|name|verdict|log"
        local tool=$1 name=$2 log=$out/gpu-sanitize-$1-$2.log rc=0 errors verdict
        shift 2
        local opts=(--tool "$tool" --target-processes all --require-cuda-init=no
            --error-exitcode 3)
        [ "$tool" = memcheck ] && opts+=(--leak-check full)
        local cmd=()
        for a in "$@"; do
            if [ "$a" = SAN ]; then cmd+=("$san" "${opts[@]}"); else cmd+=("$a"); fi
        done
        echo "== compute-sanitizer $tool: $name" >&2
        echo "+ ${cmd[*]} > $log 2>&1" >&2
        [ "$dry" = 1 ] && return 0
        timeout -k 10 1800 env COLL_TEST_TIMEOUT_MULTIPLIER=20 COLL_TIMEOUT_MS=600000 \
            "${cmd[@]}" >"$log" 2>&1 </dev/null || rc=$?
        errors=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$log" | awk '{n += $3} END {print n + 0}' ||
            true)
        if grep -q '^1\.\.0 # SKIP' "$log"; then
            verdict="skipped: $(grep -m1 -o '# SKIP.*' "$log")"
        elif ! grep -q 'ERROR SUMMARY:' "$log"; then
            verdict="no sanitizer summary (exit status $rc)"
        elif [ "$errors" -gt 0 ]; then
            verdict="**$errors errors** (exit status $rc)"
        elif [ "$rc" != 0 ]; then
            verdict="**failed**, exit status $rc, no sanitizer error"
        else
            verdict=clean
        fi
        [ "$verdict" = clean ] || sanitize_failed=1
        echo "   $verdict" >&2
        results+=("$tool|$name|$verdict|$(basename "$log")")
    }
    for tool in memcheck racecheck; do
        sanitize_one "$tool" test_cuda SAN "$build/tests/test_cuda"
        sanitize_one "$tool" cuda_rc_bench SAN "$rc_bench" --device "$device" -b 1M -e 4M \
            -r 1 -n 2 -w 1 -k 2,4 --dsts 2
        sanitize_one "$tool" mp_cuda_ipc env COLL_CUDA_LIBRARY="$cudart" \
            COLL_CUDA_STAGING_BYTES=65536 COLL_CUDA_IPC=1 "$collrun" -n 2 --timeout 1700 SAN \
            "$build/tests/mp_cuda_ipc" colls
    done
    if [ "$dry" = 0 ]; then
        {
            echo "# compute-sanitizer on the CUDA paths"
            echo
            version=$("$san" --version 2>/dev/null | grep -m1 -i version || echo "$san")
            echo "$gpu_name, $when. Made by \`bench/gpu.sh --sanitize\` with $version."
            echo "memcheck runs with --leak-check full; the logs are beside this file. Under"
            echo "collrun, a rank that exits with errors may end the other before it prints its"
            echo "summary, so an error count there is a lower bound."
            echo
            echo "| tool | program | result | log |"
            echo "|---|---|---|---|"
            for r in "${results[@]}"; do
                IFS='|' read -r tool name verdict log <<<"$r"
                echo "| $tool | $name | $verdict | $log |"
            done
        } >"$out/gpu-sanitize.md"
        echo "== table: $out/gpu-sanitize.md" >&2
    fi
fi
[ "$dry" = 1 ] && exit 0

# ---- the table ----------------------------------------------------------------------------
for c in $colls; do
    md=$out/gpu-$c.md
    "$py" - "$out" "$c" "$when" "$gpu_name" "$have_torch" "${np_list[@]}" >"$md" <<'PY' ||
import json, os, sys

out, coll, when, gpu, torch = sys.argv[1:6]
nps = [int(v) for v in sys.argv[6:]]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

cols, notes = [], []
for np in nps:
    run = load(os.path.join(out, "gpu-coll-%s-np%d.json" % (coll, np)))
    if run:
        rows = {r["size_bytes"]: (r["out_of_place"]["time_us"], r["out_of_place"]["busbw_GBps"])
                for r in run["results"] if r.get("out_of_place")}
        cols.append(("coll np%d" % np, rows))
for np in nps if coll == "allreduce" and torch == "1" else []:
    run = load(os.path.join(out, "gpu-torch-allreduce-np%d.json" % np))
    if not run:
        continue
    if run.get("status") != "ok":
        notes.append("NCCL at %d ranks: %s (%s)" % (np, run.get("status"), run.get("error", "")))
        continue
    cols.append(("NCCL np%d" % np, {r["size_bytes"]: (r["time_us"], r["busbw_GBps"])
                                    for r in run["results"]}))
sizes = sorted({s for _, rows in cols for s in rows})
print("# %s on one GPU: coll `collbench --memtype cuda` beside PyTorch NCCL\n" % coll)
print("%s, %s. Out-of-place time (us) and busbw (GB/s) per size; every rank on the same "
      "GPU." % (gpu, when))
print("Made by bench/gpu.sh; the runs are the gpu-*-%s-np*.json files beside this one.\n" % coll)
print("| size (B) | " + " | ".join("%s us | %s GB/s" % (n, n) for n, _ in cols) + " |")
print("|---:|" + "---:|---:|" * len(cols))
for s in sizes:
    cells = []
    for _, rows in cols:
        t = rows.get(s)
        cells += ["%.1f" % t[0], "%.2f" % t[1]] if t else ["", ""]
    print("| %d | %s |" % (s, " | ".join(cells)))
for n in notes:
    print("\n%s" % n)
PY
        die "cannot write $md"
    echo "== table: $md" >&2
    cat "$md"
done
[ "$sanitize_failed" = 0 ] || die "a compute-sanitizer run was not clean: see $out/gpu-sanitize.md"
