#!/usr/bin/env bash
# test_dptrain.sh - dptrain's data parallelism checked against one process, on synthetic data.
#
#   tests/test_dptrain.sh path/to/collrun path/to/dptrain
#
# Prints TAP. Runs dptrain alone as the reference and under collrun with 1..4 ranks; the
# final parameters are compared with dptrain's own --check-weights (relative tolerance), so
# a rank that trains on the wrong slice, a missing or doubled all-reduce, or a bucket left
# unsynced shows as a mismatch. Each run takes well under a second.
set -u

COLLRUN=${1:?usage: test_dptrain.sh COLLRUN DPTRAIN}
DPTRAIN=${2:?usage: test_dptrain.sh COLLRUN DPTRAIN}
GUARD="timeout -k 5 60"
export COLL_TIMEOUT_MS=${COLL_TIMEOUT_MS:-60000}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_dptrain.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1))
    failed=$((failed + 1))
    echo "not ok $n - $1"
    for f in "$TMP"/out "$TMP"/err; do
        [ -s "$f" ] && sed 's/^/#   /' "$f" | tail -n 15
    done
}
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

# A small model on synthetic data. Batch 30 does not divide by 4: ranks get uneven slices.
# Buckets of 4 KB split the model into three, so several all-reduces are in flight.
COMMON=(--synthetic 1200 --sizes "64,48,32,10" --batch 30 --seed 7 --bucket-mb 0.004)
TOL=1e-4

# alone ARGS...: dptrain as one process, no coll at all.
alone() { $GUARD "$DPTRAIN" "${COMMON[@]}" "$@" >"$TMP/out" 2>"$TMP/err"; }
# ranks N ARGS...: dptrain under collrun.
ranks() {
    local np=$1
    shift
    $GUARD "$COLLRUN" -n "$np" "$DPTRAIN" "${COMMON[@]}" "$@" >"$TMP/out" 2>"$TMP/err"
}
# plain CMD...: CMD bounded by the guard, output captured.
plain() { $GUARD "$@" >"$TMP/out" 2>"$TMP/err"; }
matched() { grep -q 'check-weights: .*: match$' "$TMP/out"; }

# 1. DDP with n ranks equals one process on the same global batch.
for optim in sgd adamw; do
    if alone --optim "$optim" --steps 60 --dump-weights "$TMP/ref-$optim.bin"; then
        ok "reference run alone ($optim)"
    else
        not_ok "reference run alone ($optim)"
    fi
    for np in 1 2 3 4; do
        if ranks "$np" --optim "$optim" --steps 60 --check-weights "$TMP/ref-$optim.bin" \
            --tol "$TOL" && matched; then
            ok "$np rank(s) match one process ($optim)"
        else
            not_ok "$np rank(s) match one process ($optim)"
        fi
    done
done

# The comparison can fail: another seed must not match.
if ! ranks 2 --steps 60 --seed 8 --check-weights "$TMP/ref-sgd.bin" --tol "$TOL" &&
    grep -q MISMATCH "$TMP/out"; then
    ok "a different seed is reported as a mismatch (exit 1)"
else
    not_ok "a different seed is reported as a mismatch (exit 1)"
fi

# 2. Gradient accumulation: --accum 2 with batch B equals --accum 1 with batch 2B.
if alone --batch 40 --steps 25 --dump-weights "$TMP/ref-b40.bin" &&
    ranks 2 --batch 20 --accum 2 --steps 25 --check-weights "$TMP/ref-b40.bin" \
        --tol "$TOL" && matched; then
    ok "2 ranks, --accum 2 --batch 20 equals --batch 40"
else
    not_ok "2 ranks, --accum 2 --batch 20 equals --batch 40"
fi
if ranks 3 --batch 10 --accum 4 --steps 25 --check-weights "$TMP/ref-b40.bin" \
    --tol "$TOL" && matched; then
    ok "3 ranks, --accum 4 --batch 10 equals --batch 40"
else
    not_ok "3 ranks, --accum 4 --batch 10 equals --batch 40"
fi

# 3. Checkpoint, then resume, equals an uninterrupted run (AdamW: its moments and step
# count must be restored too). The 50 steps cross an epoch boundary (40 steps/epoch).
CK="$TMP/run.ckpt"
if ranks 2 --optim adamw --steps 50 --dump-weights "$TMP/ref-50.bin" &&
    ranks 2 --optim adamw --steps 23 --ckpt "$CK" --ckpt-every 10 &&
    [ -s "$CK" ] && [ ! -e "$CK.tmp" ] &&
    ranks 2 --optim adamw --steps 50 --resume "$CK" --check-weights "$TMP/ref-50.bin" \
        --tol "$TOL" && matched && grep -q 'resumed .* at step 23' "$TMP/out"; then
    ok "checkpoint at step 23, resume to 50 equals 50 steps straight"
else
    not_ok "checkpoint at step 23, resume to 50 equals 50 steps straight"
fi
if ranks 2 --optim sgd --steps 30 --ckpt "$TMP/sgd.ckpt" --ckpt-every 20 &&
    ranks 2 --optim sgd --steps 20 --ckpt "$TMP/sgd20.ckpt" &&
    ranks 2 --optim sgd --steps 30 --resume "$TMP/sgd20.ckpt" --dump-weights "$TMP/a.bin" &&
    ranks 2 --optim sgd --steps 30 --check-weights "$TMP/a.bin" --tol "$TOL" && matched; then
    ok "SGD momentum survives a checkpoint"
else
    not_ok "SGD momentum survives a checkpoint"
fi

# expect_fail DESC PATTERN CMD...: CMD exits non-zero and its stderr matches PATTERN.
expect_fail() {
    local desc=$1 pattern=$2
    shift 2
    if "$@"; then
        not_ok "$desc (exited 0)"
    elif grep -Eq "$pattern" "$TMP/err"; then
        ok "$desc"
    else
        not_ok "$desc (no message matching '$pattern')"
    fi
}

# 4. Bad checkpoints and datasets give clear errors and a non-zero exit.
cp "$CK" "$TMP/flip.ckpt"
size=$(stat -c %s "$TMP/flip.ckpt")
printf '\x55' | dd of="$TMP/flip.ckpt" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_fail "a flipped byte in a checkpoint is a checksum error" 'corrupt: checksum' \
    ranks 2 --optim adamw --steps 50 --resume "$TMP/flip.ckpt"
cp "$CK" "$TMP/magic.ckpt"
printf 'XXXX' | dd of="$TMP/magic.ckpt" bs=1 seek=0 conv=notrunc status=none
expect_fail "a checkpoint with a bad magic is refused" 'not a dptrain checkpoint' \
    ranks 2 --optim adamw --steps 50 --resume "$TMP/magic.ckpt"
head -c $((size - 100)) "$CK" >"$TMP/short.ckpt"
expect_fail "a truncated checkpoint is refused" 'corrupt: [0-9]+ bytes' \
    ranks 2 --optim adamw --steps 50 --resume "$TMP/short.ckpt"
expect_fail "resuming with another world size is refused" 'written by 2 ranks; this run has 3' \
    ranks 3 --optim adamw --steps 50 --resume "$CK"
expect_fail "resuming with other layer sizes is refused" 'model of sizes 64,48,32,10' \
    ranks 2 --optim adamw --steps 50 --resume "$CK" --sizes 64,40,10
expect_fail "resuming with another optimizer is refused" 'optimizer adamw, not sgd' \
    ranks 2 --optim sgd --steps 50 --resume "$CK"
expect_fail "resuming a finished run is an error" 'is at step 23: nothing left to do' \
    ranks 2 --optim adamw --steps 20 --resume "$CK"
expect_fail "a missing checkpoint is an error" "cannot open checkpoint" \
    ranks 2 --steps 5 --resume "$TMP/nonexistent.ckpt"

expect_fail "a missing dataset directory is an error" \
    "cannot open dataset file '$TMP/nodata/train-images-idx3-ubyte'" \
    plain "$COLLRUN" -n 2 "$DPTRAIN" --data "$TMP/nodata" --steps 1
# A tiny valid IDX set: 8 images of 2x2 pixels, train plain, test gzipped.
mkdir -p "$TMP/idx"
idx_images() { printf '\x00\x00\x08\x03\x00\x00\x00\x08\x00\x00\x00\x02\x00\x00\x00\x02'
               head -c 32 /dev/zero | tr '\0' '\200'; }
idx_labels() { printf '\x00\x00\x08\x01\x00\x00\x00\x08\x00\x01\x02\x03\x04\x05\x06\x07'; }
idx_images >"$TMP/idx/train-images-idx3-ubyte"
idx_labels >"$TMP/idx/train-labels-idx1-ubyte"
idx_images | gzip >"$TMP/idx/t10k-images-idx3-ubyte.gz"
idx_labels | gzip >"$TMP/idx/t10k-labels-idx1-ubyte.gz"
if $GUARD "$COLLRUN" -n 2 "$DPTRAIN" --data "$TMP/idx" --sizes 4,8,10 --batch 4 --steps 3 \
    >"$TMP/out" 2>"$TMP/err" && grep -q 'test accuracy' "$TMP/out"; then
    ok "IDX files load, plain and gzipped"
else
    not_ok "IDX files load, plain and gzipped"
fi
expect_fail "images of the wrong size for the model are refused" \
    '2x2 = 4 pixels, but the model.s input size is 784' \
    plain "$DPTRAIN" --data "$TMP/idx" --steps 1
expect_fail "a label beyond the classes is refused" \
    'label 5 of sample 5 is out of range for 5 classes' \
    plain "$DPTRAIN" --data "$TMP/idx" --sizes 4,8,5 --batch 4 --steps 1
printf '\x00\x00\x08\x02\x00\x00\x00\x08\x00\x01\x02\x03\x04\x05\x06\x07' |
    gzip >"$TMP/idx/t10k-labels-idx1-ubyte.gz"
expect_fail "an IDX file with a wrong magic is refused" 'magic 0x00000802, want 0x00000801' \
    plain "$DPTRAIN" --data "$TMP/idx" --sizes 4,8,10 --batch 4 --steps 1
idx_labels | head -c 12 | gzip >"$TMP/idx/t10k-labels-idx1-ubyte.gz"
expect_fail "a truncated IDX file is refused" 'truncated or corrupt: want 8 bytes of data' \
    plain "$DPTRAIN" --data "$TMP/idx" --sizes 4,8,10 --batch 4 --steps 1
expect_fail "bad layer sizes are a usage error" 'bad layer sizes' \
    plain "$DPTRAIN" --synthetic 100 --sizes 64,x,10

# 5. DiLoCo. With H = 1, outer lr 1 and no outer momentum, an outer step replaces the global
# parameters by the mean of the workers' parameters after one local step; with plain SGD
# and equal slices that is one step on the mean gradient: the same as one process. This
# checks the outer gradient's sign, the averaging and the copy back, per fragment too.
DL1=(--optim sgd --momentum 0 --steps 40 --diloco 1 --outer-lr 1 --outer-momentum 0)
if alone --optim sgd --momentum 0 --steps 40 --dump-weights "$TMP/ref-plain.bin"; then
    for np in 2 3; do
        for frag in 1 3; do
            if ranks "$np" "${DL1[@]}" --fragments "$frag" --check-weights \
                "$TMP/ref-plain.bin" --tol "$TOL" && matched; then
                ok "DiLoCo H=1 on $np ranks, $frag fragment(s), equals plain SGD"
            else
                not_ok "DiLoCo H=1 on $np ranks, $frag fragment(s), equals plain SGD"
            fi
        done
    done
else
    not_ok "reference run alone (plain SGD)"
fi
# Streaming schedule: H = 8, P = 2, 40 steps: fragment 0 syncs at 8, 16, 24, 32, 40 and
# fragment 1 at 4, 12, 20, 28, 36, and again at 40 where the final full sync takes all.
if ranks 3 --optim adamw --steps 40 --diloco 8 --fragments 2 &&
    grep -q 'DiLoCo: 11 fragment syncs of 2 fragment(s)' "$TMP/out" &&
    grep -q 'replicas: all 3 hold identical parameters' "$TMP/out"; then
    ok "Streaming DiLoCo syncs on the staggered schedule; replicas end equal"
else
    not_ok "Streaming DiLoCo syncs on the staggered schedule; replicas end equal"
fi
# It learns: DiLoCo with AdamW inner steps reaches a test accuracy well above chance (10%).
if ranks 4 --optim adamw --steps 120 --diloco 10 &&
    awk '/final test accuracy/ { a = $NF } END { exit !(a >= 0.8) }' "$TMP/out"; then
    ok "DiLoCo (H=10, 4 workers) learns the synthetic task (>= 80% test accuracy)"
else
    not_ok "DiLoCo (H=10, 4 workers) learns the synthetic task (>= 80% test accuracy)"
fi
expect_fail "DiLoCo with a checkpoint is refused" 'cannot be combined with --ckpt' \
    plain "$DPTRAIN" --synthetic 100 --diloco 4 --ckpt "$TMP/x.ckpt"

# 6. --plot writes both PNGs (needs gnuplot).
if ! command -v gnuplot >/dev/null; then
    skip "--plot writes PNGs" "no gnuplot"
elif ranks 2 --steps 40 --eval-every 10 --plot "$TMP/plot" &&
    [ "$(head -c 4 "$TMP/plot-accuracy.png" | od -An -c | tr -d ' ')" = '211PNG' ] &&
    [ "$(head -c 4 "$TMP/plot-time.png" | od -An -c | tr -d ' ')" = '211PNG' ]; then
    ok "--plot writes PNGs"
else
    not_ok "--plot writes PNGs"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
