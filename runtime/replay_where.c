/*
 * Where a rank's replay log lives (replay.h): the arena's replay.log
 * itself, or, for a log kept on disk, a stub there of one page: the magic
 * CKPTRLGD, the version, and the path of the file on disk, NUL-terminated.
 * A stub is replaced by rename, so a reader sees the old file or the new
 * one; the file it names must be this user's and 0600.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "replay.h"
#include "replay_int.h"
#include "util.h"

#define STUB_MAGIC "CKPTRLGD"
#define STUB_BYTES 4096

int rlog_pread(int fd, void *buf, size_t n, off_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -ENODATA;
        done += (size_t)k;
    }
    return 0;
}

/* A rank's log on disk: DISK_PREFIX<rank>DISK_SUFFIX. */
#define DISK_PREFIX "rank"
#define DISK_SUFFIX ".replay.log"

int ckpt_rlog_arena_path(char *out, size_t n, const char *rank_dir)
{
    return ckpt_pathf(out, n, "%s/" CKPT_RLOG_ARENA_NAME, rank_dir);
}

int ckpt_rlog_disk_path(char *out, size_t n, const char *dir, int rank)
{
    return ckpt_pathf(out, n, "%s/" DISK_PREFIX "%d" DISK_SUFFIX, dir, rank);
}

bool ckpt_rlog_disk_name(const char *name, int *rank)
{
    return ckpt_name_number(name, DISK_PREFIX, DISK_SUFFIX, rank);
}

/* Points the arena's replay.log of dir at disk, by rename: a reader sees
 * the old file or the stub, never half of one. */
int rlog_write_stub(const char *dir, const char *disk, char *why, size_t whylen)
{
    char path[PATH_MAX + 16], stub[STUB_BYTES] = STUB_MAGIC;
    uint32_t version = FILE_VERSION;
    size_t n = strlen(disk);

    if (16 + n + 1 > sizeof(stub)) {
        snprintf(why, whylen, "the replay log path %s is too long", disk);
        return -ENAMETOOLONG;
    }
    memcpy(stub + 8, &version, sizeof(version));
    memcpy(stub + 16, disk, n + 1);
    int rc = ckpt_rlog_arena_path(path, sizeof(path), dir);
    if (rc == 0)
        rc = ckpt_write_whole(path, stub, 16 + n + 1);
    if (rc < 0)
        snprintf(why, whylen, "cannot write %s: %s", path, strerror(-rc));
    return rc;
}

/* Opens the log of the rank directory dir with flags: the arena's
 * replay.log, or the file on disk its stub names, into *disk (NULL: none).
 * Returns the descriptor, or -errno with why. */
int rlog_open_log(const char *dir, int flags, char *disk, size_t disklen, char *why, size_t whylen)
{
    char path[PATH_MAX + 16], stub[STUB_BYTES];
    struct stat st;

    if (disk)
        *disk = '\0';
    if (ckpt_rlog_arena_path(path, sizeof(path), dir) < 0) {
        snprintf(why, whylen, "the replay log of %s: too long a path", dir);
        return -ENAMETOOLONG;
    }
    int f = open(path, flags | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        snprintf(why, whylen, "no replay log %s: %s", path, strerror(e));
        return -e;
    }
    ssize_t n = pread(f, stub, sizeof(stub) - 1, 0);
    if (n < 17 || memcmp(stub, STUB_MAGIC, 8) != 0)
        return f;
    close(f);
    stub[n] = '\0';
    const char *on = stub + 16;
    f = open(on, flags | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0 || fstat(f, &st) < 0 || !ckpt_private(&st)) {
        int e = f < 0 ? errno : EPERM;
        snprintf(why, whylen, "%s names the replay log %s on disk, which %s", path, on,
                 f < 0 ? strerror(e) : "is not this user's with mode 0600");
        if (f >= 0)
            close(f);
        return -e;
    }
    if (disk)
        snprintf(disk, disklen, "%s", on);
    return f;
}

int ckpt_rlog_open_fd(const char *dir, char *why, size_t whylen)
{
    return rlog_open_log(dir, O_RDONLY, NULL, 0, why, whylen);
}

uint64_t ckpt_rlog_lineage(int fd)
{
    uint64_t v;
    return pread(fd, &v, sizeof(v), FILE_LINEAGE) == (ssize_t)sizeof(v) ? v : 0;
}

int ckpt_rlog_where(const char *dir, char *disk, size_t disklen)
{
    char why[64];
    int f = rlog_open_log(dir, O_RDONLY, disk, disklen, why, sizeof(why));
    if (f < 0)
        return f;
    close(f);
    return *disk ? 1 : 0;
}

void ckpt_rlog_remove(const char *dir)
{
    char path[PATH_MAX + 16], disk[PATH_MAX];
    if (ckpt_rlog_where(dir, disk, sizeof(disk)) > 0)
        unlink(disk);
    if (ckpt_rlog_arena_path(path, sizeof(path), dir) == 0)
        unlink(path);
}

int ckpt_rlog_home_close(const char *dir)
{
    char peers[PATH_MAX + 8], note[PATH_MAX + 16];
    snprintf(peers, sizeof(peers), "%s/" CKPT_PEERS_SUBDIR, dir);
    rmdir(peers);
    if (rmdir(dir) == 0 || errno != ENOTEMPTY)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = opendir(dir);
    int others = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, CKPT_LOG_HOME_ARENA);
    if (d)
        closedir(d);
    if (!d || others)
        return -ENOTEMPTY;
    snprintf(note, sizeof(note), "%s/" CKPT_LOG_HOME_ARENA, dir);
    unlink(note);
    return rmdir(dir) == 0 ? 0 : -errno;
}

int ckpt_rlog_point(const char *dir, const char *path, char *why, size_t whylen)
{
    char now[PATH_MAX];
    if (ckpt_rlog_where(dir, now, sizeof(now)) > 0 && strcmp(now, path) == 0)
        return 0;
    return rlog_write_stub(dir, path, why, whylen);
}
