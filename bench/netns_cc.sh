#!/usr/bin/env bash
# bench/netns_cc.sh - one collective on bench/netns_hosts.sh's emulated hosts under each TCP
# congestion control, interleaved round by round: a call timed alone after a warm-up and a
# start barrier (collbench -w 1 -n 1 -a 4, as bench/simval.sh times one), every cycle's time
# kept, so that what a congestion control does to single calls shows as a distribution and
# not only as a median.
#
#   ROUNDS=3 CYCLES=60 CCS="cubic bbr" RATE=10gbit HOSTS=2 COLLS="allreduce allgather" \
#       bench/netns_cc.sh [BUILD] [OUT]
#
# BUILD (default build) holds collrun and collbench; OUT (default docs/results) gets
# netns-cc.tsv (round, cc, coll, size, cycle, us), netns-cc.txt (the summary printed here)
# and netns-cc.png (gnuplot: the calls' times at the largest size, sorted, per cc). A cc the
# kernel does not have is left out with a line on stderr. Needs root, as the bed does.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
out=${2:-docs/results}
rounds=${ROUNDS:-3}
cycles=${CYCLES:-60}
rate=${RATE:-10gbit}
hosts=${HOSTS:-2}
colls=${COLLS:-"allreduce allgather"}
maxb=${MAXB:-256K}
bed=bench/netns_hosts.sh
for p in "$build/collrun" "$build/collbench"; do
    [ -x "$p" ] || { echo "netns_cc.sh: no $p (build first)" >&2; exit 2; }
done
why=$($bed check) || { echo "netns_cc.sh: the bed cannot run here: $why" >&2; exit 2; }
have=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
ccs=""
for cc in ${CCS:-cubic bbr}; do
    modprobe -q "tcp_$cc" 2>/dev/null || true
    have=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
    if grep -qw -- "$cc" <<<"$have"; then
        ccs="$ccs $cc"
    else
        echo "netns_cc.sh: no $cc in this kernel ($have): left out" >&2
    fi
done
[ -n "$ccs" ] || { echo "netns_cc.sh: no congestion control to run" >&2; exit 2; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tsv=$out/netns-cc.tsv
printf 'round\tcc\tcoll\tsize\tcycle\tus\n' >"$tsv"
for ((r = 1; r <= rounds; r++)); do
    for cc in $ccs; do
        for coll in $colls; do
            echo "netns_cc.sh: round $r: $cc $coll ($hosts hosts, $rate)" >&2
            NETNS_CC=$cc flock /tmp/coll-netns.lock $bed run "$hosts" 1 -r "$rate" \
                -c "$build/collrun" -- "$build/collbench" "$coll" -b 8 -e "$maxb" -f 8 -w 1 \
                -n 1 -c 0 -N "$cycles" -a 4 --outofplace-only --json "$tmp/r.json" >/dev/null
            python3 - "$tmp/r.json" "$r" "$cc" "$coll" >>"$tsv" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for row in d["results"]:
    c = row["out_of_place"]
    t = c.get("time_span_us") or c["time_us"]
    print("%s\t%s\t%s\t%d\t%d\t%.2f" % (sys.argv[2], sys.argv[3], sys.argv[4],
                                        row["size_bytes"], row["cycle"], t))
EOF
        done
    done
done
python3 - "$tsv" "$out/netns-cc.png" "$rate" "$hosts" <<'EOF' | tee "$out/netns-cc.txt"
import csv, os, shutil, statistics, subprocess, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
ccs = list(dict.fromkeys(r["cc"] for r in rows))
colls = list(dict.fromkeys(r["coll"] for r in rows))
sizes = sorted({int(r["size"]) for r in rows})
print("%s hosts at %s: each call timed alone (collbench -w 1 -n 1 -a 4), %d calls a cell"
      % (sys.argv[4], sys.argv[3], len(rows) // max(1, len(ccs) * len(colls) * len(sizes))))
print("stalled: calls over 3x the cell's median under %s" % ccs[0])
print("| coll | size | " + " | ".join("%s median / p90 / max (us), stalled" % c for c in ccs) + " |")
print("|---|---:|" + "---:|" * len(ccs))
for coll in colls:
    for s in sizes:
        cells, base = [], None
        for cc in ccs:
            v = sorted(float(r["us"]) for r in rows
                       if r["cc"] == cc and r["coll"] == coll and int(r["size"]) == s)
            if not v:
                cells.append("-")
                continue
            med = statistics.median(v)
            base = med if base is None else base
            p90 = v[min(len(v) - 1, int(0.9 * len(v)))]
            cells.append("%.1f / %.1f / %.1f, %d of %d" % (med, p90, v[-1],
                                                           sum(x > 3 * base for x in v), len(v)))
        print("| %s | %d | %s |" % (coll, s, " | ".join(cells)))
if shutil.which("gnuplot"):
    dat = sys.argv[2] + ".dat"
    big = sizes[-1]
    idx = []
    with open(dat, "w") as f:
        for coll in colls:
            for cc in ccs:
                v = sorted(float(r["us"]) for r in rows
                           if r["cc"] == cc and r["coll"] == coll and int(r["size"]) == big)
                if v:
                    for i, x in enumerate(v):
                        f.write("%g %g\n" % ((i + 0.5) / len(v), x))
                    f.write("\n\n")
                    idx.append("%s %s" % (coll, cc))
    script = ["set terminal pngcairo size 900,600 font ',10'", "set output '%s'" % sys.argv[2],
              "set logscale y", "set grid", "set key top left",
              "set xlabel 'share of calls'", "set ylabel 'time (us)'",
              "set title '%d B calls, %s hosts at %s, per congestion control'"
              % (big, sys.argv[4], sys.argv[3]),
              "plot " + ", ".join("'%s' index %d using 1:2 with lines lw 2 title '%s'"
                                  % (dat, i, t) for i, t in enumerate(idx))]
    try:
        subprocess.run(["gnuplot"], input="\n".join(script).encode(), check=True)
    finally:
        os.unlink(dat)
EOF
