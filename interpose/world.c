/*
 * What a replaying program does to files.  Replay re-runs the program's
 * host code, so it would append its log lines again and write its own
 * checkpoints again, older over newer.  While recording, each boundary logs
 * the length of every regular file the program appends to or holds open
 * for writing.  While a rank replays, a file it opens to write whole
 * (truncating, or not appending) is opened in a scratch directory of the
 * rank's arena instead, and read back from there; renaming or removing a
 * file it did not write in replay does nothing; an exclusive create gets
 * the result the recorded run's got.  Appends go where they go
 * (a log is often opened before CUDA, when libckpt cannot yet know this
 * process is the rank): when the restore goes live, every file the failed
 * run appended to is cut back to its length at the snapshot's boundary,
 * which takes the failed run's later lines and replay's with it, and every
 * file the replaying program holds open for writing is the real one again
 * at that length: the resumed run writes on where the snapshot's run
 * stood.  Only the program's own calls are redirected: libckpt's, the CUDA
 * driver's and NCCL's go straight through.  What the program prints to
 * stdout and stderr from its first CUDA call until the restore goes live
 * goes to a file in the arena instead (kept when the restore is refused:
 * it may say why); libckpt's own lines still reach the real stderr.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "arena.h"
#include "config.h"
#include "interpose.h"
#include "log.h"
#include "replay.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_FILES 256

static char scratch[PATH_MAX + 16];
/* Replaying: where the program's stdout and stderr go, and where they
 * were (-1: not redirected). */
static char output[PATH_MAX + 16];
static int saved_fd[2] = {-1, -1};

/* Files the program holds open for writing (recording), or opened for
 * writing while replaying (then scratch names the copy). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct file {
    int fd; /* -1: free */
    int flags;
    dev_t dev;
    ino_t ino;
    char path[PATH_MAX];
} files[MAX_FILES];
static int nfiles;
/* Replaying: the lengths the recorded run's files had at the last boundary. */
static struct length {
    uint64_t size;
    int flags;
    char path[PATH_MAX];
} lengths[MAX_FILES];
static int nlengths;
static int redirected;
/* A standby: replaying from its first line on, and until it goes live
 * nothing it writes may reach the live rank's files, appends included. */
static bool following;

/* Set at load: this process records (no CKPT_RESTORE).  A program opens
 * its log before CUDA wakes libckpt, so tracking cannot wait for it. */
static bool records;

void ckpt_world_init(uint64_t restore, bool follow)
{
    const char *rank = getenv("RANK");
    char dir[PATH_MAX];
    records = restore == 0 && !follow;
    if ((restore || follow) && ckpt_arena_path(dir, sizeof(dir), ckpt_cfg_str(CFG_ARENA_DIR), ckpt_cfg_str(CFG_JOB),
                                   rank ? atoi(rank) : 0) == 0 &&
        (snprintf(scratch, sizeof(scratch), "%s/" CKPT_REPLAY_FILES, dir) >= (int)sizeof(scratch) ||
         snprintf(output, sizeof(output), "%s/" CKPT_REPLAY_OUTPUT, dir) >= (int)sizeof(output)))
        scratch[0] = output[0] = '\0';
    /* A standby stays out of the live rank's way from its first line on. */
    following = follow && scratch[0];
    if (following)
        ckpt_world_quiet();
}

void ckpt_world_quiet(void)
{
    if (saved_fd[0] >= 0 || saved_fd[1] >= 0)
        return; /* quiet since the start (a standby) */
    ckpt_self_depth++;
    int fd = output[0] ? open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    ckpt_self_depth--;
    if (fd < 0) {
        ckpt_log(CKPT_WARN, "what the program prints while it replays is printed again: cannot open %s: %s",
                 output, strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; i++) {
        saved_fd[i] = fcntl(STDOUT_FILENO + i, F_DUPFD_CLOEXEC, 3);
        if (saved_fd[i] >= 0 && dup2(fd, STDOUT_FILENO + i) < 0) {
            close(saved_fd[i]);
            saved_fd[i] = -1;
        }
    }
    close(fd);
    if (saved_fd[1] >= 0)
        ckpt_log_to(saved_fd[1]);
    ckpt_log(CKPT_INFO, "what the program prints while it replays goes to %s", output);
}

const char *ckpt_world_output(void)
{
    return saved_fd[0] >= 0 || saved_fd[1] >= 0 ? output : NULL;
}

/* The program prints to its own stdout and stderr again; what it printed
 * in replay, still in its stdio buffers, is not among it. */
static void loud(void)
{
    if (saved_fd[0] < 0 && saved_fd[1] < 0)
        return;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; i++) {
        if (saved_fd[i] >= 0 && dup2(saved_fd[i], STDOUT_FILENO + i) >= 0)
            close(saved_fd[i]);
    }
    ckpt_log_to(STDERR_FILENO);
    saved_fd[0] = saved_fd[1] = -1;
    ckpt_self_depth++;
    unlink(output);
    ckpt_self_depth--;
}

/* This process is the rank, replaying (woken by CUDA, with CKPT_RESTORE). */
static bool replaying(void)
{
    return __atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE) ? ckpt_active && scratch[0]
                                                              : __atomic_load_n(&following, __ATOMIC_ACQUIRE);
}

/* The program's own call. */
static bool mine(const void *caller)
{
    return !ckpt_self_depth && !ckpt_nccl_depth && !ckpt_thread_internal && !ckpt_caller_is_library(caller);
}

/* An exclusive create: the program learns whether the file was there (a
 * lock, a marker that something happened once). */
static bool excl(int flags)
{
    return (flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL);
}

/* Recording, and the call may keep a file open for writing, or create one. */
static bool tracking(int flags)
{
    return (records || (!ckpt_is_replaying() && ckpt_active)) && ((flags & O_ACCMODE) != O_RDONLY || excl(flags));
}

/* An exclusive create's result is in the log (ok: it created the file;
 * errno says why not), and replay gives the recorded one: the scratch
 * copy knows nothing of what the recorded run, or a standby's earlier
 * life, created.  excl_served: -1 with errno when the recorded create
 * failed, 1 when it created the file (the caller opens its copy without
 * O_EXCL, truncated), 0 when the log has no result for it. */
static void excl_record(int flags, bool ok)
{
    if (!excl(flags) || !ckpt_active || __atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE) ||
        !ckpt_history_recording())
        return;
    int err = errno;
    uint64_t v = ok ? 0 : (uint64_t)err;
    ckpt_history_value(CKPT_VALUE_OPEN_EXCL, &v);
    errno = err;
}

static int excl_served(int flags)
{
    int err;
    if (!excl(flags) || !__atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE) || !ckpt_history_excl(&err))
        return 0;
    if (!err)
        return 1;
    errno = err;
    return -1;
}

static bool writes(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_APPEND));
}

/* Replaying, opens with flags go to the scratch copy (appends do not). */
static bool aside_flags(int flags)
{
    return writes(flags) && (!(flags & O_APPEND) || __atomic_load_n(&following, __ATOMIC_ACQUIRE));
}

/* path, absolute (cut at n: names that long are not told apart). */
static void absolute(const char *path, char *out, size_t n)
{
    char cwd[PATH_MAX];
    int k = path[0] == '/' || !getcwd(cwd, sizeof(cwd)) ? snprintf(out, n, "%s", path)
                                                         : snprintf(out, n, "%s/%s", cwd, path);
    if (k < 0)
        out[0] = '\0';
}

/* The scratch copy of path: out holds PATH_MAX + 32 bytes. */
static void aside(const char *path, char *out)
{
    char abs[PATH_MAX];
    absolute(path, abs, sizeof(abs));
    int k = snprintf(out, PATH_MAX + 32, "%s/%016llx", scratch, (unsigned long long)XXH3_64bits(abs, strlen(abs)));
    if (k < 0)
        out[0] = '\0';
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* A file the program opened for writing.  Appended-to files are kept by
 * name once closed (a log opened for each line); others only while open. */
static void remember(int fd, int flags, const char *path)
{
    struct stat st;
    char abs[PATH_MAX];
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return;
    absolute(path, abs, sizeof(abs));
    pthread_mutex_lock(&lock);
    int i = 0, free_at = -1;
    for (; i < nfiles; i++) {
        if (strcmp(files[i].path, abs) == 0 && (flags & O_APPEND) && (files[i].flags & O_APPEND))
            break; /* the same log again */
        if (files[i].fd < 0 && !(files[i].flags & O_APPEND) && free_at < 0)
            free_at = i;
    }
    if (i == nfiles && free_at >= 0)
        i = free_at;
    if (i < MAX_FILES) {
        files[i] = (struct file){.fd = fd, .flags = flags, .dev = st.st_dev, .ino = st.st_ino};
        memcpy(files[i].path, abs, sizeof(abs));
        if (i == nfiles)
            nfiles++;
    }
    pthread_mutex_unlock(&lock);
}

/* Is files[i] still the program's open descriptor?  Lock held. */
static bool still_open(int i)
{
    struct stat st;
    return files[i].fd >= 0 && fstat(files[i].fd, &st) == 0 && st.st_dev == files[i].dev &&
           st.st_ino == files[i].ino;
}

/* Replaying: the name a program's open of path with flags uses. */
static const char *redirect(const char *path, int flags, char *buf)
{
    aside(path, buf);
    if (writes(flags)) {
        mkdir(scratch, 0700);
        __atomic_add_fetch(&redirected, 1, __ATOMIC_RELAXED);
        return buf;
    }
    return exists(buf) ? buf : path; /* read back what replay wrote */
}

static int open_common(int dirfd, const char *path, int flags, mode_t mode, const void *caller,
                       int (*real)(int, const char *, int, ...))
{
    char buf[PATH_MAX + 32];
    if (!path || (dirfd != AT_FDCWD && path[0] != '/') || (!replaying() && !tracking(flags)) || !mine(caller))
        return real(dirfd, path, flags, mode);
    if (replaying() && (aside_flags(flags) || !writes(flags))) {
        int served = excl_served(flags);
        if (served < 0)
            return -1;
        if (served)
            flags = (flags & ~O_EXCL) | O_TRUNC; /* created: whatever a scratch copy held goes */
        const char *p = redirect(path, flags, buf);
        if (p == buf && (flags & O_APPEND))
            flags |= O_CREAT, mode = 0600; /* a standby's appends start a copy of their own */
        int fd = real(dirfd, p, flags, mode);
        if (p == buf && fd >= 0 && writes(flags))
            remember(fd, flags, path);
        return fd;
    }
    int fd = real(dirfd, path, flags, mode);
    excl_record(flags, fd >= 0);
    if (writes(flags))
        remember(fd, flags, path);
    return fd;
}

static mode_t mode_of(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_HOOK(name, realname)                                                             \
    EXPORT int name(const char *path, int flags, ...)                                         \
    {                                                                                         \
        va_list ap;                                                                           \
        va_start(ap, flags);                                                                  \
        mode_t mode = mode_of(flags, ap);                                                     \
        va_end(ap);                                                                           \
        REAL_LIBC(realname);                                                                  \
        if (!real_##realname##_) {                                                            \
            errno = ENOSYS;                                                                   \
            return -1;                                                                        \
        }                                                                                     \
        return open_common(AT_FDCWD, path, flags, mode, __builtin_return_address(0),          \
                           (int (*)(int, const char *, int, ...))real_##realname##_);         \
    }
OPEN_HOOK(open, openat)
OPEN_HOOK(open64, openat64)

#define OPENAT_HOOK(name)                                                                     \
    EXPORT int name(int dirfd, const char *path, int flags, ...)                              \
    {                                                                                         \
        va_list ap;                                                                           \
        va_start(ap, flags);                                                                  \
        mode_t mode = mode_of(flags, ap);                                                     \
        va_end(ap);                                                                           \
        REAL_LIBC(name);                                                                      \
        if (!real_##name##_) {                                                                \
            errno = ENOSYS;                                                                   \
            return -1;                                                                        \
        }                                                                                     \
        return open_common(dirfd, path, flags, mode, __builtin_return_address(0),             \
                           (int (*)(int, const char *, int, ...))real_##name##_);             \
    }
OPENAT_HOOK(openat)
OPENAT_HOOK(openat64)

static int mode_flags(const char *mode)
{
    int plus = strchr(mode, '+') != NULL;
    int x = mode[0] == 'w' && strchr(mode, 'x') ? O_EXCL : 0; /* glibc's "wx" */
    switch (mode[0]) {
    case 'w':
        return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC | x;
    case 'a':
        return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
    default:
        return plus ? O_RDWR : O_RDONLY;
    }
}

/* mode without its 'x' (a recorded exclusive create that succeeded). */
static const char *mode_created(const char *mode, char *out, size_t n)
{
    size_t k = 0;
    for (; *mode && k + 1 < n; mode++)
        if (*mode != 'x')
            out[k++] = *mode;
    out[k] = '\0';
    return out;
}

#define FOPEN_HOOK(name)                                                                      \
    EXPORT FILE *name(const char *path, const char *mode)                                     \
    {                                                                                         \
        char buf[PATH_MAX + 32], m[16];                                                       \
        REAL_LIBC(name);                                                                      \
        if (!real_##name##_) {                                                                \
            errno = ENOSYS;                                                                   \
            return NULL;                                                                      \
        }                                                                                     \
        int flags = path && mode ? mode_flags(mode) : 0;                                      \
        if (!path || !mode || (!replaying() && !tracking(flags)) || !mine(__builtin_return_address(0))) \
            return real_##name##_(path, mode);                                                \
        bool aside_ = replaying() && (aside_flags(flags) || !writes(flags));                  \
        int served = aside_ ? excl_served(flags) : 0;                                         \
        if (served < 0)                                                                       \
            return NULL;                                                                      \
        if (served)                                                                           \
            mode = mode_created(mode, m, sizeof(m));                                          \
        const char *p = aside_ ? redirect(path, flags, buf) : path;                           \
        FILE *f = real_##name##_(p, mode);                                                    \
        excl_record(flags, f != NULL);                                                        \
        if (f && writes(flags))                                                               \
            remember(fileno(f), flags, path);                                                 \
        return f;                                                                             \
    }
FOPEN_HOOK(fopen)
FOPEN_HOOK(fopen64)

EXPORT int rename(const char *from, const char *to)
{
    char a[PATH_MAX + 32], b[PATH_MAX + 32];
    REAL_LIBC(rename);
    if (!real_rename_) {
        errno = ENOSYS;
        return -1;
    }
    if (!replaying() || !mine(__builtin_return_address(0)))
        return real_rename_(from, to);
    aside(from, a);
    aside(to, b);
    /* A file replay wrote moves in the scratch; the world's stays as the
     * recorded run left it. */
    return exists(a) ? real_rename_(a, b) : 0;
}

EXPORT int unlink(const char *path)
{
    char a[PATH_MAX + 32];
    REAL_LIBC(unlink);
    if (!real_unlink_) {
        errno = ENOSYS;
        return -1;
    }
    if (!replaying() || !mine(__builtin_return_address(0)))
        return real_unlink_(path);
    aside(path, a);
    return exists(a) ? real_unlink_(a) : 0;
}

void ckpt_world_boundary(void)
{
    if (ckpt_is_replaying()) {
        /* The recorded run's lengths at this boundary, before its ITER. */
        struct ckpt_rl_rec rec;
        uint64_t t = ckpt_thread_key();
        nlengths = 0;
        while (ckpt_rlog_peek(t, &rec) == CKPT_RL_FILE && ckpt_history_next(t, CKPT_RL_FILE, &rec)) {
            if (nlengths < MAX_FILES && rec.len < PATH_MAX) {
                lengths[nlengths].size = rec.a;
                lengths[nlengths].flags = (int)rec.b;
                memcpy(lengths[nlengths].path, rec.payload, rec.len);
                lengths[nlengths].path[rec.len] = '\0';
                nlengths++;
            }
        }
        return;
    }
    if (!ckpt_history_recording())
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nfiles; i++) {
        struct stat st;
        if (!still_open(i))
            files[i].fd = -1; /* closed since, or the number reused */
        if (files[i].fd >= 0 ? fstat(files[i].fd, &st) == 0
                             : (files[i].flags & O_APPEND) && stat(files[i].path, &st) == 0)
            ckpt_history_file((uint64_t)st.st_size, files[i].flags, files[i].path);
    }
    pthread_mutex_unlock(&lock);
}

/* The files replay wrote aside go. */
static void clear_scratch(void)
{
    DIR *d = opendir(scratch);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] != '.')
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    rmdir(scratch);
}

void ckpt_world_live(void)
{
    int n = 0;
    __atomic_store_n(&following, false, __ATOMIC_RELEASE);
    loud();
    /* The lines the failed run appended after the snapshot go. */
    for (int k = 0; k < nlengths; k++) {
        struct stat st;
        if (!(lengths[k].flags & O_APPEND) || stat(lengths[k].path, &st) < 0 || (uint64_t)st.st_size <= lengths[k].size)
            continue;
        if (truncate(lengths[k].path, (off_t)lengths[k].size) < 0)
            ckpt_refuse("cannot cut the program's log %s back to its length at the snapshot: %s", lengths[k].path,
                        strerror(errno));
        n++;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nfiles; i++) {
        struct stat st;
        if (!still_open(i))
            continue;
        uint64_t size = UINT64_MAX;
        for (int k = 0; k < nlengths; k++)
            if (strcmp(lengths[k].path, files[i].path) == 0)
                size = lengths[k].size;
        ckpt_self_depth++;
        int fd = size == UINT64_MAX ? -1 : open(files[i].path, (files[i].flags & ~(O_TRUNC | O_CREAT | O_EXCL)));
        ckpt_self_depth--;
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0 || lseek(fd, (off_t)size, SEEK_SET) < 0 ||
            dup2(fd, files[i].fd) < 0) {
            if (fd >= 0)
                close(fd);
            pthread_mutex_unlock(&lock);
            ckpt_refuse("the program's file %s, open for writing at the snapshot, cannot be put back as it was "
                        "then", files[i].path);
        }
        close(fd);
        fstat(files[i].fd, &st);
        files[i].dev = st.st_dev;
        files[i].ino = st.st_ino;
        n++;
    }
    pthread_mutex_unlock(&lock);
    clear_scratch();
    int r = __atomic_load_n(&redirected, __ATOMIC_RELAXED);
    if (r || n)
        ckpt_log(CKPT_INFO, "replay wrote %d file%s aside, never over the program's own; %d file%s the program "
                 "writes %s back as at the snapshot", r, r == 1 ? "" : "s", n, n == 1 ? "" : "s",
                 n == 1 ? "is" : "are");
}
