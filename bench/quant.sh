#!/usr/bin/env bash
# bench/quant.sh - the quantized all-reduce measured: wire bytes versus fp32 per codec,
# all-reduce time at 4-64 MiB for NP 4 and 8 on loopback and on an emulated 1 Gbit/s link,
# and the relative error of each codec. Writes docs/results/quant/ (raw lines, TSV, PNG).
#
#   bench/quant.sh [BUILD_DIR]          (default: build; needs root for the namespaces)
#
# The slow link: two network namespaces joined by a veth pair, each end's egress shaped to
# QUANT_RATE (default 1gbit) by an htb qdisc, the way two hosts on a 1 Gbit/s network see
# each other. Ranks 0 .. NP/2-1 run in the first namespace, the rest in the second, so
# ranks on one "host" talk over that namespace's loopback and the halves over the shaped
# link (the quantized all-reduce sees two nodes there and takes its HIER exchange). collrun
# starts all ranks in its own namespace, so here the ranks are started one by one with
# COLL_UNIQUE_ID/COLL_RANK/COLL_SIZE, the id coming from `quant_bench id` in the first
# namespace; one job per size and codec, so that the link's tc byte counters give the bytes
# that crossed it per call. The namespaces are removed on exit, whatever happens.
#
# Environment: QUANT_SIZES (4M,16M,64M), QUANT_CODECS (fp32,fp16,int8,e4m3,int4,e3m0,sign1),
# QUANT_ITERS (3), QUANT_NPS (4 8), QUANT_RATE (1gbit), QUANT_SKIP_LOOPBACK=1,
# QUANT_SKIP_LINK=1. The machine is shared: numbers vary from run to run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
bench=$build/quant_bench
collrun=$build/collrun
out=$root/docs/results/quant
sizes=${QUANT_SIZES:-4M,16M,64M}
codecs=${QUANT_CODECS:-fp32,fp16,int8,e4m3,int4,e3m0,sign1}
iters=${QUANT_ITERS:-3}
nps=${QUANT_NPS:-4 8}
rate=${QUANT_RATE:-1gbit}
ns_a=collq_a$$
ns_b=collq_b$$

[ -x "$bench" ] && [ -x "$collrun" ] || {
    echo "quant.sh: build first: meson setup $build && ninja -C $build" >&2
    exit 2
}
need=()
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
command -v tc >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
    apt-get install -y "${need[@]}" >/dev/null
fi
mkdir -p "$out"

idpid=
cleanup() {
    [ -n "$idpid" ] && kill "$idpid" 2>/dev/null || true
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

run_loopback() {
    local np=$1
    COLL_TIMEOUT_MS=300000 "$collrun" -n "$np" --timeout 1200 \
        "$bench" run -s "$sizes" -c "$codecs" -i "$iters"
}

setup_link() {
    ip netns add "$ns_a"
    ip netns add "$ns_b"
    ip link add qa$$ netns "$ns_a" type veth peer name qb$$ netns "$ns_b"
    ip -n "$ns_a" addr add 10.231.0.1/24 dev qa$$
    ip -n "$ns_b" addr add 10.231.0.2/24 dev qb$$
    for ns in "$ns_a" "$ns_b"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$ns_a" link set qa$$ up
    ip -n "$ns_b" link set qb$$ up
    # One htb class per direction holds the whole link to the rate (no borrowing above it).
    for pair in "$ns_a qa$$" "$ns_b qb$$"; do
        set -- $pair
        tc -n "$1" qdisc add dev "$2" root handle 1: htb default 10
        tc -n "$1" class add dev "$2" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" \
            quantum 60000
    done
    # coll only binds interfaces that are running (carrier up): wait for both ends.
    for pair in "$ns_a qa$$" "$ns_b qb$$"; do
        set -- $pair
        for _ in $(seq 100); do
            [ "$(ip netns exec "$1" cat /sys/class/net/"$2"/operstate)" = up ] && break
            sleep 0.1
        done
    done
}

# Bytes the shaped link has carried so far, both directions (IP packets: TCP/IP headers
# included, about 3% at this MTU).
link_sent() {
    local a b
    a=$(tc -s -n "$ns_a" qdisc show dev qa$$ | awk '/Sent/ { print $2; exit }')
    b=$(tc -s -n "$ns_b" qdisc show dev qb$$ | awk '/Sent/ { print $2; exit }')
    echo $((a + b))
}

# One job (one size, one codec) with its ranks split over the two namespaces; rank 0
# prints the time, then this prints what crossed the link per call (the warm-up call and
# the timed ones; bootstrap and barriers are a few KiB). TCP only: the namespaces share one
# host, whose shared-memory channels do not cross network namespaces.
run_link() {
    local np=$1 size=$2 codec=$3 half=$(( $1 / 2 )) idfile pids=() r ns ifn rc=0 s0 s1
    idfile=$(mktemp)
    COLL_SOCKET_IFNAME==qa$$ ip netns exec "$ns_a" "$bench" id >"$idfile" &
    idpid=$!
    for _ in $(seq 100); do [ -s "$idfile" ] && break; sleep 0.1; done
    s0=$(link_sent)
    for ((r = 0; r < np; r++)); do
        if ((r < half)); then ns=$ns_a ifn=qa$$; else ns=$ns_b ifn=qb$$; fi
        ip netns exec "$ns" env COLL_UNIQUE_ID="$(cat "$idfile")" COLL_RANK=$r COLL_SIZE=$np \
            COLL_LOCAL_RANK=$((r % half)) COLL_LOCAL_SIZE=$half COLL_SOCKET_IFNAME==$ifn \
            COLL_TIMEOUT_MS=300000 COLL_TRANSPORT=tcp \
            "$bench" run -s "$size" -c "$codec" -i "$iters" -e 0 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    s1=$(link_sent)
    kill "$idpid" 2>/dev/null || true
    wait "$idpid" 2>/dev/null || true
    idpid=
    rm -f "$idfile"
    echo "linkbytes np=$np size=$size codec=$codec per_call=$(( (s1 - s0) / (iters + 1) ))"
    return $rc
}

# One raw file per part, so that a part run alone keeps the other's results.
if [ "${QUANT_SKIP_LOOPBACK:-0}" != 1 ]; then
    raw=$out/raw-loopback.txt
    : >"$raw"
    for np in $nps; do
        echo "== loopback np=$np" | tee -a "$raw"
        run_loopback "$np" | sed 's/^/loopback /' | tee -a "$raw"
    done
fi
if [ "${QUANT_SKIP_LINK:-0}" != 1 ]; then
    raw=$out/raw-link.txt
    : >"$raw"
    setup_link
    for np in $nps; do
        echo "== link $rate np=$np" | tee -a "$raw"
        for size in ${sizes//,/ }; do
            for c in ${codecs//,/ }; do
                run_link "$np" "$size" "$c" | sed 's/^/link /' | tee -a "$raw"
            done
        done
    done
fi

# Tables: time.tsv (net np bytes codec med_ms speedup_vs_fp32 wire_ratio), error.tsv.
awk '
function kv(s,   a) { split(s, a, "="); return a[2] }
$2 == "time" {
    net = $1; np = kv($3); b = kv($4); c = kv($5); med = kv($7); w = kv($8); wf = kv($9)
    if (c == "fp32") base[net, np, b] = med
    sp = (net SUBSEP np SUBSEP b) in base ? base[net, np, b] / med : 0
    printf "%s\t%s\t%d\t%s\t%s\t%.2f\t%.2f\n", net, np, b / 1048576, c, med, sp, wf / w > "'"$out"'/time.tsv"
}
$2 == "linkbytes" { printf "%s\t%s\t%s\t%s\n", kv($3), kv($4), kv($5), kv($6) > "'"$out"'/link.tsv" }
$2 == "error" { printf "%s\t%s\t%s\t%s\n", kv($3), kv($4), kv($5), kv($6) > "'"$out"'/error.tsv" }
' $(ls "$out"/raw-*.txt)

# Plots: wire bytes saved per codec; time against size per (net, np).
if [ -s "$out/time.tsv" ]; then
    awk -F'\t' '$1 == "loopback" && $3 == 64 && !seen[$4]++ { print $4 "\t" $7 }' "$out/time.tsv" >"$out/wire.tsv"
    gnuplot <<EOF
set terminal pngcairo size 720,420 noenhanced
set output '$out/quant-wire.png'
set title 'bytes sent per rank, fp32 all-reduce / quantized (64 MiB)'
set style data histograms
set style fill solid 0.7
set yrange [0:*]
set ylabel 'times fewer bytes than fp32'
set grid ytics
plot '$out/wire.tsv' using 2:xtic(1) notitle, '' using 0:2:(sprintf('%.2f', \$2)) with labels offset 0,0.7 notitle
EOF
    for net in loopback link; do
        for np in $nps; do
            grep -q "^$net	$np	" "$out/time.tsv" || continue
            plot=""
            for c in ${codecs//,/ }; do
                f=$out/.t-$net-$np-$c.tsv
                awk -F'\t' -v n="$net" -v p="$np" -v c="$c" \
                    '$1 == n && $2 == p && $4 == c { print $3 "\t" $5 }' "$out/time.tsv" >"$f"
                plot+="'$f' using 1:2 with linespoints title '$c', "
            done
            gnuplot <<EOF
set terminal pngcairo size 720,420 noenhanced
set output '$out/quant-time-$net-np$np.png'
set title 'all-reduce time, $net, np=$np (median of $iters)'
set logscale xy 2
set xlabel 'MiB per rank'
set ylabel 'ms'
set key left top
set grid
plot ${plot%, }
EOF
            rm -f "$out"/.t-$net-$np-*.tsv
        done
    done
fi
echo "quant.sh: results in $out"
