#!/usr/bin/env bash
# test_docs_guides.sh - the docs say what the tools do: the guides' outputs and numbers are
# what their commands print now (bench/guide_numbers.py --check), and collbench's --help,
# its man page and docs/collbench.md name the same flags. Prints TAP.
#
#   tests/test_docs_guides.sh SOURCE_ROOT BUILD_ROOT COLLBENCH
set -u

SRC=${1:?usage: test_docs_guides.sh SOURCE_ROOT BUILD_ROOT COLLBENCH}
BUILD=${2:?usage: test_docs_guides.sh SOURCE_ROOT BUILD_ROOT COLLBENCH}
COLLBENCH=${3:?usage: test_docs_guides.sh SOURCE_ROOT BUILD_ROOT COLLBENCH}

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "head -n 40" "$TMP/out"; }

for page in teaching.md training.md; do
    python3 "$SRC/bench/guide_numbers.py" --build "$BUILD" --check "$SRC/docs/$page" \
        >"$TMP/out" 2>&1
    rc=$?
    check "docs/$page says what its commands print (bench/guide_numbers.py --check)" \
        test "$rc" = 0
done

# The flags each of the three names: long ones (--np) and short ones (-b), from --help,
# from the man page's flag sections and from the Flags section of docs/collbench.md.
"$COLLBENCH" --help >"$TMP/help.txt" 2>&1
python3 - "$TMP/help.txt" "$SRC/man/collbench.1" "$SRC/docs/collbench.md" >"$TMP/out" 2>&1 <<'PY'
import re, sys

FLAG = re.compile(r"(?<![\w\-./=])(--[a-z][a-z0-9_\-]*[a-z0-9]|-[a-zA-Z])(?![\w\-])")

def flags(text):
    return set(FLAG.findall(text))

helptext = open(sys.argv[1]).read()
man = open(sys.argv[2]).read()
man = man[man.index(".SH NCCL\\-TESTS FLAGS"):man.index(".SH EXIT STATUS")]
man = re.sub(r"\\f[BIRP]", "", man).replace("\\-", "-")
man = "\n".join(l for l in man.splitlines())
md = open(sys.argv[3]).read()
md = md[md.index("## Flags"):md.index("## The table")]
sets = {"--help": flags(helptext), "man/collbench.1": flags(man), "docs/collbench.md": flags(md)}
everything = set().union(*sets.values())
bad = False
for name, s in sets.items():
    missing = sorted(everything - s)
    if missing:
        print(f"{name} lacks: {' '.join(missing)}")
        bad = True
if len(sets["--help"]) < 40:
    print(f"only {len(sets['--help'])} flags found in --help")
    bad = True
print(f"{len(everything)} flags")
sys.exit(1 if bad else 0)
PY
rc=$?
check "collbench's --help, man page and docs/collbench.md name the same flags ($(tail -n 1 "$TMP/out"))" \
    test "$rc" = 0

tap_done
