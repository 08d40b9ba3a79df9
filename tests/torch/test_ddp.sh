#!/usr/bin/env bash
# test_ddp.sh - backend="coll" under torchrun: every collective, then DDP training that must
# end with the same parameters as over gloo, on 2 and 4 ranks. TAP out.
#
#   test_ddp.sh PYTHON PKGDIR (PKGDIR holds the built coll_torch package, or "-": no torch)
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
echo "1..2"
fail=0
n=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for np in 2 4; do
    n=$((n + 1))
    # --redirects/--tee: torchrun 1.13 on Python 3.11 fails without them
    # The port is free when picked and taken when torchrun's store binds it; any other
    # process may take it in between (tests run in parallel): only that is tried again.
    for try in 1 2 3; do
        out=$(PYTHONPATH="$pkgdir${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 \
            COLL_TIMEOUT_MS=60000 timeout -k 5 240 "$py" -m torch.distributed.run \
            --redirects 1 --tee 1 --log_dir "$logs/np$np.$try" --monitor_interval 0.2 \
            --nproc_per_node "$np" --master_addr 127.0.0.1 --master_port "$(free_port)" \
            "$here/ddp_check.py" 2>&1)
        rc=$?
        if [ $rc -ne 0 ] && grep -q "failed to bind .*Address already in use" <<<"$out"; then
            echo "# np=$np: the store's port was taken before torchrun bound it (try $try)"
            continue
        fi
        break
    done
    if [ $rc -eq 0 ] && grep -q "parameters agree" <<<"$out"; then
        echo "ok $n - np=$np: $(grep "parameters agree" <<<"$out")"
    else
        sed 's/^/# /' <<<"$out" | tail -40
        echo "not ok $n - np=$np: torchrun exited $rc"
        fail=1
    fi
done
exit $fail
