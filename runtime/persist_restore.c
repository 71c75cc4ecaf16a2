/*
 * Reading a generation back (persist.h: ckpt_persist_restore, and the deep
 * check of ckpt_persist_list): every extent is read once with io_uring,
 * hashed as it arrives and copied to each rank that shares it.  The arena
 * gets the images and logs in files beside the slots (mapped, where the
 * arena is shared memory, so that aligned blocks are read straight into
 * them), renamed over them only when every byte verified, with the image
 * header written last: a failed or interrupted restore leaves the arena as
 * it found it, and never a file with an image header over unverified data.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "image.h"
#include "log.h"
#include "persist_int.h"

static const struct ckpt_header *head_of(const struct ckpt_pm_header *m, const struct ckpt_pm_rank *r)
{
    return (const struct ckpt_header *)((const char *)m + r->head_offset);
}

/* Points each extent's task at the places it goes: a counting sort of the
 * chunk map by extent. */
static void place(const struct ckpt_pm_header *m, struct pio_task *tasks, struct pio_dst *places,
                  const struct pm_dest *dest)
{
    const uint64_t *refs = pm_refs(m);
    for (uint64_t r = 0; r < m->nrefs; r++)
        tasks[refs[r]].ndst++;
    uint64_t at = 0;
    for (uint64_t e = 0; e < m->nextents; e++) {
        tasks[e].dst = places + at;
        at += tasks[e].ndst;
        tasks[e].ndst = 0;
    }
    for (uint32_t i = 0; i < m->nranks; i++) {
        const struct ckpt_pm_rank *r = &pm_ranks(m)[i];
        uint64_t data = head_of(m, r)->data_offset;
        for (uint64_t c = 0; c < r->data_chunks + r->log_chunks; c++) {
            bool log = c >= r->data_chunks;
            struct pio_task *t = &tasks[refs[log ? r->log_ref + c - r->data_chunks : r->data_ref + c]];
            t->dst[t->ndst++] = (struct pio_dst){.fd = dest[i].fd[log], .path = dest[i].path[log],
                                                 .off = (log ? c - r->data_chunks : c) * r->chunk_bytes + (log ? 0 : data),
                                                 .map = dest[i].map[log], .map_len = dest[i].len[log]};
        }
    }
}

int pm_read(struct ckpt_persist *p, const char *job, const struct ckpt_pm_header *m, const struct pm_dest *dest,
            ckpt_persist_progress_fn progress, void *arg, uint64_t *moved, uint64_t *direct, char *why,
            size_t whylen)
{
    char jobdir[PATH_MAX + 16], (*paths)[PATH_MAX + 64] = calloc(m->ndirs, sizeof(*paths));
    struct pio_task *tasks = calloc(m->nextents ? m->nextents : 1, sizeof(*tasks));
    struct pio_dst *places = calloc(m->nrefs ? m->nrefs : 1, sizeof(*places));
    struct pio_job j = {.tasks = tasks, .ntasks = m->nextents, .progress = progress, .arg = arg};
    unsigned opened = 0;
    int rc = 0;

    if (!paths || !tasks || !places) {
        snprintf(why, whylen, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    for (; opened < m->ndirs; opened++) {
        unsigned d = opened;
        if ((rc = pdir_job(p->dirs[d], job, false, jobdir, sizeof(jobdir), why, whylen)) < 0)
            goto out;
        snprintf(paths[d], sizeof(paths[d]), "%s/gen-%llu/stripe-%u", jobdir, (unsigned long long)m->iteration, d);
        if ((j.fd[d] = pdir_open(paths[d], O_RDONLY, why, whylen)) < 0) {
            rc = j.fd[d];
            goto out;
        }
        j.path[d] = paths[d];
    }
    for (uint64_t e = 0; e < m->nextents; e++) {
        const struct ckpt_pm_extent *x = &pm_extents(m)[e];
        tasks[e] = (struct pio_task){.dir = x->dir, .off = x->offset, .bytes = x->bytes, .sum = x->sum};
        j.total += x->bytes;
    }
    if (dest)
        place(m, tasks, places, dest);
    if ((rc = pio_run(p, &j)) < 0) {
        snprintf(why, whylen, "%s", j.why);
        goto out;
    }
    for (uint64_t e = 0; moved && e < m->nextents; e++)
        *moved += ckpt_align_up(tasks[e].bytes, CKPT_PM_ALIGN);
    if (direct)
        *direct += j.direct;
out:
    for (unsigned d = 0; d < opened; d++)
        close(j.fd[d]);
    free(paths);
    free(tasks);
    free(places);
    return rc;
}

/* A new file of len bytes beside the arena's file @name (@name.from-disk),
 * its space taken now so that a full /dev/shm fails here, before any
 * reading.  Where the arena is shared memory the file is mapped (*map,
 * else NULL) for the reads to land in: only there, as a disk filesystem's
 * page cache must not take DMA into pages it may be writing back. */
static int make_file(const char *dir, const char *name, uint64_t len, int *fd, char **map, char *path,
                     size_t pathlen, char *why, size_t whylen)
{
    struct statfs fs;
    snprintf(path, pathlen, "%s/%s.from-disk", dir, name);
    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    int e = *fd < 0 ? errno : posix_fallocate(*fd, 0, (off_t)len);
    if (e) {
        snprintf(why, whylen, "cannot make %s (%llu bytes): %s", path, (unsigned long long)len, strerror(e));
        return -e;
    }
    if (!len || fstatfs(*fd, &fs) < 0 || fs.f_type != TMPFS_MAGIC)
        return 0;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (m == MAP_FAILED)
        return 0;
    *map = m;
    return 0;
}

/* Every byte verified: the image header goes in last, then the files
 * replace the arena's; slot1 is emptied so that only this image is found. */
static int install(const char *dir, const struct pm_dest *t, const struct ckpt_pm_header *m,
                   const struct ckpt_pm_rank *r, char *why, size_t whylen)
{
    char to[2][PATH_MAX + 32], other[PATH_MAX + 32];

    if (pwrite(t->fd[0], head_of(m, r), r->head_bytes, 0) != (ssize_t)r->head_bytes) {
        int e = errno ? errno : ENOSPC;
        snprintf(why, whylen, "cannot write %s: %s", t->path[0], strerror(e));
        return -e;
    }
    if (ckpt_slot_path(to[0], sizeof(to[0]), dir, 0) < 0 || ckpt_rlog_arena_path(to[1], sizeof(to[1]), dir) < 0 ||
        ckpt_slot_path(other, sizeof(other), dir, 1) < 0) {
        snprintf(why, whylen, "the paths in %s are too long", dir);
        return -ENAMETOOLONG;
    }
    int fd = open(other, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot empty %s: %s", other, strerror(e));
        return -e;
    }
    close(fd);
    if (r->log_where == CKPT_PM_LOG_FILE) {
        int rc = ckpt_rlog_point(dir, t->path[1], why, whylen);
        if (rc < 0)
            return rc;
    }
    for (int k = 0; k < (r->log_where == CKPT_PM_LOG_FILE ? 1 : 2); k++) {
        if (rename(t->path[k], to[k]) < 0) {
            int e = errno;
            snprintf(why, whylen, "cannot rename %s to %s: %s", t->path[k], to[k], strerror(e));
            return -e;
        }
    }
    return 0;
}

/* A log the generation names (CKPT_PM_LOG_FILE): its part, in the rank's
 * log beside the generations, checked against its sum.  The log stays
 * there: the arena's replay.log becomes a stub naming it (install), so a
 * restore from disk holds no copy of a log of any length in memory, and
 * replay finds the failed run's records past the restore point too. */
static int log_check(const char *jobdir, const struct ckpt_pm_rank *r, struct pm_dest *t, char *why, size_t whylen)
{
    char *path = t->path[1], iwhy[256];
    if (r->log_where != CKPT_PM_LOG_FILE)
        return 0;
    int fd = -1, rc = ckpt_rlog_disk_path(path, sizeof(t->path[1]), jobdir, (int)r->rank);
    if (rc == 0 && (fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        rc = -errno;
    if (rc < 0)
        snprintf(iwhy, sizeof(iwhy), "%s", strerror(-rc));
    else
        rc = ckpt_rlog_copy_prefix(fd, -1, r->log_bytes, r->log_sum, iwhy, sizeof(iwhy));
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        snprintf(why, whylen, "rank %u's replay log %s, which the generation names: %s", r->rank, path, iwhy);
        return rc == -ENOMEM || rc == -ENOSPC ? rc : -EBADMSG;
    }
    return 0;
}

static int restore_one(struct ckpt_persist *p, const struct ckpt_persist_req *rq, uint64_t it,
                       struct ckpt_persist_stats *st, char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16];
    struct ckpt_pm_header *m;
    struct timespec t0, t1;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((rc = pdir_job(p->dirs[0], rq->job, false, jobdir, sizeof(jobdir), why, whylen)) < 0)
        return rc;
    if ((rc = pm_load(jobdir, it, rq->job, p->ndirs, &m, why, whylen)) < 0 ||
        (rc = pm_check_stripes(p, rq->job, m, why, whylen)) < 0) {
        free(m);
        return rc;
    }
    struct pm_dest *t = calloc(m->nranks, sizeof(*t));
    char (*dirs)[PATH_MAX] = calloc(m->nranks, sizeof(*dirs));
    uint32_t made = 0;
    if (!t || !dirs) {
        snprintf(why, whylen, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    for (; made < m->nranks; made++) {
        const struct ckpt_pm_rank *r = &pm_ranks(m)[made];
        struct ckpt_arena a;
        t[made].fd[0] = t[made].fd[1] = -1;
        if ((rc = ckpt_arena_open(&a, rq->arena, rq->job, (int)r->rank, 0, why, whylen)) < 0)
            goto out;
        snprintf(dirs[made], sizeof(dirs[made]), "%s", a.dir);
        ckpt_arena_close(&a);
        t[made].len[0] = r->image_bytes;
        t[made].len[1] = r->log_bytes;
        rc = make_file(dirs[made], ckpt_slot_name(0), r->image_bytes, &t[made].fd[0], &t[made].map[0],
                       t[made].path[0], sizeof(t[made].path[0]), why, whylen);
        if (!rc && r->log_where != CKPT_PM_LOG_FILE)
            rc = make_file(dirs[made], CKPT_RLOG_ARENA_NAME, r->log_bytes, &t[made].fd[1], &t[made].map[1],
                           t[made].path[1], sizeof(t[made].path[1]), why, whylen);
        if (rc < 0) {
            made++;
            goto out;
        }
    }
    *st = (struct ckpt_persist_stats){.iteration = it, .nranks = m->nranks, .logical_bytes = m->logical_bytes,
                                      .registered = p->rings[0].fixed};
    if ((rc = pm_read(p, rq->job, m, t, rq->progress, rq->arg, &st->moved_bytes, &st->direct_bytes, why,
                      whylen)) < 0)
        goto out;
    for (uint32_t i = 0; i < m->nranks && !rc; i++)
        rc = log_check(jobdir, &pm_ranks(m)[i], &t[i], why, whylen);
    for (uint32_t i = 0; i < m->nranks && !rc; i++)
        rc = install(dirs[i], &t[i], m, &pm_ranks(m)[i], why, whylen);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    st->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
out:
    for (uint32_t i = 0; t && i < made; i++) {
        for (int k = 0; k < 2; k++) {
            if (t[i].map[k])
                munmap(t[i].map[k], t[i].len[k]);
            if (t[i].fd[k] >= 0)
                close(t[i].fd[k]);
            if (rc < 0 && t[i].path[k][0] && (k == 0 || pm_ranks(m)[i].log_where != CKPT_PM_LOG_FILE))
                unlink(t[i].path[k]); /* never the log on disk a generation names */
        }
    }
    free(t);
    free(dirs);
    free(m);
    return rc;
}

int ckpt_persist_restore(struct ckpt_persist *p, const struct ckpt_persist_req *rq, struct ckpt_persist_stats *st,
                         char *why, size_t whylen)
{
    struct ckpt_persist_gen g;
    uint64_t below = 0;
    int rc;

    memset(st, 0, sizeof(*st));
    __atomic_store_n(&p->cancel, 0, __ATOMIC_RELEASE);
    if (rq->iteration)
        return restore_one(p, rq, rq->iteration, st, why, whylen);
    for (;;) {
        if ((rc = ckpt_persist_newest(p, rq->job, below, 0, &g, why, whylen)) < 0)
            return rc;
        rc = restore_one(p, rq, g.iteration, st, why, whylen);
        if (rc != -EBADMSG)
            return rc;
        ckpt_log(CKPT_WARN, "the generation of iteration %llu does not verify (%s): trying an older one",
                 (unsigned long long)g.iteration, why);
        below = g.iteration;
    }
}
