/*
 * `ckpt-inspect gc [--yes] [--min-age S]`: the arenas of this user's jobs
 * that are dead, and the replicas this node holds for dead jobs of its
 * peers (CKPT_ARENA_DIR/peers, never taken for a job), and with --yes
 * their removal.  A job is alive while any
 * process maps or holds open anything under its directory (or the
 * directory itself), as /proc/<pid>/maps and /proc/<pid>/fd show; a job
 * whose files changed in the last S seconds (default 60, longer than
 * ckpt-resume's longest wait between a crash and the restart that reads
 * the arena) is left alone too.  Without --yes nothing is removed; with it,
 * only what a dead job's own directory holds, never through a symlink, and
 * the ranks' replay logs on disk its stubs name (ckpt-resume keeps them
 * under /var/tmp for an arena in memory), unless generations on disk name
 * them, with their directory once it is empty.  Such a directory whose
 * arena is gone (removed by hand, or with the machine's memory) is dead
 * too, and goes whole.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "inspect.h"
#include "log.h"
#include "persist.h"
#include "replay.h"
#include "util.h"

#define MIN_AGE_DEFAULT 60

struct arena_job {
    char name[PATH_MAX + 320];
    char dir[PATH_MAX];      /* as the user named the root */
    char real[PATH_MAX];     /* canonical, as /proc shows paths */
    int pid;                 /* a process using it, or 0 */
    char comm[64];
    uint64_t newest_ns, bytes;
    bool peer;               /* replicas held for a peer, not the job's own arena */
    bool logs;               /* the replay logs kept under CKPT_LOG_HOME for an arena that is gone */
};

/* nftw has no argument for its callback. */
static struct arena_job *walking;

static int measure(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path, (void)type, (void)ftw;
    uint64_t t = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
    if (t > walking->newest_ns)
        walking->newest_ns = t;
    walking->bytes += (uint64_t)st->st_blocks * 512;
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0) {
        ckpt_log(CKPT_ERROR, "cannot remove %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static bool under(const char *path, const char *dir);

/* Removes the logs on disk the stubs of a's rank directories name (not
 * those generations name), and their directory when that is left empty. */
static void remove_logs(const struct arena_job *a)
{
    char rank[PATH_MAX + 300], disk[PATH_MAX];
    DIR *d = opendir(a->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        int r;
        if (!ckpt_rank_dir_name(e->d_name, &r) || ckpt_rank_dir(rank, sizeof(rank), a->dir, r) < 0)
            continue;
        if (ckpt_rlog_where(rank, disk, sizeof(disk)) <= 0 || ckpt_persist_names_log(disk) || under(disk, a->dir))
            continue;
        ckpt_rlog_remove(rank);
        char *slash = strrchr(disk, '/');
        if (slash) {
            *slash = '\0';
            ckpt_rlog_home_close(disk);
        }
    }
    if (d)
        closedir(d);
}

/* Whether path is dir or lies under it. */
static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/' || path[n] == ' ');
}

/* Room for one more in *j (n of *cap); NULL when there is none. */
static struct arena_job *another(struct arena_job **j, size_t n, size_t *cap)
{
    if (n == *cap) {
        struct arena_job *more = realloc(*j, (*cap = *cap ? 2 * *cap : 16) * sizeof(**j));
        if (!more)
            return NULL;
        *j = more;
    }
    return &(*j)[n];
}

/*
 * Adds to *j the directories of replay logs that ckpt-resume keeps under
 * CKPT_LOG_HOME (disk.c) for an arena in memory, whose arena is gone
 * (removed by hand, or lost with the machine's memory): each names its
 * arena's job directory (CKPT_LOG_HOME_ARENA).  Returns how many there
 * are now.
 */
static size_t orphan_logs(struct arena_job **j, size_t n, size_t *cap)
{
    char home[64], note[PATH_MAX + 16], arena[PATH_MAX];
    snprintf(home, sizeof(home), "%s/libckpt-%u", CKPT_LOG_HOME, (unsigned)geteuid());
    DIR *d = opendir(home);
    for (struct dirent *e; d && (e = readdir(d));) {
        struct stat st;
        struct arena_job *a = e->d_name[0] != '.' ? another(j, n, cap) : NULL;
        if (!a)
            continue;
        *a = (struct arena_job){.logs = true};
        snprintf(a->dir, sizeof(a->dir), "%s/%s", home, e->d_name);
        /* Only a real directory of this user's, whose arena is gone. */
        if (lstat(a->dir, &st) < 0 || !S_ISDIR(st.st_mode) || !ckpt_private(&st))
            continue;
        snprintf(note, sizeof(note), "%s/" CKPT_LOG_HOME_ARENA, a->dir);
        int fd = open(note, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
        arena[0] = '\0';
        if (f && !fgets(arena, sizeof(arena), f))
            arena[0] = '\0';
        if (f)
            fclose(f);
        else if (fd >= 0)
            close(fd);
        arena[strcspn(arena, "\n")] = '\0';
        if (!*arena || lstat(arena, &st) == 0 || errno != ENOENT || !realpath(a->dir, a->real))
            continue;
        snprintf(a->name, sizeof(a->name), "%s (replay logs; its arena %s is gone)",
                 strchr(e->d_name, '-') ? strchr(e->d_name, '-') + 1 : e->d_name, arena);
        walking = a;
        nftw(a->dir, measure, 16, FTW_PHYS);
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

/* Marks in j[] the jobs some process (not this one) maps or holds open. */
static void scan_proc(struct arena_job *j, size_t n)
{
    char path[PATH_MAX + 64], target[PATH_MAX], line[PATH_MAX + 256];
    DIR *proc = opendir("/proc");
    if (!proc)
        return;
    for (struct dirent *e; (e = readdir(proc));) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        snprintf(path, sizeof(path), "/proc/%d/maps", pid);
        FILE *maps = fopen(path, "re");
        while (maps && fgets(line, sizeof(line), maps)) {
            char *file = strchr(line, '/');
            for (size_t k = 0; file && k < n; k++)
                if (!j[k].pid && under(file, j[k].real))
                    j[k].pid = pid;
        }
        if (maps)
            fclose(maps);
        snprintf(path, sizeof(path), "/proc/%d/fd", pid);
        DIR *fds = opendir(path);
        for (struct dirent *f; fds && (f = readdir(fds));) {
            snprintf(path, sizeof(path), "/proc/%d/fd/%s", pid, f->d_name);
            ssize_t len = readlink(path, target, sizeof(target) - 1);
            if (len <= 0)
                continue;
            target[len] = '\0';
            for (size_t k = 0; k < n; k++)
                if (!j[k].pid && under(target, j[k].real))
                    j[k].pid = pid;
        }
        if (fds)
            closedir(fds);
        for (size_t k = 0; k < n; k++) {
            if (j[k].pid == pid && !j[k].comm[0]) {
                snprintf(path, sizeof(path), "/proc/%d/comm", pid);
                FILE *c = fopen(path, "re");
                if (c && fgets(j[k].comm, sizeof(j[k].comm), c))
                    j[k].comm[strcspn(j[k].comm, "\n")] = '\0';
                if (c)
                    fclose(c);
            }
        }
    }
    closedir(proc);
}

int cmd_gc(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names jobs = {0};
    bool yes = false;
    uint64_t min_age = MIN_AGE_DEFAULT;
    int rc = EXIT_OK;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--yes") == 0) {
            yes = true;
        } else if (strcmp(argv[i], "--min-age") == 0 && i + 1 < argc &&
                   parse_u64(argv[i + 1], 0, 1u << 30, &min_age) == 0) {
            i++;
        } else {
            ckpt_log(CKPT_ERROR, "usage: ckpt-inspect gc [--yes] [--min-age SECONDS]");
            return EXIT_USAGE;
        }
    }
    int nt = tiers_open(o, tiers, MAX_TIERS);
    struct arena_job *j = NULL;
    size_t n = 0, cap = 0;
    /* The memory tiers: the jobs' arenas, and the replicas this node holds
     * for its peers, each job's in a directory of the same shape.  The
     * disk tier is never collected: CKPT_PERSIST_KEEP bounds it. */
    for (int t = 0; t < nt; t++) {
        if (tiers[t].ops == &disk_tier_ops)
            continue;
        if (jobs_find(o, &tiers[t], 1, &jobs) < 0) {
            free(j);
            return EXIT_ERROR;
        }
        for (size_t i = 0; i < jobs.n; i++) {
            struct stat st;
            struct arena_job *a = another(&j, n, &cap);
            if (!a) {
                free(j);
                names_free(&jobs);
                ckpt_log(CKPT_ERROR, "out of memory");
                return EXIT_ERROR;
            }
            *a = (struct arena_job){.peer = tiers[t].ops == &peer_tier_ops};
            snprintf(a->name, sizeof(a->name), "%s", jobs.v[i]);
            if (ckpt_job_dir(a->dir, sizeof(a->dir), tiers[t].root, a->name) < 0)
                continue;
            /* Only a real directory of this user's (arena.c's rule). */
            if (lstat(a->dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
                !realpath(a->dir, a->real))
                continue;
            walking = a;
            nftw(a->dir, measure, 16, FTW_PHYS);
            n++;
        }
        names_free(&jobs);
    }
    size_t arenas = n;
    n = orphan_logs(&j, n, &cap);
    if (!j) {
        printf("no arena at %s\n", o->arena_root);
        return EXIT_OK;
    }
    scan_proc(j, n);

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec, dead = 0, dead_bytes = 0;
    char size[32], age[32];
    for (size_t i = 0; i < n; i++) {
        struct arena_job *a = &j[i];
        if (a->peer) /* named so, the peer's copies are not taken for the job's own */
            snprintf(a->name + strlen(a->name), sizeof(a->name) - strlen(a->name), " (peer replicas)");
        human_bytes(a->bytes, size, sizeof(size));
        human_age(a->newest_ns, age, sizeof(age));
        if (a->pid) {
            printf("live   %s: %s, %s, in use by pid %d (%s)\n", a->name, a->dir, size, a->pid, a->comm);
        } else if (now_ns < a->newest_ns + min_age * 1000000000ull) {
            printf("recent %s: %s, %s, changed %s ago: left alone (younger than %llus)\n", a->name, a->dir, size, age,
                   (unsigned long long)min_age);
        } else if (!yes) {
            printf("dead   %s: %s, %s, last changed %s ago\n", a->name, a->dir, size, age);
            dead++;
            dead_bytes += a->bytes;
        } else {
            if (!a->logs)
                remove_logs(a);
            if (nftw(a->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0)
                printf("removed %s: %s, %s, last changed %s ago\n", a->name, a->dir, size, age);
            else
                rc = EXIT_ERROR;
        }
    }
    if (!arenas)
        printf("no arenas of this user in %s\n", o->arena_root);
    if (dead)
        printf("%llu dead arena%s, %s: `ckpt-inspect gc --yes` removes %s\n", (unsigned long long)dead,
               dead == 1 ? "" : "s", human_bytes(dead_bytes, size, sizeof(size)), dead == 1 ? "it" : "them");
    free(j);
    return rc;
}
