#!/usr/bin/env bash
# netns_hosts.sh - K emulated hosts on one machine: a network namespace and a UTS namespace
# (its own hostname) per host, each joined to one bridge by a veth pair whose two ends are
# rate-limited by tc htb. Needs root (ip, tc, unshare, nsenter from iproute2/util-linux).
#
#   bench/netns_hosts.sh run K PER_HOST [-r RATE] [-c COLLRUN] -- PROG ARGS...
#       create K hosts, start K*PER_HOST ranks with collrun (ranks 0..P-1 on host 0, ...),
#       each inside its host, remove the hosts afterwards (also on failure or Ctrl-C);
#       exits with collrun's status
#   bench/netns_hosts.sh up K [-r RATE]    create and leave them (prints their names)
#   bench/netns_hosts.sh down              remove what `up` left (state in $NETNS_STATE)
#   bench/netns_hosts.sh check             exit 0 when namespaces can be made here
#
# RATE is tc's ("1gbit", "10gbit"; default 1gbit): the link of every host, both ways.
# NETNS_QDISC picks the shaper:
#   htb (default)  htb charges a packet after it lets it go, and the veths hand it packets of
#                  up to 64 KB (GSO): a message of tens of KiB that finds its link idle
#                  crosses at the speed of memory, and how much of it does depends on how TCP
#                  cut it (docs/scale.md, "Validation against measurement");
#   tbf            a token bucket of 512 us at RATE that charges a packet before it goes and
#                  cuts larger GSO packets to fit: what crosses faster than RATE is the
#                  bucket, whatever TCP does; it also costs less CPU than htb (2 hosts
#                  at 10 Gbit/s, 16 MiB broadcast: 1.02 GB/s against 0.63).
# NETNS_CC: the hosts' TCP congestion control (default cubic, Linux's own default; "host"
# keeps this machine's). A namespace inherits the machine's, and where that is bbr (this
# project's development VMs), bbr's pacing stalled 45-72% of 256 KiB all-reduces between
# 2 hosts at 10 Gbit/s for 1.3-6.9 ms, where cubic stalled 0-2% (docs/scale.md). A module
# the kernel does not let namespaces choose (net.ipv4.tcp_allowed_congestion_control) is
# allowed for the run and the list restored when the hosts go.
# NETNS_STATS=FILE: each host's TCP retransmissions and loss probes and its qdiscs' drops are
# appended to FILE before the hosts go.
# Names carry this run's pid, so runs side by side do not meet. collrun stays in the
# root namespace and serves the unique id on the bridge's address; each rank enters its
# host with nsenter and talks over its veth ("eth0" inside), so every byte between hosts
# crosses the rate limit and coll sees K hostnames.
set -u

die() { echo "netns_hosts: $*" >&2; exit 2; }
STATE=${NETNS_STATE:-/tmp/netns_hosts.state}
QDISC=${NETNS_QDISC:-htb}
case $QDISC in htb | tbf) ;; *) die "NETNS_QDISC is htb or tbf, not '$QDISC'" ;; esac
CC=${NETNS_CC:-cubic}

# ---- naming ---------------------------------------------------------------------------
init_names() {
    local id=$1
    PFX="cn$id"                       # IFNAMSIZ is 16: "cn12345v3" fits
    NET="10.$((64 + id % 64)).$((id / 64 % 250)).0"
    BR="${PFX}br"
    D="/tmp/netns_hosts.$id"          # UTS namespace files
}
ns_name() { echo "${PFX}h$1"; }
ns_addr() { echo "${NET%.0}.$(($1 + 1))"; }
br_addr() { echo "${NET%.0}.254"; }

# ---- up / down ------------------------------------------------------------------------
# rate_bps RATE: tc's rate ("1gbit", "500mbit", "10gbit") in bits a second.
rate_bps() {
    local r=${1,,} n unit
    n=${r%%[a-z]*}
    unit=${r#"$n"}
    [[ $n =~ ^[0-9]+$ ]] || return 1
    case $unit in
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    bit | "") echo "$n" ;;
    *) return 1 ;;
    esac
}

shape() { # shape DEV RATE [ip netns exec NS]
    local dev=$1 rate=$2 bps burst
    shift 2
    if [ "$QDISC" = tbf ]; then
        # the bytes of 512 us at the rate: a smaller bucket needs the qdisc's timer more
        # often than this machine's wake-ups allow (a 4 KiB one held 1 Gbit/s to 0.24)
        # (two full frames at least: tbf drops a packet larger than its bucket)
        bps=$(rate_bps "$rate") ||
            { echo "netns_hosts: rate '$rate' is not N[k|m|g]bit" >&2; return 1; }
        burst=$((bps / 8 * 512 / 1000000))
        [ "$burst" -ge 3028 ] || burst=3028
        "$@" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
        return
    fi
    "$@" tc qdisc add dev "$dev" root handle 1: htb default 10 &&
        "$@" tc class add dev "$dev" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" quantum 60000
}

# allow_cc: let the namespaces choose $CC; the list before goes to $D/allowed_cc when this
# run changed it, for down to put back
allow_cc() {
    local f=/proc/sys/net/ipv4/tcp_allowed_congestion_control was
    [ "$CC" = host ] && return 0
    grep -qw -- "$CC" /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null ||
        modprobe -q "tcp_$CC" 2>/dev/null
    grep -qw -- "$CC" /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null || {
        echo "netns_hosts: NETNS_CC '$CC' is not a congestion control this kernel has" \
            "($(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null))" >&2
        return 1
    }
    was=$(cat "$f") || return 1
    grep -qw -- "$CC" "$f" && return 0
    echo "$was" >"$D/allowed_cc" && echo "$was $CC" >"$f"
}

up() {
    local k=$1 rate=$2 i ns
    mkdir -p "$D" || return 1
    allow_cc || return 1
    ip link add "$BR" type bridge || return 1
    ip addr add "$(br_addr)/24" dev "$BR" && ip link set "$BR" up || return 1
    for ((i = 0; i < k; i++)); do
        ns=$(ns_name "$i")
        ip netns add "$ns" || return 1
        ip link add "${PFX}v$i" type veth peer name eth0 netns "$ns" || return 1
        ip link set "${PFX}v$i" master "$BR" up || return 1
        ip -n "$ns" addr add "$(ns_addr "$i")/24" dev eth0 || return 1
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
        if [ "$CC" != host ]; then
            ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$CC" || return 1
        fi
        shape "${PFX}v$i" "$rate" || return 1            # bridge -> host i
        shape eth0 "$rate" ip netns exec "$ns" || return 1 # host i -> bridge
        # a UTS namespace kept alive by a bind mount on a file, named like its host
        touch "$D/uts$i" && unshare --uts="$D/uts$i" hostname "host$i" || return 1
    done
    return 0
}

stats() {
    local i ns re='dropped [0-9]*, overlimits [0-9]*'
    for ((i = 0; i < 64; i++)); do
        ns=$(ns_name "$i")
        [ -e "/run/netns/$ns" ] || break
        echo "host$i: $(ip netns exec "$ns" sysctl -n net.ipv4.tcp_congestion_control)" \
            "$(ip netns exec "$ns" nstat -az TcpRetransSegs TcpExtTCPTimeouts \
            TcpExtTCPLossProbes TcpExtDelayedACKs TcpExtTCPSlowStartRetrans 2>/dev/null |
            awk 'NR > 1 { printf "%s %s ", $1, $2 }')"
        echo "host$i: eth0 $(ip netns exec "$ns" tc -s qdisc show dev eth0 | grep -m1 -o "$re")"
        echo "host$i: ${PFX}v$i $(tc -s qdisc show dev "${PFX}v$i" | grep -m1 -o "$re")"
    done
}

down() {
    local i
    [ -n "${PFX:-}" ] || return 0
    [ -n "${NETNS_STATS:-}" ] && stats >>"$NETNS_STATS"
    for ((i = 0; i < 64; i++)); do
        [ -e "$D/uts$i" ] && { umount "$D/uts$i" 2>/dev/null; rm -f "$D/uts$i"; }
        ip netns del "$(ns_name "$i")" 2>/dev/null # takes its veth pair along
    done
    ip link del "$BR" 2>/dev/null
    if [ -s "$D/allowed_cc" ]; then
        cat "$D/allowed_cc" >/proc/sys/net/ipv4/tcp_allowed_congestion_control
        rm -f "$D/allowed_cc"
    fi
    rmdir "$D" 2>/dev/null
    return 0
}

check() {
    local n="cnchk$$"
    [ "$(id -u)" -eq 0 ] || { echo "not root"; return 1; }
    for p in ip tc unshare nsenter; do
        command -v "$p" >/dev/null || { echo "$p is missing"; return 1; }
    done
    ip netns add "$n" 2>/dev/null || { echo "cannot create a network namespace"; return 1; }
    ip netns del "$n"
    ip link add "${n}br" type bridge 2>/dev/null || { echo "cannot create a bridge"; return 1; }
    ip link del "${n}br"
    unshare --uts true 2>/dev/null || { echo "cannot create a UTS namespace"; return 1; }
    return 0
}

# ---- run --------------------------------------------------------------------------------
# Inside collrun: this script is each rank's program; it enters the rank's host and execs.
enter() {
    local id=$1 per=$2
    shift 2
    init_names "$id"
    local h=$((COLL_RANK / per))
    exec nsenter --net="/run/netns/$(ns_name "$h")" --uts="$D/uts$h" -- \
        env COLL_SOCKET_IFNAME==eth0 "$@"
}

cmd=${1:-}
shift || true
case $cmd in
check) check ;;
up)
    k=${1:?usage: up K [-r RATE]}
    shift
    rate=1gbit
    [ "${1:-}" = -r ] && rate=${2:?-r needs a rate}
    init_names $$
    if ! up "$k" "$rate"; then down; die "could not create the hosts"; fi
    echo "$$" >"$STATE"
    for ((i = 0; i < k; i++)); do echo "$(ns_name "$i") host$i $(ns_addr "$i")"; done
    ;;
down)
    [ -s "$STATE" ] || exit 0
    init_names "$(cat "$STATE")"
    down
    rm -f "$STATE"
    ;;
_enter)
    enter "$@"
    ;;
run)
    k=${1:?usage: run K PER_HOST [-r RATE] [-c COLLRUN] -- PROG ARGS}
    per=${2:?usage: run K PER_HOST ...}
    shift 2
    rate=1gbit
    collrun=$(dirname "$0")/../build/collrun
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        case $1 in
        -r) rate=$2; shift 2 ;;
        -c) collrun=$2; shift 2 ;;
        *) die "unknown flag '$1'" ;;
        esac
    done
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "run: no program"
    init_names $$
    trap down EXIT
    trap 'exit 130' INT TERM
    up "$k" "$rate" || die "could not create the hosts (root? see: $0 check)"
    COLL_SOCKET_IFNAME="=$BR" "$collrun" -n $((k * per)) \
        "$(readlink -f "$0")" _enter $$ "$per" "$@"
    ;;
*)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 2
    ;;
esac
