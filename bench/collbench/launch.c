/*
 * launch.c - joining a communicator: under a launcher, alone, or (--np N) by
 * exec'ing collrun on itself.
 */
#include "collbench.h"

/* --np N outside a launcher: exec collrun -n N (found beside this executable, else on PATH)
 * on this executable, with the same arguments less --np. collrun then owns the job: it
 * forwards Ctrl-C and the like to every rank and kills them all when one fails. */
int exec_launcher(const struct opts *o, int argc, char **argv)
{
    char dir[PATH_MAX], collrun[PATH_MAX + 16], self[PATH_MAX], np[16];
    char **args = calloc((size_t)argc + 8, sizeof(*args));
    ssize_t len;
    int k = 0;

    if (!args) {
        fprintf(stderr, "collbench: out of memory\n");
        return 1;
    }
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0 || (size_t)len >= sizeof(self) - 1) {
        fprintf(stderr, "collbench: --np: cannot find this executable: %s\n", strerror(errno));
        free(args);
        return 1;
    }
    self[len] = '\0';
    if (exe_dir(dir, sizeof(dir)) &&
        (size_t)snprintf(collrun, sizeof(collrun), "%s/collrun", dir) < sizeof(collrun) &&
        is_file(collrun, true))
        args[k++] = collrun;
    else
        args[k++] = "collrun"; /* execvp searches PATH */
    snprintf(np, sizeof(np), "%d", o->np);
    args[k++] = "-n";
    args[k++] = np;
    if (o->bind) {
        args[k++] = "--bind-to";
        args[k++] = (char *)o->bind;
    }
    args[k++] = "--";
    args[k++] = self;
    /* the collective by name: the ranks run as collbench, whatever argv[0] said */
    args[k++] = (char *)coll__colls[o->coll].name;
    for (int i = 1; i < argc; i++) {
        const char *inl;
        const struct opt_def *d = argv[i][0] == '-' ? find_opt(argv[i], &inl) : NULL;
        enum coll_coll c;
        if (d && (d->id == O_NP || d->id == O_BIND)) {
            if (!inl)
                i++;
            continue;
        }
        if (!d && argv[i][0] != '-' && coll_by_name(argv[i], &c))
            continue; /* already passed */
        args[k++] = argv[i];
        if (d && d->has_arg && !inl && i + 1 < argc)
            args[k++] = argv[++i];
    }
    args[k] = NULL;
    fflush(stdout);
    execvp(args[0], args);
    fprintf(stderr, "collbench: --np: cannot run %s: %s (it is built beside collbench)\n", args[0],
            strerror(errno));
    free(args);
    return 1;
}

/* --------------------------------------------------------------------------------------
 * main
 */

coll_status_t comm_open(coll_comm_t **comm_p)
{
    coll_unique_id_t id;
    coll_status_t st;

    if (coll__ix_launched())
        return coll_comm_init_env(comm_p);
    /* Alone: a communicator of one rank, its root in this process. */
    st = coll_get_unique_id(&id);
    if (st != COLL_SUCCESS)
        return st;
    return coll_comm_init(comm_p, 1, &id, 0);
}
