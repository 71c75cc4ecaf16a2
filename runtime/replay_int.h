/*
 * Between the replay log's files (replay.c, replay_prefix.c) and the
 * place they live (replay_where.c): the file's identity and record
 * layout, and the stub that points the arena at a log on disk.
 */
#ifndef CKPT_REPLAY_INT_H
#define CKPT_REPLAY_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FILE_MAGIC "CKPTRLG2"
#define FILE_VERSION 2u
/* The file header (FILE_HEADER bytes): the magic, the version (u32 at 8),
 * and the lineage (u64 at FILE_LINEAGE): a value drawn anew each time the
 * log is made or cut short, so that bytes read under one lineage are
 * known to be a prefix of the log of the same lineage. */
#define FILE_HEADER 64
#define FILE_LINEAGE 16

/* A record: this header, then len bytes of payload padded to 8. */
struct rec {
    uint32_t type;
    uint32_t len;
    uint64_t thread;
    uint64_t a, b, c;
    uint64_t sum;
};
_Static_assert(sizeof(struct rec) == 48, "replay record layout changed: bump FILE_VERSION");

static inline size_t padded(uint32_t len)
{
    return ((size_t)len + 7) & ~(size_t)7; /* in 64 bits: a length near 4 GiB must not wrap to 0 */
}

/* All of n bytes at off (one pread returns at most about 2 GiB): 0, or
 * -errno, -ENODATA at the end of the file. */
int rlog_pread(int fd, void *buf, size_t n, off_t off);

/* Points dir's replay.log at the log on disk, by rename.  0 or -errno with why. */
int rlog_write_stub(const char *dir, const char *disk, char *why, size_t whylen);
/* Opens dir's log with flags, wherever it lives (the file a stub names into
 * disk, "" when in the arena; disk may be NULL).  The descriptor, or -errno
 * with why. */
int rlog_open_log(const char *dir, int flags, char *disk, size_t disklen, char *why, size_t whylen);

#endif
