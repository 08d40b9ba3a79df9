#!/usr/bin/env bash
# elastic_soak.sh - the failure soak of docs/training.md ("Elastic training"): dptrain on
# Fashion-MNIST with 8 ranks, a random rank SIGKILLed every 15 s and started again 5 s
# later for the whole run, first with --elastic (shrink, go on, grow), then with collrun's
# restart of every rank from the last checkpoint, against an undisturbed run of the same
# steps. Prints steps lost and seconds of stall per failure and the accuracies.
#
#   bench/elastic_soak.sh [BUILD_DIR] [extra elastic_soak.py flags...]
#
# Timed: runs under flock /tmp/coll-bench.lock. Takes several minutes.
set -eu
BUILD=${1:-build}
shift || true
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec flock /tmp/coll-bench.lock python3 "$HERE/elastic_soak.py" --dptrain "$BUILD/dptrain" \
    --np 8 --kill-every 15 --restart-after 5 --mode both --points --point-steps 60,700 \
    --ckpt-every 50 --timeout 1500 "$@" -- \
    --epochs 2 --log-every 10 --eval-every 468 --ckpt "$(mktemp -u /tmp/elastic_soak.XXXX.ckpt)" \
    --ckpt-every 50
