#!/usr/bin/env bash
# test_docs.sh - the generated documents are current: docs/env.md is what the parameter
# table of src/base/param.c generates, docs/api.md what include/coll.h generates; every
# COLL_* variable the library reads is documented; the man pages have no roff mistakes.
#
#   test_docs.sh SRCDIR COLL_ENV_DOC PYTHON3 MANPAGE...
set -uo pipefail

srcdir=$1 env_doc=$2 python=$3
shift 3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1)) failed=$((failed + 1))
    echo "not ok $n - $1"
    sed 's/^/# /' "$scratch/log" | head -n 60
}

echo "1..4"

if "$env_doc" markdown >"$scratch/env.md" 2>"$scratch/log" &&
    diff -u "$srcdir/docs/env.md" "$scratch/env.md" >>"$scratch/log"; then
    ok "docs/env.md is generated from src/base/param.c's table"
else
    echo "regenerate: ninja -C BUILD update-docs" >>"$scratch/log"
    not_ok "docs/env.md is generated from src/base/param.c's table"
fi

if "$python" "$srcdir/docs/gen_api.py" markdown "$srcdir/include/coll.h" >"$scratch/api.md" \
    2>"$scratch/log" && diff -u "$srcdir/docs/api.md" "$scratch/api.md" >>"$scratch/log"; then
    ok "docs/api.md is generated from include/coll.h"
else
    echo "regenerate: ninja -C BUILD update-docs" \
        >>"$scratch/log"
    not_ok "docs/api.md is generated from include/coll.h"
fi

# A knob read by getenv() but missing from the table would be undocumented.
: >"$scratch/log"
for v in $(grep -rhoE '\b[a-z_]*env[a-z_]*\("COLL_[A-Z0-9_]+"\)' "$srcdir/src" | sed -E 's/.*"(.*)".*/\1/' |
    sort -u); do
    grep -q "\`$v\`" "$srcdir/docs/env.md" || echo "$v is read in src/ but not in docs/env.md" \
        >>"$scratch/log"
done
if [ ! -s "$scratch/log" ]; then ok "every COLL_* variable read in src/ is documented"; else
    not_ok "every COLL_* variable read in src/ is documented"; fi

if ! command -v groff >/dev/null; then
    ok "man pages have no roff warnings # SKIP groff is not installed"
else
    : >"$scratch/log"
    for page in "$@"; do
        LC_ALL=C.UTF-8 groff -man -ww -z "$page" >>"$scratch/log" 2>&1 ||
            echo "groff failed on $page" >>"$scratch/log"
    done
    if [ ! -s "$scratch/log" ]; then ok "man pages have no roff warnings ($#)"; else
        not_ok "man pages have no roff warnings"; fi
fi

[ "$failed" -eq 0 ]
