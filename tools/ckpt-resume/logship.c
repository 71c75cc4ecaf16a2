/*
 * A rank's replay log between node agents: the sender's part (a round of
 * replication sends each rank's log before its snapshot) and the
 * receiver's (it keeps the log in the peer store beside the replica, in
 * memory up to CKPT_REPLAY_LOG_MAX; or, on a node whose ranks keep their
 * logs on disk, on that disk, as long as it has room, with a stub beside
 * the replica naming it: a long job's logs outgrow any memory bound).
 *
 * A log only grows, until a restore cuts it short and draws a new lineage
 * (replay.h), so a receiver that already holds the first bytes of it needs
 * only the rest: the traffic of a round is what the log grew by since the
 * last one, not the whole log, which grows with the job's age.  Which
 * bytes the receiver holds is settled by their XXH3: the sender keeps,
 * for each rank's log, a running XXH3 and its value at the lengths it
 * sent lately (marks); the receiver keeps a running XXH3 of each log it
 * holds.  Anything unsure (another lineage, a length it has no mark for,
 * a receiver that restarted) sends the whole log, as before.
 *
 *   sender                                 receiver
 *   LOG {rank, size, job, epoch}   --->    refused: RESULT {-errno}, the end
 *                                  <---    HAVE {held, xxh3 of those bytes}
 *   FROM {0, or held when its
 *         first held bytes match}  --->
 *   DATA [from, size) in pieces    --->
 *   END {xxh3 of [0, size)}        --->    appends after held (FROM held) or
 *                                          replaces the file (FROM 0); keeps
 *                                  <---    RESULT {0 or -errno}
 *
 * A log of an older epoch than the receiver's is refused (-ESTALE): its
 * sender was left behind by a newer plan.  A transfer that fails leaves
 * the receiver with what it held before.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "config.h"
#include "arena.h"
#include "log.h"
#include "replay.h"
#include "resume.h"
#include "util.h"
#include "wire.h"

enum { LOG_OFFER = LOGSHIP_OFFER, LOG_DATA, LOG_END, LOG_RESULT, LOG_HAVE, LOG_FROM };
#define LOG_PIECE (8u << 20)
#define MARKS 16

struct log_offer {
    uint32_t rank, reserved;
    uint64_t size;
    char job[CKPT_JOB_MAX];
    uint64_t epoch;                     /* the plan the sender acts under (coord.h) */
};
_Static_assert(sizeof(struct log_offer) == 24 + CKPT_JOB_MAX, "replay log offer layout");

struct log_have {
    uint64_t held, sum;
};

/* The sender's memory of one rank's log: the file it read (device, inode,
 * lineage), the XXH3 of its first len bytes, and that digest at the
 * lengths it sent lately. */
struct sent_log {
    dev_t dev;
    ino_t ino;
    uint64_t lineage, len;
    XXH3_state_t *st;
    struct { uint64_t len, sum; } marks[MARKS];
    unsigned nmarks;
};

/* The receiver's memory of one log it holds: the file (device, inode),
 * and the XXH3 of its len bytes. */
struct held_log {
    dev_t dev;
    ino_t ino;
    uint64_t len;
    XXH3_state_t *st;
};

struct logship {
    unsigned nranks;
    char disk[PATH_MAX];                /* where peers' logs are kept on disk, "": in memory */
    struct sent_log *sent;
    struct held_log *held;
    uint64_t offered, shipped;          /* atomic: bytes of the logs this node sent whole or in part, and
                                         * of them the bytes that travelled */
};

int logship_open(struct logship **out, unsigned nranks, const char *disk)
{
    struct logship *ls = calloc(1, sizeof(*ls));
    *out = ls;
    if (!ls || !(ls->sent = calloc(nranks, sizeof(*ls->sent))) || !(ls->held = calloc(nranks, sizeof(*ls->held))))
        return -ENOMEM;
    ls->nranks = nranks;
    if (disk && *disk && snprintf(ls->disk, sizeof(ls->disk), "%s/" CKPT_PEERS_SUBDIR, disk) >= (int)sizeof(ls->disk))
        return -ENAMETOOLONG;
    return 0;
}

void logship_close(struct logship *ls)
{
    if (!ls)
        return;
    for (unsigned i = 0; i < ls->nranks; i++) {
        if (ls->sent)
            XXH3_freeState(ls->sent[i].st);
        if (ls->held)
            XXH3_freeState(ls->held[i].st);
    }
    free(ls->sent);
    free(ls->held);
    free(ls);
}

void logship_totals(const struct logship *ls, uint64_t *offered, uint64_t *shipped)
{
    *offered = ls ? __atomic_load_n(&ls->offered, __ATOMIC_RELAXED) : 0;
    *shipped = ls ? __atomic_load_n(&ls->shipped, __ATOMIC_RELAXED) : 0;
}

/* ---------------------------------------------------------------- sending */

static int forget_sent(struct sent_log *s, const struct stat *st, uint64_t lineage)
{
    if (!s->st && !(s->st = XXH3_createState()))
        return -ENOMEM;
    XXH3_64bits_reset(s->st);
    s->dev = st->st_dev;
    s->ino = st->st_ino;
    s->lineage = lineage;
    s->len = 0;
    s->nmarks = 0;
    return 0;
}

static void mark(struct sent_log *s)
{
    if (s->nmarks && s->marks[(s->nmarks - 1) % MARKS].len == s->len)
        return;
    s->marks[s->nmarks % MARKS].len = s->len;
    s->marks[s->nmarks % MARKS].sum = XXH3_64bits_digest(s->st);
    s->nmarks++;
}

/* Reads fd from s->len to upto into s's XXH3, marking the digest at upto. */
static int hash_to(struct sent_log *s, int fd, uint64_t upto, char *buf)
{
    while (s->len < upto) {
        size_t n = upto - s->len < LOG_PIECE ? (size_t)(upto - s->len) : LOG_PIECE;
        ssize_t got = pread(fd, buf, n, (off_t)s->len);
        if (got <= 0)
            return got < 0 ? -errno : -ESTALE; /* cut short under us */
        XXH3_64bits_update(s->st, buf, (size_t)got);
        s->len += (uint64_t)got;
    }
    mark(s);
    return 0;
}

static bool marked(const struct sent_log *s, uint64_t len, uint64_t sum)
{
    for (unsigned k = 0; k < s->nmarks && k < MARKS; k++)
        if (s->marks[k].len == len && s->marks[k].sum == sum)
            return true;
    return false;
}

/* After the offer: sends what the receiver lacks of the log on fd, of
 * size bytes, and reads its verdict. */
static int ship(struct logship *ls, struct sent_log *s, int fd, int ctl, uint64_t size, uint64_t lineage, char *buf,
                uint64_t *from)
{
    uint16_t type;
    void *msg = NULL;
    size_t len;
    int rc = ckpt_wire_recv(ctl, LOGSHIP_TIMEOUT_MS, &type, &msg, &len);
    if (rc < 0)
        return rc;
    struct log_have have = { 0 };
    int32_t status = -EPROTO;
    if (type == LOG_RESULT && len == sizeof(status))
        memcpy(&status, msg, sizeof(status)); /* refused at the offer */
    else if (type == LOG_HAVE && len == sizeof(have))
        memcpy(&have, msg, sizeof(have)), status = 0;
    free(msg);
    if (status < 0)
        return status;
    *from = 0;
    if (have.held && have.held <= size && (rc = hash_to(s, fd, have.held < s->len ? s->len : have.held, buf)) == 0 &&
        marked(s, have.held, have.sum))
        *from = have.held;
    if (rc < 0 || (rc = hash_to(s, fd, size, buf)) < 0)
        return rc;
    uint64_t sum = XXH3_64bits_digest(s->st);
    if ((rc = ckpt_wire_send(ctl, LOG_FROM, from, sizeof(*from), NULL, 0)) < 0)
        return rc;
    for (uint64_t off = *from; off < size;) {
        size_t n = size - off < LOG_PIECE ? (size_t)(size - off) : LOG_PIECE;
        ssize_t got = pread(fd, buf, n, (off_t)off);
        if (got <= 0)
            return got < 0 ? -errno : -ESTALE;
        if ((rc = ckpt_wire_send(ctl, LOG_DATA, buf, (size_t)got, NULL, 0)) < 0)
            return rc;
        off += (uint64_t)got;
    }
    /* Every byte read: a log cut short meanwhile has a new lineage by now,
     * and the receiver, with no END, keeps what it held. */
    if (ckpt_rlog_lineage(fd) != lineage)
        return -ESTALE;
    if ((rc = ckpt_wire_send(ctl, LOG_END, &sum, sizeof(sum), NULL, 0)) < 0 ||
        (rc = ckpt_wire_recv(ctl, LOGSHIP_TIMEOUT_MS, &type, &msg, &len)) < 0)
        return rc;
    status = -EPROTO;
    if (type == LOG_RESULT && len == sizeof(status))
        memcpy(&status, msg, sizeof(status));
    free(msg);
    if (status == 0) {
        __atomic_fetch_add(&ls->offered, size, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ls->shipped, size - *from, __ATOMIC_RELAXED);
    }
    return status;
}

int logship_send(struct logship *ls, const char *dir, const char *job, int rank, uint64_t epoch, const char *to,
                 char *why, size_t whylen)
{
    struct stat st = { 0 };
    int ctl = -1, rc;
    uint64_t from = 0;
    char *buf = NULL;

    if (rank < 0 || (unsigned)rank >= ls->nranks)
        return -EINVAL;
    struct sent_log *s = &ls->sent[rank];
    int fd = ckpt_rlog_open_fd(dir, why, whylen);
    if (fd < 0)
        return fd;
    uint64_t lineage = ckpt_rlog_lineage(fd);
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot read rank %d's replay log: %s", rank, strerror(-rc));
        goto out;
    }
    if (!s->st || s->dev != st.st_dev || s->ino != st.st_ino || s->lineage != lineage ||
        (uint64_t)st.st_size < s->len) {
        if ((rc = forget_sent(s, &st, lineage)) < 0)
            goto out;
    }
    if ((rc = ckpt_wire_connect(to, &ctl, why, whylen)) < 0)
        goto out;
    struct log_offer lo = { .rank = (uint32_t)rank, .size = (uint64_t)st.st_size, .epoch = epoch };
    snprintf(lo.job, sizeof(lo.job), "%s", job);
    rc = (buf = malloc(LOG_PIECE)) ? ckpt_wire_send(ctl, LOG_OFFER, &lo, sizeof(lo), NULL, 0) : -ENOMEM;
    if (rc == 0)
        rc = ship(ls, s, fd, ctl, lo.size, lineage, buf, &from);
    if (rc == 0)
        ckpt_log(CKPT_DEBUG, "rank %d's replay log to %s: %llu new bytes of %llu", rank, to,
                 (unsigned long long)(lo.size - from), (unsigned long long)lo.size);
out:
    if (rc < 0 && s->st && rc != -ECONNREFUSED)
        forget_sent(s, &st, 0); /* what was hashed may be of another lineage */
    if (rc < 0 && !*why)
        snprintf(why, whylen, "the replay log of rank %d did not reach %s: %s", rank, to, strerror(-rc));
    free(buf);
    if (ctl >= 0)
        close(ctl);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- receiving */

int logship_rank_dir(const char *root, const char *job, uint32_t rank, char *out, size_t outlen)
{
    char job_dir[PATH_MAX];
    int rc = ckpt_job_dir(job_dir, sizeof(job_dir), root, job);
    if (rc == 0)
        rc = ckpt_rank_dir(out, outlen, job_dir, (int)rank);
    if (rc < 0)
        return rc;
    if (mkdir(root, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (mkdir(job_dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (mkdir(out, 0700) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (lstat(out, &st) < 0 || !S_ISDIR(st.st_mode) || !ckpt_private(&st))
        return -EPERM;
    return 0;
}


bool logship_offer(uint16_t type)
{
    return type == LOG_OFFER;
}

/* What the receiver holds of the log at path, as HAVE says it: nothing
 * unless its memory of the file is of this very file, whole. */
static struct log_have holding(struct held_log *h, const char *path)
{
    struct stat st;
    struct log_have have = { 0 };
    if (h->st && stat(path, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino &&
        (uint64_t)st.st_size == h->len) {
        have.held = h->len;
        have.sum = XXH3_64bits_digest(h->st);
    }
    return have;
}

/* Receives the bytes after FROM into fd (from held on), hashing them into
 * st, up to size; checks END's digest.  0 or -errno. */
static int take(int ctl, int fd, XXH3_state_t *st, uint64_t from, uint64_t size)
{
    uint16_t type;
    void *msg;
    size_t len;
    int rc = 0;

    for (uint64_t got = from;;) {
        int r2 = ckpt_wire_recv(ctl, LOGSHIP_TIMEOUT_MS, &type, &msg, &len);
        if (r2 < 0)
            return r2;
        if (type == LOG_DATA && got + len <= size) {
            XXH3_64bits_update(st, msg, len);
            if (rc == 0 && pwrite(fd, msg, len, (off_t)got) != (ssize_t)len)
                rc = -EIO;
            got += len;
            free(msg);
            continue;
        }
        if (type == LOG_END && len == sizeof(uint64_t) && got == size) {
            uint64_t want;
            memcpy(&want, msg, sizeof(want));
            if (rc == 0 && XXH3_64bits_digest(st) != want)
                rc = -EBADMSG;
        } else {
            rc = -EPROTO;
        }
        free(msg);
        return rc;
    }
}

/* The file that keeps @rank's log: the replay.log beside the replica
 * (@dir), or with a disk, the rank's file there (the replay.log beside the
 * replica then names it, ckpt_rlog_point).  0 or -errno. */
static int place(const struct logship *ls, const char *dir, uint32_t rank, char *path, size_t len)
{
    struct stat st;
    if (!*ls->disk)
        return ckpt_rlog_arena_path(path, len, dir);
    if (mkdir(ls->disk, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (lstat(ls->disk, &st) < 0 || !S_ISDIR(st.st_mode) || !ckpt_private(&st))
        return -EPERM;
    return ckpt_rlog_disk_path(path, len, ls->disk, (int)rank);
}

/* Whether the disk has room for @more bytes of @rank's log; says so once when not. */
static int room(const struct logship *ls, uint32_t rank, uint64_t more)
{
    static bool said;
    struct statvfs vf;
    if (statvfs(ls->disk, &vf) < 0 || (uint64_t)vf.f_bavail * vf.f_frsize >= more)
        return 0;
    if (!said)
        ckpt_log(CKPT_WARN, "refused rank %u's replay log: %llu more bytes, and %s has %llu free", rank,
                 (unsigned long long)more, ls->disk, (unsigned long long)vf.f_bavail * vf.f_frsize);
    said = true;
    return -ENOSPC;
}

int logship_receive(struct logship *ls, const char *root, const char *job, unsigned nranks, uint64_t epoch, int ctl)
{
    uint16_t type;
    void *msg = NULL;
    size_t len;
    char dir[PATH_MAX], path[PATH_MAX + 32], tmp[PATH_MAX + 48], why[PATH_MAX + 128];
    int rc = ckpt_wire_recv(ctl, LOGSHIP_TIMEOUT_MS, &type, &msg, &len), fd = -1;
    const struct log_offer *lo = msg;

    if (rc < 0)
        return rc;
    /* Only this job's ranks (the job name becomes a path, and without
     * CKPT_JOB_KEY anyone may ask), and logs no longer than a rank may
     * keep in memory, unless this node keeps them on its disk. */
    uint64_t max = (uint64_t)ckpt_cfg_int(CFG_REPLAY_LOG_MAX), size = 0;
    uint32_t rank = 0;
    if (type != LOG_OFFER || len != sizeof(*lo) || !memchr(lo->job, '\0', sizeof(lo->job)) ||
        strcmp(lo->job, job) != 0 || lo->rank >= nranks || lo->rank >= ls->nranks) {
        rc = -EPROTO;
    } else if (!*ls->disk && lo->size > max) {
        ckpt_log(CKPT_WARN, "refused rank %u's replay log: %llu bytes, over the %llu this node keeps of a peer's log "
                 "(CKPT_REPLAY_LOG_MAX)", lo->rank, (unsigned long long)lo->size, (unsigned long long)max);
        rc = -EFBIG;
    } else if (lo->epoch < epoch) {
        ckpt_log(CKPT_WARN, "refused rank %u's replay log: a stale epoch: the offer is of epoch %llu, this node acts "
                 "under epoch %llu (the sender was left behind by a newer plan and is fenced)", lo->rank,
                 (unsigned long long)lo->epoch, (unsigned long long)epoch);
        rc = -ESTALE;
    } else {
        rank = lo->rank;
        size = lo->size;
        rc = logship_rank_dir(root, job, rank, dir, sizeof(dir));
    }
    free(msg);
    struct held_log *h = rc == 0 ? &ls->held[rank] : NULL;
    struct log_have have = { 0 };
    uint64_t from = 0;
    if (rc == 0)
        rc = place(ls, dir, rank, path, sizeof(path));
    if (rc == 0) {
        have = holding(h, path);
        if (have.held > size)
            have.held = 0;
        rc = ckpt_wire_send(ctl, LOG_HAVE, &have, sizeof(have), NULL, 0);
        if (rc == 0 && (rc = ckpt_wire_recv(ctl, LOGSHIP_TIMEOUT_MS, &type, &msg, &len)) == 0) {
            if (type != LOG_FROM || len != sizeof(from) || (memcpy(&from, msg, sizeof(from)), from != 0 &&
                                                            from != have.held))
                rc = -EPROTO;
            free(msg);
        }
        if (rc < 0)
            return rc;
    }
    if (rc == 0 && *ls->disk)
        rc = room(ls, rank, size - from);
    /* From held: appended in place, from the memory's XXH3 (a copy, so a
     * failure leaves it as it was); from 0: a new file, then renamed. */
    XXH3_state_t *st = rc == 0 ? XXH3_createState() : NULL;
    if (rc == 0 && !st)
        rc = -ENOMEM;
    if (rc == 0 && from) {
        XXH3_copyState(st, h->st);
        if ((fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            rc = -errno;
    } else if (rc == 0) {
        XXH3_64bits_reset(st);
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
            rc = -errno;
    }
    if (rc == 0) {
        rc = take(ctl, fd, st, from, size);
        if (close(fd) < 0 && rc == 0)
            rc = -errno;
        if (from && rc < 0 && truncate(path, (off_t)from) < 0)
            h->len = UINT64_MAX; /* neither what it was nor what was sent: sent whole next time */
        if (!from && rc == 0 && rename(tmp, path) < 0)
            rc = -errno;
        if (!from && rc < 0)
            unlink(tmp);
    }
    if (rc == 0 && *ls->disk && (rc = ckpt_rlog_point(dir, path, why, sizeof(why))) < 0)
        ckpt_log(CKPT_WARN, "rank %u's replay log is kept on disk, but the replica cannot name it: %s", rank, why);
    struct stat sb;
    if (rc == 0 && stat(path, &sb) == 0) {
        XXH3_freeState(h->st);
        *h = (struct held_log){ .dev = sb.st_dev, .ino = sb.st_ino, .len = size, .st = st };
        st = NULL;
    }
    XXH3_freeState(st);
    if (rc != -ECONNRESET && rc != -ETIMEDOUT) {
        int32_t status = rc;
        ckpt_wire_send(ctl, LOG_RESULT, &status, sizeof(status), NULL, 0);
    }
    return rc;
}
