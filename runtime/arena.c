/*
 * The files behind the arena of arena.h.  It checks every directory it
 * creates or finds (owner, mode, not a symlink) because /dev/shm is shared
 * by every user of the machine; it grows a slot with fallocate so a full
 * /dev/shm is an error here, not a SIGBUS in the copy later.  It must never
 * touch CUDA: pinning the mapping is the caller's business.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"

int ckpt_arena_path(char *out, size_t outlen, const char *root, const char *job, int rank)
{
    int n = snprintf(out, outlen, "%s/%u-%s/rank%d", root, (unsigned)geteuid(), job, rank);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* Creates dir with mode (or accepts it as it is) and checks that it is a
 * real directory this user owns.  private: no access for group or others. */
static int check_dir(const char *dir, mode_t mode, int private_dir, char *why, size_t whylen)
{
    struct stat st;

    if (mkdir(dir, mode) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(why, whylen, "cannot create %s: %s", dir, strerror(e));
        return -e;
    }
    if (lstat(dir, &st) < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot stat %s: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "%s is not a directory (a symlink or a file is never followed)", dir);
        return -ENOTDIR;
    }
    if (private_dir && (st.st_uid != geteuid() || (st.st_mode & 077))) {
        snprintf(why, whylen, "%s belongs to uid %u with mode %03o; it must be this user's (uid %u) and 0700",
                 dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
        return -EPERM;
    }
    return 0;
}

int ckpt_arena_open(struct ckpt_arena *a, const char *root, const char *job, int rank, int fresh, char *why,
                    size_t whylen)
{
    char path[PATH_MAX + 16];
    int rc;

    memset(a, 0, sizeof(*a));
    a->fd[0] = a->fd[1] = -1;
    if (!job[0] || strchr(job, '/') || strcmp(job, ".") == 0 || strcmp(job, "..") == 0) {
        snprintf(why, whylen, "job name '%s' cannot name a directory", job);
        return -EINVAL;
    }
    /* The root is shared like /tmp: sticky and open; what is under it is not. */
    if ((rc = check_dir(root, 01777, 0, why, whylen)) < 0)
        return rc;
    if (ckpt_arena_path(a->dir, sizeof(a->dir), root, job, rank) < 0) {
        snprintf(why, whylen, "arena path under %s is too long", root);
        return -ENAMETOOLONG;
    }
    snprintf(path, sizeof(path), "%s", a->dir);
    *strrchr(path, '/') = '\0';
    if ((rc = check_dir(path, 0700, 1, why, whylen)) < 0 || (rc = check_dir(a->dir, 0700, 1, why, whylen)) < 0)
        return rc;

    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof(path), "%s/slot%d", a->dir, s);
        a->fd[s] = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0600);
        struct stat st;
        if (a->fd[s] < 0 || fstat(a->fd[s], &st) < 0) {
            rc = -errno;
            snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
            ckpt_arena_close(a);
            return rc;
        }
        if (st.st_uid != geteuid() || (st.st_mode & 077)) {
            snprintf(why, whylen, "%s is not this user's private file", path);
            ckpt_arena_close(a);
            return -EPERM;
        }
    }
    return 0;
}

int ckpt_arena_reserve(struct ckpt_arena *a, int slot, size_t bytes, int *moved)
{
    *moved = 0;
    if (bytes <= a->len[slot])
        return 0;
    size_t len = bytes + bytes / 8; /* room to grow without a remap per new allocation */
    int e = posix_fallocate(a->fd[slot], 0, (off_t)len);
    if (e)
        return -e;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, a->fd[slot], 0);
    if (p == MAP_FAILED)
        return -errno;
    if (a->base[slot])
        munmap(a->base[slot], a->len[slot]);
    a->base[slot] = p;
    a->len[slot] = len;
    *moved = 1;
    return 0;
}

void ckpt_arena_close(struct ckpt_arena *a)
{
    for (int s = 0; s < 2; s++) {
        if (a->base[s])
            munmap(a->base[s], a->len[s]);
        if (a->fd[s] >= 0)
            close(a->fd[s]);
        a->base[s] = NULL;
        a->len[s] = 0;
        a->fd[s] = -1;
    }
}
