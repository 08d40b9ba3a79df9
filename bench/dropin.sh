#!/usr/bin/env bash
# dropin.sh - what the drop-in paths cost: coll's libnccl.so.2 against the native API
# (dropin_bench: the same all-reduce through both, interleaved in one run), and a DDP
# training step with backend="coll" against gloo (tests/torch/ddp_check.py --bench).
#
#   bench/dropin.sh [BUILD_DIR] [NP...]        (default: build, NP 2 4)
#
# Prints numbers; docs/dropin.md has a run and how to read it. The machine may be shared:
# compare only the ratios of one run, never numbers across runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
shift || true
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4)
bench=$build/src/compat/dropin_bench
[ -x "$bench" ] || { echo "dropin.sh: $bench not built (meson compile -C $build)" >&2; exit 1; }

echo "== coll's libnccl.so.2 vs the native API: $(nproc) cores, $(date -u +%FT%TZ)"
echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for np in 1 "${nps[@]}"; do
    "$build/collrun" -n "$np" --timeout 600 "$bench" -b 8 -b 1048576 -r 21
done

py=/usr/bin/python3
if [ -d "$build/python/coll_torch" ] && "$py" -c 'import torch' 2>/dev/null; then
    echo "== DDP step time, backend coll vs gloo (2-layer MLP, CPU, one thread per rank)"
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
    for np in "${nps[@]}"; do
        port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        PYTHONPATH="$build/python" OMP_NUM_THREADS=1 "$py" -m torch.distributed.run \
            --redirects 1 --tee 1 --log_dir "$logs/np$np" --nproc_per_node "$np" \
            --master_addr 127.0.0.1 --master_port "$port" tests/torch/ddp_check.py --bench \
            --steps 60 --batch 64 2>&1 | sed -n 's/^\[default0\]://p' | grep '^ddp'
    done
else
    echo "== DDP: skipped (no PyTorch, or the coll_torch extension was not built)"
fi
