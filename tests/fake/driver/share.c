/*
 * One GPU shared by several processes (FAKEGPU_SHARED_GPU=DIR): a real
 * device's memory is one pool whatever process allocates it, so a second
 * process on the same GPU (a standby beside its rank) finds what the first
 * holds missing from cuMemGetInfo and gets CUDA_ERROR_OUT_OF_MEMORY past
 * it.  Each process publishes the device memory it holds in DIR/<pid>
 * (8 bytes, rewritten on each change); what the others hold is the sum of
 * the files of processes still alive (a dead process's memory is freed,
 * as the driver frees it, and its file removed).  The file's second
 * 8 bytes say how much host memory the process holds pinned.  A check and the update
 * that follows it are one step under flock(DIR).  Unset: the device is
 * the process's own, as when every rank has a GPU.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "driver.h"

static int dir_fd = -1, own_fd = -1;

void fg_share_init(void)
{
    const char *dir = getenv("FAKEGPU_SHARED_GPU");
    char name[32];

    if (!dir || !*dir)
        return;
    dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(name, sizeof(name), "%d", (int)getpid());
    if (dir_fd >= 0)
        own_fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (dir_fd < 0 || own_fd < 0) {
        fprintf(stderr, "fakegpu: FAKEGPU_SHARED_GPU=%s: %s; the device is this process's own\n", dir,
                strerror(errno));
        if (dir_fd >= 0)
            close(dir_fd);
        dir_fd = -1;
    }
}

/* The device memory other live processes hold.  Lock held, flock held. */
static size_t others(void)
{
    int fd = dup(dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    size_t sum = 0;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    rewinddir(d);
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        uint64_t held = 0;

        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
            unlinkat(dir_fd, e->d_name, 0);
            continue;
        }
        int f = openat(dir_fd, e->d_name, O_RDONLY | O_CLOEXEC);
        if (f >= 0 && pread(f, &held, sizeof(held), 0) == (ssize_t)sizeof(held))
            sum += held;
        if (f >= 0)
            close(f);
    }
    closedir(d);
    return sum;
}

/* What this process holds, for the others: device bytes, then the host
 * bytes it holds pinned (not part of the device's total; for tests to
 * read).  A failed write leaves them an older figure: the double's loss,
 * never the program's. */
static void publish(void)
{
    uint64_t v[2] = {drv.used_mem, drv.pinned_host};
    if (pwrite(own_fd, v, sizeof(v), 0) != (ssize_t)sizeof(v))
        fprintf(stderr, "fakegpu: cannot publish the device memory this process holds: %s\n", strerror(errno));
}

int fg_mem_reserve(size_t bytes)
{
    int rc = 0;

    if (dir_fd >= 0)
        flock(dir_fd, LOCK_EX);
    size_t used = drv.used_mem + (dir_fd >= 0 ? others() : 0);
    if (used > drv.total_mem || bytes > drv.total_mem - used)
        rc = -ENOMEM;
    else
        drv.used_mem += bytes;
    if (dir_fd >= 0) {
        publish();
        flock(dir_fd, LOCK_UN);
    }
    return rc;
}

void fg_mem_unreserve(size_t bytes)
{
    drv.used_mem -= bytes;
    if (dir_fd >= 0) {
        flock(dir_fd, LOCK_EX);
        publish();
        flock(dir_fd, LOCK_UN);
    }
}

size_t fg_mem_free(void)
{
    if (dir_fd >= 0)
        flock(dir_fd, LOCK_EX);
    size_t used = drv.used_mem + (dir_fd >= 0 ? others() : 0);
    if (dir_fd >= 0)
        flock(dir_fd, LOCK_UN);
    return used < drv.total_mem ? drv.total_mem - used : 0;
}

void fg_share_pinned(ptrdiff_t delta)
{
    drv.pinned_host += (size_t)delta;
    if (dir_fd >= 0) {
        flock(dir_fd, LOCK_EX);
        publish();
        flock(dir_fd, LOCK_UN);
    }
}
