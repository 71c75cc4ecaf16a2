/* The shared helpers of util.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

int ckpt_write_whole(const char *path, const void *data, size_t len)
{
    char tmp[PATH_MAX + 8];
    if (ckpt_pathf(tmp, sizeof(tmp), "%s" CKPT_WHOLE_TMP, path) < 0)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600), rc = 0;
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, data, len);
    if (w != (ssize_t)len)
        rc = w < 0 ? -errno : -EIO;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}

int ckpt_pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

bool ckpt_name_number(const char *name, const char *prefix, const char *suffix, int *number)
{
    size_t k = strlen(prefix);
    if (strncmp(name, prefix, k) != 0)
        return false;
    const char *p = name + k;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return false; /* no number, or a leading zero */
    long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((v = v * 10 + (*p - '0')) > INT_MAX)
            return false;
    if (strcmp(p, suffix) != 0)
        return false;
    *number = (int)v;
    return true;
}

int ckpt_hostport_split(const char *hostport, char *host, size_t hostlen, const char **port)
{
    const char *colon = strrchr(hostport, ':'), *h = hostport;
    if (!colon || !colon[1])
        return -EINVAL;
    size_t n = (size_t)(colon - hostport);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']')
        h++, n -= 2;
    if (!n || n >= hostlen)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = colon + 1;
    return 0;
}
