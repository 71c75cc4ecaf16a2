/*
 * libFuzzer target: persisted-generation manifests (runtime/
 * persist_manifest.c), as a restore meets them on a damaged or hostile
 * disk.  pm_load must load a manifest or refuse it with a reason, never
 * read outside it or crash; a manifest it accepts must keep every promise
 * the restore relies on (every chunk reference names an extent, every
 * extent lies in its stripe, every rank's image header lies in the file).
 * Inputs whose first byte is odd are sealed first (magic, version, size,
 * directory count, checksum) and loaded as the job and iteration they
 * name, so the fuzzer reaches the checks behind the checksum; the others
 * are loaded as iteration 7 of job "fz".
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char jobdir[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[160], gen[160], why[512], job[CKPT_JOB_MAX] = "fz";
    uint64_t iteration = 7;
    if (size < 1)
        return 0;
    int seal = data[0] & 1;
    unsigned ndirs = 1 + (data[0] >> 1) % 4;
    data++;
    size--;
    if (!jobdir[0]) {
        snprintf(jobdir, sizeof(jobdir), "/tmp/ckpt-fuzz-manifest-%d", (int)getpid());
        mkdir(jobdir, 0700);
        snprintf(path, sizeof(path), "%s/files", jobdir);
        mkdir(path, 0700);
    }
    uint8_t *m = calloc(1, size + 8);
    if (!m)
        return 0;
    memcpy(m, data, size);
    if (seal && size >= sizeof(struct ckpt_pm_header)) {
        struct ckpt_pm_header *h = (struct ckpt_pm_header *)m;
        h->manifest_bytes = size;
        h->ndirs = ndirs;
        h->job[CKPT_JOB_MAX - 1] = '\0';
        memcpy(job, h->job, sizeof(job));
        iteration = h->iteration;
        pm_seal(h);
    }
    /* gen-<iteration> is a symlink to one directory: only the manifest itself is opened with O_NOFOLLOW. */
    snprintf(path, sizeof(path), "%s/files/manifest", jobdir);
    snprintf(gen, sizeof(gen), "%s/gen-%llu", jobdir, (unsigned long long)iteration);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, m, size) != (ssize_t)size || symlink("files", gen) < 0) {
        if (fd >= 0)
            close(fd);
        free(m);
        return 0;
    }
    close(fd);
    free(m);

    struct ckpt_pm_header *h;
    int rc = pm_load(jobdir, iteration, job, ndirs, &h, why, sizeof(why));
    unlink(gen);
    if (rc == 0) {
        const struct ckpt_pm_rank *r = pm_ranks(h);
        const struct ckpt_pm_extent *e = pm_extents(h);
        const uint64_t *refs = pm_refs(h), *stripes = pm_stripes(h);
        for (uint64_t i = 0; i < h->nrefs; i++)
            if (refs[i] >= h->nextents)
                abort();
        for (uint64_t i = 0; i < h->nextents; i++)
            if (e[i].dir >= h->ndirs || e[i].offset + e[i].bytes > stripes[e[i].dir])
                abort();
        for (uint32_t i = 0; i < h->nranks; i++)
            if (r[i].head_offset + r[i].head_bytes > h->manifest_bytes ||
                r[i].data_ref + r[i].data_chunks > h->nrefs || r[i].log_ref + r[i].log_chunks > h->nrefs)
                abort();
        free(h);
    }
    return 0;
}
