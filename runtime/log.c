/*
 * Formatting and writing of log lines for log.h.  It must never allocate or
 * take a lock: it is called from hooks on any thread, from signal-adjacent
 * paths and after fork.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

int ckpt_log_level = CKPT_WARN;
static char prefix[64] = "libckpt";
static int log_fd = STDERR_FILENO;

void ckpt_log_init(const char *p, int level)
{
    snprintf(prefix, sizeof(prefix), "%s", p);
    ckpt_log_level = level;
}

void ckpt_log_to(int fd)
{
    __atomic_store_n(&log_fd, fd, __ATOMIC_RELEASE);
}

int ckpt_log_fd(void)
{
    return __atomic_load_n(&log_fd, __ATOMIC_ACQUIRE);
}

void ckpt_log_write(int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s: %s", prefix, level == CKPT_INFO ? "" : names[level]);
    if (level != CKPT_INFO && n < (int)sizeof(line))
        n += snprintf(line + n, sizeof(line) - n, ": ");

    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);

    if (n >= (int)sizeof(line) - 1)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t rc = write(__atomic_load_n(&log_fd, __ATOMIC_ACQUIRE), line, n);
    (void)rc;
}
