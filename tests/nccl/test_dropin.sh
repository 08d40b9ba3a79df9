#!/usr/bin/env bash
# test_dropin.sh - an NCCL program built against NVIDIA's libnccl.so runs on coll's
# libnccl.so.2 when coll's directory comes first on LD_LIBRARY_PATH: the drop-in promise.
#
#   test_dropin.sh COLL_LIBDIR EXAMPLE_LINKED_TO_NVIDIA|- EXAMPLE_LINKED_TO_COLL
#
# Ranks are plain processes with RANK and WORLD_SIZE set (one per rank, as a batch system
# would start them); the id travels through a file. TAP out.
set -u
libdir=$1 nv_exe=$2 coll_exe=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0

run_ranks() { # NP EXE: start NP ranks, wait for all, succeed if every one printed Success
    local np=$1 exe=$2 pids=() r ok=1
    rm -f "$tmp/id"
    for ((r = 0; r < np; r++)); do
        LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RANK=$r WORLD_SIZE=$np \
            COLL_TIMEOUT_MS=60000 timeout 120 "$exe" "$tmp/id" >"$tmp/out.$r" 2>&1 &
        pids+=($!)
    done
    for r in "${!pids[@]}"; do
        wait "${pids[$r]}" || ok=0
        grep -q "Success" "$tmp/out.$r" || ok=0
        [ $ok = 1 ] || sed 's/^/# rank '"$r"': /' "$tmp/out.$r"
    done
    [ $ok = 1 ]
}

check() { # DESCRIPTION, then the command
    local d=$1
    shift
    n=$((n + 1))
    if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fail=1; fi
}

resolves_to_coll() { # the dynamic linker picks coll's library for EXE
    local exe=$1 got
    got=$(LD_LIBRARY_PATH="$libdir" ldd "$exe" | awk '/libnccl.so.2/ {print $3}')
    echo "# $exe: libnccl.so.2 => $got"
    [ "$(readlink -f "$got")" = "$(readlink -f "$libdir/libnccl.so.2")" ]
}

echo "1..4"
if [ "$nv_exe" = "-" ]; then
    echo "ok 1 # SKIP no NVIDIA libnccl.so to link against"
    echo "ok 2 # SKIP no NVIDIA libnccl.so to link against"
    n=2
else
    check "built against NVIDIA's libnccl.so, the program loads coll's" resolves_to_coll "$nv_exe"
    check "NVIDIA-linked example, 3 ranks on coll" run_ranks 3 "$nv_exe"
fi
check "coll-linked example resolves to coll" resolves_to_coll "$coll_exe"
check "coll-linked example, 2 ranks" run_ranks 2 "$coll_exe"
exit $fail
