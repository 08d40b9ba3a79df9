#!/usr/bin/env bash
# bench/peers_coll.sh NP COLL [collbench flags] - collbench as bench/peers.sh runs it beside
# the peers (COLL_CMD of ../shared/peers/run_all.sh, which appends the sizes). Every
# collective is measured as the peers' drivers call theirs:
#   - all-reduce and reduce out of place, as MPI_Allreduce / MPI_Reduce with two buffers;
#   - broadcast in place. MPI_Bcast has one buffer: the root sends from it and keeps it.
#     coll's out-of-place broadcast (NCCL's ncclBroadcast with sendbuff != recvbuff) also
#     copies the root's sendbuf into its own recvbuf, a copy no MPI broadcast makes, so its
#     in-place rows are the like-for-like ones. They are printed as 10-field rows (size
#     count type redop root time algbw busbw wrong iters, iters "-"), which run_all.sh
#     reads as they are; bench/peers.sh's page says which placement each collective used.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: bench/peers_coll.sh NP COLL [collbench flags]" >&2; exit 2; }
np=$1 coll=$2
shift 2
case $coll in
broadcast | bcast)
    "$here/build/collrun" -n "$np" "$here/build/collbench" "$coll" --inplace-only "$@" |
        awk '$1 ~ /^[0-9]+$/ && NF == 13 { print $1, $2, $3, $4, $5, $10, $11, $12, $13, "-"; next }
             { print }'
    ;;
*)
    exec "$here/build/collrun" -n "$np" "$here/build/collbench" "$coll" "$@"
    ;;
esac
