/*
 * Writing one generation (persist.h: ckpt_persist_generation).  The slot
 * images and replay logs of the ranks are mapped read-only from the arena;
 * a plan cuts them into chunks (the image's own checksum chunks, the log
 * in chunks of the same size) and keeps one extent per distinct chunk:
 * equal sums, confirmed byte for byte, so the replicas of data-parallel
 * ranks are written once.  An extent map rather than content-addressed
 * files, so that a generation is one file per directory whatever its
 * size.  Extents are dealt round-robin to the directories (to the one with
 * the fewest bytes so far, which is round-robin for chunks of one size);
 * the mover writes them; the manifest, fsync'ed and renamed into place
 * last, makes the generation complete.  It must never change a complete
 * generation other than by removing it once a newer one is complete, and
 * never leave a partial one behind when it fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "arena.h"
#include "image.h"
#include "log.h"
#include "persist_int.h"
#include "replay.h"
#include "util.h"

/* One rank's committed snapshot and log, mapped. */
struct src {
    int rank;
    void *map[2];
    size_t len[2];
    struct ckpt_header h[2];
    bool ok[2];
    int slot;
    char *head;                /* copy of the chosen image's header area */
    const char *log;           /* mapped, when the generation copies it */
    size_t log_len;
    bool log_file;             /* the generation names the log on disk instead */
    uint64_t log_sum;
};

struct save {
    struct ckpt_persist *p;
    const struct ckpt_persist_req *rq;
    struct src *src;
    uint64_t iteration;
    struct pio_task *tasks;    /* one per extent */
    size_t ntasks;
    uint64_t *refs, nrefs;
    uint64_t *first_ref;       /* per rank: its data refs, then its log refs */
    uint64_t stripe[CKPT_PERSIST_MAX_DIRS];
    char jobdir[CKPT_PERSIST_MAX_DIRS][PATH_MAX + 16];
    char path[CKPT_PERSIST_MAX_DIRS][PATH_MAX + 80];
    bool made[CKPT_PERSIST_MAX_DIRS]; /* gen dir created by this call */
    bool new_job[CKPT_PERSIST_MAX_DIRS]; /* job dir too: its entry must be synced */
    int lock;
};

static void close_src(struct src *s)
{
    for (int k = 0; k < 2; k++)
        if (s->map[k])
            munmap(s->map[k], s->len[k]);
    if (s->log)
        munmap((void *)s->log, s->log_len);
    free(s->head);
}

/* Maps both slots of a rank and notes which hold a committed snapshot. */
static int map_slots(struct src *s, const char *dir, const char *job, char *why, size_t whylen)
{
    char path[PATH_MAX + 16], iwhy[200];
    for (int k = 0; k < 2; k++) {
        struct stat st;
        if (ckpt_slot_path(path, sizeof(path), dir, k) < 0)
            continue;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
            continue;
        if (fd < 0 || fstat(fd, &st) < 0) {
            int e = errno;
            snprintf(why, whylen, "cannot read %s: %s", path, strerror(e));
            if (fd >= 0)
                close(fd);
            return -e;
        }
        if (st.st_size >= (off_t)sizeof(struct ckpt_header)) {
            void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                s->map[k] = m;
                s->len[k] = (size_t)st.st_size;
                s->ok[k] = ckpt_image_verify_header(m, s->len[k], &s->h[k], iwhy, sizeof(iwhy)) == 0 &&
                           s->h[k].rank == (uint32_t)s->rank && strcmp(s->h[k].job, job) == 0;
            }
        }
        close(fd);
    }
    return 0;
}

static bool holds(const struct src *s, uint64_t it)
{
    return (s->ok[0] && s->h[0].iteration == it) || (s->ok[1] && s->h[1].iteration == it);
}

static void describe(const struct src *s, int k, char *out, size_t n)
{
    if (s->ok[k])
        snprintf(out, n, "slot%d holds iteration %llu", k, (unsigned long long)s->h[k].iteration);
    else
        snprintf(out, n, "slot%d holds no committed snapshot", k);
}

/* The scan of rank's log the engine keeps, or a new one. */
static struct ckpt_rlog_scan *scan_of(struct ckpt_persist *p, int rank)
{
    for (size_t i = 0; i < p->nscans; i++)
        if (p->scans[i].rank == rank)
            return &p->scans[i].sc;
    struct log_scan *n = realloc(p->scans, (p->nscans + 1) * sizeof(*n));
    if (!n)
        return NULL;
    p->scans = n;
    n[p->nscans] = (struct log_scan){.rank = rank};
    return &n[p->nscans++].sc;
}

/* A rank's log open on fd: when it is the file beside the generations
 * (CKPT_PM_LOG_FILE), the part the snapshot needs and its sum; 1 when it is
 * not (the generation copies it), 0 when it is, -errno with why. */
static int log_beside(struct save *sv, struct src *s, int fd, char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16], path[PATH_MAX + 64], iwhy[200];
    struct stat st, there;
    if (pdir_job(sv->p->dirs[0], sv->rq->job, false, jobdir, sizeof(jobdir), iwhy, sizeof(iwhy)) < 0)
        return 1;
    if (ckpt_rlog_disk_path(path, sizeof(path), jobdir, s->rank) < 0 || fstat(fd, &st) < 0 ||
        stat(path, &there) < 0 || st.st_dev != there.st_dev || st.st_ino != there.st_ino)
        return 1;
    struct ckpt_rlog_scan *sc = scan_of(sv->p, s->rank);
    if (!sc) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int rc = ckpt_rlog_scan(fd, sv->iteration, sc, iwhy, sizeof(iwhy));
    if (rc < 0) {
        snprintf(why, whylen, "rank %d's replay log %s: %s", s->rank, path, iwhy);
        return rc;
    }
    s->log_file = true;
    s->log_len = sc->bytes;
    s->log_sum = sc->sum;
    return 0;
}

/* Maps every rank's slots, picks the iteration, copies the headers and
 * maps the logs (or names them: log_beside).  The header copy is verified again: the rank may have
 * started to overwrite the slot since it was first read. */
static int open_sources(struct save *sv, char *why, size_t whylen)
{
    const struct ckpt_persist_req *rq = sv->rq;
    char dir[PATH_MAX], path[PATH_MAX + 16], iwhy[200] = "", slots[2][64];
    int rc;

    for (unsigned i = 0; i < rq->nranks; i++) {
        sv->src[i].rank = rq->ranks[i];
        if ((rc = ckpt_arena_path(dir, sizeof(dir), rq->arena, rq->job, rq->ranks[i])) < 0) {
            snprintf(why, whylen, "arena path under %s is too long", rq->arena);
            return rc;
        }
        if ((rc = map_slots(&sv->src[i], dir, rq->job, why, whylen)) < 0)
            return rc;
    }
    sv->iteration = rq->iteration;
    for (int k = 0; !rq->iteration && k < 2; k++) {
        const struct src *s0 = &sv->src[0];
        bool all = s0->ok[k] && s0->h[k].iteration > sv->iteration;
        for (unsigned i = 1; all && i < rq->nranks; i++)
            all = holds(&sv->src[i], s0->h[k].iteration);
        if (all)
            sv->iteration = s0->h[k].iteration;
    }
    for (unsigned i = 0; i < rq->nranks; i++) {
        struct src *s = &sv->src[i];
        if (!sv->iteration || !holds(s, sv->iteration)) {
            describe(s, 0, slots[0], sizeof(slots[0]));
            describe(s, 1, slots[1], sizeof(slots[1]));
            snprintf(why, whylen, "rank %d has no committed snapshot of %s (%s, %s)", s->rank,
                     sv->iteration ? "that iteration" : "an iteration every rank holds", slots[0], slots[1]);
            return -ENOENT;
        }
        s->slot = s->ok[0] && s->h[0].iteration == sv->iteration ? 0 : 1;
        const struct ckpt_header *h = &s->h[s->slot];
        /* Every byte of the slot is read: its page tables filled at once
         * cost less than a fault every 64 KiB inside the I/O loop, where a
         * stall leaves the disk's queue empty.  Best effort: without
         * MADV_POPULATE_READ (Linux < 5.14) the pages fault in as read. */
        madvise(s->map[s->slot], s->len[s->slot], MADV_POPULATE_READ);
        struct ckpt_header again;
        if (!(s->head = malloc(h->header_bytes))) {
            snprintf(why, whylen, "out of memory");
            return -ENOMEM;
        }
        memcpy(s->head, s->map[s->slot], h->header_bytes);
        memcpy(&again, s->head, sizeof(again));
        if (again.header_bytes != h->header_bytes ||
            ckpt_image_verify_header(s->head, s->len[s->slot], &again, iwhy, sizeof(iwhy)) < 0 ||
            again.generation != h->generation) {
            snprintf(why, whylen, "rank %d slot%d changed while it was being read (%s)", s->rank, s->slot, iwhy);
            return -ESTALE;
        }
        ckpt_arena_path(dir, sizeof(dir), rq->arena, rq->job, s->rank); /* it fit above */
        ckpt_rlog_arena_path(path, sizeof(path), dir);
        int fd = ckpt_rlog_open_fd(dir, iwhy, sizeof(iwhy));
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
            snprintf(why, whylen, "rank %d has no replay log (%s): its snapshot could not be restored", s->rank,
                     fd < 0 ? iwhy : "empty");
            if (fd >= 0)
                close(fd);
            return -ENOENT;
        }
        if ((rc = log_beside(sv, s, fd, why, whylen)) <= 0) {
            close(fd);
            if (rc < 0)
                return rc;
            continue;
        }
        s->log_len = (size_t)st.st_size;
        s->log = mmap(NULL, s->log_len, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (s->log == MAP_FAILED) {
            s->log = NULL;
            snprintf(why, whylen, "cannot map %s: %s", path, strerror(errno));
            return -ENOMEM;
        }
    }
    return 0;
}

/* Adds a chunk: a new extent, or the one already holding these bytes. */
static void add_chunk(struct save *sv, uint64_t *table, uint64_t mask, const char *src, uint64_t bytes,
                      uint64_t sum, int rank, bool log, uint64_t chunk)
{
    uint64_t i = sum & mask;
    for (; table[i]; i = (i + 1) & mask) {
        const struct pio_task *k = &sv->tasks[table[i] - 1];
        if (k->sum == sum && k->bytes == bytes && memcmp(k->src, src, bytes) == 0) {
            sv->refs[sv->nrefs++] = table[i] - 1;
            return;
        }
    }
    uint32_t dir = 0;
    for (uint32_t d = 1; d < sv->p->ndirs; d++)
        if (sv->stripe[d] < sv->stripe[dir])
            dir = d;
    sv->tasks[sv->ntasks] = (struct pio_task){.dir = dir, .off = sv->stripe[dir], .bytes = bytes, .sum = sum,
                                              .src = src, .rank = rank, .log = log, .chunk = chunk};
    sv->stripe[dir] += ckpt_align_up(bytes, CKPT_PM_ALIGN);
    sv->refs[sv->nrefs++] = sv->ntasks;
    table[i] = ++sv->ntasks;
}

static int plan(struct save *sv, char *why, size_t whylen)
{
    unsigned n = sv->rq->nranks;
    uint64_t chunks = 0, size = 2;

    for (unsigned i = 0; i < n; i++) {
        const struct src *s = &sv->src[i];
        const struct ckpt_header *h = &s->h[s->slot];
        chunks += h->nchunks + (s->log_file ? 0 : (s->log_len + h->chunk_bytes - 1) / h->chunk_bytes);
    }
    while (size < 2 * chunks)
        size *= 2;
    uint64_t *table = calloc(size, sizeof(*table)); /* extent index + 1; 0 = empty */
    sv->tasks = calloc(chunks ? chunks : 1, sizeof(*sv->tasks));
    sv->refs = calloc(chunks ? chunks : 1, sizeof(*sv->refs));
    sv->first_ref = calloc(2 * n, sizeof(*sv->first_ref));
    if (!table || !sv->tasks || !sv->refs || !sv->first_ref) {
        free(table);
        snprintf(why, whylen, "out of memory for the plan of %llu chunks", (unsigned long long)chunks);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < n; i++) {
        const struct src *s = &sv->src[i];
        const struct ckpt_header *h = &s->h[s->slot];
        const char *data = (const char *)s->map[s->slot] + h->data_offset;
        const uint64_t *sums = (const uint64_t *)(s->head + sizeof(*h) + h->nallocs * sizeof(struct ckpt_rec));
        sv->first_ref[2 * i] = sv->nrefs;
        for (uint64_t c = 0; c < h->nchunks; c++) {
            uint64_t left = h->data_bytes - c * h->chunk_bytes;
            add_chunk(sv, table, size - 1, data + c * h->chunk_bytes, left < h->chunk_bytes ? left : h->chunk_bytes,
                      sums[c], s->rank, false, c);
        }
        sv->first_ref[2 * i + 1] = sv->nrefs;
        for (uint64_t c = 0; !s->log_file && c * h->chunk_bytes < s->log_len; c++) {
            uint64_t left = s->log_len - c * h->chunk_bytes;
            uint64_t len = left < h->chunk_bytes ? left : h->chunk_bytes;
            const char *src = s->log + c * h->chunk_bytes;
            add_chunk(sv, table, size - 1, src, len, XXH3_64bits(src, len), s->rank, true, c);
        }
    }
    free(table);
    return 0;
}

/* Makes gen-<iteration> in every directory (a leftover partial one of the
 * same iteration is replaced) and its stripe file, with all its space
 * allocated now: a full disk fails here, before anything is written. */
static int make_dirs(struct save *sv, struct pio_job *j, char *why, size_t whylen)
{
    struct ckpt_persist *p = sv->p;
    const char *job = sv->rq->job;
    unsigned long long it = (unsigned long long)sv->iteration;
    char path[PATH_MAX + 48];
    int rc;

    for (unsigned d = 0; d < p->ndirs; d++) {
        if ((rc = pdir_job(p->dirs[d], job, true, sv->jobdir[d], sizeof(sv->jobdir[d]), why, whylen)) < 0)
            return rc;
        sv->new_job[d] = rc == 1;
    }
    snprintf(path, sizeof(path), "%s/lock", sv->jobdir[0]);
    if ((sv->lock = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
        return rc;
    }
    if (flock(sv->lock, LOCK_EX | LOCK_NB) < 0) {
        snprintf(why, whylen, "another process is persisting job %s (it holds %s)", job, path);
        return -EBUSY;
    }
    snprintf(path, sizeof(path), "%s/gen-%llu/manifest", sv->jobdir[0], it);
    if (access(path, F_OK) == 0) {
        snprintf(why, whylen, "iteration %llu of job %s is already persisted (%s)", it, job, path);
        return -EEXIST;
    }
    for (unsigned d = 0; d < p->ndirs; d++) {
        pdir_remove_gen(sv->jobdir[d], sv->iteration);
        snprintf(path, sizeof(path), "%s/gen-%llu", sv->jobdir[d], it);
        if (mkdir(path, 0700) < 0) {
            rc = -errno;
            snprintf(why, whylen, "cannot create %s: %s", path, strerror(errno));
            return rc;
        }
        sv->made[d] = true;
        snprintf(sv->path[d], sizeof(sv->path[d]), "%s/stripe-%u", path, d);
        if ((j->fd[d] = pdir_open(sv->path[d], O_WRONLY | O_CREAT | O_EXCL, why, whylen)) < 0)
            return j->fd[d];
        j->path[d] = sv->path[d];
        /* fallocate, not posix_fallocate: its emulation writes through
         * the O_DIRECT descriptor and fails. */
        int e = sv->stripe[d] && fallocate(j->fd[d], 0, 0, (off_t)sv->stripe[d]) < 0 ? errno : 0;
        if (e && e != EOPNOTSUPP) {
            snprintf(why, whylen, "cannot allocate %.1f MiB for %s: %s", sv->stripe[d] / 1048576.0, sv->path[d],
                     strerror(e));
            return -e;
        }
    }
    return 0;
}

/* After the data is durable: the directories, then the manifest, written
 * beside, fsync'ed and renamed into place, then its directory again. */
static int commit(struct save *sv, char *why, size_t whylen)
{
    struct ckpt_persist *p = sv->p;
    unsigned n = sv->rq->nranks;
    char gen[PATH_MAX + 32], tmp[PATH_MAX + 48], fin[PATH_MAX + 48];
    uint64_t heads = 0;
    int rc;

    for (unsigned d = 0; d < p->ndirs; d++) {
        snprintf(gen, sizeof(gen), "%s/gen-%llu", sv->jobdir[d], (unsigned long long)sv->iteration);
        if ((rc = pdir_sync(gen, why, whylen)) < 0 || (rc = pdir_sync(sv->jobdir[d], why, whylen)) < 0 ||
            (sv->new_job[d] && (rc = pdir_sync(p->dirs[d], why, whylen)) < 0))
            return rc;
    }
    for (unsigned i = 0; i < n; i++)
        heads += ckpt_align_up(sv->src[i].h[sv->src[i].slot].header_bytes, 8);
    uint64_t size = pm_size(n, p->ndirs, sv->ntasks, sv->nrefs, heads);
    struct ckpt_pm_header *m = calloc(1, size);
    if (!m) {
        snprintf(why, whylen, "out of memory for the manifest");
        return -ENOMEM;
    }
    *m = (struct ckpt_pm_header){.ndirs = p->ndirs, .iteration = sv->iteration, .nranks = n,
                                 .nextents = sv->ntasks, .nrefs = sv->nrefs, .manifest_bytes = size};
    snprintf(m->job, sizeof(m->job), "%s", sv->rq->job);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    for (unsigned d = 0; d < p->ndirs; d++) {
        pm_stripes(m)[d] = sv->stripe[d];
        m->stored_bytes += sv->stripe[d];
    }
    for (size_t k = 0; k < sv->ntasks; k++) {
        const struct pio_task *t = &sv->tasks[k];
        pm_extents(m)[k] = (struct ckpt_pm_extent){.dir = t->dir, .offset = t->off, .bytes = t->bytes, .sum = t->sum};
    }
    memcpy(pm_refs(m), sv->refs, sv->nrefs * sizeof(*sv->refs));
    uint64_t at = pm_size(n, p->ndirs, sv->ntasks, sv->nrefs, 0);
    for (unsigned i = 0; i < n; i++) {
        const struct src *s = &sv->src[i];
        const struct ckpt_header *h = &s->h[s->slot];
        pm_ranks(m)[i] = (struct ckpt_pm_rank){
            .rank = (uint32_t)s->rank, .world = h->world, .generation = h->generation,
            .image_bytes = h->data_offset + h->data_bytes, .head_offset = at, .head_bytes = h->header_bytes,
            .chunk_bytes = h->chunk_bytes, .data_ref = sv->first_ref[2 * i], .data_chunks = h->nchunks,
            .log_bytes = s->log_len, .log_ref = sv->first_ref[2 * i + 1],
            .log_chunks = s->log_file ? 0 : (s->log_len + h->chunk_bytes - 1) / h->chunk_bytes,
            .log_sum = s->log_sum, .log_where = s->log_file ? CKPT_PM_LOG_FILE : CKPT_PM_LOG_CHUNKS};
        memcpy((char *)m + at, s->head, h->header_bytes);
        at += ckpt_align_up(h->header_bytes, 8);
        m->logical_bytes += h->data_offset + h->data_bytes + s->log_len;
    }
    pm_seal(m);

    snprintf(gen, sizeof(gen), "%s/gen-%llu", sv->jobdir[0], (unsigned long long)sv->iteration);
    snprintf(tmp, sizeof(tmp), "%s/manifest.tmp", gen);
    snprintf(fin, sizeof(fin), "%s/manifest", gen);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    rc = fd < 0 ? -errno : 0;
    for (uint64_t done = 0; !rc && done < size;) {
        ssize_t w = write(fd, (char *)m + done, size - done);
        rc = w < 0 ? -errno : w == 0 ? -ENOSPC : 0;
        done += w > 0 ? (uint64_t)w : 0;
    }
    if (!rc && fsync(fd) < 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    free(m);
    if (!rc && rename(tmp, fin) < 0)
        rc = -errno;
    if (rc < 0) {
        snprintf(why, whylen, "cannot write the manifest %s: %s", fin, strerror(-rc));
        return rc;
    }
    return pdir_sync(gen, why, whylen);
}

/* Once the new generation is complete: keep it, every complete one of a
 * later iteration (another run's), and keep - 1 complete older ones;
 * remove everything else, partial ones included, in every directory. */
static void prune(struct save *sv)
{
    struct ckpt_persist *p = sv->p;
    char why[256], path[PATH_MAX + 48];
    uint64_t *its, *keep = NULL;
    size_t n, nkeep = 0, older = 0;

    if (pdir_generations(sv->jobdir[0], &its, &n, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_WARN, "cannot remove old generations: %s", why);
        return;
    }
    if (!(keep = calloc(n + 1, sizeof(*keep)))) {
        free(its);
        ckpt_log(CKPT_WARN, "cannot remove old generations: out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/gen-%llu/manifest", sv->jobdir[0], (unsigned long long)its[i]);
        if (its[i] == sv->iteration || (access(path, F_OK) == 0 && (its[i] > sv->iteration || ++older < p->keep)))
            keep[nkeep++] = its[i];
    }
    free(its);
    for (unsigned d = 0; d < p->ndirs; d++) {
        if (pdir_generations(sv->jobdir[d], &its, &n, why, sizeof(why)) < 0)
            continue;
        for (size_t i = 0; i < n; i++) {
            bool kept = false;
            for (size_t k = 0; k < nkeep && !kept; k++)
                kept = keep[k] == its[i];
            if (!kept)
                pdir_remove_gen(sv->jobdir[d], its[i]);
        }
        free(its);
        pdir_sync(sv->jobdir[d], why, sizeof(why));
    }
    free(keep);
}

int ckpt_persist_generation(struct ckpt_persist *p, const struct ckpt_persist_req *rq, struct ckpt_persist_stats *st,
                            char *why, size_t whylen)
{
    struct save *sv = calloc(1, sizeof(*sv));
    struct pio_job j = {.write = true};
    int rc;

    memset(st, 0, sizeof(*st));
    for (unsigned d = 0; d < CKPT_PERSIST_MAX_DIRS; d++)
        j.fd[d] = -1;
    if (!rq->nranks || strlen(rq->job) >= CKPT_JOB_MAX) {
        snprintf(why, whylen, rq->nranks ? "job name %s is too long" : "no rank to persist", rq->job);
        free(sv);
        return -EINVAL;
    }
    if (!sv || !(sv->src = calloc(rq->nranks, sizeof(*sv->src)))) {
        snprintf(why, whylen, "out of memory");
        free(sv);
        return -ENOMEM;
    }
    __atomic_store_n(&p->cancel, 0, __ATOMIC_RELEASE);
    sv->p = p;
    sv->rq = rq;
    sv->lock = -1;
    double t0 = ckpt_now_s();
    if ((rc = open_sources(sv, why, whylen)) < 0 || (rc = plan(sv, why, whylen)) < 0 ||
        (rc = make_dirs(sv, &j, why, whylen)) < 0)
        goto out;
    j.tasks = sv->tasks;
    j.ntasks = sv->ntasks;
    for (size_t k = 0; k < sv->ntasks; k++)
        j.total += sv->tasks[k].bytes;
    j.progress = rq->progress;
    j.arg = rq->arg;
    if ((rc = pio_run(p, &j)) < 0) {
        snprintf(why, whylen, "%s", j.why);
        goto out;
    }
    if ((rc = commit(sv, why, whylen)) < 0)
        goto out;
    *st = (struct ckpt_persist_stats){.iteration = sv->iteration, .nranks = rq->nranks, .seconds = ckpt_now_s() - t0,
                                      .registered = p->rings[0].fixed, .direct_bytes = j.direct};
    for (unsigned d = 0; d < p->ndirs; d++)
        st->moved_bytes += sv->stripe[d];
    for (unsigned i = 0; i < rq->nranks; i++)
        st->logical_bytes += sv->src[i].h[sv->src[i].slot].data_offset + sv->src[i].h[sv->src[i].slot].data_bytes +
                             sv->src[i].log_len;
    prune(sv);
out:
    for (unsigned d = 0; d < p->ndirs; d++) {
        if (j.fd[d] >= 0)
            close(j.fd[d]);
        if (rc < 0 && sv->made[d])
            pdir_remove_gen(sv->jobdir[d], sv->iteration);
    }
    if (sv->lock >= 0)
        close(sv->lock);
    for (unsigned i = 0; i < rq->nranks; i++)
        close_src(&sv->src[i]);
    free(sv->src);
    free(sv->tasks);
    free(sv->refs);
    free(sv->first_ref);
    free(sv);
    return rc;
}
