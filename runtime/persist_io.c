/*
 * The mover of the persistence engine: one thread per io_uring ring, each
 * moving its share of the extents (those of its directories, or with more
 * rings than directories every k-th extent of one) between memory and
 * their stripe files in block-sized I/Os, up to depth in flight.  A block
 * whose bytes in the arena are page aligned and whole pages long moves
 * straight between the arena's mapping and the disk; any other (a short
 * tail, a log not cut on pages, a restore target that could not be
 * mapped) goes through the ring's registered buffers, as does every block
 * of a ring whose kernel refused such an I/O once.  I/Os retire in
 * submission order, so each extent is hashed as a stream, every block once
 * its I/O completed and where it went from or to.  A write is hashed in
 * the buffer it was copied to, or in the slot itself (which the ranks
 * leave alone while it is persisted: a change that reached the disk was
 * made before the hash and fails it), so what reaches the disk is exactly
 * what was checked against the sums the ranks committed.  A block read
 * into a buffer is copied out only as it is hashed; one read straight into
 * the arena lands in a file that only becomes the slot once everything
 * verified (persist_restore.c).  It must never leave
 * an I/O in flight when it returns (the buffers and mappings are reused or
 * unmapped), and it checks for cancellation only between extents.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "persist_int.h"

/* One I/O in flight; they live in a FIFO of depth places, place i using
 * buffer i of the ring unless it moves in place. */
struct slot {
    size_t task;
    uint64_t at;               /* offset in the extent */
    uint32_t len, padded;      /* true and submitted length */
    char *direct;              /* the arena's bytes it moves in place, or NULL: buffer i */
    int res;
    bool done;
};

struct mover {
    struct ckpt_persist *p;
    struct pio_ring *r;
    struct pio_job *j;
    unsigned index;            /* moves the extents owns() gives it */
    struct slot *slots;
    uint64_t head, tail;       /* FIFO positions: next to retire, next to queue */
    size_t task;               /* next to queue: this extent ... */
    uint64_t at;               /* ... from this offset */
    bool stop;                 /* queue nothing more */
    XXH3_state_t hash;
};

__attribute__((format(printf, 3, 4))) static void fail(struct pio_job *j, int err, const char *fmt, ...)
{
    pthread_mutex_lock(&j->lock);
    if (!j->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->why, sizeof(j->why), fmt, ap);
        va_end(ap);
        __atomic_store_n(&j->err, err, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&j->lock);
}

static bool stopping(const struct mover *m)
{
    return __atomic_load_n(&m->p->cancel, __ATOMIC_ACQUIRE) || __atomic_load_n(&m->j->err, __ATOMIC_ACQUIRE);
}

/* Whether task t is this ring's: with no more rings than directories,
 * every extent of the directories d with d % nrings == index; with more,
 * the rings d, d + ndirs, ... take d's extents in turn.  Either way each
 * extent is exactly one ring's. */
static bool owns(const struct mover *m, size_t t)
{
    unsigned nr = m->p->nrings, nd = m->p->ndirs, d = m->j->tasks[t].dir;
    if (nr <= nd)
        return d % nr == m->index;
    unsigned k = (nr - 1 - d) / nd + 1; /* rings d, d + nd, ... below nr */
    return m->index % nd == d && (t / nd) % k == m->index / nd;
}

static size_t next_task(const struct mover *m, size_t from)
{
    while (from < m->j->ntasks && !owns(m, from))
        from++;
    return from;
}

/* An extent is through: count it and let the caller see (and throttle). */
static void progress(struct mover *m, const struct pio_task *k)
{
    struct pio_job *j = m->j;
    pthread_mutex_lock(&j->lock);
    j->done += k->bytes;
    if (j->progress && j->progress(j->arg, j->done, j->total))
        __atomic_store_n(&m->p->cancel, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&j->lock);
}

/* Where block [at, at + len) of task k can move without a copy: its bytes
 * in the arena when they start on a page and are whole pages (O_DIRECT
 * needs the one, and a read padded past them would spill into what
 * follows without the other); else NULL.  A read goes straight only into
 * the first place of its extent: the others are copied from it once the
 * block is in.  A write's bytes are never written through the pointer. */
static char *direct_at(const struct mover *m, const struct pio_task *k, uint64_t at, uint32_t len)
{
    const struct pio_dst *d = k->ndst ? &k->dst[0] : NULL;
    char *p = NULL;

    if (m->r->no_direct || len % CKPT_PM_ALIGN)
        return NULL;
    if (m->j->write)
        p = (char *)k->src + at;
    else if (d && d->map && d->off + at + len <= d->map_len)
        p = d->map + d->off + at;
    return (uintptr_t)p % CKPT_PM_ALIGN ? NULL : p;
}

/* Prepares the I/O of FIFO place pos as its slot says; a write through
 * the buffer copies its block in first, zero-padded. */
static void prep(struct mover *m, uint64_t pos)
{
    unsigned i = (unsigned)(pos % m->p->depth);
    const struct slot *s = &m->slots[i];
    const struct pio_task *k = &m->j->tasks[s->task];
    char *buf = s->direct ? s->direct : m->r->buf + (size_t)i * m->p->block;
    bool fixed = m->r->fixed && !s->direct;
    uint64_t off = k->off + s->at;
    int fd = m->j->fd[k->dir];
    /* Never NULL: at most depth I/Os are queued and the ring has depth entries. */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&m->r->ring);

    if (m->j->write && !s->direct) {
        memcpy(buf, k->src + s->at, s->len);
        memset(buf + s->len, 0, s->padded - s->len);
    }
    if (m->j->write && fixed)
        io_uring_prep_write_fixed(sqe, fd, buf, s->padded, off, (int)i);
    else if (m->j->write)
        io_uring_prep_write(sqe, fd, buf, s->padded, off);
    else if (fixed)
        io_uring_prep_read_fixed(sqe, fd, buf, s->padded, off, (int)i);
    else
        io_uring_prep_read(sqe, fd, buf, s->padded, off);
    io_uring_sqe_set_data64(sqe, pos);
}

/* Queues the next block of task t at offset at into FIFO place pos. */
static void issue(struct mover *m, uint64_t pos, size_t t, uint64_t at)
{
    const struct pio_task *k = &m->j->tasks[t];
    unsigned i = (unsigned)(pos % m->p->depth);
    uint64_t left = k->bytes - at;
    uint32_t len = (uint32_t)(left < m->p->block ? left : m->p->block);

    m->slots[i] = (struct slot){.task = t, .at = at, .len = len,
                                .padded = (uint32_t)ckpt_align_up(len, CKPT_PM_ALIGN),
                                .direct = direct_at(m, k, at, len)};
    /* A read into the arena faults its pages in here, while the I/Os
     * queued before it keep the disk busy: else the kernel's pinning of
     * them fails its fast path and hands the I/O to a worker thread, and
     * faulting all of them before the first read leaves the disk idle
     * meanwhile.  Best effort (MADV_POPULATE_WRITE: Linux 5.14). */
    if (!m->j->write && m->slots[i].direct)
        madvise(m->slots[i].direct, len, MADV_POPULATE_WRITE);
    prep(m, pos);
}

/* A block moving in place failed as O_DIRECT does where the kernel or the
 * filesystem will not take the arena's shared memory (EINVAL, EFAULT):
 * this ring goes through its buffers from now on, and the block is queued
 * again that way.  Returns whether it was. */
static bool retry(struct mover *m, struct slot *s, uint64_t pos)
{
    if (!s->direct || m->j->fault || (s->res != -EINVAL && s->res != -EFAULT) ||
        __atomic_load_n(&m->j->err, __ATOMIC_ACQUIRE))
        return false;
    ckpt_log_once(CKPT_DEBUG, "persist: I/O straight from or into the arena's memory failed (%s): copying "
                              "through the I/O buffers instead", strerror(-s->res));
    m->r->no_direct = true;
    s->direct = NULL;
    prep(m, pos);
    io_uring_submit(&m->r->ring);
    return true;
}

/* Writes len bytes of buf at offset at of the place d; 0 or -errno. */
static int put(const struct pio_dst *d, const char *buf, size_t len, uint64_t at)
{
    while (len) {
        ssize_t n = pwrite(d->fd, buf, len, (off_t)(d->off + at));
        if (n <= 0)
            return n < 0 ? -errno : -ENOSPC;
        buf += n;
        len -= (size_t)n;
        at += (uint64_t)n;
    }
    return 0;
}

/* The oldest I/O has completed: check it, hash the block and, for reads,
 * copy it out (to the places it did not go to in place); after an
 * extent's last block, check its sum. */
static void retire(struct mover *m, const struct slot *s, uint64_t pos)
{
    struct pio_job *j = m->j;
    const struct pio_task *k = &j->tasks[s->task];
    const char *buf = s->direct ? s->direct : m->r->buf + (size_t)(pos % m->p->depth) * m->p->block;
    const char *path = j->path[k->dir];

    if (__atomic_load_n(&j->err, __ATOMIC_ACQUIRE))
        return;
    /* CKPT_FAULT: the completion reports the error a failing disk would,
     * or comes as late as a slow one's. */
    if (j->delay_ms)
        nanosleep(&(struct timespec){.tv_sec = j->delay_ms / 1000, .tv_nsec = (long)(j->delay_ms % 1000) * 1000000L},
                  NULL);
    int res = j->fault ? -j->fault : s->res;
    if (res < 0) {
        fail(j, res, "cannot %s %s: %s", j->write ? "write" : "read", path, strerror(-res));
        return;
    }
    if ((uint32_t)res < s->padded) {
        if (j->write)
            fail(j, -EIO, "short write to %s at byte %llu", path, (unsigned long long)(k->off + s->at));
        else
            fail(j, -EBADMSG, "%s ends before byte %llu: the generation is torn", path,
                 (unsigned long long)(k->off + s->at + s->padded));
        return;
    }
    if (s->direct)
        __atomic_fetch_add(&j->direct, s->len, __ATOMIC_RELAXED);
    if (!s->at)
        XXH3_64bits_reset(&m->hash);
    XXH3_64bits_update(&m->hash, buf, s->len);
    if (!j->write) {
        for (uint32_t d = s->direct ? 1 : 0; d < k->ndst; d++) {
            int rc = put(&k->dst[d], buf, s->len, s->at);
            if (rc < 0) {
                fail(j, rc, "cannot write %s: %s", k->dst[d].path, strerror(-rc));
                return;
            }
        }
    }
    if (s->at + s->len < k->bytes)
        return;
    if (j->write && XXH3_64bits_digest(&m->hash) != k->sum) {
        fail(j, -ESTALE,
             "rank %d %s chunk %llu changed while it was being persisted (the rank wrote over the slot, or the "
             "slot is damaged)",
             k->rank, k->log ? "replay log" : "image", (unsigned long long)k->chunk);
        return;
    }
    if (!j->write && XXH3_64bits_digest(&m->hash) != k->sum) {
        fail(j, -EBADMSG, "%s: bytes %llu..%llu do not match their checksum", path, (unsigned long long)k->off,
             (unsigned long long)(k->off + k->bytes));
        return;
    }
    progress(m, k);
}

/* Submits the queued fsyncs and reaps n of them; 0 or -errno (said). */
static int reap_syncs(struct mover *m, unsigned n)
{
    struct pio_job *j = m->j;
    int rc;
    do
        rc = n ? io_uring_submit_and_wait(&m->r->ring, n) : 0;
    while (rc == -EINTR);
    if (rc < 0) {
        fail(j, rc, "cannot flush the stripe files: io_uring: %s", strerror(-rc));
        return rc;
    }
    for (unsigned seen = 0; seen < n; seen++) {
        struct io_uring_cqe *cqe;
        do
            rc = io_uring_wait_cqe(&m->r->ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) {
            fail(j, rc, "cannot flush the stripe files: io_uring: %s", strerror(-rc));
            return rc;
        }
        if (cqe->res < 0)
            fail(j, cqe->res, "cannot fsync %s: %s", j->path[cqe->user_data], strerror(-cqe->res));
        io_uring_cqe_seen(&m->r->ring, cqe);
    }
    return 0;
}

/* After the last write of every ring: the stripe files of the directories
 * d with d % nrings == index are flushed, as many at once as the ring
 * holds, so that the disks flush in parallel. */
static void sync_files(struct mover *m)
{
    unsigned n = 0;
    for (unsigned d = m->index; d < m->p->ndirs; d += m->p->nrings) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&m->r->ring);
        if (!sqe) {
            if (reap_syncs(m, n) < 0)
                return;
            n = 0;
            sqe = io_uring_get_sqe(&m->r->ring);
        }
        io_uring_prep_fsync(sqe, m->j->fd[d], 0);
        io_uring_sqe_set_data64(sqe, d);
        n++;
    }
    reap_syncs(m, n);
}

/* This ring has moved its share: waits until every ring has, since an
 * fsync covers only the writes that completed before it. */
static void moved(struct pio_job *j)
{
    pthread_mutex_lock(&j->lock);
    if (--j->moving == 0)
        pthread_cond_broadcast(&j->all_moved);
    while (j->moving)
        pthread_cond_wait(&j->all_moved, &j->lock);
    pthread_mutex_unlock(&j->lock);
}

/* Queues blocks while there are free places; returns how many. */
static unsigned fill(struct mover *m)
{
    unsigned queued = 0;
    while (!m->stop && m->task < m->j->ntasks && m->tail - m->head < m->p->depth) {
        if (!m->at && stopping(m)) {
            m->stop = true;
            break;
        }
        issue(m, m->tail, m->task, m->at);
        m->at += m->slots[m->tail++ % m->p->depth].len;
        queued++;
        if (m->at < m->j->tasks[m->task].bytes)
            continue;
        m->task = next_task(m, m->task + 1);
        m->at = 0;
    }
    return queued;
}

static void *move(void *arg)
{
    struct mover *m = arg;
    struct io_uring *ring = &m->r->ring;
    unsigned depth = m->p->depth;

    m->task = next_task(m, 0);
    fill(m);
    while (m->head != m->tail) {
        int rc = io_uring_submit_and_wait(ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* The ring itself failed: nothing more can be known of what is
             * in flight, so this ring is not used again. */
            fail(m->j, rc, "io_uring failed: %s", strerror(-rc));
            m->r->broken = true;
            moved(m->j);
            return NULL;
        }
        struct io_uring_cqe *cqe;
        unsigned seen = 0, h;
        io_uring_for_each_cqe(ring, h, cqe)
        {
            struct slot *s = &m->slots[cqe->user_data % depth];
            s->res = cqe->res;
            s->done = true;
            seen++;
        }
        io_uring_cq_advance(ring, seen);
        /* Each place freed is refilled at once: the disk never waits for
         * the hashing and copying of a batch of completions. */
        while (m->head != m->tail && m->slots[m->head % depth].done) {
            struct slot *s = &m->slots[m->head % depth];
            s->done = false;
            if (retry(m, s, m->head))
                break;
            retire(m, s, m->head++);
            if (fill(m))
                io_uring_submit(ring);
        }
    }
    moved(m->j);
    if (m->j->write && !stopping(m))
        sync_files(m);
    return NULL;
}

int pio_run(struct ckpt_persist *p, struct pio_job *j)
{
    struct mover m[CKPT_PERSIST_MAX_RINGS];
    pthread_t th[CKPT_PERSIST_MAX_RINGS];
    unsigned started = 0;

    for (unsigned i = 0; i < p->nrings; i++) {
        if (p->rings[i].broken) {
            snprintf(j->why, sizeof(j->why), "an I/O ring of this engine failed earlier: reopen it");
            return -EIO;
        }
    }
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->all_moved, NULL);
    j->moving = p->nrings;
    j->done = 0;
    j->direct = 0;
    j->err = 0;
    j->fault = 0;
    j->delay_ms = 0;
    if (p->fault.kind == CKPT_FAULT_IO && (!p->fault.op || p->fault.op == (j->write ? 1 : 2))) {
        unsigned long long pass = p->passes[!j->write]++;
        if (pass >= p->fault.after && (!p->fault.times || pass - p->fault.after < p->fault.times)) {
            j->fault = p->fault.err;
            j->delay_ms = p->fault.delay_ms;
        }
    }
    j->why[0] = '\0';
    for (unsigned i = 0; i < p->nrings; i++) {
        m[i] = (struct mover){.p = p, .r = &p->rings[i], .j = j, .index = i};
        m[i].slots = calloc(p->depth, sizeof(*m[i].slots));
        if (!m[i].slots) {
            fail(j, -ENOMEM, "out of memory for the I/O queue");
            break;
        }
        if (pthread_create(&th[i], NULL, move, &m[i]) != 0) {
            fail(j, -EAGAIN, "cannot start an I/O thread");
            free(m[i].slots);
            break;
        }
        started++;
    }
    /* The rings that did not start have nothing to move: the others must
     * not wait for them. */
    pthread_mutex_lock(&j->lock);
    j->moving -= p->nrings - started;
    pthread_cond_broadcast(&j->all_moved);
    pthread_mutex_unlock(&j->lock);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        free(m[i].slots);
    }
    pthread_cond_destroy(&j->all_moved);
    pthread_mutex_destroy(&j->lock);
    if (j->err)
        return j->err;
    if (__atomic_load_n(&p->cancel, __ATOMIC_ACQUIRE)) {
        snprintf(j->why, sizeof(j->why), "cancelled after %llu of %llu bytes", (unsigned long long)j->done,
                 (unsigned long long)j->total);
        return -ECANCELED;
    }
    return 0;
}
