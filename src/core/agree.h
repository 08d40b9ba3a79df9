/*
 * agree.h - what ranks must agree on for a call, and the one check of it that every path
 * runs (src/core/agree.c).
 *
 * A call's signature is the collective (or a send or a receive), the element count, the
 * dtype, the reduction and the root (16 bytes), and how this rank runs it: its path, and on
 * the general path the algorithm and chunk (8 bytes more). The call travels with every
 * message of the general path (TCP frames and shm slots), how it runs with every TCP frame,
 * and both sit in the logs of calls every rank keeps (the comm's, and on one host the flat
 * segment's), so that two ranks that decided differently how to run one call are told
 * apart from a wait. Whoever receives compares the sender's signature and call number with its own,
 * here, and a difference is an error that names both sides:
 *
 *   rank 1 called allgather of 2000 x int32 as call #3 where this rank called allgather of
 *   1000 x int32
 *
 * Calls are numbered per comm from 1, collectives only (every rank issues the same ones);
 * sends and receives carry no number, as ranks issue different ones. Each comm keeps the
 * signatures of its last COLL_AGREE_LOG collectives so that a message that arrives late
 * (a rank that only sent in a call this rank thought was over) can be named too.
 */
#ifndef COLL_AGREE_H
#define COLL_AGREE_H

#include "internal.h"
#include "../base/wire.h"


/* "allgather of 2000 x int32", "reduce of 8 x float32 (sum) to root 2", "send of 4 x int8"
 * into buf; returns buf. */
COLL_INTERNAL const char *coll__sig_describe(const struct coll_sig *s, char *buf, size_t n);
/* Do two signatures mean the same call (a send meets a receive of the same length), run the
 * same way where both say how? */
COLL_INTERNAL bool coll__sig_agree(const struct coll_sig *a, const struct coll_sig *b);
/* Say in s how this rank runs its collective: algo NULL is the flat path, else the general
 * path with algo in chunks of chunk_count elements. */
struct coll_algo;
COLL_INTERNAL void coll__sig_how(struct coll_sig *s, const struct coll_algo *algo,
                                 size_t chunk_count);
/* "the flat path", "the general path by ring in chunks of 32768 elements" into buf. */
COLL_INTERNAL const char *coll__sig_how_describe(const struct coll_sig *s, char *buf, size_t n);

/* Record the signature of collective number cseq (0-based) on comm: its message history. */
COLL_INTERNAL void coll__agree_log(struct coll_comm *comm, uint64_t cseq,
                                   const struct coll_sig *s);

/* The message for a disagreement between this rank, in collective cseq (UINT64_MAX: a send
 * or receive) with signature mine, and peer, in its collective pcseq (UINT64_MAX alike)
 * with signature theirs (NULL when the peer's signature is not known), into buf. */
COLL_INTERNAL void coll__agree_explain(const struct coll_comm *comm, int peer, uint64_t pcseq,
                                       const struct coll_sig *theirs, uint64_t cseq,
                                       const struct coll_sig *mine, char *buf, size_t n);

/* The general path's check of a message header against the receive posted for it, which
 * every transport runs through its net's ops (agree_xfer, src/transport/transport.h, says
 * what it checks). COLL_SUCCESS when they match, else COLL_REMOTE_ERROR with the message in
 * buf. */
COLL_INTERNAL coll_status_t coll__agree_xfer(const struct coll_comm *comm, int peer,
                                             const struct coll_xfer *x, uint64_t seq,
                                             uint32_t tag, uint64_t len,
                                             const struct coll_sig *theirs, char *buf,
                                             size_t n);
/* A peer's probe: false when this rank's own call of that number agrees, or is not made
 * yet; true, with both sides named in why, when it differs (ops->agree_probe). */
COLL_INTERNAL bool coll__agree_probe(const struct coll_comm *comm, int peer, uint64_t pcseq,
                                     const struct coll_sig *theirs, char *why, size_t n);

#endif /* COLL_AGREE_H */
