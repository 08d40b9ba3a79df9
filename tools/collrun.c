/*
 * collrun - start N ranks of a program on this host, as a communicator of coll.
 *
 *   collrun -n N [--tag-output] [--timeout SEC] [--bind-to auto|core|none] [--] prog args...
 *
 * collrun makes a unique id (which starts the bootstrap root thread inside collrun, so
 * collrun stays alive while the ranks run) and starts N children with COLL_UNIQUE_ID,
 * COLL_RANK, COLL_SIZE, COLL_LOCAL_RANK and COLL_LOCAL_SIZE set: what coll_comm_init_env
 * reads.
 *
 * Job control, in the manner of mpirun and timeout(1):
 *   - each rank runs in a process group of its own, so that a signal reaches whatever the
 *     rank started too (a shell's children); SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
 *     collrun are forwarded to every rank; so is SIGUSR1, which asks the ranks for the stall
 *     table (every rank's call and what it waits on, printed by rank 0) and interrupts
 *     nothing;
 *   - the first rank to fail (non-zero exit or killed by a signal) is reported on stderr;
 *     the others get SIGTERM, then SIGKILL after a grace period, and collrun exits with the
 *     failed rank's status (128 + signal for a signal, as shells do);
 *   - once collrun has forwarded a signal, a failure is the signal's: collrun exits 128 +
 *     that signal (130 for Ctrl-C), whichever rank it saw die first. The ranks get the
 *     signal one after another, so one may exit 1 on seeing a peer killed by it (coll
 *     reports a peer's death) before its own arrives, and its status must not decide;
 *   - --timeout SEC kills everything the same way after SEC seconds and exits 124;
 *   - PR_SET_PDEATHSIG kills a rank whose collrun dies, even by SIGKILL.
 *
 * --bind-to core pins rank r to the r-th CPU collrun may use (round robin when there are
 * more ranks than CPUs), as mpirun's --bind-to core: a rank that polls shared memory keeps
 * its cache and never waits for the scheduler to bring its peer back. The ranks are told
 * how many CPUs they share (COLL_HOST_CPUS): one bound to a single CPU would otherwise
 * think itself oversubscribed and yield where it should spin. auto, the default, binds as
 * core does, also when ranks outnumber the CPUs (without core's notice): unbound, the
 * kernel tends to keep two ranks that wake each other on one CPU while the other idles,
 * and ranks that poll then take turns at a fraction of their speed, for as long as the job
 * runs (measured: 8 MiB all-reduces at 2 ranks on 2 CPUs slowed 2-3x for the rest of a run
 * after a burst of other work; bound, they recovered). With more ranks than CPUs the same
 * holds: 4 ranks on 2 CPUs ran a 16 MiB all-reduce at 1.5-1.7 GB/s in 5 of 6 unbound runs
 * and at 4.1-4.9 in 6 of 6 bound ones, and over every collective, form and size of
 * bench/paths.sh at 4 and 8 ranks, bound runs had 1.2-1.3x the busbw (none slower)
 * (docs/performance.md, "One data path").
 *
 * Divisions: options; environment and program lookup; output tagging; children; the event
 * loop (signalfd + poll, one thread of ours besides the library's root thread); main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* signalfd, pipe2, asprintf, strsignal */
#endif
#include <coll.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_RANKS 4096
#define GRACE_MS 2000       /* between SIGTERM and SIGKILL */
#define MAX_LINE (1u << 20) /* a longer line is cut into pieces of this size */
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124     /* as timeout(1) */
#define EXIT_CANNOT_EXEC 126 /* as shells */
#define EXIT_NOT_FOUND 127

/* The signals collrun forwards to the ranks. */
static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1};

enum { BIND_AUTO, BIND_CORE, BIND_NONE };

struct opts {
    int nranks;
    bool tag_output;
    int bind;         /* --bind-to: BIND_AUTO (default), BIND_CORE, BIND_NONE */
    double timeout_s; /* 0: none */
    char **argv;      /* the program and its arguments, NULL-terminated */
};

/* One captured output stream of one rank (only with --tag-output). */
struct stream {
    int fd;     /* read end; -1 once at EOF */
    int out_fd; /* where the tagged lines go: 1 or 2 */
    char *buf;
    size_t len, cap;
};

struct rank {
    int cpu;    /* --bind-to core: the CPU it is pinned to; -1: not pinned */
    pid_t pid;  /* 0 once reaped */
    pid_t pgid; /* its process group (= its first pid), kept after reaping */
    int status; /* wait status, valid once reaped */
    char **envp;
    struct stream out, err;
};

struct job {
    struct opts opts;
    struct rank *ranks;
    int running;     /* children not reaped yet */
    int failed_rank; /* first rank that failed, -1 if none */
    int exit_status; /* what collrun exits with */
    bool timed_out;
    int interrupted; /* the first signal collrun forwarded, 0: none */
    bool killing; /* SIGTERM sent to all; SIGKILL at kill_at_ns */
    uint64_t kill_at_ns;
    uint64_t deadline_ns; /* --timeout; 0: none */
    int sigfd;
    sigset_t sigmask_orig;
};

/* --------------------------------------------------------------------------------------
 * Options.
 */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: collrun -n N [--tag-output] [--timeout SEC] [--] prog [args...]\n"
            "  -n N           number of ranks to start on this host (1..%d)\n"
            "  --tag-output   prefix every line of a rank's stdout and stderr with [rank]\n"
            "  --timeout SEC  kill all ranks after SEC seconds and exit 124\n"
            "  --bind-to auto|core|none\n"
            "                 core: rank r runs on the r-th CPU collrun may use (round\n"
            "                 robin past the last); none: where the kernel likes; auto\n"
            "                 (default): as core, without its notice of shared CPUs\n"
            "  -h, --help     show this help\n"
            "Each rank gets COLL_UNIQUE_ID, COLL_RANK, COLL_SIZE, COLL_LOCAL_RANK and\n"
            "COLL_LOCAL_SIZE. collrun exits with the status of the first rank that fails\n"
            "(128+N for signal N) after killing the others, or 0; after it forwarded\n"
            "signal N (SIGINT, SIGTERM, SIGHUP, SIGQUIT), a failure makes it exit 128+N.\n",
            MAX_RANKS);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "collrun: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return EXIT_USAGE;
}

static bool parse_nranks(const char *s, int *n_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 1 || v > MAX_RANKS)
        return false;
    *n_p = (int)v;
    return true;
}

static bool parse_seconds(const char *s, double *sec_p)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    /* At most a year: a typo that large is likelier than a wish. */
    if (errno || end == s || *end != '\0' || !isfinite(v) || v <= 0 || v > 366.0 * 86400)
        return false;
    *sec_p = v;
    return true;
}

/* Returns -1 when the options are good, else the exit status (0 for --help). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
    int i;

    memset(o, 0, sizeof(*o));
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the program */
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "-np") == 0 || strcmp(a, "--np") == 0) {
            if (i + 1 >= argc)
                return usage_error("option '%s' needs a number of ranks", a);
            if (!parse_nranks(argv[++i], &o->nranks))
                return usage_error("bad number of ranks '%s'", argv[i]);
        } else if (strncmp(a, "-n", 2) == 0 && a[2] >= '0' && a[2] <= '9') {
            if (!parse_nranks(a + 2, &o->nranks))
                return usage_error("bad number of ranks '%s'", a + 2);
        } else if (strcmp(a, "--tag-output") == 0) {
            o->tag_output = true;
        } else if (strcmp(a, "--timeout") == 0) {
            if (i + 1 >= argc)
                return usage_error("option '%s' needs a number of seconds", a);
            if (!parse_seconds(argv[++i], &o->timeout_s))
                return usage_error("bad timeout '%s' (seconds, > 0)", argv[i]);
        } else if (strcmp(a, "--bind-to") == 0 || strncmp(a, "--bind-to=", 10) == 0) {
            const char *v = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v)
                return usage_error("option '%s' needs auto, core or none", a);
            if (strcmp(v, "auto") == 0)
                o->bind = BIND_AUTO;
            else if (strcmp(v, "core") == 0)
                o->bind = BIND_CORE;
            else if (strcmp(v, "none") == 0)
                o->bind = BIND_NONE;
            else
                return usage_error("bad --bind-to '%s' (auto, core or none)", v);
        } else if (strncmp(a, "--timeout=", 10) == 0) {
            if (!parse_seconds(a + 10, &o->timeout_s))
                return usage_error("bad timeout '%s' (seconds, > 0)", a + 10);
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (o->nranks == 0)
        return usage_error("%s", "missing -n N");
    if (i >= argc)
        return usage_error("%s", "missing program to run");
    o->argv = argv + i;
    return -1;
}

/* --------------------------------------------------------------------------------------
 * Environment and program lookup. Both are done before fork: the library's root thread
 * runs while we fork, so a child may only call async-signal-safe functions until exec
 * (malloc or setenv could deadlock on a lock the other thread held).
 */

static const char *const rank_vars[] = {
    "COLL_UNIQUE_ID=", "COLL_RANK=", "COLL_SIZE=", "COLL_LOCAL_RANK=", "COLL_LOCAL_SIZE="};

static bool is_rank_var(const char *entry)
{
    for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
        if (strncmp(entry, rank_vars[i], strlen(rank_vars[i])) == 0)
            return true;
    return false;
}

/* "name=value" in fresh memory, or NULL (asprintf leaves its pointer undefined then). */
static char *env_entry(const char *name, long value, const char *str)
{
    char *e;

    if ((str ? asprintf(&e, "%s=%s", name, str) : asprintf(&e, "%s=%ld", name, value)) < 0)
        return NULL;
    return e;
}

/* environ without our five variables, then ours for rank. NULL when out of memory. */
static char **make_env(const char *id_str, int rank, int nranks)
{
    char *mine[5] = {
        env_entry("COLL_UNIQUE_ID", 0, id_str),     env_entry("COLL_RANK", rank, NULL),
        env_entry("COLL_SIZE", nranks, NULL),       env_entry("COLL_LOCAL_RANK", rank, NULL),
        env_entry("COLL_LOCAL_SIZE", nranks, NULL),
    };
    size_t n = 0, k = 0;
    char **envp = NULL;

    for (size_t i = 0; i < 5; i++)
        if (!mine[i])
            goto out_free_mine;
    while (environ[n])
        n++;
    envp = calloc(n + 6, sizeof(*envp));
    if (!envp)
        goto out_free_mine;
    for (size_t i = 0; i < n; i++)
        if (!is_rank_var(environ[i]))
            envp[k++] = environ[i]; /* borrowed: environ outlives the children's start */
    for (size_t i = 0; i < 5; i++)
        envp[k++] = mine[i];
    return envp;

out_free_mine:
    for (size_t i = 0; i < 5; i++)
        free(mine[i]);
    return NULL;
}

static void free_env(char **envp)
{
    if (!envp)
        return;
    for (size_t i = 0; envp[i]; i++)
        if (is_rank_var(envp[i]))
            free(envp[i]); /* ours: environ's copies of these were left out */
    free(envp);
}

/* Resolve prog the way execvp would (PATH search unless it holds a '/'). Returns a malloc'd
 * path, or NULL with errno ENOENT (not found) or EACCES (found, not executable). */
static char *find_program(const char *prog)
{
    const char *path = getenv("PATH");
    bool denied = false;
    const char *p;

    if (strchr(prog, '/'))
        return strdup(prog);
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (p = path;; p = strchr(p, ':') + 1) {
        size_t dirlen = strcspn(p, ":");
        struct stat st;
        char *cand;

        /* An empty PATH element means the current directory. */
        if (asprintf(&cand, "%.*s%s%s", (int)dirlen, dirlen ? p : ".", "/", prog) < 0)
            return NULL;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0)
                return cand;
            denied = true;
        }
        free(cand);
        if (!strchr(p, ':'))
            break;
    }
    errno = denied ? EACCES : ENOENT;
    return NULL;
}

/* --------------------------------------------------------------------------------------
 * Output tagging: whole lines, each written with its "[rank] " prefix in one piece, so
 * that lines of different ranks never mix.
 */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* EPIPE and friends: the reader is gone; drop the output */
        }
        p += w;
        n -= (size_t)w;
    }
}

static void emit_line(int rank, int out_fd, const char *line, size_t len)
{
    char prefix[24];
    int plen = snprintf(prefix, sizeof(prefix), "[%d] ", rank);
    char *buf = malloc((size_t)plen + len + 1);

    if (!buf) { /* keep going unbuffered rather than lose output */
        write_all(out_fd, prefix, (size_t)plen);
        write_all(out_fd, line, len);
        write_all(out_fd, "\n", 1);
        return;
    }
    memcpy(buf, prefix, (size_t)plen);
    memcpy(buf + plen, line, len);
    buf[(size_t)plen + len] = '\n';
    write_all(out_fd, buf, (size_t)plen + len + 1);
    free(buf);
}

/* Emit every complete line in s->buf; with flush, the unterminated rest too. */
static void stream_emit(struct stream *s, int rank, bool flush)
{
    size_t start = 0;

    for (;;) {
        char *nl = memchr(s->buf + start, '\n', s->len - start);
        size_t linelen;

        if (nl)
            linelen = (size_t)(nl - (s->buf + start));
        else if (s->len - start >= MAX_LINE || (flush && s->len > start))
            linelen = s->len - start;
        else
            break;
        emit_line(rank, s->out_fd, s->buf + start, linelen);
        start += linelen + (nl ? 1 : 0);
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

/* Read what is there (the fd is non-blocking). Returns false at EOF or error. */
static bool stream_read(struct stream *s, int rank)
{
    for (;;) {
        ssize_t r;

        if (s->cap - s->len < 4096) {
            size_t cap = s->cap ? s->cap * 2 : 8192;
            char *nb = realloc(s->buf, cap);
            if (!nb) {
                stream_emit(s, rank, true); /* make room the hard way */
                if (s->cap - s->len < 4096)
                    return true;
            } else {
                s->buf = nb;
                s->cap = cap;
            }
        }
        r = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (r > 0) {
            s->len += (size_t)r;
            stream_emit(s, rank, false);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        return false; /* EOF, or an error we cannot do anything about */
    }
}

static void stream_close(struct stream *s, int rank)
{
    if (s->fd >= 0) {
        stream_emit(s, rank, true);
        close(s->fd);
        s->fd = -1;
    }
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* --------------------------------------------------------------------------------------
 * Children.
 */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Say why exec failed, from the forked child: write(2) only, no stdio, no strerror (which
 * may take locale locks another thread held at fork). */
static void child_exec_failed(const char *prog, int err)
{
    char num[16];
    const char *why;
    int i = (int)sizeof(num) - 1;

    switch (err) {
    case ENOENT:
        why = "no such file or directory";
        break;
    case EACCES:
        why = "permission denied";
        break;
    case ENOEXEC:
        why = "exec format error";
        break;
    case ENOTDIR:
        why = "a path component is not a directory";
        break;
    case E2BIG:
        why = "argument list too long";
        break;
    case ENOMEM:
        why = "out of memory";
        break;
    default:
        /* "errno N" */
        num[i] = '\0';
        do {
            num[--i] = (char)('0' + err % 10);
            err /= 10;
        } while (err > 0 && i > 6);
        memcpy(num + i - 6, "errno ", 6);
        why = num + i - 6;
        break;
    }
    write_all(2, "collrun: cannot run '", 21);
    write_all(2, prog, strlen(prog));
    write_all(2, "': ", 3);
    write_all(2, why, strlen(why));
    write_all(2, "\n", 1);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child_exec(struct job *job, int r, const char *path, pid_t parent, int out_w, int err_w,
                       int stdin_fd)
{
    struct rank *rk = &job->ranks[r];
    int err;

    /* A rank must not outlive collrun. The parent may have died before prctl took effect:
     * then we were re-parented and getppid() tells. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(EXIT_CANNOT_EXEC);
    setpgid(0, 0);
    if (rk->cpu >= 0) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(rk->cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) < 0)
            _exit(EXIT_CANNOT_EXEC);
    }
    if (stdin_fd >= 0 && stdin_fd != 0) {
        dup2(stdin_fd, 0);
        close(stdin_fd);
    }
    if (out_w >= 0) {
        dup2(out_w, 1);
        close(out_w);
    }
    if (err_w >= 0) {
        dup2(err_w, 2);
        close(err_w);
    }
    /* collrun ignores SIGPIPE and blocks the signals it reads through signalfd; both would
     * survive exec. */
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &job->sigmask_orig, NULL);
    execve(path, job->opts.argv, rk->envp);
    err = errno;
    child_exec_failed(job->opts.argv[0], err);
    _exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

static int make_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    /* The read end is polled; the write end stays blocking for the child. */
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    return 0;
}

/* Send sig to rank r's process group, and so to whatever it started. After the rank was
 * reaped its group may live on in its children, and its number cannot be reused while one
 * of them lives; ESRCH then just means nobody is left. */
static void signal_rank(struct job *job, int r, int sig)
{
    struct rank *rk = &job->ranks[r];

    if (rk->pgid <= 0)
        return;
    if (kill(-rk->pgid, sig) < 0 && errno == ESRCH && rk->pid > 0)
        kill(rk->pid, sig); /* the child has not reached setpgid yet */
}

static void signal_all(struct job *job, int sig)
{
    for (int r = 0; r < job->opts.nranks; r++)
        signal_rank(job, r, sig);
}

static void start_killing(struct job *job)
{
    if (job->killing)
        return;
    job->killing = true;
    job->kill_at_ns = now_ns() + (uint64_t)GRACE_MS * 1000000ull;
    signal_all(job, SIGTERM);
}

/* Start rank r. Returns 0, or -1 with a message printed. */
static int start_rank(struct job *job, int r, const char *path)
{
    struct rank *rk = &job->ranks[r];
    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
    int stdin_fd = -1;
    pid_t parent = getpid(), pid;

    /* Only rank 0 reads collrun's stdin (as mpirun does), and only when it is not a
     * terminal: a rank is not in the foreground process group, and reading the terminal
     * would stop it. */
    if (r != 0 || isatty(0)) {
        stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (stdin_fd < 0) {
            fprintf(stderr, "collrun: cannot open /dev/null: %s\n", strerror(errno));
            return -1;
        }
    }
    if (job->opts.tag_output && (make_pipe(out_p) < 0 || make_pipe(err_p) < 0)) {
        fprintf(stderr, "collrun: cannot create pipes for rank %d: %s\n", r, strerror(errno));
        goto out_close;
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "collrun: cannot start rank %d: %s\n", r, strerror(errno));
        goto out_close;
    }
    if (pid == 0)
        child_exec(job, r, path, parent, out_p[1], err_p[1], stdin_fd);
    /* Also set the group here, so that a signal sent before the child ran setpgid still
     * finds it (EACCES after its exec, ESRCH if it is gone: both harmless). */
    setpgid(pid, pid);
    rk->pid = rk->pgid = pid;
    job->running++;
    if (job->opts.tag_output) {
        rk->out = (struct stream){.fd = out_p[0], .out_fd = 1};
        rk->err = (struct stream){.fd = err_p[0], .out_fd = 2};
        close(out_p[1]);
        close(err_p[1]);
    }
    if (stdin_fd >= 0)
        close(stdin_fd);
    return 0;

out_close:
    for (int i = 0; i < 2; i++) {
        if (out_p[i] >= 0)
            close(out_p[i]);
        if (err_p[i] >= 0)
            close(err_p[i]);
    }
    if (stdin_fd >= 0)
        close(stdin_fd);
    return -1;
}

static int status_to_exit(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

static void reap(struct job *job)
{
    for (;;) {
        int status, r;
        pid_t pid = waitpid(-1, &status, WNOHANG);

        if (pid <= 0)
            return;
        for (r = 0; r < job->opts.nranks; r++)
            if (job->ranks[r].pid == pid)
                break;
        if (r == job->opts.nranks)
            continue; /* not ours (cannot happen: we start nothing else) */
        job->ranks[r].pid = 0;
        job->ranks[r].status = status;
        job->running--;
        if (status == 0 || job->failed_rank >= 0 || job->timed_out)
            continue;
        /* The first failure is the job's verdict; deaths we cause afterwards are not. */
        job->failed_rank = r;
        job->exit_status = status_to_exit(status);
        if (WIFSIGNALED(status))
            fprintf(stderr, "collrun: rank %d (pid %d) killed by signal %d (%s)%s\n", r, (int)pid,
                    WTERMSIG(status), strsignal(WTERMSIG(status)),
                    job->running ? ", killing the other ranks" : "");
        else
            fprintf(stderr, "collrun: rank %d (pid %d) exited with status %d%s\n", r, (int)pid,
                    WEXITSTATUS(status), job->running ? ", killing the other ranks" : "");
        start_killing(job);
    }
}

/* --------------------------------------------------------------------------------------
 * The event loop: signals through a signalfd, rank output through pipes, and two clocks
 * (the --timeout deadline and the end of the grace period) as the poll timeout.
 */

static void handle_signal(struct job *job, const struct signalfd_siginfo *si)
{
    int sig = (int)si->ssi_signo;

    if (sig == SIGCHLD) {
        reap(job);
        return;
    }
    /* SIGUSR1 asks the ranks for their stall table (rank 0 prints it): not an interruption */
    if (sig == SIGUSR1) {
        signal_all(job, sig);
        return;
    }
    /* Forward; the ranks decide what it means. If they die of it, that is a failure like
     * any other and the rest are killed. */
    if (!job->interrupted)
        job->interrupted = sig;
    signal_all(job, sig);
}

static int poll_timeout_ms(const struct job *job)
{
    uint64_t now = now_ns(), next = UINT64_MAX;

    if (job->deadline_ns && !job->timed_out)
        next = job->deadline_ns;
    if (job->killing && job->kill_at_ns < next)
        next = job->kill_at_ns;
    if (next == UINT64_MAX)
        return -1;
    if (next <= now)
        return 0;
    return (int)((next - now + 999999) / 1000000);
}

static void check_clocks(struct job *job)
{
    uint64_t now = now_ns();

    if (job->deadline_ns && !job->timed_out && now >= job->deadline_ns) {
        job->timed_out = true;
        fprintf(stderr, "collrun: timeout after %g s, killing %d rank%s\n", job->opts.timeout_s,
                job->running, job->running == 1 ? "" : "s");
        start_killing(job);
    }
    if (job->killing && now >= job->kill_at_ns && job->running > 0) {
        signal_all(job, SIGKILL);
        job->kill_at_ns = UINT64_MAX; /* once */
    }
}

static int run_loop(struct job *job)
{
    int n = job->opts.nranks;
    struct pollfd *pfds = calloc((size_t)(1 + 2 * n), sizeof(*pfds));
    struct stream **owners = calloc((size_t)(1 + 2 * n), sizeof(*owners));
    int *owner_rank = calloc((size_t)(1 + 2 * n), sizeof(*owner_rank));

    if (!pfds || !owners || !owner_rank) {
        fprintf(stderr, "collrun: out of memory\n");
        free(pfds);
        free(owners);
        free(owner_rank);
        start_killing(job);
        signal_all(job, SIGKILL);
        while (job->running > 0 && waitpid(-1, NULL, 0) > 0)
            job->running--;
        return 1;
    }
    while (job->running > 0) {
        int npfd = 0, rc;

        pfds[npfd++] = (struct pollfd){.fd = job->sigfd, .events = POLLIN};
        for (int r = 0; r < n; r++) {
            struct stream *ss[2] = {&job->ranks[r].out, &job->ranks[r].err};
            for (int k = 0; k < 2; k++) {
                if (!job->opts.tag_output || ss[k]->fd < 0)
                    continue;
                owners[npfd] = ss[k];
                owner_rank[npfd] = r;
                pfds[npfd++] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
            }
        }
        rc = poll(pfds, (nfds_t)npfd, poll_timeout_ms(job));
        if (rc < 0 && errno != EINTR) {
            fprintf(stderr, "collrun: poll failed: %s\n", strerror(errno));
            start_killing(job);
        }
        for (int i = 1; rc > 0 && i < npfd; i++) {
            if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (!stream_read(owners[i], owner_rank[i]))
                stream_close(owners[i], owner_rank[i]);
        }
        if (rc > 0 && (pfds[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            while (read(job->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                handle_signal(job, &si);
        }
        /* A SIGCHLD may coalesce with another; reaping here too costs one syscall. */
        reap(job);
        check_clocks(job);
    }
    /* Everyone is reaped: take what is left in the pipes. Read until EAGAIN, not EOF: a
     * process the rank left behind may still hold the write end. */
    for (int r = 0; job->opts.tag_output && r < n; r++) {
        struct stream *ss[2] = {&job->ranks[r].out, &job->ranks[r].err};
        for (int k = 0; k < 2; k++) {
            if (ss[k]->fd >= 0)
                stream_read(ss[k], r);
            stream_close(ss[k], r);
        }
    }
    free(pfds);
    free(owners);
    free(owner_rank);
    return 0;
}

/* --------------------------------------------------------------------------------------
 * main
 */

static int setup_signals(struct job *job)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++)
        sigaddset(&set, forwarded_signals[i]);
    /* Block in this thread before anything else: the library's root thread is started
     * later and inherits the mask, so these signals are only ever read from the signalfd. */
    if (pthread_sigmask(SIG_BLOCK, &set, &job->sigmask_orig) != 0)
        return -1;
    job->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (job->sigfd < 0)
        return -1;
    /* Writing tagged output to a closed reader must not kill collrun with its ranks
     * still running. */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* --bind-to core or auto: the CPUs collrun may use, in order, and COLL_HOST_CPUS for the
 * ranks; *ncpus_p 0 (and nothing set) where auto decides against binding. */
static int bind_plan(const struct opts *o, int *cpus, int *ncpus_p)
{
    bool asked = o->bind == BIND_CORE;
    cpu_set_t set;
    char num[16];
    int n = 0;

    *ncpus_p = 0;
    if (sched_getaffinity(0, sizeof(set), &set) < 0) {
        if (!asked)
            return 0;
        fprintf(stderr, "collrun: --bind-to core: cannot read the CPUs allowed: %s\n",
                strerror(errno));
        return -1;
    }
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    if (!asked && n == 0)
        return 0;
    if (n == 0) {
        fprintf(stderr, "collrun: --bind-to core: no CPU allowed\n");
        return -1;
    }
    if (asked && o->nranks > n)
        fprintf(stderr, "collrun: --bind-to core: %d ranks on %d CPUs, %d to a CPU at most\n",
                o->nranks, n, (o->nranks + n - 1) / n);
    snprintf(num, sizeof(num), "%d", n);
    if (setenv("COLL_HOST_CPUS", num, 1) < 0) {
        fprintf(stderr, "collrun: out of memory\n");
        return -1;
    }
    *ncpus_p = n;
    return 0;
}

int main(int argc, char **argv)
{
    struct job job = {.failed_rank = -1, .sigfd = -1};
    coll_unique_id_t id;
    char id_str[COLL_UNIQUE_ID_STRLEN];
    char *path = NULL;
    coll_status_t st;
    int rc, started = 0, ncpus = 0;
    int cpus[CPU_SETSIZE];

    rc = parse_opts(argc, argv, &job.opts);
    if (rc >= 0)
        return rc;
    path = find_program(job.opts.argv[0]);
    if (!path) {
        int err = errno;
        fprintf(stderr, "collrun: cannot run '%s': %s\n", job.opts.argv[0],
                err == ENOENT ? "command not found" : strerror(err));
        return err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
    }
    /* before the library's root thread exists: setenv is not thread-safe */
    if (job.opts.bind != BIND_NONE && bind_plan(&job.opts, cpus, &ncpus) < 0) {
        rc = 1;
        goto out_free_path;
    }
    if (setup_signals(&job) < 0) {
        fprintf(stderr, "collrun: cannot set up signal handling: %s\n", strerror(errno));
        rc = 1;
        goto out_free_path;
    }
    st = coll_get_unique_id(&id);
    if (st == COLL_SUCCESS)
        st = coll_unique_id_to_string(&id, id_str, sizeof(id_str));
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "collrun: cannot make a unique id: %s: %s\n", coll_status_string(st),
                coll_last_error(NULL));
        rc = 1;
        goto out_close_sigfd;
    }
    job.ranks = calloc((size_t)job.opts.nranks, sizeof(*job.ranks));
    if (!job.ranks) {
        fprintf(stderr, "collrun: out of memory\n");
        rc = 1;
        goto out_close_sigfd;
    }
    for (int r = 0; r < job.opts.nranks; r++) {
        job.ranks[r].out.fd = job.ranks[r].err.fd = -1;
        job.ranks[r].cpu = ncpus > 0 ? cpus[r % ncpus] : -1;
        job.ranks[r].envp = make_env(id_str, r, job.opts.nranks);
        if (!job.ranks[r].envp) {
            fprintf(stderr, "collrun: out of memory\n");
            rc = 1;
            goto out_free_ranks;
        }
    }
    if (job.opts.timeout_s > 0)
        job.deadline_ns = now_ns() + (uint64_t)(job.opts.timeout_s * 1e9);
    for (started = 0; started < job.opts.nranks; started++) {
        if (start_rank(&job, started, path) < 0) {
            /* Those already started cannot form a communicator now. */
            job.failed_rank = started;
            job.exit_status = 1;
            start_killing(&job);
            break;
        }
    }
    run_loop(&job);
    /* Anything the ranks left behind in their process groups goes with them. */
    signal_all(&job, SIGKILL);
    if (job.timed_out)
        rc = EXIT_TIMEOUT;
    else if (job.failed_rank >= 0 && job.interrupted)
        rc = 128 + job.interrupted;
    else if (job.failed_rank >= 0)
        rc = job.exit_status;
    else
        rc = 0;

out_free_ranks:
    for (int r = 0; r < job.opts.nranks; r++) {
        free_env(job.ranks[r].envp);
        stream_close(&job.ranks[r].out, r);
        stream_close(&job.ranks[r].err, r);
    }
    free(job.ranks);
out_close_sigfd:
    if (job.sigfd >= 0)
        close(job.sigfd);
out_free_path:
    free(path);
    return rc;
}
