/*
 * wire.h - little-endian integers in wire records (bootstrap, TCP frames, verbs exchanges):
 * one definition for every reader and writer of the formats.
 */
#ifndef COLL_WIRE_H
#define COLL_WIRE_H

#include <stdint.h>

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A call's signature (src/core/agree.h): what ranks must agree on for it, and how this rank
 * runs it. 24 bytes on the wire, in every TCP frame; the shm transport carries the first 16
 * (the call). */
struct coll_sig {
    uint8_t coll;  /* enum coll_coll; COLL_COLL_SENDRECV for a send or a receive */
    uint8_t dtype;
    uint8_t op;    /* reductions only, else 0 */
    uint8_t kind;  /* sends and receives: COLL_STEP_SEND or COLL_STEP_RECV, else 0 */
    int32_t root;  /* rooted collectives only, else 0 */
    uint64_t count;
    /* how this rank runs a collective, once decided (0: not said) */
    uint8_t path;  /* COLL_SIG_PATH_* */
    uint8_t algo;  /* sched: 1 + the algorithm's index in coll__algos */
    uint16_t pad;
    uint32_t chunk; /* sched: elements per chunk, UINT32_MAX for that many or more */
};
enum { COLL_SIG_PATH_FLAT = 1, COLL_SIG_PATH_SCHED = 2 };
#define COLL_SIG_CALL_BYTES 16
#define COLL_SIG_BYTES 24

/* The call alone (16 bytes), as the shm transport's slots carry it. */
static inline void coll__sig_put_call(uint8_t *p, const struct coll_sig *s)
{
    p[0] = s->coll, p[1] = s->dtype, p[2] = s->op, p[3] = s->kind;
    put32(p + 4, (uint32_t)s->root);
    put64(p + 8, s->count);
}

static inline void coll__sig_get_call(const uint8_t *p, struct coll_sig *s)
{
    s->coll = p[0], s->dtype = p[1], s->op = p[2], s->kind = p[3];
    s->root = (int32_t)get32(p + 4);
    s->count = get64(p + 8);
    s->path = s->algo = 0;
    s->pad = 0;
    s->chunk = 0;
}

static inline void coll__sig_put(uint8_t *p, const struct coll_sig *s)
{
    coll__sig_put_call(p, s);
    p[16] = s->path, p[17] = s->algo, p[18] = p[19] = 0;
    put32(p + 20, s->chunk);
}

static inline void coll__sig_get(const uint8_t *p, struct coll_sig *s)
{
    coll__sig_get_call(p, s);
    s->path = p[16], s->algo = p[17];
    s->chunk = get32(p + 20);
}

#endif /* COLL_WIRE_H */
