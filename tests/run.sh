#!/usr/bin/env bash
# run.sh - build and run the test suite; the last line is "N passed, N failed".
#
#   tests/run.sh [--long] [builddir] [-- meson-test-args...]
#
# Without --long the tests of the meson suite "long" (each a minute or more on 2 cores; the
# list is in tests/meson.build) are left out, to keep the default run within 5 minutes on
# 2 cores; --long runs every test, as CI does (.ci/run). Tests named after -- run whatever
# their suite.
# builddir defaults to build; it is set up (buildtype debugoptimized, warnings as errors) when
# it does not exist.
# COLL_BUILD_OPTS adds meson setup options, e.g. for the sanitizers:
#   COLL_BUILD_OPTS="-Db_sanitize=address,undefined -Db_lundef=false" tests/run.sh build-asan
# Arguments after -- go to meson test (e.g. -- --suite unit, -- test_schedule).
# Exit status 0 only when everything built and every test passed (or was skipped).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1

long=0
if [ "${1:-}" = --long ]; then
    long=1
    shift
fi
builddir=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    builddir=$1
    shift
fi
if [ $# -gt 0 ]; then
    if [ "$1" != "--" ]; then
        echo "usage: tests/run.sh [--long] [builddir] [-- meson-test-args...]" >&2
        exit 2
    fi
    shift
fi

# Word splitting of COLL_BUILD_OPTS is intended: it is a list of options.
read -r -a build_opts <<<"${COLL_BUILD_OPTS:-}"

build_failed() {
    echo "tests/run.sh: $1 failed in $builddir" >&2
    # The build counts as one failed test, so that the summary line tells the truth.
    echo "0 passed, 1 failed"
    exit 1
}

if [ ! -d "$builddir/meson-private" ]; then
    meson setup "$builddir" --buildtype debugoptimized -Dwerror=true "${build_opts[@]}" ||
        build_failed "meson setup"
elif [ ${#build_opts[@]} -gt 0 ]; then
    # An existing build dir takes the options it is given now.
    meson setup --reconfigure "$builddir" "${build_opts[@]}" ||
        build_failed "meson setup --reconfigure"
fi
meson compile -C "$builddir" || build_failed "meson compile"

# A stale log must not stand in for this run's.
rm -f "$builddir/meson-logs/testlog.json"
suites=()
[ "$long" = 1 ] || [ $# -gt 0 ] || suites=(--no-suite long)
meson test -C "$builddir" --print-errorlogs --num-processes 2 "${suites[@]}" "$@"
test_rc=$?

python3 tests/summarize.py "$builddir/meson-logs/testlog.json"
sum_rc=$?

if [ "$test_rc" -ne 0 ] || [ "$sum_rc" -ne 0 ]; then
    exit 1
fi
exit 0
