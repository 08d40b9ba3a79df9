#!/usr/bin/env bash
# test_trace.sh - COLL_TRACE end to end: real ranks under collrun write Chrome trace JSON,
# the files load as JSON with every send's flow matched by one receive on the peer, collviz
# draws a traced op beside its prediction (terminal and HTML, the page checked in headless
# Chromium when it is installed), and bad traces are usage errors.
#
#   tests/test_trace.sh COLLRUN COLLBENCH COLLVIZ
#
# Prints TAP. COLL_TEST_CHROMIUM= (empty) skips the browser checks; unset, chromium is
# looked up on PATH.
set -u

COLLRUN=${1:?usage: test_trace.sh COLLRUN COLLBENCH COLLVIZ}
COLLBENCH=${2:?usage: test_trace.sh COLLRUN COLLBENCH COLLVIZ}
COLLVIZ=${3:?usage: test_trace.sh COLLRUN COLLBENCH COLLVIZ}
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
GUARD="timeout -k 5 90"
export COLL_TIMEOUT_MS=${COLL_TIMEOUT_MS:-60000}

command -v python3 >/dev/null || skip_all "python3 is needed to read the JSON"

# bench NP ALGO TRACE [collbench args]: a short traced all-reduce sweep
bench() {
    local np=$1 algo=$2 trace=$3
    shift 3
    COLL_TRACE=$trace COLL_ALGO=allreduce=$algo $GUARD "$COLLRUN" -n "$np" "$COLLBENCH" \
        allreduce -c 1 -z 1 "$@" >"$TMP/bench.out" 2>"$TMP/bench.err"
}

# check_trace FILES...: valid JSON; coll_trace metadata and the end record on every rank; ops and
# steps well formed; every flow start has exactly one flow end with its id, on the rank the
# id names, and the other way round; each op has as many step slices as its schedule.
check_trace() {
    python3 - "$@" <<'PY'
import json, sys, collections
files = sys.argv[1:]
meta, ends, starts, finishes = {}, {}, collections.Counter(), collections.Counter()
steps, ops = collections.Counter(), {}
for path in files:
    with open(path) as f:
        events = json.load(f)             # raises on anything that is not JSON
    assert isinstance(events, list), path
    for e in events:
        ph, pid = e["ph"], e["pid"]
        if ph == "M" and e["name"] == "coll_trace":
            a = e["args"]
            assert a["version"] == 1 and a["rank"] == pid, e
            assert pid not in meta, "rank %d twice" % pid
            meta[pid] = a
        elif ph == "M" and e["name"] == "coll_trace_end":
            ends[pid] = e["args"]
        elif ph == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0, e
            if e["cat"] == "coll":
                a = e["args"]
                assert a["status"] == "success", e
                ops[(pid, a["seq"])] = sum(p["nsteps"] for p in a["parts"])
            else:
                assert e["cat"] == "step" and e["name"] in ("send", "recv", "reduce", "copy"), e
                steps[(pid, e["args"]["op"])] += 1
        elif ph in ("s", "f"):
            n = len(meta) and meta[pid]["nranks"]
            pair = e["id"] >> 32
            src, dst = pair // n, pair % n
            assert (src if ph == "s" else dst) == pid, ("flow on the wrong rank", e)
            (starts if ph == "s" else finishes)[e["id"]] += 1
nranks = {m["nranks"] for m in meta.values()}
assert len(nranks) == 1, nranks
n = nranks.pop()
assert sorted(meta) == list(range(n)), ("ranks", sorted(meta))
assert sorted(ends) == list(range(n)), ("end records", sorted(ends))
dropped = sum(e["dropped"] for e in ends.values())
assert starts and all(c == 1 for c in starts.values()), "a flow id starts twice"
if dropped == 0:
    assert starts == finishes, ("unmatched flows", set(starts) ^ set(finishes))
    assert ops and all(steps[k] == v for k, v in ops.items()), "an op lacks step slices"
print("%d ranks, %d ops, %d steps, %d messages, %d events dropped" %
      (n, len(ops), sum(steps.values()), len(starts), dropped))
PY
}

# ---- traces of real runs ----------------------------------------------------------------------
t=$TMP/ring.json
if bench 4 ring "$t" -b 8 -e 4K -f 8 -n 2 -w 1 && [ -s "$TMP/ring.r0.json" ] &&
    [ -s "$TMP/ring.r3.json" ] && [ ! -e "$t" ]; then
    ok "COLL_TRACE=ring.json: one file per rank (ring.r0.json ... ring.r3.json)"
else
    not_ok "COLL_TRACE: files per rank" "$(tail -3 "$TMP/bench.err")" "$(ls "$TMP")"
fi
if out=$(check_trace "$TMP"/ring.r?.json 2>&1); then
    ok "ring trace: valid JSON, flows matched across ranks ($out)"
else
    not_ok "ring trace: valid JSON, flows matched across ranks" "$(echo "$out" | tail -3)"
fi

if bench 3 tree "$TMP/tree-%r.json" -b 4K -e 64K -f 16 -n 2 -w 1 &&
    [ -s "$TMP/tree-0.json" ] && [ -s "$TMP/tree-2.json" ] &&
    out=$(check_trace "$TMP"/tree-?.json 2>&1); then
    ok "COLL_TRACE with %r, tree on 3 ranks: valid, flows matched ($out)"
else
    not_ok "COLL_TRACE with %r, tree" "$(tail -3 "$TMP/bench.err")" "${out:-}"
fi

# more events than one buffer holds (32768): the writer thread's flush path
if bench 2 ring "$TMP/many.json" -b 8 -e 8 -n 6000 -w 0 -c 0 &&
    out=$(check_trace "$TMP"/many.r?.json 2>&1); then
    ok "a trace larger than the buffer stays valid ($out)"
else
    not_ok "a trace larger than the buffer" "$(tail -3 "$TMP/bench.err")" "${out:-}"
fi

# a trace file that cannot be created fails comm init with a message, on every rank
bench 2 ring "$TMP/no/such/dir/t.json" -b 8 -e 8 -n 1 -w 0
rc=$?
if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "COLL_TRACE file '.*no/such/dir" "$TMP/bench.err"; then
    ok "an uncreatable COLL_TRACE file: init fails with a message (exit $rc)"
else
    not_ok "an uncreatable COLL_TRACE file: exit $rc" "$(tail -3 "$TMP/bench.err")"
fi

# ---- collviz reads the traces ------------------------------------------------------------------
if $GUARD "$COLLVIZ" trace "$t" --html "$TMP/ring.html" >"$TMP/viz.out" 2>"$TMP/viz.err" &&
    grep -q '^result: every rank holds what allreduce promises' "$TMP/viz.out" &&
    grep -q '^timeline of op #[0-9]* (success): measured by COLL_TRACE' "$TMP/viz.out" &&
    grep -q '"meas":{"total":' "$TMP/ring.html"; then
    ok "collviz trace ring.json: the op redrawn, measured beside predicted"
else
    not_ok "collviz trace ring.json" "$(head -3 "$TMP/viz.err")" "$(tail -5 "$TMP/viz.out")"
fi
# --op picks an op; the files may also be named one by one
if $GUARD "$COLLVIZ" --trace "$TMP/tree-0.json" --trace "$TMP/tree-1.json" \
    --trace "$TMP/tree-2.json" --op 0 --no-data >"$TMP/viz.out" 2>"$TMP/viz.err" &&
    grep -q '^timeline of op #0 ' "$TMP/viz.out" &&
    grep -q 'allreduce with tree' "$TMP/viz.out"; then
    ok "collviz --trace F --trace F ... --op 0"
else
    not_ok "collviz --trace ... --op 0" "$(head -3 "$TMP/viz.err")"
fi

# ---- bad traces: usage error, exit status 2, a message ------------------------------------------
printf '[{"name":"x","ph":"X","pid":0,"tid":0,"ts":1,"dur":1}]\n' >"$TMP/other.json"
printf '[{"name":"coll_trace","ph":"M","pid":0,"tid":0,"args":{"version":1,"rank":0,' >"$TMP/cut.json"
printf '{"displayTimeUnit":"ns"}\n' >"$TMP/noevents.json"
printf '[{"name":"coll_trace","ph":"M","pid":0,"tid":0,"args":{"version":7,"rank":0,"nranks":1,"comm":"0"}}]\n' \
    >"$TMP/version.json"
printf '[%.0s' $(seq 200) >"$TMP/deep.json"
while IFS='|' read -r what args; do
    # shellcheck disable=SC2086
    $GUARD "$COLLVIZ" $args >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc = 2 ] && [ -s "$TMP/err" ]; then
        ok "bad trace: $what -> exit 2"
    else
        not_ok "bad trace: $what: exit $rc, want 2 with a message" "$(head -2 "$TMP/err")"
    fi
done <<EOF
JSON from another tool|trace $TMP/other.json
truncated JSON|trace $TMP/cut.json
object without traceEvents|trace $TMP/noevents.json
unknown trace version|trace $TMP/version.json
nested too deeply|trace $TMP/deep.json
a rank's file missing|trace $TMP/ring.r0.json $TMP/ring.r1.json
the same rank twice|trace $TMP/ring.r0.json $TMP/ring.r0.json
op not in the trace|trace $t --op 999999
--op without a trace|allreduce --op 1
no files|trace
EOF

# ---- the page in a browser: first and last round, no script error, not blank -------------------
CHROMIUM=${COLL_TEST_CHROMIUM-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then
    skip "trace page renders its first round in chromium" "chromium not installed"
    skip "trace page renders its last round in chromium" "chromium not installed"
else
    chrome() {
        local profile
        profile=$(mktemp -d "$TMP/chrome.XXXXXX")
        $GUARD "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
            --disable-background-networking --disable-component-update --disable-sync \
            --user-data-dir="$profile" "$@" 2>/dev/null
    }
    last=$(python3 -c 'import re,sys; d=open(sys.argv[1]).read(); print(len(re.findall(r"\{\"k\":", d)) - 1)' \
        "$TMP/ring.html")
    for frame in first last; do
        want=0 url="file://$TMP/ring.html"
        [ $frame = last ] && want=$last url="$url#last"
        chrome --dump-dom "$url" >"$TMP/dom.html"
        chrome --window-size=1000,1100 --screenshot="$TMP/$frame.png" "$url" >/dev/null
        # a screenshot with content: it decodes, and to more than a few distinct byte values
        px=$(python3 - "$TMP/$frame.png" <<'PY'
import sys, zlib, struct
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat = 8, b''
while pos < len(data):
    length, kind = struct.unpack('>I4s', data[pos:pos + 8])
    if kind == b'IDAT':
        idat += data[pos + 8:pos + 8 + length]
    pos += 12 + length
print(len(set(zlib.decompress(idat))))
PY
)
        # the page counts what it drew in the two timelines (bars lit for this round)
        lit=$(grep -o 'data-lit="[0-9]*"' "$TMP/dom.html" | grep -o '[0-9]*')
        if grep -q "data-frame=\"$want\"" "$TMP/dom.html" && grep -q 'data-ready=' "$TMP/dom.html" &&
            ! grep -q 'data-error=' "$TMP/dom.html" && [ "${lit:-0}" -gt 0 ] &&
            [ "${px:-0}" -gt 16 ]; then
            ok "trace page renders its $frame round in chromium ($lit bars lit)"
        else
            not_ok "trace page renders its $frame round in chromium" \
                "$(grep -o '<body[^>]*>' "$TMP/dom.html")" "screenshot byte values: ${px:-none}"
        fi
    done
fi

tap_done
