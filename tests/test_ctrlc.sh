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

# 1-2. The issue's two commands, smaller: rows on screen, then Ctrl-C.
sweep="allreduce -b 8 -e 64M -n 100 -w 1 -c 0"
if run_case collrun "'$COLLRUN' -n 2 '$COLLBENCH' $sweep --json $TMP/a.json" \
    '^ +65536 +16384 +float'; then
    check "collrun -n 2 collbench --json, Ctrl-C after $seen rows: exit 130, the rows in a JSON record" \
        eval '[ "$rc" = 130 ] && record_ok "$TMP/a.json" "$seen" interrupted,failed && ranks_gone a.json'
else
    not_ok "collrun -n 2 collbench --json, Ctrl-C after rows"
fi
if run_case np "'$COLLBENCH' $sweep --np 2 --json $TMP/b.json" '^ +65536 +16384 +float'; then
    check "collbench --np 2 --json, Ctrl-C after $seen rows: exit 130, the rows in a JSON record" \
        eval '[ "$rc" = 130 ] && record_ok "$TMP/b.json" "$seen" interrupted,failed && ranks_gone b.json'
else
    not_ok "collbench --np 2 --json, Ctrl-C after rows"
fi

# 3. Before the first row: the file is open (truncated) and holds a record all the same.
if run_case start "COLLBENCH_FAULT=stall-start '$COLLRUN' -n 2 '$HOOKED' $sweep --json $TMP/c.json" \
    'stall-start: waiting'; then
    check "Ctrl-C before the first row: exit 130, a JSON record with no results" \
        eval '[ "$rc" = 130 ] && record_ok "$TMP/c.json" 0 interrupted && ranks_gone c.json'
else
    not_ok "Ctrl-C before the first row"
fi

# 4. As the final record is written: the signal waits for it, then ends the job.
if run_case final "COLLBENCH_FAULT=stall-final '$COLLRUN' -n 2 '$HOOKED' allreduce -b 8 -e 1K -n 2 -w 0 --json $TMP/d.json" \
    'stall-final: waiting'; then
    check "Ctrl-C as the final record is written: exit 130, every row in it, interrupted" \
        eval '[ "$rc" = 130 ] && record_ok "$TMP/d.json" 8 interrupted && ranks_gone d.json'
else
    not_ok "Ctrl-C as the final record is written"
fi

tap_done
