#!/usr/bin/env bash
# tests/fuzz/run.sh - build the libFuzzer harnesses with clang (the library instrumented
# for coverage, ASan and UBSan) and run each for DURATION seconds from the checked-in corpus.
#
#   tests/fuzz/run.sh [DURATION] [HARNESS...]     DURATION in seconds, default 60
#
# FUZZ_BUILD (default build-fuzz) is the build directory; new inputs go to a scratch
# directory (the checked-in corpus is only read); a crash leaves its input under
# $FUZZ_BUILD/artifacts and fails the run. Prints TAP (meson's 'fuzz' suite reads it);
# SKIPs when clang or its fuzzer runtime (Debian libclang-rt-*-dev) is missing.
set -u
cd "$(dirname "$0")/../.."
dur=${1:-60}
shift || true
all="unique_id param bootstrap_answer tcp_frame"
harnesses=${*:-$all}
B=${FUZZ_BUILD:-build-fuzz}
CLANG=${CLANG:-clang}

if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "1..0 # SKIP no clang"
    exit 0
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
    >"$probe/p.c"
if ! "$CLANG" -fsanitize=fuzzer,address "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "1..0 # SKIP clang has no libFuzzer runtime (install libclang-rt-dev)"
    exit 0
fi

# The library as the tests link it, instrumented: built by meson so its source list is the
# one place that names the files.
if [ ! -f "$B/build.ninja" ]; then
    CC="$CLANG" meson setup "$B" --buildtype=debugoptimized -Dtests=false -Dcuda=disabled \
        -Dibverbs=disabled -Dhwloc=disabled -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined' \
        >"$probe/setup.log" 2>&1 || {
        echo "Bail out! meson setup of $B failed"
        sed 's/^/# /' "$probe/setup.log" | tail -n 20
        exit 1
    }
fi
if ! ninja -C "$B" libcoll_internal.a >"$probe/build.log" 2>&1; then
    echo "Bail out! building the instrumented library failed"
    sed 's/^/# /' "$probe/build.log" | tail -n 30
    exit 1
fi
libs="-lpthread -lm -ldl $(pkg-config --libs pmix 2>/dev/null || true)"

n=0
failed=0
echo "1..$(echo "$harnesses" | wc -w)"
for h in $harnesses; do
    n=$((n + 1))
    exe="$B/fuzz_$h"
    # shellcheck disable=SC2086
    if ! "$CLANG" -g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -Iinclude -Isrc -I. "tests/fuzz/fuzz_$h.c" "$B/libcoll_internal.a" $libs \
        -o "$exe" 2>"$probe/cc.log"; then
        echo "not ok $n - fuzz_$h builds"
        sed 's/^/# /' "$probe/cc.log" | tail -n 20
        failed=$((failed + 1))
        continue
    fi
    work="$B/corpus-$h"
    mkdir -p "$work" "$B/artifacts"
    if "$exe" "$work" "tests/fuzz/corpus/$h" -max_total_time="$dur" -timeout=10 \
        -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
        -artifact_prefix="$B/artifacts/$h-" >"$probe/run.log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$probe/run.log" | grep -o '[0-9]*$')
        cov=$(grep -o 'cov: [0-9]*' "$probe/run.log" | tail -n 1)
        echo "ok $n - fuzz_$h: ${runs:-?} inputs in ${dur} s, $cov"
    else
        echo "not ok $n - fuzz_$h found a failure (input in $B/artifacts/)"
        grep -E 'ERROR|SUMMARY|#[0-9]+ 0x|Test unit written' "$probe/run.log" | head -n 30 |
            sed 's/^/# /'
        failed=$((failed + 1))
    fi
done
[ "$failed" -eq 0 ]
