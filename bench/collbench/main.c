/*
 * collbench - a benchmark of coll's collectives in the manner of nccl-tests: the same
 * programs, flags, table and bandwidth arithmetic, on host memory or (--memtype cuda) on
 * CUDA device memory through the stream-ordered calls; plus JSON/CSV records, plots,
 * comparisons and its own local launch.
 *
 * Layout (bench/collbench/, one concern a file, collbench.h between them):
 *   main.c       this comment; main: options, the comm, buffers, header, sweeps, records
 *   options.c    the collectives, dtypes and ops by nccl-tests' names; the command line
 *   patterns.c   check data: fill a buffer, count its wrong elements (see below)
 *   run.c        the calls of each API form, -T's watchdog, one row, sweeps, table header
 *   records.c    --json (and its snapshot under a signal), --csv, -F, --compare, --plot
 *   device.c     --memtype cuda: buffers, stream and copies through coll's CUDA runtime
 *   launch.c     joining a comm: a launcher's, alone, or --np N (exec collrun)
 *   explain.c    what runs each call and its price (records, --explain); --help-env, --topo
 *   calibrate.c  --calibrate: links, reductions, memory into the cost model's file
 * Beyond coll.h it includes only src/base's headers and src/api/introspect.h (the tools').
 *
 *   collrun -n 4 collbench allreduce -b 8 -e 128M -f 2 -c 1
 *   collbench allreduce --np 4 -b 8 -e 128M -f 2 --json run.json --plot run.png
 *   all_reduce_perf -b 8 -e 128M -f 2          (a link to collbench: argv[0] selects)
 *   collbench --compare before.json after.json --plot cmp.png
 *
 * Under a launcher (collrun: COLL_UNIQUE_ID in the environment) it joins the launcher's
 * communicator; with --np N it execs the collrun found next to itself (so collrun's job
 * control, Ctrl-C included, is the one that applies); otherwise it is a communicator of one.
 *
 * Sizes follow nccl-tests: the swept size S gives count = S / sizeof(dtype) elements and
 *   allreduce, broadcast, reduce, sendrecv   count elements per rank; busbw factor
 *                                            2(n-1)/n (allreduce) or 1
 *   allgather, gather                        count/n elements sent per rank, n of them
 *                                            received; size column = received bytes
 *   reducescatter, scatter                   n * (count/n) sent, count/n received
 *   alltoall                                 count/n to each peer
 * and for the last three groups algbw = n * (count/n) * sizeof / time, busbw = algbw (n-1)/n.
 * The count column is the count passed to the call. barrier has one row of size 0.
 *
 * Per row (a size, dtype, op and root), out-of-place then in-place: with -c N, N rounds of
 * fill, one call, count the wrong elements on every rank and sum them; then warm up, time
 * the iterations, and combine the ranks' average times per call as -a says (nccl-tests:
 * 0 rank 0, 1 mean, 2 min, 3 max).
 *
 * Check data: every buffer is a sequence of blocks (one, or one per rank), each block a
 * period of PERIOD elements repeated. Blocks that only move (gathers, scatters, all-to-all,
 * broadcast, send/recv) hold bytes hashed from (sender, block, index, round), so a block in
 * the wrong place or from the wrong sender differs almost everywhere. Blocks that are
 * reduced hold small integers (rotated per block and round) chosen so that any partial sum
 * or product over n ranks is exact in the dtype: the expected result does not depend on the
 * order in which ranks are combined, and a missing or doubled contribution shows. Receive
 * buffers start as the bitwise complement of what is expected, so an element nobody wrote
 * is wrong.
 *
 * --memtype cuda: buffers from cudaMalloc on the rank's device (--device, else the local
 * rank modulo the devices), calls queued on one stream; a timed batch is the host clock
 * around the calls and the cudaStreamSynchronize that follows, as nccl-tests times them.
 * Check patterns are made and checked in host images copied with cudaMemcpy.
 *
 * Exit status: 0 right; 1 wrong results, a failed call, or (--memtype cuda) no usable CUDA
 * runtime or device; 2 bad arguments; 124 -T fired.
 */
#include "collbench.h"

#ifdef COLLBENCH_TEST_HOOKS
/* COLLBENCH_FAULT=stall-start / stall-final: rank 0 says so on stderr and waits up to 30 s
 * at that point (once the record file is open; just before the final record is written),
 * so that a test can press Ctrl-C there; a signal noted ends the wait, as a final record
 * that takes milliseconds would be done before collrun's SIGKILL. */
static void fault_stall(const struct bench *b, const char *where)
{
    if (!b->fault || b->rank != 0 || strcmp(b->fault, where) != 0)
        return;
    fprintf(stderr, "collbench: %s: waiting\n", where);
    for (int i = 0; i < 300 && !snap_signalled(); i++)
        usleep(100000);
}
#else
#define fault_stall(b, where) ((void)0)
#endif

int main(int argc, char **argv)
{
    struct bench b = {.comm = NULL, .argc = argc, .argv = argv};
    char plot_json[64] = "";
    coll_status_t st;
    int rc, ok, all_ok, cuda_rc = 0;
    bool have_ranks = false, paper;

    prog_name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    rc = parse_opts(argc, argv, &b.o);
    if (rc >= 0)
        goto out_opts;
    switch (b.o.mode) {
    case MODE_HELP:
        usage(stdout, prog_name);
        rc = 0;
        goto out_opts;
    case MODE_HELP_ENV:
        rc = help_env();
        goto out_opts;
    case MODE_TOPO:
        rc = print_topo();
        goto out_opts;
    case MODE_VERSION:
        rc = print_version();
        goto out_opts;
    case MODE_COMPARE:
        rc = run_compare(&b.o, argv);
        goto out_opts;
    case MODE_RUN:
        break;
    }
    /* --explain --np N explains the run --np N would start, on the comm of those N ranks
     * (one host: shared memory, the flat path where it applies); only --per-host K, hosts
     * that are not here, stays on paper with nothing started. */
    paper = b.o.explain && b.o.np && b.o.per_host > 0;
    if (b.o.bind && (!b.o.np || paper || coll__ix_launched())) {
        rc = usage_error("%s", "--bind-to is collrun's: it needs --np N outside a launcher "
                               "(bind with the launcher's own option otherwise)");
        goto out_opts;
    }
    if (b.o.np && !paper) {
        if (!coll__ix_launched()) {
            rc = exec_launcher(&b.o, argc, argv);
            goto out_opts;
        }
        /* Under a launcher already: --np must agree with it. */
        if (!getenv("COLL_SIZE") || atoi(getenv("COLL_SIZE")) != b.o.np) {
            rc = usage_error("--np %d, but the launcher started %s ranks (COLL_SIZE)", b.o.np,
                             getenv("COLL_SIZE") ? getenv("COLL_SIZE") : "an unknown number of");
            goto out_opts;
        }
    }
    /* --algo and --transport are the environment the comm reads at init. */
    if ((b.o.algo && setenv("COLL_ALGO", b.o.algo, 1) != 0) ||
        (b.o.transport && setenv("COLL_TRANSPORT", b.o.transport, 1) != 0)) {
        fprintf(stderr, "collbench: setenv: %s\n", strerror(errno));
        rc = 1;
        goto out_opts;
    }
    if (b.o.calibrate && getenv("COLL_CALIB_FILE") && *getenv("COLL_CALIB_FILE")) {
        /* the file is what --calibrate writes: the comm must not insist on reading it */
        b.calib_out = strdup(getenv("COLL_CALIB_FILE"));
        if (!b.calib_out || unsetenv("COLL_CALIB_FILE") != 0) {
            fprintf(stderr, "collbench: out of memory\n");
            rc = 1;
            goto out_opts;
        }
    }
#ifdef COLLBENCH_TEST_HOOKS
    b.fault = getenv("COLLBENCH_FAULT");
    if (b.fault && !*b.fault)
        b.fault = NULL;
#endif
    if (gethostname(b.hostname, sizeof(b.hostname)) != 0)
        snprintf(b.hostname, sizeof(b.hostname), "unknown");
    b.hostname[sizeof(b.hostname) - 1] = '\0';

    /* The device is current before the comm exists: the comm takes it (coll.h). */
    if (b.o.memtype_cuda && !b.o.explain) {
        cuda_rc = cuda_pick_device(&b.o, &b.rt, &b.device, b.cuda_msg, sizeof(b.cuda_msg));
        b.cuda = cuda_rc == 0;
    }
    /* --explain --exact: the selector and the ranking walk the schedules (COLL_SELECT is
     * read at comm creation) */
    if (b.o.exact && setenv("COLL_SELECT", "exact", 1) != 0) {
        fprintf(stderr, "%s: --exact: cannot set COLL_SELECT\n", prog_name);
        rc = 1;
        goto out_opts;
    }
    st = comm_open(&b.comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "collbench: cannot join the communicator: %s: %s\n", coll_status_string(st),
                coll_last_error(NULL));
        if (cuda_rc)
            fprintf(stderr, "%s\n", b.cuda_msg);
        rc = st == COLL_INVALID_ARGUMENT ? EXIT_USAGE : 1;
        goto out_opts;
    }
    rc = 1;
    if ((st = coll_comm_rank(b.comm, &b.rank)) != COLL_SUCCESS ||
        (st = coll_comm_size(b.comm, &b.nranks)) != COLL_SUCCESS) {
        lib_error(&b, "coll_comm_rank/size", st);
        goto out_destroy;
    }
    if ((st = coll__ix_comm(b.comm, &b.desc)) != COLL_SUCCESS) {
        lib_error(&b, "describing the communicator", st);
        goto out_destroy;
    }
    if (b.o.memtype_cuda && !b.o.explain) {
        rc = cuda_agree(&b, cuda_rc);
        if (rc)
            goto out_destroy;
        rc = 1;
    }
#ifdef COLLBENCH_TEST_HOOKS
    b.fault_rank = b.nranks - 1;
    if (getenv("COLLBENCH_FAULT_RANK"))
        b.fault_rank = atoi(getenv("COLLBENCH_FAULT_RANK"));
#endif
    {
        int n = paper ? b.o.np : b.nranks;
        if (coll__colls[b.o.coll].root != COLL_ROOT_NONE && !b.o.all_roots && b.o.root >= n) {
            if (b.rank == 0) {
                fprintf(stderr, "%s: root %d out of range for %d rank%s\n", prog_name, b.o.root, n,
                        n == 1 ? "" : "s");
                fprintf(stderr, "Try '%s --help'.\n", prog_name);
            }
            /* every rank exits 2: none before rank 0 has said why (a launcher kills the
             * others when the first one ends) */
            (void)coll_allreduce(&n, &ok, 1, COLL_INT32, COLL_SUM, b.comm);
            rc = EXIT_USAGE;
            goto out_destroy;
        }
    }
    if (b.o.explain) {
        rc = explain(&b);
        /* nobody leaves before rank 0 has explained: its comm would end under it */
        if (b.nranks > 1 && coll_barrier(b.comm) != COLL_SUCCESS && rc == 0)
            rc = 1;
        goto out_destroy;
    }
    if (b.o.calibrate) {
        /* nothing is recorded: the calibration file is the output */
        b.o.json_path = b.o.csv_path = b.o.times_path = b.o.plot_path = NULL;
        if (b.o.max_bytes < (8u << 20))
            b.o.max_bytes = 8u << 20;
    }
    if (b.o.plot_path && !b.o.json_path && b.rank == 0) {
        /* --plot reads the run's JSON: keep one for it when none was asked for */
        int fd;
        snprintf(plot_json, sizeof(plot_json), "/tmp/collbench-plot.XXXXXX");
        fd = mkstemp(plot_json);
        if (fd < 0) {
            fprintf(stderr, "collbench: --plot: cannot make a temporary file: %s\n",
                    strerror(errno));
            plot_json[0] = '\0';
        } else {
            close(fd);
            b.o.json_path = plot_json;
        }
    }

    /* Every rank must get its buffers and rank 0 its files, or none goes on: one rank
     * missing from the first collective would hold the others until the timeout. */
    b.bufsize = (size_t)b.o.max_bytes + 64; /* never 0; a little slack against overruns */
    if (b.cuda) {
        ok = cuda_alloc(&b);
    } else {
        b.sendbuf = malloc(b.bufsize);
        b.recvbuf = malloc(b.bufsize);
        ok = b.sendbuf && b.recvbuf;
        if (!ok)
            fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes\n", b.rank,
                    b.bufsize);
    }
    b.pat = malloc(PERIOD * sizeof(uint64_t));
    b.times = malloc((size_t)b.nranks * sizeof(*b.times));
    b.hosts = malloc((size_t)b.nranks * HOST_MAX);
    b.pids = malloc((size_t)b.nranks * sizeof(*b.pids));
    b.devices = malloc((size_t)b.nranks * sizeof(*b.devices));
    if (ok && !(b.pat && b.times && b.hosts && b.pids && b.devices)) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", b.rank);
        ok = 0;
    }
    if (ok && b.rank == 0 && !open_outputs(&b))
        ok = 0;
    /* from the moment the file is truncated, a signal leaves a record in it */
    if (ok && b.rank == 0)
        snap_start(&b);
    if (ok)
        fault_stall(&b, "stall-start");
    if (ok && watchdog_start(&b.wd, b.comm, b.rank, b.o.timeout_s))
        ok = 0;
    st = coll_allreduce(&ok, &all_ok, 1, COLL_INT32, COLL_MIN, b.comm);
    if (st != COLL_SUCCESS) {
        lib_error(&b, "allreduce", st);
        goto out_free;
    }
    if (!all_ok)
        goto out_free;
    /* Untouched pages would make the first size pay for page faults (cuda_alloc sets the
     * device buffers). */
    if (!b.cuda) {
        memset(b.sendbuf, 0, b.bufsize);
        memset(b.recvbuf, 0, b.bufsize);
    }
    watchdog_arm(&b.wd, "the exchange of host names");
    st = exchange_ranks(&b);
    watchdog_arm(&b.wd, NULL);
    if (st != COLL_SUCCESS) {
        rc = lib_error(&b, "allreduce of the host names", st);
        goto out_free;
    }
    have_ranks = true;
    b.ranks_known = true;
    watchdog_arm(&b.wd, "the exchange of boot ids");
    st = one_clock(&b);
    watchdog_arm(&b.wd, NULL);
    if (st != COLL_SUCCESS) {
        rc = lib_error(&b, "allreduce of the boot ids", st);
        goto out_free;
    }
    if (b.o.average == 4 && !b.one_clock && !b.o.shared_clock) {
        /* every rank knows one_clock alike: all of them stop here */
        if (b.rank == 0)
            fprintf(stderr, "collbench: -a 4 compares instants taken on different ranks, but "
                            "these ranks run on more than one machine (their boot ids differ): "
                            "add --shared-clock if the hosts' CLOCK_REALTIME is synchronized "
                            "(PTP), or time with -a 0-3\n");
        rc = 2;
        goto out_free;
    }
    if (b.rank == 0)
        snap_update(&b);
    b.progress = b.rank == 0 && isatty(STDERR_FILENO);
    b.progress_delay = 1.0;
    if (getenv("COLLBENCH_PROGRESS_DELAY"))
        b.progress_delay = atof(getenv("COLLBENCH_PROGRESS_DELAY"));

    if (b.o.calibrate) {
        rc = calibrate(&b);
        goto out_free;
    }
    print_header(&b);
    rc = run_sweeps(&b);
    if (b.rank == 0)
        progress_clear(&b);
    if (rc == 0) {
        if (b.rank == 0) {
            printf("# Out of bounds values : %" PRIu64 " %s\n", b.wrong_total,
                   b.wrong_total ? "FAILED" : "OK");
            printf("# Avg bus bandwidth    : %g\n", b.nresults ? b.busbw_sum / b.nresults : 0.0);
            printf("#\n");
            fflush(stdout);
        }
        rc = b.wrong_total ? 1 : 0;
    }

out_free:
    watchdog_stop(&b.wd);
    if (b.rank == 0) {
        snap_final_begin();
        fault_stall(&b, "stall-final");
        if (b.json)
            write_json(&b, b.json,
                       snap_signalled() ? "interrupted"
                       : rc == 0      ? "ok"
                       : b.wrong_total ? "wrong results"
                                       : "failed");
        if (!close_outputs(&b) && rc == 0)
            rc = 1;
        snap_final_end();
    }
    if (b.rank == 0 && b.o.plot_path && have_ranks && b.o.json_path) {
        int prc = run_plot(b.o.json_path, b.o.plot_path);
        if (prc && rc == 0)
            rc = prc;
    }
    if (have_ranks) {
        /* Nobody leaves before rank 0 has its files written: a launcher kills the others
         * when one rank exits non-zero (wrong results do that on every rank). On a failed
         * comm this returns at once. */
        int one = 1;
        (void)coll_allreduce(&one, &all_ok, 1, COLL_INT32, COLL_SUM, b.comm);
    }
    if (b.cuda) {
        cuda_free(&b);
        free(b.hsend);
        free(b.hrecv);
    } else {
        free(b.sendbuf);
        free(b.recvbuf);
    }
    free(b.devices);
    free(b.pat);
    free(b.times);
    free(b.hosts);
    free(b.pids);
    free(b.rows);
out_destroy:
    coll__ix_comm_free(&b.desc);
    st = coll_comm_destroy(b.comm);
    if (st != COLL_SUCCESS && rc == 0)
        rc = lib_error(&b, "coll_comm_destroy", st);
    if (plot_json[0])
        unlink(plot_json);
out_opts:
    free((char *)b.calib_out);
    free(b.o.files);
    return rc;
}
