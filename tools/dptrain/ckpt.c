/*
 * ckpt.c - checkpoint files: atomic write, verified read.
 */
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t fnv1a(uint64_t h, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ull

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static size_t nstate(uint32_t optim)
{
    return optim == OPTIM_ADAMW ? 2 : 1;
}

size_t ckpt_narrays(const struct ckpt_header *h)
{
    if (!h->diloco)
        return 1 + nstate(h->optim);
    return 3 + (size_t)h->world_size * (1 + nstate(h->optim));
}

/* "DDP" or "--diloco 8 --fragments 2 --overlap 1", for messages. */
static const char *describe(const struct ckpt_header *h, char *buf, size_t len)
{
    if (!h->diloco)
        snprintf(buf, len, "DDP");
    else if (h->overlap < 0)
        snprintf(buf, len, "--diloco %u --fragments %u", h->diloco, h->fragments);
    else
        snprintf(buf, len, "--diloco %u --fragments %u --overlap %d", h->diloco,
                 h->fragments, h->overlap);
    return buf;
}

size_t ckpt_worker_array(const struct ckpt_header *h, int w)
{
    return 3 + (size_t)w * (1 + nstate(h->optim));
}

int ckpt_write(const char *path, const struct ckpt_header *h, const float *const *arrays,
               char *err, size_t errlen)
{
    char tmp[4096], dir[4096];
    size_t bytes = h->nparams * sizeof(float);
    uint64_t sum = fnv1a(FNV_INIT, h, sizeof(*h));
    int fd, dfd;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create checkpoint '%s': %s", tmp, strerror(errno));
        return -1;
    }
    if (write_all(fd, h, sizeof(*h)) != 0)
        goto out_write_error;
    for (size_t a = 0; a < ckpt_narrays(h); a++) {
        if (write_all(fd, arrays[a], bytes) != 0)
            goto out_write_error;
        sum = fnv1a(sum, arrays[a], bytes);
    }
    if (write_all(fd, &sum, sizeof(sum)) != 0 || fsync(fd) != 0)
        goto out_write_error;
    if (close(fd) != 0) {
        fd = -1;
        goto out_write_error;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot rename checkpoint '%s' to '%s': %s", tmp, path,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    /* The rename is durable only once the directory is synced. */
    snprintf(dir, sizeof(dir), "%s", path);
    dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;

out_write_error:
    snprintf(err, errlen, "cannot write checkpoint '%s': %s", tmp, strerror(errno));
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return -1;
}

int ckpt_read(const char *path, const struct ckpt_header *want, struct ckpt_header *h,
              const struct ckpt_pick *picks, int npicks, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long len;
    size_t expect;
    uint64_t sum;
    struct ckpt_header got;
    int ret = -1;

    if (!f) {
        snprintf(err, errlen, "cannot open checkpoint '%s': %s", path, strerror(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errlen, "cannot read checkpoint '%s': %s", path, strerror(errno));
        goto out_close;
    }
    if ((size_t)len < sizeof(got) + sizeof(sum)) {
        snprintf(err, errlen, "checkpoint '%s' is corrupt: %ld bytes, shorter than a header",
                 path, len);
        goto out_close;
    }
    buf = malloc((size_t)len);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        snprintf(err, errlen, "cannot read checkpoint '%s'%s", path, buf ? "" : ": no memory");
        goto out_free;
    }
    memcpy(&got, buf, sizeof(got));
    if (memcmp(got.magic, CKPT_MAGIC, 8) != 0) {
        snprintf(err, errlen, "'%s' is not a dptrain checkpoint (bad magic)", path);
        goto out_free;
    }
    if (got.version != CKPT_VERSION) {
        snprintf(err, errlen, "checkpoint '%s' has version %u; this dptrain reads %u", path,
                 got.version, CKPT_VERSION);
        goto out_free;
    }
    /* Bounds first, so that a corrupt header cannot make the size arithmetic wrap. */
    if (got.nparams > (1ull << 36) || got.world_size > (1u << 20) ||
        got.fragments > MLP_MAX_LAYERS) {
        snprintf(err, errlen, "checkpoint '%s' is corrupt: impossible header (%llu "
                 "parameters, %u ranks, %u fragments)", path, (unsigned long long)got.nparams,
                 got.world_size, got.fragments);
        goto out_free;
    }
    expect = sizeof(got) + ckpt_narrays(&got) * got.nparams * sizeof(float) + sizeof(sum);
    if ((size_t)len != expect) {
        snprintf(err, errlen, "checkpoint '%s' is corrupt: %ld bytes, its header implies %zu",
                 path, len, expect);
        goto out_free;
    }
    memcpy(&sum, buf + len - sizeof(sum), sizeof(sum));
    if (fnv1a(FNV_INIT, buf, (size_t)len - sizeof(sum)) != sum) {
        snprintf(err, errlen, "checkpoint '%s' is corrupt: checksum mismatch", path);
        goto out_free;
    }
    if (got.nlayers != want->nlayers || got.nparams != want->nparams ||
        memcmp(got.sizes, want->sizes, sizeof(got.sizes)) != 0) {
        char have[256] = "";
        for (uint32_t l = 0; l <= got.nlayers && l <= MLP_MAX_LAYERS; l++)
            snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%u", l ? "," : "",
                     got.sizes[l]);
        snprintf(err, errlen, "checkpoint '%s' holds a model of sizes %s, not the one asked "
                 "for (--sizes)", path, have);
        goto out_free;
    }
    if (got.optim != want->optim) {
        snprintf(err, errlen, "checkpoint '%s' was written with optimizer %s, not %s", path,
                 got.optim == OPTIM_ADAMW ? "adamw" : "sgd",
                 want->optim == OPTIM_ADAMW ? "adamw" : "sgd");
        goto out_free;
    }
    if (got.world_size != want->world_size) {
        snprintf(err, errlen, "checkpoint '%s' was written by %u ranks; this run has %u: "
                 "resume with the same number of ranks", path, got.world_size,
                 want->world_size);
        goto out_free;
    }
    if (got.diloco != want->diloco || got.fragments != want->fragments ||
        got.overlap != want->overlap) {
        char a[96], b[96];
        snprintf(err, errlen, "checkpoint '%s' was written by %s; this run is %s: resume "
                 "with the same schedule", path, describe(&got, a, sizeof(a)),
                 describe(want, b, sizeof(b)));
        goto out_free;
    }
    for (int i = 0; i < npicks; i++) {
        if (picks[i].index >= ckpt_narrays(&got)) {
            snprintf(err, errlen, "checkpoint '%s' has no array %zu", path, picks[i].index);
            goto out_free;
        }
    }
    {
        size_t bytes = got.nparams * sizeof(float);
        const unsigned char *p = buf + sizeof(got);
        for (int i = 0; i < npicks; i++)
            memcpy(picks[i].dst, p + picks[i].index * bytes, bytes);
    }
    *h = got;
    ret = 0;

out_free:
    free(buf);
out_close:
    fclose(f);
    return ret;
}
