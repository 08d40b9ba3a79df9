#!/usr/bin/env bash
# test_agree.sh - the agreement matrix: rank 0 makes one call, the other ranks another
# (tests/mp_agree.c), over each path (the shared-memory fast path with small and large
# calls, the general path over shm, TCP) and 2, 3, 4 and 8 ranks, by default and in checking
# mode (COLL_CHECK=1). Every case must end in an error on every rank (by its next call or
# coll_comm_destroy; in checking mode within the call), never through COLL_TIMEOUT_MS; the
# one case whose calls agree (blocking against non-blocking) must succeed.
#
#   tests/test_agree.sh COLLRUN MP_AGREE [TABLE]
#
# TABLE, when given, receives one line per run: mode path np case outcome ms (bench/
# agree_table.py turns it into docs/reliability.md's time-to-error table).
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

COLLRUN=$1
MP=$2
TABLE=${3:-}
export COLL_TIMEOUT_MS=${COLL_TIMEOUT_MS:-30000}

CASES="count dtype op allgather reducescatter alltoall gatherscatter agcount gatherroot
scatterroot bcastroot reduceroot reducecount p2p nbmix"

# run MODE PATH NP CASE: one run; ok/not_ok, and the table line
run() {
    local mode=$1 path=$2 np=$3 c=$4 size=small env=()
    case $path in
    flat) ;;
    flat-large) size=large ;;
    general) env=(COLL_SHM_FLAT=0) ;;
    tcp) env=(COLL_TRANSPORT=tcp) ;;
    esac
    [ "$mode" = check ] && env+=(COLL_CHECK=1)
    # the documented exceptions (include/coll.h): over TCP alone, ranks that wait on each
    # other under different roots or collectives tell the peers they wait on after 20 ms,
    # but a peer that waits on some third rank reads it only later: such cycles may end at
    # the timeout (a short one here); the same collective with other counts, dtype or op
    # always exchanges a message first
    if [ "$mode" = default ] && [ "$path" = tcp ] &&
        ! [[ " count dtype op agcount reducecount p2p nbmix " == *" $c "* ]]; then
        env+=(COLL_TIMEOUT_MS=2000 AGREE_TIMEOUT_OK=1)
    fi
    # ... and a rank whose last call only sent may hear nothing before its destroy returns
    if [ "$mode" = default ] && [ "$path" = tcp ] &&
        [[ " bcastroot scatterroot reducecount p2p " == *" $c "* ]]; then
        env+=(AGREE_SENDER_OK=1)
    fi
    if env "${env[@]}" "$COLLRUN" -n "$np" --timeout 120 "$MP" "$c" "$size" \
        >"$TMP/out" 2>"$TMP/err" </dev/null; then
        ok "$mode $path np $np $c"
        res=ok
    else
        not_ok "$mode $path np $np $c" "$(tail -n 12 "$TMP/out" "$TMP/err")"
        res=FAIL
    fi
    if [ -n "$TABLE" ]; then
        # the slowest rank's time to its error, and where the first rank erred
        awk -v m="$mode" -v p="$path" -v n="$np" -v c="$c" -v r="$res" '
            /^agree / { ms = $(NF-0); for (i = 1; i <= NF; i++) if ($i == "ms") t = $(i+1) + 0
                        if (t > worst) worst = t
                        w = ($6 != "SUCCESS" && $6 != "success") ? "call" : ($8 != "SUCCESS" && $8 != "success") ? "next" : ($10 != "SUCCESS" && $10 != "success") ? "destroy" : "none"
                        where[w]++ }
            END { s = ""; for (k in where) s = s k ":" where[k] " "; printf "%s %s %s %s %s %.1f %s\n", m, p, n, c, r, worst, s }' \
            "$TMP/out" >>"$TABLE"
    fi
}

for mode in default check; do
    for path in flat flat-large general tcp; do
        for np in 2 3 4 8; do
            # 8 ranks: the fast path and TCP (the general path over shm is the 3- and 4-rank
            # runs'); checking mode: 3 ranks on every path
            [ "$np" = 8 ] && [ "$path" != flat ] && [ "$path" != tcp ] && continue
            [ "$mode" = check ] && [ "$np" != 3 ] && continue
            for c in $CASES; do
                run "$mode" "$path" "$np" "$c"
            done
        done
    done
done
tap_done
