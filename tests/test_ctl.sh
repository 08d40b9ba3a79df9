#!/usr/bin/env bash
# test_ctl.sh - the control plane (src/core/ctl.c) with ranks started here, without a
# launcher, so that nobody kills the survivors of a failure before they report it:
#   - a rank killed before its first collective, the others already waiting in it (the root
#     of a binomial broadcast at 4 and 8 ranks, which no survivor ever connects to; rank 4
#     of an 8-rank all-reduce, the tree parent of 5 and 6): every survivor returns an error
#     within 1 s of the kill;
#   - a rank killed mid-run (4 ranks): every survivor errs within 1 s;
#   - a SIGSTOPped rank: each waiting rank logs its stall once (COLL_STALL_MS), and SIGUSR1
#     to another rank prints on rank 0 a table with every rank's call that names the stopped
#     rank; once it continues, the call completes on every rank;
#   - collrun forwards SIGUSR1 to its ranks: the table appears and the job still succeeds.
#
#   tests/test_ctl.sh REL_RANK MP_CTL COLLRUN
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

REL=$1
MP=$2
COLLRUN=$3
LIMIT_MS=1000
pids=()
tap_cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# a bootstrap root of its own per job, alive until its stdin closes
new_id() {
    rm -f "$TMP/idin" "$TMP/id"
    mkfifo "$TMP/idin"
    "$REL" id <"$TMP/idin" >"$TMP/id" 2>"$TMP/id.err" &
    pids+=($!)
    exec 7>"$TMP/idin"
    for _ in $(seq 100); do [ -s "$TMP/id" ] && break; sleep 0.05; done
    id=$(head -n 1 "$TMP/id")
}

# start NP MODE [ENV...]: ranks 0..NP-1, their pids in rp[]
start() {
    local np=$1 mode=$2
    shift 2
    new_id
    rp=()
    for r in $(seq 0 $((np - 1))); do
        env COLL_UNIQUE_ID="$id" COLL_RANK="$r" COLL_SIZE="$np" COLL_TRANSPORT=tcp \
            COLL_TIMEOUT_MS=20000 COLL_BOOTSTRAP_TIMEOUT_MS=20000 "$@" "$MP" "$mode" \
            >"$TMP/out$r" 2>"$TMP/err$r" </dev/null &
        rp+=($!)
        pids+=($!)
    done
}

wait_ready() { # NP: true once every rank printed READY (within 20 s)
    for _ in $(seq 400); do
        local n=0
        for r in $(seq 0 $(($1 - 1))); do grep -q READY "$TMP/out$r" 2>/dev/null && n=$((n + 1)); done
        [ "$n" = "$1" ] && return 0
        sleep 0.05
    done
    return 1
}

# kill_case NAME NP MODE VICTIM: kill -9 VICTIM once all are READY (in "first", VICTIM
# holds before its call, the others wait in theirs); every other rank must print ERROR
# within LIMIT_MS of the kill
kill_case() {
    local name=$1 np=$2 mode=$3 victim=$4 worst=0 bad=""
    shift 4
    start "$np" "$mode" CTL_HOLD_RANK="$victim" CTL_HOLD_MS=60000 "$@"
    if ! wait_ready "$np"; then
        not_ok "$name: all $np ranks start" "$(tail -n 3 "$TMP"/out* "$TMP"/err*)"
        tap_cleanup
        return
    fi
    sleep 0.2
    t_kill=$(date +%s%N)
    kill -9 "${rp[$victim]}"
    for r in $(seq 0 $((np - 1))); do
        [ "$r" = "$victim" ] && continue
        for _ in $(seq 200); do kill -0 "${rp[$r]}" 2>/dev/null || break; sleep 0.05; done
        line=$(grep -m1 '^ERROR' "$TMP/out$r")
        if [ -z "$line" ]; then
            bad+="rank $r: no error (still running: $(kill -0 "${rp[$r]}" 2>/dev/null && echo yes || echo no)); "
            continue
        fi
        # its error is exit status 2; anything else is a crash, or a sanitizer's report at
        # exit (ASan's leak check exits 1), which a failed call must not leave
        if ! kill -0 "${rp[$r]}" 2>/dev/null; then
            wait "${rp[$r]}"
            rc=$?
            [ "$rc" = 2 ] || bad+="rank $r: exit status $rc, not 2 ($(grep -m1 -h 'Sanitizer' "$TMP/err$r")); "
        fi
        us=$((($(echo "$line" | awk '{print $3}') - t_kill) / 1000))
        [ "$us" -gt "$worst" ] && worst=$us
        { [ "$us" -lt 0 ] || [ "$us" -gt $((LIMIT_MS * 1000)) ]; } && bad+="rank $r: error at $((us / 1000)) ms; "
    done
    worst=$(awk -v u="$worst" 'BEGIN { printf "%.1f", u / 1000 }')
    if [ -z "$bad" ]; then
        ok "$name: every survivor errs within $LIMIT_MS ms of the kill (slowest $worst ms)"
    else
        not_ok "$name: every survivor errs within $LIMIT_MS ms of the kill" "$bad" \
            "$(grep -h ERROR "$TMP"/out* | cut -c1-300)"
    fi
    echo "# ctl $name np $np slowest_ms $worst"
    tap_cleanup
    pids=()
}

# The root of a binomial broadcast dies before it: no survivor ever connects to it (receivers
# wait for their sender to connect), so only the control plane can tell them.
kill_case "broadcast root killed before the first collective, 4 ranks" 4 bcast 0 \
    COLL_ALGO=broadcast=binomial
kill_case "broadcast root killed before the first collective, 8 ranks" 8 bcast 0 \
    COLL_ALGO=broadcast=binomial
kill_case "killed before its first all-reduce, 8 ranks (rank 4: parent of 5, 6 in the tree)" \
    8 first 4
kill_case "killed mid-run, 4 ranks (rank 2)" 4 loop 2

# The stall table: rank 3 holds before its call and is stopped there.
start 4 first CTL_HOLD_RANK=3 CTL_HOLD_MS=1500 COLL_STALL_MS=300
if wait_ready 4; then
    kill -STOP "${rp[3]}"
    sleep 0.8
    kill -USR1 "${rp[1]}"
    sleep 1.6
    kill -CONT "${rp[3]}"
    for r in 0 1 2 3; do
        for _ in $(seq 200); do kill -0 "${rp[$r]}" 2>/dev/null || break; sleep 0.05; done
    done
    if grep -q "rank 3 (.*no answer" "$TMP/err0" && grep -q "rank 1 (.*waiting for" "$TMP/err0" &&
        grep -q "each rank's call" "$TMP/err0"; then
        ok "SIGUSR1 to rank 1: rank 0 prints every rank's call, naming the stopped rank 3"
    else
        not_ok "SIGUSR1 to rank 1: rank 0 prints every rank's call, naming the stopped rank 3" \
            "$(cut -c1-300 "$TMP/err0")"
    fi
    said=0
    for r in 0 1 2; do
        [ "$(grep -c 'has made no progress for .* (COLL_STALL_MS): waiting for' "$TMP/err$r")" = 1 ] &&
            said=$((said + 1))
    done
    check "each waiting rank logs its stall once (COLL_STALL_MS=300)" [ "$said" = 3 ]
    done_n=$(cat "$TMP"/out0 "$TMP"/out1 "$TMP"/out2 "$TMP"/out3 | grep -c '^DONE')
    check "after SIGCONT the call completes on every rank" [ "$done_n" = 4 ]
else
    not_ok "stall table: all 4 ranks start" "$(tail -n 3 "$TMP"/out* "$TMP"/err*)"
fi
tap_cleanup
pids=()

# collrun forwards SIGUSR1 to every rank; the job goes on.
CTL_HOLD_RANK=2 CTL_HOLD_MS=2500 COLL_TRANSPORT=tcp "$COLLRUN" -n 3 --timeout 60 "$MP" first \
    >"$TMP/cr.out" 2>"$TMP/cr.err" </dev/null &
cr=$!
pids+=($cr)
for _ in $(seq 200); do [ "$(grep -c READY "$TMP/cr.out")" = 3 ] && break; sleep 0.05; done
sleep 0.5
kill -USR1 "$cr"
wait "$cr"
rc=$?
if [ "$rc" = 0 ] && grep -q "each rank's call" "$TMP/cr.err" &&
    grep -q "rank 0 (.*waiting for" "$TMP/cr.err" && [ "$(grep -c '^DONE\|DONE$' "$TMP/cr.out")" = 3 ]; then
    ok "collrun forwards SIGUSR1: one table, and the job still succeeds"
else
    not_ok "collrun forwards SIGUSR1: one table, and the job still succeeds" "rc $rc" \
        "$(cut -c1-300 "$TMP/cr.err" "$TMP/cr.out")"
fi
tap_done
