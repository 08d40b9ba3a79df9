# shellcheck shell=bash
# tap.sh - the TAP scaffolding of the shell tests, sourced by each of them:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
#
# Sourcing it makes TMP, a scratch directory named after the script, and removes it when the
# script exits, after a failure or a SIGINT/SIGTERM too. It provides:
#
#   ok DESC                  a passing test
#   not_ok DESC [DIAG...]    a failing test; each line of each DIAG follows as a "# " comment,
#                            then what tap_diag prints
#   skip DESC WHY            a test that cannot run here (TAP counts it as passed)
#   check DESC CMD...        ok when CMD succeeds, else not_ok naming CMD
#   skip_all WHY             nothing here can run: plan 1..0 with the reason, exit 0
#   tap_show FILTER FILE...  each non-empty FILE through FILTER ("tail -n 15", or a function
#                            that reads stdin), indented under "#", for tap_diag
#   tap_done                 the plan (1..N: the count is known only at the end); fails
#                            when a test failed, so the script ends with it (or exits with
#                            its status) and meson sees the verdict
#
# and two hooks a script may redefine after sourcing: tap_diag, what a failure shows besides
# its DIAG lines (usually the failed command's output, through tap_show), and tap_cleanup,
# what the script leaves outside TMP (processes, daemons, namespaces), stopped before TMP is
# removed. Both default to nothing.

tap_n=0
tap_failed=0

ok() {
    tap_n=$((tap_n + 1))
    echo "ok $tap_n - $1"
}

not_ok() {
    tap_n=$((tap_n + 1))
    tap_failed=$((tap_failed + 1))
    echo "not ok $tap_n - $1"
    shift
    # Every line commented: a DIAG is often a command's output, several lines long.
    if [ $# -gt 0 ]; then printf '%s\n' "$@" | sed 's/^/# /'; fi
    tap_diag
}

skip() {
    tap_n=$((tap_n + 1))
    echo "ok $tap_n - $1 # SKIP $2"
}

check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else not_ok "$desc" "failed: $*"; fi
}

skip_all() {
    echo "1..0 # SKIP $1"
    exit 0
}

tap_show() {
    local filter=$1 f
    shift
    for f in "$@"; do
        # shellcheck disable=SC2086 # FILTER is a command and its arguments
        if [ -s "$f" ]; then $filter <"$f" | sed 's/^/#   /'; fi
    done
}

tap_done() {
    echo "1..$tap_n"
    [ "$tap_failed" -eq 0 ]
}

tap_diag() { :; }
tap_cleanup() { :; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX") || exit 1
tap_exit() {
    tap_cleanup
    rm -rf "$TMP"
}
trap tap_exit EXIT
# bash runs a trapped signal's handler once the command in progress returns: the script
# ends there even when that command caught the signal itself and exited normally.
trap 'exit 1' INT TERM
