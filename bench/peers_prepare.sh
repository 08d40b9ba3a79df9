# shellcheck shell=bash
# bench/peers_prepare.sh - sourced by bench/peers.sh and bench/peers_rerun.sh, from the
# project's root, after they set their own OUT_DIR, REPS, LIBS and COLLS: finds
# ../shared/peers (PEERS_DIR), sets how run_all.sh runs coll (COLL_CMD, through
# bench/peers_coll.sh: each collective in the placement the peers' drivers use; BUDGET,
# default 0.2 s of timed calls per size), installs the peers and builds coll.
peers=${PEERS_DIR:-$PWD/../shared/peers}
[ -x "$peers/run_all.sh" ] || { echo "${0##*/}: $peers/run_all.sh not found" >&2; exit 2; }
export BUDGET=${BUDGET:-0.2}
export COLL_CMD="$PWD/bench/peers_coll.sh {np} {coll} -c 1 -z 1 -a 3 --time-budget $BUDGET"
"$peers/setup.sh" >/dev/null
[ -x build/collbench ] || meson setup build >/dev/null
meson compile -C build >/dev/null
