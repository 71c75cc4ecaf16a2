/*
 * The part of a rank's replay log a snapshot needs (replay.h:
 * ckpt_rlog_scan), for a generation on disk that names the log beside it
 * rather than write a copy of it each time.  A restore of iteration I
 * replays the records up to the end of I's iteration record; their XXH3
 * is what the generation keeps.  The file header is left out of the sum:
 * its lineage is drawn anew at every restore, while the records before
 * the restore point stay as they were.
 *
 * A scan goes on where the last one on the same file and lineage stopped
 * (the lineage only changes when the log is made or cut short), so a job
 * that persists every so often reads each byte of its log once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "replay.h"
#include "replay_int.h"

#define WINDOW (1u << 20) /* bytes read at a time */

void ckpt_rlog_scan_free(struct ckpt_rlog_scan *sc)
{
    if (sc->state)
        XXH3_freeState(sc->state);
    *sc = (struct ckpt_rlog_scan){0};
}

/* Feeds n bytes of fd at off to st, through buf (WINDOW bytes). */
static int feed(int fd, XXH3_state_t *st, uint64_t off, uint64_t n, char *buf)
{
    while (n) {
        size_t k = n < WINDOW ? (size_t)n : WINDOW;
        int rc = rlog_pread(fd, buf, k, (off_t)off);
        if (rc < 0)
            return rc;
        XXH3_64bits_update(st, buf, k);
        off += k;
        n -= k;
    }
    return 0;
}

/* Walks the records from sc->bytes to the end of iteration's. */
static int walk(int fd, uint64_t len, uint64_t iteration, struct ckpt_rlog_scan *sc, char *buf, char *why,
                size_t whylen)
{
    uint64_t off = sc->bytes, win = off, have = 0; /* buf holds [win, win + have) */
    for (;;) {
        struct rec r;
        if (len - off < sizeof(r)) {
            snprintf(why, whylen, "the log ends at byte %llu before the end of iteration %llu",
                     (unsigned long long)off, (unsigned long long)iteration);
            return -ENODATA;
        }
        if (off + sizeof(r) > win + have) {
            win = off;
            have = len - off < WINDOW ? len - off : WINDOW;
            int rc = rlog_pread(fd, buf, (size_t)have, (off_t)win);
            if (rc < 0) {
                snprintf(why, whylen, "cannot read byte %llu of the log: %s", (unsigned long long)win,
                         strerror(-rc));
                return rc;
            }
        }
        memcpy(&r, buf + (off - win), sizeof(r));
        uint64_t whole = sizeof(r) + padded(r.len);
        if (whole > len - off) {
            snprintf(why, whylen, "the record at byte %llu runs past the end of the log (iteration %llu not ended)",
                     (unsigned long long)off, (unsigned long long)iteration);
            return -ENODATA;
        }
        if (off + whole <= win + have) {
            XXH3_64bits_update(sc->state, buf + (off - win), (size_t)whole);
        } else {
            int rc = feed(fd, sc->state, off, whole, buf); /* a record longer than what is left of the window */
            have = 0;
            if (rc < 0) {
                snprintf(why, whylen, "cannot read the record at byte %llu: %s", (unsigned long long)off,
                         strerror(-rc));
                return rc;
            }
        }
        off += whole;
        if (r.type == CKPT_RL_ITER && r.a >= iteration) {
            if (r.a > iteration) {
                snprintf(why, whylen, "the log ends iteration %llu where it should end iteration %llu",
                         (unsigned long long)r.a, (unsigned long long)iteration);
                return -EBADMSG;
            }
            sc->bytes = off;
            sc->iteration = iteration;
            sc->sum = XXH3_64bits_digest(sc->state);
            return 0;
        }
    }
}

int ckpt_rlog_scan(int fd, uint64_t iteration, struct ckpt_rlog_scan *sc, char *why, size_t whylen)
{
    char head[FILE_HEADER];
    struct stat st;

    if (fstat(fd, &st) < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot read the log: %s", strerror(e));
        return -e;
    }
    uint64_t lineage = ckpt_rlog_lineage(fd);
    if (sc->state && sc->dev == (uint64_t)st.st_dev && sc->ino == (uint64_t)st.st_ino && sc->lineage == lineage &&
        sc->bytes && sc->iteration <= iteration) {
        if (sc->iteration == iteration)
            return 0;
    } else {
        if (!sc->state && !(sc->state = XXH3_createState())) {
            snprintf(why, whylen, "out of memory");
            return -ENOMEM;
        }
        if (rlog_pread(fd, head, sizeof(head), 0) < 0 || memcmp(head, FILE_MAGIC, 8) != 0 || !lineage) {
            snprintf(why, whylen, "not a replay log of this version");
            sc->bytes = 0;
            return -EBADMSG;
        }
        XXH3_64bits_reset(sc->state);
        sc->dev = (uint64_t)st.st_dev;
        sc->ino = (uint64_t)st.st_ino;
        sc->lineage = lineage;
        sc->bytes = FILE_HEADER;
        sc->iteration = 0;
    }
    char *buf = malloc(WINDOW);
    if (!buf) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int rc = walk(fd, (uint64_t)st.st_size, iteration, sc, buf, why, whylen);
    free(buf);
    /* Bytes read under one lineage are a prefix of the log; a restore cut
     * it short while they were read when the lineage changed. */
    if (rc == 0 && ckpt_rlog_lineage(fd) != lineage) {
        snprintf(why, whylen, "the log was cut short by a restore while it was read");
        rc = -ESTALE;
    }
    if (rc < 0)
        sc->bytes = 0; /* the next scan starts over */
    return rc;
}

int ckpt_rlog_copy_prefix(int from, int to, uint64_t bytes, uint64_t sum, char *why, size_t whylen)
{
    char *buf = malloc(WINDOW);
    XXH3_state_t *st = XXH3_createState();
    int rc = buf && st ? 0 : -ENOMEM;
    if (rc < 0)
        snprintf(why, whylen, "out of memory");
    else if (bytes < FILE_HEADER) {
        snprintf(why, whylen, "%llu bytes are no replay log", (unsigned long long)bytes);
        rc = -EBADMSG;
    } else {
        XXH3_64bits_reset(st);
    }
    for (uint64_t off = 0; !rc && off < bytes;) {
        size_t k = bytes - off < WINDOW ? (size_t)(bytes - off) : WINDOW;
        if ((rc = rlog_pread(from, buf, k, (off_t)off)) < 0) {
            if (rc == -ENODATA)
                snprintf(why, whylen, "the log is shorter than the %llu bytes the snapshot needs",
                         (unsigned long long)bytes);
            else
                snprintf(why, whylen, "cannot read the log: %s", strerror(-rc));
            rc = rc == -ENODATA ? -EBADMSG : rc;
            break;
        }
        size_t skip = off < FILE_HEADER ? (size_t)(FILE_HEADER - off) : 0;
        if (skip < k)
            XXH3_64bits_update(st, buf + skip, k - skip);
        for (size_t done = 0; to >= 0 && done < k;) {
            ssize_t w = pwrite(to, buf + done, k - done, (off_t)(off + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = w < 0 ? -errno : -ENOSPC;
                snprintf(why, whylen, "cannot write the log's copy: %s", strerror(-rc));
                break;
            }
            done += (size_t)w;
        }
        off += k;
    }
    if (!rc && XXH3_64bits_digest(st) != sum) {
        snprintf(why, whylen, "its first %llu bytes are not the ones the snapshot was taken with (another run "
                 "wrote it, or it is damaged)", (unsigned long long)bytes);
        rc = -EBADMSG;
    }
    free(buf);
    if (st)
        XXH3_freeState(st);
    return rc;
}
