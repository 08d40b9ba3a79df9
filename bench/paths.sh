#!/usr/bin/env bash
# bench/paths.sh [NP ...] - the same collectives blocking (-z 1), non-blocking (-z 0, each
# call a request waited for) and grouped (-m 2: two calls per coll_group_start/end), run
# back to back REPS times per NP so that the three forms meet the same machine state.
# Writes docs/results/paths.tsv (np coll mode size time_us busbw, one line per row of every
# run) and prints, per NP, collective and size, the medians and the ratios to blocking:
# non-blocking and grouped busbw / blocking busbw, and time / blocking time at 8 B.
#
#   bench/paths.sh 2 4 8                  # default
#   REPS=5 COLLS="allreduce broadcast" bench/paths.sh 4
#
# BUILD (default build): the meson build dir whose collrun and collbench run. COLLRUN_ARGS:
# more collrun flags, e.g. "--bind-to core" (ranks pinned round robin even when they
# outnumber the CPUs: at 4 ranks on 2 cores the kernel's own placement makes a 16 MiB
# all-reduce run at either about 1.6 or about 4.6 GB/s, whatever the call's form).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD:-build}
nps=("$@")
[ ${#nps[@]} -gt 0 ] || nps=(2 4 8)
REPS=${REPS:-3}
COLLS=${COLLS:-"allreduce broadcast reduce allgather reducescatter"}
out=${OUT:-docs/results/paths.tsv}
mkdir -p "$(dirname "$out")"
[ "${COMPILE:-1}" = 0 ] || meson compile -C "$build" >/dev/null

echo -e "np\tcoll\tmode\tsize\ttime_us\tbusbw" >"$out"
# run NP COLL MODE ARGS...: the rows of one collbench run into $out
run() {
    local np=$1 coll=$2 mode=$3
    shift 3
    local flags=()
    case $mode in
    blocking) flags=(-z 1) ;;
    nonblocking) flags=(-z 0) ;;
    grouped) flags=(-z 1 -m 2) ;;
    esac
    # shellcheck disable=SC2086
    "$build/collrun" -n "$np" ${COLLRUN_ARGS:-} "$build/collbench" "$coll" "${flags[@]}" -c 0 "$@" 2>/dev/null |
        awk -v np="$np" -v c="$coll" -v m="$mode" '
            /^ +[0-9]+ / { printf "%s\t%s\t%s\t%s\t%s\t%s\n", np, c, m, $1, $6, $8 }' >>"$out"
}
for np in "${nps[@]}"; do
    for rep in $(seq "$REPS"); do
        for coll in $COLLS; do
            for mode in blocking nonblocking grouped; do
                run "$np" "$coll" "$mode" -b 8 -e 64K -f 8 -n 400 -w 40
                run "$np" "$coll" "$mode" -b 1M -e 64M -f 4 -n 6 -w 2
            done
        done
        echo "paths.sh: np $np rep $rep done" >&2
    done
done
python3 - "$out" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]).read().splitlines()[1:]:
    np, c, m, size, t, bw = l.split('\t')
    rows[(int(np), c, int(size), m)].append((float(t), float(bw)))
keys = sorted({k[:3] for k in rows})
print("np  coll           size      blocking(us|GB/s)  nonblocking  grouped   nb/blk  grp/blk")
for np, c, size in keys:
    def med(m, i):
        v = rows.get((np, c, size, m))
        return statistics.median(x[i] for x in v) if v else float('nan')
    i = 0 if size <= 64 else 1
    b, n, g = med('blocking', i), med('nonblocking', i), med('grouped', i)
    r = (lambda x: x / b) if b else (lambda x: float('nan'))
    unit = "us" if i == 0 else "GB/s"
    print(f"{np:<3} {c:<14} {size:>9} {b:>10.2f} {unit:<5} {n:>10.2f} {g:>9.2f} {r(n):>8.2f} {r(g):>8.2f}")
PY
