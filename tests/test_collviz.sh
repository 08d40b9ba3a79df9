#!/usr/bin/env bash
# test_collviz.sh - collviz, the teaching tool: golden drawings, the data check over every
# algorithm, bad input, traces, the HTML page (and, with chromium, that it renders), prices.
#
#   tests/test_collviz.sh path/to/collviz
#
# Prints TAP. Golden files live in tests/golden/; COLLVIZ_UPDATE_GOLDEN=1 rewrites them
# (after a builder changed its schedule on purpose: read the diff before committing it).
# The drawings use --no-cost so that retuning the cost model's defaults does not move them.
set -u

COLLVIZ=${1:?usage: test_collviz.sh COLLVIZ}
HERE=$(cd "$(dirname "$0")" && pwd)
GOLDEN=$HERE/golden
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
GUARD="timeout -k 5 60"

# ---- golden drawings ------------------------------------------------------------------------
golden() { # name, then collviz arguments
    local name=$1
    shift
    if ! $GUARD "$COLLVIZ" "$@" --no-cost >"$TMP/$name.txt" 2>"$TMP/$name.err"; then
        not_ok "golden $name: collviz $* failed" "$(head -3 "$TMP/$name.err")"
        return
    fi
    if [ "${COLLVIZ_UPDATE_GOLDEN:-0}" = 1 ]; then
        cp "$TMP/$name.txt" "$GOLDEN/$name.txt"
        ok "golden $name (rewritten)"
    elif diff -u "$GOLDEN/$name.txt" "$TMP/$name.txt" >"$TMP/$name.diff"; then
        ok "golden $name"
    else
        not_ok "golden $name differs (COLLVIZ_UPDATE_GOLDEN=1 after checking)" \
            "$(head -20 "$TMP/$name.diff")"
    fi
}
golden ring_allreduce_n4 allreduce --algo ring -n 4 --bytes 64
golden binomial_broadcast_n5 broadcast --algo binomial -n 5 --bytes 20
golden tree_allreduce_n3 allreduce --algo tree -n 3 --bytes 24

# ---- every algorithm leaves every rank with what its collective promises ----------------------
# collviz replays the builders' schedules on symbolic data; a wrong schedule prints WRONG.
bad=""
runs=0
for c in allreduce broadcast reduce allgather reducescatter alltoall gather scatter barrier; do
    for a in ring tree dbtree chain binomial rd rabenseifner bruck pairwise linear vdg \
        dissemination; do
        for np in 1 2 3 5 8; do
            for b in 4 100; do
                out=$($GUARD "$COLLVIZ" $c --algo $a -n $np --bytes $b --chunk 8 \
                    --root $((np - 1)) --no-cost --rounds 1 2>&1)
                rc=$?
                [ $rc = 2 ] && continue # this algorithm does not run this collective
                runs=$((runs + 1))
                if [ $rc != 0 ] || ! grep -q '^result: every rank holds' <<<"$out"; then
                    bad="$bad $c/$a/n$np/$b(rc $rc)"
                fi
            done
        done
    done
done
if [ -z "$bad" ] && [ $runs -gt 100 ]; then
    ok "every algorithm's result is right ($runs runs)"
else
    not_ok "results: $runs runs, wrong:$bad"
fi

# ---- bad input: usage error, exit status 2, a message -----------------------------------------
printf 'this is not a trace\n' >"$TMP/not_a_trace"
printf '# coll-trace 1\nrun allreduce ring 2 4 float 0 4\nrank 0 1\n0 5 0 0 4 0 0 0 0 0 0 0\n' \
    >"$TMP/bad_peer.trace"
while IFS='|' read -r what args; do
    # shellcheck disable=SC2086
    $GUARD "$COLLVIZ" $args >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc = 2 ] && [ -s "$TMP/err" ]; then
        ok "bad input: $what -> exit 2"
    else
        not_ok "bad input: $what: exit $rc, want 2 with a message" "$(head -2 "$TMP/err")"
    fi
done <<EOF
unknown collective|allreduse
no collective|--algo ring
unknown algorithm|allreduce --algo nosuch
algorithm of another collective|broadcast --algo ring
zero ranks|allreduce -n 0
65 ranks|allreduce -n 65
ranks not a number|allreduce -n four
malformed bytes|allreduce --bytes 12Q
negative bytes|allreduce --bytes -8
fractional bytes|allreduce --bytes 1.5M
bytes not whole elements|allreduce --bytes 6
root out of range|broadcast -n 4 --root 4
unknown dtype|allreduce --dtype quaternion
unknown option|allreduce --frobnicate 1
compare with one algorithm|allreduce --compare ring
unknown link|allreduce --link nvlink
cores not a number|allreduce --cores two
not a coll trace|--trace $TMP/not_a_trace
trace with a bad schedule|--trace $TMP/bad_peer.trace
missing trace|--trace $TMP/nonexistent
EOF

# the unknown-algorithm message lists the valid ones
"$COLLVIZ" allreduce --algo nosuch >/dev/null 2>"$TMP/err"
if grep -q 'algorithms for allreduce:.*ring.*tree' "$TMP/err"; then
    ok "unknown algorithm lists the valid ones"
else
    not_ok "unknown algorithm lists the valid ones" "$(cat "$TMP/err")"
fi

# ---- traces: saved and read back, the same drawing --------------------------------------------
if "$COLLVIZ" allreduce --algo dbtree -n 5 --bytes 40 --chunk 8 --no-cost \
    --save-trace "$TMP/t.trace" >"$TMP/a.txt" 2>&1 &&
    "$COLLVIZ" --trace "$TMP/t.trace" >"$TMP/b.txt" 2>&1 &&
    diff <(tail -n +2 "$TMP/a.txt") <(tail -n +2 "$TMP/b.txt") >/dev/null; then
    ok "trace round trip draws the same rounds"
else
    not_ok "trace round trip" "$(diff "$TMP/a.txt" "$TMP/b.txt" | head -5)"
fi

# the data check can fail: two ranks that swap values without adding them
printf '# coll-trace 1\nrun allreduce swap 2 1 float 0 1\n' >"$TMP/swap.trace"
for r in 0 1; do
    printf 'rank %d 2\n0 %d 0 0 1 0 0 0 0 0 0 0\n1 %d 0 0 0 0 0 0 1 0 1 0\n' $r $((1 - r)) \
        $((1 - r)) >>"$TMP/swap.trace"
done
"$COLLVIZ" --trace "$TMP/swap.trace" >"$TMP/out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q '^result: WRONG' "$TMP/out"; then
    ok "a schedule with a wrong result is reported (exit 1)"
else
    not_ok "a schedule with a wrong result is reported: exit $rc" "$(tail -3 "$TMP/out")"
fi

# ---- the HTML page -------------------------------------------------------------------------------
page=$TMP/ring8.html
if $GUARD "$COLLVIZ" allreduce --algo ring -n 8 --bytes 1M --html "$page" >/dev/null 2>"$TMP/err" &&
    [ -s "$page" ]; then
    ok "html page written"
else
    not_ok "html page written" "$(head -3 "$TMP/err")"
fi
if grep -q '"n":8,' "$page" && grep -q '<svg' "$page" && grep -q '"rounds":\[' "$page"; then
    ok "html page carries the rank count and an svg"
else
    not_ok "html page carries the rank count and an svg"
fi
# self-contained: no external script, style, image or font
if grep -Eiq '(src|href)=["'"'"']?(https?:|//)|@import|url\((https?:|//)|<link ' "$page"; then
    not_ok "html page is self-contained" "$(grep -Eio '(src|href)=.{0,40}' "$page" | head -3)"
else
    ok "html page is self-contained"
fi
if $GUARD "$COLLVIZ" broadcast --algo binomial -n 5 --bytes 20 --html "$TMP/b5.html" \
    >/dev/null 2>&1 && grep -q '"n":5,' "$TMP/b5.html" &&
    $GUARD "$COLLVIZ" barrier -n 3 --html "$TMP/bar.html" >/dev/null 2>&1 &&
    grep -q '"n":3,' "$TMP/bar.html"; then
    ok "html page for other collectives"
else
    not_ok "html page for other collectives"
fi

# COLLVIZ_CHROMIUM= (empty) forces the skip; unset, chromium is looked up on PATH
CHROMIUM=${COLLVIZ_CHROMIUM-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then
    skip "html page renders in chromium" "chromium not installed"
    skip "html page runs its script in chromium (first and last round)" "chromium not installed"
    skip "html page: trees drawn as trees, rings as rings" "chromium not installed"
else
    chrome() {
        local profile
        profile=$(mktemp -d "$TMP/chrome.XXXXXX")
        $GUARD "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
            --disable-background-networking --disable-component-update --disable-sync \
            --user-data-dir="$profile" "$@" 2>/dev/null
    }
    chrome --window-size=1200,900 --screenshot="$TMP/shot.png" "file://$page" >/dev/null
    if ! command -v python3 >/dev/null; then
        skip "html page renders in chromium (non-blank screenshot)" "no python3 to read the PNG"
    # non-blank: the PNG decodes to more than a handful of distinct byte values
    elif [ -s "$TMP/shot.png" ] && python3 - "$TMP/shot.png" <<'PY'
import sys, zlib, struct
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat = 8, b''
while pos < len(data):
    length, kind = struct.unpack('>I4s', data[pos:pos + 8])
    if kind == b'IDAT':
        idat += data[pos + 8:pos + 8 + length]
    pos += 12 + length
raw = zlib.decompress(idat)
sys.exit(0 if len(set(raw)) > 16 else 1)
PY
    then
        ok "html page renders in chromium (non-blank screenshot)"
    else
        not_ok "html page renders in chromium (non-blank screenshot)"
    fi
    # first and last round drawn, and no script error on the way (the page marks its body)
    chrome --dump-dom "file://$page" >"$TMP/first.html"
    chrome --dump-dom "file://$page#last" >"$TMP/last.html"
    if grep -q 'data-ready="8 ranks"' "$TMP/first.html" && grep -q 'data-frame="0"' \
        "$TMP/first.html" && grep -q 'data-frame="13"' "$TMP/last.html" &&
        ! grep -q 'data-error=' "$TMP/first.html" "$TMP/last.html"; then
        ok "html page runs its script in chromium (first and last round)"
    else
        not_ok "html page runs its script in chromium (first and last round)" \
            "$(grep -ho '<body[^>]*>' "$TMP/first.html" "$TMP/last.html")"
    fi
    chrome --dump-dom "file://$TMP/b5.html" >"$TMP/b5-dom.html"
    tree_ok() {
        grep -q 'data-layout="ring"' "$TMP/first.html" &&
            grep -q 'data-layout="tree"' "$TMP/b5-dom.html" &&
            ! grep -q 'data-error=' "$TMP/b5-dom.html" &&
            # the tree's edges are drawn, one per rank but the root, and a legend says so
            [ "$(grep -o 'class="edge"' "$TMP/b5-dom.html" | wc -l)" = 4 ] &&
            grep -q 'rank sending in this round' "$TMP/b5-dom.html"
    }
    check "html page: trees drawn as trees (edges, legend), rings as rings" tree_ok
fi

# ---- prices ------------------------------------------------------------------------------------
# A drawing's prices name the parameters behind them (a student can redo the arithmetic)
# and no internal function.
$GUARD "$COLLVIZ" broadcast --algo binomial -n 9 --bytes 64 >"$TMP/prices" 2>"$TMP/err"
if grep -q 'cost model not built' "$TMP/prices"; then
    skip "prices name alpha, beta and gamma" "cost model not built"
else
    check "prices name alpha, beta, gamma and the time per step, no internal function" \
        eval 'grep -Eq "default parameters: alpha [0-9.]+ us, beta [0-9.]+ ns/B .*gamma [0-9.]+ ns/B \(float; .*us per step" "$TMP/prices" &&
              ! grep -q "coll__" "$TMP/prices"'
fi
$GUARD "$COLLVIZ" allreduce -n 8 --compare ring,tree --bytes 8:16M >"$TMP/cmp" 2>"$TMP/err"
rc=$?
if grep -q 'cost model not built' "$TMP/err"; then
    if [ $rc = 2 ]; then ok "--compare without the cost model: exit 2"; else
        not_ok "--compare without the cost model: exit $rc, want 2"; fi
    skip "--compare finds a crossover" "cost model not built"
else
    if [ $rc = 0 ] && grep -q '16 MiB' "$TMP/cmp"; then ok "--compare prints every size"; else
        not_ok "--compare: exit $rc" "$(head -3 "$TMP/err")"; fi
    # ring is latency-bound at 8 bytes and bandwidth-optimal at 16 MiB, tree the other way
    if grep -q 'crossover: ring is faster from' "$TMP/cmp" &&
        grep -E '^ +8 B ' "$TMP/cmp" | grep -q 'tree$' &&
        grep -E '^ +16 MiB ' "$TMP/cmp" | grep -q 'ring$'; then
        ok "--compare finds a crossover (tree small, ring large)"
    else
        not_ok "--compare finds a crossover" "$(cat "$TMP/cmp")"
    fi
fi

# ---- the flat path and the selector, priced by the library's own functions --------------------
if grep -q 'cost model not built' "$TMP/err" "$TMP/prices"; then
    skip "the flat path's row and the selector's pick" "cost model not built"
else
    # a drawing names what the selector would pick for its call, and the flat path's price
    $GUARD "$COLLVIZ" allreduce --algo ring -n 2 --bytes 8 --no-data >"$TMP/pick" 2>&1
    check "a drawing names the selector's pick and the flat path's price" \
        eval 'grep -Eq "the selector.s pick for this call: [a-z]+, [0-9.]+ .s" "$TMP/pick" &&
              grep -Eq "the flat path \(one host over shared memory.*\): [0-9.]+ .s" "$TMP/pick"'
    # the flat path at every size it runs (2 ranks: in pieces above 4 KiB), cheaper than any
    # schedule over shm at 8 bytes
    $GUARD "$COLLVIZ" allreduce -n 2 --link shm --compare flat,best --bytes 8:64M \
        >"$TMP/flat" 2>"$TMP/err"
    flat_ok() {
        grep -q '(shm link, default parameters)' "$TMP/flat" &&
            grep -E '^ +8 B ' "$TMP/flat" | grep -q 'flat$' &&
            ! awk '$1 ~ /^[0-9]/ && $3 == "-"' "$TMP/flat" | grep -q . &&
            grep -Eq '^ +64 MiB +[0-9.]+ ms' "$TMP/flat"
    }
    check "--compare flat,best: the flat path priced at every size it runs" flat_ok
    # all-gather runs on the flat path up to COLL_SHM_FLAT_BYTES (4 KiB) only; all-to-all never
    $GUARD "$COLLVIZ" allgather -n 4 --link shm --compare flat,ring --bytes 1K:16K >"$TMP/ag" 2>&1
    check "--compare: the flat path is '-' where it does not run (all-gather above 4 KiB)" \
        eval 'grep -Eq "^ +4 KiB +[0-9.]+ .s" "$TMP/ag" && grep -Eq "^ +8 KiB +- " "$TMP/ag"'
    $GUARD "$COLLVIZ" alltoall -n 4 --compare flat,pairwise --bytes 64:1K >"$TMP/a2a" 2>&1
    check "--compare: no flat price for all-to-all" \
        eval '[ "$(grep -cE "^ +[0-9]+ (B|KiB) +- " "$TMP/a2a")" = 5 ]'
    # ranks beyond the cores pay for their waits: 8 ranks on 2 cores cost more than on 8
    t_all=$("$COLLVIZ" allreduce -n 8 --link shm --compare flat,ring --bytes 8 | awk '$2 == "B" {print $3}')
    t_two=$("$COLLVIZ" allreduce -n 8 --link shm --cores 2 --compare flat,ring --bytes 8 |
        awk '$2 == "B" {print $3}')
    check "--cores 2: the flat path's 8-rank price includes the waits beyond the cores" \
        eval 'awk -v a="$t_all" -v b="$t_two" "BEGIN { exit !(a > 0 && b > 2 * a) }"'
fi

tap_done
