#!/usr/bin/env bash
# test_abi.sh - libcoll.so exports exactly the committed list abi/libcoll.symbols (nothing
# leaks out of -fvisibility=hidden, nothing public goes missing), every name on it is
# declared in include/coll.h and every function declared there is exported; the SONAME is
# libcoll.so.0; and the library does not need CUDA to load.
#
#   test_abi.sh LIBCOLL_SO SYMBOLS_FILE COLL_H
set -uo pipefail

so=$1 list=$2 header=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1)) failed=$((failed + 1))
    echo "not ok $n - $1"
    sed 's/^/# /' "$scratch/log"
}

echo "1..5"

# Sanitizer builds add their runtime's hooks to every object; they are not coll's ABI.
nm -D --defined-only "$so" | awk '{print $3}' |
    grep -Ev '^(__asan|__ubsan|__sanitizer|__lsan|___asan)' | LC_ALL=C sort >"$scratch/exported"
grep -Ev '^[[:space:]]*(#|$)' "$list" | LC_ALL=C sort >"$scratch/expected"
if diff -u "$scratch/expected" "$scratch/exported" >"$scratch/log"; then
    ok "exported dynamic symbols equal abi/libcoll.symbols ($(wc -l <"$scratch/exported"))"
else
    echo "- listed but not exported, + exported but not listed. An intended change of the" \
        "API updates abi/libcoll.symbols and docs/CHANGELOG.md; anything else is a leak" \
        "(mark internal functions static or COLL_INTERNAL)." >>"$scratch/log"
    not_ok "exported dynamic symbols equal abi/libcoll.symbols"
fi

# The functions coll.h declares COLL_API, comments and preprocessor lines left out, so that
# a name mentioned in prose or in the COLL_API definition does not count.
python3 - "$header" >"$scratch/declared" <<'PY'
import re, sys
text = re.sub(r"/\*.*?\*/", " ", open(sys.argv[1]).read(), flags=re.S)
text = re.sub(r"^[ \t]*#(.*\\\n)*.*$", " ", text, flags=re.M)
names = re.findall(r"\bCOLL_API\b[^;{]*?\b([A-Za-z_]\w*)\s*\(", text)
print("\n".join(sorted(set(names), key=lambda s: s.encode())))
PY
: >"$scratch/log"
LC_ALL=C comm -23 "$scratch/expected" "$scratch/declared" |
    sed 's/$/ is listed but not declared COLL_API in coll.h/' >"$scratch/log"
if [ ! -s "$scratch/log" ]; then ok "every listed symbol is declared in coll.h"; else
    not_ok "every listed symbol is declared in coll.h"; fi

LC_ALL=C comm -23 "$scratch/declared" "$scratch/exported" |
    sed 's/$/ is declared in coll.h but libcoll.so does not export it/' >"$scratch/log"
if [ ! -s "$scratch/log" ]; then
    ok "every function coll.h declares is exported ($(wc -l <"$scratch/declared"))"
else
    not_ok "every function coll.h declares is exported"
fi

soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "SONAME: '$soname'" >"$scratch/log"
if [ "$soname" = libcoll.so.0 ]; then ok "SONAME is libcoll.so.0"; else
    not_ok "SONAME is libcoll.so.0"; fi

# CUDA is found at run time (dlopen): a machine without it must still load libcoll.
readelf -d "$so" | grep NEEDED >"$scratch/log"
if ! grep -Eq 'libcuda|libnccl' "$scratch/log"; then
    ok "libcoll.so needs neither CUDA nor NCCL to load"
else
    not_ok "libcoll.so needs neither CUDA nor NCCL to load"
fi

[ "$failed" -eq 0 ]
