#!/usr/bin/env bash
# test_agree.sh - the agreement matrix: rank 0 makes one call, the other ranks another
# (tests/mp_agree.c), over each path (the shared-memory fast path with small and large
# calls, the general path over shm, TCP) and 2, 3, 4 and 8 ranks, by default and in checking
# mode (COLL_CHECK=1). Every case must end in an error on every rank (by its next call or
# coll_comm_destroy; in checking mode within the call), never through COLL_TIMEOUT_MS; the
# one case whose calls agree (blocking against non-blocking) must succeed.
# tcp-first: over TCP at 4 and 8 ranks, the disagreeing call is the comm's first (no data
# connection exists yet), and every rank must have its error within 1 s; likewise on the
# emulated hosts of bench/netns_hosts.sh (4 hosts x 1 rank, 2 hosts x 4 ranks) where
# network namespaces can be made (root), under flock /tmp/coll-netns.lock. tcp-destroy: the
# ranks go from that first call straight to coll_comm_destroy, which must return the error.
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
    local mode=$1 path=$2 np=$3 c=$4 size=small env=() pre=()
    case $path in
    flat) ;;
    flat-large) size=large ;;
    general) env=(COLL_SHM_FLAT=0) ;;
    tcp) env=(COLL_TRANSPORT=tcp) ;;
    tcp-first) env=(COLL_TRANSPORT=tcp AGREE_FIRST=1 AGREE_LIMIT_MS=1000) ;;
    tcp-destroy) env=(COLL_TRANSPORT=tcp AGREE_FIRST=1 AGREE_NO_NEXT=1 AGREE_LIMIT_MS=1000) ;;
    netns-*) # each rank enters its emulated host; the bootstrap root on the bridge
        env=(COLL_SOCKET_IFNAME="=cn${bid}br" AGREE_FIRST=1 AGREE_LIMIT_MS=1000)
        pre=("$BED" _enter "$bid" "$per") ;;
    esac
    [ "$mode" = check ] && env+=(COLL_CHECK=1)
    if env "${env[@]}" "$COLLRUN" -n "$np" --timeout 120 "${pre[@]}" "$MP" "$c" "$size" \
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
    for path in flat flat-large general tcp tcp-first; do
        for np in 2 3 4 8; do
            # 8 ranks: the fast path and TCP (the general path over shm is the 3- and 4-rank
            # runs'); checking mode: 3 ranks on every path; first calls: 4 and 8 ranks
            [ "$np" = 8 ] && [ "$path" != flat ] && [ "$path" != tcp ] && [ "$path" != tcp-first ] && continue
            [ "$path" = tcp-first ] && { [ "$mode" = check ] || [ "$np" -lt 4 ]; } && continue
            [ "$mode" = check ] && [ "$np" != 3 ] && continue
            for c in $CASES; do
                run "$mode" "$path" "$np" "$c"
            done
        done
    done
done

# Ranks whose only call sent (broadcast or scatter roots, reduce non-roots) and who
# then destroy at once: destroy returns the error their receivers found.
for c in bcastroot scatterroot reducecount; do
    run default tcp-destroy 4 "$c"
done

# The same first calls across emulated hosts: over TCP between them, shm within a host.
BED=$(dirname "$(readlink -f "$0")")/../bench/netns_hosts.sh
if why=$("$BED" check 2>&1); then
    exec 9>/tmp/coll-netns.lock
    flock 9
    export NETNS_STATE="$TMP/state"
    tap_cleanup() { "$BED" down >/dev/null 2>&1; }
    for cfg in "4 1" "2 4"; do
        read -r k per <<<"$cfg"
        np=$((k * per))
        if ! "$BED" up "$k" -r 10gbit >"$TMP/out" 2>&1; then
            not_ok "netns $k hosts: the test bed comes up" "$(tail -n 5 "$TMP/out")"
            continue
        fi
        bid=$(cat "$NETNS_STATE")
        for c in $CASES; do
            run default "netns-${k}x$per" "$np" "$c"
        done
        "$BED" down >/dev/null 2>&1
    done
    flock -u 9
else
    skip "first calls across emulated hosts (bench/netns_hosts.sh)" "$why"
fi
tap_done
