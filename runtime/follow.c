/*
 * The follow file of follow.h: created 0600 beside the rank's slots,
 * never through a symlink, and refused when it is not one of ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "follow.h"

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
    if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077) ||
        (create && ftruncate(fd, sizeof(struct ckpt_follow)) < 0) ||
        (!create && st.st_size != sizeof(struct ckpt_follow))) {
        int e = errno ? errno : EPERM;
        close(fd);
        errno = e;
        return NULL;
    }
    struct ckpt_follow *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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

void ckpt_follow_unmap(struct ckpt_follow *f)
{
    if (f)
        munmap(f, sizeof(*f));
}
