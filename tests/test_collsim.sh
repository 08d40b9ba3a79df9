#!/usr/bin/env bash
# test_collsim.sh - collsim, coll's schedules on SimGrid: a message's time on a known link,
# the simulator against the cost model where nothing contends, contention where the fabric
# is oversubscribed, the selector's pick, JSON, a trace collviz reads, and bad input.
#
#   tests/test_collsim.sh path/to/collsim|none path/to/collviz
#
# Prints TAP; without SimGrid (collsim not built: "none") it skips. Every run is simulated
# time: the checks hold on any machine, however loaded. SimGrid runs on threads here
# (contexts/factory:thread), the context switch the sanitizers follow.
set -u

COLLSIM=${1:?usage: test_collsim.sh COLLSIM|none COLLVIZ}
COLLVIZ=${2:?usage: test_collsim.sh COLLSIM|none COLLVIZ}
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

if [ "$COLLSIM" = none ] || [ ! -x "$COLLSIM" ]; then
    skip_all "SimGrid not found at build time (apt-get install libsimgrid-dev; ./coll setup does)"
fi
GUARD="timeout -k 5 60"
sim() { $GUARD "$COLLSIM" --cfg=contexts/factory:thread "$@"; }
tap_diag() { tap_show "tail -n 15" "$TMP/out" "$TMP/err"; }

# the time column (us) of the row whose algorithm column is $1
time_of() { awk -v a="$1" '!/^#/ && $10 == a { print $6; exit }' "$TMP/out"; }
model_of() { awk -v a="$1" '!/^#/ && $10 == a { print $12; exit }' "$TMP/out"; }
within() { # a b pct: |a-b| <= pct% of b
    awk -v a="$1" -v b="$2" -v p="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= b * p / 100) }'
}

# ---- one message: 2 latencies of 1 us and 8 B at 1 GB/s, nothing else ------------------------
if sim --hosts 2 -c broadcast --algo chain -b 8 -e 8 --step 0 --overhead 0 --latency 1us \
        --link 1GBps >"$TMP/out" 2>"$TMP/err" && [ "$(time_of chain)" = 2.01 ]; then
    ok "one 8-byte message over two 1 us links at 1 GB/s takes 2.01 us"
else
    not_ok "one 8-byte message: expected 2.01 us, got '$(time_of chain)'"
fi

# ---- the cost model and the simulator agree where nothing contends ---------------------------
if sim --hosts 8 -b 8 -e 8 --algo ring,rd,tree >"$TMP/out" 2>"$TMP/err"; then
    for a in ring rd tree; do
        t=$(time_of $a) m=$(model_of $a)
        if [ -n "$t" ] && within "$t" "$m" 10; then
            ok "8 B all-reduce $a on 8 hosts: simulated $t us, the cost model $m us (within 10%)"
        else
            not_ok "8 B all-reduce $a: simulated '$t' us against the model's '$m' us"
        fi
    done
    tr=$(time_of tree) ri=$(time_of ring)
    if awk -v t="$tr" -v r="$ri" 'BEGIN { exit !(t > 0 && t < r) }'; then
        ok "8 B all-reduce: tree ($tr us) beats ring ($ri us) on 8 hosts"
    else
        not_ok "8 B all-reduce: tree '$tr' us should beat ring '$ri' us"
    fi
else
    not_ok "collsim --hosts 8 --algo ring,rd,tree failed"
fi

# ---- contention: a tree's 1 MiB all-reduce on 64 hosts, full fat tree against 4:1 ------------
t1= t4=
if sim --hosts 64 --fabric fattree -b 1M -e 1M --algo tree >"$TMP/out" 2>"$TMP/err"; then
    t1=$(time_of tree)
fi
if sim --hosts 64 --fabric fattree:4 -b 1M -e 1M --algo tree >"$TMP/out" 2>"$TMP/err"; then
    t4=$(time_of tree)
fi
if [ -n "$t1" ] && [ -n "$t4" ] && awk -v a="$t4" -v b="$t1" 'BEGIN { exit !(a > 1.2 * b) }'; then
    ok "4:1 oversubscribed fat tree slows a 64-host tree all-reduce ($t1 -> $t4 us)"
else
    not_ok "oversubscription: expected fattree:4 > 1.2 x fattree, got '$t1' and '$t4'"
fi
for f in torus dragonfly "fattree=2;4,4;1,2;1,1"; do
    check "fabric $f runs 16 hosts" sim --hosts 16 --fabric "$f" -b 8 -e 8 --algo ring -q
done

# ---- the selector's pick, JSON and the trace -------------------------------------------------
if sim --hosts 2 --per-host 2 -b 8 -e 1M -f 64 --json "$TMP/r.json" --trace "$TMP/t.json" \
        >"$TMP/out" 2>"$TMP/err"; then
    if python3 - "$TMP/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert d["nranks"] == 4 and len(rows) == 4, d
assert all(r["picked_by"] == "selector" and r["time_us"] > 0 and r["messages"] > 0 for r in rows)
assert [r["size"] for r in rows] == [8, 512, 32768, 1048576]
PY
    then ok "--json: a row per size, picked by the selector, with times and messages"
    else not_ok "--json rows wrong" "$(cat "$TMP/r.json")"
    fi
    if $GUARD "$COLLVIZ" trace "$TMP/t.json" >"$TMP/viz" 2>&1; then
        ok "collviz trace draws the simulated run"
    else
        not_ok "collviz trace rejects collsim's trace" "$(head -5 "$TMP/viz")"
    fi
else
    not_ok "collsim --json --trace failed"
fi

# ---- a platform file ---------------------------------------------------------------------------
cat >"$TMP/good.xml" <<'XML'
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="z" routing="Full">
    <host id="a" speed="1Gf"/>
    <host id="b" speed="1Gf"/>
    <link id="l" bandwidth="1GBps" latency="10us"/>
    <route src="a" dst="b"><link_ctn id="l"/></route>
  </zone>
</platform>
XML
if sim --platform "$TMP/good.xml" -c broadcast --algo chain -b 8 -e 8 --step 0 --overhead 0 \
        >"$TMP/out" 2>"$TMP/err" && [ "$(time_of chain)" = 10.01 ]; then
    ok "--platform: one message over the file's 10 us link takes 10.01 us"
else
    not_ok "--platform: expected 10.01 us, got '$(time_of chain)'"
fi

# ---- bad input: exit 2, saying what is valid ----------------------------------------------------
sed 's|<host id="b" speed="1Gf"/>|<host id="b" speed="1Gf"|' "$TMP/good.xml" >"$TMP/bad.xml"
usage() { # description, expected text in stderr, collsim arguments
    local desc=$1 want=$2 rc
    shift 2
    sim "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" = 2 ] && grep -q -- "$want" "$TMP/err"; then
        ok "$desc: exit 2, says '$want'"
    else
        not_ok "$desc: exit $rc (want 2 and '$want')"
    fi
}
usage "malformed platform file" "bad.xml:7" --platform "$TMP/bad.xml"
usage "more ranks than hosts x per host" "do not fit" --hosts 2 --per-host 2 -n 5
usage "more ranks than the platform file's hosts" "do not fit" --platform "$TMP/good.xml" -n 3
usage "unknown fabric" "fattree" --fabric mesh
usage "unknown algorithm" "ring, tree" --algo bogus
usage "algorithm of another collective" "binomial, linear" -c gather --algo ring
usage "algorithm that cannot run the ranks" "cannot run" --hosts 1 --per-host 4 --algo hier -b 8 -e 8

tap_done
