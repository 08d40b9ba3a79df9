#!/usr/bin/env bash
# test_collbench_table.sh - collbench's table keeps nccl-tests' format: the header lines,
# the column names, their order and widths, the rows' alignment and the two footer lines,
# compared with a checked-in golden file. Prints TAP.
#
#   tests/test_collbench_table.sh COLLRUN COLLBENCH GOLDEN
#   tests/test_collbench_table.sh COLLRUN COLLBENCH GOLDEN --update   (rewrite GOLDEN, after
#                                             a deliberate change of the table)
#
# Two ranks run all-reduce and broadcast from 8 to 64 bytes. What differs from run to run
# is masked, its place kept: each time, algbw and busbw becomes a run of T, A or B as wide
# as its column and ending where the value ended (so a column that moves, widens or turns
# left-aligned shows), the average bus bandwidth becomes <busbw>, pids PPPPPP, the host name
# <host>, the library's version <version> and the transport <transport>. Everything else
# (sizes, counts, types, ops, roots, #wrong, the header's words) is compared as printed.
# The last cases check the comparison itself: a row shifted by one column and a header
# word changed must both be caught.
set -u

COLLRUN=${1:?usage: test_collbench_table.sh COLLRUN COLLBENCH GOLDEN [--update]}
COLLBENCH=${2:?usage: test_collbench_table.sh COLLRUN COLLBENCH GOLDEN [--update]}
GOLDEN=${3:?usage: test_collbench_table.sh COLLRUN COLLBENCH GOLDEN [--update]}
UPDATE=${4:-}
GUARD="timeout -k 5 120"

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 20" "$TMP/diff" "$TMP/err"; }

# mask < raw > masked: the table with what varies masked (see above); exit 1 when a value
# does not fit its column (the comparison would then mean nothing).
mask() {
    python3 -c '
import re, sys
# the columns of a row that vary: token index -> (width, mask character)
VARY = {5: (7, "T"), 6: (6, "A"), 7: (6, "B"), 9: (7, "T"), 10: (6, "A"), 11: (6, "B")}
for line in sys.stdin.read().split("\n"):
    if re.match(r"^ +[0-9]", line):
        out = list(line)
        for i, m in enumerate(re.finditer(r"\S+", line)):
            if i not in VARY:
                continue
            width, ch = VARY[i]
            start = m.end() - width
            if start < 0 or line[start:m.start()].strip():
                sys.exit("value %r wider than its column: %s" % (m.group(), line))
            out[start:m.end()] = ch * width
        line = "".join(out)
    elif line.startswith("#  Rank "):
        line = re.sub(r"Pid +[0-9]+", "Pid PPPPPP", line)
        line = re.sub(r" on .*", " on <host>", line)
    elif line.startswith("# Avg bus bandwidth"):
        line = re.sub(r": .*", ": <busbw>", line)
    elif line.startswith("# Using "):
        line = re.sub(r"coll [^,]+,", "coll <version>,", line)
        line = re.sub(r"transport [^,]+,", "transport <transport>,", line)
    print(line)
'
}

# run COLL: the table of one run, raw in $TMP/COLL.raw, masked in $TMP/COLL.txt
run() {
    env -u COLL_ALGO -u COLL_SELECT -u COLL_TRANSPORT -u COLL_CHUNK_BYTES \
        $GUARD "$COLLRUN" -n 2 "$COLLBENCH" "$1" -b 8 -e 64 -f 2 -n 2 -w 1 -c 1 \
        >"$TMP/$1.raw" 2>"$TMP/err" </dev/null &&
        mask <"$TMP/$1.raw" >"$TMP/$1.txt" 2>>"$TMP/err"
}

: >"$TMP/all.txt"
for c in allreduce broadcast; do
    if run "$c"; then
        ok "$c on 2 ranks, 8 to 64 bytes: ran, every value within its column"
    else
        not_ok "$c on 2 ranks, 8 to 64 bytes: ran, every value within its column"
    fi
    cat "$TMP/$c.txt" >>"$TMP/all.txt"
done

if [ "$UPDATE" = --update ]; then
    cp "$TMP/all.txt" "$GOLDEN"
    echo "# wrote $GOLDEN"
fi
diff -u "$GOLDEN" "$TMP/all.txt" >"$TMP/diff"
check "the tables match $(basename "$GOLDEN") (header, columns, widths, footer)" \
    test ! -s "$TMP/diff"

# The comparison catches what it is there for. A row whose size column is one character
# wider moves every column after it:
awk '!done && /^ +[0-9]/ { $0 = " " $0; done = 1 } { print }' "$TMP/allreduce.raw" |
    mask >"$TMP/moved.txt" 2>/dev/null
check "a column moved by one character does not match" \
    eval '! cmp -s "$TMP/moved.txt" "$TMP/allreduce.txt"'
sed 's/ busbw #wrong/ busBW #wrong/' "$TMP/allreduce.raw" | mask >"$TMP/renamed.txt"
check "a column renamed does not match" eval '! cmp -s "$TMP/renamed.txt" "$TMP/allreduce.txt"'
grep -v '^# Out of bounds values' "$TMP/allreduce.raw" | mask >"$TMP/nofooter.txt"
check "a footer line missing does not match" \
    eval '! cmp -s "$TMP/nofooter.txt" "$TMP/allreduce.txt"'

tap_done
