#!/usr/bin/env bash
# test_linkdown.sh - link down mid-collective: two network namespaces joined by a veth pair,
# one rank in each (started here with COLL_UNIQUE_ID / COLL_RANK / COLL_SIZE, no launcher
# that would kill a survivor before it reports), collectives running over TCP, then one end
# of the veth set down. Nothing resets the connections, so only the deadline can find the
# silent peer: each rank must return an error within COLL_TIMEOUT_MS plus slack, none may
# hang or report a wrong result.
#
#   tests/test_linkdown.sh path/to/rel_rank
#
# Prints TAP; SKIPs when namespaces cannot be made (not root, no iproute2, no capability).
# The namespaces (and with them the veth pair) are removed on exit, also after a failure.
set -u
REL=${1:?usage: test_linkdown.sh REL_RANK}
TIMEOUT_MS=${LINKDOWN_TIMEOUT_MS:-2000}
SLACK_MS=1500

tag=cl$$
A=${tag}a B=${tag}b VA=${tag}va VB=${tag}vb
net=$((($$ % 200) + 20))

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
    skip_all "needs root and iproute2"
fi
ip netns add "$A" 2>/dev/null || skip_all "cannot create network namespaces here"
pids=()
tap_cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
}

if ! { ip netns add "$B" && ip link add "$VA" type veth peer name "$VB" &&
       ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" &&
       ip -n "$A" addr add "10.231.$net.1/24" dev "$VA" &&
       ip -n "$B" addr add "10.231.$net.2/24" dev "$VB" &&
       ip -n "$A" link set "$VA" up && ip -n "$B" link set "$VB" up &&
       ip -n "$A" link set lo up && ip -n "$B" link set lo up; } 2>"$TMP/ip.err"; then
    skip_all "cannot build the veth pair: $(head -n 1 "$TMP/ip.err")"
fi

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The bootstrap root lives in namespace A, in a process of its own, until we end it.
mkfifo "$TMP/idin"
ip netns exec "$A" env COLL_SOCKET_IFNAME="=$VA" "$REL" id <"$TMP/idin" >"$TMP/id" 2>"$TMP/id.err" &
pids+=($!)
exec 7>"$TMP/idin"
for _ in $(seq 100); do [ -s "$TMP/id" ] && break; sleep 0.1; done
id=$(head -n 1 "$TMP/id")

if [ -z "$id" ]; then
    not_ok "the bootstrap root starts in namespace $A" "$(cat "$TMP/id.err")"
    skip "rank 0 returns an error after the link went down" "no root"
    skip "rank 1 returns an error after the link went down" "no root"
    tap_done
    exit
fi

start_rank() { # RANK NS IF
    ip netns exec "$2" env COLL_UNIQUE_ID="$id" COLL_RANK="$1" COLL_SIZE=2 \
        COLL_SOCKET_IFNAME="=$3" COLL_TRANSPORT=tcp COLL_TIMEOUT_MS="$TIMEOUT_MS" \
        COLL_BOOTSTRAP_TIMEOUT_MS=20000 "$REL" run 7 0 65536 >"$TMP/out$1" 2>"$TMP/err$1" &
    pids+=($!)
}
start_rank 0 "$A" "$VA"
rank0=${pids[-1]}
start_rank 1 "$B" "$VB"
rank1=${pids[-1]}
for _ in $(seq 200); do
    grep -q READY "$TMP/out0" 2>/dev/null && grep -q READY "$TMP/out1" 2>/dev/null && break
    sleep 0.1
done
if ! grep -q READY "$TMP/out0" || ! grep -q READY "$TMP/out1"; then
    not_ok "both ranks run collectives across the veth pair" \
        "$(tail -n 5 "$TMP"/out* "$TMP"/err*)"
    skip "rank 0 returns an error after the link went down" "no collective to interrupt"
    skip "rank 1 returns an error after the link went down" "no collective to interrupt"
    tap_done
    exit
fi
ok "both ranks run collectives across the veth pair"
sleep 0.5
down_ms=$(now_ms)
ip -n "$A" link set "$VA" down

# Both must be gone well before this: the deadline, slack, then destroy.
limit=$((down_ms + TIMEOUT_MS + SLACK_MS + 10000))
while kill -0 "$rank0" 2>/dev/null || kill -0 "$rank1" 2>/dev/null; do
    [ "$(now_ms)" -gt "$limit" ] && break
    sleep 0.1
done
for r in 0 1; do
    line=$(grep -m1 '^ERROR' "$TMP/out$r")
    pid=$rank0
    [ "$r" = 1 ] && pid=$rank1
    if kill -0 "$pid" 2>/dev/null; then
        not_ok "rank $r returns after the link went down (still running: a hang)"
    elif grep -q '^WRONG' "$TMP/out$r" || [ -z "$line" ]; then
        not_ok "rank $r reports an error, not a wrong result"
    else
        t_ms=$(($(echo "$line" | awk '{print $3}') / 1000000 - down_ms))
        lim=$((TIMEOUT_MS + SLACK_MS))
        if [ "$t_ms" -le "$lim" ]; then
            ok "rank $r: error $t_ms ms after the link went down (limit $lim ms)"
        else
            not_ok "rank $r: error only $t_ms ms after the link went down (limit $lim ms)"
        fi
    fi
    sed 's/^/# /' "$TMP/out$r" | grep -v '^# READY' | head -n 3
done
tap_done
