#!/usr/bin/env bash
# test_api.sh - every torch.distributed call on backend="coll" under torchrun at 2, 3 and 4
# ranks (api_check.py): each dtype and op against local results and gloo, point to point
# with tags and any source, work.wait(timeout) and the group's timeout, the DDP hook. TAP.
#
#   test_api.sh PYTHON PKGDIR (PKGDIR holds the built coll_torch package, or "-": no torch)
set -u
py=$1 pkgdir=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ "$pkgdir" = "-" ]; then
    echo "1..0 # SKIP coll_torch was not built (PyTorch not importable by $py, or a sanitizer build)"
    exit 0
fi
if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "1..0 # SKIP PyTorch is not importable by $py (python3-torch, libtorch-dev)"
    exit 0
fi
echo "1..3"
fail=0
n=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for np in 2 3 4; do
    n=$((n + 1))
    # --redirects/--tee: torchrun 1.13 on Python 3.11 fails without them. COLL_TIMEOUT_MS
    # is left unset: the group's own timeout is under test.
    for try in 1 2 3; do
        out=$(env -u COLL_TIMEOUT_MS PYTHONPATH="$pkgdir${PYTHONPATH:+:$PYTHONPATH}" \
            OMP_NUM_THREADS=1 timeout -k 5 240 "$py" -m torch.distributed.run \
            --redirects 1 --tee 1 --log_dir "$logs/np$np.$try" --monitor_interval 0.2 \
            --nproc_per_node "$np" --master_addr 127.0.0.1 --master_port "$(free_port)" \
            "$here/api_check.py" 2>&1)
        rc=$?
        if [ $rc -ne 0 ] && grep -q "failed to bind .*Address already in use" <<<"$out"; then
            echo "# np=$np: the store's port was taken before torchrun bound it (try $try)"
            continue
        fi
        break
    done
    grep -E "bytes per step" <<<"$out" | sed 's/^/# /'
    if [ $rc -eq 0 ] && grep -q "all [0-9]* checks passed" <<<"$out"; then
        echo "ok $n - np=$np: $(grep -o "all [0-9]* checks passed.*" <<<"$out")"
    else
        grep -E "FAIL|failures per rank|Error" <<<"$out" | sed 's/^/# /' | head -40
        sed 's/^/# /' <<<"$out" | tail -20
        echo "not ok $n - np=$np: torchrun exited $rc"
        fail=1
    fi
done
exit $fail
