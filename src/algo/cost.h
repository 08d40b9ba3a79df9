/*
 * cost.h - the alpha-beta-gamma cost model: what a schedule costs on a machine.
 *
 * A message of b bytes over a link costs alpha + b beta (alpha: seconds per message, beta:
 * seconds per byte, per link class); a reduction costs gamma b (seconds per byte of output,
 * per dtype); a local copy costs copy b. The model does not add these up along a formula:
 * coll__cost_predict builds every rank's schedule and runs them against each other on a
 * simulated machine (the rules are in cost.c's header), so pipelining, chunk size, port
 * contention and the critical path across ranks are priced, not guessed.
 *
 * Parameters come with defaults for one host (TCP loopback, shared memory) and can be
 * calibrated by measurement (`collbench --calibrate`) into a text file:
 *
 *   # coll cost model: seconds per message (alpha), per byte (beta, gamma, copy)
 *   tcp.alpha 1.1e-05
 *   tcp.beta 4e-10
 *   gamma.float 2.0e-10     # dtype names as coll__dtype_name writes them
 *   copy 1e-10
 *
 * Keys: <link>.alpha, <link>.beta, <link>.rdv, <link>.rdv_bytes, <link>.lat (link: tcp, shm,
 * ib, cuda), gamma.<dtype>, copy, mem, cache_bytes, step, flat.alpha, flat.beta, flat.sliced,
 * flat.yield (the flat path's row, below). Keys not
 * in the file keep their defaults; unknown keys are ignored with an INFO note; anything else
 * that is not `key value` (value a finite number >= 0) rejects the file, naming the line.
 *
 *   struct coll_cost_params p;
 *   struct coll_cost_result res[16];
 *   size_t nres;
 *   struct coll_cost_query q = {.coll = COLL_COLL_ALLREDUCE, .nranks = 8, .count = 1 << 20,
 *                               .dtype = COLL_FLOAT32};
 *   coll__cost_params_default(&p);
 *   st = coll__cost_rank_algos(&p, NULL, &q, res, 16, &nres);  // res[0] is the cheapest
 *
 * Everything here is a pure function of its arguments: no cache, no global state, any thread.
 */
#ifndef COLL_COST_H
#define COLL_COST_H

#include "schedule.h"

enum coll_link {
    COLL_LINK_TCP = 0, /* sockets, loopback or network */
    COLL_LINK_SHM,     /* shared memory on one host */
    COLL_LINK_IB,      /* InfiniBand verbs */
    COLL_LINK_CUDA,    /* CUDA IPC between GPUs of one host */
    COLL_NUM_LINKS
};
COLL_INTERNAL const char *coll__link_name(enum coll_link l); /* "tcp", "shm", "ib", "cuda" */

struct coll_link_cost {
    double alpha; /* seconds per message */
    double beta;  /* seconds per byte */
    /* Seconds more per message of rdv_bytes or more (0: no such messages): where a transport
     * hands large messages over by rendezvous (shm: a slot with the address, the receiver's
     * process_vm_readv, a completion back) instead of copying them through its ring. */
    double rdv;
    double rdv_bytes;
    /* The part of alpha that is latency (seconds, at most alpha): a message holds its
     * ports for alpha - lat + bytes beta (+ rdv), and reaches its receiver lat later, so
     * messages in flight overlap their latencies while each still pays its occupancy. 0:
     * the whole alpha occupies the ports. */
    double lat;
    /* Seconds more for a message that reaches a rank while it sends too (the steps of
     * recursive doubling and of rings), over one way of a ping-pong: collbench --calibrate's
     * exchange less its ping-pong. On bench/netns_hosts.sh's hosts the ranks poll while they
     * wait, and the kernel's work that delivers the peer's message waits for a core. 0: an
     * exchange costs what one way does. collsim adds it; the selector's model does not. */
    double xchg;
    /* A shaped link's packet: a link that owes nothing lets a packet of up to burst bytes
     * through at burst_beta seconds per byte and owes it afterwards at beta, before anything
     * else goes (tc htb, which bench/netns_hosts.sh's links are, bills a packet after it lets
     * it go, and TCP hands it packets of up to 64 KB). collbench --calibrate times messages
     * into a link idle for 2 ms. 0: every byte at beta. collsim keeps each host's link's
     * debt; the selector's model does not. */
    double burst;
    double burst_beta;
    /* CPU seconds the machine of collbench --calibrate's rank 0 spent per byte of a stream
     * both ways (its end's work; both ends' where the hosts are emulated on it). collsim
     * --machine-cores M: every message between hosts crosses one link of M / cpu bytes a
     * second, the machine's cores that copy it. 0: not measured. */
    double cpu;
};

struct coll_cost_params {
    struct coll_link_cost link[COLL_NUM_LINKS];
    double gamma[COLL_NUM_DTYPES]; /* seconds per byte of reduction output, per dtype */
    double copy;                   /* seconds per byte of a local copy */
    /* Memory hierarchy. beta, gamma and copy are measured on buffers that fit in cache; a
     * call whose buffers on one host (send, receive and scratch of all its ranks there),
     * W bytes, exceed cache_bytes pays for the share 1 - cache_bytes / W of its bytes mem
     * times those costs (mem: a copy's time per byte out of cache over in cache). mem 1 or
     * cache_bytes 0: every byte priced as cached. */
    double mem;
    double cache_bytes;
    /* Seconds of the executor's time per schedule step (send, receive, reduce, copy): the
     * rank's CPU runs it before the step takes effect, one at a time with its local steps,
     * so a schedule of many small steps pays for their number. */
    double step;
    /* Seconds more a wait takes when it outlasted its polling (COLL_SPIN_US) and slept: the
     * wake-up from epoll_wait once the message is in (a virtual machine's idle CPU halts:
     * 100 us and more). collbench --calibrate's ping-pong whose answer comes after the
     * poll; collsim adds it to a wait longer than --spin. 0: not measured. */
    double wake;
    /* Seconds a collective call costs each rank beyond its schedule's steps and messages
     * (its arguments' checks, the path's choice, the plan, the completion): what a 2-rank
     * broadcast ping-pong of 8 bytes takes beyond a send/recv ping-pong's (collbench
     * --calibrate). collsim runs it on the rank's CPU before the first step. 0: none. */
    double call;
    /* Cores of each host, 0: as many as its ranks. When a host has more ranks than cores,
     * its ranks' local steps and the messages they receive share that many cores (time-
     * slicing: each message also costs the receiving side CPU for its whole duration). The
     * selector sets it from the machine; not part of the calibration file. */
    int32_t cores;
    /* The flat path (src/path/flat.c) runs no schedule, so it has a row of its own: a
     * formula, not a simulation (coll__cost_predict_flat says it). */
    struct coll_flat_cost {
        double alpha;  /* seconds per call per rank of the comm (each rank's line is read) */
        double beta;   /* seconds per byte a rank touches in a call of at most small_bytes */
        double sliced; /* seconds per byte and pass of a call in pieces (copy in, reduce
                        * the rank's slice, copy out: an all-reduce is 3 passes) */
        double yield;  /* seconds per wait and per rank beyond the host's cores: a wait for
                        * a rank that is off its core (cores as above; 0 when not more) */
    } flat;
};

/* The bytes of a message's last packet over a shaped link (its burst, above): TCP cuts the
 * message into packets of burst bytes and what is left goes last; the whole message where
 * it fits in one, or where the link has no burst. The packets before it each wait for their
 * predecessor's debt; the last crosses at burst_beta (collsim; collbench --calibrate). */
COLL_INTERNAL double coll__cost_last_packet(const struct coll_link_cost *l, double bytes);

/* The built-in defaults: rough figures for one x86 host (TCP loopback alpha 10 us, 2.5 GB/s;
 * shm 1 us, all of it latency, 8 GB/s, rendezvous from 16 KiB as src/transport/shm.c; fp32
 * reduction 5 GB/s of output; 0.3 us of the executor per step); IB and CUDA are
 * placeholders until calibrated; no memory term (mem 1); the flat row from the one-data-path
 * run of docs/performance.md (cost.c cites the figures). */
COLL_INTERNAL void coll__cost_params_default(struct coll_cost_params *p);

/* Read a calibration file over the defaults into *p. Outputs only on success: a missing or
 * unreadable file is COLL_SYSTEM_ERROR naming the path, a malformed line
 * COLL_INVALID_ARGUMENT naming the path and the line number. */
COLL_INTERNAL coll_status_t coll__cost_params_load(struct coll_cost_params *p, const char *path);
/* A calibration file's text (NUL-terminated, malloc'ed into *text_p) when it is readable text
 * of at most max bytes; else the status, with the reason in coll_last_error(NULL). */
COLL_INTERNAL coll_status_t coll__cost_file_read(const char *path, size_t max, char **text_p);
/* As load, from text in memory; name is what messages call it ("COLL_COST_FILE", a path). */
COLL_INTERNAL coll_status_t coll__cost_params_parse(struct coll_cost_params *p, const char *text,
                                                    const char *name);
/* Write every key of p to path (through a temporary file renamed over it, so a reader never
 * sees half a file). Values are written so that load gives back exactly the same doubles. */
COLL_INTERNAL coll_status_t coll__cost_params_save(const struct coll_cost_params *p,
                                                   const char *path);

/* Which link class carries messages from rank src to rank dst. */
typedef enum coll_link (*coll_cost_link_fn)(void *arg, int32_t src, int32_t dst);
struct coll_cost_links {
    coll_cost_link_fn link_of; /* NULL: every pair uses link */
    void *arg;
    enum coll_link link;
};
/* NULL wherever a links pointer is taken means every pair is TCP. */
static inline struct coll_cost_links coll__cost_links_all(enum coll_link l)
{
    struct coll_cost_links links = {NULL, NULL, l};
    return links;
}

/* The links of comm's ranks as its transports connect them (src/algo/select.c). */
struct coll_comm;
COLL_INTERNAL struct coll_cost_links coll__select_links(struct coll_comm *comm);

/* Run the schedules of all n ranks (scheds[r] is rank r's, built for n ranks) on the
 * simulated machine. *time_p: when the last step of any rank completes, in seconds from a
 * common start; finish_p (NULL, or n entries): when each rank's last step completes (0 for a
 * rank without steps). Schedules that fail coll__sched_validate, do not match (a send
 * without its receive, counts that differ) or deadlock are COLL_INTERNAL_ERROR with a
 * message naming the rank and step. */
COLL_INTERNAL coll_status_t coll__cost_simulate(const struct coll_cost_params *p,
                                                const struct coll_cost_links *links,
                                                const struct coll_schedule *scheds, int32_t n,
                                                double *time_p, double *finish_p);

/* Build algo's schedule for every rank of tmpl (tmpl->rank is ignored) and simulate them, as
 * coll__cost_simulate. COLL_INVALID_ARGUMENT when algo cannot run tmpl. Schedules are built
 * one rank at a time and freed as they are taken in; nothing is kept. */
COLL_INTERNAL coll_status_t coll__cost_predict(const struct coll_cost_params *p,
                                               const struct coll_cost_links *links,
                                               const struct coll_algo *algo,
                                               const struct coll_algo_args *tmpl, double *time_p,
                                               double *finish_p);

/* algo's price for tmpl from its closed form (cost_closed.c): the schedule walker's rules
 * summed along the schedule's critical path and its busiest port, in O(1) time and memory
 * (O(n) to read tmpl->hosts), so that it answers at any n. It approximates
 * coll__cost_predict (tests/test_cost.c compares their picks). COLL_INVALID_ARGUMENT when
 * algo cannot run tmpl. */
COLL_INTERNAL coll_status_t coll__cost_closed(const struct coll_cost_params *p,
                                              const struct coll_cost_links *links,
                                              const struct coll_algo *algo,
                                              const struct coll_algo_args *tmpl, double *time_p);

/* What to rank: one collective call. */
struct coll_cost_query {
    enum coll_coll coll;
    int32_t nranks, root;
    size_t count; /* NCCL's count for the collective, in elements */
    coll_dtype_t dtype;
    /* Chunk sizes to try, in bytes (each rounded down to whole elements, at least one, at
     * most count); NULL: COLL_COST_DEFAULT_CHUNKS. Sizes that give the same chunk_count are
     * priced once. */
    const size_t *chunk_bytes;
    size_t nchunk_bytes;
    bool every_chunk; /* one row per (algorithm, chunk size); false: per algorithm, best chunk */
    const int32_t *hosts; /* as struct coll_algo_args (NULL: one host) */
    int32_t nhosts;
    /* Price by the closed forms (coll__cost_closed: microseconds at any n) instead of
     * walking every rank's schedule (coll__cost_predict: exact, O(n) schedules). */
    bool closed;
};
#define COLL_COST_DEFAULT_CHUNKS                                                                   \
    {                                                                                              \
        32u << 10, 64u << 10, 128u << 10, 256u << 10, 512u << 10, 1u << 20, 4u << 20              \
    }

/* The chunk sizes the selector prices (src/algo/select.c). The largest is one copy per
 * block up to 4 MiB: a pipeline of smaller chunks pays a message, and over shm a rendezvous,
 * per chunk, which a 2-rank broadcast never gets back; chunks past it would only grow the
 * scratch slots of trees (slots x children x chunk). */
#define COLL_COST_SELECT_CHUNKS                                                                    \
    {                                                                                              \
        32u << 10, 128u << 10, 512u << 10, 4u << 20                                                \
    }

struct coll_cost_result {
    const struct coll_algo *algo;
    size_t chunk_count; /* elements */
    size_t chunk_bytes; /* chunk_count x element size */
    double seconds;     /* predicted time of the whole collective */
};

/* Price every algorithm of coll__algos[] that can run q (its colls and applicable()) at
 * every chunk size, and write the cheapest rows into results (at most cap), sorted by
 * predicted time (ties: table order, then chunk_bytes order); *nresults_p is how many. This is
 * what the selector, `collbench --explain` and collviz print. */
COLL_INTERNAL coll_status_t coll__cost_rank_algos(const struct coll_cost_params *p,
                                                  const struct coll_cost_links *links,
                                                  const struct coll_cost_query *q,
                                                  struct coll_cost_result *results, size_t cap,
                                                  size_t *nresults_p);

/* As coll__cost_rank_algos for algo alone: its cheapest chunk size of q's into *best.
 * COLL_INVALID_ARGUMENT when algo cannot run q at any of them. (collviz prices one
 * algorithm with it, as the selector does.) */
COLL_INTERNAL coll_status_t coll__cost_rank_algo(const struct coll_cost_params *p,
                                                 const struct coll_cost_links *links,
                                                 const struct coll_algo *algo,
                                                 const struct coll_cost_query *q,
                                                 struct coll_cost_result *best);

/* The flat path's sizes, as the comm's settings make them. */
struct coll_cost_flat_sizes {
    size_t small_bytes; /* COLL_SHM_FLAT_BYTES: a call of at most this per rank is one call */
    size_t piece_bytes; /* COLL_SHM_SLICED_BYTES: larger all-reduce, broadcast and reduce go
                         * in pieces of this (0, or not above small_bytes: they do not) */
};
#define COLL_COST_FLAT_SIZES_DEFAULT {4096, 1u << 20} /* the settings' defaults */

/* The predicted time of a call of coll, `bytes` per rank (all-gather: each rank's part), on
 * the flat path of a comm of nranks on one host (sizes NULL: the defaults; p->cores as for
 * the schedules). With n ranks, c = p->cores, over = n - c when n > c else 0, share = n / c
 * when n > c else 1:
 *   a call of at most small_bytes:
 *     flat.alpha n + flat.yield over + flat.beta bytes touch share M
 *     (a reduce: share 1, only its root reads and folds)
 *     touch: all-reduce, all-gather, reduce n + 1 (one input in, n read), broadcast 2,
 *     barrier 0; a reduce of up to 64 KiB that fits a piece goes whole to the root, priced
 *     the same (src/path/flat.c, FLAT_REDUCE_WHOLE_BYTES);
 *   larger (all-reduce, broadcast, reduce on 2 to 16 ranks), k = ceil(bytes / piece_bytes)
 *   pieces, each w all-rank waits (2; broadcast 1):
 *     k w (flat.alpha n + flat.yield over) + flat.sliced bytes passes share M
 *     passes: all-reduce 3, reduce 2 + (n - 1) / n, broadcast 2;
 * M is the memory term of the schedules (p->mem, p->cache_bytes) over the buffers of every
 * rank (send and receive) and the segment's slots. COLL_INVALID_ARGUMENT when the flat path
 * does not run the call (a collective it has not, a size too large), with a message. */
COLL_INTERNAL coll_status_t coll__cost_predict_flat(const struct coll_cost_params *p,
                                                    enum coll_coll coll, size_t bytes,
                                                    int32_t nranks,
                                                    const struct coll_cost_flat_sizes *sizes,
                                                    double *time_p);

/*
 * The rows of the paths made of other calls (src/path/path.h: stream, quant), beside the flat
 * path's: closed forms (cost_paths.c), for reading next to the other rows (collbench
 * --explain, COLL_DEBUG); the paths' rules, not these prices, decide which path runs a call.
 */

/* A stream-ordered call, this rank's part. Through staging, its input is copied device to
 * host (in_bytes) and its output back (out_bytes) at the copy rate, around the host
 * collective on the staging memory (host_seconds: that call's own row, flat or sched):
 *   host_seconds + (in_bytes + out_bytes) copy
 * (no overlap counted: piece j + 1's copies overlap piece j's collective, so this is an upper
 * bound, by at most the smaller of the two terms). Through CUDA IPC, in pieces, each with
 * one host barrier (host_seconds: one barrier's price) and a kernel launch, the copy in, the
 * kernels' reads out of the peers' scratch (read_bytes) and the gather out all at the cuda
 * link's beta:
 *   (pieces + 1) host_seconds + pieces cuda.alpha + (in_bytes + read_bytes + out_bytes)
 *   cuda.beta */
struct coll_cost_stream {
    bool ipc;
    size_t in_bytes, out_bytes; /* copied into and out of staging or the IPC scratch */
    size_t read_bytes;          /* IPC: read by the kernels out of every rank's scratch */
    size_t pieces;              /* IPC: pieces of the call (one barrier each, and one more) */
    double host_seconds;        /* staging: the host call; IPC: one host barrier */
};
COLL_INTERNAL double coll__cost_predict_stream(const struct coll_cost_params *p,
                                               const struct coll_cost_stream *q);

/* The quantized all-reduce of count elements of elem_size bytes on n ranks (docs/
 * quantization.md), the codec sending ratio bytes per byte of input (E = ratio count
 * elem_size encoded bytes of a whole input). Encoding and decoding are passes over the
 * elements widened to fp32 (F = 4 count bytes), priced at gamma.float per byte as a
 * reduction; messages at link's alpha and beta, a rank's n - 1 sends one after another:
 *   GATHER  (n - 1) (alpha + E beta) + F gamma (1 + n)        encode once, decode n inputs
 *   SCATTER 2 (n - 1) (alpha + E / n beta) + F gamma (3 + 1 / n)
 *                       encode, decode and sum n slices of F / n, encode the own slice,
 *                       decode the whole result
 * (HIER, between hosts, is priced as SCATTER over the link given); n = 1: F gamma 2. */
struct coll_cost_quant {
    int32_t nranks;
    size_t count, elem_size;
    double ratio;
    bool gather;
    enum coll_link link;
};
COLL_INTERNAL double coll__cost_predict_quant(const struct coll_cost_params *p,
                                              const struct coll_cost_quant *q);

#endif /* COLL_COST_H */
