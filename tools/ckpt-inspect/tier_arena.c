/*
 * The arena tier: the host-memory arenas libckpt writes under
 * CKPT_ARENA_DIR/<uid>-<job>/rank<N>/{slot0,slot1,replay.log} (arena.h);
 * and the peer tier, the replicas this node's agent holds for the ranks of
 * other nodes, laid out the same way under CKPT_ARENA_DIR/peers but
 * without replay logs.  Only this user's directories are looked at, and only real directories
 * and files in them (never a symlink: /dev/shm is shared by every user).
 * Images are mapped read-only and shared, so reading costs no copy; it
 * must never open anything for writing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include "arena.h"
#include "follow.h"
#include "inspect.h"
#include "replay.h"

/* A directory of this user's that is not a symlink. */
static bool own_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

static int arena_jobs(const struct tier *t, struct names *out, char *why, size_t whylen)
{
    char path[PATH_MAX];
    DIR *d = opendir(t->root);

    if (!d) {
        int e = errno;
        snprintf(why, whylen, "cannot read %s: %s", t->root, strerror(e));
        return -e;
    }
    for (struct dirent *e; (e = readdir(d));) {
        const char *job;
        if (ckpt_job_dir_name(e->d_name, &job) && ckpt_job_dir(path, sizeof(path), t->root, job) == 0 &&
            own_dir(path))
            names_add(out, job);
    }
    closedir(d);
    return 0;
}

/* A rank's directory (ckpt_rank_dir_name), N at most 1 << 24. */
static bool rank_of(const char *name, int *rank)
{
    return ckpt_rank_dir_name(name, rank) && *rank <= 1 << 24;
}

static int arena_images(const struct tier *t, const char *job, struct catalog *cat, char *why, size_t whylen)
{
    char dir[PATH_MAX], rdir[PATH_MAX + 32], path[PATH_MAX + 48];
    int rank;

    if (ckpt_job_dir(dir, sizeof(dir), t->root, job) < 0) {
        snprintf(why, whylen, "the arena path of job '%s' is too long", job);
        return -ENAMETOOLONG;
    }
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        snprintf(why, whylen, "cannot read %s: %s", dir, strerror(e));
        return -e;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (!rank_of(e->d_name, &rank) || ckpt_rank_dir(rdir, sizeof(rdir), dir, rank) < 0 || !own_dir(rdir))
            continue;
        for (int s = 0; s < 2; s++) {
            struct stat st;
            if (ckpt_slot_path(path, sizeof(path), rdir, s) < 0 || lstat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
                strlen(path) >= sizeof(((struct image *)0)->where))
                continue;
            struct image *img = catalog_add(cat);
            img->tier = t;
            snprintf(img->job, sizeof(img->job), "%s", job);
            img->rank = rank;
            img->slot = s;
            memcpy(img->where, path, strlen(path) + 1);
            img->file_bytes = (uint64_t)st.st_size;
            img->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
        }
    }
    closedir(d);
    return 0;
}

static int arena_map(const struct tier *t, const struct image *img, bool data, struct view *v, struct progress *p,
                     char *why, size_t whylen)
{
    struct stat st;
    (void)t, (void)data, (void)p;

    *v = (struct view){0};
    int fd = open(img->where, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot open %s: %s", img->where, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            snprintf(why, whylen, "cannot map %s: %s", img->where, strerror(e));
            close(fd);
            return -e;
        }
        v->base = m;
        v->len = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

static void arena_unmap(const struct tier *t, struct view *v)
{
    (void)t;
    if (v->base)
        munmap((void *)v->base, v->len);
    *v = (struct view){0};
}

static int arena_rlog_verify(const struct tier *t, const struct image *img, uint64_t *last_iteration, char *why,
                             size_t whylen)
{
    char dir[PATH_MAX];
    if (ckpt_arena_path(dir, sizeof(dir), t->root, img->job, img->rank) < 0) {
        snprintf(why, whylen, "the arena path of job '%s' is too long", img->job);
        return -ENAMETOOLONG;
    }
    return ckpt_rlog_verify(dir, last_iteration, why, whylen);
}

/* One line per rank below @world that has a standby (a follow file,
 * runtime/follow.h): where it is, against @newest, the iteration every
 * rank holds (0: none). */
void arena_print_standbys(const struct tier *t, const char *job, int world, uint64_t newest)
{
    char dir[PATH_MAX];

    for (int rank = 0; rank < world; rank++) {
        struct ckpt_follow f;
        if (ckpt_arena_path(dir, sizeof(dir), t->root, job, rank) < 0 || !own_dir(dir) ||
            ckpt_follow_read(dir, &f) < 0)
            continue;
        bool alive = f.pid && (kill((pid_t)f.pid, 0) == 0 || errno == EPERM);
        printf("  standby of rank %d", rank);
        if (f.pid)
            printf(" (pid %llu%s)", (unsigned long long)f.pid, alive ? "" : ", gone");
        if (f.live_at)
            printf(": went live at iteration %llu\n", (unsigned long long)f.live_at);
        else if (!f.at)
            printf(": not at its first iteration yet\n");
        else if (newest > f.at)
            printf(": replayed to iteration %llu, %llu behind the newest iteration every rank holds\n",
                   (unsigned long long)f.at, (unsigned long long)(newest - f.at));
        else
            printf(": replayed to iteration %llu%s\n", (unsigned long long)f.at,
                   newest == f.at ? ", the newest every rank holds" : "");
    }
}

const struct tier_ops arena_tier_ops = {
    .name = "arena",
    .jobs = arena_jobs,
    .images = arena_images,
    .map = arena_map,
    .unmap = arena_unmap,
    .rlog_verify = arena_rlog_verify,
};

/* The receiver keeps no replay log: a restore from a peer's replica takes
 * the log from the rank's own node. */
const struct tier_ops peer_tier_ops = {
    .name = "peer",
    .jobs = arena_jobs,
    .images = arena_images,
    .map = arena_map,
    .unmap = arena_unmap,
};
