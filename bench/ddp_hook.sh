#!/usr/bin/env bash
# ddp_hook.sh - DDP on Fashion-MNIST at NP ranks (default 4) with each gradient scheme:
# fp32 and coll's quantized hook (int8, int4, error feedback) on coll; DDP's fp32,
# PyTorch's fp16_compress_hook and powerSGD_hook on gloo (and the same two hooks on coll,
# where coll's byte counter measures what they send). Prints a Markdown table and writes
# docs/results/ddp_hook.jsonl (+ docs/results/ddp_hook.png with gnuplot).
#
#   bench/ddp_hook.sh [BUILDDIR] [EPOCHS]     (needs dataset-fashion-mnist, python3-torch)
#
# NP=ranks (4); CONFIGS="coll:int8 gloo:fp16" runs only those and appends their lines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
epochs=${2:-1}
np=${NP:-4}
py=/usr/bin/python3
out=$root/docs/results/ddp_hook.jsonl
[ -d /usr/share/datasets/fashion-mnist ] || { echo "needs dataset-fashion-mnist" >&2; exit 1; }
[ -d "$build/python/coll_torch" ] || { echo "no coll_torch in $build/python (meson compile)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
configs=${CONFIGS:-coll:none coll:int8 coll:int4 gloo:none gloo:fp16 gloo:powersgd coll:fp16 coll:powersgd}
[ -n "${CONFIGS:-}" ] || : >"$out"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for cfg in $configs; do
    be=${cfg%%:*} hook=${cfg#*:}
    # --redirects/--tee: Debian's torchrun 1.13 on Python 3.11 fails at start without them
    PYTHONPATH=$build/python OMP_NUM_THREADS=1 "$py" -m torch.distributed.run \
        --redirects 1 --tee 1 --log_dir "$logs/$be.$hook" --nproc_per_node "$np" \
        --master_addr 127.0.0.1 --master_port "$(port)" \
        "$root/bench/ddp_hook.py" --backend "$be" --hook "$hook" --epochs "$epochs" \
        >"$logs/$be.$hook.out" 2>&1 || echo "$be/$hook: torchrun exited $?" >&2
    sed -n 's/^\[default0\]://p' "$logs/$be.$hook.out" | grep '^{' | tee -a "$out" ||
        tail -20 "$logs/$be.$hook.out" >&2
done
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = next(r for r in rows if r["backend"] == "coll" and r["hook"] == "none")
print("| backend | gradients | test accuracy | bytes sent / rank / step | payload / step | step (median ms) |")
print("|---|---|---|---|---|---|")
for r in rows:
    sent = "%d (%.2fx)" % (r["bytes_sent_per_step"], r["bytes_sent_per_step"] / base["bytes_sent_per_step"]) \
        if r["bytes_sent_per_step"] is not None else "n/a (gloo)"
    print("| %s | %s | %.4f | %s | %d | %.1f |" % (r["backend"], r["hook"], r["accuracy"], sent,
                                                 r["payload_per_step"], r["step_ms_median"]))
PY
if command -v gnuplot >/dev/null; then
    "$py" -c '
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    print("%s/%s %d %.4f" % (r["backend"], r["hook"], r["payload_per_step"], r["accuracy"]))
' "$out" >"$logs/plot.dat"
    gnuplot <<GP
set terminal pngcairo size 800,450
set output "$root/docs/results/ddp_hook.png"
set title "DDP on Fashion-MNIST, $np ranks: test accuracy vs all-reduce payload per step"
set xlabel "payload handed to all-reduce per rank per step (KiB, log)"
set ylabel "test accuracy"
set logscale x
set key off
set offsets graph 0.1, graph 0.15, graph 0.05, graph 0.05
plot "$logs/plot.dat" using (\$2/1024):3 with points pt 7 ps 1.5, \
     "" using (\$2/1024):3:1 with labels offset 0,1 font ",9"
GP
fi
