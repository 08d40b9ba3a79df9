/*
 * test_stream.c - the arithmetic of stream-ordered collectives (src/path/stream.h), without
 * CUDA: how a call is cut into pieces, which copies move each piece in and out of a staging
 * slot, and the order a stream gets them in.
 *
 *   - every byte of the user's input is copied in exactly once, every byte of the output
 *     copied out exactly once, inside the slot's region, for every collective, rank, root,
 *     rank count and piece size (odd ones included);
 *   - a host collective run piece by piece on the slots (simulated here on all ranks at
 *     once) gives what the whole collective gives;
 *   - the stream order refills a slot only after the piece that used it was waited for and
 *     copied out, and each piece is waited for after its copy in.
 */
#include "algo/schedule.h"
#include "path/stream.h"

#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* every stream-ordered call's shape: the collective, and for a send or receive which */
static const struct {
    enum coll_coll coll;
    uint8_t dir;
} kinds[] = {
    {COLL_COLL_ALLREDUCE, 0}, {COLL_COLL_BROADCAST, 0},      {COLL_COLL_REDUCE, 0},
    {COLL_COLL_ALLGATHER, 0}, {COLL_COLL_REDUCE_SCATTER, 0}, {COLL_COLL_ALLTOALL, 0},
    {COLL_COLL_SENDRECV, COLL_STEP_SEND}, {COLL_COLL_SENDRECV, COLL_STEP_RECV},
};
#define IS(ki, c, d)                                                                           \
    (kinds[ki].coll == (c) && (kinds[ki].coll != COLL_COLL_SENDRECV || kinds[ki].dir == (d)))
#define IS_SEND(ki) IS(ki, COLL_COLL_SENDRECV, COLL_STEP_SEND)
#define IS_RECV(ki) IS(ki, COLL_COLL_SENDRECV, COLL_STEP_RECV)

/* user buffer sizes, in elements, of kind at count */
static size_t send_elems(size_t ki, int nranks, size_t count)
{
    if (kinds[ki].coll == COLL_COLL_REDUCE_SCATTER || kinds[ki].coll == COLL_COLL_ALLTOALL)
        return count * (size_t)nranks;
    return IS_RECV(ki) ? 0 : count;
}

static size_t recv_elems(size_t ki, int nranks, size_t count)
{
    if (kinds[ki].coll == COLL_COLL_ALLGATHER || kinds[ki].coll == COLL_COLL_ALLTOALL)
        return count * (size_t)nranks;
    return IS_SEND(ki) ? 0 : count;
}

TEST(piece_elems)
{
    /* 8 KiB pieces: 2048 int32 for one block, 512 with a block per rank of four */
    ASSERT_EQ(coll__stream_piece_elems(COLL_COLL_ALLREDUCE, 4, 100000, 4, 8192), (size_t)2048);
    ASSERT_EQ(coll__stream_piece_elems(COLL_COLL_ALLGATHER, 4, 100000, 4, 8192), (size_t)512);
    ASSERT_EQ(coll__stream_piece_elems(COLL_COLL_ALLTOALL, 4, 100, 4, 8192), (size_t)100);
    /* an element of every rank larger than a piece: nothing fits */
    ASSERT_EQ(coll__stream_piece_elems(COLL_COLL_ALLTOALL, 64, 100, 8, 256), (size_t)0);
    ASSERT_EQ(coll__stream_mult(COLL_COLL_SENDRECV, 8), (size_t)1);
    ASSERT_EQ(coll__stream_mult(COLL_COLL_REDUCE_SCATTER, 8), (size_t)8);
}

/* Every byte moved once each way, inside the region, for every shape. */
TEST(rows_cover_once)
{
    static const size_t counts[] = {1, 2, 5, 17, 64};
    static const size_t pieces[] = {1, 3, 4, 16, 100};

    for (size_t ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++)
        for (int n = 1; n <= 5; n++)
            for (int rank = 0; rank < n; rank++)
                for (size_t ci = 0; ci < 5; ci++)
                    for (size_t pi = 0; pi < 5; pi++) {
                        int k = (int)ki;
                        size_t count = counts[ci], piece = pieces[pi], esz = 2;
                        size_t np, mult = coll__stream_mult(kinds[ki].coll, n);
                        size_t sb = send_elems(ki, n, count) * esz;
                        size_t rb = recv_elems(ki, n, count) * esz;
                        int root = (rank + 1) % n;
                        unsigned char *in = calloc(sb + 1, 1), *out = calloc(rb + 1, 1);
                        struct coll_stream_row rows[5];

                        piece = piece < count ? piece : count;
                        np = (count + piece - 1) / piece;
                        for (size_t j = 0; j < np; j++)
                            for (int dir = 0; dir < 2; dir++) {
                                int nr = coll__stream_rows(kinds[ki].coll, kinds[ki].dir,
                                                           rank, n, root, count, esz, piece, j,
                                                           dir == 1, rows);
                                ASSERT(nr >= 0 && nr <= n);
                                for (int r = 0; r < nr; r++) {
                                    unsigned char *m = dir ? out : in;
                                    size_t lim = dir ? rb : sb;
                                    ASSERT_MSG(rows[r].slot_off + rows[r].bytes <=
                                                   piece * mult * esz,
                                               "kind %d: row past the slot region", (int)k);
                                    ASSERT_MSG(rows[r].user_off + rows[r].bytes <= lim,
                                               "kind %d n %d: row past the user buffer",
                                               (int)k, n);
                                    for (size_t b = 0; b < rows[r].bytes; b++)
                                        m[rows[r].user_off + b]++;
                                }
                            }
                        /* what this rank must read and write */
                        bool reads = !(IS_RECV(ki) || (IS(ki, COLL_COLL_BROADCAST, 0) &&
                                                       rank != root));
                        bool writes = !(IS_SEND(ki) || (IS(ki, COLL_COLL_REDUCE, 0) &&
                                                        rank != root));
                        /* reduce-scatter writes one block; all-gather reads one */
                        for (size_t b = 0; b < sb; b++)
                            ASSERT_MSG(in[b] == (reads ? 1 : 0),
                                       "kind %d n %d rank %d count %zu piece %zu: input byte "
                                       "%zu copied %d times",
                                       (int)k, n, rank, count, piece, b, in[b]);
                        for (size_t b = 0; b < rb; b++)
                            ASSERT_MSG(out[b] == (writes ? 1 : 0),
                                       "kind %d n %d rank %d count %zu piece %zu: output byte "
                                       "%zu copied %d times",
                                       (int)k, n, rank, count, piece, b, out[b]);
                        free(in);
                        free(out);
                    }
}

/* All-to-all and all-gather piece by piece on simulated slots equal the whole collective. */
TEST(pieces_compose)
{
    enum { N = 3, COUNT = 11, PIECE = 4 };
    int32_t send[N][N * COUNT], recv[N][N * COUNT], slot[N][N * PIECE], res[N][N * PIECE];
    struct coll_stream_row rows[N];

    for (int ki = 0; ki < 2; ki++) {
        enum coll_coll k = ki ? COLL_COLL_ALLTOALL : COLL_COLL_ALLGATHER;
        for (int r = 0; r < N; r++)
            for (int i = 0; i < N * COUNT; i++) {
                send[r][i] = r * 1000 + i;
                recv[r][i] = -1;
            }
        for (size_t j = 0; j * PIECE < COUNT; j++) {
            size_t n = COUNT - j * PIECE < PIECE ? COUNT - j * PIECE : PIECE;
            for (int r = 0; r < N; r++) {
                int nr = coll__stream_rows(k, 0, r, N, 0, COUNT, 4, PIECE, j, false, rows);
                memset(slot[r], 0, sizeof(slot[r]));
                for (int x = 0; x < nr; x++)
                    memcpy((char *)slot[r] + rows[x].slot_off,
                           (char *)send[r] + rows[x].user_off, rows[x].bytes);
            }
            /* the host collective on the slots, count n */
            for (int r = 0; r < N; r++) {
                size_t so, ro;
                coll__stream_slot_args(k, r, n, 4, &so, &ro);
                ASSERT_EQ(ro, (size_t)0);
                for (int p = 0; p < N; p++) {
                    size_t pso, pro;
                    coll__stream_slot_args(k, p, n, 4, &pso, &pro);
                    /* all-gather: block p of r's result is p's input; all-to-all: block p
                     * of r's result is block r of p's input */
                    memcpy(&res[r][(size_t)p * n],
                           k == COLL_COLL_ALLGATHER ? (char *)slot[p] + pso
                                                  : (char *)&slot[p][(size_t)r * n],
                           n * 4);
                }
            }
            for (int r = 0; r < N; r++) {
                int nr = coll__stream_rows(k, 0, r, N, 0, COUNT, 4, PIECE, j, true, rows);
                for (int x = 0; x < nr; x++)
                    memcpy((char *)recv[r] + rows[x].user_off,
                           (char *)res[r] + rows[x].slot_off, rows[x].bytes);
            }
        }
        for (int r = 0; r < N; r++)
            for (int p = 0; p < N; p++)
                for (int i = 0; i < COUNT; i++) {
                    int32_t want = k == COLL_COLL_ALLGATHER ? p * 1000 + i
                                                          : p * 1000 + r * COUNT + i;
                    ASSERT_MSG(recv[r][p * COUNT + i] == want,
                               "%s: rank %d block %d element %d is %d, want %d",
                               ki ? "alltoall" : "allgather", r, p, i,
                               recv[r][p * COUNT + i], want);
                }
    }
}

TEST(order_reuses_slots_safely)
{
    for (size_t np = 1; np <= 20; np++)
        for (size_t ns = 1; ns <= 6; ns++) {
            struct coll_stream_step st[60];
            size_t n = coll__stream_order(np, ns, st);
            long d2h[20], wait[20], h2d[20];

            ASSERT_EQ(n, 3 * np);
            for (size_t j = 0; j < np; j++)
                d2h[j] = wait[j] = h2d[j] = -1;
            for (size_t i = 0; i < n; i++) {
                long *at = st[i].kind == COLL_SSTEP_D2H    ? d2h
                           : st[i].kind == COLL_SSTEP_WAIT ? wait
                                                           : h2d;
                ASSERT(st[i].piece < np);
                ASSERT_MSG(at[st[i].piece] < 0, "step %zu repeats piece %zu", i, st[i].piece);
                at[st[i].piece] = (long)i;
            }
            for (size_t j = 0; j < np; j++) {
                ASSERT(d2h[j] >= 0 && wait[j] > d2h[j] && h2d[j] > wait[j]);
                /* the slot's previous piece is done and copied out before the refill */
                if (j >= ns)
                    ASSERT_MSG(h2d[j - ns] < d2h[j],
                               "np %zu slots %zu: piece %zu refills slot %zu too early", np, ns,
                               j, j % ns);
                /* pieces are waited for in order, copies in too */
                if (j > 0)
                    ASSERT(wait[j] > wait[j - 1] && d2h[j] > d2h[j - 1]);
            }
            /* the pipeline is full: ns copies in before the first wait */
            if (np >= ns)
                ASSERT_EQ(wait[0], (long)ns);
        }
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
