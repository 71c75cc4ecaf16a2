/*
 * The files behind the arena of arena.h.  It checks every directory it
 * creates or finds (owner, mode, not a symlink) because /dev/shm is shared
 * by every user of the machine, and reaches each one through the already
 * checked one above it (openat), so nothing swapped in meanwhile is used; it grows a slot with fallocate so a full
 * /dev/shm is an error here, not a SIGBUS in the copy later.  It must never
 * touch CUDA: pinning the mapping is the caller's business.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "aside.h"
#include "arena.h"
#include "format.h"
#include "image.h"
#include "util.h"

#define JOB_DIR "%u-%s" /* the effective uid, the job */
#define RANK_DIR "rank"

static const char *const slot_names[2] = {"slot0", "slot1"};

/* <uid>-<job>, the name of this user's directory of @job in a root. */
static int job_dir_name(char *out, size_t n, const char *job)
{
    return ckpt_pathf(out, n, JOB_DIR, (unsigned)geteuid(), job);
}

_Static_assert(CKPT_JOB_MAX == 64, "CKPT_JOB_NAME_RULE says 63 characters");

bool ckpt_job_name_ok(const char *job)
{
    size_t n = strlen(job);
    return n > 0 && n < CKPT_JOB_MAX && job[0] != '.' &&
           strspn(job, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

int ckpt_peers_root(char *out, size_t n, const char *arena_root)
{
    return ckpt_pathf(out, n, "%s/" CKPT_PEERS_SUBDIR, arena_root);
}

int ckpt_job_dir(char *out, size_t n, const char *root, const char *job)
{
    return ckpt_pathf(out, n, "%s/" JOB_DIR, root, (unsigned)geteuid(), job);
}

bool ckpt_job_dir_name(const char *name, const char **job)
{
    /* Every name of this user's starts with the one made for the job "":
     * the uid as the writer spells it, then the dash. */
    char mine[32];
    job_dir_name(mine, sizeof(mine), "");
    size_t k = strlen(mine);
    if (strncmp(name, mine, k) != 0 || !name[k])
        return false;
    *job = name + k;
    return true;
}

int ckpt_arena_path(char *out, size_t outlen, const char *root, const char *job, int rank)
{
    char job_dir[PATH_MAX];
    int rc = ckpt_job_dir(job_dir, sizeof(job_dir), root, job);
    return rc < 0 ? rc : ckpt_rank_dir(out, outlen, job_dir, rank);
}

int ckpt_rank_dir(char *out, size_t n, const char *job_dir, int rank)
{
    return ckpt_pathf(out, n, "%s/" RANK_DIR "%d", job_dir, rank);
}

int ckpt_rank_dir_job(char *out, size_t n, const char *rank_dir)
{
    const char *slash = strrchr(rank_dir, '/');
    int rank;
    if (!slash || !ckpt_rank_dir_name(slash + 1, &rank))
        return -EINVAL;
    return ckpt_pathf(out, n, "%.*s", (int)(slash - rank_dir), rank_dir);
}

bool ckpt_rank_dir_name(const char *name, int *rank)
{
    return ckpt_name_number(name, RANK_DIR, "", rank);
}

const char *ckpt_slot_name(int slot)
{
    return slot_names[slot];
}

int ckpt_slot_path(char *out, size_t n, const char *rank_dir, int slot)
{
    return ckpt_pathf(out, n, "%s/%s", rank_dir, ckpt_slot_name(slot));
}

int ckpt_shared_root_ok(const char *dir, const struct stat *st, char *why, size_t whylen)
{
    if (st->st_uid != geteuid() && st->st_uid != 0) {
        snprintf(why, whylen, "%s belongs to uid %u: a shared directory must be this user's (uid %u) or root's, "
                 "else its owner could swap what is in it", dir, (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if ((st->st_mode & 022) && !(st->st_mode & S_ISVTX)) {
        snprintf(why, whylen, "%s is writable by others (mode %03o) and not sticky (1777, as /tmp)", dir,
                 (unsigned)(st->st_mode & 0777));
        return -EPERM;
    }
    return 0;
}

/*
 * Opens @name under the directory @at (a checked directory's fd, or
 * AT_FDCWD for the root) as a directory, creating it with @mode first,
 * never following a symlink, and checks what it opened: a private
 * directory must be this user's and 0700, the shared root as
 * ckpt_shared_root_ok says.  A root this call creates is made 01777 (the
 * umask would leave other users unable to make their own directory in
 * it).  Returns the directory's fd or -errno with why naming @shown.
 */
static int open_dir(int at, const char *name, const char *shown, mode_t mode, bool private_dir, char *why,
                    size_t whylen)
{
    struct stat st;
    bool made = mkdirat(at, name, mode) == 0;

    if (!made && errno != EEXIST) {
        int e = errno;
        snprintf(why, whylen, "cannot create %s: %s", shown, strerror(e));
        return -e;
    }
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP || e == ENOTDIR)
            snprintf(why, whylen, "%s is not a directory (a symlink or a file is never followed)", shown);
        else
            snprintf(why, whylen, "cannot open %s: %s", shown, strerror(e));
        return -e;
    }
    if (made && !private_dir)
        fchmod(fd, mode);
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc < 0)
        snprintf(why, whylen, "cannot stat %s: %s", shown, strerror(-rc));
    else if (private_dir && !ckpt_private(&st)) {
        snprintf(why, whylen, "%s belongs to uid %u with mode %03o; it must be this user's (uid %u) and 0700",
                 shown, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
        rc = -EPERM;
    } else if (!private_dir) {
        rc = ckpt_shared_root_ok(shown, &st, why, whylen);
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/*
 * Opens this user's directory of @job under @root as open_dir does, the
 * root first, and its path into @shown.  Returns the directory's fd, or
 * -errno with why (-ENAMETOOLONG, before anything is made, when its name
 * or path does not fit).
 */
static int open_job_dir(const char *root, const char *job, char *shown, size_t shownlen, char *why, size_t whylen)
{
    char name[NAME_MAX + 1];
    if (job_dir_name(name, sizeof(name), job) < 0 || ckpt_job_dir(shown, shownlen, root, job) < 0) {
        snprintf(why, whylen, "arena path under %s is too long", root);
        return -ENAMETOOLONG;
    }
    /* The root is shared like /tmp: sticky and open; what is under it is
     * not, and is reached only through the directories checked above it. */
    int rootfd = open_dir(AT_FDCWD, root, root, 01777, false, why, whylen);
    if (rootfd < 0)
        return rootfd;
    int jobfd = open_dir(rootfd, name, shown, 0700, true, why, whylen);
    close(rootfd);
    return jobfd;
}

/*
 * Makes this process the one owner of the rank directory @dirfd: a POSIX
 * record lock on its owner file.  Such a lock belongs to the process and
 * not to the file descriptor's copies: a child forked or exec'd by the
 * rank does not hold it, and it goes with the process however that ends.
 * Returns the locked file's fd, or -EBUSY with the holder in a->holder.
 */
static int claim(struct ckpt_arena *a, int dirfd, char *why, size_t whylen)
{
    int fd = openat(dirfd, CKPT_ARENA_OWNER, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot open %s/%s: %s", a->dir, CKPT_ARENA_OWNER, strerror(e));
        return -e;
    }
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &l) == 0)
        return fd;
    int e = errno;
    if (e == EACCES || e == EAGAIN) {
        struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        a->holder = fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK ? q.l_pid : 0;
        snprintf(why, whylen, "%s is in use by process %d", a->dir, (int)a->holder);
        e = EBUSY;
    } else {
        snprintf(why, whylen, "cannot lock %s/%s: %s", a->dir, CKPT_ARENA_OWNER, strerror(e));
    }
    close(fd);
    return -e;
}

int ckpt_arena_open(struct ckpt_arena *a, const char *root, const char *job, int rank, unsigned flags, char *why,
                    size_t whylen)
{
    char shown[PATH_MAX];
    int rc, jobfd, dirfd;

    memset(a, 0, sizeof(*a));
    a->fd[0] = a->fd[1] = a->owner = -1;
    if (!ckpt_job_name_ok(job)) {
        snprintf(why, whylen, "'%.80s' is not a job's name (" CKPT_JOB_NAME_RULE ")", job);
        return -EINVAL;
    }
    if (ckpt_arena_path(a->dir, sizeof(a->dir), root, job, rank) < 0) {
        snprintf(why, whylen, "arena path under %s is too long", root);
        return -ENAMETOOLONG;
    }
    if ((jobfd = open_job_dir(root, job, shown, sizeof(shown), why, whylen)) < 0)
        return jobfd;
    dirfd = open_dir(jobfd, strrchr(a->dir, '/') + 1 /* rank<N> */, a->dir, 0700, true, why, whylen);
    close(jobfd);
    if (dirfd < 0)
        return dirfd;

    rc = 0;
    if ((flags & CKPT_ARENA_OWN) && (a->owner = claim(a, dirfd, why, whylen)) < 0) {
        rc = a->owner;
        a->owner = -1;
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        struct stat st;
        const char *slot = ckpt_slot_name(s);
        a->fd[s] = openat(dirfd, slot, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (flags & CKPT_ARENA_FRESH ? O_TRUNC : 0), 0600);
        if (a->fd[s] < 0 || fstat(a->fd[s], &st) < 0) {
            rc = -errno;
            snprintf(why, whylen, "cannot open %s/%s: %s", a->dir, slot, strerror(errno));
        } else if (!S_ISREG(st.st_mode) || !ckpt_private(&st)) {
            snprintf(why, whylen, "%s/%s is not this user's private file", a->dir, slot);
            rc = -EPERM;
        }
    }
    close(dirfd);
    if (rc < 0)
        ckpt_arena_close(a);
    return rc;
}

int ckpt_slot_retire(int fd, const char *job, int rank, uint64_t after, uint64_t *iteration)
{
    struct ckpt_header h;
    struct stat st;
    char why[256];

    if (fstat(fd, &st) < 0)
        return -errno;
    if (st.st_size < (off_t)sizeof(h))
        return 0; /* never written */
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return -errno;
    /* Only a header that verifies: a damaged one stays for the reader that names it. */
    int rc = ckpt_image_verify_header(base, (size_t)st.st_size, &h, why, sizeof(why)) == 0 &&
             strncmp(h.job, job, sizeof(h.job)) == 0 && h.rank == (uint32_t)rank && h.iteration > after;
    if (rc) {
        *iteration = h.iteration;
        ckpt_image_invalidate(base);
    }
    munmap(base, (size_t)st.st_size);
    return rc;
}

int ckpt_arena_usable(const char *root, const char *job, char *why, size_t whylen)
{
    char shown[PATH_MAX];
    int jobfd = open_job_dir(root, job, shown, sizeof(shown), why, whylen);
    if (jobfd < 0)
        return jobfd;
    /* A file that takes a page, as a slot does: root may create files in
     * a directory whose mode says no, not on a read-only mount. */
    int rc = 0, fd = openat(jobfd, ".probe", O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || (rc = posix_fallocate(fd, 0, 4096)) != 0) {
        rc = fd < 0 ? errno : rc;
        snprintf(why, whylen, "cannot write a file in %s: %s", shown, strerror(rc));
        rc = -rc;
    }
    if (fd >= 0)
        close(fd);
    unlinkat(jobfd, ".probe", 0);
    close(jobfd);
    return rc;
}

bool ckpt_arena_removed(const struct ckpt_arena *a)
{
    struct stat st;
    for (int i = 0; i < 2; i++)
        if (a->fd[i] >= 0 && fstat(a->fd[i], &st) == 0 && st.st_nlink == 0)
            return true;
    return false;
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
    void *p = ckpt_mmap_aside(len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, a->fd[slot], 0);
    if (p == MAP_FAILED)
        return -errno;
    if (a->base[slot])
        munmap(a->base[slot], a->len[slot]);
    a->base[slot] = p;
    a->len[slot] = len;
    *moved = 1;
    return 0;
}

int ckpt_arena_room(const char *dir, uint64_t *free, uint64_t *total)
{
    char path[PATH_MAX];
    struct statvfs v;
    snprintf(path, sizeof(path), "%s", dir);
    for (;;) {
        if (statvfs(path, &v) == 0) {
            *free = (uint64_t)v.f_bavail * v.f_frsize;
            *total = (uint64_t)v.f_blocks * v.f_frsize;
            return 0;
        }
        char *slash = strrchr(path, '/');
        if (errno != ENOENT || !slash)
            return -errno;
        if (slash == path) {
            path[1] = '\0';
        } else {
            *slash = '\0';
        }
    }
}

uint64_t ckpt_arena_held(const char *job_dir)
{
    uint64_t held = 0;
    DIR *d = opendir(job_dir);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));) {
        char dir[PATH_MAX], path[PATH_MAX + 16];
        int rank;
        if (!ckpt_rank_dir_name(e->d_name, &rank) || ckpt_rank_dir(dir, sizeof(dir), job_dir, rank) < 0)
            continue;
        for (int s = 0; s < 2; s++) {
            struct stat st;
            if (ckpt_slot_path(path, sizeof(path), dir, s) == 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
                held += (uint64_t)st.st_blocks * 512;
        }
    }
    closedir(d);
    return held;
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
    if (a->owner >= 0)
        close(a->owner);
    a->owner = -1;
}
