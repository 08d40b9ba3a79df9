#!/usr/bin/env bash
# tests/tsan.sh - the tests where coll's threads meet (the progress thread taking over
# non-blocking ops, callers waiting on the same comm, the bootstrap root thread, several
# comms in one process, transports driven under the comm lock) built with ThreadSanitizer
# into their own build directory and run. Any data race fails the run.
#
#   tests/tsan.sh [BUILD_DIR]          default build-tsan
#
# Takes a few minutes on two cores (a whole build); not part of ./coll test.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-tsan}
CC=${CC:-clang}

if [ ! -f "$B/build.ninja" ]; then
    CC="$CC" meson setup "$B" --buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false \
        -Dcuda=disabled >/dev/null
fi
ninja -C "$B" tests/test_tcp tests/test_bootstrap tests/test_api tests/test_strangers \
    tests/test_faultsweep tests/mp_coll collrun >/dev/null

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export COLL_TEST_TIMEOUT_MULTIPLIER=${COLL_TEST_TIMEOUT_MULTIPLIER:-5}
failed=0
run() { # NAME CMD...
    local name=$1
    shift
    if "$@" >"$B/tsan-$name.log" 2>&1; then
        echo "tsan: ok   $name"
    else
        echo "tsan: FAIL $name (log: $B/tsan-$name.log)"
        grep -A12 'WARNING: ThreadSanitizer' "$B/tsan-$name.log" | head -n 40 || true
        failed=$((failed + 1))
    fi
}
run tcp "$B/tests/test_tcp"
run bootstrap "$B/tests/test_bootstrap"
run api "$B/tests/test_api"
run strangers "$B/tests/test_strangers"
run faultsweep "$B/tests/test_faultsweep"
for t in nonblocking:4 basic:3 group:3 twocomm:3; do
    run "mp_${t%%:*}" env COLL_TIMEOUT_MS=120000 "$B/collrun" -n "${t##*:}" --timeout 300 \
        "$B/tests/mp_coll" "${t%%:*}"
    run "mp_tcp_${t%%:*}" env COLL_TRANSPORT=tcp COLL_TIMEOUT_MS=120000 "$B/collrun" \
        -n "${t##*:}" --timeout 300 "$B/tests/mp_coll" "${t%%:*}"
done
echo "tsan: $failed failed"
[ "$failed" -eq 0 ]
