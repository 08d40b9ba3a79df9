/*
 * cost.c - the alpha-beta-gamma price of a schedule, found by running every rank's schedule
 * on a simulated machine (discrete events), and the ranking of algorithms built on it.
 *
 * Divisions: 1 parameters and their defaults, 2 the calibration file, 3 the simulated
 * machine: taking schedules in, matching messages, the event loop, 4 predict and rank, 5 the
 * flat path's row (a formula: that path runs no schedule).
 *
 * The machine. Each rank has a CPU and, per link class, one send port and one receive port.
 * Times are seconds from a common start; every rank starts at 0.
 *
 *   readiness  A step is ready when every step it depends on has completed. Nothing else
 *              orders a rank's steps (the executor also runs whatever is ready).
 *   executor   Every step first costs its rank's CPU p->step seconds (the executor's time
 *              to issue it); a SEND or RECV takes part in its message only after that.
 *   REDUCE     runs on the rank's CPU for step + gamma[dtype] x the bytes of its output;
 *   COPY       for step + copy x its bytes (priced even where an in-place executor skips
 *              it). The CPU runs one step at a time, to completion; among ready ones it
 *              takes the one with the lowest step index.
 *   messages   The k-th SEND from a to b and the k-th RECV from a on b are message k of the
 *              channel a->b, over link class l = link_of(a, b). The message starts once
 *                - the SEND and the RECV are both ready and issued (the receiver has posted
 *                  its buffer: rendezvous, as the simulator's rendezvous mode; a receive
 *                  held back by a busy scratch slot holds the message back),
 *                - message k-1 of the channel has let its ports go (links are FIFO),
 *                - a's send port of class l and b's receive port of class l are free;
 *              it holds both ports for alpha_l - lat_l + bytes x beta_l (+ rdv_l when
 *              bytes >= rdv_bytes_l: a rendezvous hand-over), where lat_l = min(lat_l,
 *              alpha_l); the SEND completes when it lets them go and the RECV lat_l later.
 *              So a lone RECV completes at
 *                max(send issued, recv issued, ports free) + alpha_l + bytes beta_l
 *              but of n messages a rank sends at once over one class only the occupancies
 *              (alpha - lat + bytes beta) run one after another: their latencies overlap,
 *              as LogP's L does, while a chain of dependent messages pays the whole alpha
 *              at every hop. Ports of different classes are independent: a rank may send
 *              over shm and tcp at once. Messages do not use the CPU.
 *   ties       At one instant, every completion is applied first; then each CPU that is free
 *              takes its ready step; then each free receive port takes, among the messages
 *              that may start and whose sender's port is free, the one whose RECV comes
 *              first in its schedule; then each free send port takes, likewise, the one whose
 *              SEND comes first. Ranks are visited in the order that instant touched them.
 *   result     The predicted time is the last completion of any step; a rank's finish time
 *              is its own last completion.
 *
 * Oversubscription (p->cores > 0 and a host with more ranks than cores, hosts as the
 * arguments' hosts, NULL: one host): a local step also holds one of its host's cores for its
 * duration, and a TCP message holds one of the receiving host's cores for its whole
 * duration, latency included (the kernel's copies, the receiver's wake-up), so that at
 * most `cores` such
 * things run at once per host. A shared-memory message does only when its copy outweighs
 * its per-message cost: a waiting rank polls its rings, and measured here the recursive-
 * doubling exchange of small messages stays the fastest small all-reduce at 4 and 8 ranks,
 * while large copies compete for the cores like reductions. What this captures: with 8 ranks on 2 cores, an algorithm whose round has 8
 * messages in flight pays about 4 of them back to back, one with 2 pays 1.
 *
 * Memory (p->mem > 1, p->cache_bytes > 0): beta, gamma and copy are in-cache figures. When
 * the buffers of all ranks of the busiest host (each schedule's buf_count: send, receive,
 * scratch) add up to W > cache_bytes, the share 1 - cache_bytes / W of the bytes is taken
 * to come from memory, and every per-byte cost of the call is multiplied by
 * 1 + (mem - 1)(1 - cache_bytes / W); alpha and rdv are not. Without it the large sizes
 * of every collective are priced at cache speed, which favours the algorithms that touch
 * more bytes (recursive doubling reduces the whole buffer every round), and the predicted
 * time grows linearly across the step a measured one takes where the buffers outgrow the
 * cache (docs/algorithms.md).
 *
 * Hosts (the arguments' hosts, two or more): a message between ranks of different hosts
 * takes the send port of its sender's host and the receive port of its receiver's host
 * for its link class, not the ranks' own ports: the ranks of a host share its NIC. Messages
 * inside a host keep the ranks' ports.
 *
 * Not modelled: CPU time spent in transports (TCP's copies), memory bandwidth shared by
 * reductions and transfers, contention beyond a rank's ports (switches, PCIe), eager
 * delivery of small messages. Calibrating alpha and beta with collbench folds the average
 * of those into the parameters.
 *
 * Size: a step costs O(1 + its dependencies) plus a heap operation among the few events in
 * flight (at most one per CPU and port). Every rank's steps are held at once, in about 80
 * bytes each at the peak: ring all-reduce n = 64 with 64 chunks per block (1.3 M steps) is
 * priced in under 0.2 s and 100 MB on one core of a 2-core VM.
 */
#include "cost.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NONE UINT32_MAX

/* ---- 1 parameters and their defaults ------------------------------------------------- */

static const char *const link_names[COLL_NUM_LINKS] = {
    [COLL_LINK_TCP] = "tcp",
    [COLL_LINK_SHM] = "shm",
    [COLL_LINK_IB] = "ib",
    [COLL_LINK_CUDA] = "cuda",
};

const char *coll__link_name(enum coll_link l)
{
    return (unsigned)l < COLL_NUM_LINKS ? link_names[l] : "unknown";
}

double coll__cost_last_packet(const struct coll_link_cost *l, double bytes)
{
    return l->burst > 0 && bytes > l->burst ? bytes - floor((bytes - 1) / l->burst) * l->burst
                                            : bytes;
}

void coll__cost_params_default(struct coll_cost_params *p)
{
    memset(p, 0, sizeof(*p));
    /* TCP over loopback and the host reductions: what `collbench --calibrate` measured on the
     * project's 2-core development VM (docs/results/calib.txt). The reduction and copy
     * figures are for 1 MiB, in cache, which is the size a pipelined chunk has. */
    p->link[COLL_LINK_TCP].alpha = 7.2e-6;
    p->link[COLL_LINK_TCP].beta = 2.67e-10;
    p->link[COLL_LINK_SHM].alpha = 1e-6;
    p->link[COLL_LINK_SHM].beta = 1 / 8e9;
    /* SHM_RDV_MIN of src/transport/shm.c; what a rendezvous costs is measured (--calibrate) */
    p->link[COLL_LINK_SHM].rdv_bytes = 16384;
    /* a burst of small shm messages costs the sender about 0.4 us each, whatever the
     * ping-pong says: almost all of alpha is latency that messages in flight overlap, and
     * the rest is the executor's time per step (fitted and judged in docs/algorithms.md) */
    p->link[COLL_LINK_SHM].lat = 1e-6;
    p->step = 3e-7;
    /* placeholders until collbench --calibrate measures them: 100 Gb/s verbs, NVLink-class
     * peer copies behind an event synchronisation */
    p->link[COLL_LINK_IB].alpha = 2e-6;
    p->link[COLL_LINK_IB].beta = 1 / 12e9;
    p->link[COLL_LINK_CUDA].alpha = 5e-6;
    p->link[COLL_LINK_CUDA].beta = 1 / 50e9;
    /* native types stream at memory speed; fp16, bf16 and fp8 convert through fp32 */
    for (int d = 0; d < COLL_NUM_DTYPES; d++)
        p->gamma[d] = 3.6e-11;
    p->gamma[COLL_FLOAT16] = 1.2e-9;
    p->gamma[COLL_BFLOAT16] = 2.0e-10;
    p->gamma[COLL_FLOAT8E4M3] = p->gamma[COLL_FLOAT8E5M2] = 2.4e-9;
    p->copy = 2.4e-11;
    p->mem = 1;
    /* The flat path, from the blocking calls of the one-data-path run (docs/performance.md,
     * docs/results/paths-summary.txt; medians of 3 on a quiet 2-core VM):
     *   alpha   8 B all-reduce at 2 ranks, 0.18 us: 0.09 us per rank;
     *   beta    4 KiB all-reduce at 2 ranks, 4.88 GB/s (0.84 us): (0.84 - 0.18) us over
     *           4096 B x 3 touched;
     *   sliced  4 MiB all-reduce at 2 ranks, 10.03 GB/s (418 us, 4 pieces): 418 us over
     *           4 MiB x 3 passes (1 MiB gives 3.7e-11; broadcast and reduce at 4 MiB, 2.6e-11
     *           and 2.4e-11 per pass: priced about 1.3x slow);
     *   yield   8 B all-reduce at 4 and 8 ranks on 2 cores, 3.01 and 9.22 us: (3.01 - 0.36)
     *           / 2 = 1.33 us and (9.22 - 0.72) / 6 = 1.42 us per rank beyond the cores. */
    p->flat.alpha = 9e-8;
    p->flat.beta = 5.4e-11;
    p->flat.sliced = 3.3e-11;
    p->flat.yield = 1.37e-6;
}

/* ---- 2 the calibration file ---------------------------------------------------------- */

#define COST_FILE_MAX (1u << 20) /* a calibration file is a few dozen lines */

/* A link's parameters as the file names them (<link>.<name>), in the order it writes them. */
static const struct {
    const char *name;
    size_t off;
} link_fields[] = {
    {"alpha", offsetof(struct coll_link_cost, alpha)},
    {"beta", offsetof(struct coll_link_cost, beta)},
    {"rdv", offsetof(struct coll_link_cost, rdv)},
    {"rdv_bytes", offsetof(struct coll_link_cost, rdv_bytes)},
    {"lat", offsetof(struct coll_link_cost, lat)},
    {"xchg", offsetof(struct coll_link_cost, xchg)},
    {"burst", offsetof(struct coll_link_cost, burst)},
    {"burst_beta", offsetof(struct coll_link_cost, burst_beta)},
    {"cpu", offsetof(struct coll_link_cost, cpu)},
};

/* The parameter named key, or NULL when the key is unknown. */
static double *param_of(struct coll_cost_params *p, const char *key)
{
    const char *dot = strchr(key, '.');
    size_t plen = dot ? (size_t)(dot - key) : strlen(key);

    if (!strcmp(key, "copy"))
        return &p->copy;
    if (!strcmp(key, "mem"))
        return &p->mem;
    if (!strcmp(key, "cache_bytes"))
        return &p->cache_bytes;
    if (!strcmp(key, "step"))
        return &p->step;
    if (!strcmp(key, "wake"))
        return &p->wake;
    if (!strcmp(key, "call"))
        return &p->call;
    if (!dot)
        return NULL;
    if (plen == 4 && !strncmp(key, "flat", 4)) {
        if (!strcmp(dot + 1, "alpha"))
            return &p->flat.alpha;
        if (!strcmp(dot + 1, "beta"))
            return &p->flat.beta;
        if (!strcmp(dot + 1, "sliced"))
            return &p->flat.sliced;
        if (!strcmp(dot + 1, "yield"))
            return &p->flat.yield;
        return NULL;
    }
    if (plen == 5 && !strncmp(key, "gamma", 5)) {
        for (int d = 0; d < COLL_NUM_DTYPES; d++)
            if (!strcmp(dot + 1, coll__dtype_name((coll_dtype_t)d)))
                return &p->gamma[d];
        return NULL;
    }
    for (int l = 0; l < COLL_NUM_LINKS; l++) {
        if (strlen(link_names[l]) != plen || strncmp(key, link_names[l], plen))
            continue;
        for (size_t f = 0; f < COLL_ARRAY_SIZE(link_fields); f++)
            if (!strcmp(dot + 1, link_fields[f].name))
                return (double *)((char *)&p->link[l] + link_fields[f].off);
        return NULL;
    }
    return NULL;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* One line (len bytes, no newline): blank, a comment, or `key value [# comment]`. */
static coll_status_t parse_line(struct coll_cost_params *p, const char *line, size_t len,
                                const char *name, unsigned lineno)
{
    const char *hash = memchr(line, '#', len), *k, *v, *e = hash ? hash : line + len;
    char key[64], val[64], *end;
    size_t klen, vlen;
    double x, *dst;

    while (e > line && is_blank(e[-1]))
        e--;
    for (k = line; k < e && is_blank(*k); k++)
        ;
    if (k == e)
        return COLL_SUCCESS;
    for (klen = 0; k + klen < e && !is_blank(k[klen]); klen++)
        ;
    for (v = k + klen; v < e && is_blank(*v); v++)
        ;
    for (vlen = 0; v + vlen < e && !is_blank(v[vlen]); vlen++)
        ;
    if (vlen == 0 || v + vlen != e)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "cost parameters '%s' line %u: expected 'key value', got '%.*s'", name,
                           lineno, (int)(e - k), k);
    if (klen >= sizeof(key) || vlen >= sizeof(val))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "cost parameters '%s' line %u: key or value too long", name, lineno);
    memcpy(key, k, klen);
    key[klen] = '\0';
    memcpy(val, v, vlen);
    val[vlen] = '\0';
    errno = 0;
    x = strtod(val, &end);
    if (end != val + vlen || errno == ERANGE || !isfinite(x) || x < 0)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "cost parameters '%s' line %u: %s: '%s' is not a finite number >= 0 "
                           "(seconds)",
                           name, lineno, key, val);
    dst = param_of(p, key);
    if (!dst) {
        /* a newer collbench may write keys this build does not know: not fatal */
        COLL_INFO(COLL_SUB_ALGO, "cost parameters '%s' line %u: unknown key '%s' ignored", name,
                  lineno, key);
        return COLL_SUCCESS;
    }
    *dst = x;
    return COLL_SUCCESS;
}

/* Numbers in these files use '.' whatever locale the application set. NULL on failure:
 * then the process locale is used, which is "C" unless the application changed it. */
static locale_t c_locale_enter(locale_t *old_p)
{
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);

    if (c)
        *old_p = uselocale(c);
    return c;
}

static void c_locale_leave(locale_t c, locale_t old)
{
    if (c) {
        uselocale(old);
        freelocale(c);
    }
}

static coll_status_t parse_text(struct coll_cost_params *p, const char *text, size_t len,
                                const char *name)
{
    struct coll_cost_params tmp;
    const char *line = text, *end = text + len;
    unsigned lineno = 0;
    coll_status_t st = COLL_SUCCESS;
    locale_t c, old = (locale_t)0;

    coll__cost_params_default(&tmp);
    c = c_locale_enter(&old);
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);

        lineno++;
        if (memchr(line, '\0', n)) {
            st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                             "cost parameters '%s' line %u: NUL byte (not a text file)", name,
                             lineno);
            break;
        }
        st = parse_line(&tmp, line, n, name, lineno);
        if (st != COLL_SUCCESS)
            break;
        line += n + (nl != NULL);
    }
    c_locale_leave(c, old);
    if (st == COLL_SUCCESS)
        *p = tmp;
    return st;
}

coll_status_t coll__cost_params_parse(struct coll_cost_params *p, const char *text,
                                      const char *name)
{
    if (!p || !text)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost parameters: NULL %s",
                           p ? "text" : "params");
    return parse_text(p, text, strlen(text), name ? name : "(text)");
}

coll_status_t coll__cost_file_read(const char *path, size_t max, char **text_p)
{
    FILE *f;
    char *buf;
    size_t len = 0, got;
    coll_status_t st = COLL_SUCCESS;

    *text_p = NULL;
    f = fopen(path, "r");
    if (!f)
        return coll__sys_error(NULL, errno, "cannot open cost parameters '%s'", path);
    buf = malloc(max + 1);
    if (!buf) {
        st = coll__sys_error(NULL, ENOMEM, "cannot read cost parameters '%s'", path);
        goto out_close;
    }
    while ((got = fread(buf + len, 1, max + 1 - len, f)) > 0 && len <= max)
        len += got;
    if (ferror(f))
        st = coll__sys_error(NULL, errno ? errno : EIO, "cannot read cost parameters '%s'", path);
    else if (len > max)
        st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                         "cost parameters '%s': larger than %zu bytes, not a calibration file",
                         path, max);
    else if (memchr(buf, '\0', len))
        st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                         "cost parameters '%s': NUL byte (not a text file)", path);
    if (st != COLL_SUCCESS) {
        free(buf);
        goto out_close;
    }
    buf[len] = '\0';
    *text_p = buf;
out_close:
    fclose(f);
    return st;
}

coll_status_t coll__cost_params_load(struct coll_cost_params *p, const char *path)
{
    char *text;
    coll_status_t st;

    if (!p || !path)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost parameters: NULL %s",
                           p ? "path" : "params");
    st = coll__cost_file_read(path, COST_FILE_MAX, &text);
    if (st != COLL_SUCCESS)
        return st;
    st = parse_text(p, text, strlen(text), path);
    free(text);
    return st;
}

/* The shortest %g form that reads back as exactly v. */
static void format_exact(char *buf, size_t n, double v)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static int write_params(FILE *f, const struct coll_cost_params *p)
{
    char num[40];
    int bad = 0;

    bad |= fprintf(f, "# coll cost model parameters (collbench --calibrate writes this file)\n"
                      "# <link>.alpha: seconds per message; <link>.beta: seconds per byte;\n"
                      "# <link>.rdv: seconds more per message of <link>.rdv_bytes or more;\n"
                      "# gamma.<dtype>: seconds per byte of reduction output; copy: seconds "
                      "per byte copied;\n"
                      "# mem: per-byte costs out of cache over in cache, for calls whose "
                      "buffers exceed cache_bytes;\n"
                      "# <link>.lat: seconds of alpha that are latency (messages in flight "
                      "overlap it);\n"
                      "# <link>.xchg: seconds more for a message that reaches a rank while it "
                      "sends too (collsim);\n"
                      "# <link>.burst: bytes an idle link lets through at <link>.burst_beta "
                      "seconds per byte (collsim);\n"
                      "# <link>.cpu: CPU seconds of the machine per byte moved (collsim "
                      "--machine-cores);\n"
                      "# step: seconds of the executor's time per schedule step\n"
                      "# wake: seconds more for a wait that slept (collsim)\n"
                      "# call: seconds a collective call costs a rank beyond its steps "
                      "(collsim)\n"
                      "# flat.alpha: seconds per flat-path call per rank; flat.beta: seconds "
                      "per byte a rank touches in a small one;\n"
                      "# flat.sliced: seconds per byte and pass of one in pieces; "
                      "flat.yield: seconds per wait per rank beyond the cores\n") < 0;
    for (int l = 0; l < COLL_NUM_LINKS; l++) {
        for (size_t k = 0; k < COLL_ARRAY_SIZE(link_fields); k++) {
            format_exact(num, sizeof(num),
                         *(const double *)((const char *)&p->link[l] + link_fields[k].off));
            bad |= fprintf(f, "%s.%s %s\n", link_names[l], link_fields[k].name, num) < 0;
        }
    }
    for (int d = 0; d < COLL_NUM_DTYPES; d++) {
        format_exact(num, sizeof(num), p->gamma[d]);
        bad |= fprintf(f, "gamma.%s %s\n", coll__dtype_name((coll_dtype_t)d), num) < 0;
    }
    format_exact(num, sizeof(num), p->copy);
    bad |= fprintf(f, "copy %s\n", num) < 0;
    format_exact(num, sizeof(num), p->mem);
    bad |= fprintf(f, "mem %s\n", num) < 0;
    format_exact(num, sizeof(num), p->cache_bytes);
    bad |= fprintf(f, "cache_bytes %s\n", num) < 0;
    format_exact(num, sizeof(num), p->step);
    bad |= fprintf(f, "step %s\n", num) < 0;
    format_exact(num, sizeof(num), p->wake);
    bad |= fprintf(f, "wake %s\n", num) < 0;
    format_exact(num, sizeof(num), p->call);
    bad |= fprintf(f, "call %s\n", num) < 0;
    format_exact(num, sizeof(num), p->flat.alpha);
    bad |= fprintf(f, "flat.alpha %s\n", num) < 0;
    format_exact(num, sizeof(num), p->flat.beta);
    bad |= fprintf(f, "flat.beta %s\n", num) < 0;
    format_exact(num, sizeof(num), p->flat.sliced);
    bad |= fprintf(f, "flat.sliced %s\n", num) < 0;
    format_exact(num, sizeof(num), p->flat.yield);
    bad |= fprintf(f, "flat.yield %s\n", num) < 0;
    return bad;
}

coll_status_t coll__cost_params_save(const struct coll_cost_params *p, const char *path)
{
    char *tmp;
    size_t n;
    FILE *f;
    int bad;
    coll_status_t st = COLL_SUCCESS;
    locale_t c, old = (locale_t)0;

    if (!p || !path)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost parameters: NULL %s",
                           p ? "path" : "params");
    n = strlen(path) + 32;
    tmp = malloc(n);
    if (!tmp)
        return coll__sys_error(NULL, ENOMEM, "cannot save cost parameters '%s'", path);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    f = fopen(tmp, "w");
    if (!f) {
        st = coll__sys_error(NULL, errno, "cannot create '%s'", tmp);
        goto out_free;
    }
    c = c_locale_enter(&old);
    errno = 0;
    bad = write_params(f, p);
    c_locale_leave(c, old);
    bad |= fflush(f) != 0 || ferror(f);
    if (fclose(f) != 0 || bad) {
        st = coll__sys_error(NULL, errno ? errno : EIO, "cannot write '%s'", tmp);
        goto out_unlink;
    }
    if (rename(tmp, path) != 0) {
        st = coll__sys_error(NULL, errno, "cannot rename '%s' to '%s'", tmp, path);
        goto out_unlink;
    }
    goto out_free;

out_unlink:
    unlink(tmp);
out_free:
    free(tmp);
    return st;
}

/* ---- 3 the simulated machine --------------------------------------------------------- */

#define PENDING_DONE 0xffu
#define MSG_SEND_READY 1u
#define MSG_RECV_READY 2u
#define MSG_STARTED 4u

struct sim_step {
    union {
        double dur;   /* REDUCE, COPY: seconds on the CPU */
        uint32_t msg; /* SEND, RECV: the message */
    } u;
    int32_t rank;
    uint8_t kind;
    uint8_t pending; /* dependencies not yet complete; PENDING_DONE once complete itself */
    bool issued;     /* SEND, RECV: the executor has run it (p->step); its message may go */
};

/* A SEND or RECV while the schedules are taken in, before matching. */
struct sim_end {
    uint32_t step;
    int32_t peer;
    size_t count;
    double bytes;
};

struct sim_msg {
    uint32_t send, recv; /* steps */
    int32_t src, dst;
    uint32_t chan;
    uint8_t link, state;
    double dur; /* holding the ports */
    double lat; /* from the ports' release to the RECV's completion */
};

struct sim_chan {
    int32_t dst;
    uint8_t link;
    uint32_t off, n; /* messages [off, off + n), in order */
    uint32_t head;   /* the next message that may start; counts receives while matching */
};

struct u32vec {
    uint32_t *v;
    uint32_t n, cap;
};

enum sim_ev {
    EV_CPU,    /* a step leaves its rank's CPU */
    EV_PORTS,  /* a message releases its ports: its SEND completes */
    EV_ARRIVE, /* a message reaches its receiver: its RECV completes */
};

struct sim_event {
    double t;
    uint64_t seq; /* equal times complete in the order they were started */
    uint32_t id;  /* a step (EV_CPU) or a message */
    uint8_t kind;
};

struct sim {
    const struct coll_cost_params *p;
    struct coll_cost_links links;
    int32_t n, taken;

    /* oversubscription: per host, cores free now; ranks of each host (CSR) to wake */
    bool pool;
    bool nic;              /* hosts share their NIC's ports (ports n + host) */
    size_t nports;
    int32_t *host_of;      /* [n] */
    int32_t *cores_free;   /* [nhosts] */
    int32_t *host_ranks;   /* [n]: ranks by host */
    int32_t *host_base;    /* [nhosts + 1] */

    /* steps of every rank, rank after rank; dependents in CSR form */
    struct sim_step *steps;
    uint32_t nsteps, cap_steps;
    uint32_t *step_base; /* [n + 1]: rank r's steps are [step_base[r], step_base[r + 1]) */
    uint32_t *dep_off;   /* [cap_dep_off]: dependents of step i start at dep_off[i] */
    uint32_t cap_dep_off;
    uint32_t *dep_list;
    uint32_t ndep, cap_dep;
    struct sim_end *ends;
    uint32_t nends, cap_ends;
    uint32_t *end_base; /* [n + 1]: rank r's ends are [end_base[r], end_base[r + 1]) */

    /* messages by channel; rank a's channels are [chan_base[a], chan_base[a + 1]), by dst */
    struct sim_chan *chans;
    uint32_t nchans, cap_chans;
    uint32_t *chan_base; /* [n + 1] */
    struct sim_msg *msgs;
    uint32_t nmsgs;

    /* the machine: per rank a CPU, per (rank, link class) a send and a receive port */
    bool *cpu_busy;
    struct u32vec *cpu_ready; /* [n] min-heaps of ready local steps */
    bool *out_busy, *in_busy;
    struct u32vec *out_wait, *in_wait; /* [n * COLL_NUM_LINKS] messages that may start */
    struct sim_event *heap;
    uint32_t nheap, cap_heap;
    uint64_t seq;
    int32_t *dirty; /* ranks touched at this instant, in order */
    bool *is_dirty;
    uint32_t ndirty;
    double now;
    double *finish; /* [n] */
    uint32_t ndone;

    double *ws;   /* [n]: bytes of each rank's buffers (the call's working set) */
    double mem_f; /* per-byte costs x this: the memory term for the whole call */
};

static coll_status_t no_memory(const char *what)
{
    return coll__sys_error(NULL, ENOMEM, "cost model: no memory for %s", what);
}

/* Grow *arr (of *cap elements of size sz) to hold need elements. */
static bool grow(void **arr, uint32_t *cap, uint64_t need, size_t sz)
{
    uint64_t c = *cap ? *cap : 64;
    void *p;

    if (need <= *cap)
        return true;
    while (c < need)
        c *= 2;
    if (c > NONE - 1)
        c = NONE - 1;
    if (c < need)
        return false;
    p = realloc(*arr, (size_t)c * sz);
    if (!p)
        return false;
    *arr = p;
    *cap = (uint32_t)c;
    return true;
}

static bool vec_push(struct u32vec *v, uint32_t x)
{
    if (v->n == v->cap && !grow((void **)&v->v, &v->cap, (uint64_t)v->n + 1, sizeof(*v->v)))
        return false;
    v->v[v->n++] = x;
    return true;
}

/* Min-heap of step indices (a CPU takes the lowest ready step). */
static bool minheap_push(struct u32vec *h, uint32_t x)
{
    uint32_t i;

    if (!vec_push(h, x))
        return false;
    for (i = h->n - 1; i > 0 && h->v[(i - 1) / 2] > x; i = (i - 1) / 2)
        h->v[i] = h->v[(i - 1) / 2];
    h->v[i] = x;
    return true;
}

static uint32_t minheap_pop(struct u32vec *h)
{
    uint32_t top = h->v[0], x = h->v[--h->n], i = 0;

    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c])
            c++;
        if (h->v[c] >= x)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
    return top;
}

static bool event_before(const struct sim_event *a, const struct sim_event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static bool event_push(struct sim *sm, double t, uint32_t id, enum sim_ev kind)
{
    struct sim_event ev = {t, sm->seq++, id, (uint8_t)kind};
    uint32_t i;

    if (!grow((void **)&sm->heap, &sm->cap_heap, (uint64_t)sm->nheap + 1, sizeof(*sm->heap)))
        return false;
    for (i = sm->nheap++; i > 0 && event_before(&ev, &sm->heap[(i - 1) / 2]); i = (i - 1) / 2)
        sm->heap[i] = sm->heap[(i - 1) / 2];
    sm->heap[i] = ev;
    return true;
}

static struct sim_event event_pop(struct sim *sm)
{
    struct sim_event top = sm->heap[0], x = sm->heap[--sm->nheap];
    uint32_t i = 0;

    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= sm->nheap)
            break;
        if (c + 1 < sm->nheap && event_before(&sm->heap[c + 1], &sm->heap[c]))
            c++;
        if (!event_before(&sm->heap[c], &x))
            break;
        sm->heap[i] = sm->heap[c];
        i = c;
    }
    if (sm->nheap)
        sm->heap[i] = x;
    return top;
}

/* Cores shared per host when some host has more ranks than p->cores. */
/* Ports of each host's NIC, after the ranks' own: (n + host) x link class. */
static coll_status_t sim_nic_init(struct sim *sm, int32_t nhosts)
{
    size_t old = sm->nports, ports = ((size_t)sm->n + (size_t)nhosts) * COLL_NUM_LINKS;
    bool *ob = realloc(sm->out_busy, ports * sizeof(*ob)), *ib;
    struct u32vec *ow, *iw;

    if (!ob)
        return no_memory("the ports");
    sm->out_busy = ob;
    if (!(ib = realloc(sm->in_busy, ports * sizeof(*ib))))
        return no_memory("the ports");
    sm->in_busy = ib;
    if (!(ow = realloc(sm->out_wait, ports * sizeof(*ow))))
        return no_memory("the ports");
    sm->out_wait = ow;
    if (!(iw = realloc(sm->in_wait, ports * sizeof(*iw))))
        return no_memory("the ports");
    sm->in_wait = iw;
    memset(ob + old, 0, (ports - old) * sizeof(*ob));
    memset(ib + old, 0, (ports - old) * sizeof(*ib));
    memset(ow + old, 0, (ports - old) * sizeof(*ow));
    memset(iw + old, 0, (ports - old) * sizeof(*iw));
    sm->nports = ports;
    sm->nic = true;
    return COLL_SUCCESS;
}

static coll_status_t sim_pool_init(struct sim *sm, const int32_t *hosts, int32_t nhosts)
{
    int32_t n = sm->n, most = 0;
    coll_status_t st;

    if (hosts && nhosts > 1 && (st = sim_nic_init(sm, nhosts)) != COLL_SUCCESS)
        return st;
    if (sm->p->cores <= 0 && !sm->nic)
        return COLL_SUCCESS;
    if (!hosts || nhosts < 1)
        nhosts = 1;
    sm->host_of = calloc((size_t)n, sizeof(*sm->host_of));
    sm->host_ranks = calloc((size_t)n, sizeof(*sm->host_ranks));
    sm->host_base = calloc((size_t)nhosts + 1, sizeof(*sm->host_base));
    sm->cores_free = calloc((size_t)nhosts, sizeof(*sm->cores_free));
    if (!sm->host_of || !sm->host_ranks || !sm->host_base || !sm->cores_free)
        return no_memory("the hosts");
    for (int32_t r = 0; r < n; r++) {
        int32_t h = hosts ? hosts[r] : 0;
        if (h < 0 || h >= nhosts)
            return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost model: rank %d on host %d of %d",
                               r, h, nhosts);
        sm->host_of[r] = h;
        sm->host_base[h + 1]++;
    }
    for (int32_t h = 0; h < nhosts; h++) {
        most = COLL_MAX(most, sm->host_base[h + 1]);
        sm->host_base[h + 1] += sm->host_base[h];
        sm->cores_free[h] = sm->p->cores > 0 ? sm->p->cores : INT32_MAX;
    }
    {
        int32_t *fill = calloc((size_t)nhosts, sizeof(*fill));
        if (!fill)
            return no_memory("the hosts");
        for (int32_t r = 0; r < n; r++) {
            int32_t h = sm->host_of[r];
            sm->host_ranks[sm->host_base[h] + fill[h]++] = r;
        }
        free(fill);
    }
    sm->pool = sm->p->cores > 0 && most > sm->p->cores;
    return COLL_SUCCESS;
}

static bool core_free(const struct sim *sm, int32_t r)
{
    return !sm->pool || sm->cores_free[sm->host_of[r]] > 0;
}

static void core_take(struct sim *sm, int32_t r)
{
    if (sm->pool)
        sm->cores_free[sm->host_of[r]]--;
}

static void mark_dirty(struct sim *sm, int32_t r);

/* A core of r's host is free again: every rank there may have work waiting for one. */
static void core_give(struct sim *sm, int32_t r)
{
    int32_t h;

    if (!sm->pool)
        return;
    h = sm->host_of[r];
    sm->cores_free[h]++;
    for (int32_t i = sm->host_base[h]; i < sm->host_base[h + 1]; i++)
        mark_dirty(sm, sm->host_ranks[i]);
}

static coll_status_t sim_init(struct sim *sm, const struct coll_cost_params *p,
                              const struct coll_cost_links *links, int32_t n)
{
    const size_t ports = (size_t)n * COLL_NUM_LINKS;

    memset(sm, 0, sizeof(*sm));
    sm->nports = ports;
    sm->p = p;
    sm->links = links ? *links : coll__cost_links_all(COLL_LINK_TCP);
    sm->n = n;
    sm->step_base = calloc((size_t)n + 1, sizeof(*sm->step_base));
    sm->end_base = calloc((size_t)n + 1, sizeof(*sm->end_base));
    sm->chan_base = calloc((size_t)n + 1, sizeof(*sm->chan_base));
    sm->cpu_busy = calloc((size_t)n, sizeof(*sm->cpu_busy));
    sm->cpu_ready = calloc((size_t)n, sizeof(*sm->cpu_ready));
    sm->out_busy = calloc(ports, sizeof(*sm->out_busy));
    sm->in_busy = calloc(ports, sizeof(*sm->in_busy));
    sm->out_wait = calloc(ports, sizeof(*sm->out_wait));
    sm->in_wait = calloc(ports, sizeof(*sm->in_wait));
    sm->dirty = calloc((size_t)n, sizeof(*sm->dirty));
    sm->is_dirty = calloc((size_t)n, sizeof(*sm->is_dirty));
    sm->finish = calloc((size_t)n, sizeof(*sm->finish));
    sm->ws = calloc((size_t)n, sizeof(*sm->ws));
    sm->mem_f = 1;
    if (!sm->step_base || !sm->end_base || !sm->chan_base || !sm->cpu_busy || !sm->cpu_ready ||
        !sm->out_busy || !sm->in_busy || !sm->out_wait || !sm->in_wait || !sm->dirty ||
        !sm->is_dirty || !sm->finish || !sm->ws)
        return no_memory("the ranks");
    return COLL_SUCCESS;
}

static void sim_fini(struct sim *sm)
{
    const size_t ports = sm->nports;

    free(sm->host_of);
    free(sm->host_ranks);
    free(sm->host_base);
    free(sm->cores_free);
    for (int32_t r = 0; sm->cpu_ready && r < sm->n; r++)
        free(sm->cpu_ready[r].v);
    for (size_t i = 0; sm->out_wait && i < ports; i++)
        free(sm->out_wait[i].v);
    for (size_t i = 0; sm->in_wait && i < ports; i++)
        free(sm->in_wait[i].v);
    free(sm->steps);
    free(sm->step_base);
    free(sm->dep_off);
    free(sm->dep_list);
    free(sm->ends);
    free(sm->end_base);
    free(sm->chans);
    free(sm->chan_base);
    free(sm->msgs);
    free(sm->cpu_busy);
    free(sm->cpu_ready);
    free(sm->out_busy);
    free(sm->in_busy);
    free(sm->out_wait);
    free(sm->in_wait);
    free(sm->heap);
    free(sm->dirty);
    free(sm->is_dirty);
    free(sm->finish);
    free(sm->ws);
}

static double step_bytes(const struct coll_schedule *s, const struct coll_slice *sl)
{
    return (double)sl->count * (double)s->elem_size;
}

/* Take rank sm->taken's schedule in: its steps, their dependents, its message ends. */
static coll_status_t sim_take(struct sim *sm, const struct coll_schedule *s)
{
    const int32_t r = sm->taken;
    const uint32_t base = sm->nsteps, m = s->nsteps;
    uint64_t ndeps = 0, nends = 0;
    uint32_t *cursor;
    bool reduces = false;
    coll_status_t st;

    if (s->rank != r || s->nranks != sm->n)
        return coll__error(NULL, COLL_INTERNAL_ERROR,
                           "cost model: schedule %d is rank %d of %d ranks, expected rank %d of %d",
                           r, s->rank, s->nranks, r, sm->n);
    st = coll__sched_validate(s);
    if (st != COLL_SUCCESS)
        return st;
    for (int b = 0; b < COLL_NUM_BUFS; b++)
        sm->ws[r] += (double)s->buf_count[b] * (double)s->elem_size;
    for (uint32_t i = 0; i < m; i++) {
        ndeps += s->steps[i].ndeps;
        nends += s->steps[i].kind == COLL_STEP_SEND || s->steps[i].kind == COLL_STEP_RECV;
        reduces |= s->steps[i].kind == COLL_STEP_REDUCE;
    }
    if (reduces && (unsigned)s->dtype >= COLL_NUM_DTYPES)
        return coll__error(NULL, COLL_INTERNAL_ERROR,
                           "cost model: rank %d reduces elements of unknown dtype %d", r,
                           (int)s->dtype);
    /* dep_off has one more entry than steps: the end of the last step's dependents */
    if (!grow((void **)&sm->steps, &sm->cap_steps, (uint64_t)base + m, sizeof(*sm->steps)) ||
        !grow((void **)&sm->dep_off, &sm->cap_dep_off, (uint64_t)base + m + 1,
              sizeof(*sm->dep_off)) ||
        !grow((void **)&sm->dep_list, &sm->cap_dep, sm->ndep + ndeps, sizeof(*sm->dep_list)) ||
        !grow((void **)&sm->ends, &sm->cap_ends, sm->nends + nends, sizeof(*sm->ends)))
        return no_memory("the steps");
    cursor = calloc((size_t)m + 1, sizeof(*cursor));
    if (!cursor)
        return no_memory("the steps");

    for (uint32_t i = 0; i < m; i++)
        for (uint32_t d = 0; d < s->steps[i].ndeps; d++)
            cursor[s->steps[i].deps[d]]++;
    for (uint32_t i = 0, off = sm->ndep; i <= m; i++) {
        uint32_t c = i < m ? cursor[i] : 0;
        sm->dep_off[base + i] = off;
        cursor[i] = off;
        off += c;
    }
    for (uint32_t i = 0; i < m; i++) {
        const struct coll_step *p = &s->steps[i];
        struct sim_step *q = &sm->steps[base + i];

        for (uint32_t d = 0; d < p->ndeps; d++)
            sm->dep_list[cursor[p->deps[d]]++] = base + i;
        q->rank = r;
        q->kind = p->kind;
        q->pending = (uint8_t)p->ndeps;
        q->issued = false;
        if (p->kind == COLL_STEP_REDUCE) {
            q->u.dur = sm->p->gamma[s->dtype] * step_bytes(s, &p->dst) + sm->p->step;
        } else if (p->kind == COLL_STEP_COPY) {
            q->u.dur = sm->p->copy * step_bytes(s, &p->dst) + sm->p->step;
        } else {
            const struct coll_slice *sl = p->kind == COLL_STEP_SEND ? &p->src : &p->dst;
            struct sim_end *e = &sm->ends[sm->nends++];

            e->step = base + i;
            e->peer = p->peer;
            e->count = sl->count;
            e->bytes = step_bytes(s, sl);
            q->u.msg = NONE;
        }
    }
    free(cursor);
    sm->ndep += (uint32_t)ndeps;
    sm->nsteps = base + m;
    sm->taken = r + 1;
    sm->step_base[sm->taken] = sm->nsteps;
    sm->end_base[sm->taken] = sm->nends;
    return COLL_SUCCESS;
}

/* The memory term, once every schedule is in: the busiest host's working set W against
 * the cache. The share of W that does not fit pays mem times the cached per-byte costs, so
 * local steps are stretched here and messages when sim_match prices them. */
static void sim_memory(struct sim *sm, const int32_t *hosts, int32_t nhosts)
{
    const struct coll_cost_params *p = sm->p;
    double most = 0, *per_host;

    if (!(p->mem > 1) || !(p->cache_bytes > 0))
        return;
    if (!hosts || nhosts < 1)
        nhosts = 1;
    per_host = calloc((size_t)nhosts, sizeof(*per_host));
    if (!per_host) /* a price without the memory term beats no price */
        return;
    for (int32_t r = 0; r < sm->n; r++) {
        int32_t h = hosts && hosts[r] >= 0 && hosts[r] < nhosts ? hosts[r] : 0;
        per_host[h] += sm->ws[r];
        most = COLL_MAX(most, per_host[h]);
    }
    free(per_host);
    if (most <= p->cache_bytes)
        return;
    sm->mem_f = 1 + (p->mem - 1) * (1 - p->cache_bytes / most);
    for (uint32_t i = 0; i < sm->nsteps; i++)
        if (sm->steps[i].kind == COLL_STEP_REDUCE || sm->steps[i].kind == COLL_STEP_COPY)
            sm->steps[i].u.dur = (sm->steps[i].u.dur - p->step) * sm->mem_f + p->step;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The channel a -> b, or NONE. */
static uint32_t chan_find(const struct sim *sm, int32_t a, int32_t b)
{
    uint32_t lo = sm->chan_base[a], hi = sm->chan_base[a + 1];

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sm->chans[mid].dst < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sm->chan_base[a + 1] && sm->chans[lo].dst == b ? lo : NONE;
}

static const char *kind_name(uint8_t kind)
{
    static const char *const names[] = {"send", "recv", "reduce", "copy"};
    return kind < COLL_ARRAY_SIZE(names) ? names[kind] : "?";
}

/* Step s's index in its rank's schedule (messages name steps as the schedule does). */
static uint32_t local_index(const struct sim *sm, uint32_t s)
{
    return s - sm->step_base[sm->steps[s].rank];
}

/* Channels per sending rank, sorted by receiver; then the k-th send on a channel pairs with
 * the k-th receive, and their counts must agree. */
static coll_status_t sim_match(struct sim *sm)
{
    const int32_t n = sm->n;
    int32_t *peers = malloc((size_t)n * sizeof(*peers));
    uint8_t *seen = calloc((size_t)n, 1);
    size_t *count = NULL; /* per message: the count its send moves */
    coll_status_t st = COLL_SUCCESS;
    uint32_t off = 0;

    if (!peers || !seen) {
        st = no_memory("the channels");
        goto out_free;
    }
    for (int32_t a = 0; a < n; a++) {
        uint32_t np = 0;

        sm->chan_base[a] = sm->nchans;
        for (uint32_t e = sm->end_base[a]; e < sm->end_base[a + 1]; e++) {
            const struct sim_end *x = &sm->ends[e];
            if (sm->steps[x->step].kind == COLL_STEP_SEND && !seen[x->peer]) {
                seen[x->peer] = 1;
                peers[np++] = x->peer;
            }
        }
        qsort(peers, np, sizeof(*peers), cmp_i32);
        if (!grow((void **)&sm->chans, &sm->cap_chans, (uint64_t)sm->nchans + np,
                  sizeof(*sm->chans))) {
            st = no_memory("the channels");
            goto out_free;
        }
        for (uint32_t i = 0; i < np; i++) {
            struct sim_chan *c = &sm->chans[sm->nchans++];
            enum coll_link l =
                sm->links.link_of ? sm->links.link_of(sm->links.arg, a, peers[i]) : sm->links.link;

            seen[peers[i]] = 0;
            if ((unsigned)l >= COLL_NUM_LINKS) {
                st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                                 "cost model: link class %d for rank %d -> %d is not one of "
                                 "tcp, shm, ib, cuda",
                                 (int)l, a, peers[i]);
                goto out_free;
            }
            memset(c, 0, sizeof(*c));
            c->dst = peers[i];
            c->link = (uint8_t)l;
        }
        sm->chan_base[a + 1] = sm->nchans;
        for (uint32_t e = sm->end_base[a]; e < sm->end_base[a + 1]; e++)
            if (sm->steps[sm->ends[e].step].kind == COLL_STEP_SEND)
                sm->chans[chan_find(sm, a, sm->ends[e].peer)].n++;
    }
    for (uint32_t c = 0; c < sm->nchans; c++) {
        sm->chans[c].off = off;
        off += sm->chans[c].n;
    }
    sm->nmsgs = off;
    sm->msgs = malloc(((size_t)off + 1) * sizeof(*sm->msgs));
    count = malloc(((size_t)off + 1) * sizeof(*count));
    if (!sm->msgs || !count) {
        st = no_memory("the messages");
        goto out_free;
    }

    /* sends, in step order, fill their channel's messages in order (head counts them) */
    for (int32_t a = 0; a < n; a++)
        for (uint32_t e = sm->end_base[a]; e < sm->end_base[a + 1]; e++) {
            const struct sim_end *x = &sm->ends[e];
            const struct coll_link_cost *lc;
            struct sim_msg *msg;
            uint32_t c, id;

            if (sm->steps[x->step].kind != COLL_STEP_SEND)
                continue;
            c = chan_find(sm, a, x->peer);
            id = sm->chans[c].off + sm->chans[c].head++;
            lc = &sm->p->link[sm->chans[c].link];
            msg = &sm->msgs[id];
            msg->send = x->step;
            msg->recv = NONE;
            msg->src = a;
            msg->dst = x->peer;
            msg->chan = c;
            msg->link = sm->chans[c].link;
            msg->state = 0;
            msg->lat = COLL_MIN(lc->lat, lc->alpha);
            msg->dur = lc->alpha - msg->lat + x->bytes * lc->beta * sm->mem_f;
            if (lc->rdv_bytes > 0 && x->bytes >= lc->rdv_bytes)
                msg->dur += lc->rdv;
            count[id] = x->count;
            sm->steps[x->step].u.msg = id;
        }
    for (uint32_t c = 0; c < sm->nchans; c++)
        sm->chans[c].head = 0;

    /* receives, in step order, take their channel's messages in order */
    for (int32_t b = 0; b < n; b++)
        for (uint32_t e = sm->end_base[b]; e < sm->end_base[b + 1]; e++) {
            const struct sim_end *x = &sm->ends[e];
            uint32_t c, id, k;

            if (sm->steps[x->step].kind != COLL_STEP_RECV)
                continue;
            c = chan_find(sm, x->peer, b);
            k = c == NONE ? 0 : sm->chans[c].head++;
            if (c == NONE || k >= sm->chans[c].n) {
                st = coll__error(NULL, COLL_INTERNAL_ERROR,
                                 "cost model: rank %d step %u is receive %u from rank %d, which "
                                 "sends it only %u",
                                 b, local_index(sm, x->step), k + 1, x->peer,
                                 c == NONE ? 0 : sm->chans[c].n);
                goto out_free;
            }
            id = sm->chans[c].off + k;
            if (count[id] != x->count) {
                st = coll__error(NULL, COLL_INTERNAL_ERROR,
                                 "cost model: rank %d step %u sends %zu elements to rank %d, "
                                 "whose matching receive (step %u) takes %zu",
                                 x->peer, local_index(sm, sm->msgs[id].send), count[id], b,
                                 local_index(sm, x->step), x->count);
                goto out_free;
            }
            sm->msgs[id].recv = x->step;
            sm->steps[x->step].u.msg = id;
        }
    for (uint32_t c = 0; c < sm->nchans; c++) {
        if (sm->chans[c].head != sm->chans[c].n) {
            const struct sim_msg *msg = &sm->msgs[sm->chans[c].off + sm->chans[c].head];
            st = coll__error(NULL, COLL_INTERNAL_ERROR,
                             "cost model: rank %d sends %u messages to rank %d, which receives "
                             "only %u (the first unmatched is step %u)",
                             msg->src, sm->chans[c].n, msg->dst, sm->chans[c].head,
                             local_index(sm, msg->send));
            goto out_free;
        }
        sm->chans[c].head = 0;
    }
    /* matching is done: the ends are not needed while the machine runs */
    free(sm->ends);
    sm->ends = NULL;
    sm->nends = sm->cap_ends = 0;
out_free:
    free(count);
    free(seen);
    free(peers);
    return st;
}

static void mark_dirty(struct sim *sm, int32_t r)
{
    if (!sm->is_dirty[r]) {
        sm->is_dirty[r] = true;
        sm->dirty[sm->ndirty++] = r;
    }
}

static size_t port_of(int32_t rank, uint8_t link)
{
    return (size_t)rank * COLL_NUM_LINKS + link;
}

/* Does the message keep its receiver's host busy? TCP ones do (the kernel's copies, a
 * wake-up); shared-memory ones when their copy outweighs their per-message cost (the
 * receiver copies them out itself; small ones are polled from a ring). */
static bool msg_uses_core(const struct sim *sm, const struct sim_msg *m)
{
    if (m->link == COLL_LINK_SHM)
        return m->dur + m->lat > 2 * sm->p->link[COLL_LINK_SHM].alpha;
    return true;
}

/* The ports a message takes: its ranks', or its hosts' NIC between hosts. */
static size_t src_port(const struct sim *sm, const struct sim_msg *m)
{
    if (sm->nic && sm->host_of[m->src] != sm->host_of[m->dst])
        return port_of(sm->n + sm->host_of[m->src], m->link);
    return port_of(m->src, m->link);
}

static size_t dst_port(const struct sim *sm, const struct sim_msg *m)
{
    if (sm->nic && sm->host_of[m->src] != sm->host_of[m->dst])
        return port_of(sm->n + sm->host_of[m->dst], m->link);
    return port_of(m->dst, m->link);
}

/* Message id has both ends ready and is its channel's next: let its ports know. */
static coll_status_t msg_may_start(struct sim *sm, uint32_t id)
{
    const struct sim_msg *m = &sm->msgs[id];

    if (!vec_push(&sm->out_wait[src_port(sm, m)], id) ||
        !vec_push(&sm->in_wait[dst_port(sm, m)], id))
        return no_memory("the waiting messages");
    mark_dirty(sm, m->src);
    mark_dirty(sm, m->dst);
    return COLL_SUCCESS;
}

static coll_status_t step_ready(struct sim *sm, uint32_t s)
{
    const struct sim_step *p = &sm->steps[s];
    struct sim_msg *m;

    if (p->kind == COLL_STEP_REDUCE || p->kind == COLL_STEP_COPY ||
        (!p->issued && sm->p->step > 0)) {
        if (!minheap_push(&sm->cpu_ready[p->rank], s))
            return no_memory("the ready steps");
        mark_dirty(sm, p->rank);
        return COLL_SUCCESS;
    }
    m = &sm->msgs[p->u.msg];
    m->state |= p->kind == COLL_STEP_SEND ? MSG_SEND_READY : MSG_RECV_READY;
    if ((m->state & (MSG_SEND_READY | MSG_RECV_READY)) == (MSG_SEND_READY | MSG_RECV_READY) &&
        sm->chans[m->chan].off + sm->chans[m->chan].head == p->u.msg)
        return msg_may_start(sm, p->u.msg);
    return COLL_SUCCESS;
}

static coll_status_t step_done(struct sim *sm, uint32_t s)
{
    struct sim_step *p = &sm->steps[s];
    coll_status_t st;

    p->pending = PENDING_DONE;
    sm->ndone++;
    sm->finish[p->rank] = sm->now;
    for (uint32_t i = sm->dep_off[s]; i < sm->dep_off[s + 1]; i++) {
        uint32_t d = sm->dep_list[i];
        if (--sm->steps[d].pending == 0 && (st = step_ready(sm, d)) != COLL_SUCCESS)
            return st;
    }
    return COLL_SUCCESS;
}

static coll_status_t msg_done(struct sim *sm, uint32_t id)
{
    const struct sim_msg *m = &sm->msgs[id];
    struct sim_chan *c = &sm->chans[m->chan];
    coll_status_t st;

    sm->out_busy[src_port(sm, m)] = false;
    sm->in_busy[dst_port(sm, m)] = false;
    /* the receiving host's core stays taken until the message is in (a wake-up) */
    if (msg_uses_core(sm, m) && !(m->lat > 0))
        core_give(sm, m->dst);
    mark_dirty(sm, m->src);
    mark_dirty(sm, m->dst);
    if ((st = step_done(sm, m->send)) != COLL_SUCCESS)
        return st;
    if (m->lat > 0) {
        if (!event_push(sm, sm->now + m->lat, id, EV_ARRIVE))
            return no_memory("the events");
    } else if ((st = step_done(sm, m->recv)) != COLL_SUCCESS) {
        return st;
    }
    /* the next message of the channel may have been ready while this one ran */
    if (++c->head < c->n) {
        const struct sim_msg *next = &sm->msgs[c->off + c->head];
        if ((next->state & (MSG_SEND_READY | MSG_RECV_READY)) == (MSG_SEND_READY | MSG_RECV_READY))
            return msg_may_start(sm, c->off + c->head);
    }
    return COLL_SUCCESS;
}

static coll_status_t msg_start(struct sim *sm, uint32_t id)
{
    struct sim_msg *m = &sm->msgs[id];

    m->state |= MSG_STARTED;
    sm->out_busy[src_port(sm, m)] = true;
    sm->in_busy[dst_port(sm, m)] = true;
    if (msg_uses_core(sm, m))
        core_take(sm, m->dst);
    if (!event_push(sm, sm->now + m->dur, id, EV_PORTS))
        return no_memory("the events");
    return COLL_SUCCESS;
}

/* Of the messages waiting at a free port, the one whose step (RECV at a receive port, SEND
 * at a send port) comes first and whose other end's port is free; NONE if there is none.
 * Messages that started from the other end are dropped from the list on the way. */
static uint32_t pick(struct sim *sm, struct u32vec *w, bool at_receiver)
{
    uint32_t best = NONE, best_step = NONE, j = 0;

    for (uint32_t i = 0; i < w->n; i++) {
        uint32_t id = w->v[i];
        const struct sim_msg *m = &sm->msgs[id];
        uint32_t step = at_receiver ? m->recv : m->send;
        bool other_busy = at_receiver ? sm->out_busy[src_port(sm, m)]
                                      : sm->in_busy[dst_port(sm, m)];

        if (m->state & MSG_STARTED)
            continue;
        w->v[j++] = id;
        if (!other_busy && step < best_step &&
            (!msg_uses_core(sm, m) || core_free(sm, m->dst))) {
            best = id;
            best_step = step;
        }
    }
    w->n = j;
    return best;
}

/* Give every free CPU and port of the ranks touched at this instant its next work. */
static coll_status_t dispatch(struct sim *sm)
{
    coll_status_t st;

    for (uint32_t i = 0; i < sm->ndirty; i++) {
        int32_t r = sm->dirty[i];
        struct u32vec *ready = &sm->cpu_ready[r];

        if (!sm->cpu_busy[r] && ready->n && core_free(sm, r)) {
            uint32_t s = minheap_pop(ready);
            const struct sim_step *q = &sm->steps[s];
            bool local = q->kind == COLL_STEP_REDUCE || q->kind == COLL_STEP_COPY;

            sm->cpu_busy[r] = true;
            core_take(sm, r);
            if (!event_push(sm, sm->now + (local ? q->u.dur : sm->p->step), s, EV_CPU))
                return no_memory("the events");
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        bool at_receiver = pass == 0; /* the receiver's choice comes first */

        for (uint32_t i = 0; i < sm->ndirty; i++)
            for (uint8_t k = 0; k < (sm->nic ? 2 : 1) * COLL_NUM_LINKS; k++) {
                uint8_t l = k % COLL_NUM_LINKS;
                int32_t r = sm->dirty[i];
                /* the rank's own ports, then its host's NIC */
                size_t port = k < COLL_NUM_LINKS ? port_of(r, l) : port_of(sm->n + sm->host_of[r], l);
                bool busy = at_receiver ? sm->in_busy[port] : sm->out_busy[port];
                uint32_t id;

                if (busy)
                    continue;
                id = pick(sm, at_receiver ? &sm->in_wait[port] : &sm->out_wait[port], at_receiver);
                if (id != NONE && (st = msg_start(sm, id)) != COLL_SUCCESS)
                    return st;
            }
    }
    for (uint32_t i = 0; i < sm->ndirty; i++)
        sm->is_dirty[sm->dirty[i]] = false;
    sm->ndirty = 0;
    return COLL_SUCCESS;
}

/* Nothing more can happen and some step never ran: name one that is stuck. */
static coll_status_t report_deadlock(const struct sim *sm)
{
    uint32_t first = NONE;

    for (uint32_t s = 0; s < sm->nsteps; s++) {
        const struct sim_step *p = &sm->steps[s];
        const struct sim_msg *m;
        uint32_t other;

        if (p->pending == PENDING_DONE)
            continue;
        if (first == NONE)
            first = s;
        if (p->pending != 0 || (p->kind != COLL_STEP_SEND && p->kind != COLL_STEP_RECV))
            continue;
        /* a ready message end whose other end never gets ready, or that waits behind an
         * earlier message of its channel which never runs */
        m = &sm->msgs[p->u.msg];
        other = p->kind == COLL_STEP_SEND ? m->recv : m->send;
        if (sm->steps[other].pending != 0 && sm->steps[other].pending != PENDING_DONE)
            return coll__error(NULL, COLL_INTERNAL_ERROR,
                               "cost model: schedules deadlock: rank %d step %u (%s %s rank "
                               "%d) is ready, but rank %d step %u (its %s) never is",
                               p->rank, local_index(sm, s), kind_name(p->kind),
                               p->kind == COLL_STEP_SEND ? "to" : "from",
                               p->kind == COLL_STEP_SEND ? m->dst : m->src, sm->steps[other].rank,
                               local_index(sm, other), kind_name(sm->steps[other].kind));
    }
    if (first == NONE)
        return coll__error(NULL, COLL_INTERNAL_ERROR, "cost model: simulation stopped early");
    return coll__error(NULL, COLL_INTERNAL_ERROR,
                       "cost model: schedules deadlock: rank %d step %u (%s) never runs",
                       sm->steps[first].rank, local_index(sm, first),
                       kind_name(sm->steps[first].kind));
}

static coll_status_t sim_run(struct sim *sm, double *time_p, double *finish_p)
{
    double end = 0;
    coll_status_t st;

    sm->now = 0;
    for (uint32_t s = 0; s < sm->nsteps; s++)
        if (sm->steps[s].pending == 0 && (st = step_ready(sm, s)) != COLL_SUCCESS)
            return st;
    for (;;) {
        if ((st = dispatch(sm)) != COLL_SUCCESS)
            return st;
        if (sm->nheap == 0)
            break;
        /* apply every completion of this instant before anything is started again */
        sm->now = sm->heap[0].t;
        while (sm->nheap && sm->heap[0].t == sm->now) {
            struct sim_event ev = event_pop(sm);

            struct sim_step *q = ev.kind == EV_CPU ? &sm->steps[ev.id] : NULL;

            if (ev.kind == EV_PORTS) {
                st = msg_done(sm, ev.id);
            } else if (ev.kind == EV_ARRIVE) {
                if (msg_uses_core(sm, &sm->msgs[ev.id]))
                    core_give(sm, sm->msgs[ev.id].dst);
                mark_dirty(sm, sm->msgs[ev.id].dst);
                st = step_done(sm, sm->msgs[ev.id].recv);
            } else {
                sm->cpu_busy[q->rank] = false;
                core_give(sm, q->rank);
                mark_dirty(sm, q->rank);
                if (q->kind == COLL_STEP_SEND || q->kind == COLL_STEP_RECV) {
                    q->issued = true; /* now its message end is ready */
                    st = step_ready(sm, ev.id);
                } else {
                    st = step_done(sm, ev.id);
                }
            }
            if (st != COLL_SUCCESS)
                return st;
        }
    }
    if (sm->ndone != sm->nsteps)
        return report_deadlock(sm);
    for (int32_t r = 0; r < sm->n; r++)
        end = COLL_MAX(end, sm->finish[r]);
    *time_p = end;
    if (finish_p)
        memcpy(finish_p, sm->finish, (size_t)sm->n * sizeof(*finish_p));
    return COLL_SUCCESS;
}

static coll_status_t check_params(const struct coll_cost_params *p, const double *time_p, int32_t n)
{
    if (!p || !time_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost model: NULL %s",
                           p ? "time_p" : "params");
    if (n < 1)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost model: %d ranks", n);
    return COLL_SUCCESS;
}

coll_status_t coll__cost_simulate(const struct coll_cost_params *p,
                                  const struct coll_cost_links *links,
                                  const struct coll_schedule *scheds, int32_t n, double *time_p,
                                  double *finish_p)
{
    struct sim sm;
    coll_status_t st = check_params(p, time_p, n);

    if (st != COLL_SUCCESS)
        return st;
    if (!scheds)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost model: NULL schedules");
    if ((st = sim_init(&sm, p, links, n)) != COLL_SUCCESS ||
        (st = sim_pool_init(&sm, NULL, 1)) != COLL_SUCCESS)
        goto out_fini;
    for (int32_t r = 0; r < n; r++)
        if ((st = sim_take(&sm, &scheds[r])) != COLL_SUCCESS)
            goto out_fini;
    sim_memory(&sm, NULL, 1);
    if ((st = sim_match(&sm)) != COLL_SUCCESS)
        goto out_fini;
    st = sim_run(&sm, time_p, finish_p);
out_fini:
    sim_fini(&sm);
    return st;
}

/* ---- 4 predict and rank -------------------------------------------------------------- */

static bool can_run(const struct coll_algo *algo, const struct coll_algo_args *a)
{
    return (unsigned)a->coll < COLL_NUM_COLLS && (algo->colls & (1u << a->coll)) &&
           (!algo->applicable || algo->applicable(a));
}

coll_status_t coll__cost_predict(const struct coll_cost_params *p,
                                 const struct coll_cost_links *links, const struct coll_algo *algo,
                                 const struct coll_algo_args *tmpl, double *time_p,
                                 double *finish_p)
{
    struct coll_algo_args a;
    struct sim sm;
    coll_status_t st;

    if (!algo || !tmpl)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost model: NULL %s",
                           algo ? "arguments" : "algorithm");
    if ((st = check_params(p, time_p, tmpl->nranks)) != COLL_SUCCESS)
        return st;
    a = *tmpl;
    a.rank = 0;
    if (!a.elem_size)
        a.elem_size = coll__dtype_size(a.dtype);
    if (!can_run(algo, &a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost model: %s cannot run %s on %d ranks",
                           algo->name, coll__coll_name(a.coll), a.nranks);
    if ((st = sim_init(&sm, p, links, a.nranks)) != COLL_SUCCESS ||
        (st = sim_pool_init(&sm, a.hosts, a.nhosts)) != COLL_SUCCESS)
        goto out_fini;
    for (int32_t r = 0; r < a.nranks; r++) {
        struct coll_schedule s;

        a.rank = r;
        coll__sched_init(&s, &a);
        s.algo = algo;
        st = algo->build(&a, &s);
        if (st == COLL_SUCCESS)
            st = sim_take(&sm, &s);
        coll__sched_free(&s);
        if (st != COLL_SUCCESS)
            goto out_fini;
    }
    sim_memory(&sm, a.hosts, a.nhosts);
    if ((st = sim_match(&sm)) != COLL_SUCCESS)
        goto out_fini;
    st = sim_run(&sm, time_p, finish_p);
out_fini:
    sim_fini(&sm);
    return st;
}

/* Put row into results (sorted, at most cap): after every row that is not slower, so equal
 * times keep the order rows were priced in. */
static void insert_row(struct coll_cost_result *results, size_t cap, size_t *n_p,
                       const struct coll_cost_result *row)
{
    size_t i = *n_p;

    while (i > 0 && results[i - 1].seconds > row->seconds)
        i--;
    if (i >= cap)
        return;
    memmove(&results[i + 1], &results[i], (COLL_MIN(*n_p, cap - 1) - i) * sizeof(*results));
    results[i] = *row;
    if (*n_p < cap)
        (*n_p)++;
}

/* Check q and find its element size and chunk sizes. */
static coll_status_t query_check(const struct coll_cost_query *q, size_t *elem_p,
                                 const size_t **chunks_p, size_t *nchunks_p)
{
    static const size_t default_chunks[] = COLL_COST_DEFAULT_CHUNKS;
    size_t elem = coll__dtype_size(q->dtype);

    if (elem == 0 || (unsigned)q->coll >= COLL_NUM_COLLS || q->nranks < 1 || q->root < 0 ||
        q->root >= q->nranks)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "cost ranking: %s of %zu elements of dtype %d on %d ranks, root %d",
                           coll__coll_name(q->coll), q->count, (int)q->dtype, q->nranks, q->root);
    *elem_p = elem;
    *chunks_p = q->chunk_bytes ? q->chunk_bytes : default_chunks;
    *nchunks_p = q->chunk_bytes ? q->nchunk_bytes : COLL_ARRAY_SIZE(default_chunks);
    if (*nchunks_p == 0)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost ranking: no chunk sizes to try");
    return COLL_SUCCESS;
}

/* Price algo at each chunk size of q: every row into results (every_chunk), else the best
 * into *best (best->algo NULL when algo cannot run q at any). */
static coll_status_t price_algo(const struct coll_cost_params *p,
                                const struct coll_cost_links *links,
                                const struct coll_algo *algo, const struct coll_cost_query *q,
                                size_t elem, const size_t *chunks, size_t nchunks,
                                struct coll_cost_result *results, size_t cap, size_t *nres_p,
                                struct coll_cost_result *best)
{
    *best = (struct coll_cost_result){NULL, 0, 0, 0};
    if (!(algo->colls & (1u << q->coll)))
        return COLL_SUCCESS;
    for (size_t c = 0; c < nchunks; c++) {
        struct coll_algo_args a = {
            .coll = q->coll,
            .nranks = q->nranks,
            .rank = 0,
            .root = q->root,
            .count = q->count,
            .dtype = q->dtype,
            .elem_size = elem,
            .chunk_count = COLL_MAX(chunks[c] / elem, (size_t)1),
            .hosts = q->hosts,
            .nhosts = q->nhosts,
        };
        struct coll_cost_result row;
        bool seen = false;
        coll_status_t st;

        /* past the count every chunk size is the same schedule */
        if (q->count > 0 && a.chunk_count > q->count)
            a.chunk_count = q->count;
        for (size_t k = 0; k < c && !seen; k++)
            seen = COLL_MIN(COLL_MAX(chunks[k] / elem, (size_t)1),
                            q->count ? q->count : SIZE_MAX) == a.chunk_count;
        if (seen || !can_run(algo, &a))
            continue;
        row.algo = algo;
        row.chunk_count = a.chunk_count;
        row.chunk_bytes = a.chunk_count * elem;
        st = q->closed ? coll__cost_closed(p, links, algo, &a, &row.seconds)
                       : coll__cost_predict(p, links, algo, &a, &row.seconds, NULL);
        if (st != COLL_SUCCESS)
            return st;
        if (q->every_chunk)
            insert_row(results, cap, nres_p, &row);
        if (!best->algo || row.seconds < best->seconds)
            *best = row;
    }
    return COLL_SUCCESS;
}

coll_status_t coll__cost_rank_algo(const struct coll_cost_params *p,
                                   const struct coll_cost_links *links,
                                   const struct coll_algo *algo, const struct coll_cost_query *q,
                                   struct coll_cost_result *best)
{
    const size_t *chunks;
    size_t nchunks, elem, nres = 0;
    struct coll_cost_query one;
    coll_status_t st;

    if (!p || !q || !algo || !best)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost ranking: NULL argument");
    if ((st = query_check(q, &elem, &chunks, &nchunks)) != COLL_SUCCESS)
        return st;
    one = *q;
    one.every_chunk = false;
    if ((st = price_algo(p, links, algo, &one, elem, chunks, nchunks, NULL, 0, &nres, best)) !=
        COLL_SUCCESS)
        return st;
    if (!best->algo)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "cost model: %s cannot run %s of %zu elements on %d ranks",
                           algo->name, coll__coll_name(q->coll), q->count, q->nranks);
    return COLL_SUCCESS;
}

coll_status_t coll__cost_rank_algos(const struct coll_cost_params *p,
                                    const struct coll_cost_links *links,
                                    const struct coll_cost_query *q,
                                    struct coll_cost_result *results, size_t cap,
                                    size_t *nresults_p)
{
    const size_t *chunks;
    size_t nchunks, elem, nres = 0;
    coll_status_t st;

    if (!p || !q || !nresults_p || (!results && cap))
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "cost ranking: NULL argument");
    if ((st = query_check(q, &elem, &chunks, &nchunks)) != COLL_SUCCESS)
        return st;
    for (int i = 0; coll__algos[i]; i++) {
        struct coll_cost_result best;

        st = price_algo(p, links, coll__algos[i], q, elem, chunks, nchunks, results, cap, &nres,
                        &best);
        if (st != COLL_SUCCESS)
            return st;
        if (!q->every_chunk && best.algo)
            insert_row(results, cap, &nres, &best);
    }
    *nresults_p = nres;
    return COLL_SUCCESS;
}

/* ---- 5 the flat path's row ----------------------------------------------------------- */

/* What src/path/flat.c does, as far as its price goes: the collectives it runs, those that
 * run in pieces above small_bytes, the reduce that goes whole to the root, and the most
 * ranks the sliced protocol folds at once (COLL_REDUCE_MAX_INPUTS). The path decides from
 * its own rules; these only say what the formula covers. */
#define FLAT_PRICED                                                                        \
    ((1u << COLL_COLL_ALLREDUCE) | (1u << COLL_COLL_BROADCAST) | (1u << COLL_COLL_REDUCE) |   \
     (1u << COLL_COLL_ALLGATHER) | (1u << COLL_COLL_BARRIER))
#define FLAT_PIECES                                                                        \
    ((1u << COLL_COLL_ALLREDUCE) | (1u << COLL_COLL_BROADCAST) | (1u << COLL_COLL_REDUCE))
#define FLAT_REDUCE_WHOLE ((size_t)64 << 10)
#define FLAT_MAX_SLICES 16

coll_status_t coll__cost_predict_flat(const struct coll_cost_params *p, enum coll_coll coll,
                                      size_t bytes, int32_t nranks,
                                      const struct coll_cost_flat_sizes *sizes, double *time_p)
{
    static const struct coll_cost_flat_sizes defaults = COLL_COST_FLAT_SIZES_DEFAULT;
    const struct coll_flat_cost *fc;
    double n = nranks, over = 0, share = 1, wait, w, mem = 1, t;
    size_t small, piece;

    if (!p || !time_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "flat cost: NULL %s",
                           p ? "time_p" : "params");
    if (!sizes)
        sizes = &defaults;
    fc = &p->flat;
    small = sizes->small_bytes;
    piece = sizes->piece_bytes > small ? sizes->piece_bytes : 0;
    if ((unsigned)coll >= COLL_NUM_COLLS || !(FLAT_PRICED & (1u << coll)) || nranks < 1)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "flat cost: the flat path does not run %s on %d ranks",
                           coll__coll_name(coll), nranks);
    if (coll == COLL_COLL_BARRIER)
        bytes = 0;
    if (bytes > small && (!(FLAT_PIECES & (1u << coll)) || !piece || nranks < 2 ||
                          nranks > FLAT_MAX_SLICES))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "flat cost: the flat path does not run %s of %zu bytes on %d ranks "
                           "(small calls up to %zu bytes; larger all-reduce, broadcast and "
                           "reduce in pieces of %zu bytes on 2 to %d ranks)",
                           coll__coll_name(coll), bytes, nranks, small, piece, FLAT_MAX_SLICES);
    if (p->cores > 0 && nranks > p->cores) {
        over = n - p->cores;
        share = n / p->cores;
    }
    wait = fc->alpha * n + fc->yield * over;
    /* the memory term, as sim_memory prices a schedule's buffers: every rank's send and
     * receive buffers (a broadcast's one input and n outputs) and the slots it fills */
    w = (coll == COLL_COLL_BROADCAST ? n + 1 : 2 * n) * (double)bytes +
        2 * n * (double)COLL_MIN(bytes, piece ? piece : small);
    if (p->mem > 1 && p->cache_bytes > 0 && w > p->cache_bytes)
        mem = 1 + (p->mem - 1) * (1 - p->cache_bytes / w);
    if (bytes <= small ||
        (coll == COLL_COLL_REDUCE && bytes <= COLL_MIN(FLAT_REDUCE_WHOLE, piece))) {
        double touch = coll == COLL_COLL_BROADCAST ? 2 : coll == COLL_COLL_BARRIER ? 0 : n + 1;
        /* a reduce's root reads and folds alone, the others write their input and return:
         * its bytes do not share the cores (blocking reduce, 8 ranks on 2 cores, 8-64 KiB:
         * 12-37 us measured in two of three runs at load 7-9, 13-41 priced so; with the
         * share it was 25-136) */
        t = wait + fc->beta * (double)bytes * touch * (coll == COLL_COLL_REDUCE ? 1 : share) * mem;
    } else {
        double k = (double)(bytes / piece + (bytes % piece != 0));
        double waits = coll == COLL_COLL_BROADCAST ? 1 : 2;
        double passes = coll == COLL_COLL_ALLREDUCE ? 3
                        : coll == COLL_COLL_BROADCAST ? 2
                                                      : 2 + (n - 1) / n;
        t = k * waits * wait + fc->sliced * (double)bytes * passes * share * mem;
    }
    *time_p = t;
    return COLL_SUCCESS;
}
