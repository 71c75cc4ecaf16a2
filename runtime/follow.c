/*
 * The follow file of follow.h: created 0600 beside the rank's slots,
 * never through a symlink, and refused when it is not one of ours.  Its
 * wake word is a shared futex: the agent and the standby are two
 * processes mapping one file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "aside.h"
#include "follow.h"
#include "util.h"

struct ckpt_follow *ckpt_follow_map(const char *rank_dir, int create)
{
    char path[PATH_MAX + 16];
    struct stat st;

    if (snprintf(path, sizeof(path), "%s/%s", rank_dir, CKPT_FOLLOW_FILE) >= (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
    if (fd < 0)
        return NULL;
    errno = 0;
    if (fstat(fd, &st) < 0 || !ckpt_private(&st) ||
        (create && ftruncate(fd, sizeof(struct ckpt_follow)) < 0) ||
        (!create && st.st_size != sizeof(struct ckpt_follow))) {
        int e = errno ? errno : EPERM;
        close(fd);
        errno = e;
        return NULL;
    }
    struct ckpt_follow *f = ckpt_mmap_aside(sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (f == MAP_FAILED)
        return NULL;
    if (create) {
        ckpt_follow_set(&f->magic, CKPT_FOLLOW_MAGIC);
    } else if (ckpt_follow_get(&f->magic) != CKPT_FOLLOW_MAGIC) {
        munmap(f, sizeof(*f));
        errno = EBADMSG;
        return NULL;
    }
    return f;
}

int ckpt_follow_read(const char *rank_dir, struct ckpt_follow *out)
{
    char path[PATH_MAX + 16];
    struct stat st;

    if (snprintf(path, sizeof(path), "%s/%s", rank_dir, CKPT_FOLLOW_FILE) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (fstat(fd, &st) < 0)
        rc = -errno;
    else if (!ckpt_private(&st) || st.st_size != sizeof(*out))
        rc = -EPERM;
    else if (pread(fd, out, sizeof(*out), 0) != (ssize_t)sizeof(*out))
        rc = -EIO;
    else if (out->magic != CKPT_FOLLOW_MAGIC)
        rc = -EBADMSG;
    close(fd);
    return rc;
}

void ckpt_follow_unmap(struct ckpt_follow *f)
{
    if (f)
        munmap(f, sizeof(*f));
}

void ckpt_follow_order(struct ckpt_follow *f, uint64_t *field, uint64_t v)
{
    ckpt_follow_set(field, v);
    __atomic_add_fetch(&f->wake, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &f->wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}

uint32_t ckpt_follow_seen(const struct ckpt_follow *f)
{
    return __atomic_load_n(&f->wake, __ATOMIC_ACQUIRE);
}

void ckpt_follow_wait(struct ckpt_follow *f, uint32_t seen, int timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    /* Returns at once when wake moved since seen (EAGAIN); EINTR and the
     * timeout are only earlier looks at the orders. */
    syscall(SYS_futex, &f->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
}
