/*
 * coll.h - the native API of coll, a collective communication library.
 *
 * This header is the specification. A group of processes ("ranks") forms a communicator
 * and runs collectives over it: broadcast, reduce, all-reduce, each blocking or
 * non-blocking. Statuses, dtypes and ops have NCCL's numeric values, so code that speaks
 * NCCL converts by cast.
 *
 * Ownership: coll allocates and frees communicators and requests and owns every string it
 * returns. User buffers are borrowed: by a blocking call until it returns, by a
 * non-blocking call until its request completes (coll_wait, or coll_test reporting done).
 *
 * Threads: one thread at a time may call into one communicator (as NCCL); different
 * communicators may be used from different threads at once. coll_comm_abort may be called
 * from any thread at any time. Every call is safe to call with NULL where a pointer is
 * expected: it returns COLL_INVALID_ARGUMENT and says which argument in coll_last_error().
 *
 * Handles: a communicator handle that coll_comm_init (or split, or shrink) did not return,
 * or that was destroyed, is refused by every call with COLL_INVALID_ARGUMENT ("not a live
 * communicator", in coll_last_error(NULL)); coll never reads through such a handle, so a
 * freed, zeroed, garbage or dangling pointer is recognized. Where that ends: once a later
 * coll_comm_init gets the destroyed comm's address back from the allocator, the old handle
 * names the new comm. Requests are not checked this way: using one after its comm was
 * destroyed, or after it was released, is undefined.
 *
 * Errors: every call returns a status and never aborts the process. After
 * COLL_REMOTE_ERROR or COLL_TIMEOUT (a peer failed, disagreed or went silent; every
 * surviving rank sees one of the two) the communicator is failed: later collectives on it
 * return the same status at once, and it can only be destroyed. A rank's failure (an error
 * it found, a disagreement, a timeout, coll_comm_abort, its death) reaches every rank of the
 * comm within milliseconds, on its first call as on its thousandth, across hosts and under
 * any launcher: each comm keeps a tree of authenticated connections over its ranks, made by
 * coll_comm_init, that carries failures whatever data connections exist. A rank in a call
 * returns the error at once; an idle rank's next call or coll_comm_destroy returns it. Only
 * a rank that is truly silent (stopped, hung, cut off) is found by COLL_TIMEOUT_MS.
 *
 * Agreement: every rank of a comm must make the same collective calls in the same order,
 * with the same collective, count, dtype, op and root (sends must meet receives of the same
 * count and dtype). Blocking, non-blocking and grouped forms of one call agree with each
 * other. When ranks disagree, every rank gets COLL_REMOTE_ERROR, whose message names what
 * each side called ("rank 1 called allgather of 2000 x int32 as call #3 where this rank
 * called allgather of 1000 x int32"; calls count collectives on the comm from 1): within
 * the call on every rank that takes part in it, and on every other rank no later than its
 * next call on the comm or coll_comm_destroy, which then returns the error (a failure known
 * before destroy is not returned again). Not by waiting for COLL_TIMEOUT_MS: the rank that
 * receives a message of another call fails the comm, and that reaches every rank as above;
 * a call that makes no progress for 20 ms looks up what the others called (over shared
 * memory, in a log of every rank's calls in the comm's segment) or sends its call up the
 * tree, where every rank on the way compares it with its own, so ranks that wait on each
 * other under different roots fail too. coll_comm_destroy waits (at most 1 s) until every
 * rank has reached its destroy, so a rank whose last calls only sent data (the root of a
 * broadcast, a send) hears of a disagreement its receivers found. COLL_CHECK=1 (checking
 * mode) gathers every collective's arguments from every rank before the call runs, so that
 * all ranks fail within the same call, for a small all-gather per call.
 *
 * Stalls: a call that makes no progress for COLL_STALL_MS (default 10 s) logs once what it
 * waits for; SIGUSR1 to any rank (collrun forwards it to all) prints on rank 0's stderr one
 * line per rank with its current call and what it waits for, unless the program handles
 * SIGUSR1 itself.
 */
#ifndef COLL_H
#define COLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLL_VERSION_MAJOR 0
#define COLL_VERSION_MINOR 1
#define COLL_VERSION_PATCH 0
/* Encoded as NCCL encodes its version: major * 10000 + minor * 100 + patch. */
#define COLL_VERSION_CODE \
    (COLL_VERSION_MAJOR * 10000 + COLL_VERSION_MINOR * 100 + COLL_VERSION_PATCH)

#if defined(_WIN32)
#define COLL_API
#elif defined(COLL_BUILDING)
#define COLL_API __attribute__((visibility("default")))
#else
#define COLL_API
#endif

/* ---------------------------------------------------------------------------------------
 * Statuses. Values 0..7 equal ncclResult_t; COLL_TIMEOUT is coll's own.
 */
#define COLL_STATUS_MAP(X)                                                                \
    X(COLL_SUCCESS, 0, "success")                                                         \
    X(COLL_CUDA_ERROR, 1, "a CUDA call failed")                                           \
    X(COLL_SYSTEM_ERROR, 2, "a system call failed (COLL_DEBUG=INFO for more)")            \
    X(COLL_INTERNAL_ERROR, 3, "internal error in coll")                                   \
    X(COLL_INVALID_ARGUMENT, 4, "invalid argument")                                       \
    X(COLL_INVALID_USAGE, 5, "invalid usage")                                             \
    X(COLL_REMOTE_ERROR, 6, "a peer failed, disagreed or closed its connection")          \
    X(COLL_IN_PROGRESS, 7, "operation in progress")                                       \
    X(COLL_TIMEOUT, 8, "a peer did not answer within COLL_TIMEOUT_MS")

typedef enum {
#define COLL_X_(name, value, text) name = value,
    COLL_STATUS_MAP(COLL_X_)
#undef COLL_X_
} coll_status_t;

/* ---------------------------------------------------------------------------------------
 * Element types: the twelve of NCCL 2.28, with its values.
 */
typedef enum {
    COLL_INT8 = 0,
    COLL_UINT8 = 1,
    COLL_INT32 = 2,
    COLL_UINT32 = 3,
    COLL_INT64 = 4,
    COLL_UINT64 = 5,
    COLL_FLOAT16 = 6,  /* IEEE 754 binary16 */
    COLL_FLOAT32 = 7,
    COLL_FLOAT64 = 8,
    COLL_BFLOAT16 = 9,
    COLL_FLOAT8E4M3 = 10, /* OCP fp8 E4M3 (finite only: no Inf, NaN = S.1111.111) */
    COLL_FLOAT8E5M2 = 11, /* OCP fp8 E5M2 (IEEE-like, with Inf and NaN) */
    COLL_NUM_DTYPES = 12
} coll_dtype_t;

/* Reduction operators, NCCL's values. Floating-point sums of fp16/bf16/fp8 are computed in
 * fp32 and rounded to nearest even once per pairwise step. AVG sums, then divides once by
 * the number of ranks at the end (integer division for integer types).
 *
 * BAND, BOR and BXOR (bitwise and, or, exclusive or) are coll's own: integer dtypes only
 * (COLL_INVALID_ARGUMENT for floating-point ones), host buffers only (the stream-ordered
 * calls and coll_allreduce_quantized refuse them). Their values are negative because NCCL
 * gives every non-negative value a meaning (0..4 built in, the rest for operators made by
 * ncclRedOpCreatePreMulSum); NCCL's API (src/compat) refuses them. COLL_NUM_OPS counts
 * NCCL's operators only. */
typedef enum {
    COLL_BXOR = -3,
    COLL_BOR = -2,
    COLL_BAND = -1,
    COLL_SUM = 0,
    COLL_PROD = 1,
    COLL_MAX = 2,
    COLL_MIN = 3,
    COLL_AVG = 4,
    COLL_NUM_OPS = 5
} coll_op_t;

/* ---------------------------------------------------------------------------------------
 * Handles.
 */
typedef struct coll_comm coll_comm_t;
typedef struct coll_request coll_request_t;

/* An opaque 128-byte id (the size of ncclUniqueId): the root's address and port, a random
 * 128-bit secret and a random communicator id. Copy it by value to every rank (any way:
 * a file, MPI, a launcher's environment through coll_unique_id_to_string). Whoever knows it
 * can join the communicator: treat it as a password. */
#define COLL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[COLL_UNIQUE_ID_BYTES];
} coll_unique_id_t;

/* ---------------------------------------------------------------------------------------
 * Version and status text.
 */

/* Writes COLL_VERSION_CODE of the library actually loaded. */
COLL_API coll_status_t coll_get_version(int *version_p);

/* A static string for status; "unknown status" for values outside the map. */
COLL_API const char *coll_status_string(coll_status_t status);

/* The message of the last failure: of comm when comm is not NULL, of the calling thread's
 * last failed call otherwise (for calls that had no comm, or failed making one). The string
 * stays valid until the next call on the same comm (or thread). Never NULL: "" when none. */
COLL_API const char *coll_last_error(const coll_comm_t *comm);

/* ---------------------------------------------------------------------------------------
 * Communicators.
 */

/* coll_get_unique_id - make a fresh id and start the bootstrap root in this process: a
 * background thread listens on an address of this host (COLL_SOCKET_IFNAME picks the
 * interface; loopback only when nothing else is up) until all ranks have joined or
 * COLL_TIMEOUT_MS passes. Call it once per communicator, on one process. */
COLL_API coll_status_t coll_get_unique_id(coll_unique_id_t *id_p);

/* Text form of an id (hex, 2 * COLL_UNIQUE_ID_BYTES + 1 bytes with the NUL), for
 * environments and command lines, and back. Parsing rejects any malformed or corrupted id
 * (checksum) with COLL_INVALID_ARGUMENT. */
#define COLL_UNIQUE_ID_STRLEN (2 * COLL_UNIQUE_ID_BYTES + 1)
COLL_API coll_status_t coll_unique_id_to_string(const coll_unique_id_t *id, char *buf,
                                                size_t buflen);
COLL_API coll_status_t coll_unique_id_from_string(const char *str, coll_unique_id_t *id_p);

/* coll_comm_init - join communicator id as rank of nranks. Collective: blocks until every
 * rank has joined (or COLL_TIMEOUT_MS passes: COLL_TIMEOUT). A rank that presents a wrong
 * secret is refused and never counted. Ranks that disagree on nranks, or two ranks with one
 * rank number, fail init with COLL_REMOTE_ERROR (or COLL_INVALID_ARGUMENT locally).
 * The environment (COLL_*) is read once here into the comm's configuration. */
COLL_API coll_status_t coll_comm_init(coll_comm_t **comm_p, int nranks,
                                      const coll_unique_id_t *id, int rank);

/* coll_comm_init_env - as coll_comm_init, with the rank, size and id taken from the
 * environment the launcher set: collrun (COLL_UNIQUE_ID, COLL_RANK, COLL_SIZE). Missing or
 * contradictory variables give COLL_INVALID_ARGUMENT naming the variable. */
COLL_API coll_status_t coll_comm_init_env(coll_comm_t **comm_p);

/* coll_comm_destroy - cancel pending requests (they complete with COLL_INVALID_USAGE),
 * close connections, stop the progress thread, free the comm. Not collective, but on a
 * healthy comm it waits up to 1 s for the other ranks to reach their destroy too, so that a
 * failure on its way (a disagreement a receiver found) is returned here rather than lost;
 * a rank that leaves says so, and is not taken for dead. NULL is accepted; a handle
 * destroyed already, or never made, is COLL_INVALID_ARGUMENT. Requests of comm must not be
 * used afterwards. */
COLL_API coll_status_t coll_comm_destroy(coll_comm_t *comm);

/* coll_comm_abort - fail comm from any thread: every pending and later call on it returns
 * COLL_REMOTE_ERROR at once, and every other rank learns of it within milliseconds (the
 * comm's control tree). The comm must still be destroyed. */
COLL_API coll_status_t coll_comm_abort(coll_comm_t *comm);

COLL_API coll_status_t coll_comm_rank(const coll_comm_t *comm, int *rank_p);
COLL_API coll_status_t coll_comm_size(const coll_comm_t *comm, int *size_p);

/* ---------------------------------------------------------------------------------------
 * Collectives on host memory.
 *
 * Every rank of comm must issue the same collectives in the same order with the same
 * count, dtype, op and root; a disagreement that changes what crosses the wire is detected
 * and gives COLL_REMOTE_ERROR on the ranks involved. count is in elements. sendbuf ==
 * recvbuf means in place. Buffers of count elements must not overlap otherwise.
 */

/* Every rank's recvbuf = op over all ranks' sendbuf. */
COLL_API coll_status_t coll_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm);

/* Root's sendbuf is copied to every rank's recvbuf. sendbuf is read on root only (may be
 * NULL elsewhere); recvbuf is written on every rank, root included (skipped when it equals
 * sendbuf). */
COLL_API coll_status_t coll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, int root, coll_comm_t *comm);

/* Root's recvbuf = op over all ranks' sendbuf. recvbuf is written on root only (may be NULL
 * elsewhere). */
COLL_API coll_status_t coll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                   coll_dtype_t dtype, coll_op_t op, int root,
                                   coll_comm_t *comm);

/* Rank r's count elements of sendbuf land at recvbuf + r * count on every rank (recvbuf holds
 * nranks * count). In place: sendbuf == recvbuf + rank * count. */
COLL_API coll_status_t coll_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      coll_dtype_t dtype, coll_comm_t *comm);

/* recvbuf (recvcount elements) = op over all ranks of their sendbuf + rank * recvcount
 * (sendbuf holds nranks * recvcount). In place: recvbuf == sendbuf + rank * recvcount. */
COLL_API coll_status_t coll_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm);

/* Block j (count elements at sendbuf + j * count) goes to rank j, where it lands at
 * recvbuf + rank * count. Both buffers hold nranks * count; sendbuf == recvbuf works. */
COLL_API coll_status_t coll_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                     coll_dtype_t dtype, coll_comm_t *comm);

/* As coll_alltoall with per-peer counts and displacements (in elements): sendcounts[j]
 * elements at sendbuf + sdispls[j] go to rank j, which receives recvcounts[i] elements from
 * rank i at recvbuf + rdispls[i]. Each pair of counts must agree (else COLL_REMOTE_ERROR).
 * The arrays have nranks entries and are read during the call only. In place, as
 * MPI_IN_PLACE: sendbuf == recvbuf with sendcounts and sdispls equal to recvcounts and
 * rdispls; block j leaves from recvbuf + rdispls[j] and rank j's block lands there (coll
 * copies what it sends first; not inside a group: COLL_INVALID_USAGE). Otherwise a block
 * sent that overlaps a block received is COLL_INVALID_ARGUMENT. */
COLL_API coll_status_t coll_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts, const size_t *rdispls,
                                      coll_dtype_t dtype, coll_comm_t *comm);

/* Every rank's sendcount elements land at root's recvbuf + rank * sendcount. recvbuf is used
 * on root only. In place on root: sendbuf == recvbuf + root * sendcount. */
COLL_API coll_status_t coll_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   coll_dtype_t dtype, int root, coll_comm_t *comm);

/* Root's sendbuf + r * recvcount goes to rank r's recvbuf. sendbuf is used on root only. In
 * place on root: recvbuf == sendbuf + root * recvcount. */
COLL_API coll_status_t coll_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    coll_dtype_t dtype, int root, coll_comm_t *comm);

/* Returns on each rank once every rank has entered it. */
COLL_API coll_status_t coll_barrier(coll_comm_t *comm);

/* Point to point. A send to peer matches the receive from this rank that peer posts in the
 * same position (the k-th send to a peer matches its k-th receive from us); counts and dtypes
 * must agree. A blocking send may return before the receive is posted (data is buffered by
 * the transport) but need not: pair sends and receives that depend on each other in a group.
 * As with NCCL, the operations of one comm (non-blocking ones included) run in the order they
 * were issued: a receive issued before the send it waits for deadlocks unless both are in
 * one group.
 * A send to or receive from oneself is only allowed inside a group (where they pair up). */
COLL_API coll_status_t coll_send(const void *sendbuf, size_t count, coll_dtype_t dtype, int peer,
                                 coll_comm_t *comm);
COLL_API coll_status_t coll_recv(void *recvbuf, size_t count, coll_dtype_t dtype, int peer,
                                 coll_comm_t *comm);

/* ---------------------------------------------------------------------------------------
 * Groups, as NCCL's ncclGroupStart/End. Between coll_group_start and coll_group_end, the
 * blocking calls above (collectives, send, recv; on one or several comms) are checked and
 * recorded and return at once; coll_group_end issues them all together, one operation per
 * comm whose calls run concurrently, and blocks until all are complete. So matched sends
 * and receives in one group never deadlock, whatever their order. Groups nest: only the
 * outermost coll_group_end issues. Per thread. Non-blocking calls inside a group are
 * COLL_INVALID_USAGE; so is coll_group_end without coll_group_start. A call that fails its
 * checks inside a group returns its status at once, and coll_group_end then returns it too
 * without issuing anything. The buffers of grouped calls are borrowed until
 * coll_group_end returns.
 */
COLL_API coll_status_t coll_group_start(void);
COLL_API coll_status_t coll_group_end(void);

/* ---------------------------------------------------------------------------------------
 * Splitting, as ncclCommSplit: collective over comm. Ranks passing the same color form a new
 * communicator, ranked by (key, rank in comm); COLL_SPLIT_NOCOLOR gives *newcomm_p = NULL.
 * The new comm has its own connections and configuration (read from the environment now). */
#define COLL_SPLIT_NOCOLOR (-1)
COLL_API coll_status_t coll_comm_split(coll_comm_t *comm, int color, int key,
                                       coll_comm_t **newcomm_p);

/* coll_comm_shrink - a new communicator of comm's ranks minus the nexclude listed in
 * exclude (as ULFM's MPIX_Comm_shrink and ncclCommShrink): the way to go on after a rank
 * failed. Collective over the survivors only: every rank not in the list calls it with the
 * same list (in any order); the excluded ranks, dead or alive, do not. Works on a failed
 * comm (connections are not needed: the survivors derive the new id from the secret they
 * share) and fails a healthy one, which afterwards can only be destroyed. New ranks keep
 * the old order. A survivor that passes a different list, or never calls, makes the others
 * fail with COLL_TIMEOUT (COLL_BOOTSTRAP_TIMEOUT_MS). comm must still be destroyed. Once
 * comm has failed it keeps its first error, so a failure of the shrink itself is told by
 * coll_last_error(NULL). */
COLL_API coll_status_t coll_comm_shrink(coll_comm_t *comm, const int *exclude, int nexclude,
                                        coll_comm_t **newcomm_p);

/* coll_comm_grow - admit new_nranks - (comm's size) new ranks (as ncclCommGrow): how a job
 * that shrank takes restarted processes back in. One member (rank 0 by convention) makes an
 * id with coll_comm_grow_id (coll_get_unique_id's id serves as well) and hands it to the
 * other members (a broadcast on comm) and to the joiners (any way, as at init: the id is a
 * password). Members call coll_comm_grow with it, collectively over comm; joiners call
 * coll_comm_init(newcomm, new_nranks, id, rank) with ranks comm's size .. new_nranks - 1.
 * The grown comm is a fresh one (own root, secret, connections, configuration read from the
 * environment now); members keep their rank in it. It blocks as coll_comm_init does and
 * ends in COLL_TIMEOUT (COLL_BOOTSTRAP_TIMEOUT_MS) when a joiner or member never comes.
 * comm itself is not touched: calls already issued on it run to their end as if grow had
 * not been called, and it stays usable (for instance to go on when the grow failed) until
 * destroyed. A failed comm cannot grow (COLL_INVALID_USAGE, told by coll_last_error(NULL):
 * the comm keeps its first error): shrink it first. Not inside a group. */
COLL_API coll_status_t coll_comm_grow(coll_comm_t *comm, int new_nranks,
                                      const coll_unique_id_t *id, coll_comm_t **newcomm_p);

/* coll_comm_grow_id - a fresh id for coll_comm_grow of comm, with its bootstrap root started
 * in this process (as coll_get_unique_id). Not collective: one member calls it. */
COLL_API coll_status_t coll_comm_grow_id(coll_comm_t *comm, coll_unique_id_t *id_p);

/* ---------------------------------------------------------------------------------------
 * Non-blocking collectives. Each returns once the operation is queued, with a request in
 * *req_p; operations on one comm complete in the order they were issued. The buffers are
 * borrowed until the request completes. Progress happens in a background thread of the
 * comm, and in whichever thread waits.
 */
COLL_API coll_status_t coll_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm,
                                       coll_request_t **req_p);
COLL_API coll_status_t coll_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_dtype_t dtype, int root, coll_comm_t *comm,
                                       coll_request_t **req_p);
COLL_API coll_status_t coll_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                    coll_dtype_t dtype, coll_op_t op, int root,
                                    coll_comm_t *comm, coll_request_t **req_p);

COLL_API coll_status_t coll_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       coll_dtype_t dtype, coll_comm_t *comm,
                                       coll_request_t **req_p);
COLL_API coll_status_t coll_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                            size_t recvcount, coll_dtype_t dtype, coll_op_t op,
                                            coll_comm_t *comm, coll_request_t **req_p);
COLL_API coll_status_t coll_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, coll_comm_t *comm,
                                      coll_request_t **req_p);
COLL_API coll_status_t coll_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    coll_dtype_t dtype, int root, coll_comm_t *comm,
                                    coll_request_t **req_p);
COLL_API coll_status_t coll_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     coll_dtype_t dtype, int root, coll_comm_t *comm,
                                     coll_request_t **req_p);
COLL_API coll_status_t coll_ibarrier(coll_comm_t *comm, coll_request_t **req_p);
COLL_API coll_status_t coll_isend(const void *sendbuf, size_t count, coll_dtype_t dtype,
                                  int peer, coll_comm_t *comm, coll_request_t **req_p);
COLL_API coll_status_t coll_irecv(void *recvbuf, size_t count, coll_dtype_t dtype, int peer,
                                  coll_comm_t *comm, coll_request_t **req_p);

/* coll_test - *done_p = 1 and the request is released when it has completed (its status is
 * returned); *done_p = 0 and COLL_SUCCESS while it runs. Never blocks. */
COLL_API coll_status_t coll_test(coll_request_t *req, int *done_p);

/* coll_wait - block until req completes, release it and return its status. Waiting spins
 * briefly, then sleeps. */
COLL_API coll_status_t coll_wait(coll_request_t *req);

/* ---------------------------------------------------------------------------------------
 * Stream-ordered collectives, as NCCL's: on CUDA device buffers (or host buffers), ordered
 * on a CUDA stream.
 *
 * Each takes the arguments of the blocking call of the same name plus stream, a
 * cudaStream_t (NULL: the legacy default stream), and returns once its work is queued on
 * the stream: its results are in recvbuf when the stream has reached that point (read them
 * after cudaStreamSynchronize, or order later work after them on the stream). Work queued
 * on the stream before the call (a kernel that fills sendbuf) is seen by the collective.
 * The buffers are borrowed until then. Device buffers move through page-locked staging
 * memory of the comm (COLL_CUDA_STAGING_BYTES) in pieces, copies overlapping the network;
 * host buffers (plain, page-locked or managed) are used in place, still in stream order.
 *
 * Device: a comm uses the CUDA device current when coll_comm_init ran (in a process that had
 * not loaded the CUDA runtime by then: current at its first stream-ordered call); a device
 * buffer or a stream of another device is COLL_INVALID_ARGUMENT naming both devices. A
 * pointer that is neither CUDA memory nor readable host memory (a freed device
 * buffer) is COLL_INVALID_ARGUMENT, or COLL_CUDA_ERROR when CUDA itself says it is bad;
 * nothing touches it. Without CUDA (no libcudart, COLL_CUDA_DISABLE=1, no device) these
 * calls run as the blocking host calls when stream is NULL, and return COLL_INVALID_USAGE
 * with the reason otherwise.
 *
 * Groups: between coll_group_start and coll_group_end they are recorded, and coll_group_end
 * queues them all, each on its own stream, and returns without waiting for them: matched
 * sends and receives of one group never deadlock, and one group may hold calls on several
 * comms. A group may not mix these calls with host calls (COLL_INVALID_USAGE). A group's
 * calls on one comm need, together, at most COLL_CUDA_STAGING_BYTES of staging per piece
 * (else COLL_INVALID_ARGUMENT naming it).
 *
 * Failures: a bad argument is returned at once. A failure after the call returned (a peer
 * died, a timeout, a CUDA error) fails the comm as a host collective's failure does: the
 * stream is released (the results are then undefined), coll_comm_get_async_error reports
 * it, and later calls on the comm return it. coll_comm_abort releases every stream waiting
 * on the comm at once. coll_comm_destroy first lets the queued calls finish (each within
 * COLL_TIMEOUT_MS; abort first to drop them) and waits for the streams to be done with the
 * comm's staging.
 *
 * Rules: every rank cuts messages the same way from COLL_CUDA_STAGING_BYTES, so all ranks
 * must set it alike. While stream-ordered calls of a comm are pending, the host calls
 * (blocking or coll_i*) must not be used on it: they would run out of order with them.
 * A comm's stream-ordered calls run one after the other, in the order they were made, even
 * across streams. One thread at a time per comm, as for every call.
 */
COLL_API coll_status_t coll_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm,
                                             void *stream);
COLL_API coll_status_t coll_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             coll_dtype_t dtype, int root, coll_comm_t *comm,
                                             void *stream);
COLL_API coll_status_t coll_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                          coll_dtype_t dtype, coll_op_t op, int root,
                                          coll_comm_t *comm, void *stream);
COLL_API coll_status_t coll_allgather_stream(const void *sendbuf, void *recvbuf,
                                             size_t sendcount, coll_dtype_t dtype,
                                             coll_comm_t *comm, void *stream);
COLL_API coll_status_t coll_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                                  size_t recvcount, coll_dtype_t dtype,
                                                  coll_op_t op, coll_comm_t *comm, void *stream);
COLL_API coll_status_t coll_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                            coll_dtype_t dtype, coll_comm_t *comm, void *stream);
COLL_API coll_status_t coll_send_stream(const void *sendbuf, size_t count, coll_dtype_t dtype,
                                        int peer, coll_comm_t *comm, void *stream);
COLL_API coll_status_t coll_recv_stream(void *recvbuf, size_t count, coll_dtype_t dtype,
                                        int peer, coll_comm_t *comm, void *stream);

/* coll_comm_get_async_error - *status_p = the failure that made comm unusable (a peer's
 * death, a timeout, an abort, a failed stream-ordered collective), COLL_SUCCESS while it is
 * healthy; its message is coll_last_error(comm). Never blocks; any thread. */
COLL_API coll_status_t coll_comm_get_async_error(coll_comm_t *comm, coll_status_t *status_p);

/* ---------------------------------------------------------------------------------------
 * Quantized all-reduce: gradients cross the wire in fewer bits.
 *
 * Quantize once: each rank encodes the slice of its input that each rank owns and sends it
 * there; the owner decodes every rank's slice, sums in fp32 (in rank order), encodes the
 * result once, and an all-gather moves those bytes; every rank decodes the same bytes, so
 * all ranks end with bitwise identical results. No value is requantized per hop, so the
 * error does not grow with the number of ranks: per element it is at most the sum of each
 * rank's encoding error plus one encoding error of the result. Small messages instead
 * all-gather every rank's encoded vector and every rank sums them in rank order (one
 * encoding per input, none of the result).
 *
 * Codecs (bytes per element; block codecs add one scale of 4 bytes, or 2 with an fp16
 * scale, per block of `block` elements):
 *   FP16, BF16  2       per element, no scale
 *   INT8        1       integers -127..127 times blockmax / 127
 *   E4M3, E5M2  1       OCP fp8 scaled so that blockmax maps to the format's largest value
 *   INT4        1/2     integers -7..7 times blockmax / 7
 *   E3M0        1/2     4-bit float: 0 or +-blockmax * 2^-k, k = 0..6
 *   SIGN1       1/8     sign of each element times the block's mean |x|
 * Rounding is to nearest (ties to even) unless stochastic is set; stochastic rounding is
 * unbiased and reproducible (a hash of seed, rank, call and element index).
 *
 * NaN or Inf in any rank's input makes the affected elements NaN on every rank (for block
 * codecs, the whole block they are in), never a finite value; so does a sum that overflows
 * fp32.
 */
typedef enum {
    COLL_QUANT_FP16 = 0,
    COLL_QUANT_BF16 = 1,
    COLL_QUANT_INT8 = 2,
    COLL_QUANT_E4M3 = 3,
    COLL_QUANT_E5M2 = 4,
    COLL_QUANT_INT4 = 5,
    COLL_QUANT_E3M0 = 6,
    COLL_QUANT_SIGN1 = 7,
    COLL_QUANT_NUM_CODECS = 8
} coll_quant_codec_t;

/* Which exchange: AUTO picks GATHER when the whole encoded vector times nranks is at most
 * 64 KiB or there are fewer blocks than ranks; else HIER when the ranks form several nodes
 * of equally many ranks (ranks sharing a host and a listen address, or consecutive groups
 * of COLL_QUANT_NODE_RANKS), SCATTER otherwise. HIER sums each node's inputs exactly (fp32,
 * over the node's own links) and runs quantize-once between nodes only, so only the
 * node-to-node links carry encoded data: its error bound is that of SCATTER with one
 * input per node. Forced HIER on ranks that do not form such nodes runs SCATTER. */
typedef enum {
    COLL_QUANT_ALGO_AUTO = 0,
    COLL_QUANT_ALGO_SCATTER = 1, /* to the owners, sum, encode once, all-gather */
    COLL_QUANT_ALGO_GATHER = 2,  /* all-gather every input, every rank sums */
    COLL_QUANT_ALGO_HIER = 3     /* fp32 within nodes, SCATTER between them */
} coll_quant_algo_t;

/* Start from COLL_QUANT_CONFIG_INIT(codec); fields are only ever appended. */
typedef struct {
    size_t size;                /* sizeof(coll_quant_config_t) */
    coll_quant_codec_t codec;
    uint32_t block;             /* elements per scale: 1..65536, even for INT4/E3M0 (256) */
    coll_dtype_t scale_dtype;   /* COLL_FLOAT32 (exact) or COLL_FLOAT16 (2 bytes less) */
    int stochastic;             /* 0: round to nearest even; 1: stochastic rounding */
    uint64_t seed;              /* with stochastic: the noise stream */
    coll_quant_algo_t algo;
} coll_quant_config_t;

#define COLL_QUANT_CONFIG_INIT(c)                                                         \
    {sizeof(coll_quant_config_t), (c), 256u, COLL_FLOAT32, 0, 0, COLL_QUANT_ALGO_AUTO}

/* Error feedback state of one tensor on one comm: what quantization dropped in one call is
 * added to the input of the next, so over many calls the sum of the results tracks the
 * exact sum within one call's error instead of drifting. Created for a comm and a count;
 * one per tensor. */
typedef struct coll_qfeedback coll_quant_feedback_t;

/* coll_allreduce_quantized - as coll_allreduce (same buffers, in place allowed, blocking),
 * for dtype COLL_FLOAT32, COLL_FLOAT16 or COLL_BFLOAT16 and op COLL_SUM or COLL_AVG, with
 * the data on the wire encoded as config says. config NULL: the comm's COLL_QUANT codec
 * (int8 when COLL_QUANT is off). fb NULL: no error feedback; else a state made for this
 * comm and count, updated by the call. Every rank must pass the same count, dtype, op and
 * config (seed aside). Not inside a group. COLL_INVALID_ARGUMENT (with a message) for
 * another dtype or op, a bad config (size, codec, block 0, above 65536 or odd for a
 * 4-bit codec, scale dtype), or fb made for another comm or count; COLL_INVALID_USAGE
 * inside a group. */
COLL_API coll_status_t coll_allreduce_quantized(const void *sendbuf, void *recvbuf,
                                                size_t count, coll_dtype_t dtype, coll_op_t op,
                                                const coll_quant_config_t *config,
                                                coll_quant_feedback_t *fb, coll_comm_t *comm);

/* Make a zero feedback state for count elements on comm (not collective). */
COLL_API coll_status_t coll_quant_feedback_create(coll_comm_t *comm, size_t count,
                                                  coll_quant_feedback_t **fb_p);
/* Zero the residuals (e.g. after a step was skipped because its result was NaN). */
COLL_API coll_status_t coll_quant_feedback_reset(coll_quant_feedback_t *fb);
/* Free fb; NULL is accepted. Destroy it before its comm. */
COLL_API coll_status_t coll_quant_feedback_destroy(coll_quant_feedback_t *fb);

/* Payload bytes this rank has handed to the transport for sending on comm since it was
 * made, all collectives and sends counted (framing headers not included; on the shared-memory
 * fast path, the bytes this rank writes into the shared segment for its peers to read: its
 * input, and the slice it reduces for them). With COLL_QUANT
 * set (a codec name, as coll_quant_codec_t in lower case: int8, e4m3, ...), coll_allreduce
 * of fp32/fp16/bf16 sum or avg of at least COLL_QUANT_MIN_BYTES runs quantized. */
COLL_API coll_status_t coll_comm_bytes_sent(const coll_comm_t *comm, uint64_t *bytes_p);

#ifdef __cplusplus
}
#endif

#endif /* COLL_H */
