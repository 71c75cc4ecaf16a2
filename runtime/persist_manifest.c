/*
 * The manifest of persist_format.h: its tables, its seal, and the checks a
 * reader runs before it trusts one.  The checks bound every count and
 * offset by the file's size before using it, verify the checksum before
 * any field, and tie each rank's data extents to the chunk sums of the
 * image header it carries, so a manifest that verifies describes images
 * that will verify.  Nothing here writes to disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "image.h"
#include "persist_int.h"

struct ckpt_pm_rank *pm_ranks(const struct ckpt_pm_header *m)
{
    return (struct ckpt_pm_rank *)(m + 1);
}

uint64_t *pm_stripes(const struct ckpt_pm_header *m)
{
    return (uint64_t *)(pm_ranks(m) + m->nranks);
}

struct ckpt_pm_extent *pm_extents(const struct ckpt_pm_header *m)
{
    return (struct ckpt_pm_extent *)(pm_stripes(m) + m->ndirs);
}

uint64_t *pm_refs(const struct ckpt_pm_header *m)
{
    return (uint64_t *)(pm_extents(m) + m->nextents);
}

uint64_t pm_size(unsigned nranks, unsigned ndirs, uint64_t nextents, uint64_t nrefs, uint64_t heads)
{
    return sizeof(struct ckpt_pm_header) + (uint64_t)nranks * sizeof(struct ckpt_pm_rank) + ndirs * 8ull +
           nextents * sizeof(struct ckpt_pm_extent) + nrefs * 8 + heads;
}

static uint64_t sum_of(const struct ckpt_pm_header *m)
{
    struct ckpt_pm_header h = *m;
    h.sum = 0;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &h, sizeof(h));
    XXH3_64bits_update(&st, m + 1, m->manifest_bytes - sizeof(h));
    return XXH3_64bits_digest(&st);
}

void pm_seal(struct ckpt_pm_header *m)
{
    memcpy(m->magic, CKPT_PM_MAGIC, sizeof(m->magic));
    m->version = CKPT_PM_VERSION;
    m->sum = sum_of(m);
}

/* One rank's entry against its image header and its extents. */
static int check_rank(const struct ckpt_pm_header *m, const struct ckpt_pm_rank *r, const char *job, char *why,
                      size_t whylen)
{
    const struct ckpt_pm_extent *ext = pm_extents(m);
    const uint64_t *refs = pm_refs(m);
    uint64_t tables = pm_size(m->nranks, m->ndirs, m->nextents, m->nrefs, 0);
    struct ckpt_header h;
    char iwhy[200];

    if (r->head_offset % 8 || r->head_offset < tables || r->head_offset > m->manifest_bytes ||
        r->head_bytes > m->manifest_bytes - r->head_offset || r->head_bytes < sizeof(h) ||
        r->data_ref > m->nrefs || r->data_chunks > m->nrefs - r->data_ref || r->log_ref > m->nrefs ||
        r->log_chunks > m->nrefs - r->log_ref || !r->chunk_bytes || r->log_where > CKPT_PM_LOG_FILE ||
        r->log_chunks != (r->log_where == CKPT_PM_LOG_FILE ? 0 : (r->log_bytes + r->chunk_bytes - 1) / r->chunk_bytes)) {
        snprintf(why, whylen, "manifest entry of rank %u is inconsistent", r->rank);
        return -EBADMSG;
    }
    const char *head = (const char *)m + r->head_offset;
    memcpy(&h, head, sizeof(h));
    if (h.header_bytes != r->head_bytes ||
        ckpt_image_verify_header(head, r->image_bytes, &h, iwhy, sizeof(iwhy)) < 0) {
        snprintf(why, whylen, "manifest: the image header of rank %u does not verify (%s)", r->rank,
                 h.header_bytes != r->head_bytes ? "size" : iwhy);
        return -EBADMSG;
    }
    if (h.rank != r->rank || h.iteration != m->iteration || strcmp(h.job, job) != 0 ||
        h.data_offset + h.data_bytes != r->image_bytes || h.nchunks != r->data_chunks ||
        h.chunk_bytes != r->chunk_bytes) {
        snprintf(why, whylen, "manifest: the image header of rank %u disagrees with its entry", r->rank);
        return -EBADMSG;
    }
    const uint64_t *sums = (const uint64_t *)(head + sizeof(h) + h.nallocs * sizeof(struct ckpt_rec));
    for (uint64_t c = 0; c < r->data_chunks; c++) {
        const struct ckpt_pm_extent *e = &ext[refs[r->data_ref + c]];
        uint64_t left = h.data_bytes - c * h.chunk_bytes;
        if (e->sum != sums[c] || e->bytes != (left < h.chunk_bytes ? left : h.chunk_bytes)) {
            snprintf(why, whylen, "manifest: rank %u chunk %llu does not match its image header", r->rank,
                     (unsigned long long)c);
            return -EBADMSG;
        }
    }
    for (uint64_t c = 0; c < r->log_chunks; c++) {
        uint64_t left = r->log_bytes - c * r->chunk_bytes;
        if (ext[refs[r->log_ref + c]].bytes != (left < r->chunk_bytes ? left : r->chunk_bytes)) {
            snprintf(why, whylen, "manifest: rank %u replay log chunk %llu has the wrong size", r->rank,
                     (unsigned long long)c);
            return -EBADMSG;
        }
    }
    return 0;
}

/* Everything but reading the file: m holds len bytes. */
struct span {
    uint64_t at, n;
};

static int by_start(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->at != y->at ? (x->at > y->at) - (x->at < y->at) : (x->n > y->n) - (x->n < y->n);
}

/* The ranks' image and log chunks are ranges of the chunk map that cover it
 * exactly once, as the writer lays them out: a restore places one chunk
 * per entry, and a map that two ranges share would place chunks twice. */
static int check_cover(const struct ckpt_pm_header *m, char *why, size_t whylen)
{
    struct span *s = malloc(2 * (size_t)m->nranks * sizeof(*s));
    if (!s) {
        snprintf(why, whylen, "out of memory checking the manifest");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < m->nranks; i++) {
        const struct ckpt_pm_rank *r = &pm_ranks(m)[i];
        s[2 * i] = (struct span){r->data_ref, r->data_chunks};
        s[2 * i + 1] = (struct span){r->log_ref, r->log_chunks};
    }
    qsort(s, 2 * (size_t)m->nranks, sizeof(*s), by_start);
    uint64_t covered = 0;
    for (size_t k = 0; k < 2 * (size_t)m->nranks && covered != UINT64_MAX; k++)
        if (s[k].n)
            covered = s[k].at == covered ? covered + s[k].n : UINT64_MAX;
    free(s);
    if (covered != m->nrefs) {
        snprintf(why, whylen, "the manifest's ranks do not cover its chunk map exactly once");
        return -EBADMSG;
    }
    return 0;
}

static int check(const struct ckpt_pm_header *m, uint64_t len, uint64_t iteration, const char *job, unsigned ndirs,
                 char *why, size_t whylen)
{
    if (len < sizeof(*m) || memcmp(m->magic, CKPT_PM_MAGIC, sizeof(m->magic)) != 0) {
        snprintf(why, whylen, "the manifest is not one (bad magic or too short)");
        return -EBADMSG;
    }
    if (m->version != CKPT_PM_VERSION) {
        snprintf(why, whylen, "manifest version %u, this libckpt reads %u", m->version, CKPT_PM_VERSION);
        return -EBADMSG;
    }
    if (m->manifest_bytes != len) {
        snprintf(why, whylen, "the manifest is %llu bytes, it says %llu (truncated)", (unsigned long long)len,
                 (unsigned long long)m->manifest_bytes);
        return -EBADMSG;
    }
    if (sum_of(m) != m->sum) {
        snprintf(why, whylen, "manifest checksum mismatch");
        return -EBADMSG;
    }
    if (m->ndirs > CKPT_PERSIST_MAX_DIRS || !m->nranks || m->nranks > len / sizeof(struct ckpt_pm_rank) ||
        m->nextents > len / sizeof(struct ckpt_pm_extent) || m->nrefs > len / 8 ||
        pm_size(m->nranks, m->ndirs, m->nextents, m->nrefs, 0) > len || strnlen(m->job, CKPT_JOB_MAX) == CKPT_JOB_MAX) {
        snprintf(why, whylen, "the manifest's sizes are inconsistent");
        return -EBADMSG;
    }
    if (strcmp(m->job, job) != 0 || m->iteration != iteration) {
        snprintf(why, whylen, "the manifest is of job %s iteration %llu", m->job, (unsigned long long)m->iteration);
        return -EBADMSG;
    }
    if (m->ndirs != ndirs) {
        snprintf(why, whylen, "written over %u directories, CKPT_PERSIST_DIRS names %u", m->ndirs, ndirs);
        return -EBADMSG;
    }
    const uint64_t *stripes = pm_stripes(m), *refs = pm_refs(m);
    const struct ckpt_pm_extent *ext = pm_extents(m);
    for (uint64_t i = 0; i < m->nextents; i++) {
        const struct ckpt_pm_extent *e = &ext[i];
        if (e->dir >= m->ndirs || e->offset % CKPT_PM_ALIGN || !e->bytes || e->offset > stripes[e->dir] ||
            ckpt_align_up(e->bytes, CKPT_PM_ALIGN) > stripes[e->dir] - e->offset) {
            snprintf(why, whylen, "manifest extent %llu lies outside its stripe file", (unsigned long long)i);
            return -EBADMSG;
        }
    }
    for (uint64_t i = 0; i < m->nrefs; i++) {
        if (refs[i] >= m->nextents) {
            snprintf(why, whylen, "manifest chunk map entry %llu names no extent", (unsigned long long)i);
            return -EBADMSG;
        }
    }
    for (uint32_t i = 0; i < m->nranks; i++) {
        int rc = check_rank(m, &pm_ranks(m)[i], job, why, whylen);
        if (rc < 0)
            return rc;
    }
    return check_cover(m, why, whylen);
}

int pm_load(const char *jobdir, uint64_t iteration, const char *job, unsigned ndirs, struct ckpt_pm_header **out,
            char *why, size_t whylen)
{
    char path[PATH_MAX + 48];
    struct stat st;

    *out = NULL;
    snprintf(path, sizeof(path), "%s/gen-%llu/manifest", jobdir, (unsigned long long)iteration);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (e == ENOENT)
            snprintf(why, whylen, "no manifest: the generation is incomplete");
        else
            snprintf(why, whylen, "cannot read %s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    if ((uint64_t)st.st_size < sizeof(struct ckpt_pm_header) || (uint64_t)st.st_size > CKPT_PM_MAX_BYTES) {
        snprintf(why, whylen, "%s is %lld bytes: not a manifest", path, (long long)st.st_size);
        close(fd);
        return -EBADMSG;
    }
    /* 8-byte aligned for the tables; calloc'd so a short read is zeros. */
    struct ckpt_pm_header *m = calloc(1, ckpt_align_up((uint64_t)st.st_size, 8));
    if (!m) {
        close(fd);
        snprintf(why, whylen, "out of memory for %s", path);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = pread(fd, (char *)m + got, (size_t)st.st_size - got, (off_t)got);
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            snprintf(why, whylen, "cannot read %s: %s", path, strerror(e));
            close(fd);
            free(m);
            return -e;
        }
        got += (size_t)n;
    }
    close(fd);
    int rc = check(m, (uint64_t)st.st_size, iteration, job, ndirs, why, whylen);
    if (rc < 0) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int pm_check_stripes(const struct ckpt_persist *p, const char *job, const struct ckpt_pm_header *m, char *why,
                     size_t whylen)
{
    char jobdir[PATH_MAX + 16], path[PATH_MAX + 64];
    const uint64_t *stripes = pm_stripes(m);
    struct stat st;
    int rc;

    for (unsigned d = 0; d < m->ndirs; d++) {
        if ((rc = pdir_job(p->dirs[d], job, false, jobdir, sizeof(jobdir), why, whylen)) < 0)
            return rc;
        snprintf(path, sizeof(path), "%s/gen-%llu/stripe-%u", jobdir, (unsigned long long)m->iteration, d);
        if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
            snprintf(why, whylen, "%s is missing: the generation is torn", path);
            return -EBADMSG;
        }
        if ((uint64_t)st.st_size < stripes[d]) {
            snprintf(why, whylen, "%s is %lld bytes, the manifest says %llu: the generation is torn", path,
                     (long long)st.st_size, (unsigned long long)stripes[d]);
            return -EBADMSG;
        }
    }
    return 0;
}
