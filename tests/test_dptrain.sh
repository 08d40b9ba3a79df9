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

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 15" "$TMP/out" "$TMP/err"; }

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
check "... which says how to get one: the package, --data DIR or --synthetic N" \
    eval 'grep -q "apt-get install dataset-fashion-mnist" "$TMP/err" &&
          grep -q -- "--data DIR" "$TMP/err" && grep -q -- "--synthetic N" "$TMP/err"'
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

# 6. Streaming DiLoCo's fragment schedule covers every parameter exactly once per period:
# over steps 1..H the printed ranges must tile [0, nparams) with no gap or overlap, one per
# fragment. covers() reads dptrain --schedule's output.
covers() {
    awk '/^schedule:/ { n = $7; p = $5; next }
         /^step/ { if (seen[$4]++) bad = 1; lo[NR] = $6; hi[NR] = $7; k++ }
         END {
             if (k != p || bad) exit 1
             # every range starts where another ends, the first at 0, the last at n
             at = 0
             for (round = 0; round < k; round++) {
                 found = 0
                 for (i in lo) if (lo[i] == at && hi[i] > at) { at = hi[i]; found = 1; break }
                 if (!found) exit 1
             }
             exit !(at == n)
         }' "$1"
}
sched_ok=1
for spec in "8 2 64,48,32,10" "12 3 784,256,128,10" "5 4 10,9,8,7,6" "3 3 16,8,4,2" \
    "7 6 20,10,5"; do
    set -- $spec
    if ! plain "$DPTRAIN" --diloco "$1" --fragments "$2" --sizes "$3" --schedule ||
        ! covers "$TMP/out"; then
        sched_ok=0
        echo "# schedule H=$1 P=$2 sizes $3 does not cover the parameters once"
    fi
done
# The check can fail: a period with one fragment left out is caught.
plain "$DPTRAIN" --diloco 12 --fragments 3 --schedule
grep -v 'fragment 1 ' "$TMP/out" >"$TMP/out.short"
if [ "$sched_ok" = 1 ] && ! covers "$TMP/out.short"; then
    ok "Streaming DiLoCo's schedule covers every parameter once per period"
else
    not_ok "Streaming DiLoCo's schedule covers every parameter once per period"
fi

# 7. Overlapped Streaming DiLoCo. With tau = 0 the outer step lands in the step that
# started it, and with alpha = 0 the local parameters become the global ones: exactly the
# blocking algorithm, through the non-blocking path (coll_iallreduce, wait, merge).
# Both on the general path: a blocking all-reduce of one host's ranks otherwise takes the
# shared-memory fast path, whose rank-order sums may round differently from the schedule
# that coll_iallreduce runs (docs/transports.md).
SD=(--optim adamw --steps 40 --diloco 8 --fragments 2)
if COLL_SHM_FLAT=0 ranks 3 "${SD[@]}" --dump-weights "$TMP/sd-block.bin" &&
    COLL_SHM_FLAT=0 ranks 3 "${SD[@]}" --overlap 0 --mix 0 --check-weights "$TMP/sd-block.bin" \
        --tol 0 &&
    matched; then
    ok "overlapped Streaming DiLoCo with tau=0, alpha=0 equals the blocking one (bitwise)"
else
    not_ok "overlapped Streaming DiLoCo with tau=0, alpha=0 equals the blocking one (bitwise)"
fi
# With tau = 3 and alpha = 0.5 the run differs (the merge is real), keeps the schedule, and
# ends with equal replicas.
if ranks 3 "${SD[@]}" --overlap 3 --mix 0.5 --check-weights "$TMP/sd-block.bin" --tol 1e-3;
    [ $? = 1 ] && grep -q MISMATCH "$TMP/out" &&
    grep -q 'DiLoCo: 11 fragment syncs of 2 fragment(s)' "$TMP/out" &&
    grep -q 'replicas: all 3 hold identical parameters' "$TMP/out"; then
    ok "overlapped Streaming DiLoCo (tau=3, alpha=0.5) differs, keeps the schedule, ends equal"
else
    not_ok "overlapped Streaming DiLoCo (tau=3, alpha=0.5) differs, keeps the schedule, ends equal"
fi
# An identity for tau > 0: with alpha = 1 a worker never takes the global fragment, so it
# trains alone, and with outer lr 1 and no outer momentum the final (alpha = 0) sync sets
# every parameter to the workers' mean. That is DiLoCo whose only sync is the last step,
# whatever tau, P and the syncs in flight did meanwhile, if the merge leaves the local
# parameters alone and the in-flight all-reduces touch nothing but their own fragment.
ONE=(--optim adamw --steps 40 --outer-lr 1 --outer-momentum 0)
if ranks 3 "${ONE[@]}" --diloco 1000 --dump-weights "$TMP/sd-once.bin" &&
    ranks 3 "${ONE[@]}" --diloco 8 --fragments 2 --overlap 3 --mix 1 \
        --check-weights "$TMP/sd-once.bin" --tol "$TOL" && matched; then
    ok "overlapped, alpha=1, outer lr 1: equals one final averaging (tau=3, P=2)"
else
    not_ok "overlapped, alpha=1, outer lr 1: equals one final averaging (tau=3, P=2)"
fi
expect_fail "--overlap must be below H" 'overlap 8 must be below --diloco 8' \
    plain "$DPTRAIN" --synthetic 100 --diloco 8 --overlap 8
expect_fail "--mix without --diloco is a usage error" 'need --diloco' \
    plain "$DPTRAIN" --synthetic 100 --mix 0.5

# 8. DiLoCo checkpoints: the run stopped after step 20 (as if killed) with fragment 1's
# overlapped all-reduce in flight (it started at step 20, lands at 23), resumed to 50,
# equals 50 steps straight: every worker's parameters and AdamW state, the outer momentum
# and the pending averaged outer gradient are in the file.
SDO=(--optim adamw --diloco 8 --fragments 2 --overlap 3 --mix 0.5)
DCK="$TMP/diloco.ckpt"
if ranks 3 "${SDO[@]}" --steps 50 --dump-weights "$TMP/sdo-50.bin" &&
    ranks 3 "${SDO[@]}" --steps 50 --ckpt "$DCK" --ckpt-every 10 --stop-after 20 &&
    grep -q 'stopped after step 20' "$TMP/out" &&
    ranks 3 "${SDO[@]}" --steps 50 --resume "$DCK" --check-weights "$TMP/sdo-50.bin" \
        --tol "$TOL" && matched && grep -q 'resumed .* at step 20' "$TMP/out"; then
    ok "DiLoCo checkpoint (overlapped sync in flight), resume: equals the uninterrupted run"
else
    not_ok "DiLoCo checkpoint (overlapped sync in flight), resume: equals the uninterrupted run"
fi
# The comparison can fail: without the per-worker state (a DDP checkpoint of the same
# model cannot stand in) the resume is refused; a changed world size or schedule too.
expect_fail "DiLoCo resume with another world size is refused" \
    'written by 3 ranks; this run has 2' ranks 2 "${SDO[@]}" --steps 50 --resume "$DCK"
expect_fail "DiLoCo resume with another schedule is refused" \
    'overlap 3; this run is --diloco 8 --fragments 2 --overlap 2: resume with the same' \
    ranks 3 --optim adamw --diloco 8 --fragments 2 --overlap 2 --steps 50 --resume "$DCK"
expect_fail "resuming a DiLoCo checkpoint as DDP is refused" 'this run is DDP' \
    ranks 3 --optim adamw --steps 50 --resume "$DCK"
cp "$DCK" "$TMP/dflip.ckpt"
dsize=$(stat -c %s "$DCK")
printf '\x55' | dd of="$TMP/dflip.ckpt" bs=1 seek=$((dsize - 100)) conv=notrunc status=none
expect_fail "a flipped byte in a worker's state is a checksum error" 'corrupt: checksum' \
    ranks 3 "${SDO[@]}" --steps 50 --resume "$TMP/dflip.ckpt"

# 9. Quantized gradients with error feedback (coll_allreduce_quantized on a second comm,
# overlapped with backward as the fp32 buckets are). The loss falls, the test accuracy is
# high, every replica holds the same parameters (the codec's all-gather gives every rank the
# same bytes), and coll's byte counter shows the smaller wire format.
loss_of() { awk '/train loss/ { l[++k] = $7 } END { print l[1], l[k] }' "$TMP/out"; }
sent_of() { awk '/bytes sent by rank 0/ { print $(NF-2) }' "$TMP/out"; }
if ranks 3 --steps 120 --log-every 40; then
    fp32_sent=$(sent_of)
else
    fp32_sent=0
fi
for codec in int8 int4; do
    if ranks 3 --steps 120 --log-every 40 --quant "$codec" &&
        grep -q 'replicas: all 3 hold identical parameters' "$TMP/out" &&
        awk '/final test accuracy/ { a = $NF } END { exit !(a >= 0.9) }' "$TMP/out" &&
        loss_of | awk '{ exit !($2 < 0.2 * $1) }' &&
        awk -v q="$(sent_of)" -v f="$fp32_sent" \
            -v lim="$([ "$codec" = int8 ] && echo 0.5 || echo 0.3)" \
            'BEGIN { exit !(f > 0 && q > 0 && q < lim * f) }'; then
        ok "$codec gradients with error feedback: loss falls, replicas equal, fewer bytes"
    else
        not_ok "$codec gradients with error feedback: loss falls, replicas equal, fewer bytes"
    fi
done
# Streaming DiLoCo as the paper runs it: overlapped, mixed, 4-bit outer gradients.
if ranks 4 --optim adamw --steps 160 --diloco 8 --fragments 2 --overlap 2 --mix 0.5 \
    --quant e3m0 &&
    grep -q 'replicas: all 4 hold identical parameters' "$TMP/out" &&
    awk '/final test accuracy/ { a = $NF } END { exit !(a >= 0.8) }' "$TMP/out"; then
    ok "Streaming DiLoCo, overlapped, 4-bit outer gradients: learns, replicas end equal"
else
    not_ok "Streaming DiLoCo, overlapped, 4-bit outer gradients: learns, replicas end equal"
fi
expect_fail "an unknown codec is a usage error" "unknown codec 'int3'" \
    plain "$DPTRAIN" --synthetic 100 --quant int3

# 10. Ranks started with different flags stop at once with a message naming the flag.
expect_fail "ranks with different flags are refused" 'different --lr \(from 0.05 to 0.1' \
    plain "$COLLRUN" -n 3 sh -c 'if [ "$COLL_RANK" = 2 ]; then x="--lr 0.1"; fi
        exec "$0" "$@" $x' "$DPTRAIN" "${COMMON[@]}" --steps 20

# 11. What a user reads: the summary says what its per-step means cover; DiLoCo with the
# default sgd says adamw is meant; a resumed --quant run says its error feedback restarts;
# --metrics writes every reported number as CSV.
ranks 2 --steps 20 --log-every 5 --eval-every 10 --metrics "$TMP/m.csv"
check "the summary: per-step means of the steps alone; evaluations in the wall time only" \
    grep -q 'summary: 20 steps in .* (evaluations and checkpoints included); per step, mean over the steps alone' "$TMP/out"
py_metrics() {
    python3 - "$TMP/m.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
train = [r for r in rows if r["train_loss"]]
ev = [r for r in rows if r["test_accuracy"]]
assert [int(r["step"]) for r in train] == [5, 10, 15, 20], train
assert [int(r["step"]) for r in ev] == [10, 20], ev
assert all(float(r["compute_ms"]) >= 0 and int(r["bytes_sent_rank0"]) > 0 for r in train)
assert all(0 <= float(r["test_accuracy"]) <= 1 for r in ev)
PY
}
check "--metrics: a CSV row per log line (steps 5..20) and per evaluation (10, 20)" py_metrics
ranks 2 --steps 8 --diloco 4
check "--diloco with the default sgd: a note that DiLoCo means adamw" \
    grep -q "note: DiLoCo's inner optimizer is AdamW (--optim adamw); this run's is sgd, the default" "$TMP/out"
ranks 2 --steps 8 --diloco 4 --optim adamw
check "--diloco --optim adamw: no such note" eval '! grep -q "note: DiLoCo" "$TMP/out"'
ranks 2 --steps 10 --quant int8 --ckpt "$TMP/q.ckpt" --ckpt-every 5 --stop-after 5 &&
    ranks 2 --steps 10 --quant int8 --resume "$TMP/q.ckpt"
check "resuming a --quant run: a note that error feedback restarts from zero" \
    grep -q 'note: error feedback starts again from zero residuals' "$TMP/out"

# 12. --plot writes the PNGs (needs gnuplot).
if ! command -v gnuplot >/dev/null; then
    skip "--plot writes PNGs" "no gnuplot"
elif ranks 2 --steps 40 --eval-every 10 --plot "$TMP/plot" &&
    [ "$(head -c 4 "$TMP/plot-accuracy.png" | od -An -c | tr -d ' ')" = '211PNG' ] &&
    [ "$(head -c 4 "$TMP/plot-time.png" | od -An -c | tr -d ' ')" = '211PNG' ] &&
    [ "$(head -c 4 "$TMP/plot-bytes.png" | od -An -c | tr -d ' ')" = '211PNG' ]; then
    ok "--plot writes PNGs"
else
    not_ok "--plot writes PNGs"
fi
# One evaluation, one window of steps: gnuplot would warn of empty ranges on stderr.
if ! command -v gnuplot >/dev/null; then
    skip "--plot with one evaluation: no gnuplot warnings" "no gnuplot"
else
    ranks 2 --steps 1 --plot "$TMP/one"
    check "--plot with one evaluation: PNGs, no gnuplot warnings" \
        eval '[ -s "$TMP/one-accuracy.png" ] && [ -s "$TMP/one-time.png" ] &&
              ! grep -qi "warning\|empty" "$TMP/err"'
fi

tap_done
