#!/usr/bin/env bash
# bench/slow_state.sh - is a slow collective run coll's doing or the machine's? Alternates,
# N times, a short timed run of a 2-rank all-reduce with a sample of twocore_probe (two
# pinned threads handing a cache line and a 1 MiB buffer to each other, no coll code), so
# that every run has a probe taken within about a second of it; then tells, per library,
# how its runs fared when the probe found the two CPUs slow to reach each other and when not.
#
#   bench/slow_state.sh [--build DIR] [-n N] [--size BYTES] [--libs "coll ompi"] [--out TSV]
#
#   --build DIR   coll's build (default build; set up with meson if missing)
#   -n N          runs per library (default 100); each about 0.5 s plus start-up
#   --size BYTES  all-reduce size (default 8M), float sum, out of place
#   --libs LIST   coll: collbench through collrun, blocking (-z 1, the shared-memory fast
#                 path), ranks bound to CPUs 0 and 1; ompi: Open MPI's shared-memory path
#                 (../shared/peers' mpi_coll, built by its build.sh; skipped if missing)
#   --out TSV     where the samples go (default docs/results/slow-state.tsv)
#
# A probe is "slow" when its round trip is over SLOW_RTT_NS (default 300 ns; the machine's
# usual is printed). A run is "low" below 60% of its library's median busbw. Prints per
# library: runs, runs next to a slow probe, median busbw in each case, and how many low runs
# were next to a slow probe. Needs nothing but bash, awk and python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=build
n=100
size=8M
libs="coll ompi"
out=docs/results/slow-state.tsv
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    --build | -n | --size | --libs | --out) [ $# -ge 2 ] || { echo "slow_state.sh: $1 needs a value" >&2; exit 2; } ;;
    *) echo "slow_state.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    case $1 in
    --build) build=$2 ;; -n) n=$2 ;; --size) size=$2 ;; --libs) libs=$2 ;; --out) out=$2 ;;
    esac
    shift 2
done
case $n in '' | *[!0-9]*) echo "slow_state.sh: -n wants a count" >&2; exit 2 ;; esac
[ -d "$build" ] || meson setup "$build" >/dev/null
ninja -C "$build" collbench collrun twocore_probe >/dev/null
peers=${PEERS_DIR:-$PWD/../shared/peers}
mpi=${TMPDIR:-/tmp}/peers-build/mpi_coll.openmpi
if [[ " $libs " == *" ompi "* ]] && [ ! -x "$mpi" ] && [ -x "$peers/build.sh" ]; then
    BUILD_DIR=$(dirname "$mpi") "$peers/build.sh" >/dev/null 2>&1 || true
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

busbw_coll() {
    "$build/collrun" -n 2 --bind-to core "$build/collbench" allreduce -b "$size" -e "$size" \
        -z 1 -a 3 -c 0 --outofplace-only --time-budget 0.3 2>/dev/null |
        awk '$1 ~ /^[0-9]+$/ {print $8}'
}
busbw_ompi() {
    mpirun.openmpi -np 2 --bind-to core --mca oob_tcp_if_include lo "$mpi" -c allreduce \
        -b "$size" -e "$size" -T 0.3 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $8}'
}

mkdir -p "$(dirname "$out")"
printf 'time\tlib\tbusbw_GBps\trtt_ns\thandoff_GBps\n' >"$out"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$n"); do
    for lib in $libs; do
        if [ "$lib" = ompi ] && [ ! -x "$mpi" ]; then continue; fi
        bw=$("busbw_$lib" || true)
        probe=$("$build/twocore_probe")
        printf '%s\t%s\t%s\t%s\t%s\n' "$(cut -f1 <<<"$probe")" "$lib" "${bw:-nan}" \
            "$(cut -f2 <<<"$probe")" "$(cut -f3 <<<"$probe")" >>"$out"
    done
    [ $((i % 20)) -ne 0 ] || echo "  $i of $n"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "${SLOW_RTT_NS:-300}" <<'EOF'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
slow_rtt = float(sys.argv[2])
rtts = [float(r[3]) for r in rows]
print("probe round trip: median %.0f ns; slow (> %.0f ns) in %d of %d samples, median %.0f ns"
      % (st.median(rtts), slow_rtt, sum(x > slow_rtt for x in rtts), len(rtts),
         st.median([x for x in rtts if x > slow_rtt] or [float("nan")])))
for lib in dict.fromkeys(r[1] for r in rows):
    rs = [(float(r[2]), float(r[3]) > slow_rtt) for r in rows if r[1] == lib and r[2] != "nan"]
    if not rs:
        continue
    med = st.median(b for b, _ in rs)
    slow = [b for b, s in rs if s]
    fast = [b for b, s in rs if not s]
    low = [(b, s) for b, s in rs if b < 0.6 * med]
    print("%s: %d runs, median %.2f GB/s; next to a slow probe %d runs, median %s; "
          "otherwise median %s; low runs (< %.2f) %d, of them next to a slow probe %d"
          % (lib, len(rs), med, len(slow), "%.2f" % st.median(slow) if slow else "-",
             "%.2f" % st.median(fast) if fast else "-", 0.6 * med, len(low),
             sum(s for _, s in low)))
EOF
