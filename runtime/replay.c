/*
 * The replay log file of replay.h.  Layout: a 64-byte file header, then
 * records of a 48-byte header and a payload padded to 8 bytes, each with an
 * XXH3 checksum over its header fields and payload.  Records are in the
 * order they were appended; replay chains each thread's records so that a
 * thread reads its own in O(1).  Appends are buffered
 * in memory and written at iteration boundaries, one write per flush, so a
 * rank that dies mid-iteration leaves a log that ends at a record boundary
 * or with a torn record that the reader refuses.  Replay reads through a
 * private mapping and never writes before it goes live.
 *
 * Where the log lives: in the arena (replay.log in the rank's directory,
 * host memory, up to CKPT_REPLAY_LOG_MAX), or on disk, whole, when the
 * rank is given a file there (CKPT_REPLAY_LOG_DIR): the arena's replay.log
 * is then a stub of one page that names it, and every reader goes through
 * the stub, so the arena holds the same few bytes at any age of the job.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "aside.h"
#include "log.h"
#include "replay.h"
#include "replay_int.h"

/* A log on disk: bounded by the address space a standby reserves to follow
 * it, which must fit among libckpt's own mappings (aside.c: 512 GiB) so that
 * it moves none of the program's, nor the device addresses the driver
 * picks after it. */
#define DISK_MAX (1ULL << 38)


static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1;
static char *buf;
static size_t buflen, bufcap;
static uint64_t written, limit, last_iter;
static bool overflowed;
/* The log is the file on disk a stub names (limit DISK_MAX), else the
 * arena's (limit arena_max); disk_path: the file on disk this rank was
 * given, which a log restored whole into the arena moves to when it goes
 * live; rank_dir: its arena directory. */
static bool on_disk;
static uint64_t arena_max;
static char disk_path[PATH_MAX], rank_dir[PATH_MAX];

/* Records chained by thread: each record's offset in base, the next
 * record of the same thread, and each thread's next record. */
struct cursor {
    uint64_t thread;
    size_t next;   /* index into offs, or NONE */
    size_t last;   /* its last record so far, or NONE: where the next one chains */
    uint64_t used; /* repeats of the next record already handed out */
    bool released; /* its records were let go (ckpt_rlog_release) */
};
struct index {
    const char *base;
    size_t *offs, *chain, n;
    size_t offs_cap, chain_cap; /* bytes (aside.h: these grow with the log) */
    struct cursor *cursors;
    size_t ncursors, cap; /* cap: a power of two */
};
#define NONE SIZE_MAX

/* Replay: the mapped log, cut at end, and its records before the cut; the
 * failed run's records after the cut (tail, a copy that outlives going
 * live), which the resumed run is checked against. */
static const char *map;
static size_t maplen, end;
static struct index cut;
static char *tail_copy;
static size_t tail_cap;
static struct index tail;

static const char *const names[] = {"?",        "allocation",       "device-to-host copy", "value", "iteration end",
                                    "overflow", "host observation", "taint",               "file length",
                                    "device work", "library memory", "rendezvous connection"};
static const char *name(uint32_t t)
{
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

static uint64_t rec_sum(const struct rec *r, const void *payload)
{
    struct rec h = *r;
    h.sum = 0;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &h, sizeof(h));
    XXH3_64bits_update(&st, payload, r->len);
    return XXH3_64bits_digest(&st);
}


/* Remembers where this rank's log is to live (lock not needed: before any
 * append). */
static void remember(const char *dir, const char *disk, uint64_t max_bytes)
{
    snprintf(rank_dir, sizeof(rank_dir), "%s", dir);
    snprintf(disk_path, sizeof(disk_path), "%s", disk ? disk : "");
    arena_max = max_bytes;
}

/* A new lineage (replay_int.h): never 0, and not the one before. */
static uint64_t new_lineage(uint64_t old)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32;
    return v && v != old ? v : old + 1;
}

int ckpt_rlog_create(const char *dir, const char *disk, uint64_t max_bytes, char *why, size_t whylen)
{
    char path[PATH_MAX + 16], head[FILE_HEADER] = FILE_MAGIC;
    uint32_t version = FILE_VERSION;
    uint64_t lineage = new_lineage(0);

    ckpt_rlog_close();
    remember(dir, disk, max_bytes);
    if (!disk && ckpt_rlog_arena_path(path, sizeof(path), dir) < 0) {
        snprintf(why, whylen, "the replay log of %s: too long a path", dir);
        return -ENAMETOOLONG;
    }
    const char *file = disk ? disk : path;
    int f = open(file, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot create %s: %s", file, strerror(e));
        return -e;
    }
    memcpy(head + 8, &version, sizeof(version));
    memcpy(head + FILE_LINEAGE, &lineage, sizeof(lineage));
    if (write(f, head, sizeof(head)) != (ssize_t)sizeof(head)) {
        snprintf(why, whylen, "cannot write %s", file);
        close(f);
        return -EIO;
    }
    int rc = disk ? rlog_write_stub(dir, disk, why, whylen) : 0;
    if (rc < 0) {
        close(f);
        return rc;
    }
    pthread_mutex_lock(&lock);
    fd = f;
    written = FILE_HEADER;
    on_disk = disk != NULL;
    limit = on_disk ? DISK_MAX : max_bytes;
    overflowed = false;
    last_iter = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

static void drop_index(struct index *ix)
{
    ckpt_aside_free(ix->offs, ix->offs_cap);
    ckpt_aside_free(ix->chain, ix->chain_cap);
    free(ix->cursors);
    *ix = (struct index){0};
}

/* The failed run's records after the cut, and their index. */
static void drop_tail(void)
{
    drop_index(&tail);
    ckpt_aside_free(tail_copy, tail_cap);
    tail_copy = NULL;
    tail_cap = 0;
}

/* The cursor of thread in ix, added (with no records) when create is set;
 * NULL when there is none.  Open addressing over a power-of-two table. */
static struct cursor *cursor_of(struct index *ix, uint64_t thread, bool create)
{
    if (create && (ix->ncursors + 1) * 2 > ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 64;
        struct cursor *t = malloc(cap * sizeof(*t));
        if (!t)
            return NULL;
        for (size_t i = 0; i < cap; i++)
            t[i] = (struct cursor){0, NONE, NONE, 0, false};
        for (size_t i = 0; i < ix->cap; i++) {
            if (!ix->cursors[i].thread)
                continue;
            size_t h = XXH3_64bits(&ix->cursors[i].thread, sizeof(uint64_t)) & (cap - 1);
            while (t[h].thread)
                h = (h + 1) & (cap - 1);
            t[h] = ix->cursors[i];
        }
        free(ix->cursors);
        ix->cursors = t;
        ix->cap = cap;
    }
    if (!ix->cap)
        return NULL;
    size_t h = XXH3_64bits(&thread, sizeof(thread)) & (ix->cap - 1);
    while (ix->cursors[h].thread && ix->cursors[h].thread != thread)
        h = (h + 1) & (ix->cap - 1);
    if (ix->cursors[h].thread == thread)
        return &ix->cursors[h];
    if (!create)
        return NULL;
    ix->cursors[h] = (struct cursor){thread, NONE, NONE, 0, false};
    ix->ncursors++;
    return &ix->cursors[h];
}

static bool serve_sockets;

void ckpt_rlog_serve_sockets(bool serve)
{
    serve_sockets = serve;
}

/* Chains the n records of base[from, to) by thread onto what ix holds
 * (its base must be base), leaving out SOCK records unless they are
 * served.  Returns 0 or -ENOMEM, ix then unchanged. */
static int index_append(struct index *ix, const char *base, size_t from, size_t to, size_t n)
{
    size_t want = (ix->n + n + 1) * sizeof(size_t);
    size_t *offs = ckpt_aside_grow(ix->offs, &ix->offs_cap, want);
    if (offs)
        ix->offs = offs;
    size_t *chain = offs ? ckpt_aside_grow(ix->chain, &ix->chain_cap, want) : NULL;
    if (chain)
        ix->chain = chain;
    if (!offs || !chain)
        return -ENOMEM;
    ix->base = base;
    size_t k = ix->n;
    for (size_t off = from, i = 0; off < to && i < n; i++) {
        struct rec r;
        memcpy(&r, base + off, sizeof(r));
        size_t at = off;
        off += sizeof(r) + padded(r.len);
        if (r.type == CKPT_RL_SOCK && !serve_sockets)
            continue;
        struct cursor *c = cursor_of(ix, r.thread ? r.thread : 1, true);
        if (!c)
            return -ENOMEM;
        ix->offs[k] = at;
        ix->chain[k] = NONE;
        if (c->last != NONE)
            ix->chain[c->last] = k;
        if (c->next == NONE)
            c->next = k;
        c->last = k;
        k++;
    }
    ix->n = k;
    return 0;
}

/* Chains the n records of base[from, to) by thread into ix, afresh.
 * Returns 0 or -ENOMEM. */
static int index_records(struct index *ix, const char *base, size_t from, size_t to, size_t n)
{
    drop_index(ix);
    if (index_append(ix, base, from, to, n) == 0)
        return 0;
    drop_index(ix);
    return -ENOMEM;
}

/* The failed run's whole records after the cut at off, up to the first
 * damaged or torn one (where it died), copied and indexed into tail. */
static void keep_tail(const char *m, size_t off, size_t len)
{
    size_t n = 0, to = off;
    while (to + sizeof(struct rec) <= len) {
        struct rec r;
        memcpy(&r, m + to, sizeof(r));
        if (r.len > len - to - sizeof(r) || rec_sum(&r, m + to + sizeof(r)) != r.sum)
            break;
        to += sizeof(r) + padded(r.len);
        n++;
    }
    drop_tail();
    tail_copy = n ? ckpt_aside_grow(NULL, &tail_cap, to - off) : NULL;
    if (tail_copy)
        memcpy(tail_copy, m + off, to - off);
    if (!tail_copy || index_records(&tail, tail_copy, 0, to - off, n) < 0)
        drop_tail(); /* no check after going live: nothing to check against */
}

int ckpt_rlog_open_replay(const char *dir, const char *disk, uint64_t iteration, uint64_t max_bytes, char *why,
                          size_t whylen)
{
    char path[PATH_MAX + 16];
    struct stat st;

    ckpt_rlog_close();
    *why = '\0';
    remember(dir, disk, max_bytes);
    int f = rlog_open_log(dir, O_RDWR, path, sizeof(path), why, whylen);
    if (f < 0)
        return -ENOENT;
    bool from_disk = *path;
    if (!from_disk)
        ckpt_rlog_arena_path(path, sizeof(path), dir); /* it fit when the log was opened */
    if (fstat(f, &st) < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot read the replay log %s: %s", path, strerror(e));
        close(f);
        return -ENOENT;
    }
    size_t len = (size_t)st.st_size;
    const char *m = len ? ckpt_mmap_aside(len, PROT_READ, MAP_PRIVATE, f, 0) : MAP_FAILED;
    if (m == MAP_FAILED || len < FILE_HEADER || memcmp(m, FILE_MAGIC, 8) != 0) {
        snprintf(why, whylen, "%s is not a replay log of this version", path);
        if (m != MAP_FAILED)
            munmap((void *)m, len);
        close(f);
        return -EBADMSG;
    }
    /* Walk and check every record up to the target iteration's end. */
    size_t off = FILE_HEADER, n = 0;
    uint64_t seen = 0;
    int rc = -ERANGE;
    while (off + sizeof(struct rec) <= len) {
        struct rec r;
        memcpy(&r, m + off, sizeof(r));
        if (r.len > len - off - sizeof(r) || rec_sum(&r, m + off + sizeof(r)) != r.sum) {
            snprintf(why, whylen, "replay log record at byte %zu is damaged (after iteration %llu)", off,
                     (unsigned long long)seen);
            rc = -EBADMSG;
            break;
        }
        off += sizeof(r) + padded(r.len);
        n++;
        if (r.type == CKPT_RL_OVERFLOW) {
            snprintf(why, whylen, "the replay log stopped at iteration %llu (CKPT_REPLAY_LOG_MAX); it cannot "
                     "bring back iteration %llu", (unsigned long long)r.a, (unsigned long long)iteration);
            break;
        }
        if (r.type == CKPT_RL_TAINT) {
            snprintf(why, whylen, "replay cannot be faithful from iteration %llu on: %.*s", (unsigned long long)r.a,
                     (int)(r.len < 300 ? r.len : 300), m + off - padded(r.len));
            rc = -EPERM;
            break;
        }
        if (r.type == CKPT_RL_ITER) {
            seen = r.a;
            if (r.a == iteration) {
                rc = 0;
                break;
            }
        }
    }
    if (rc == -ERANGE && !strstr(why, "CKPT_REPLAY_LOG_MAX"))
        snprintf(why, whylen, "the replay log ends at iteration %llu, before iteration %llu",
                 (unsigned long long)seen, (unsigned long long)iteration);
    if (rc == 0 && index_records(&cut, m, FILE_HEADER, off, n) < 0) {
        snprintf(why, whylen, "out of host memory indexing the replay log");
        rc = -ENOMEM;
    }
    if (rc < 0) {
        munmap((void *)m, len);
        close(f);
        return rc;
    }
    keep_tail(m, off, len);
    pthread_mutex_lock(&lock);
    fd = f;
    map = m;
    maplen = len;
    end = off;
    on_disk = from_disk;
    limit = on_disk ? DISK_MAX : max_bytes;
    overflowed = false;
    last_iter = iteration;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Follow mode: the file's first mapped bytes (map reserves limit bytes
 * of address space, so that payloads handed out never move), and the last
 * iteration the cut reached. */
static size_t mapped;
static bool following;
static uint64_t followed;

int ckpt_rlog_open_follow(const char *dir, const char *disk, uint64_t max_bytes, char *why, size_t whylen)
{
    char path[PATH_MAX + 16];

    ckpt_rlog_close();
    remember(dir, disk, max_bytes);
    int f = rlog_open_log(dir, O_RDWR, path, sizeof(path), why, whylen);
    if (f < 0)
        return f;
    bool from_disk = *path;
    /* A log on disk may grow past any arena bound: as much address space
     * as the machine lets a process reserve, up to DISK_MAX. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), want = from_disk ? DISK_MAX : max_bytes, reserve = 0;
    void *m = MAP_FAILED;
    for (; m == MAP_FAILED && want >= max_bytes && want >= page; want /= 2)
        m = ckpt_mmap_aside((reserve = want + 2 * page), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        snprintf(why, whylen, "cannot reserve %zu bytes of address space to follow the replay log: %s", reserve,
                 strerror(e));
        close(f);
        return -e;
    }
    pthread_mutex_lock(&lock);
    fd = f;
    map = m;
    maplen = reserve;
    mapped = 0;
    end = FILE_HEADER;
    on_disk = from_disk;
    limit = reserve - 2 * page;
    overflowed = false;
    following = true;
    followed = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Maps what the file holds now; its length, or 0 when it cannot be
 * mapped.  Lock held. */
static size_t follow_map(char *why, size_t whylen)
{
    struct stat st;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (fstat(fd, &st) < 0) {
        snprintf(why, whylen, "cannot read the replay log: %s", strerror(errno));
        return 0;
    }
    if ((size_t)st.st_size > maplen - page) {
        snprintf(why, whylen, "the replay log outgrew the %zu bytes of address space this standby reserved to follow "
                 "it", maplen - page);
        return 0;
    }
    size_t len = (size_t)st.st_size;
    size_t want = (len + page - 1) / page * page;
    if (want > mapped) {
        if (mmap((char *)map + mapped, want - mapped, PROT_READ, MAP_SHARED | MAP_FIXED, fd, (off_t)mapped) ==
            MAP_FAILED) {
            snprintf(why, whylen, "cannot map the replay log: %s", strerror(errno));
            return 0;
        }
        mapped = want;
    }
    return len;
}

int ckpt_rlog_follow_next(uint64_t upto, uint64_t *iteration, char *why, size_t whylen)
{
    int rc = -EAGAIN;
    *why = '\0';
    pthread_mutex_lock(&lock);
    size_t len = following ? follow_map(why, whylen) : 0;
    if (!following || !len) {
        rc = following ? -EIO : -EINVAL;
        goto out;
    }
    if (end == FILE_HEADER && (len < FILE_HEADER || memcmp(map, FILE_MAGIC, 8) != 0)) {
        if (len >= FILE_HEADER)
            rc = -EBADMSG, snprintf(why, whylen, "the replay log is not one of this version");
        goto out;
    }
    /* Whole records only: the live rank may be writing the last one. */
    size_t off = end, n = 0;
    while (rc == -EAGAIN && off + sizeof(struct rec) <= len) {
        struct rec r;
        memcpy(&r, map + off, sizeof(r));
        if (r.len > limit) {
            rc = -EBADMSG;
            break;
        }
        if (sizeof(r) + padded(r.len) > len - off)
            break;
        if (rec_sum(&r, map + off + sizeof(r)) != r.sum) {
            rc = -EBADMSG;
            break;
        }
        off += sizeof(r) + padded(r.len);
        n++;
        if (r.type == CKPT_RL_OVERFLOW) {
            rc = -ERANGE;
            snprintf(why, whylen, "the replay log stopped at iteration %llu (CKPT_REPLAY_LOG_MAX)",
                     (unsigned long long)r.a);
        } else if (r.type == CKPT_RL_TAINT) {
            rc = -EPERM;
            snprintf(why, whylen, "replay cannot be faithful from iteration %llu on: %.*s", (unsigned long long)r.a,
                     (int)(r.len < 300 ? r.len : 300), map + off - padded(r.len));
        } else if (r.type == CKPT_RL_ITER) {
            if (r.a > upto) {
                rc = -EBUSY; /* held, not yet allowed */
                break;
            }
            rc = 0;
            *iteration = r.a;
        }
    }
    if (rc == -EBADMSG)
        snprintf(why, whylen, "replay log record at byte %zu is damaged (after iteration %llu)", off,
                 (unsigned long long)followed);
    if (rc == 0 && index_append(&cut, map, end, off, n) < 0) {
        rc = -ENOMEM;
        snprintf(why, whylen, "out of host memory indexing the replay log");
    }
    if (rc == 0) {
        end = off;
        followed = last_iter = *iteration;
    }
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The standby of a spare followed a copy of the log: the rank's own log
 * in dir (the agent put it there, a longer copy of the same lineage)
 * becomes the one it goes on writing, once it is shown to hold the bytes
 * replayed: its header (the lineage: a log only grows within one, each
 * piece checked end to end as it travelled, logship.c) and the last
 * FOLLOW_TAIL bytes before the cut, so that the check takes the same time
 * at any age of the job.  Lock held. */
#define FOLLOW_TAIL (1u << 20)
static bool same_bytes(int f, size_t off, size_t len, char *piece)
{
    return pread(f, piece, len, (off_t)off) == (ssize_t)len && memcmp(piece, map + off, len) == 0;
}
static int follow_move(const char *dir, const char *disk, char *why, size_t whylen)
{
    char path[PATH_MAX];
    struct stat st;
    int f = rlog_open_log(dir, O_RDWR, path, sizeof(path), why, whylen);
    if (f < 0)
        return f;
    if (fstat(f, &st) < 0 || (uint64_t)st.st_size < end) {
        snprintf(why, whylen, "the replay log in %s is shorter than the %zu bytes the standby replayed", dir, end);
        close(f);
        return -EBADMSG;
    }
    size_t tail = end - FILE_HEADER < FOLLOW_TAIL ? end - FILE_HEADER : FOLLOW_TAIL;
    char *piece = malloc(FOLLOW_TAIL);
    bool same = piece && same_bytes(f, 0, FILE_HEADER, piece) && same_bytes(f, end - tail, tail, piece);
    if (!same) {
        snprintf(why, whylen, "the replay log in %s is not the one the standby replayed (%s)", dir,
                 piece ? "its lineage, or its last bytes before the takeover, differ" : "out of memory to check it");
        free(piece);
        close(f);
        return -EBADMSG;
    }
    free(piece);
    close(fd);
    fd = f;
    on_disk = path[0] != '\0';
    remember(dir, disk, arena_max);
    return 0;
}

int ckpt_rlog_follow_end(const char *dir, const char *disk, char *why, size_t whylen)
{
    char lwhy[128];
    int rc = 0;
    pthread_mutex_lock(&lock);
    size_t len = following ? follow_map(lwhy, sizeof(lwhy)) : 0;
    if (len > end)
        keep_tail(map, end, len);
    following = false;
    if (dir && map)
        rc = follow_move(dir, disk, why, whylen);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The calling thread's last record, while it is still in buf (gen counts
 * the buffer's lives): an OBSERVE with the same answer as the one before it
 * on the same thread only counts up (a poller asking a thousand times). */
static uint64_t gen = 1;
static __thread uint64_t last_gen;
static __thread size_t last_off;

static bool repeat(uint64_t thread, uint64_t a, uint64_t b)
{
    if (last_gen != gen || last_off + sizeof(struct rec) > buflen)
        return false;
    struct rec r;
    memcpy(&r, buf + last_off, sizeof(r));
    if (r.type != CKPT_RL_OBSERVE || r.thread != thread || r.a != a || r.b != b)
        return false;
    r.c++;
    r.sum = rec_sum(&r, NULL);
    memcpy(buf + last_off, &r, sizeof(r));
    return true;
}

void ckpt_rlog_append(enum ckpt_rl_type type, uint64_t thread, uint64_t a, uint64_t b, uint64_t c,
                      const void *payload, uint32_t len)
{
    pthread_mutex_lock(&lock);
    if (fd < 0 || map || overflowed)
        goto out;
    if (type == CKPT_RL_OBSERVE && repeat(thread, a, b))
        goto out;
    if (type == CKPT_RL_OBSERVE)
        c = 0; /* the repeat count */
    if (type == CKPT_RL_ITER)
        last_iter = a;
    size_t need = sizeof(struct rec) + padded(len);
    if (written + buflen + need > limit) {
        overflowed = true;
        type = CKPT_RL_OVERFLOW;
        a = last_iter;
        b = c = 0;
        len = 0;
        need = sizeof(struct rec);
        ckpt_log(CKPT_WARN, "the replay log reached %s (%llu bytes) after iteration %llu: "
                 "snapshots from here on cannot be restored", on_disk ? "its bound on disk" : "CKPT_REPLAY_LOG_MAX",
                 (unsigned long long)limit, (unsigned long long)last_iter);
    }
    if (buflen + need > bufcap) {
        size_t cap = (buflen + need) * 2;
        char *n = realloc(buf, cap);
        if (!n) {
            overflowed = true;
            ckpt_log(CKPT_WARN, "out of host memory for the replay log: snapshots from here on cannot be restored");
            goto out;
        }
        buf = n;
        bufcap = cap;
    }
    struct rec r = {.type = type, .len = len, .thread = thread, .a = a, .b = b, .c = c};
    r.sum = rec_sum(&r, payload);
    memcpy(buf + buflen, &r, sizeof(r));
    if (len)
        memcpy(buf + buflen + sizeof(r), payload, len);
    memset(buf + buflen + sizeof(r) + len, 0, padded(len) - len);
    last_gen = gen;
    last_off = buflen;
    buflen += need;
out:
    pthread_mutex_unlock(&lock);
}

int ckpt_rlog_flush(void)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    size_t done = 0;
    while (fd >= 0 && done < buflen) {
        ssize_t n = write(fd, buf + done, buflen - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            overflowed = true; /* a hole in the log: nothing after it can be replayed */
            ckpt_log(CKPT_WARN, "cannot write the replay log (%s): snapshots from here on cannot be restored",
                     strerror(-rc));
            break;
        }
        done += (size_t)n;
    }
    written += done;
    buflen = 0;
    gen++;
    pthread_mutex_unlock(&lock);
    return rc;
}

bool ckpt_rlog_complete(void)
{
    pthread_mutex_lock(&lock);
    bool ok = fd >= 0 && !overflowed;
    pthread_mutex_unlock(&lock);
    return ok;
}

/* How many more times than once a record is handed out: an OBSERVE
 * stands for 1 + c equal answers in a row, a WORK for a calls. */
static uint64_t repeats_of(const struct rec *r)
{
    return r->type == CKPT_RL_OBSERVE ? r->c : r->type == CKPT_RL_WORK && r->a ? r->a - 1 : 0;
}

/* The type of thread's next record in ix (its fields in out, which may be
 * NULL), consumed when take is set; 0 when there is none.  Lock held. */
static void (*aside_fn)(uint64_t thread, const struct ckpt_rl_rec *rec);

void ckpt_rlog_on_aside(void (*fn)(uint64_t thread, const struct ckpt_rl_rec *rec))
{
    pthread_mutex_lock(&lock);
    aside_fn = fn;
    pthread_mutex_unlock(&lock);
}

static int look(struct index *ix, uint64_t thread, struct ckpt_rl_rec *out, bool take)
{
    struct cursor *c = ix->base ? cursor_of(ix, thread, false) : NULL;
    if (!c || c->next == NONE)
        return 0;
    struct rec r;
    memcpy(&r, ix->base + ix->offs[c->next], sizeof(r));
    /* A library's memory: stepped over, shown to replay on the way. */
    while (r.type == CKPT_RL_ASIDE) {
        if (ix == &cut && aside_fn)
            aside_fn(thread, &(struct ckpt_rl_rec){.a = r.a, .b = r.b, .c = r.c});
        c->next = ix->chain[c->next];
        c->used = 0;
        if (c->next == NONE)
            return 0;
        memcpy(&r, ix->base + ix->offs[c->next], sizeof(r));
    }
    uint64_t repeats = repeats_of(&r);
    if (out)
        *out = (struct ckpt_rl_rec){.a = r.a, .b = r.b, .c = r.type == CKPT_RL_OBSERVE ? 0 : r.c,
                                    .payload = ix->base + ix->offs[c->next] + sizeof(r), .len = r.len};
    if (take && c->used < repeats) {
        c->used++;
    } else if (take) {
        c->next = ix->chain[c->next];
        c->used = 0;
    }
    return (int)r.type;
}

int ckpt_rlog_next(uint64_t thread, enum ckpt_rl_type want, struct ckpt_rl_rec *out, char *why, size_t whylen)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    int type = map ? look(&cut, thread, out, false) : 0;
    if (!type) {
        snprintf(why, whylen, "the program made a %s past the end of the replay log", name(want));
        rc = -ENODATA;
    } else if (type != (int)want) {
        snprintf(why, whylen, "the program made a %s where the log has a %s", name(want), name((uint32_t)type));
        rc = -EPROTO;
    } else {
        look(&cut, thread, out, true);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int ckpt_rlog_peek(uint64_t thread, struct ckpt_rl_rec *out)
{
    pthread_mutex_lock(&lock);
    int type = map ? look(&cut, thread, out, false) : 0;
    pthread_mutex_unlock(&lock);
    return type;
}

int ckpt_rlog_failed_run(uint64_t thread, struct ckpt_rl_rec *out, bool take)
{
    pthread_mutex_lock(&lock);
    int type = look(&tail, thread, out, take);
    pthread_mutex_unlock(&lock);
    return type;
}

size_t ckpt_rlog_failed_left(void)
{
    size_t left = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < tail.cap; i++)
        for (size_t k = tail.cursors[i].thread ? tail.cursors[i].next : NONE; k != NONE; k = tail.chain[k])
            left++;
    pthread_mutex_unlock(&lock);
    return left;
}

size_t ckpt_rlog_release(bool (*only)(int type, uint64_t a), uint64_t *records)
{
    size_t threads = 0;
    *records = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; map && i < cut.cap; i++) {
        struct cursor *c = &cut.cursors[i];
        if (!c->thread || c->next == NONE)
            continue;
        uint64_t n = 0;
        size_t k = c->next;
        for (; k != NONE; k = cut.chain[k]) {
            struct rec r;
            memcpy(&r, cut.base + cut.offs[k], sizeof(r));
            if (!only((int)r.type, r.a))
                break;
            n += 1 + repeats_of(&r);
        }
        if (k != NONE)
            continue;
        c->next = NONE;
        c->released = true;
        threads++;
        *records += n;
    }
    pthread_mutex_unlock(&lock);
    return threads;
}

bool ckpt_rlog_released(uint64_t thread)
{
    pthread_mutex_lock(&lock);
    struct cursor *c = map ? cursor_of(&cut, thread, false) : NULL;
    bool released = c && c->released;
    pthread_mutex_unlock(&lock);
    return released;
}

bool ckpt_rlog_dry(uint64_t thread)
{
    pthread_mutex_lock(&lock);
    struct cursor *c = map ? cursor_of(&cut, thread, false) : NULL;
    bool dry = c && c->next == NONE;
    pthread_mutex_unlock(&lock);
    return dry;
}

size_t ckpt_rlog_left(uint64_t *thread)
{
    size_t left = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; map && i < cut.cap; i++) {
        if (!cut.cursors[i].thread || cut.cursors[i].next == NONE)
            continue;
        if (!left)
            *thread = cut.cursors[i].thread;
        for (size_t k = cut.cursors[i].next; k != NONE; k = cut.chain[k]) {
            struct rec r;
            memcpy(&r, cut.base + cut.offs[k], sizeof(r));
            left += r.type != CKPT_RL_ASIDE;
        }
    }
    pthread_mutex_unlock(&lock);
    return left;
}

/* A log restored whole into the arena (read back from disk, or from a
 * peer) that this rank was to keep on disk: its first end bytes are
 * written there and the arena's replay.log becomes the stub.  Lock held,
 * map still mapped.  On failure the log stays in the arena, said once. */
static void move_to_disk(void)
{
    char why[PATH_MAX + 128];
    int f = open(disk_path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    size_t done = 0;
    while (f >= 0 && done < end) {
        ssize_t n = write(f, map + done, end - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    int e = errno;
    if (f < 0 || done < end) {
        snprintf(why, sizeof(why), "cannot write %s: %s", disk_path, strerror(f < 0 || !e ? e ? e : EIO : e));
    } else if (rlog_write_stub(rank_dir, disk_path, why, sizeof(why)) == 0) {
        close(fd);
        fd = f;
        on_disk = true;
        return;
    }
    if (f >= 0)
        close(f);
    unlink(disk_path);
    ckpt_log(CKPT_WARN, "the replay log stays in the arena: %s", why);
}

int ckpt_rlog_go_live(void)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    if (map) {
        if (!on_disk && disk_path[0])
            move_to_disk();
        munmap((void *)map, maplen);
        map = NULL;
        following = false;
        mapped = 0;
        drop_index(&cut);
        limit = on_disk ? DISK_MAX : arena_max;
        /* Cut short, then a new lineage before anything is appended: a
         * reader that saw the old lineage after reading bytes read no byte
         * of the new log (ckpt_rlog_lineage). */
        uint64_t lineage = 0;
        if (pread(fd, &lineage, sizeof(lineage), FILE_LINEAGE) != (ssize_t)sizeof(lineage))
            lineage = 0;
        lineage = new_lineage(lineage);
        if (ftruncate(fd, (off_t)end) < 0 || lseek(fd, (off_t)end, SEEK_SET) < 0 ||
            pwrite(fd, &lineage, sizeof(lineage), FILE_LINEAGE) != (ssize_t)sizeof(lineage))
            rc = -errno;
        written = end;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void ckpt_rlog_close(void)
{
    pthread_mutex_lock(&lock);
    if (map)
        munmap((void *)map, maplen);
    map = NULL;
    drop_index(&cut);
    drop_tail();
    following = false;
    mapped = 0;
    if (fd >= 0)
        close(fd);
    fd = -1;
    buflen = 0;
    gen++;
    pthread_mutex_unlock(&lock);
}

/* Read-only, for tools: the same walk as ckpt_rlog_open_replay, over the
 * whole file, through a read-only descriptor that never changes the log
 * (a live rank may be appending to it). */
int ckpt_rlog_verify(const char *dir, uint64_t *last_iteration, char *why, size_t whylen)
{
    char path[PATH_MAX + 16];

    *last_iteration = 0;
    int f = rlog_open_log(dir, O_RDONLY, path, sizeof(path), why, whylen);
    if (f < 0)
        return f;
    if (!*path)
        ckpt_rlog_arena_path(path, sizeof(path), dir); /* it fit when the log was opened */
    int rc = ckpt_rlog_verify_fd(f, path, last_iteration, why, whylen);
    close(f);
    return rc;
}

int ckpt_rlog_verify_fd(int f, const char *path, uint64_t *last_iteration, char *why, size_t whylen)
{
    char head[FILE_HEADER];
    struct stat st;
    int rc = 0;

    *last_iteration = 0;
    if (fstat(f, &st) < 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        return rc;
    }
    /* Only what was whole when we looked: a rank appends while we read. */
    size_t len = (size_t)st.st_size, off = FILE_HEADER;
    char *payload = NULL;
    size_t cap = 0;
    if (len < FILE_HEADER || pread(f, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
        memcmp(head, FILE_MAGIC, 8) != 0) {
        snprintf(why, whylen, "%s is not a replay log of this version", path);
        rc = -EBADMSG;
    }
    while (rc == 0 && off < len) {
        struct rec r;
        if (len - off < sizeof(r) || pread(f, &r, sizeof(r), (off_t)off) != (ssize_t)sizeof(r) ||
            r.len > len - off - sizeof(r)) {
            snprintf(why, whylen, "replay log record at byte %zu is cut short by the end of the file, or its "
                     "length is damaged (after iteration %llu)", off, (unsigned long long)*last_iteration);
            rc = -ENODATA;
            break;
        }
        if (r.len > cap) {
            char *n = realloc(payload, r.len);
            if (!n) {
                rc = -ENOMEM;
                snprintf(why, whylen, "out of memory reading %s", path);
                break;
            }
            payload = n;
            cap = r.len;
        }
        if (rlog_pread(f, payload, r.len, (off_t)(off + sizeof(r))) < 0 || rec_sum(&r, payload) != r.sum) {
            snprintf(why, whylen, "replay log record at byte %zu is damaged (after iteration %llu)", off,
                     (unsigned long long)*last_iteration);
            rc = -EBADMSG;
            break;
        }
        if (r.type == CKPT_RL_ITER)
            *last_iteration = r.a;
        off += sizeof(r) + padded(r.len);
    }
    free(payload);
    return rc;
}
