/*
 * Small helpers that libckpt and its tools share, each written once: the
 * monotonic clock, a file written whole or not at all, a private file or
 * directory, a path that fits or is refused, a number in a file's name,
 * HOST:PORT.
 */
#ifndef CKPT_UTIL_H
#define CKPT_UTIL_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC, in seconds, nanoseconds and milliseconds. */
static inline double ckpt_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline uint64_t ckpt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline long long ckpt_now_ms(void)
{
    return (long long)(ckpt_now_ns() / 1000000);
}

/* Whether what @st describes is this user's and nobody else's: owned by
 * the effective user, no access for group or others. */
static inline bool ckpt_private(const struct stat *st)
{
    return st->st_uid == geteuid() && !(st->st_mode & 077);
}

/*
 * Writes @len bytes of @data to @path (mode 0600) through
 * "@path" CKPT_WHOLE_TMP renamed over it, so that a reader finds the old
 * file or the new one, never half of one; neither is followed if it is a
 * symbolic link.  Returns 0 or -errno; on failure the temporary file is
 * gone.  The temporary's name is fixed, so that whoever removes a
 * directory's files can name one left by a writer killed between the two
 * steps: two writers of one path at the same time must not use this.
 */
#define CKPT_WHOLE_TMP ".tmp"
int ckpt_write_whole(const char *path, const void *data, size_t len);

/*
 * Formats a path into @out (@n bytes) as snprintf does.  Returns 0, or
 * -ENAMETOOLONG when it does not fit: @out then holds a truncated path,
 * never to be used.
 */
int ckpt_pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Whether @name is @prefix, then a number from 0 to INT_MAX written as
 * "%d" writes it (no sign, space or leading zero), then @suffix and
 * nothing more; *@number is then that number.  The one parser of the
 * names a number tells apart (a rank's directory, its replay log on disk):
 * a name it accepts is the one the writer would make of the number.
 */
bool ckpt_name_number(const char *name, const char *prefix, const char *suffix, int *number);

/*
 * Splits "HOST:PORT" or "[V6]:PORT" into @host (brackets dropped) and
 * *@port (pointing into @hostport).  Returns 0, or -EINVAL when there is no
 * port, no host, or the host does not fit @hostlen.
 */
int ckpt_hostport_split(const char *hostport, char *host, size_t hostlen, const char **port);

#endif
