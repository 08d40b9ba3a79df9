#!/usr/bin/env bash
# test_collrun.sh - collrun's job control, checked with plain shell programs as ranks.
#
#   tests/test_collrun.sh path/to/collrun [path/to/collbench]
#
# Prints TAP. With collbench given, also checks that collbench rejects bad arguments with
# exit status 2 (and never crashes). Every collrun run is bounded by timeout(1), so a hang
# fails a case instead of the suite. "Dead" means gone or a zombie: in a container the
# reaper of orphans may be slow to reap.
# The ranks' scripts are single-quoted on purpose: they expand in the ranks.
# shellcheck disable=SC2016
set -u

COLLRUN=${1:?usage: test_collrun.sh COLLRUN [COLLBENCH]}
COLLBENCH=${2:-}
GUARD="timeout -k 5 60"    # outer bound for one collrun run, far above what any case needs

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_cleanup() {
    # Kill what a failed case left behind: only processes that carry this run's scratch
    # directory in their environment (a recorded pid may since belong to someone else).
    for f in "$TMP"/*/*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null) || continue
        case $pid in '' | *[!0-9]*) continue ;; esac
        grep -qzF "W=$TMP/" "/proc/$pid/environ" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    done
}
tap_diag() { tap_show "head -n 20" "$TMP/out" "$TMP/err"; }

alive() {
    local pid=$1 state
    [ -r "/proc/$pid/stat" ] || return 1
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}
# all_dead FILE...: every pid named in the files is gone within 5 s (signals and reaping
# are asynchronous; this bounds the wait, it does not time anything).
all_dead() {
    local f pid _
    for f in "$@"; do
        [ -e "$f" ] || { echo "# missing pid file $f"; return 1; }
        pid=$(cat "$f")
        for _ in $(seq 50); do
            alive "$pid" || continue 2
            sleep 0.1
        done
        echo "# pid $pid ($f) survived"
        return 1
    done
}
# wait_files FILE...: wait (at most 10 s) until all exist and are non-empty.
wait_files() {
    local f _ missing
    for _ in $(seq 100); do
        missing=
        for f in "$@"; do [ -s "$f" ] || missing=$f; done
        [ -z "$missing" ] && return 0
        sleep 0.1
    done
    echo "# $missing never appeared"
    return 1
}

# run ARGS...: collrun with ARGS, stdout/stderr to $TMP/out, $TMP/err, status in $rc.
run() {
    $GUARD "$COLLRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
expect_rc() {
    local want=$1 desc=$2
    if [ "$rc" = "$want" ]; then ok "$desc"; else not_ok "$desc" "exit status $rc, want $want"; fi
}

# ---------------------------------------------------------------------------------------
# Environment of each rank.
E=$TMP/env
mkdir -p "$E"
export W=$E    # the ranks' scratch directory
COLL_RANK=99 COLL_SIZE=99 run -n 3 sh -c \
    'echo "$COLL_RANK $COLL_SIZE $COLL_LOCAL_RANK $COLL_LOCAL_SIZE" > "$W/vars.$COLL_RANK";
     echo "$COLL_UNIQUE_ID" > "$W/id.$COLL_RANK"'
expect_rc 0 "three ranks that exit 0: collrun exits 0"
vars=$(cat "$E"/vars.0 "$E"/vars.1 "$E"/vars.2 2>/dev/null | tr '\n' ,)
check "COLL_RANK, COLL_SIZE, COLL_LOCAL_RANK, COLL_LOCAL_SIZE per rank, the caller's overridden" \
    test "$vars" = "0 3 0 3,1 3 1 3,2 3 2 3,"
id_ok() {
    local id0
    id0=$(cat "$E/id.0") || return 1
    [ "${#id0}" -eq 256 ] || { echo "# id length ${#id0}"; return 1; }
    case $id0 in *[!0-9a-fA-F]*) echo "# id not hex: $id0"; return 1 ;; esac
    cmp -s "$E/id.0" "$E/id.1" && cmp -s "$E/id.0" "$E/id.2"
}
check "COLL_UNIQUE_ID is one 256-digit hex id shared by all ranks" id_ok

run -n 1 -- sh -c 'exit 0'
expect_rc 0 "'--' ends collrun's options"

run -n 2 sh -c 'if [ "$COLL_RANK" = 1 ]; then sleep 0.3; fi; exit 0'
expect_rc 0 "a rank that finishes early with status 0 is not a failure"

# ---------------------------------------------------------------------------------------
# A failing rank: its status is collrun's, the others and their children are killed.
F=$TMP/fail
mkdir -p "$F"
export W=$F    # the ranks' scratch directory
run -n 4 sh -c '
    if [ "$COLL_RANK" = 1 ]; then
        # Fail only once everyone is up, so that there is someone to kill.
        for i in $(seq 100); do
            [ $(ls "$W"/*.ready 2>/dev/null | wc -l) -ge 3 ] && break
            sleep 0.1
        done
        exit 3
    fi
    echo $$ > "$W/rank$COLL_RANK.pid"
    sleep 300 & echo $! > "$W/child$COLL_RANK.pid"
    echo > "$W/rank$COLL_RANK.ready"
    wait'
expect_rc 3 "rank 1 exits 3: collrun exits 3"
check "the failed rank and its status are reported on stderr" \
    grep -q "rank 1 .*exited with status 3" "$TMP/err"
check "the other ranks are killed" all_dead "$F"/rank0.pid "$F"/rank2.pid "$F"/rank3.pid
check "what the other ranks started is killed too" \
    all_dead "$F"/child0.pid "$F"/child2.pid "$F"/child3.pid

K=$TMP/killed
mkdir -p "$K"
export W=$K    # the ranks' scratch directory
run -n 2 sh -c '
    if [ "$COLL_RANK" = 0 ]; then
        for i in $(seq 100); do [ -s "$W/rank1.pid" ] && break; sleep 0.1; done
        kill -KILL $$
    fi
    echo $$ > "$W/rank1.pid"; exec sleep 300'
expect_rc 137 "rank 0 killed by SIGKILL: collrun exits 128+9"
check "a rank killed by a signal is reported with the signal" \
    grep -q "rank 0 .*killed by signal 9" "$TMP/err"
check "the surviving rank is killed" all_dead "$K"/rank1.pid

S=$TMP/stubborn
mkdir -p "$S"
export W=$S    # the ranks' scratch directory
run -n 2 sh -c '
    if [ "$COLL_RANK" = 0 ]; then
        for i in $(seq 100); do [ -s "$W/rank1.pid" ] && break; sleep 0.1; done
        exit 5
    fi
    trap "" TERM
    echo $$ > "$W/rank1.pid"
    while :; do sleep 1; done'
expect_rc 5 "a rank that ignores SIGTERM does not hold collrun: exits 5"
check "the rank that ignored SIGTERM is killed after the grace period" all_dead "$S"/rank1.pid

run -n 2 /nonexistent/program
expect_rc 127 "a program that does not exist: exit 127"

# ---------------------------------------------------------------------------------------
# Signals sent to collrun reach the ranks.
G=$TMP/sig
mkdir -p "$G"
export W=$G    # the ranks' scratch directory
# Started directly (not under timeout(1)) so that $! is collrun; its own --timeout bounds it.
"$COLLRUN" --timeout 60 -n 3 sh -c '
    trap "echo TERM > \"\$W/got.\$COLL_RANK\"; exit 0" TERM
    echo $$ > "$W/rank$COLL_RANK.pid"
    while :; do sleep 0.1; done' >"$TMP/out" 2>"$TMP/err" </dev/null &
bg=$!
echo "$bg" >"$G/collrun.pid"
if wait_files "$G"/rank0.pid "$G"/rank1.pid "$G"/rank2.pid; then
    kill -TERM "$bg"
fi
wait "$bg"
rc=$?
expect_rc 0 "SIGTERM to collrun is forwarded; ranks that catch it and exit 0 make exit 0"
check "every rank saw SIGTERM" test "$(cat "$G"/got.* 2>/dev/null | wc -l)" -eq 3

# Ctrl-C: the ranks get SIGINT one after another, and one may fail for its own reasons (here
# rank 1 exits 7 at once) before the other dies of the signal (rank 0, 0.3 s later). The job
# was interrupted all the same: 130, whichever failure collrun saw first.
if env --default-signal=INT true 2>/dev/null; then
    # (A background job starts with SIGINT ignored; env --default-signal gives it back.)
    I=$TMP/int
    mkdir -p "$I"
    export W=$I
    env --default-signal=INT "$COLLRUN" --timeout 60 -n 2 sh -c '
        if [ "$COLL_RANK" = 1 ]; then trap "exit 7" INT
        else trap "sleep 0.3; trap - INT; kill -INT \$\$" INT; fi
        echo $$ > "$W/rank$COLL_RANK.pid"
        while :; do sleep 0.1; done' >"$TMP/out" 2>"$TMP/err" </dev/null &
    bg=$!
    if wait_files "$I"/rank0.pid "$I"/rank1.pid; then
        kill -INT "$bg"
    fi
    wait "$bg"
    rc=$?
    expect_rc 130 "SIGINT forwarded, then a rank exits 7 before another dies of it: exit 130"
else
    skip "SIGINT forwarded, then a rank exits 7 before another dies of it" "env(1) has no --default-signal"
fi

H=$TMP/hup
mkdir -p "$H"
export W=$H    # the ranks' scratch directory
# Under nohup (or any parent that ignores SIGHUP) the signal is discarded before collrun
# could see it, and a shell cannot undo an ignore it inherited: nothing to test then.
sigign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
if [ $((0x${sigign:-0} & 1)) -ne 0 ]; then
    why="SIGHUP is ignored by this test's parent"
    skip "SIGHUP to collrun kills ranks that do not catch it" "$why"
    skip "no rank survives a forwarded SIGHUP" "$why"
else
    "$COLLRUN" --timeout 60 -n 2 sh -c 'echo $$ > "$W/rank$COLL_RANK.pid"; exec sleep 300' \
        >"$TMP/out" 2>"$TMP/err" </dev/null &
    bg=$!
    echo "$bg" >"$H/collrun.pid"
    if wait_files "$H"/rank0.pid "$H"/rank1.pid; then
        kill -HUP "$bg"
    fi
    wait "$bg"
    rc=$?
    expect_rc 129 "SIGHUP to collrun kills ranks that do not catch it: exit 128+1"
    check "no rank survives a forwarded SIGHUP" all_dead "$H"/rank0.pid "$H"/rank1.pid
fi

D=$TMP/death
mkdir -p "$D"
export W=$D    # the ranks' scratch directory
"$COLLRUN" --timeout 60 -n 2 sh -c 'echo $$ > "$W/rank$COLL_RANK.pid"; exec sleep 300' \
    >"$TMP/out" 2>"$TMP/err" </dev/null &
bg=$!
echo "$bg" >"$D/collrun.pid"
if wait_files "$D"/rank0.pid "$D"/rank1.pid; then
    kill -KILL "$bg"
fi
wait "$bg" 2>/dev/null
check "ranks die with collrun even when it is killed by SIGKILL" \
    all_dead "$D"/rank0.pid "$D"/rank1.pid

# ---------------------------------------------------------------------------------------
# --timeout
T=$TMP/timeout
mkdir -p "$T"
export W=$T    # the ranks' scratch directory
run -n 2 --timeout 1 sh -c 'echo $$ > "$W/rank$COLL_RANK.pid"; exec sleep 300'
expect_rc 124 "--timeout 1 with ranks that sleep: exit 124"
check "the timeout is reported on stderr" grep -q "timeout" "$TMP/err"
check "no rank survives the timeout" all_dead "$T"/rank0.pid "$T"/rank1.pid
run -n 2 --timeout 30 sh -c 'exit 0'
expect_rc 0 "--timeout that does not expire changes nothing"

# ---------------------------------------------------------------------------------------
# --tag-output
run -n 3 --tag-output sh -c '
    i=0
    while [ $i -lt 300 ]; do echo "rank $COLL_RANK line $i"; i=$((i + 1)); done
    echo "rank $COLL_RANK to stderr" >&2
    printf "rank %s unterminated" "$COLL_RANK"'
expect_rc 0 "--tag-output run exits 0"
tag_ok() {
    local r bad
    # Every stdout line is whole and carries its own rank's tag.
    bad=$(grep -cvE '^\[([0-2])\] rank \1 (line [0-9]+|unterminated)$' "$TMP/out")
    [ "$bad" -eq 0 ] || { echo "# $bad malformed lines"; return 1; }
    for r in 0 1 2; do
        [ "$(grep -c "^\[$r\] rank $r line " "$TMP/out")" -eq 300 ] || return 1
        # Each rank's lines keep their order.
        grep "^\[$r\] rank $r line " "$TMP/out" | sed 's/.* line //' >"$TMP/seq"
        seq 0 299 | cmp -s - "$TMP/seq" || { echo "# rank $r lines out of order"; return 1; }
        grep -qx "\[$r\] rank $r unterminated" "$TMP/out" || return 1
    done
}
check "--tag-output prefixes every stdout line with [rank], lines whole and in order" tag_ok
check "--tag-output prefixes stderr lines and keeps them on stderr" \
    test "$(grep -cE '^\[([0-2])\] rank \1 to stderr$' "$TMP/err")" -eq 3
# ---------------------------------------------------------------------------------------
# --bind-to core: one CPU per rank, round robin over collrun's own, and COLL_HOST_CPUS
ncpu=$(nproc)
run -n 3 --bind-to core sh -c \
    'echo "$COLL_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) $COLL_HOST_CPUS"'
expect_rc 0 "--bind-to core run exits 0"
bind_ok() {
    local cpus r list host want
    mapfile -t cpus < <(taskset -cp $$ 2>/dev/null | sed 's/.*: //' | tr ',' '\n' |
        awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')
    [ "${#cpus[@]}" -eq "$ncpu" ] || { echo "# taskset: ${#cpus[@]} CPUs, nproc $ncpu"; return 1; }
    for r in 0 1 2; do
        read -r _ list host < <(grep "^$r " "$TMP/out") || { echo "# no line of rank $r"; return 1; }
        want=${cpus[$((r % ncpu))]}
        [ "$list" = "$want" ] || { echo "# rank $r on CPUs '$list', want $want"; return 1; }
        [ "$host" = "$ncpu" ] || { echo "# rank $r: COLL_HOST_CPUS '$host', want $ncpu"; return 1; }
    done
}
check "--bind-to core pins rank r to the r-th allowed CPU and sets COLL_HOST_CPUS" bind_ok
run -n 2 --bind-to none sh -c 'echo "${COLL_HOST_CPUS-unset}"'
check "--bind-to none leaves affinity and COLL_HOST_CPUS alone" \
    test "$(sort -u "$TMP/out")" = "unset"
# the default (auto): bound as core, also when ranks outnumber the CPUs
run -n "$ncpu" sh -c \
    'echo "$COLL_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) ${COLL_HOST_CPUS-unset}"'
auto_ok() {
    local r list host
    for r in $(seq 0 $((ncpu - 1))); do
        read -r _ list host < <(grep "^$r " "$TMP/out") || { echo "# no line of rank $r"; return 1; }
        case $list in *[,-]*) echo "# rank $r on CPUs '$list', want one"; return 1 ;; esac
        [ "$host" = "$ncpu" ] || { echo "# rank $r: COLL_HOST_CPUS '$host', want $ncpu"; return 1; }
    done
    [ "$(cut -d' ' -f2 "$TMP/out" | sort -u | wc -l)" -eq "$ncpu" ] ||
        { echo "# ranks share a CPU"; return 1; }
}
check "by default, $ncpu ranks on $ncpu CPUs get a CPU each" auto_ok
run -n $((ncpu + 1)) sh -c \
    'echo "$COLL_RANK $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) ${COLL_HOST_CPUS-unset}"'
over_ok() {
    local list host first
    read -r _ first _ < <(grep "^0 " "$TMP/out") || { echo "# no line of rank 0"; return 1; }
    read -r _ list host < <(grep "^$ncpu " "$TMP/out") || { echo "# no line of rank $ncpu"; return 1; }
    [ "$list" = "$first" ] || { echo "# rank $ncpu on CPUs '$list', want rank 0's '$first'"; return 1; }
    [ "$host" = "$ncpu" ] || { echo "# COLL_HOST_CPUS '$host', want $ncpu"; return 1; }
    ! grep -q "to a CPU at most" "$TMP/err" || { echo "# auto printed core's notice"; return 1; }
}
check "by default, more ranks than CPUs are bound round robin, quietly" over_ok

run -n 2 sh -c 'echo plain'
check "without --tag-output lines are untouched" test "$(grep -cx plain "$TMP/out")" -eq 2

# stdin goes to rank 0 only.
I=$TMP/stdin
mkdir -p "$I"
export W=$I    # the ranks' scratch directory
echo hello | $GUARD "$COLLRUN" -n 2 sh -c 'cat > "$W/in.$COLL_RANK"' >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc 0 "stdin run exits 0"
check "rank 0 reads collrun's stdin, the others read nothing" \
    test "$(cat "$I/in.0")" = hello -a ! -s "$I/in.1"

# ---------------------------------------------------------------------------------------
# Usage errors: a message and exit 2.
usage_case() {
    local desc=$1
    shift
    run "$@"
    if [ "$rc" = 2 ] && [ -s "$TMP/err" ]; then
        ok "usage error exits 2: $desc"
    else
        not_ok "usage error exits 2: $desc" "exit status $rc, stderr $(wc -c <"$TMP/err") bytes"
    fi
}
usage_case "no arguments"
usage_case "missing -n" true
usage_case "-n 0" -n 0 true
usage_case "-n -1" -n -1 true
usage_case "-n abc" -n abc true
usage_case "-n 2x" -n 2x true
usage_case "-n without value" -n
usage_case "missing program" -n 2
usage_case "missing program after --" -n 2 --
usage_case "unknown flag" -n 2 --bogus true
usage_case "--timeout 0" -n 1 --timeout 0 true
usage_case "--timeout abc" -n 1 --timeout abc true
usage_case "--timeout without value" -n 1 --timeout
usage_case "--bind-to socket" -n 1 --bind-to socket true
run -n 1 --bind-to auto true
expect_rc 0 "--bind-to auto is accepted"
usage_case "--bind-to without value" -n 1 --bind-to
run --help
expect_rc 0 "--help exits 0"

# ---------------------------------------------------------------------------------------
# collbench's argument checks (no communicator is needed to reject them).
if [ -n "$COLLBENCH" ]; then
    bench_usage() {
        local desc=$1
        shift
        $GUARD "$COLLBENCH" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
        rc=$?
        if [ "$rc" = 2 ] && [ -s "$TMP/err" ]; then
            ok "collbench usage error exits 2: $desc"
        else
            not_ok "collbench usage error exits 2: $desc" "exit status $rc"
        fi
    }
    bench_usage "no collective"
    bench_usage "unknown collective" alltoallx
    bench_usage "unknown flag" allreduce -q 1
    bench_usage "malformed size -b 1X" allreduce -b 1X
    bench_usage "malformed size -e ''" allreduce -e ''
    bench_usage "size overflow" allreduce -e 99999999999G
    bench_usage "min > max" allreduce -b 1M -e 1K
    bench_usage "factor < 2 without -i" allreduce -f 1
    bench_usage "step bytes 0" allreduce -i 0
    bench_usage "unknown dtype" allreduce -d float7
    bench_usage "unknown op" allreduce -o xor
    bench_usage "negative root" reduce -r -1
    bench_usage "-c -1 (checked calls)" allreduce -c -1
    bench_usage "-z 7" allreduce -z 7
    bench_usage "-n 0" allreduce -n 0
    bench_usage "-w -1" allreduce -w -1
    bench_usage "-T -1 (timeout seconds)" allreduce -T -1
    bench_usage "--time-budget 0" allreduce --time-budget 0
    bench_usage "flag without value" allreduce -b
    bench_usage "stray argument" allreduce extra
    # root is checked against the number of ranks; standalone collbench is one rank.
    bench_usage "root out of range" broadcast -r 1 -b 8 -e 8
fi

tap_done
