/*
 * harness.h - a tiny test runner: each TEST runs in its own forked child with an alarm, and
 * the program prints TAP. A case that crashes, hangs or fails an ASSERT fails alone.
 *
 *   TEST(name) { ASSERT_EQ(1 + 1, 2); }
 *   int main(int argc, char **argv) { return harness_main(argc, argv); }
 *
 * COLL_TEST_TIMEOUT (seconds per case, default 60) and COLL_TEST_TIMEOUT_MULTIPLIER scale
 * the alarm (sanitizers are slower). argv[1], if given, runs only cases whose name contains
 * it. HARNESS_NOFORK=1 runs cases in-process (for gdb).
 */
#ifndef COLL_TEST_HARNESS_H
#define COLL_TEST_HARNESS_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*harness_fn)(void);
struct harness_case {
    const char *name;
    harness_fn fn;
};
#define HARNESS_MAX_CASES 512
static struct harness_case harness_cases[HARNESS_MAX_CASES];
static int harness_ncases;

#define TEST(name)                                                                      \
    static void test_##name(void);                                                      \
    __attribute__((constructor)) static void harness_reg_##name(void)                   \
    {                                                                                   \
        if (harness_ncases < HARNESS_MAX_CASES)                                         \
            harness_cases[harness_ncases++] = (struct harness_case){#name, test_##name}; \
    }                                                                                   \
    static void test_##name(void)

#define HARNESS_FAIL(...)                                                               \
    do {                                                                                \
        fprintf(stderr, "# %s:%d: ", __FILE__, __LINE__);                               \
        fprintf(stderr, __VA_ARGS__);                                                   \
        fprintf(stderr, "\n");                                                          \
        fflush(stderr);                                                                 \
        exit(1);                                                                        \
    } while (0)

#define ASSERT(cond)                                                                    \
    do {                                                                                \
        if (!(cond))                                                                    \
            HARNESS_FAIL("assertion failed: %s", #cond);                                \
    } while (0)
#define ASSERT_MSG(cond, ...)                                                           \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "# assertion failed: %s: ", #cond);                         \
            HARNESS_FAIL(__VA_ARGS__);                                                  \
        }                                                                               \
    } while (0)
#define ASSERT_EQ(a, b)                                                                 \
    do {                                                                                \
        long long harness_a_ = (long long)(a), harness_b_ = (long long)(b);             \
        if (harness_a_ != harness_b_)                                                   \
            HARNESS_FAIL("%s == %s: %lld != %lld", #a, #b, harness_a_, harness_b_);     \
    } while (0)
#define ASSERT_NE(a, b)                                                                 \
    do {                                                                                \
        long long harness_a_ = (long long)(a), harness_b_ = (long long)(b);             \
        if (harness_a_ == harness_b_)                                                   \
            HARNESS_FAIL("%s != %s: both %lld", #a, #b, harness_a_);                    \
    } while (0)
#define ASSERT_STR_CONTAINS(hay, needle)                                                \
    do {                                                                                \
        const char *harness_h_ = (hay), *harness_n_ = (needle);                         \
        if (!harness_h_ || !strstr(harness_h_, harness_n_))                             \
            HARNESS_FAIL("'%s' does not contain '%s'", harness_h_ ? harness_h_ : "(null)", \
                         harness_n_);                                                   \
    } while (0)

static inline double harness_timeout_s(void)
{
    const char *t = getenv("COLL_TEST_TIMEOUT");
    const char *m = getenv("COLL_TEST_TIMEOUT_MULTIPLIER");
    double s = t ? atof(t) : 60.0, mul = m ? atof(m) : 1.0;
    if (s <= 0)
        s = 60.0;
    if (mul <= 0)
        mul = 1.0;
    return s * mul;
}

static inline int harness_main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int nofork = getenv("HARNESS_NOFORK") != NULL;
    int selected = 0, failed = 0, i, k = 0;

    for (i = 0; i < harness_ncases; i++)
        if (!filter || strstr(harness_cases[i].name, filter))
            selected++;
    printf("1..%d\n", selected);
    fflush(stdout);
    for (i = 0; i < harness_ncases; i++) {
        const struct harness_case *c = &harness_cases[i];
        int status = 0, ok;
        pid_t pid;

        if (filter && !strstr(c->name, filter))
            continue;
        k++;
        if (nofork) {
            c->fn();
            printf("ok %d - %s\n", k, c->name);
            fflush(stdout);
            continue;
        }
        pid = fork();
        if (pid < 0) {
            printf("not ok %d - %s # fork failed\n", k, c->name);
            failed++;
            continue;
        }
        if (pid == 0) {
            alarm((unsigned)(harness_timeout_s() + 0.5));
            c->fn();
            fflush(stdout);
            fflush(stderr);
            _exit(0);
        }
        while (waitpid(pid, &status, 0) < 0)
            ;
        ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (ok) {
            printf("ok %d - %s\n", k, c->name);
        } else {
            failed++;
            if (WIFSIGNALED(status))
                printf("not ok %d - %s # killed by signal %d%s\n", k, c->name,
                       WTERMSIG(status), WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
            else
                printf("not ok %d - %s # exit %d\n", k, c->name, WEXITSTATUS(status));
        }
        fflush(stdout);
    }
    return failed ? 1 : 0;
}

#endif /* COLL_TEST_HARNESS_H */
