#!/usr/bin/env bash
# test_headers.sh - every public header compiles on its own, twice included, as C11 and as
# C++17 with -Wall -Wextra -Werror -pedantic: users build with their flags, not ours.
#
#   test_headers.sh INCLUDEDIR CC [CXX]
set -uo pipefail

incdir=$1 cc=$2 cxx=${3:-}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

headers=("$incdir"/*.h)
echo "1..$((2 * ${#headers[@]}))"
n=0 failed=0
for h in "${headers[@]}"; do
    name=$(basename "$h")
    # Twice: the include guard must hold.
    printf '#include <%s>\n#include <%s>\nint main(void) { return 0; }\n' \
        "$name" "$name" >"$scratch/t.c"
    cp "$scratch/t.c" "$scratch/t.cpp"
    n=$((n + 1))
    if "$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I"$incdir" -c "$scratch/t.c" \
        -o "$scratch/t.o" >"$scratch/log" 2>&1; then
        echo "ok $n - $name compiles as C11 (-Wall -Wextra -Werror -pedantic)"
    else
        failed=$((failed + 1))
        echo "not ok $n - $name compiles as C11 (-Wall -Wextra -Werror -pedantic)"
        sed 's/^/# /' "$scratch/log"
    fi
    n=$((n + 1))
    if [ -z "$cxx" ]; then
        echo "ok $n - $name compiles as C++17 # SKIP no C++ compiler"
    elif "$cxx" -std=c++17 -Wall -Wextra -Werror -pedantic -I"$incdir" -c "$scratch/t.cpp" \
        -o "$scratch/t.o" >"$scratch/log" 2>&1; then
        echo "ok $n - $name compiles as C++17 (-Wall -Wextra -Werror -pedantic)"
    else
        failed=$((failed + 1))
        echo "not ok $n - $name compiles as C++17 (-Wall -Wextra -Werror -pedantic)"
        sed 's/^/# /' "$scratch/log"
    fi
done
[ "$failed" -eq 0 ]
