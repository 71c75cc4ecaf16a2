/*
 * The disk tier: the generations ckpt-resume (or ckpt-persist) persisted
 * to CKPT_PERSIST_DIRS (persist_format.h).  Each rank's image of a
 * generation is rebuilt in private memory from the manifest's copy of its
 * header area and the extents of its chunks in the stripe files, so that
 * the checks of check.c run on it as on an arena slot; its replay log is
 * rebuilt the same way, in a memory file.  Only this user's private job
 * directories are read (persist.c's rule, never a symlink), a generation
 * without a manifest is one being written (or a torn one the next persist
 * removes) and is left out, and a manifest that does not verify is listed
 * as one image of unknown rank, so that it is reported, never skipped.  It
 * reads with plain pread (a reader needs no O_DIRECT alignment) and must
 * never open anything of a generation for writing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "arena.h"
#include "inspect.h"
#include "log.h"
#include "persist_int.h"
#include "replay.h"

/* The directories of t->root (CKPT_PERSIST_DIRS); the caller frees them. */
static int dirs_of(const struct tier *t, struct ckpt_persist **out, char *why, size_t whylen)
{
    struct ckpt_persist *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int rc = pdir_split(p, t->root, why, whylen);
    if (rc < 0) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Whether the first persist directory is there; said once when it is not:
 * the other tiers may still hold the job, so it is no error. */
static bool present(const struct ckpt_persist *p)
{
    static bool said;
    struct stat st;
    if (stat(p->dirs[0], &st) == 0 && S_ISDIR(st.st_mode))
        return true;
    if (!said)
        ckpt_log(CKPT_WARN, "persist directory %s (CKPT_PERSIST_DIRS): %s", p->dirs[0],
                 errno == ENOENT ? "does not exist" : strerror(errno ? errno : ENOTDIR));
    said = true;
    return false;
}

static int disk_jobs(const struct tier *t, struct names *out, char *why, size_t whylen)
{
    struct ckpt_persist *p;
    char path[PATH_MAX];
    int rc = dirs_of(t, &p, why, whylen);
    if (rc < 0)
        return rc;
    DIR *d = present(p) ? opendir(p->dirs[0]) : NULL;
    if (!d) {
        free(p);
        return 0;
    }
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        const char *job;
        if (ckpt_job_dir_name(e->d_name, &job) && ckpt_job_dir(path, sizeof(path), p->dirs[0], job) == 0 &&
            lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
            names_add(out, job);
    }
    closedir(d);
    free(p);
    return 0;
}

static struct image *add(struct catalog *cat, const struct tier *t, const char *job, const char *jobdir,
                         uint64_t it, int rank)
{
    struct image *img = catalog_add(cat);
    img->tier = t;
    snprintf(img->job, sizeof(img->job), "%s", job);
    img->rank = rank;
    img->slot = -1;
    img->key = it;
    snprintf(img->where, sizeof(img->where), "%.*s/gen-%llu", PATH_MAX - 32, jobdir, (unsigned long long)it);
    return img;
}

static int disk_images(const struct tier *t, const char *job, struct catalog *cat, char *why, size_t whylen)
{
    struct ckpt_persist *p;
    char jobdir[PATH_MAX + 16], mwhy[320];
    uint64_t *its = NULL;
    size_t n = 0;
    int rc = dirs_of(t, &p, why, whylen);

    if (rc < 0)
        return rc;
    if (!present(p)) {
        free(p);
        snprintf(why, whylen, "no persist directory %s", t->root);
        return -ENOENT;
    }
    if ((rc = pdir_job(p->dirs[0], job, false, jobdir, sizeof(jobdir), why, whylen)) < 0 ||
        (rc = pdir_generations(jobdir, &its, &n, why, whylen)) < 0) {
        free(p);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        struct ckpt_pm_header *m;
        int e = pm_load(jobdir, its[i], job, p->ndirs, &m, mwhy, sizeof(mwhy));
        if (e == -ENOENT)
            continue; /* being written, or torn: no generation yet */
        if (e < 0) {
            struct stat st;
            struct image *img = add(cat, t, job, jobdir, its[i], -1);
            if (stat(img->where, &st) == 0)
                img->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
            continue;
        }
        for (uint32_t k = 0; k < m->nranks; k++) {
            const struct ckpt_pm_rank *r = &pm_ranks(m)[k];
            struct image *img = add(cat, t, job, jobdir, its[i], (int)r->rank);
            img->file_bytes = r->image_bytes;
            img->mtime_ns = m->time_ns;
        }
        free(m);
    }
    free(its);
    free(p);
    return 0;
}

/* The generation of img: its manifest (checked, stripes there) and the
 * rank's entry in it.  The caller frees *m and *p. */
static int load(const struct tier *t, const struct image *img, struct ckpt_persist **p, struct ckpt_pm_header **m,
                const struct ckpt_pm_rank **r, char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16];
    int rc;

    *m = NULL;
    if ((rc = dirs_of(t, p, why, whylen)) < 0)
        return rc;
    if ((rc = pdir_job((*p)->dirs[0], img->job, false, jobdir, sizeof(jobdir), why, whylen)) < 0 ||
        (rc = pm_load(jobdir, img->key, img->job, (*p)->ndirs, m, why, whylen)) < 0 ||
        (rc = pm_check_stripes(*p, img->job, *m, why, whylen)) < 0)
        goto fail;
    if (img->rank < 0) {
        /* A manifest that did not verify when the catalog was made does
         * now: the generation changed under us. */
        snprintf(why, whylen, "%s changed while it was read (a persist is running?)", img->where);
        rc = -ESTALE;
        goto fail;
    }
    for (uint32_t k = 0; k < (*m)->nranks; k++) {
        if ((int)pm_ranks(*m)[k].rank == img->rank) {
            *r = &pm_ranks(*m)[k];
            return 0;
        }
    }
    snprintf(why, whylen, "%s: the manifest has no rank %d", img->where, img->rank);
    rc = -ENOENT;
fail:
    free(*m);
    *m = NULL;
    free(*p);
    *p = NULL;
    return rc;
}

/* Reads the extents of chunks first..first+count-1 of the chunk map into
 * buf (chunk c at (c - first) * chunk_bytes).  Returns 0 or -errno. */
static int read_chunks(const struct ckpt_persist *p, const char *job, const struct ckpt_pm_header *m,
                       uint64_t first, uint64_t count, uint64_t chunk_bytes, char *buf, struct progress *pr,
                       char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16], path[PATH_MAX + 64];
    int fd[CKPT_PERSIST_MAX_DIRS];
    int rc = 0;

    for (unsigned d = 0; d < m->ndirs; d++)
        fd[d] = -1;
    for (uint64_t c = 0; c < count && !rc; c++) {
        const struct ckpt_pm_extent *e = &pm_extents(m)[pm_refs(m)[first + c]];
        if ((rc = pdir_job(p->dirs[e->dir], job, false, jobdir, sizeof(jobdir), why, whylen)) < 0)
            break;
        snprintf(path, sizeof(path), "%s/gen-%llu/stripe-%u", jobdir, (unsigned long long)m->iteration, e->dir);
        if (fd[e->dir] < 0 && (fd[e->dir] = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
            rc = -errno;
            snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
            break;
        }
        char *to = buf + c * chunk_bytes;
        for (uint64_t got = 0; got < e->bytes;) {
            ssize_t k = pread(fd[e->dir], to + got, e->bytes - got, (off_t)(e->offset + got));
            if (k <= 0) {
                rc = k < 0 ? -errno : -EBADMSG;
                snprintf(why, whylen, "cannot read %s at byte %llu: %s", path, (unsigned long long)(e->offset + got),
                         k < 0 ? strerror(errno) : "shorter than its manifest says");
                break;
            }
            got += (uint64_t)k;
        }
        if (pr)
            progress_add(pr, e->bytes);
    }
    for (unsigned d = 0; d < m->ndirs; d++)
        if (fd[d] >= 0)
            close(fd[d]);
    return rc;
}

static int disk_map(const struct tier *t, const struct image *img, bool data, struct view *v, struct progress *pr,
                    char *why, size_t whylen)
{
    struct ckpt_persist *p;
    struct ckpt_pm_header *m;
    const struct ckpt_pm_rank *r;

    *v = (struct view){0};
    int rc = load(t, img, &p, &m, &r, why, whylen);
    if (rc < 0)
        return rc;
    const struct ckpt_header *h = (const struct ckpt_header *)((const char *)m + r->head_offset);
    char *buf = mmap(NULL, r->image_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buf == MAP_FAILED) {
        rc = -errno;
        snprintf(why, whylen, "cannot allocate %llu bytes for %s rank %d: %s", (unsigned long long)r->image_bytes,
                 img->where, img->rank, strerror(errno));
        goto out;
    }
    memcpy(buf, h, r->head_bytes);
    if (data && (rc = read_chunks(p, img->job, m, r->data_ref, r->data_chunks, r->chunk_bytes, buf + h->data_offset,
                                  pr, why, whylen)) < 0) {
        munmap(buf, r->image_bytes);
        goto out;
    }
    v->base = buf;
    v->len = r->image_bytes;
out:
    free(m);
    free(p);
    return rc;
}

static void disk_unmap(const struct tier *t, struct view *v)
{
    (void)t;
    if (v->base)
        munmap((void *)v->base, v->len);
    *v = (struct view){0};
}

/* The log a generation names (CKPT_PM_LOG_FILE): the part it needs, from
 * the rank's log beside the generations, checked against its sum, into fd. */
static int log_from_file(const struct ckpt_persist *p, const struct image *img, const struct ckpt_pm_rank *r, int fd,
                         char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16], path[PATH_MAX + 64], iwhy[256];
    int rc = pdir_job(p->dirs[0], img->job, false, jobdir, sizeof(jobdir), why, whylen);
    if (rc < 0)
        return rc;
    int from = -1;
    if ((rc = ckpt_rlog_disk_path(path, sizeof(path), jobdir, img->rank)) == 0 &&
        (from = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        rc = -errno;
    if (rc < 0)
        snprintf(iwhy, sizeof(iwhy), "%s", strerror(-rc));
    else
        rc = ckpt_rlog_copy_prefix(from, fd, r->log_bytes, r->log_sum, iwhy, sizeof(iwhy));
    if (from >= 0)
        close(from);
    if (rc < 0)
        snprintf(why, whylen, "the log it names, %s: %s", path, iwhy);
    return rc < 0 && rc != -ENOMEM ? -EBADMSG : rc;
}

/* The generation's copy of the rank's log: every chunk against its sum
 * first (naming the chunk), then every record, in a memory file. */
static int disk_rlog_verify(const struct tier *t, const struct image *img, uint64_t *last_iteration, char *why,
                            size_t whylen)
{
    struct ckpt_persist *p;
    struct ckpt_pm_header *m;
    const struct ckpt_pm_rank *r;
    char name[PATH_MAX + 64];

    *last_iteration = 0;
    int rc = load(t, img, &p, &m, &r, why, whylen);
    if (rc < 0)
        return rc;
    if (r->log_where == CKPT_PM_LOG_FILE) {
        int fd = memfd_create("replay.log", MFD_CLOEXEC);
        rc = fd < 0 ? -errno : log_from_file(p, img, r, fd, why, whylen);
        if (fd < 0)
            snprintf(why, whylen, "cannot hold a replay log in memory: %s", strerror(-rc));
        snprintf(name, sizeof(name), "%s (rank %d's replay log, named by it)", img->where, img->rank);
        if (rc == 0)
            rc = ckpt_rlog_verify_fd(fd, name, last_iteration, why, whylen);
        if (fd >= 0)
            close(fd);
        free(m);
        free(p);
        return rc == -ENODATA ? -EBADMSG : rc;
    }
    char *buf = r->log_bytes ? malloc(r->log_bytes) : NULL;
    if (r->log_bytes && !buf) {
        snprintf(why, whylen, "out of memory for a replay log of %llu bytes", (unsigned long long)r->log_bytes);
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = read_chunks(p, img->job, m, r->log_ref, r->log_chunks, r->chunk_bytes, buf, NULL, why, whylen)) < 0)
        goto out;
    for (uint64_t c = 0; c < r->log_chunks; c++) {
        const struct ckpt_pm_extent *e = &pm_extents(m)[pm_refs(m)[r->log_ref + c]];
        if (XXH3_64bits(buf + c * r->chunk_bytes, e->bytes) != e->sum) {
            snprintf(why, whylen, "chunk %llu (bytes %llu..) checksum mismatch (stripe-%u, byte %llu)",
                     (unsigned long long)c, (unsigned long long)(c * r->chunk_bytes), e->dir,
                     (unsigned long long)e->offset);
            rc = -EBADMSG;
            goto out;
        }
    }
    int fd = memfd_create("replay.log", MFD_CLOEXEC);
    rc = fd < 0 ? -errno : write_all(fd, buf, r->log_bytes);
    if (rc < 0) {
        snprintf(why, whylen, "cannot hold a replay log in memory: %s", strerror(-rc));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    snprintf(name, sizeof(name), "%s (rank %d's replay log)", img->where, img->rank);
    rc = ckpt_rlog_verify_fd(fd, name, last_iteration, why, whylen);
    close(fd);
    /* Nothing appends to a persisted log: cut short is damage. */
    if (rc == -ENODATA)
        rc = -EBADMSG;
out:
    free(buf);
    free(m);
    free(p);
    return rc;
}

const struct tier_ops disk_tier_ops = {
    .name = "disk",
    .reads = true,
    .jobs = disk_jobs,
    .images = disk_images,
    .map = disk_map,
    .unmap = disk_unmap,
    .rlog_verify = disk_rlog_verify,
    .log_per_copy = true,
};
