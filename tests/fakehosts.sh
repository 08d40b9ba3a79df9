#!/bin/sh
# fakehosts.sh K prog [args...] - run prog as if ranks were on hosts of K consecutive ranks
# each (COLL_HOST_ID from COLL_RANK): shared memory inside a "host", TCP between them.
per=$1
shift
COLL_HOST_ID=host$((COLL_RANK / per)) exec "$@"
