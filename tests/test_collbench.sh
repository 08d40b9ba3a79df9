#!/usr/bin/env bash
# test_collbench.sh - collbench end to end: every collective checked over real ranks, its
# records (JSON, CSV, -F), plots and comparisons, its launcher (--np, Ctrl-C), nccl-tests'
# program names, -T, and bad input. Prints TAP.
#
#   tests/test_collbench.sh COLLRUN COLLBENCH [COLLBENCH_HOOKED [COLLBENCH_PLOT_PY]]
#
# COLLBENCH_HOOKED is collbench built with -DCOLLBENCH_TEST_HOOKS: its COLLBENCH_FAULT makes
# a checked result wrong on one rank (elem: one element flipped; swap: blocks exchanged;
# hang: the rank stalls), so that the cases below can see collbench catch it. Without it
# those cases are skipped. Every run is bounded by timeout(1): a hang fails a case, not the
# suite. Sizes are small: the point is behaviour, not speed (no timing is asserted).
# The checks are single-quoted on purpose: check evaluates them.
# shellcheck disable=SC2016
set -u

COLLRUN=${1:?usage: test_collbench.sh COLLRUN COLLBENCH [COLLBENCH_HOOKED [PLOT_PY]]}
COLLBENCH=${2:?usage: test_collbench.sh COLLRUN COLLBENCH [COLLBENCH_HOOKED [PLOT_PY]]}
HOOKED=${3:-}
if [ -n "${4:-}" ]; then export COLLBENCH_PLOT=$4; fi
GUARD="timeout -k 5 120"
export COLL_TIMEOUT_MS=60000

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_cleanup() {
    # Only processes that carry this run's scratch directory in their environment.
    for f in "$TMP"/*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null) || continue
        case $pid in '' | *[!0-9]*) continue ;; esac
        grep -qzF "W=$TMP" "/proc/$pid/environ" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    done
}
tap_diag() { tap_show "tail -n 15" "$TMP/out" "$TMP/err"; }
export W=$TMP # marks our processes for cleanup

# bench ARGS...: collbench alone; mp NP ARGS...: under collrun. Output in $TMP/out, err,
# status in $rc.
bench() {
    $GUARD "$COLLBENCH" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
mp() {
    local np=$1
    shift
    $GUARD "$COLLRUN" -n "$np" "$COLLBENCH" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
mp_hooked() {
    local np=$1
    shift
    $GUARD "$COLLRUN" -n "$np" "$HOOKED" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}
rows() { grep -cE '^ +[0-9]+ ' "$TMP/out"; }
# every row's #wrong columns (9 and 13) are 0 or N/A, and the summary says OK
all_right() {
    awk '$1 ~ /^[0-9]+$/ && NF == 13 {
             if (!(($9 == "0" || $9 == "N/A") && ($13 == "0" || $13 == "N/A"))) bad++
         }
         END { exit bad ? 1 : 0 }' "$TMP/out" &&
        grep -q '^# Out of bounds values : 0 OK$' "$TMP/out"
}
some_wrong() {
    awk '$1 ~ /^[0-9]+$/ && NF == 13 && (($9 ~ /^[0-9]+$/ && $9 > 0) ||
         ($13 ~ /^[0-9]+$/ && $13 > 0)) { found = 1 } END { exit found ? 0 : 1 }' "$TMP/out"
}
py() { python3 - "$@"; }

# ---------------------------------------------------------------------------------------
# Every collective, checked (-c 1) over 3 ranks (not a power of two) and 4, every dtype,
# every op where there is one, a root other than 0 where there is one.
for c in allreduce broadcast reduce allgather reducescatter alltoall gather scatter sendrecv \
    barrier; do
    ops=sum
    case $c in allreduce | reduce | reducescatter) ops=all ;; esac
    for np in 3 4; do
        mp "$np" "$c" -b 0 -e 40K -f 7 -d all -o "$ops" -r 1 -n 1 -w 0 -c 1
        if [ "$rc" = 0 ] && all_right && [ "$(rows)" -gt 0 ]; then
            ok "$c on $np ranks: every row checked right, exit 0 ($(rows) rows)"
        else
            not_ok "$c on $np ranks: every row checked right, exit 0" "exit status $rc"
        fi
    done
done
mp 2 allgather -b 1M -e 1M -n 1 -w 0 -z 1 -c 2
check "-c 2 and -z 1 on a 1 MiB allgather: right" all_right

mp 4 allgather -b 8K -e 8K -n 1 -w 0 --json "$TMP/ag.json"
py "$TMP/ag.json" <<'EOF' >"$TMP/py" 2>&1
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
# nccl-tests: 8K float over 4 ranks sends 512 elements per rank, receives 2048 = 8K
assert r["count"] == 512 and r["size_bytes"] == 8192, r
c = r["out_of_place"]
# algbw = 4 * 512 * 4 B / time, busbw = algbw * 3/4
want = 8192 / (c["time_us"] * 1e3)
assert abs(c["algbw_GBps"] - want) <= 1e-6 * want, (c, want)
assert abs(c["busbw_GBps"] - want * 0.75) <= 1e-6 * want, c
EOF
check "allgather: size = received bytes, count = per rank, busbw = algbw (n-1)/n" \
    test $? = 0 -a ! -s "$TMP/py"

mp 4 allreduce -b 4K -e 4K -n 1 -w 0 --json "$TMP/ar.json"
py "$TMP/ar.json" <<'EOF' >"$TMP/py" 2>&1
import json, sys
c = json.load(open(sys.argv[1]))["results"][0]["in_place"]
assert abs(c["busbw_GBps"] - c["algbw_GBps"] * 1.5) <= 1e-6 * c["algbw_GBps"], c
EOF
check "allreduce: busbw = algbw 2(n-1)/n" test $? = 0 -a ! -s "$TMP/py"

# ---------------------------------------------------------------------------------------
# Wrong results are reported (the hooked build corrupts the checked call on one rank).
if [ -n "$HOOKED" ]; then
    fault_case() {
        local mode=$1 np=$2
        shift 2
        COLLBENCH_FAULT=$mode mp_hooked "$np" "$@" -n 1 -w 0 --json "$TMP/f.json"
        if [ "$rc" = 1 ] && some_wrong && grep -q '^# Out of bounds values : [1-9][0-9]* FAILED$' \
            "$TMP/out" && grep -q '"status": "wrong results"' "$TMP/f.json"; then
            ok "COLLBENCH_FAULT=$mode $*: wrong > 0, FAILED, exit 1"
        else
            not_ok "COLLBENCH_FAULT=$mode $*: wrong > 0, FAILED, exit 1" "exit status $rc"
        fi
    }
    fault_case elem 3 allreduce -b 4K -e 4K
    fault_case elem 3 reducescatter -b 12K -e 12K -o max
    fault_case elem 2 reduce -b 4K -e 4K -r 1
    fault_case swap 3 allgather -b 12K -e 12K
    fault_case swap 4 alltoall -b 16K -e 16K
    fault_case swap 3 gather -b 12K -e 12K -r 2
    fault_case swap 3 scatter -b 12K -e 12K -r 0
    fault_case swap 3 sendrecv -b 4K -e 4K
    fault_case swap 3 broadcast -b 4K -e 4K -r 1
    COLLBENCH_FAULT=elem mp_hooked 3 allreduce -b 4K -e 4K -n 1 -w 0 -c 0
    check "-c 0: nothing checked, #wrong N/A, exit 0" \
        eval '[ "$rc" = 0 ] && ! grep -qE "^ +[0-9].* [0-9]+ *$" "$TMP/out"'
    mp_hooked 3 allreduce -b 4K -e 4K -n 1 -w 0
    check "the hooked build without COLLBENCH_FAULT is right" all_right

    # -T: a stalled rank makes the watchdogs abort; every rank ends. A rank whose own
    # watchdog fired exits 124; one that first saw a peer's abort exits 1; collrun reports
    # whichever ended first.
    COLLBENCH_FAULT=hang COLLBENCH_FAULT_RANK=1 mp_hooked 3 allreduce -b 4K -e 4K -n 1 -w 0 -T 1
    if { [ "$rc" = 124 ] || [ "$rc" = 1 ]; } && grep -q "test timeout" "$TMP/err"; then
        ok "-T 1 with a stalled rank: 'test timeout', every rank ends (exit $rc)"
    else
        not_ok "-T 1 with a stalled rank: 'test timeout', every rank ends" "exit status $rc"
    fi
else
    skip "wrong results are reported" "no hooked collbench given"
fi

# ---------------------------------------------------------------------------------------
# Records.
mp 3 reduce -b 8 -e 8K -f 4 -r 2 -n 2 -w 1 --json "$TMP/r.json" --csv "$TMP/r.csv" \
    -F "$TMP/r.tsv" -a 0
nrows=$(rows)
check "a run with --json --csv -F: exit 0" test "$rc" = 0
py "$TMP/r.json" "$TMP/r.csv" "$TMP/r.tsv" "$nrows" <<'EOF' >"$TMP/py" 2>&1
import csv, json, sys
run = json.load(open(sys.argv[1]))
nrows = int(sys.argv[4])
for k in ("collective", "coll_version", "host", "nranks", "transport", "date", "env", "argv",
          "options", "results", "out_of_bounds", "avg_busbw_GBps", "status", "ranks"):
    assert k in run, k
assert run["collective"] == "reduce" and run["nranks"] == 3 and run["status"] == "ok", run
assert run["transport"] and run["transport"] != "none", run["transport"]
assert len(run["ranks"]) == 3 and all(r["pid"] > 0 for r in run["ranks"])
assert "COLL_TIMEOUT_MS" in run["env"] and "COLL_UNIQUE_ID" not in run["env"], run["env"]
assert run["options"]["average"] == 0 and run["options"]["iters"] == 2
res = run["results"]
assert len(res) == nrows, (len(res), nrows)
assert [r["size_bytes"] for r in res] == [8, 32, 128, 512, 2048, 8192], res
for r in res:
    assert r["algo"] and r["algo"] != "?", r
    assert r["root"] == 2 and r["type"] == "float" and r["redop"] == "sum"
    for p in ("out_of_place", "in_place"):
        assert r[p]["wrong"] == 0 and r[p]["iters"] == 2 and r[p]["time_us"] > 0, r
# CSV: comment lines, a header, two rows (placements) per size
lines = [l for l in open(sys.argv[2]) if not l.startswith("#")]
rows = list(csv.DictReader(lines))
assert len(rows) == 2 * nrows, len(rows)
assert {r["placement"] for r in rows} == {"out-of-place", "in-place"}
assert all(r["algo"] and r["collective"] == "reduce" for r in rows)
# -F: every rank's time; -a 0 reports rank 0's
t = list(csv.DictReader(open(sys.argv[3]), delimiter="\t"))
assert len(t) == 3 * 2 * nrows, len(t)
for r in res:
    for p, name in (("out_of_place", "out-of-place"), ("in_place", "in-place")):
        mine = [float(x["time_us"]) for x in t
                if int(x["size_bytes"]) == r["size_bytes"] and x["placement"] == name]
        assert len(mine) == 3
        assert abs(mine[0] - r[p]["time_us"]) <= 1e-4 * mine[0], (mine, r[p])
        assert min(mine) <= r[p]["time_avg_us"] <= max(mine) * (1 + 1e-6)
EOF
check "JSON: metadata, env, one result per row with algo; CSV: 2 rows per size; -F: every rank" \
    test $? = 0 -a ! -s "$TMP/py"

for a in 2 3 4; do
    mp 3 allreduce -b 4K -e 4K -n 2 -w 0 -a "$a" --json "$TMP/a$a.json"
    py "$TMP/a$a.json" "$a" <<'EOF' >"$TMP/py" 2>&1
import json, sys
run = json.load(open(sys.argv[1]))
c = run["results"][0]["out_of_place"]
want = {"2": "time_min_us", "3": "time_max_us", "4": "time_span_us"}[sys.argv[2]]
assert run["options"]["average"] == int(sys.argv[2]), run["options"]
assert c["time_us"] == c[want], c
# from the last start to the last end: never longer than the slowest rank's own time (the
# two clocks read a few ns apart), never negative
assert 0 < c["time_span_us"] <= c["time_max_us"] * 1.001 + 0.1, c
EOF
    check "-a $a reports the $(case $a in 2) echo min ;; 3) echo max ;; *) echo span ;; esac) over ranks" \
        test $? = 0 -a ! -s "$TMP/py"
done
# -a 4 needs one clock: ranks of two machines (a rank made to read another boot id) are
# refused on every rank, unless --shared-clock says the clocks are synchronized
COLLBENCH_FAULT=boot-id mp_hooked 2 allreduce -b 8 -e 8 -n 1 -w 0 -a 4 --json "$TMP/a4x.json"
if [ "$rc" = 2 ] && grep -q "boot ids differ" "$TMP/err"; then
    ok "-a 4 across two machines: exit 2, says the boot ids differ"
else
    not_ok "-a 4 across two machines: exit $rc (want 2 and 'boot ids differ')"
fi
COLLBENCH_FAULT=boot-id mp_hooked 2 allreduce -b 8 -e 8 -n 1 -w 0 -c 0 -a 4 --shared-clock \
    --json "$TMP/a4s.json"
if [ "$rc" = 0 ] && grep -q '"time_span_us": [0-9]' "$TMP/a4s.json"; then
    ok "-a 4 --shared-clock across two machines: timed by the span"
else
    not_ok "-a 4 --shared-clock across two machines: exit $rc or no span in the JSON"
fi

# --shared-clock: every column starts at one instant rank 0 names; the record says so, and
# how many ranks learned it late (their lateness is in the time, so a time is never short)
mp 3 broadcast -b 8 -e 64K -f 8 -n 1 -w 1 -N 3 -a 3 --shared-clock --json "$TMP/sc.json"
py "$TMP/sc.json" <<'EOF' >"$TMP/py" 2>&1
import json, sys
run = json.load(open(sys.argv[1]))
assert run["options"]["shared_clock"] is True, run["options"]
assert len(run["results"]) == 3 * 5, len(run["results"])
for r in run["results"]:
    for p in ("out_of_place", "in_place"):
        c = r[p]
        assert c["time_us"] > 0 and c["time_us"] == c["time_max_us"], c
        assert isinstance(c["late_starts"], int) and 0 <= c["late_starts"] <= 3, c
EOF
check "--shared-clock: 15 rows timed from one instant, late starts counted (0..3)" \
    test "$rc" = 0 -a ! -s "$TMP/py"

mp 2 alltoall -b 1K -e 2K -N 2 -m 2 -n 2 -w 1 --json "$TMP/n.json"
py "$TMP/n.json" <<'EOF' >"$TMP/py" 2>&1
import json, sys
run = json.load(open(sys.argv[1]))
assert [r["cycle"] for r in run["results"]] == [0, 0, 1, 1], run["results"]
assert run["options"]["agg_iters"] == 2 and run["options"]["run_cycles"] == 2
EOF
check "-N 2 runs the sweep twice, -m 2 groups the calls" test "$rc" = 0 -a ! -s "$TMP/py"

mp 2 allreduce -b 64K -e 64K --time-budget 0.05 -w 1 --json "$TMP/b.json"
py "$TMP/b.json" <<'EOF' >"$TMP/py" 2>&1
import json, sys
run = json.load(open(sys.argv[1]))
assert run["options"]["time_budget_s"] == 0.05
for p in ("out_of_place", "in_place"):
    assert 3 <= run["results"][0][p]["iters"] <= 20000, run["results"][0]
EOF
check "--time-budget picks the iterations" test "$rc" = 0 -a ! -s "$TMP/py"

mp 2 allreduce -b 8 -e 8 -n 1 --inplace-only --json "$TMP/ip.json"
check "--inplace-only: out-of-place columns N/A" \
    eval 'awk '\''$1 == "8" { exit !($6 == "N/A" && $10 != "N/A") }'\'' "$TMP/out"'
check "--inplace-only: JSON out_of_place null" grep -q '"out_of_place": null' "$TMP/ip.json"

mp 2 allreduce -b 8K -e 8K -n 1 --algo ring --json "$TMP/algo.json"
check "--algo ring: COLL_ALGO reaches the comm and the records" \
    eval '[ "$rc" = 0 ] && grep -q "\"algo\": \"ring\"" "$TMP/algo.json" &&
          grep -q "\"COLL_ALGO\": \"ring\"" "$TMP/algo.json"'
mp 2 allreduce -b 8K -e 8K -n 1 --transport tcp --json "$TMP/tp.json"
check "--transport tcp: recorded" grep -q '"transport": "tcp"' "$TMP/tp.json"

# ---------------------------------------------------------------------------------------
# Plots and comparisons (a plot needs matplotlib or gnuplot; the table needs python3 only).
if python3 -c 'import matplotlib' 2>/dev/null || command -v gnuplot >/dev/null; then
    mp 2 allreduce -b 8 -e 64K -f 8 -n 1 -w 0 --plot "$TMP/p.png"
    check "--plot writes a PNG" \
        eval '[ "$rc" = 0 ] && [ "$(head -c 8 "$TMP/p.png" | od -An -tx1 | tr -d " \n")" = \
              89504e470d0a1a0a ]'
    bench --compare "$TMP/r.json" "$TMP/a2.json" "$TMP/a3.json" --plot "$TMP/c.png"
    check "--compare RUNS --plot: a PNG" \
        eval '[ "$rc" = 0 ] && [ -s "$TMP/c.png" ]'
    # The build puts the plot script beside collbench, so that a build directory outside
    # the source tree finds it: the two copied to a directory of their own still plot.
    mkdir -p "$TMP/bin"
    if cp "$COLLBENCH" "$(dirname "$COLLBENCH")/collbench_plot.py" "$TMP/bin/"; then
        env -u COLLBENCH_PLOT $GUARD "$TMP/bin/collbench" allreduce -b 8 -e 8 -n 1 -w 0 \
            --plot "$TMP/q.png" >"$TMP/out" 2>"$TMP/err" </dev/null
        rc=$?
    else
        rc=99
    fi
    check "--plot from a build directory anywhere: the build put the script beside collbench" \
        eval '[ "$rc" = 0 ] && [ -s "$TMP/q.png" ]'
else
    skip "--plot writes a PNG" "neither matplotlib nor gnuplot"
    bench allreduce -b 8 -e 8 -n 1 --plot "$TMP/p.png"
    check "--plot without a plotter says so and fails" test "$rc" != 0 -a -s "$TMP/err"
fi
mp 2 allreduce -b 1K -e 4K -n 1 -w 0 --json "$TMP/x.json"
cp "$TMP/out" "$TMP/x.txt"
mp 2 allreduce -b 1K -e 4K -n 1 -w 0 --algo tree --json "$TMP/y.json"
{
    printf 'lib\tnp\tcoll\trep\tbytes\tcount\ttype\tredop\troot\ttime_us\talgbw_GBps\t'
    printf 'busbw_GBps\twrong\titers\n'
} >"$TMP/peers.tsv"
for b in 1024 2048 4096; do
    for rep in 1 2; do
        printf 'ompi-tcp\t2\tallreduce\t%s\t%s\t%s\tfloat\tsum\t-1\t100\t0.01\t0.01\t0\t10\n' \
            "$rep" "$b" $((b / 4)) >>"$TMP/peers.tsv"
    done
done
bench --compare "$TMP/x.json" "$TMP/y.json" "$TMP/x.txt" "$TMP/peers.tsv"
compare_ok() {
    [ "$rc" = 0 ] || return 1
    grep -q '^# baseline \[0\]: x' "$TMP/out" || return 1
    grep -q 'ompi-tcp np=2 allreduce' "$TMP/out" || return 1
    # three sizes, each with a ratio for every other series; x.txt is x.json: ratio 1.00
    [ "$(grep -cE '^ +[124]K ' "$TMP/out")" = 3 ] || return 1
    awk '$1 ~ /K$/ { if ($5 != "") n++ } END { exit n == 3 ? 0 : 1 }' "$TMP/out" || return 1
    # the table rounds times to its printed precision, so the same run reads back within a
    # few per mille of 1, not exactly 1
    awk '/^# \[2\] vs \[0\]: geometric mean time ratio / { r = $9; f = 1 }
         END { exit (f && r > 0.98 && r < 1.02) ? 0 : 1 }' "$TMP/out"
}
check "--compare JSON, JSON, a table and peers' results.tsv: a ratio table" compare_ok
bench --compare "$TMP/nonexistent.json"
check "--compare of a missing file: exit 2 with a message" test "$rc" = 2 -a -s "$TMP/err"
printf 'not a run\n' >"$TMP/junk.txt"
bench --compare "$TMP/junk.txt"
check "--compare of something else: exit 2" test "$rc" = 2 -a -s "$TMP/err"

# ---------------------------------------------------------------------------------------
# Its own launcher, program names, output discipline.
bench allreduce --np 2 --bind-to core -b 8 -e 8 -n 1 -w 0 -F "$TMP/bind.tsv"
check "--np 2 --bind-to core: collrun binds the ranks, which run and check" \
    eval '[ "$rc" = 0 ] && grep -q "nranks 2 " "$TMP/out" && [ -s "$TMP/bind.tsv" ]'
bench allgather --np 2 -b 8 -e 64 -n 1 -w 0
check "--np 2 starts two ranks and checks them" \
    eval '[ "$rc" = 0 ] && grep -q "nranks 2 " "$TMP/out" && all_right'

mkdir -p "$TMP/bin"
for p in all_reduce_perf broadcast_perf reduce_perf all_gather_perf reduce_scatter_perf \
    alltoall_perf gather_perf scatter_perf sendrecv_perf all_reduce_perf_mpi; do
    ln -s "$(readlink -f "$COLLBENCH")" "$TMP/bin/$p"
done
names_ok() {
    local p want
    for p in all_reduce_perf:allreduce broadcast_perf:broadcast reduce_perf:reduce \
        all_gather_perf:allgather reduce_scatter_perf:reducescatter alltoall_perf:alltoall \
        gather_perf:gather scatter_perf:scatter sendrecv_perf:sendrecv \
        all_reduce_perf_mpi:allreduce; do
        want=${p#*:}
        $GUARD "$TMP/bin/${p%%:*}" -b 8 -e 8 -n 1 -w 0 >"$TMP/out" 2>"$TMP/err" </dev/null ||
            return 1
        grep -q "^# collbench $want: nranks 1 " "$TMP/out" || { echo "# ${p%%:*}"; return 1; }
    done
}
check "nccl-tests' program names select the collective (argv[0])" names_ok
$GUARD "$COLLRUN" -n 2 "$TMP/bin/reduce_scatter_perf" -b 64 -e 64 -n 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
check "reduce_scatter_perf under collrun -n 2" eval '[ "$rc" = 0 ] && all_right'
$GUARD "$TMP/bin/sendrecv_perf" --np 2 -b 64 -e 64 -n 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
check "sendrecv_perf --np 2" eval '[ "$rc" = 0 ] && grep -q "sendrecv: nranks 2 " "$TMP/out"'

mp 2 allreduce -b 8 -e 1K -n 1 -w 0
check "stderr is quiet when it is not a terminal" test "$rc" = 0 -a ! -s "$TMP/err"
if command -v script >/dev/null; then
    COLLBENCH_PROGRESS_DELAY=0 $GUARD script -qec \
        "'$COLLBENCH' allreduce -b 8 -e 1K -n 1 -w 0 >/dev/null" /dev/null >"$TMP/tty" 2>&1
    check "a progress line on a terminal stderr" grep -q '\[collbench\] allreduce float' \
        "$TMP/tty"
else
    skip "a progress line on a terminal stderr" "no script(1)"
fi

# Ctrl-C stops every rank --np started. (A background job starts with SIGINT ignored;
# env --default-signal gives the job the terminal's behaviour back.)
ctrl_c_case() {
    local bg i p
    env --default-signal=INT "$COLLBENCH" allreduce --np 2 -b 1M -e 1M -n 1000000 -w 0 -c 0 \
        >"$TMP/out" 2>"$TMP/err" </dev/null &
    bg=$!
    echo "$bg" >"$TMP/launcher.pid"
    ranks=
    for _ in $(seq 100); do
        ranks=$(ps -o pid= --ppid "$bg" 2>/dev/null | tr -s ' \n' ' ')
        [ "$(echo "$ranks" | wc -w)" = 2 ] && grep -q '^#  Rank  1' "$TMP/out" && break
        sleep 0.1
    done
    i=0
    for p in $ranks; do
        echo "$p" >"$TMP/rank$i.pid"
        i=$((i + 1))
    done
    kill -INT "$bg"
    wait "$bg"
    rc=$?
}
gone() {
    local p _
    for p in $ranks; do
        for _ in $(seq 50); do
            if ! [ -r "/proc/$p/stat" ] || [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$p/stat")" = Z ]
            then
                continue 2
            fi
            sleep 0.1
        done
        echo "# rank pid $p survived"
        return 1
    done
}
if env --default-signal=INT true 2>/dev/null; then
    ctrl_c_case
    check "Ctrl-C (SIGINT) to collbench --np: exit 130, every rank gone" \
        eval '[ "$rc" = 130 ] && [ -n "$ranks" ] && gone'
else
    skip "Ctrl-C (SIGINT) to collbench --np" "env(1) has no --default-signal"
fi

# Ctrl-C during a run with --json: the rows measured so far are in the file, with status
# "interrupted" (the 16 MiB row, 2000 times, is still running when the signal comes).
if env --default-signal=INT true 2>/dev/null; then
    env --default-signal=INT "$COLLBENCH" allreduce --np 2 -b 8 -e 16M -n 2000 -w 0 -c 0 \
        --json "$TMP/int.json" >"$TMP/out" 2>"$TMP/err" </dev/null &
    bg=$!
    echo "$bg" >"$TMP/launcher.pid"
    for _ in $(seq 300); do
        [ "$(rows)" -ge 2 ] && break
        sleep 0.1
    done
    printed=$(rows)
    kill -INT "$bg"
    wait "$bg"
    rc=$?
    py "$TMP/int.json" "$printed" >"$TMP/py" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
if d["status"] != "interrupted":
    print("status", d["status"])
if len(d["results"]) < int(sys.argv[2]) or int(sys.argv[2]) < 2:
    print(len(d["results"]), "results for", sys.argv[2], "rows printed")
PY
    check "Ctrl-C with --json: exit 130, the rows measured kept, status interrupted" \
        eval '[ "$rc" = 130 ] && [ ! -s "$TMP/py" ]'
else
    skip "Ctrl-C with --json" "env(1) has no --default-signal"
fi

# ---------------------------------------------------------------------------------------
# The cost model: --explain (runs no collective) and --calibrate (writes what the selector
# reads). On paper (--per-host: nothing started), every pick is among the model's ranking.
bench allreduce --explain --np 8 --per-host 8 -b 8 -e 1M -f 8
explain_ok() {
    [ "$rc" = 0 ] || return 1
    grep -q '^# collbench allreduce --explain: 8 ranks' "$TMP/out" || return 1
    # one row per size, its selection among the model's ranking
    awk '$1 ~ /^[0-9]+$/ { n++; sel = $3; found = 0
             for (i = 6; i <= NF; i++) if ($i == sel) found = 1
             if (!found) bad++ }
         END { exit (n == 6 && !bad) ? 0 : 1 }' "$TMP/out"
}
check "--explain --np 8 --per-host 8: per size, the selector's pick within the model's ranking" \
    explain_ok
# --np N alone explains the run --np N starts: the same picks as that run's records (four
# ranks of one host: the flat path, not the trees priced over tcp links).
bench allreduce --explain --np 4 -b 8 -e 4M -f 8
explain_picks() { grep -E '^ +[0-9]' "$TMP/out" | awk '{ print $1, $3 }'; }
explain_picks >"$TMP/explain-np4.txt"
bench allreduce --np 4 -b 8 -e 4M -f 8 -n 1 -w 0 -c 0 --json "$TMP/np4.json"
py "$TMP/np4.json" >"$TMP/run-np4.txt" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(r["size_bytes"], r["algo"])
PY
check "--explain --np 4 picks what the run --np 4 records, size by size" \
    eval '[ "$(wc -l <"$TMP/explain-np4.txt")" = 7 ] && grep -q " flat$" "$TMP/explain-np4.txt" &&
          cmp -s "$TMP/explain-np4.txt" "$TMP/run-np4.txt"'
bench reducescatter --explain --np 4 -b 64K -e 64K --algo ring
check "--explain with --algo ring: the forced pick, and why" \
    eval '[ "$rc" = 0 ] && grep -qE "^ +65536 +4096 +ring " "$TMP/out" &&
          grep -q "forced by COLL_ALGO" "$TMP/out"'
bench broadcast --explain --np 2 -r 3
check "--explain: root out of range for the ranks explained, exit 2" test "$rc" = 2
# COLL_QUANT: the chooser names the quant path for a blocking fp32 all-reduce of at least
# COLL_QUANT_MIN_BYTES, with its row beside the host paths', and not below that size
COLL_QUANT=int8 COLL_QUANT_MIN_BYTES=65536 bench allreduce --explain --np 4 -b 4K -e 1M -f 256
check "--explain with COLL_QUANT=int8: quant from COLL_QUANT_MIN_BYTES on, priced, flat below" \
    eval '[ "$rc" = 0 ] && grep -qE "^ +1048576 +262144 +quant " "$TMP/out" &&
          grep -qE "^ +4096 +1024 +flat " "$TMP/out" &&
          grep -qE "selector: COLL_QUANT=int8, .*\[priced: quant [0-9.]+ us, flat [0-9.]+ us, sched [a-z]+ [0-9.]+ us\]" "$TMP/out"'
COLL_QUANT=int8 COLL_QUANT_MIN_BYTES=65536 bench allreduce --explain --np 4 -b 1M -e 1M -d int32
check "--explain with COLL_QUANT=int8: an int32 all-reduce is not quantized" \
    eval '[ "$rc" = 0 ] && grep -qE "^ +1048576 +262144 +flat " "$TMP/out"'
COLL_QUANT=int8 COLL_QUANT_MIN_BYTES=65536 mp 2 allreduce -b 1M -e 1M -n 1 -w 0 -c 1 -z 0
check "COLL_QUANT with non-blocking calls: said once per rank, in the words it always had" \
    eval '[ "$rc" = 0 ] && [ "$(grep -c "COLL_QUANT=int8 applies to blocking all-reduce outside groups; coll_iallreduce runs unquantized" "$TMP/err")" = 2 ]'
# the selected column is the ranking's first row (the selector prices what the ranking
# prices: the same hosts, links, cores and chunk sizes), closed forms or --exact
explain_first() {
    [ "$rc" = 0 ] || return 1
    awk '$1 ~ /^[0-9]+$/ { n++; if ($3 != $6 || $4 != substr($7, index($7, "/") + 1)) bad++ }
         /^# .*selector:/ && !/ decisions, / { said++ }
         END { exit (n == 6 && !bad && !said) ? 0 : 1 }' "$TMP/out"
}
bench allreduce --explain --np 8 --per-host 4 -b 8 -e 256K -f 8
check "--explain --np 8 --per-host 4: selected is the ranking's first at every size" explain_first
bench allreduce --explain --exact --np 8 --per-host 4 -b 8 -e 256K -f 8
check "--explain --exact --np 8 --per-host 4: the walker's ranking, selected first" \
    eval 'explain_first && grep -q "selection exact" "$TMP/out"'
# 100,000 ranks on paper: the closed forms answer in well under the guard's minute (the
# schedule walker took 18 GB at 4,096)
bench allreduce --explain --np 100000 --per-host 8 -b 8 -e 128M -f 16
check "--explain --np 100000 --per-host 8: answers, every size" \
    eval '[ "$rc" = 0 ] && [ "$(grep -cE "^ +[0-9]+ " "$TMP/out")" = 7 ]'
mkdir -p "$TMP/cal"
COLL_CALIB_FILE=$TMP/cal/sub/calib.txt bench --calibrate --np 2
calib_ok() {
    [ "$rc" = 0 ] || return 1
    grep -q "^# wrote $TMP/cal/sub/calib.txt" "$TMP/out" || return 1
    grep -qE '^tcp\.alpha [0-9.e+-]+$' "$TMP/cal/sub/calib.txt" &&
        grep -qE '^gamma\.float [0-9.e+-]+$' "$TMP/cal/sub/calib.txt" &&
        grep -qE '^copy [0-9.e+-]+$' "$TMP/cal/sub/calib.txt"
}
check "--calibrate --np 2 writes COLL_CALIB_FILE (directories made)" calib_ok
# one host: call from the broadcast ping-pong, not from calls timed as collbench times them
# (those need two hosts: tests/test_netns.sh)
check "--calibrate --np 2 on one host: call not from calls timed as collbench times them" \
    eval '! grep -q "^# 8-byte calls timed as collbench times one" "$TMP/out"'
# two ranks of one host: the flat path's row is measured (alpha, or yield on one core), not kept
check "--calibrate --np 2 measures the flat path's row" \
    eval 'grep -qE "^# flat path: flat\.alpha [0-9.e+-]+ s(, | \(kept\), ).*flat\.beta [0-9.e+-]+ s/B, flat\.sliced [0-9.e+-]+ s/B, " "$TMP/out" &&
          grep -E "^# flat path: " "$TMP/out" | grep -vq "flat.alpha [0-9.e+-]* s (kept).*flat.yield [0-9.e+-]* s (kept)" &&
          grep -qE "^flat\.sliced [0-9.e+-]+$" "$TMP/cal/sub/calib.txt"'

check "the first --calibrate does not warn about the file it is about to create" \
    eval '! grep -q "cannot open" "$TMP/err"'
COLL_CALIB_FILE=$TMP/cal/sub/calib.txt bench allreduce --explain --np 4 -b 8 -e 8
check "the calibration file is what the selector then reads" \
    eval '[ "$rc" = 0 ] && grep -q "calibrated from $TMP/cal/sub/calib.txt" "$TMP/out"'
COLL_CALIB_FILE=$TMP/cal/sub/calib.txt mp 2 allreduce -b 8 -e 64K -f 8 -n 1 -w 0
check "a run with that calibration checks right" all_right

# Ranks pinned one to a CPU (collrun passes COLL_HOST_CPUS) are priced as the unpinned
# ones: the model must not take its own single CPU for the host's.
explain_cols() { grep -E '^ +[0-9]' "$TMP/out" | awk '{ print $1, $3, $5 }'; }
for b in none core; do
    $GUARD "$COLLRUN" -n 2 --bind-to "$b" "$COLLBENCH" allreduce --explain -b 2K -e 128K -f 4 \
        >"$TMP/out" 2>"$TMP/err" </dev/null
    explain_cols >"$TMP/explain-$b.txt"
done
check "--explain over 2 ranks: the same picks and prices pinned (--bind-to core) as not" \
    eval '[ -s "$TMP/explain-none.txt" ] && cmp -s "$TMP/explain-none.txt" "$TMP/explain-core.txt"'
# pinned by a launcher that does not say how many CPUs the ranks share (mpirun, srun): the
# library counts the union of the local ranks' affinities
$GUARD "$COLLRUN" -n 2 --bind-to core env COLL_HOST_CPUS=0 "$COLLBENCH" allreduce --explain \
    -b 2K -e 128K -f 4 >"$TMP/out" 2>"$TMP/err" </dev/null
explain_cols >"$TMP/explain-pinned.txt"
check "--explain over 2 ranks pinned without COLL_HOST_CPUS: priced as not pinned" \
    eval '[ -s "$TMP/explain-none.txt" ] && cmp -s "$TMP/explain-none.txt" "$TMP/explain-pinned.txt"'

# Calls of a one-host comm run on the shared-memory fast path, blocking or not: --explain and
# the records say "flat" for them.
explain_sel() { grep -E '^ +[0-9]' "$TMP/out" | awk '{ print $1, $3 }' | tr '\n' ' '; }
$GUARD "$COLLRUN" -n 3 "$COLLBENCH" allreduce -z 1 --explain -b 8 -e 8K -f 1024 \
    >"$TMP/out" 2>"$TMP/err" </dev/null
check "--explain -z 1 over shm: blocking calls on the fast path say flat" \
    eval '[ "$(explain_sel)" = "8 flat 8192 flat " ]'
# ... priced by the cost model's flat row: the estimate column holds a number, and a larger
# call costs more
explain_est() { grep -E '^ +[0-9]+ .* flat ' "$TMP/out" | awk '{ print $5 }' | tr '\n' ' '; }
check "--explain prices the flat rows (the cost model's flat row)" \
    eval 'explain_est | grep -Eq "^[0-9]+\.[0-9] [0-9]+\.[0-9] $" &&
          awk "BEGIN { exit !($(explain_est | cut -d" " -f1) < $(explain_est | cut -d" " -f2)) }"'
# 3 ranks on fewer CPUs: a small reduce is left to the model's tree, a larger one is not
$GUARD "$COLLRUN" -n 3 env COLL_HOST_CPUS=2 "$COLLBENCH" reduce -z 1 --explain -b 8 -e 8K \
    -f 1024 >"$TMP/out" 2>"$TMP/err" </dev/null
check "--explain -z 1, more ranks than CPUs: small reduce to the model, 8 KiB flat" \
    eval 'explain_sel | grep -Eq "^8 [a-z]+ 8192 flat $" && ! explain_sel | grep -q "^8 flat"'
$GUARD "$COLLRUN" -n 3 "$COLLBENCH" reduce -z 1 --explain -b 8 -e 8K -f 1024 \
    >"$TMP/out" 2>"$TMP/err" </dev/null
explain_sel >"$TMP/sel-z1.txt"
$GUARD "$COLLRUN" -n 3 "$COLLBENCH" reduce -z 0 --explain -b 8 -e 8K -f 1024 \
    >"$TMP/out" 2>"$TMP/err" </dev/null
check "--explain -z 0: non-blocking calls take the path blocking ones take (flat at 8 KiB)" \
    eval 'explain_sel | grep -q "8192 flat" && [ "$(explain_sel)" = "$(cat "$TMP/sel-z1.txt")" ]'
$GUARD "$COLLRUN" -n 3 env COLL_SHM_FLAT=0 "$COLLBENCH" reduce -z 1 --explain -b 8 -e 8 \
    >"$TMP/out" 2>"$TMP/err" </dev/null
check "--explain -z 1 with COLL_SHM_FLAT=0: the model's pick" \
    eval 'explain_sel | grep -q "^8 [a-z]" && ! explain_sel | grep -q flat'
$GUARD "$COLLRUN" -n 3 "$COLLBENCH" allreduce -z 1 -b 8 -e 8 -n 3 -w 1 \
    --json "$TMP/flat.json" >"$TMP/out" 2>"$TMP/err" </dev/null
check "a blocking run's records say it ran flat" grep -q '"algo": *"flat"' "$TMP/flat.json"

# ---------------------------------------------------------------------------------------
# Modes without a communicator.
bench --help
check "--help: exit 0, lists --time-budget" \
    eval '[ "$rc" = 0 ] && grep -q -- "--time-budget" "$TMP/out"'
bench --version
check "--version: exit 0" eval '[ "$rc" = 0 ] && grep -q "^collbench (coll) " "$TMP/out"'
bench --help-env
help_env_ok() {
    [ "$rc" = 0 ] || return 1
    grep -q '^COLL_TIMEOUT_MS$' "$TMP/out" && grep -q 'default: 600000' "$TMP/out" &&
        grep -q '^COLL_ALGO$' "$TMP/out" && grep -q '^COLL_CHUNK_BYTES$' "$TMP/out"
}
check "--help-env lists every COLL_* knob with its default" help_env_ok
# (device runs: tests/test_collbench_cuda.sh, against the emulated runtime)
COLL_CUDA_LIBRARY=/nonexistent/libcudart.so bench allreduce --memtype cuda -b 8 -e 8
check "--memtype cuda without a CUDA runtime: exit 1, 'no usable CUDA runtime'" \
    eval '[ "$rc" = 1 ] && grep -q "no usable CUDA runtime" "$TMP/err"'

# Bad input: a message on stderr and exit 2; never a crash (status >= 128).
bad() {
    local desc=$1
    shift
    bench "$@"
    if [ "$rc" = 2 ] && [ -s "$TMP/err" ]; then
        ok "exit 2: $desc"
    else
        not_ok "exit 2: $desc" "exit status $rc"
    fi
}
bad "no arguments"
bad "unknown collective" alltoallx
bad "unknown flag" allreduce -q 1
bad "unknown long flag" allreduce --bogus
bad "malformed size -b 1X" allreduce -b 1X
bad "malformed size -e ''" allreduce -e ''
bad "size overflow" allreduce -e 99999999999G
bad "min > max" allreduce -b 1M -e 1K
bad "factor < 2 without -i" allreduce -f 1
bad "step bytes 0" allreduce -i 0
bad "unknown dtype" allreduce -d float7
bad "unknown op" allreduce -o xor
bad "negative root" reduce -r -1
bad "-c -1" allreduce -c -1
bad "-z 7" allreduce -z 7
bad "-n 0" allreduce -n 0
bad "-w -1" allreduce -w -1
bad "-a 5" allreduce -a 5
bad "-m 0" allreduce -m 0
bad "-N -1" allreduce -N -1
bad "-T -1" allreduce -T -1
bad "-T 0.2 (a timeout is whole seconds; the budget is --time-budget)" allreduce -T 0.2
bad "--time-budget 0" allreduce --time-budget 0
bad "--time-budget abc" allreduce --time-budget abc
bad "-g 2" allreduce -g 2
bad "--memtype gpu" allreduce --memtype gpu
bad "--inplace-only --outofplace-only" allreduce --inplace-only --outofplace-only
bad "flag without value" allreduce -b
bad "stray argument" allreduce extra
bad "--np 0" allreduce --np 0
bad "--compare without runs" --compare
bad "root out of range for the communicator" broadcast -r 1 -b 8 -e 8
bad "unknown COLL_ALGO (--algo)" allreduce -b 8 -e 8 --algo nosuch
bad "--calibrate with --explain" allreduce --calibrate --explain
bad "--exact without --explain" allreduce --exact -b 8 -e 8
bad "--explain --exact beyond the walker's 1024 ranks" allreduce --explain --exact --np 2000
bad "--np 5000 to run (4096 at most)" allreduce --np 5000 -b 8 -e 8
bad "--bind-to without --np" allreduce -b 8 -e 8 --bind-to core
bad "--bind-to socket" allreduce --np 2 -b 8 -e 8 --bind-to socket
# nccl-tests 2.x flags that mean nothing here: accepted, ignored with a note
bench allreduce -b 8 -e 8 -n 1 -w 0 -G 1 -C 1 -p 0 -R 1 -y 0 -S 0 -x 0 -D 0 -V 0 -M 0 -J r.json
check "nccl-tests' -G -C -p -R -y -S -x -D -V -M -J: run, a note for each, exit 0" \
    eval '[ "$rc" = 0 ] && [ "$(rows)" = 1 ] && [ "$(grep -c "note: -. .* ignored" "$TMP/err")" = 11 ]'
# one bound alone moves the other's default instead of blaming a flag never typed
bench allreduce -e 8 -n 1 -w 0
check "-e 8 alone: one row of 8 bytes" \
    eval '[ "$rc" = 0 ] && [ "$(rows)" = 1 ] && grep -qE "^ +8 +2 " "$TMP/out"'

# Settings: every COLL_* variable is checked when a comm is created; a wrong one is named
# once (rank 0 of two), with what it could be.
env_warns() { # VAR=VALUE PATTERN: one warning matching PATTERN, the run goes on
    $GUARD env "$1" "$COLLBENCH" allreduce --np 2 -b 8 -e 8 -n 1 -w 0 >"$TMP/out" \
        2>"$TMP/err" </dev/null
    rc=$?
    [ "$rc" = 0 ] && [ "$(grep -c "$2" "$TMP/err")" = 1 ]
}
check "COLL_ALOG=ring: one warning naming COLL_ALGO" \
    env_warns COLL_ALOG=ring 'COLL_ALOG is not a setting.*did you mean COLL_ALGO?'
check "COLL_DEBUG=VERBOSE: one warning with the levels" \
    env_warns COLL_DEBUG=VERBOSE "COLL_DEBUG='VERBOSE' is not a log level (NONE, WARN, INFO or TRACE)"
check "COLL_DEBUG_SUBSYS=FOO: one warning with the subsystems (and warnings still show)" \
    env_warns COLL_DEBUG_SUBSYS=FOO "no subsystem is called 'FOO' (INIT, BOOTSTRAP, NET"
check "COLL_QUANT=int3: one warning with the codecs" \
    env_warns COLL_QUANT=int3 "COLL_QUANT='int3' is not a codec (off, fp16, bf16, int8"
# The names other parts of the project read (launch variables, tests' and benchmarks'
# knobs) are not typos: set all of them (empty) and none is warned about.
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
names=$(cd "$src" && grep -rhoE 'getenv\("COLL_[A-Z0-9_]+"|environ(\.get)?[[(]"COLL_[A-Z0-9_]+"|export COLL_[A-Z0-9_]+|\$\{?COLL_[A-Z0-9_]+' \
    src tools bench tests python coll .ci packaging 2>/dev/null | grep -oE 'COLL_[A-Z0-9_]+' | sort -u)
envs=()
for n in $names; do envs+=("$n="); done
$GUARD env "${envs[@]}" "$COLLBENCH" allreduce --np 2 -b 8 -e 8 -n 1 -w 0 >"$TMP/out" \
    2>"$TMP/err" </dev/null
rc=$?
check "the $(echo "$names" | wc -w) COLL_* names the project reads: none warned about" \
    eval '[ "$rc" = 0 ] && [ "$(echo "$names" | wc -w)" -gt 20 ] && ! grep -q "is not a setting" "$TMP/err"'

COLL_SIZE=2 COLL_RANK=0 bench allreduce --np 3 -b 8 -e 8
check "exit 2: --np that disagrees with the launcher's rank count" \
    test "$rc" = 2 -a -s "$TMP/err"

tap_done
