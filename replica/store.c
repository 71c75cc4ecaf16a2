/*
 * The replica store of store.h.  Slot files are found and checked by
 * runtime/arena.c (owner, mode, no symlinks) and mapped here, each once as
 * a whole, and registered once as a whole while the mapping stays.  The
 * chunk index is a sorted array rebuilt whenever a slot changes state:
 * rebuilding costs one entry per chunk (8 MiB), nothing next to moving the
 * chunk.  It must never mark a slot committed before every chunk verified,
 * and never write into the slot that holds a rank's newest replica.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "image.h"
#include "store.h"
#include "sum.h"

struct slot {
    void *base;
    size_t len;
    struct ckpt_fab_region *reg;
    int valid;                 /* committed and verified */
    struct ckpt_header h;
    uint64_t stamp;            /* commit order, to break ties of generation */
};

struct holder {
    char job[CKPT_JOB_MAX];
    uint32_t rank;
    struct ckpt_arena arena;   /* the directory and the two slot files */
    struct slot slot[2];
};

struct entry {
    uint64_t sum, len, chunk;
    unsigned holder, slot;
};

struct ckpt_store {
    char dir[PATH_MAX];
    struct ckpt_fab *fab;
    struct holder *holders;
    unsigned nholders;
    struct entry *index;
    size_t nindex;
    uint64_t clock;
    /* The transfer's thread against ckpt_store_forget's: the holders,
     * the index, and which holder a transfer writes to (+1; 0 for none). */
    pthread_mutex_t lock;
    unsigned active;
};

static uint64_t chunk_len(const struct ckpt_header *h, uint64_t c)
{
    uint64_t left = h->data_bytes - c * h->chunk_bytes;
    return left < h->chunk_bytes ? left : h->chunk_bytes;
}

static const uint64_t *sums_of(const void *header_region, const struct ckpt_header *h)
{
    return (const uint64_t *)((const char *)header_region + sizeof(*h) + h->nallocs * sizeof(struct ckpt_rec));
}

static int by_sum(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    return x->sum < y->sum ? -1 : x->sum > y->sum;
}

static int reindex(struct ckpt_store *st)
{
    size_t n = 0;
    for (unsigned i = 0; i < st->nholders; i++)
        for (int s = 0; s < 2; s++)
            n += st->holders[i].slot[s].valid ? st->holders[i].slot[s].h.nchunks : 0;
    struct entry *e = realloc(st->index, (n ? n : 1) * sizeof(*e));
    if (!e)
        return -ENOMEM;
    st->index = e;
    st->nindex = 0;
    for (unsigned i = 0; i < st->nholders; i++) {
        for (unsigned s = 0; s < 2; s++) {
            const struct slot *sl = &st->holders[i].slot[s];
            if (!sl->valid)
                continue;
            const uint64_t *sums = sums_of(sl->base, &sl->h);
            for (uint64_t c = 0; c < sl->h.nchunks; c++)
                e[st->nindex++] = (struct entry){sums[c], chunk_len(&sl->h, c), c, i, s};
        }
    }
    qsort(e, st->nindex, sizeof(*e), by_sum);
    return 0;
}

static const struct entry *lookup(const struct ckpt_store *st, uint64_t sum, uint64_t len)
{
    size_t lo = 0, hi = st->nindex;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->index[mid].sum < sum)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < st->nindex && st->index[lo].sum == sum; lo++)
        if (st->index[lo].len == len)
            return &st->index[lo];
    return NULL;
}

static void unmap(struct slot *sl)
{
    ckpt_fab_unregister(sl->reg);
    if (sl->base)
        munmap(sl->base, sl->len);
    sl->reg = NULL;
    sl->base = NULL;
    sl->len = 0;
}

/* Maps slot s of h as a whole, at least need bytes (growing the file,
 * so that a full tmpfs is -ENOSPC here and not SIGBUS later), and
 * registers it when the store has a fabric. */
static int map_slot(struct ckpt_store *st, struct holder *h, unsigned s, size_t need)
{
    struct slot *sl = &h->slot[s];
    struct stat sb;

    if (fstat(h->arena.fd[s], &sb) < 0)
        return -errno;
    if (sl->base && (size_t)sb.st_size < sl->len)
        unmap(sl); /* the file shrank under the mapping */
    if (!sl->base || sl->len < need) {
        unmap(sl);
        size_t len = (size_t)sb.st_size > need ? (size_t)sb.st_size : need;
        if (!len)
            return 0;
        if ((size_t)sb.st_size < need) {
            int e = posix_fallocate(h->arena.fd[s], 0, (off_t)need);
            if (e)
                return -e;
        }
        /* Populated when it grew for a transfer: the pages are needed at
         * once, and faulting them in one by one under the writes is slower. */
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | (need ? MAP_POPULATE : 0), h->arena.fd[s], 0);
        if (p == MAP_FAILED)
            return -errno;
        sl->base = p;
        sl->len = len;
    }
    if (st->fab && !sl->reg)
        return ckpt_fab_register(st->fab, sl->base, sl->len, 1, &sl->reg);
    return 0;
}

/* The holder of (job, rank), opened (and created) when new. */
static int holder_of(struct ckpt_store *st, const char *job, uint32_t rank, unsigned *out, char *why, size_t whylen)
{
    for (unsigned i = 0; i < st->nholders; i++) {
        if (st->holders[i].rank == rank && strcmp(st->holders[i].job, job) == 0) {
            *out = i;
            return 0;
        }
    }
    struct holder *hs = realloc(st->holders, (st->nholders + 1) * sizeof(*hs));
    if (!hs)
        return -ENOMEM;
    st->holders = hs;
    struct holder *h = &hs[st->nholders];
    memset(h, 0, sizeof(*h));
    snprintf(h->job, sizeof(h->job), "%s", job);
    h->rank = rank;
    int rc = ckpt_arena_open(&h->arena, st->dir, job, (int)rank, 0, why, whylen);
    if (rc < 0)
        return rc;
    *out = st->nholders++;
    return 0;
}

/* Indexes what the directory of one (job, rank) holds. */
static void scan_rank(struct ckpt_store *st, const char *job, uint32_t rank)
{
    char why[256];
    unsigned i;
    if (holder_of(st, job, rank, &i, why, sizeof(why)) < 0)
        return;
    for (unsigned s = 0; s < 2; s++) {
        struct slot *sl = &st->holders[i].slot[s];
        if (map_slot(st, &st->holders[i], s, 0) == 0 && sl->base &&
            ckpt_image_verify(sl->base, sl->len, &sl->h, why, sizeof(why)) == 0)
            sl->valid = 1;
    }
}

int ckpt_store_open(struct ckpt_store **out, const char *dir, struct ckpt_fab *fab, char *why, size_t whylen)
{
    struct ckpt_store *st = calloc(1, sizeof(*st));
    char sub[PATH_MAX];

    if (!st)
        return -ENOMEM;
    pthread_mutex_init(&st->lock, NULL);
    snprintf(st->dir, sizeof(st->dir), "%s", dir);
    st->fab = fab;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(why, whylen, "cannot create %s: %s", dir, strerror(e));
        free(st);
        return -e;
    }
    /* DIR/<uid>-<job>/rank<N>: only this user's jobs. */
    DIR *d = opendir(dir);
    struct dirent *e, *r;
    while (d && (e = readdir(d))) {
        const char *job;
        if (!ckpt_job_dir_name(e->d_name, &job) || strlen(job) >= CKPT_JOB_MAX ||
            ckpt_job_dir(sub, sizeof(sub), dir, job) < 0)
            continue;
        DIR *jd = opendir(sub);
        while (jd && (r = readdir(jd))) {
            int rank;
            if (ckpt_rank_dir_name(r->d_name, &rank))
                scan_rank(st, job, (uint32_t)rank);
        }
        if (jd)
            closedir(jd);
    }
    if (d)
        closedir(d);
    int rc = reindex(st);
    if (rc < 0) {
        ckpt_store_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

void ckpt_store_close(struct ckpt_store *st)
{
    if (!st)
        return;
    for (unsigned i = 0; i < st->nholders; i++) {
        unmap(&st->holders[i].slot[0]);
        unmap(&st->holders[i].slot[1]);
        ckpt_arena_close(&st->holders[i].arena);
    }
    free(st->holders);
    free(st->index);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* The slot to write: an empty one, else the older of the two. */
static unsigned target(const struct holder *h)
{
    const struct slot *a = &h->slot[0], *b = &h->slot[1];
    if (!a->valid)
        return 0;
    if (!b->valid)
        return 1;
    if (a->h.generation != b->h.generation)
        return a->h.generation < b->h.generation ? 0 : 1;
    return a->stamp < b->stamp ? 0 : 1;
}

static void release(struct ckpt_store_tx *tx)
{
    free(tx->header);
    free(tx->need);
    free(tx->verified);
    tx->header = NULL;
    tx->need = NULL;
    tx->verified = NULL;
}

/*
 * Forgets what changed under the store, through the slot files: a mapping
 * whose file is now shorter than it (cut by something other than this
 * store: reading it would be SIGBUS) is dropped, and a slot whose magic is
 * gone (retired by the node's agent at a restore, ckpt_slot_retire) holds
 * no replica anymore.  Such a slot must count as empty: taken for a
 * replica, one of an older run with a higher generation would make every
 * new replica go into the other slot, over the rank's newest.  Returns the
 * count forgotten.
 */
static int forget_changed(struct ckpt_store *st)
{
    struct stat sb;
    int forgotten = 0;

    for (unsigned i = 0; i < st->nholders; i++) {
        for (unsigned s = 0; s < 2; s++) {
            struct slot *sl = &st->holders[i].slot[s];
            if (sl->base && (fstat(st->holders[i].arena.fd[s], &sb) < 0 || (size_t)sb.st_size < sl->len)) {
                unmap(sl);
                sl->valid = 0;
                forgotten++;
            } else if (sl->valid && sl->base &&
                       memcmp(((const struct ckpt_header *)sl->base)->magic, CKPT_MAGIC, sizeof(sl->h.magic))) {
                sl->valid = 0;
                forgotten++;
            }
        }
    }
    return forgotten;
}

static int begin(struct ckpt_store *st, const void *offer, size_t len, struct ckpt_store_tx *tx, char *why,
                 size_t whylen)
{
    struct ckpt_header h;
    unsigned hi;
    int rc;

    memset(tx, 0, sizeof(*tx));
    if (forget_changed(st) && (rc = reindex(st)) < 0)
        return rc;
    if (len < sizeof(h)) {
        snprintf(why, whylen, "an offer of %zu bytes is no snapshot header", len);
        return -EBADMSG;
    }
    memcpy(&h, offer, sizeof(h));
    /* Bound the sizes before they are added, then check it as any reader
     * checks an image (sizes, header checksum, records). */
    if (h.header_bytes != len || h.data_offset > (1ull << 50) || h.data_bytes > (1ull << 50) ||
        !memchr(h.job, 0, sizeof(h.job))) {
        snprintf(why, whylen, "the offered header is inconsistent");
        return -EBADMSG;
    }
    size_t total = h.data_offset + h.data_bytes;
    if ((rc = ckpt_image_verify_header(offer, total, &h, why, whylen)) < 0)
        return rc;
    if ((rc = holder_of(st, h.job, h.rank, &hi, why, whylen)) < 0)
        return rc;
    struct holder *ho = &st->holders[hi];
    unsigned s = target(ho);
    struct slot *sl = &ho->slot[s];

    /* From here the slot is no replica: a reader never trusts it until the
     * magic is back. */
    if (sl->valid) {
        sl->valid = 0;
        if ((rc = reindex(st)) < 0)
            return rc;
    }
    if ((rc = map_slot(st, ho, s, total)) < 0) {
        snprintf(why, whylen, "cannot make room for %zu bytes in %s/slot%u: %s", total, ho->arena.dir, s,
                 strerror(-rc));
        return rc;
    }

    ckpt_image_invalidate(sl->base);
    tx->h = h;
    tx->holder = hi;
    tx->slot = s;
    tx->data_roff = h.data_offset;
    tx->header = malloc(len);
    tx->need = calloc(1, (h.nchunks + 7) / 8 + 1);
    tx->verified = calloc(1, h.nchunks + 1);
    if (!tx->header || !tx->need || !tx->verified) {
        release(tx);
        return -ENOMEM;
    }
    memcpy(tx->header, offer, len);
    const uint64_t *sums = sums_of(offer, &h);
    for (uint64_t c = 0; c < h.nchunks; c++) {
        if (!lookup(st, sums[c], chunk_len(&h, c))) {
            tx->need[c / 8] |= (uint8_t)(1u << (c % 8));
            tx->nneed++;
        }
    }
    if ((tx->reg = sl->reg))
        ckpt_fab_region_key(sl->reg, tx->key);
    st->active = hi + 1;
    return 0;
}

int ckpt_store_begin(struct ckpt_store *st, const void *offer, size_t len, struct ckpt_store_tx *tx, char *why,
                     size_t whylen)
{
    pthread_mutex_lock(&st->lock);
    int rc = begin(st, offer, len, tx, why, whylen);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int ckpt_store_fill(struct ckpt_store *st, struct ckpt_store_tx *tx, uint64_t c)
{
    uint64_t len = chunk_len(&tx->h, c);
    int rc = -ENOENT;

    pthread_mutex_lock(&st->lock);
    const struct entry *e = lookup(st, sums_of(tx->header, &tx->h)[c], len);
    if (e) {
        const struct slot *from = &st->holders[e->holder].slot[e->slot];
        char *to = (char *)st->holders[tx->holder].slot[tx->slot].base + tx->h.data_offset + c * tx->h.chunk_bytes;
        memcpy(to, (const char *)from->base + from->h.data_offset + e->chunk * from->h.chunk_bytes, len);
        rc = 0;
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

const void *ckpt_store_chunk(const struct ckpt_store *st, const struct ckpt_store_tx *tx, uint64_t c, size_t *len,
                             uint64_t *sum)
{
    if (c >= tx->h.nchunks)
        return NULL;
    *len = chunk_len(&tx->h, c);
    *sum = sums_of(tx->header, &tx->h)[c];
    return (const char *)st->holders[tx->holder].slot[tx->slot].base + tx->h.data_offset + c * tx->h.chunk_bytes;
}

int ckpt_store_verify(const struct ckpt_store *st, struct ckpt_store_tx *tx, uint64_t c, char *why, size_t whylen)
{
    size_t len;
    uint64_t sum;
    const void *p = ckpt_store_chunk(st, tx, c, &len, &sum);
    if (!p)
        return -ERANGE;
    if (ckpt_replica_sum(p, len) != sum) {
        snprintf(why, whylen, "chunk %llu (bytes %llu..) checksum mismatch", (unsigned long long)c,
                 (unsigned long long)(c * tx->h.chunk_bytes));
        return -EBADMSG;
    }
    tx->verified[c] = 1;
    return 0;
}

int ckpt_store_commit(struct ckpt_store *st, struct ckpt_store_tx *tx, char *why, size_t whylen)
{
    struct slot *sl = &st->holders[tx->holder].slot[tx->slot];
    char *base = sl->base;
    uint64_t magic;
    int rc = 0;

    for (uint64_t c = 0; c < tx->h.nchunks && rc == 0; c++)
        if (!tx->verified[c])
            rc = ckpt_store_verify(st, tx, c, why, whylen);
    /* Everything but the magic, the padding up to the data zeroed as a
     * fresh slot's; the magic after, once every chunk verified. */
    pthread_mutex_lock(&st->lock);
    if (rc == 0) {
        memcpy(base + sizeof(magic), (char *)tx->header + sizeof(magic), tx->h.header_bytes - sizeof(magic));
        memset(base + tx->h.header_bytes, 0, tx->h.data_offset - tx->h.header_bytes);
        memcpy(&magic, CKPT_MAGIC, sizeof(magic));
        __atomic_store_n((uint64_t *)base, magic, __ATOMIC_RELEASE);
        sl->h = tx->h;
        sl->valid = 1;
        sl->stamp = ++st->clock;
        /* Committed either way: without memory for the index, its chunks
         * are only not offered for deduplication. */
        (void)reindex(st);
    }
    st->active = 0;
    pthread_mutex_unlock(&st->lock);
    release(tx);
    return rc;
}

void ckpt_store_abort(struct ckpt_store *st, struct ckpt_store_tx *tx)
{
    pthread_mutex_lock(&st->lock);
    st->active = 0;
    pthread_mutex_unlock(&st->lock);
    release(tx);
}

/*
 * The holder is renamed out of reach (an empty job matches none) rather
 * than removed, so that a transfer's holder index stays good.  Its
 * mappings stay until the store closes: a fabric receive cut short may
 * still land in them (serve.c), and they share the files' pages, so they
 * cost no memory.
 */
int ckpt_store_forget(struct ckpt_store *st, const char *job, uint32_t rank)
{
    int rc = -ENOENT;

    pthread_mutex_lock(&st->lock);
    for (unsigned i = 0; i < st->nholders && rc == -ENOENT; i++) {
        struct holder *h = &st->holders[i];
        if (h->rank != rank || strcmp(h->job, job) != 0)
            continue;
        if (st->active == i + 1) {
            rc = -EBUSY;
            break;
        }
        h->job[0] = '\0';
        h->slot[0].valid = h->slot[1].valid = 0;
        if (reindex(st) < 0)
            st->nindex = 0; /* nothing is offered for deduplication, rather than the forgotten slots */
        rc = 0;
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

const char *ckpt_store_dir(const struct ckpt_store *st, const struct ckpt_store_tx *tx)
{
    return st->holders[tx->holder].arena.dir;
}
