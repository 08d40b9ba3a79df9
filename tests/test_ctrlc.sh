#!/usr/bin/env bash
# test_ctrlc.sh COLLRUN COLLBENCH COLLBENCH_HOOKED - Ctrl-C pressed in a real terminal.
#
# A person's Ctrl-C is the terminal's: the line discipline sends SIGINT to the whole
# foreground process group, whatever a test that signals the launcher alone assumes. Each
# case types a command into a shell in a tmux pane (its own server and socket), waits for
# what it shows on screen, sends C-c with tmux send-keys, and checks the --json record: a
# JSON document (never an empty file) with every row the screen showed, the shell's exit
# status 130 (128 + SIGINT), and no rank left running.
#
# COLLBENCH_HOOKED (collbench built with -DCOLLBENCH_TEST_HOOKS) holds rank 0 where Ctrl-C
# used to lose the file: after the file was opened (truncated) and before the first row
# (COLLBENCH_FAULT=stall-start), and just before the final record is written
# (stall-final).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

# absolute: the commands run in the pane's shell, from $TMP
COLLRUN=$(realpath "$1")
COLLBENCH=$(realpath "$2")
HOOKED=$(realpath "$3")

command -v tmux >/dev/null || skip_all "no tmux (apt-get install tmux; ./coll setup does)"

SOCK=$TMP/tmux.sock
tm() { tmux -S "$SOCK" "$@"; }
tap_cleanup() { tm kill-server 2>/dev/null || true; }

# A plain shell, no rc files; the pane is wide enough that no row wraps.
if ! tm -f /dev/null new-session -d -x 220 -y 60 -s t \
    "env -i PATH=$PATH HOME=$TMP TERM=xterm PS1='$ ' bash --norc --noprofile"; then
    skip_all "tmux cannot start a session here"
fi
screen() { tm capture-pane -p -t t -S -2000; }
# wait_for REGEX [TENTHS]: until the screen shows REGEX (default 30 s).
wait_for() {
    local i
    for ((i = 0; i < ${2:-300}; i++)); do
        screen | grep -qE "$1" && return 0
        sleep 0.1
    done
    return 1
}
rows_on_screen() { screen | grep -cE '^ +[0-9]+ +[0-9]+ +float'; }

# run_case NAME COMMAND WAIT_REGEX: type COMMAND, wait for WAIT_REGEX, Ctrl-C, wait for the
# shell's "rc=N" line; sets rc and seen (rows on screen when C-c was sent).
n=0
run_case() {
    local cmd=$2 wait=$3
    n=$((n + 1))
    tm send-keys -t t "clear; tmux -S '$SOCK' clear-history -t t" Enter
    sleep 0.2
    tm send-keys -t t "cd '$TMP' && $cmd; echo rc=\$?:$n" Enter
    rc=none
    seen=0
    if ! wait_for "$wait"; then
        echo "# $1: never showed /$wait/"
        screen | tail -n 15 | sed 's/^/#   /'
        tm send-keys -t t C-c
        wait_for "rc=[0-9]+:$n" 100
        return 1
    fi
    seen=$(rows_on_screen)
    tm send-keys -t t C-c
    if ! wait_for "rc=[0-9]+:$n" 150; then
        echo "# $1: the shell did not come back"
        return 1
    fi
    rc=$(screen | grep -oE "rc=[0-9]+:$n" | tail -n 1 | sed 's/rc=\([0-9]*\):.*/\1/')
}

# record_ok FILE MIN_ROWS STATUSES: FILE is a collbench record, with at least MIN_ROWS results
# and a status among STATUSES (comma-separated).
record_ok() {
    python3 - "$@" <<'PY'
import json, sys
path, least, statuses = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
try:
    d = json.load(open(path))
except (OSError, ValueError) as e:
    sys.exit(f"# {path}: not a JSON record ({e}); {len(open(path, 'rb').read())} bytes")
if d.get("tool") != "collbench":
    sys.exit(f"# {path}: not collbench's")
if d.get("status") not in statuses:
    sys.exit(f"# {path}: status {d.get('status')!r}, expected one of {statuses}")
if len(d.get("results", [])) < least:
    sys.exit(f"# {path}: {len(d['results'])} results, the screen showed {least} rows")
PY
}

# no rank of the job is left (the ranks are collbench processes whose record is this file)
ranks_gone() {
    local i
    for ((i = 0; i < 50; i++)); do
        pgrep -f -- "--json $TMP/$1" >/dev/null || return 0
        sleep 0.1
    done
    echo "# ranks left: $(pgrep -f -- "--json $TMP/$1" | tr '\n' ' ')"
    return 1
}

# case NAME DESC COMMAND WAIT_REGEX FILE MIN_ROWS STATUSES: run_case, then exit 130, FILE a
# record with MIN_ROWS results or more ("seen": the rows on screen) and one of STATUSES, no
# rank left.
case_() {
    local name=$1 desc=$2 cmd=$3 wait=$4 file=$5 least=$6 statuses=$7
    if ! run_case "$name" "$cmd --json $TMP/$file" "$wait"; then
        not_ok "$desc"
        return
    fi
    [ "$least" = seen ] && least=$seen
    check "$desc: exit 130, a JSON record, $least rows or more" \
        eval '[ "$rc" = 130 ] && record_ok "$TMP/$file" "$least" "$statuses" && ranks_gone "$file"'
}

# 1-2. The issue's two commands, smaller: rows on screen, then Ctrl-C. The ranks get the
# signal one after the other: rank 0 may see its peer die first and write the record as
# "failed", with every row all the same. -N 0 repeats the sweep until the Ctrl-C: a machine
# fast enough ran all 24 rows before the keys arrived, and the run ended by itself.
sweep="allreduce -b 8 -e 64M -n 100 -w 1 -c 0 -N 0"
row='^ +65536 +16384 +float'
case_ collrun "collrun -n 2 collbench --json, Ctrl-C after rows" \
    "'$COLLRUN' -n 2 '$COLLBENCH' $sweep" "$row" a.json seen interrupted,failed
case_ np "collbench --np 2 --json, Ctrl-C after rows" \
    "'$COLLBENCH' $sweep --np 2" "$row" b.json seen interrupted,failed

# 3. Before the first row: the file is open (truncated) and holds a record all the same.
case_ start "Ctrl-C before the first row" \
    "COLLBENCH_FAULT=stall-start '$COLLRUN' -n 2 '$HOOKED' $sweep" \
    'stall-start: waiting' c.json 0 interrupted

# 4. As the final record is written: the signal waits for it, then ends the job.
case_ final "Ctrl-C as the final record is written" \
    "COLLBENCH_FAULT=stall-final '$COLLRUN' -n 2 '$HOOKED' allreduce -b 8 -e 1K -n 2 -w 0" \
    'stall-final: waiting' d.json 8 interrupted

tap_done
