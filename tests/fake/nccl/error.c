/*
 * Errors of the double's NCCL: the one place where an internal -errno
 * becomes an ncclResult_t, the text behind ncclGetLastError, and the
 * NCCL_DEBUG messages (WARN and INFO, on stderr, as NCCL prints them).
 * Logging here must never change errno nor fail the caller.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nccl_fake.h"

enum { LOG_NONE, LOG_WARN, LOG_INFO };

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int level;
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static char last[512];

static void read_level(void)
{
    const char *v = getenv("NCCL_DEBUG");

    if (!v)
        level = LOG_NONE;
    else if (!strcasecmp(v, "WARN"))
        level = LOG_WARN;
    else if (!strcasecmp(v, "INFO") || !strcasecmp(v, "TRACE"))
        level = LOG_INFO;
}

ncclResult_t nf_result(int err)
{
    switch (err) {
    case 0:
        return ncclSuccess;
    case -EINPROGRESS:
        return ncclInProgress;
    case -EINVAL:
        return ncclInvalidArgument;
    case -EPERM:
    case -EBUSY:
        return ncclInvalidUsage;
    case -EPIPE:
    case -ECONNABORTED:
        return ncclRemoteError;
    case -EIO:
        return ncclUnhandledCudaError;
    default:
        return ncclSystemError;
    }
}

static void vlog(const char *tag, const char *fmt, va_list ap)
{
    char msg[448];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "fakenccl:%d NCCL %s %s\n", (int)getpid(), tag, msg);
}

int nf_fail(int err, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    pthread_once(&level_once, read_level);
    pthread_mutex_lock(&last_lock);
    va_start(ap, fmt);
    vsnprintf(last, sizeof(last), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&last_lock);
    if (level >= LOG_WARN) {
        va_start(ap, fmt);
        vlog("WARN", fmt, ap);
        va_end(ap);
    }
    errno = saved;
    return err;
}

void nf_info(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    pthread_once(&level_once, read_level);
    if (level >= LOG_INFO) {
        va_start(ap, fmt);
        vlog("INFO", fmt, ap);
        va_end(ap);
    }
    errno = saved;
}

const char *nf_last_error(void)
{
    static __thread char copy[sizeof(last)];

    pthread_mutex_lock(&last_lock);
    memcpy(copy, last, sizeof(copy));
    pthread_mutex_unlock(&last_lock);
    return copy;
}
