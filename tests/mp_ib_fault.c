/*
 * mp_ib_fault.c - faults of the ib transport between real processes, through the public API:
 *
 *   mp_ib_fault killed   3 ranks; rank 2 is SIGKILLed in the middle of a large all-reduce:
 *                        ranks 0 and 1 must get COLL_REMOTE_ERROR, never hang
 *   mp_ib_fault badrkey  3 ranks; rank 0's next RDMA write carries a wrong rkey: every rank
 *                        gets COLL_REMOTE_ERROR, and the memory past each receive buffer is
 *                        untouched
 *
 * The program is its own launcher (fork), because the point is a rank dying on purpose. It
 * needs COLL_TRANSPORT=ib and COLL_IB_FAKE (tests/meson.build sets them). Exit status 0 means
 * every check held.
 */
#include <coll.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 3
#define COUNT (4u << 20) /* floats: 16 MiB, many chunks in flight */
#define GUARD 4096       /* bytes past the receive buffer that must stay as they were */

static int fail(int rank, const char *what, coll_status_t st, coll_comm_t *comm)
{
    fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, coll_status_string(st),
            coll_last_error(comm) ? coll_last_error(comm) : "");
    return 1;
}

static int run_rank(int rank, const coll_unique_id_t *id, const char *mode)
{
    coll_comm_t *comm;
    float *send = malloc(COUNT * sizeof(float));
    unsigned char *recv = malloc(COUNT * sizeof(float) + GUARD);
    coll_status_t st;

    if (!send || !recv)
        return 1;
    for (size_t i = 0; i < COUNT; i++)
        send[i] = (float)(rank + 1);
    memset(recv, 0xcd, COUNT * sizeof(float) + GUARD);
    st = coll_comm_init(&comm, NRANKS, id, rank);
    if (st != COLL_SUCCESS)
        return fail(rank, "init", st, NULL);
    /* a healthy round first: every link is up when the fault comes */
    st = coll_allreduce(send, recv, 1024, COLL_FLOAT32, COLL_SUM, comm);
    if (st != COLL_SUCCESS)
        return fail(rank, "warm-up all-reduce", st, comm);
    if (((float *)recv)[1023] != 6.0f) {
        fprintf(stderr, "rank %d: warm-up all-reduce gave %g\n", rank, ((float *)recv)[1023]);
        return 1;
    }
    if (!strcmp(mode, "killed") && rank == 2) {
        coll_request_t *req;
        struct timespec ts = {0, 2000000};
        /* start the large all-reduce, then die while it moves */
        coll_iallreduce(send, recv, COUNT, COLL_FLOAT32, COLL_SUM, comm, &req);
        nanosleep(&ts, NULL);
        raise(SIGKILL);
    }
    if (!strcmp(mode, "badrkey") && rank == 0) {
        void *h = dlopen(getenv("COLL_IB_FAKE"), RTLD_NOW | RTLD_NOLOAD);
        void (*inject)(int) = NULL;
        if (h)
            *(void **)&inject = dlsym(h, "coll_fakeverbs_inject_bad_rkey");
        if (!inject) {
            fprintf(stderr, "rank 0: the emulator's fault hook is missing\n");
            return 1;
        }
        inject(1);
    }
    st = coll_allreduce(send, recv, COUNT, COLL_FLOAT32, COLL_SUM, comm);
    /* A rank still connecting to peers that failed and left has no queue pair to see the
     * failure on: verbs drops datagrams to a gone process silently, so (as on hardware) the
     * deadline is what tells it. That is an error too, only a later one. */
    bool late = st == COLL_TIMEOUT && !strcmp(mode, "badrkey") && rank != 0 &&
                coll_last_error(comm) && strstr(coll_last_error(comm), "waiting for a connection");
    if (st != COLL_REMOTE_ERROR && !late)
        return fail(rank, "expected COLL_REMOTE_ERROR from the faulty all-reduce", st, comm);
    for (size_t i = 0; i < GUARD; i++)
        if (recv[COUNT * sizeof(float) + i] != 0xcd) {
            fprintf(stderr, "rank %d: memory past the receive buffer changed\n", rank);
            return 1;
        }
    fprintf(stderr, "rank %d: got %s as expected: %s\n", rank, coll_status_string(st),
            coll_last_error(comm));
    coll_comm_destroy(comm);
    free(send);
    free(recv);
    return 0;
}

/* The id comes from a process of its own that keeps the bootstrap root's thread: forking
 * the ranks from a process with a running thread can leave a child deadlocked on an
 * allocator lock that thread held (it does under ASan). */
static pid_t id_holder(coll_unique_id_t *id)
{
    int p[2];
    pid_t pid;
    ssize_t n;

    if (pipe(p) != 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        coll_unique_id_t mine;
        close(p[0]);
        if (coll_get_unique_id(&mine) != COLL_SUCCESS) {
            fprintf(stderr, "coll_get_unique_id: %s\n", coll_last_error(NULL));
            _exit(1);
        }
        if (write(p[1], &mine, sizeof(mine)) != (ssize_t)sizeof(mine))
            _exit(1);
        close(p[1]);
        for (;;)
            pause(); /* killed once the ranks are done */
    }
    close(p[1]);
    n = read(p[0], id, sizeof(*id));
    close(p[0]);
    if (n != (ssize_t)sizeof(*id)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    coll_unique_id_t id;
    pid_t pids[NRANKS], holder;
    int bad = 0;

    if (strcmp(mode, "killed") && strcmp(mode, "badrkey")) {
        fprintf(stderr, "usage: mp_ib_fault killed|badrkey\n");
        return 2;
    }
    holder = id_holder(&id);
    if (holder < 0)
        return 1;
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        if (pids[r] < 0)
            return 1;
        if (pids[r] == 0)
            _exit(run_rank(r, &id, mode));
    }
    for (int r = 0; r < NRANKS; r++) {
        int status;
        bool killed_ok;

        if (waitpid(pids[r], &status, 0) != pids[r])
            return 1;
        killed_ok = !strcmp(mode, "killed") && r == 2 && WIFSIGNALED(status) &&
                    WTERMSIG(status) == SIGKILL;
        if (!killed_ok && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "rank %d failed (status %#x)\n", r, status);
            bad = 1;
        }
    }
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    printf("%s: %s\n", mode, bad ? "FAILED" : "every rank saw the fault");
    return bad;
}
