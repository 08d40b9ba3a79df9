#!/usr/bin/env bash
# bench/scale.sh [BUILD] [OUT] - docs/scale.md's numbers: coll's schedules on SimGrid
# (tools/collsim) from 2 to 4,096 ranks, and collsim against collbench on this machine.
# BUILD (default build-sim) must hold collsim, collbench and collrun; OUT (default
# docs/results) gets scale-*.json, and bench/scale.py turns them into tables and plots.
#
# Parts (SCALE_PARTS, default all of them, in this order):
#   logn       8 B all-reduce and broadcast, tree against ring/chain (and the others),
#              n = 2 .. SCALE_MAXN (4096) ranks, one per host, 100 Gbit/s fat tree
#   crossover  all-reduce ring and tree, 8 B .. 16 MiB, n = 16 .. 1024: where ring wins
#   selector   every all-reduce algorithm and the selector's pick, n = 64, 256, 1024, 4096 (8
#              ranks per host), 8 B .. 256 MiB (sizes x16 up to 256 ranks, x64 above), each n
#              under a message budget (--max-messages: coarser pieces for large sizes, the
#              same floor for every algorithm of a size; beyond it not simulated), each run
#              stopped after SCALE_SEL_TIMEOUT seconds (default none; rows done are kept)
#   large      4,096 ranks (8 per host) at 128 and 256 MiB, the sizes the selector part
#              cannot reach: the ring and the selector's pick uncoarsened where their
#              messages fit in memory (a ring's 33.5 million: 3.5 GB and tens of minutes of
#              CPU each; 256 MiB's pick in the ring's own 64 KiB blocks), every other
#              algorithm in 1 MiB (128 MiB) and 2 MiB (256 MiB) pieces within a million
#              messages; and 1,024 ranks' other algorithms at 128 MiB; the model's column
#              by the closed forms (--price closed: the walker would double the memory)
#   chunks     ring all-reduce in 32 KiB and 128 KiB chunks, 64 ranks, 8 and 128 MiB, with the
#              memory ports and streams and with --intra-model loopback (before them)
#   hier       1,024 ranks (128 hosts x 8), hier against ring and tree, 8 B .. 16 MiB, on a
#              full and on a 4:1 oversubscribed fat tree
#   extrap     bench/extrapolate.sh's clusters (256 MiB, hosts of 8, 100/200/400 Gbit/s), 64
#              and 256 ranks (SCALE_EXTRAP_RANKS="64 256 1024" for its 1,024: minutes each)
#   validate   collbench --calibrate, then ring and tree all-reduce measured (shared memory,
#              2 and 4 ranks, COLL_SHM_FLAT=0 so that the schedules run) and simulated from
#              the calibration file
#   validate-sim, netns-sim   only the simulated side of validate and netns, from the
#              calibration files and measurements already in OUT (no measuring)
#   netns      bench/netns_hosts.sh's hosts at 1 Gbit/s (root): ring, tree and hier
#              all-reduce on 2 hosts x 4 ranks and 4 x 2, measured and simulated (after
#              validate, whose shm calibration it reuses)
# Simulated times do not depend on the load of the machine; the measured ones (validate) do.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build-sim}
out=${2:-docs/results}
parts=${SCALE_PARTS:-logn crossover selector large chunks hier extrap validate netns}
maxn=${SCALE_MAXN:-4096}
sim="$build/tools/collsim/collsim"
net=(--link 100Gbps --latency 1us --intra 20GBps --intra-latency 1us)
mkdir -p "$out"
[ -x "$sim" ] || { echo "scale.sh: no $sim (install libsimgrid-dev, reconfigure)" >&2; exit 2; }

has() { [[ " $parts " == *" $1 "* ]]; }

if has logn; then
    for n in 2 4 8 16 32 64 128 256 512 1024 2048 4096; do
        [ "$n" -le "$maxn" ] || break
        echo "scale.sh: logn n=$n" >&2
        "$sim" -q "${net[@]}" --hosts "$n" --fabric fattree -c allreduce -b 8 -e 8 \
            --algo ring,tree,dbtree,rd,binomial --json "$out/scale-logn-allreduce-$n.json"
        "$sim" -q "${net[@]}" --hosts "$n" --fabric fattree -c allreduce -b 8 -e 8 \
            --algo auto --json "$out/scale-logn-allreduce-auto-$n.json"
        "$sim" -q "${net[@]}" --hosts "$n" --fabric fattree -c broadcast -b 8 -e 8 \
            --algo chain,binomial,tree,dbtree --json "$out/scale-logn-broadcast-$n.json"
    done
fi

if has crossover; then
    for n in 16 64 256 1024; do
        [ "$n" -le "$maxn" ] || break
        echo "scale.sh: crossover n=$n" >&2
        "$sim" -q "${net[@]}" --hosts "$n" --fabric fattree -c allreduce -b 8 -e 16M -f 4 \
            --algo ring,tree --json "$out/scale-crossover-$n.json"
    done
fi

if has selector; then
    # n:size factor:message budget. A ring all-reduce sends 2n(n-1) messages whatever its
    # pieces: 1,024 ranks' budget holds it (2.1 million), 4,096 ranks' (33.5 million, some
    # ten minutes of CPU a size) does not, so there the ring is not simulated from the size
    # at which it uses every rank on
    sel_to=${SCALE_SEL_TIMEOUT:-0}
    for spec in ${SCALE_SEL:-64:16:64K 256:16:140K 1024:64:2200K 4096:64:1M}; do
        IFS=: read -r n f m <<<"$spec"
        [ "$n" -le "$maxn" ] || break
        for algo in auto all; do
            echo "scale.sh: selector n=$n $algo" >&2
            timeout "$sel_to" "$sim" -q "${net[@]}" --hosts $((n / 8)) --per-host 8 \
                --fabric fattree -c allreduce -b 8 -e 256M -f "$f" --max-messages "$m" \
                --algo $algo --json "$out/scale-selector-$algo-$n.json" ||
                echo "scale.sh: selector n=$n $algo stopped (rows so far kept)" >&2
        done
    done
fi

if has large; then
    # name:n:size:algo:chunk:budget; run one at a time (each is one core and gigabytes),
    # those that judge the pick first, so that a run stopped by hand keeps them
    for spec in ${SCALE_LARGE:-ring-128M:4096:128M:ring:32K:0 pick-128M:4096:128M:auto:0:0 \
        others-128M:4096:128M:dbtree,binomial,rabenseifner,rd,hier:1M:1M \
        others-256M:4096:256M:dbtree,binomial,rabenseifner,hier:2M:1M \
        pick-256M:4096:256M:auto:0:34M \
        others-128M:1024:128M:dbtree,binomial,rabenseifner,rd,hier:1M:1M}; do
        IFS=: read -r name n size algo chunk m <<<"$spec"
        echo "scale.sh: large $name, $n ranks" >&2
        args=(--algo "$algo")
        [ "$chunk" = 0 ] || args+=(--chunk "$chunk")
        [ "$m" = 0 ] || args+=(--max-messages "$m")
        /usr/bin/time -f "scale.sh: large $name $n: %U s CPU, %e s wall, %M KB" \
            "$sim" "${net[@]}" --hosts $((n / 8)) --per-host 8 --fabric fattree -c allreduce \
            -b "$size" -e "$size" --price closed "${args[@]}" \
            --json "$out/scale-large-$name-$n.json" ||
            echo "scale.sh: large $name $n failed" >&2
    done
fi

if has chunks; then
    # ring all-reduce in the selector's 32 KiB chunks and in 128 KiB, 64 ranks (8 per host):
    # the memory ports and streams (the default) against SimGrid's loopback within a host
    # and its side-by-side sharing between hosts (--intra-model loopback)
    for im in ports loopback; do
        for c in 32K 128K; do
            echo "scale.sh: chunks $im $c" >&2
            "$sim" -q "${net[@]}" --hosts 8 --per-host 8 --fabric fattree -c allreduce -b 8M \
                -e 128M -f 16 --algo ring --chunk $c --intra-model $im \
                --json "$out/scale-chunks-$im-$c.json"
        done
    done
fi

if has hier; then
    for f in fattree fattree:4; do
        echo "scale.sh: hier $f" >&2
        "$sim" -q "${net[@]}" --hosts 128 --per-host 8 --fabric "$f" -c allreduce -b 8 -e 16M \
            -f 64 --algo ring,tree,hier --json "$out/scale-hier-${f/:/-}.json"
    done
fi

if has extrap; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for gbit in 100 200 400; do
        # the calibration bench/extrapolate.sh states for the cost model
        python3 - "$gbit" >"$tmp/cal-$gbit.txt" <<'EOF'
import sys
rate = float(sys.argv[1]) * 1e9 / 8
print("tcp.alpha 5e-06")
print("tcp.beta %r" % (1 / rate))
print("shm.alpha 1e-06")
print("shm.beta %r" % (1 / 20e9))
EOF
        for n in ${SCALE_EXTRAP_RANKS:-64 256}; do
            [ "$n" -le "$maxn" ] || break
            echo "scale.sh: extrap ${gbit}G n=$n" >&2
            "$sim" -q --calib "$tmp/cal-$gbit.txt" --hosts $((n / 8)) --per-host 8 \
                -c allreduce -b 256M -e 256M --chunk 1M --algo auto \
                --json "$out/scale-extrap-$gbit-$n.json"
        done
    done
fi

# the simulated side of validate and netns, with the ranks' memory ports (the default) and
# with SimGrid's loopback (the intra-host model before them), from OUT's calibrations
if has validate-sim; then
    for np in 2 4; do
        for algo in ring tree; do
            for im in ports loopback; do
                sfx=; [ $im = ports ] || sfx=-$im
                "$sim" -q --calib "$out/scale-calib.txt" --hosts 1 --per-host "$np" --cores 2 \
                    --intra-model $im -c allreduce -b 8 -e 16M -f 4 --algo "$algo" \
                    --json "$out/scale-simulated$sfx-$np-$algo.json"
            done
        done
    done
fi
if has netns-sim; then
    for shape in 2x4 4x2; do
        k=${shape%x*} p=${shape#*x}
        for algo in ring tree hier; do
            for im in ports loopback; do
                sfx=; [ $im = ports ] || sfx=-$im
                "$sim" -q --calib "$out/scale-calib-netns.txt" --hosts "$k" --per-host "$p" \
                    --cores 1 --intra-model $im -c allreduce -b 8 -e 16M -f 8 --algo "$algo" \
                    --json "$out/scale-netns-simulated$sfx-$shape-$algo.json"
            done
        done
    done
fi

if has validate; then
    cal=$out/scale-calib.txt
    echo "scale.sh: validate: collbench --calibrate" >&2
    COLL_CALIB_FILE=$cal "$build/collrun" -n 2 "$build/collbench" --calibrate >/dev/null
    for np in 2 4; do
        for algo in ring tree; do
            echo "scale.sh: validate np=$np $algo" >&2
            COLL_SHM_FLAT=0 COLL_ALGO=$algo COLL_CALIB_FILE=$cal "$build/collrun" -n "$np" \
                "$build/collbench" allreduce -b 8 -e 16M -f 4 -w 5 -n 20 \
                --json "$out/scale-measured-$np-$algo.json" >/dev/null
            "$sim" -q --calib "$cal" --hosts 1 --per-host "$np" --cores "$(nproc)" \
                -c allreduce -b 8 -e 16M -f 4 --algo "$algo" \
                --json "$out/scale-simulated-$np-$algo.json"
        done
    done
fi
if has netns; then
    # bench/netns_hosts.sh's hosts at 1 Gbit/s: tcp calibrated across two of them (one rank
    # each), shm from the loopback calibration (validate's), then ring, tree and hier
    # measured on 2 hosts x 4 ranks and 4 x 2 and simulated from the merged file
    bed=bench/netns_hosts.sh
    cal=$out/scale-calib-netns.txt
    echo "scale.sh: netns: collbench --calibrate across 2 hosts" >&2
    COLL_CALIB_FILE=$out/scale-calib-netns-tcp.txt $bed run 2 1 -r 1gbit -c "$build/collrun" \
        -- "$build/collbench" --calibrate >/dev/null
    { grep -v '^shm\.' "$out/scale-calib-netns-tcp.txt"; grep '^shm\.' "$out/scale-calib.txt"; } >"$cal"
    for shape in 2x4 4x2; do
        k=${shape%x*} p=${shape#*x}
        for algo in ring tree hier; do
            echo "scale.sh: netns $shape $algo" >&2
            COLL_ALGO=$algo COLL_CALIB_FILE=$cal $bed run "$k" "$p" -r 1gbit -c "$build/collrun" \
                -- "$build/collbench" allreduce -b 8 -e 16M -f 8 -w 2 -n 5 \
                --json "$out/scale-netns-measured-$shape-$algo.json" >/dev/null
            "$sim" -q --calib "$cal" --hosts "$k" --per-host "$p" --cores 1 -c allreduce \
                -b 8 -e 16M -f 8 --algo "$algo" --json "$out/scale-netns-simulated-$shape-$algo.json"
        done
    done
fi
echo "scale.sh: done; python3 bench/scale.py $out" >&2
