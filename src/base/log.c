/*
 * log.c - COLL_DEBUG=WARN|INFO|TRACE, COLL_DEBUG_SUBSYS=INIT,NET,... (a leading ^ excludes),
 * COLL_DEBUG_FILE=path with %h (host) and %p (pid). Process-wide, set up once.
 */
#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int coll__log_level = COLL_LOG_WARN;
uint32_t coll__log_mask = COLL_SUB_ALL;

static FILE *log_file;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_host[64];

static const struct {
    const char *name;
    uint32_t bit;
} subsys_names[] = {
    {"INIT", COLL_SUB_INIT}, {"BOOTSTRAP", COLL_SUB_BOOTSTRAP}, {"NET", COLL_SUB_NET},
    {"ALGO", COLL_SUB_ALGO}, {"COLL", COLL_SUB_COLL},           {"ENV", COLL_SUB_ENV},
    {"SHM", COLL_SUB_SHM},   {"ALL", COLL_SUB_ALL},
};

static const char *subsys_name(uint32_t bit)
{
    for (size_t i = 0; i < COLL_ARRAY_SIZE(subsys_names); i++)
        if (subsys_names[i].bit == bit)
            return subsys_names[i].name;
    return "COLL";
}

/* The mask of a COLL_DEBUG_SUBSYS value. Names it does not know are left out (comm creation
 * warns about them: coll__log_subsys_valid); a value naming none keeps every subsystem, as a
 * typo that silenced every warning would hide the very warning about it. */
static uint32_t parse_subsys(const char *spec)
{
    bool exclude = spec[0] == '^';
    uint32_t mask = 0;
    int known = 0;
    char buf[256], *save = NULL, *tok;

    snprintf(buf, sizeof(buf), "%s", exclude ? spec + 1 : spec);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < COLL_ARRAY_SIZE(subsys_names); i++)
            if (!strcasecmp(tok, subsys_names[i].name)) {
                mask |= subsys_names[i].bit;
                known++;
            }
    if (!known)
        return COLL_SUB_ALL;
    return exclude ? ~mask : mask;
}

bool coll__log_subsys_valid(const char *spec, char *bad, size_t badlen, char *names,
                            size_t nameslen)
{
    char buf[256], *save = NULL, *tok;
    size_t o = 0, b = 0;
    bool ok = true;

    if (!spec || !*spec)
        return true;
    snprintf(buf, sizeof(buf), "%s", spec[0] == '^' ? spec + 1 : spec);
    bad[0] = '\0';
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < COLL_ARRAY_SIZE(subsys_names) && !found; i++)
            found = !strcasecmp(tok, subsys_names[i].name);
        if (!found) {
            int w = snprintf(bad + b, badlen - b, "%s'%s'", ok ? "" : ", ", tok);
            if (w > 0 && (size_t)w < badlen - b)
                b += (size_t)w;
            ok = false;
        }
    }
    names[0] = '\0';
    for (size_t i = 0; i < COLL_ARRAY_SIZE(subsys_names); i++) {
        int w = snprintf(names + o, nameslen - o, "%s%s", i ? ", " : "", subsys_names[i].name);
        if (w > 0 && (size_t)w < nameslen - o)
            o += (size_t)w;
    }
    return ok;
}

/* Expand %h and %p in a COLL_DEBUG_FILE pattern. */
static void expand_path(const char *pat, char *out, size_t n)
{
    size_t o = 0;

    for (const char *p = pat; *p && o + 1 < n; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int w = p[1] == 'h' ? snprintf(out + o, n - o, "%s", log_host)
                                : snprintf(out + o, n - o, "%d", (int)getpid());
            if (w > 0)
                o += (size_t)w < n - o ? (size_t)w : n - o - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static void log_setup(void)
{
    const char *lvl = getenv("COLL_DEBUG");
    const char *sub = getenv("COLL_DEBUG_SUBSYS");
    const char *file = getenv("COLL_DEBUG_FILE");

    gethostname(log_host, sizeof(log_host) - 1);
    if (lvl) {
        if (!strcasecmp(lvl, "NONE") || !strcasecmp(lvl, "OFF"))
            coll__log_level = COLL_LOG_NONE;
        else if (!strcasecmp(lvl, "WARN"))
            coll__log_level = COLL_LOG_WARN;
        else if (!strcasecmp(lvl, "INFO"))
            coll__log_level = COLL_LOG_INFO;
        else if (!strcasecmp(lvl, "TRACE"))
            coll__log_level = COLL_LOG_TRACE;
    }
    if (sub && *sub)
        coll__log_mask = parse_subsys(sub);
    if (file && *file) {
        char path[512];
        expand_path(file, path, sizeof(path));
        log_file = fopen(path, "a");
        if (log_file)
            setvbuf(log_file, NULL, _IOLBF, 0);
    }
}

void coll__log_init(void)
{
    pthread_once(&log_once, log_setup);
}

__attribute__((constructor)) static void log_ctor(void)
{
    coll__log_init();
}

void coll__log(int level, uint32_t subsys, const char *fmt, ...)
{
    static const char *lvl_names[] = {"NONE", "WARN", "INFO", "TRACE"};
    char msg[2048];
    struct timespec ts;
    va_list ap;
    FILE *f;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&log_lock);
    f = log_file ? log_file : stderr;
    fprintf(f, "%s:%d:%ld [%ld.%06ld] coll %s %s: %s\n", log_host, (int)getpid(),
            (long)syscall(SYS_gettid), (long)ts.tv_sec, ts.tv_nsec / 1000L,
            lvl_names[level & 3], subsys_name(subsys), msg);
    fflush(f);
    pthread_mutex_unlock(&log_lock);
}
