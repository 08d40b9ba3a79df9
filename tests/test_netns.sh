#!/usr/bin/env bash
# test_netns.sh - the multi-host test bed (bench/netns_hosts.sh): 2 hosts x 4 ranks and
# 4 hosts x 2 ranks, each host a network + UTS namespace behind a 1 Gbit/s htb-limited
# veth, its TCP on cubic whatever this machine's default. Every collective runs with its results checked (collbench -c 1), and collbench
# --topo must see the hosts as distinct, with each host's ranks together.
#
#   tests/test_netns.sh path/to/collrun path/to/collbench
#
# Prints TAP; SKIPs when namespaces cannot be made here (not root, no iproute2, a
# container without the capability). The hosts are removed on exit, also after a failure.
set -u

COLLRUN=$(readlink -f "${1:?usage: test_netns.sh COLLRUN COLLBENCH}")
COLLBENCH=$(readlink -f "${2:?usage: test_netns.sh COLLRUN COLLBENCH}")
BED=$(dirname "$(readlink -f "$0")")/../bench/netns_hosts.sh

. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
tap_diag() { tap_show "tail -n 25" "$TMP/out"; }

why=$("$BED" check 2>&1) || skip_all "network namespaces unavailable: $why"

export NETNS_STATE="$TMP/state"
tap_cleanup() { "$BED" down; }

export COLL_TIMEOUT_MS=30000 COLL_BOOTSTRAP_TIMEOUT_MS=20000
allowed0=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
COLLS="allreduce broadcast reduce allgather reducescatter alltoall gather scatter sendrecv barrier"

for cfg in "2 4" "4 2"; do
    read -r k per <<<"$cfg"
    np=$((k * per))
    if ! "$BED" up "$k" -r 1gbit >"$TMP/out" 2>&1; then
        not_ok "$k hosts: the test bed comes up"
        continue
    fi
    id=$(cat "$NETNS_STATE")
    # every host runs the bed's congestion control (cubic), not this machine's default
    cc=$(ip netns exec "cn${id}h$((k - 1))" sysctl -n net.ipv4.tcp_congestion_control 2>&1)
    if [ "$cc" = cubic ]; then
        ok "$k hosts: the hosts' TCP congestion control is cubic"
    else
        echo "host$((k - 1)): $cc" >"$TMP/out"
        not_ok "$k hosts: the hosts' TCP congestion control is cubic"
    fi
    on_hosts() { # collrun over the hosts, the root on the bridge
        COLL_SOCKET_IFNAME="=cn${id}br" timeout -k 5 60 "$COLLRUN" -n "$np" "$BED" _enter "$id" \
            "$per" "$@" >"$TMP/out" 2>&1
    }
    # the hosts coll sees: k of them, host h holding ranks h*per .. h*per+per-1
    want="$np ranks on $k hosts"
    if on_hosts "$COLLBENCH" --topo && grep -q "^$want\$" "$TMP/out" &&
        [ "$(grep -c '^  host [0-9]* host[0-9] *ranks' "$TMP/out")" -eq "$k" ] &&
        grep -q "^  host 1 host1 *ranks $(seq -s ' ' "$per" $((2 * per - 1)))\$" "$TMP/out"; then
        ok "$k hosts x $per ranks: collbench --topo sees $want"
    else
        not_ok "$k hosts x $per ranks: collbench --topo sees $want"
    fi
    # ranks of other hosts on this machine count against its cores: once they outnumber
    # them (and the host's own do not), a wait polls yielding, which rank 0 says at INFO
    if on_hosts env COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=INIT "$COLLBENCH" allreduce -b 8 -e 8 -n 1
    then
        yields=$(grep -c "$np ranks of this comm share this machine's $(nproc) CPUs" "$TMP/out")
        want=0
        [ "$np" -gt "$(nproc)" ] && [ "$per" -le "$(nproc)" ] && want=1
        if [ "$yields" -eq "$want" ]; then
            ok "$k hosts x $per ranks on $(nproc) CPUs: rank 0's line on the machine's yield $yields time(s)"
        else
            not_ok "$k hosts x $per ranks on $(nproc) CPUs: the machine's yield line $yields times, want $want"
        fi
    else
        not_ok "$k hosts x $per ranks: an 8 B all-reduce with COLL_DEBUG=INFO"
    fi
    bad=""
    for c in $COLLS; do
        if ! on_hosts "$COLLBENCH" "$c" -b 8 -e 256K -f 32 -n 1 -w 1 -c 1 ||
            ! grep -q "Out of bounds values : 0 OK" "$TMP/out"; then
            bad="$bad $c"
            cp "$TMP/out" "$TMP/out.$c"
        fi
    done
    if [ -z "$bad" ]; then
        ok "$k hosts x $per ranks: every collective checked (-c 1)"
    else
        for c in $bad; do cp "$TMP/out.$c" "$TMP/out"; done
        not_ok "$k hosts x $per ranks: wrong or failed:$bad"
    fi
    "$BED" down
    if [ "$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)" = "$allowed0" ]; then
        ok "$k hosts: the machine's allowed congestion controls are as before"
    else
        cat /proc/sys/net/ipv4/tcp_allowed_congestion_control >"$TMP/out"
        not_ok "$k hosts: the machine's allowed congestion controls are as before ($allowed0)"
    fi
done

# collbench --calibrate across 2 hosts of one kernel: call and tcp.xchg from 8-byte calls
# timed as collbench times one, and what it measured replaces the file's old call, none (0)
# included (the printout has 3 digits: 1% apart at most)
printf 'call 0.5\n' >"$TMP/calib.txt"
if COLL_CALIB_FILE="$TMP/calib.txt" timeout -k 5 120 "$BED" run 2 1 -r 1gbit -c "$COLLRUN" -- \
    "$COLLBENCH" --calibrate >"$TMP/out" 2>&1; then
    said=$(sed -nE 's/^# 8-byte calls timed as collbench times one .*: call ([0-9.e+-]+) s, tcp\.xchg [0-9.e+-]+ s$/\1/p' "$TMP/out")
    filed=$(sed -nE 's/^call ([0-9.e+-]+)$/\1/p' "$TMP/calib.txt")
else
    said="" filed=""
fi
if [ -n "$said" ] && [ -n "$filed" ] && awk -v a="$said" -v b="$filed" 'BEGIN {
        exit !(b < 0.4 && (a == 0 ? b == 0 : (b / a > 0.99 && b / a < 1.01))) }'; then
    ok "2 hosts: --calibrate times 8-byte calls as collbench does; its call ($said s) replaces the file's"
else
    not_ok "2 hosts: --calibrate times 8-byte calls as collbench does (said '$said', filed '$filed')"
fi

tap_done
