#!/usr/bin/env bash
# bench/simval.sh [BUILD] [OUT] - collsim against measurement on bench/netns_hosts.sh's
# emulated hosts, one rank per host: for each rate and host count, calibrate on the bed,
# measure all-reduce, broadcast, reduce and all-gather from 8 B to 64 MiB with the
# algorithm the library picks, simulate the same algorithm, chunk, size and layout from
# that calibration (collsim --machine-cores: the hosts share this machine's cores), and
# write OUT/simval.tsv (one row a point) and OUT/simval.png (bench/simval.py, which also
# prints the tables). OUT/simval/ keeps the calibrations (with collbench's report) and the
# measured runs; the simulated ones go to OUT/simval/sim/ (not kept in git). Needs root
# (network namespaces); BUILD (default build) must hold collrun, collbench and collsim.
#
#   SIMVAL_RATES   tc rates (default "1gbit 10gbit")
#   SIMVAL_HOSTS   host counts (default "2 4")
#   SIMVAL_COLLS   collectives (default "allreduce broadcast reduce allgather")
#   SIMVAL_PARTS   calib measure sim (default all three; sim alone reuses OUT's files)
#   SIMVAL_RESUME  set: keep the measurements OUT already holds (a sweep stopped half way)
#   SIMVAL_CYCLES  repetitions of each sweep, of which the median counts (default 15; a
#                  third of them at 64 MiB)
#   SIMVAL_QDISC   the bed's shaper, bench/netns_hosts.sh's NETNS_QDISC (default: a
#                  NETNS_QDISC already exported, else htb; tbf, a token bucket, met no more
#                  cases: docs/scale.md, "A token bucket for a bed")
#   SIMVAL_PASSES  times the whole set of cases is measured, one after the other (default
#                  2); per point the pass with the smaller median counts
#   NETNS_CC       the hosts' TCP congestion control (bench/netns_hosts.sh; default cubic:
#                  the sweeps before it ran on this machine's bbr, docs/scale.md)
#
# Each measured run holds /tmp/coll-netns.lock and /tmp/coll-bench.lock for one collective
# of one (rate, hosts): about a minute, the largest sizes the longest. The load average at
# each run's start goes into the TSV: the measured side carries it, the simulated one not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-docs/results}
rates=${SIMVAL_RATES:-1gbit 10gbit}
hostss=${SIMVAL_HOSTS:-2 4}
colls=${SIMVAL_COLLS:-allreduce broadcast reduce allgather}
parts=${SIMVAL_PARTS:-calib measure sim}
cycles=${SIMVAL_CYCLES:-15}
passes=${SIMVAL_PASSES:-2}
export NETNS_QDISC=${SIMVAL_QDISC:-${NETNS_QDISC:-htb}}
big=$(((cycles + 2) / 3))
warm=1 # warm-up calls before each timed one: collbench -w, collsim --warmup alike
bed=bench/netns_hosts.sh
sim=$build/tools/collsim/collsim
has() { [[ " $parts " == *" $1 "* ]]; }

for p in "$build/collrun" "$build/collbench" "$sim"; do
    [ -x "$p" ] ||
        { echo "simval.sh: no $p (build first; collsim needs libsimgrid-dev)" >&2; exit 2; }
done
if has calib || has measure; then
    why=$($bed check) ||
        { echo "simval.sh: the netns bed cannot run here: $why (needs root)" >&2; exit 2; }
fi
raw=$out/simval
mkdir -p "$raw/sim"
locked() { flock /tmp/coll-netns.lock flock /tmp/coll-bench.lock "$@"; }
# A run that fails is said so on stderr and tried again (twice), so that one failure does not
# cost the sweep. Runs failed so until fe4c9cb (a stall probe the kernel took only part of
# failed the link, "a stalled frame was cut short"); none is known to fail now, and a
# failure printed here is one to look into.
measure() { # measure JSON COLLBENCH-ARGS...
    local js=$1 try
    shift
    for try in 1 2 3; do
        COLL_CALIB_FILE=$cal locked $bed run "$k" 1 -r "$rate" -c "$build/collrun" \
            -- "$build/collbench" "$@" --json "$js" >/dev/null && return 0
        echo "simval.sh: $rate $k hosts $*: failed (try $try of 3)" >&2
    done
    rm -f "$js"
    echo "simval.sh: $rate $k hosts $*: no measurement (the TSV leaves it out)" >&2
}
load() { cut -d' ' -f1 /proc/loadavg; }

for rate in $rates; do
    cal=$raw/calib-$rate.txt
    if has calib && ! { [ -n "${SIMVAL_RESUME:-}" ] && [ -s "$cal" ]; }; then
        # across 2 of the hosts, one rank each: tcp's alpha, beta, lat, burst; gamma, copy,
        # memory
        echo "simval.sh: $rate: collbench --calibrate (load $(load), tcp ${NETNS_CC:-cubic})" >&2
        rm -f "$cal"
        COLL_CALIB_FILE=$cal locked $bed run 2 1 -r "$rate" -c "$build/collrun" \
            -- "$build/collbench" --calibrate >"$raw/calib-$rate.log"
    fi
    [ -s "$cal" ] || { echo "simval.sh: no $cal (SIMVAL_PARTS=calib first)" >&2; exit 2; }
done
# Every case once, then every case again (SIMVAL_PASSES): a pass that meets a disturbance of
# the machine (minutes in which every call here is 3-5x slower) has its twin minutes later.
for ((pass = 1; pass <= passes; pass++)); do
    sfx=""
    [ "$pass" -eq 1 ] || sfx=".p$pass"
    for rate in $rates; do
        cal=$raw/calib-$rate.txt
        for k in $hostss; do
            for coll in $colls; do
                js=$raw/$rate-$k-$coll
                has measure || continue
                # 8 B .. 16 MiB in steps of 8, then 64 MiB: -N cycles of the sweep, each size
                # warmed up by a call, then one call timed from the last rank's start to the
                # last rank's end (-a 4; the hosts share this machine's clock), as collsim
                # times one whose ranks start at once; the slowest rank's own time, from its
                # exit from the start barrier, is in the records too; the median over cycles
                # counts, so a call that met a burst of the machine's other work (a TCP loss
                # probe after a late ACK: bench/netns_hosts.sh NETNS_STATS) does not
                echo "simval.sh: pass $pass: $rate $k hosts $coll: measuring (load $(load))" >&2
                [ "$pass" -eq 1 ] && echo "$(load)" >"$js.load"
                [ -n "${SIMVAL_RESUME:-}" ] && [ -s "$js$sfx.json" ] ||
                    measure "$js$sfx.json" "$coll" -b 8 -e 16M -f 8 -w "$warm" -n 1 -c 0 \
                        -N "$cycles" -a 4 --outofplace-only
                [ -n "${SIMVAL_RESUME:-}" ] && [ -s "$js-64M$sfx.json" ] ||
                    measure "$js-64M$sfx.json" "$coll" -b 64M -e 64M -w "$warm" -n 1 -c 0 \
                        -N "$big" -a 4 --outofplace-only
            done
        done
    done
done
if has sim; then
    for rate in $rates; do
        cal=$raw/calib-$rate.txt
        for k in $hostss; do
            for coll in $colls; do
                js=$raw/$rate-$k-$coll
                # the measured run's algorithm and chunk per size, simulated one by one
                python3 bench/simval.py picks "$js.json" "$js-64M.json" |
                    while read -r size algo chunk; do
                        "$sim" -q --calib "$cal" --hosts "$k" --per-host 1 --cores 1 \
                            --machine-cores "$(nproc)" --warmup "$warm" -c "$coll" \
                            -b "$size" -e "$size" --algo "$algo" --chunk "$chunk" \
                            --json "$raw/sim/$rate-$k-$coll-$size.json"
                    done
            done
        done
    done
fi
python3 bench/simval.py tsv "$raw" >"$out/simval.tsv"
python3 bench/simval.py table "$out/simval.tsv" --plot "$out/simval.png"
