#!/usr/bin/env bash
# test_collsim.sh - collsim, coll's schedules on SimGrid: a message's time on a known link,
# the simulator against the cost model where nothing contends, contention where the fabric
# is oversubscribed, the selector's pick, JSON, a trace collviz reads, the ranks' memory ports
# within a host, --max-messages' coarser pieces, hosts sharing one machine's cores
# (--machine-cores) and the cores its waiting ranks poll on, warm-up calls, a calibration's exchange term, and bad input.
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

# ---- --machine-cores: hosts emulated on one machine share its cores -----------------------------
# 4 hosts, a rank each, 8 B recursive doubling: two rounds of a 10 us send each. With a core
# per rank (4 machine cores, or none named) the sends of a round run side by side; on 2 cores
# two at a time, on 1 one at a time.
mc_time() { # machine cores (empty: none named) -> time (us)
    sim --hosts 4 -c allreduce --algo rd -b 8 -e 8 --step 0 --overhead 10us --latency 1us \
        --link 1GBps ${1:+--machine-cores "$1"} >"$TMP/out" 2>"$TMP/err" && time_of rd
}
t0=$(mc_time) t4=$(mc_time 4) t2=$(mc_time 2) t1=$(mc_time 1)
if [ -n "$t0" ] && [ "$t0" = "$t4" ] && awk -v a="$t0" -v b="$t2" -v c="$t1" \
        'BEGIN { exit !(a > 20 && b >= a + 19 && c >= b + 39) }'; then
    ok "--machine-cores: 8 B rd on 4 hosts $t0 us with a core each ($t4 on 4), $t2 on 2, $t1 on 1"
else
    not_ok "--machine-cores: none '$t0', 4 '$t4', 2 '$t2', 1 '$t1' us"
fi

# ---- --machine-cores: a waiting rank polls (--spin) on one of the cores -----------------------
# 4 hosts, 8 B binomial broadcast: while the root sends, the three others poll for their
# message. With a core each, that costs the root nothing; on 2 cores the four share them, so
# the sends take longer. Without polling (--spin 0) the 2 cores do not slow it.
sp_time() { # machine cores, spin -> time (us)
    sim --calib "$TMP/cal0.txt" --hosts 4 --machine-cores "$1" --spin "$2" -c broadcast \
        --algo binomial -b 8 -e 8 >"$TMP/out" 2>"$TMP/err" && time_of binomial
}
printf 'tcp.alpha 1e-05\ntcp.beta 1e-09\ntcp.lat 2e-06\nstep 0\n' >"$TMP/cal0.txt"
s40=$(sp_time 4 0) s4=$(sp_time 4 50us) s20=$(sp_time 2 0) s2=$(sp_time 2 50us)
if [ -n "$s40" ] && [ "$s40" = "$s4" ] && [ "$s40" = "$s20" ] &&
        awk -v a="$s40" -v b="$s2" 'BEGIN { exit !(b > 1.3 * a) }'; then
    ok "--machine-cores + --spin: 8 B binomial on 4 hosts $s40 us on 4 cores (polling or not) and on 2 without polling, $s2 on 2 with it"
else
    not_ok "--machine-cores + --spin: 4 cores '$s40'/'$s4', 2 cores '$s20'/'$s2' us (want the first three equal, the last 1.3x more)"
fi

# ---- a calibration's tcp.xchg: a message that meets one going the other way -------------------
# 2 hosts: recursive doubling's one step is an exchange and pays xchg (5 us); a tree broadcast's
# one message meets nothing and does not.
printf 'tcp.alpha 1e-05\ntcp.beta 1e-09\ntcp.lat 2e-06\nstep 0\n' >"$TMP/cal0.txt"
{ cat "$TMP/cal0.txt"; echo "tcp.xchg 5e-06"; } >"$TMP/cal5.txt"
xchg_time() { # calibration file, collective, algorithm -> time (us)
    sim --calib "$1" --hosts 2 -c "$2" --algo "$3" -b 8 -e 8 >"$TMP/out" 2>"$TMP/err" &&
        time_of "$3"
}
r0=$(xchg_time "$TMP/cal0.txt" allreduce rd) r5=$(xchg_time "$TMP/cal5.txt" allreduce rd)
b0=$(xchg_time "$TMP/cal0.txt" broadcast tree) b5=$(xchg_time "$TMP/cal5.txt" broadcast tree)
if [ -n "$r0" ] && [ -n "$b0" ] && [ "$b0" = "$b5" ] &&
        awk -v a="$r0" -v b="$r5" 'BEGIN { d = b - a - 5; exit !(d > -0.01 && d < 0.01) }'; then
    ok "--calib tcp.xchg 5e-06: 8 B rd on 2 hosts $r0 -> $r5 us, tree broadcast $b0 us both"
else
    not_ok "--calib tcp.xchg: rd '$r0' -> '$r5' us (want +5), broadcast '$b0' -> '$b5' (want same)"
fi

# ---- a shaped link's burst (tcp.burst, tcp.burst_beta): an idle link's first bytes -----------
# One 32 KiB message on 2 hosts: with a bucket of 64 KiB at a tenth of beta it crosses 32768 x
# 0.9 ns = 29.5 us sooner. 8 x 32 KiB in a row gain, but the link never beats its rate by more
# than the bucket: at least (256 - 64) KiB at 1 GB/s, 196.6 us.
{ cat "$TMP/cal0.txt"; printf 'tcp.burst 65536\ntcp.burst_beta 1e-10\n'; } >"$TMP/calb.txt"
burst_time() { # calibration file, size, chunk -> time (us) of a 2-host chain broadcast
    sim --calib "$1" --hosts 2 -c broadcast --algo chain -b "$2" -e "$2" --chunk "$3" \
        >"$TMP/out" 2>"$TMP/err" && time_of chain
}
o1=$(burst_time "$TMP/cal0.txt" 32K 32K) b1=$(burst_time "$TMP/calb.txt" 32K 32K)
o2=$(burst_time "$TMP/cal0.txt" 256K 32K) b2=$(burst_time "$TMP/calb.txt" 256K 32K)
if [ -n "$o1" ] && [ -n "$b2" ] &&
        awk -v a="$o1" -v b="$b1" -v c="$o2" -v d="$b2" 'BEGIN { x = a - b - 29.49; y = c - d
            exit !(x > -0.5 && x < 0.5 && y > 29 && d >= 196.6) }'; then
    ok "--calib tcp.burst: 32 KiB on 2 hosts $o1 -> $b1 us; 8 x 32 KiB $o2 -> $b2 us"
else
    not_ok "--calib tcp.burst: 32 KiB '$o1' -> '$b1' us (want -29.5), 8 x 32 KiB '$o2' -> '$b2' (want less, >= 196.6)"
fi

# ---- --machine-cores: ranks done with the call poll on; a wake costs only where a core idled --
# 4 hosts, 8 B binomial reduce: the leaves send at once and are done; as their next call's wait
# they poll on, so on 2 cores rank 2's send to the root shares them too: 20.02 us with a core
# each or no polling, 36.02 with both (the waiting ranks' polling alone: 28.02).
rd_time() { # machine cores, spin -> time (us)
    sim --calib "$TMP/cal0.txt" --hosts 4 --machine-cores "$1" --spin "$2" -c reduce \
        --algo binomial -b 8 -e 8 >"$TMP/out" 2>"$TMP/err" && time_of binomial
}
r4=$(rd_time 4 50us) r20=$(rd_time 2 0) r2=$(rd_time 2 50us)
if [ -n "$r4" ] && [ "$r4" = "$r20" ] && awk -v a="$r4" -v b="$r2" 'BEGIN { exit !(b >= a + 15) }'; then
    ok "--machine-cores: 8 B binomial reduce on 4 hosts $r4 us (4 cores; 2 without polling $r20), $r2 on 2 with the done ranks polling"
else
    not_ok "--machine-cores: reduce '$r4'/'$r20' -> '$r2' us (want 15 more)"
fi
# 2 hosts, 8 KiB with --spin 10us and a wake of 100 us (the wake test below): on 2 machine
# cores the receiver slept while a core idled and pays the wake; on 1 the sender kept it busy,
# so the receiver woke at no cost (slower only for sharing the core while it polled).
{ cat "$TMP/cal0.txt"; echo "wake 1e-04"; } >"$TMP/calw.txt"
wk_time() { # calibration, machine cores -> time (us) of a 2-host chain broadcast of 8 KiB
    sim --calib "$1" --hosts 2 --machine-cores "$2" --spin 10us -c broadcast --algo chain \
        -b 8K -e 8K --chunk 8K >"$TMP/out" 2>"$TMP/err" && time_of chain
}
a1=$(wk_time "$TMP/cal0.txt" 1) b1=$(wk_time "$TMP/calw.txt" 1)
a2=$(wk_time "$TMP/cal0.txt" 2) b2=$(wk_time "$TMP/calw.txt" 2)
if [ -n "$a1" ] && [ "$a1" = "$b1" ] && [ -n "$b2" ] &&
        awk -v a="$a2" -v b="$b2" 'BEGIN { d = b - a - 91.81; exit !(d > -0.5 && d < 0.5) }'; then
    ok "--machine-cores + wake: 8 KiB on 1 core $a1 us with or without a wake, on 2 $a2 -> $b2 us"
else
    not_ok "--machine-cores + wake: 1 core '$a1' -> '$b1' (want the same), 2 cores '$a2' -> '$b2' (want +91.8)"
fi

# ---- --machine-cores: a burst crosses no faster than the machine copies the messages in flight
# 32 KiB with a 64 KiB bucket at 0.1 ns a byte, the machine's 2 cores at 0.2 ns a byte of CPU:
# 10 GB/s of copy path. Alone, the message's burst is as fast as the path (unchanged against
# a path that costs nothing); an exchange's two messages get half of it each, so their
# bursts take 0.2 ns a byte: 32768 x 0.1 ns = 3.28 us more.
mb_time() { # tcp.cpu, collective, algorithm -> time (us) on 2 hosts, 2 machine cores
    { cat "$TMP/calb.txt"; echo "tcp.cpu $1"; } >"$TMP/calm.txt"
    sim --calib "$TMP/calm.txt" --hosts 2 --machine-cores 2 -c "$2" --algo "$3" -b 32K -e 32K \
        --chunk 32K >"$TMP/out" 2>"$TMP/err" && time_of "$3"
}
l0=$(mb_time 1e-12 broadcast chain) l1=$(mb_time 2e-10 broadcast chain)
x0=$(mb_time 1e-12 allreduce rd) x1=$(mb_time 2e-10 allreduce rd)
if [ -n "$l0" ] && [ "$l0" = "$l1" ] && [ -n "$x1" ] &&
        awk -v a="$x0" -v b="$x1" 'BEGIN { d = b - a - 3.28; exit !(d > -0.3 && d < 0.3) }'; then
    ok "--machine-cores + burst: one 32 KiB message $l0 us either way; an exchange $x0 -> $x1 us"
else
    not_ok "--machine-cores + burst: one message '$l0' -> '$l1' (want the same), exchange '$x0' -> '$x1' (want +3.28)"
fi

# ---- a shaped link's debt: htb lets a packet go while it owes nothing and bills it after -------
# With the 64 KiB packets above, 64 KiB + 4 bytes in one message is two packets: the second
# waits out the first's debt, 64 KiB at 1 GB/s, 65.5 us, and crosses fast: 55 us or more
# later than 64 KiB alone, though it is 4 bytes more.
d0=$(burst_time "$TMP/calb.txt" 64K 64K) d1=$(burst_time "$TMP/calb.txt" 65540 65540)
if [ -n "$d0" ] && [ -n "$d1" ] && awk -v a="$d0" -v b="$d1" 'BEGIN { exit !(b > a + 55) }'; then
    ok "--calib tcp.burst: 64 KiB in one packet $d0 us, 4 bytes more in a second $d1 us"
else
    not_ok "--calib tcp.burst: 64 KiB '$d0' -> 65540 B '$d1' us (want 55 more: the first packet's debt)"
fi

# ---- --warmup: the timed call after warm-up calls and start barriers, as collbench -w times ---
# 64 KiB on 2 hosts with the packets above: the warm-up's 64 KiB crosses fast and leaves its
# root's link owing 65.5 us, which the start barrier's 4 bytes wait out (as on the bed), so the
# timed call finds the links idle again: the same time as without a warm-up. The warm-up's
# simulated time (JSON warmup_us) holds that wait: 45 us or more beyond an 8 B warm-up's and
# the calls' own difference.
warm_time() { # size, warm-up calls -> "time warmup" (us) of a 2-host chain broadcast
    sim --calib "$TMP/calb.txt" --hosts 2 -c broadcast --algo chain -b "$1" -e "$1" \
        --chunk "$1" ${2:+--warmup "$2"} -q --json "$TMP/w.json" >"$TMP/out" 2>"$TMP/err" &&
        python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
print(r["time_us"], r["warmup_us"])' "$TMP/w.json"
}
w0=$(warm_time 64K) w1=$(warm_time 64K 1) s1=$(warm_time 8 1)
if [ -n "$w0" ] && [ -n "$w1" ] && [ -n "$s1" ] &&
        awk -v a="$w0" -v b="$w1" -v c="$s1" 'BEGIN { split(a, x, " "); split(b, y, " ")
            split(c, z, " "); exit !(x[1] == y[1] && x[2] == 0 &&
                                    y[2] - z[2] - (y[1] - z[1]) >= 45) }'; then
    ok "--warmup: 64 KiB from idle links and after a warm-up (time, warm-up us) $w0 / $w1; 8 B $s1"
else
    not_ok "--warmup: 64 KiB '$w0' -> '$w1' (want the same time, the warm-up 45 us longer than 8 B's '$s1')"
fi

# ---- wake: a wait that outlasts --spin sleeps, and its rank runs wake later ------------------
# 8 B cross in 12 us, inside 50 us of polling: no wake. 8 KiB with --spin 10us: the wait
# slept, and its rank runs 100 us after the message's first bytes, 8.19 us before its last:
# 91.8 us more. 1 MiB takes a millisecond on the link, which hides the wake.
{ cat "$TMP/cal0.txt"; echo "wake 1e-04"; } >"$TMP/calw.txt"
wake_time() { # calibration file, size, more flags -> time (us) of a 2-host chain broadcast
    local c=$1 b=$2
    shift 2
    sim --calib "$c" --hosts 2 -c broadcast --algo chain -b "$b" -e "$b" --chunk "$b" "$@" \
        >"$TMP/out" 2>"$TMP/err" && time_of chain
}
s0=$(wake_time "$TMP/cal0.txt" 8) s1=$(wake_time "$TMP/calw.txt" 8)
k0=$(wake_time "$TMP/cal0.txt" 8K --spin 10us) k1=$(wake_time "$TMP/calw.txt" 8K --spin 10us)
l0=$(wake_time "$TMP/cal0.txt" 1M) l1=$(wake_time "$TMP/calw.txt" 1M)
if [ -n "$s0" ] && [ "$s0" = "$s1" ] && [ -n "$l0" ] && [ "$l0" = "$l1" ] && [ -n "$k1" ] &&
        awk -v a="$k0" -v b="$k1" 'BEGIN { d = b - a - 91.81; exit !(d > -0.5 && d < 0.5) }'; then
    ok "--calib wake 1e-04: 8 B $s0 us both; 8 KiB --spin 10us $k0 -> $k1 us; 1 MiB $l0 both"
else
    not_ok "--calib wake: 8 B '$s0' -> '$s1', 8 KiB '$k0' -> '$k1' (want +91.8), 1 MiB '$l0' -> '$l1'"
fi

# ---- call: a collective call's own cost, once per rank before its first step ----------------
{ cat "$TMP/cal0.txt"; echo "call 5e-06"; } >"$TMP/calk.txt"
n0=$(wake_time "$TMP/cal0.txt" 8) n5=$(wake_time "$TMP/calk.txt" 8)
m0=$(wake_time "$TMP/cal0.txt" 1M) m5=$(wake_time "$TMP/calk.txt" 1M)
if [ -n "$n0" ] && [ -n "$m5" ] && awk -v a="$n0" -v b="$n5" -v c="$m0" -v d="$m5" \
        'BEGIN { x = b - a - 5; y = d - c - 5; exit !(x > -0.01 && x < 0.01 && y > -0.01 && y < 0.01) }'; then
    ok "--calib call 5e-06: 8 B $n0 -> $n5 us, 1 MiB $m0 -> $m5 us"
else
    not_ok "--calib call 5e-06: 8 B '$n0' -> '$n5', 1 MiB '$m0' -> '$m5' (want +5 both)"
fi

# ---- tcp.cpu with --machine-cores: the machine's copy path, shared by every host's bytes -----
# 2 machine cores at 2 ns a byte carry 1 GB/s in all: one 4 MiB message at the links' 1 GB/s
# keeps its time; a 4-host ring's four at once get a quarter each, so the all-gather's time
# is about 4x (3x or more, as the latencies do not grow).
{ cat "$TMP/cal0.txt"; echo "tcp.cpu 2e-09"; } >"$TMP/calc.txt"
cpu_time() { # calibration file, hosts, collective, algorithm -> time (us)
    sim --calib "$1" --hosts "$2" --machine-cores 2 -c "$3" --algo "$4" -b 4M -e 4M --chunk 4M \
        >"$TMP/out" 2>"$TMP/err" && time_of "$4"
}
c0=$(cpu_time "$TMP/cal0.txt" 2 broadcast chain) c1=$(cpu_time "$TMP/calc.txt" 2 broadcast chain)
g0=$(cpu_time "$TMP/cal0.txt" 4 allgather ring) g1=$(cpu_time "$TMP/calc.txt" 4 allgather ring)
if [ -n "$c0" ] && [ -n "$g1" ] && within "$c1" "$c0" 1 &&
        awk -v a="$g0" -v b="$g1" 'BEGIN { exit !(b > 3 * a && b < 4.2 * a) }'; then
    ok "--calib tcp.cpu + --machine-cores 2: one message $c0 -> $c1 us, 4-host ring $g0 -> $g1 us"
else
    not_ok "--calib tcp.cpu: one message '$c0' -> '$c1' (want the same), ring '$g0' -> '$g1' (3-4x)"
fi

# ---- within a host: each rank's memory port -------------------------------------------------
# 128 chunks of 8 KiB at 1 GB/s (8.19 us each) with 10 us of shared-memory latency: over the
# ranks' ports the latency overlaps the next chunk's copy (128 x 8.19 + 10 us, plus the
# root's copy), over SimGrid's loopback one message at a time pays it every chunk
pipe() {
    sim --hosts 1 --per-host 2 -c broadcast --algo chain -b 1M -e 1M --chunk 8K --step 0 \
        --overhead 0 --intra 1GBps --intra-latency 10us "$@" >"$TMP/out" 2>"$TMP/err" &&
        time_of chain
}
tp=$(pipe --intra-model ports) tl=$(pipe --intra-model loopback)
if [ -n "$tp" ] && [ -n "$tl" ] && within "$tp" 1085 3 &&
    awk -v p="$tp" -v l="$tl" 'BEGIN { exit !(p < 0.6 * l) }'; then
    ok "2-rank pipeline of 8 KiB chunks: ports overlap the latency ($tp us; loopback $tl us)"
else
    not_ok "2-rank pipeline: expected ~1085 us over ports, under 0.6 x loopback: '$tp', '$tl'"
fi
# between hosts too a pair's messages go in turn, each one's latency (two 10 us links)
# overlapping the next one's transfer: 128 x 8.19 + 20 us plus the root's copy; SimGrid's
# own way, eight side by side at 1/8 of the rate, or one at a time, would be 1.3-3 times that
t=$(sim --hosts 2 -c broadcast --algo chain -b 1M -e 1M --chunk 8K --step 0 --overhead 0 \
        --link 1GBps --latency 10us 2>"$TMP/err" | awk '!/^#/ { print $6; exit }')
if [ -n "$t" ] && within "$t" 1095 3; then
    ok "a 2-host pipeline of 8 KiB chunks pays the route's latency once ($t us)"
else
    not_ok "2-host pipeline: expected ~1095 us, got '$t'"
fi
# a root taking in from two peers of its host shares its port (the receiver copies): twice
# the time of one message
share() {
    sim --hosts 1 --per-host 3 -c gather --algo linear -b 3M -e 3M --step 0 --overhead 0 \
        --intra 1GBps --intra-latency 0 "$@" >"$TMP/out" 2>"$TMP/err" && time_of linear
}
sp=$(share) sl=$(share --intra-model loopback)
if [ -n "$sp" ] && within "$sp" 2097.15 1 && within "$sl" 1048.58 1; then
    ok "two 1 MiB messages into one rank share its port ($sp us; loopback $sl us)"
else
    not_ok "port sharing: expected 2097.15 and 1048.58 us, got '$sp' and '$sl'"
fi

# ---- --max-messages: coarser pieces, said so; beyond them, not simulated ----------------------
if sim --hosts 4 -b 64M -e 64M --algo ring,tree --max-messages 1000 --json "$TMP/c.json" \
        >"$TMP/out" 2>"$TMP/err" && grep -q "ring .*coarsened from 131072" "$TMP/out" &&
    python3 - "$TMP/c.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["max_messages"] == 1000, d
rows = {r["algo"]: r for r in d["rows"]}
for a in ("ring", "tree"):
    r = rows[a]
    # 2 x 4 ranks x 64 MiB / 1000, as a power of two: 1 MiB
    assert r["coarsened_from"] == 131072 and r["chunk_bytes"] == 1 << 20, r
    assert 0 < r["messages"] <= 1000, r
PY
then
    ok "--max-messages 1000: 64 MiB in 1 MiB chunks for every algorithm, rows say coarsened"
else
    not_ok "--max-messages: coarsened rows wrong" \
        "$(tail -3 "$TMP/out"; tail -5 "$TMP/c.json" 2>/dev/null)"
fi
if sim --hosts 64 -b 8M -e 8M --algo ring --max-messages 1000 --json "$TMP/s.json" \
        >"$TMP/out" 2>"$TMP/err" && grep -q "ring: more than --max-messages 1000" "$TMP/out" &&
    python3 - "$TMP/s.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rows"]
assert len(r) == 1 and r[0]["skipped"] == "max-messages", r
PY
then
    ok "a 64-rank ring (8,064 messages at least) over --max-messages 1000: not simulated, said so"
else
    not_ok "--max-messages: an over-budget row should be skipped, said so" "$(tail -3 "$TMP/out")"
fi

# ---- auto among named algorithms: the selector's row beside the named ones ----------------------
if sim --hosts 2 --per-host 4 -b 8 -e 64K -f 64 --algo auto,ring --json "$TMP/a.json" -q \
    >"$TMP/out" 2>"$TMP/err" && python3 - "$TMP/a.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
by = {}
for r in rows:
    by.setdefault(r["size"], []).append(r["picked_by"])
assert len(by) == 4 and all(sorted(v) == ["named", "selector"] for v in by.values()), by
assert all(r["algo"] == "ring" for r in rows if r["picked_by"] == "named"), rows
PY
then
    ok "--algo auto,ring: per size the selector's row and ring's"
else
    tap_diag
    not_ok "--algo auto,ring: per size the selector's row and ring's"
fi

# ---- --price: the model's column by the closed forms, or none ------------------------------
# The closed forms price a contention-free 8 B all-reduce as the walker does; none prints '-'
# and the JSON says how the column was priced.
if sim --hosts 8 -b 8 -e 8 --algo ring,rd --price closed --json "$TMP/closed.json" \
    >"$TMP/out" 2>"$TMP/err"; then
    for a in ring rd; do
        t=$(time_of $a) m=$(model_of $a)
        if [ -n "$m" ] && [ "$m" != - ] && within "$t" "$m" 10; then
            ok "--price closed: 8 B all-reduce $a, simulated $t us, closed form $m us"
        else
            not_ok "--price closed: $a simulated '$t' us against the closed form's '$m' us"
        fi
    done
    if grep -q '"price": "closed"' "$TMP/closed.json"; then
        ok "--price closed: the JSON says so"
    else
        not_ok "--price closed: no \"price\": \"closed\" in the JSON"
    fi
else
    tap_diag
    not_ok "collsim --price closed failed"
fi
if sim --hosts 8 -b 8 -e 8 --algo ring --price none >"$TMP/out" 2>"$TMP/err" &&
    [ "$(model_of ring)" = - ] && [ -n "$(time_of ring)" ]; then
    ok "--price none: the row is simulated, its model column '-'"
else
    tap_diag
    not_ok "--price none: expected a time and '-', got '$(time_of ring)' and '$(model_of ring)'"
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
usage "100,000 ranks" "collbench allreduce --explain --np N" --hosts 100000
usage "more ranks than hosts x per host" "do not fit" --hosts 2 --per-host 2 -n 5
usage "more ranks than the platform file's hosts" "do not fit" --platform "$TMP/good.xml" -n 3
usage "unknown fabric" "fattree" --fabric mesh
usage "unknown algorithm" "ring, tree" --algo bogus
usage "algorithm of another collective" "binomial, linear" -c gather --algo ring
usage "algorithm that cannot run the ranks" "cannot run" --hosts 1 --per-host 4 --algo hier -b 8 -e 8
usage "unknown intra-host model" "ports" --intra-model shm
usage "ports with a platform file" "loopback" --platform "$TMP/good.xml" --intra-model ports
usage "--machine-cores with a platform file" "platform file says" --platform "$TMP/good.xml" \
    --machine-cores 2
usage "--machine-cores 0" "a count of 1 or more" --machine-cores 0
usage "--warmup 101" "a count of calls, 0 to 100" --warmup 101
usage "--warmup -1" "a count of calls, 0 to 100" --warmup -1
usage "ports with SimGrid's TCP-fitted model" "loopback" --model LV08 --intra-model ports
usage "--price of another name" "walk, closed, none" --price exact
usage "--price without its value" "needs a value" --price
for m in 0 999 lots -5; do
    usage "--max-messages $m" "1000 or more" --max-messages "$m"
done

tap_done
