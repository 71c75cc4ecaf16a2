/*
 * The job's arena as ckpt-resume sees it once the ranks are gone: the
 * newest iteration that every rank holds a verified snapshot of (where a
 * restart goes back to), and the removal of the arena after the job has
 * succeeded.  A slot is trusted only after ckpt_image_verify has checked
 * every chunk, so a damaged one is never chosen.  Removal touches only
 * what libckpt creates (rank<N>/slot0, slot1, replay.log, the files a
 * replaying process wrote aside, those directories, the fault-fired
 * marker, the persist pin and the agent's ledger of decisions) under this
 * user's <uid>-<job> directory: never another job's or another user's
 * files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "image.h"
#include "log.h"
#include "persist.h"
#include "pins.h"
#include "replay.h"
#include "resume.h"
#include "schedule.h"
#include "timeline.h"

/* The files libckpt keeps in a rank's directory, beside its slots (and
 * the temporaries of those it writes whole, left by a process killed as
 * it wrote one). */
static const char *const rank_files[] = { CKPT_RLOG_ARENA_NAME,
                                           CKPT_TL_FILE, CKPT_TL_FILE CKPT_WHOLE_TMP,
                                           CKPT_SCHED_FILE, CKPT_SCHED_FILE CKPT_WHOLE_TMP,
                                           CKPT_TL_AGENT_FILE, CKPT_TL_AGENT_FILE CKPT_WHOLE_TMP,
                                           CKPT_FOLLOW_FILE, CKPT_REPLAY_OUTPUT, CKPT_ARENA_OWNER };

/* CKPT_ARENA_DIR/<uid>-<job>: the parent of every rank's directory. */
int arena_job_dir(const struct options *opt, char *out, size_t outlen)
{
    return ckpt_job_dir(out, outlen, opt->arena_root, opt->job_name);
}

/*
 * One ckpt-resume per job arena on a machine, for a job of one node: a
 * second one with the same CKPT_JOB would remove the first one's snapshots
 * under its running ranks or write over them.  (On several nodes the
 * coordinator decides which agent is the node.)  The lock is an flock on
 * .ckpt-resume.lock in the job's directory (which removal leaves), held
 * for ckpt-resume's life: the descriptor closes with the process, however
 * it ends, and is not inherited by the ranks.  Returns 0 (also when the
 * directory cannot be made: arena_usable in main.c says so), -EBUSY after
 * saying which process holds it, or -errno.
 */
#define LOCK_FILE ".ckpt-resume.lock"
static int lock_fd = -1;
static char lock_path[PATH_MAX + 32];

int arena_lock(const struct options *opt)
{
    int fd;
    char dir[PATH_MAX], *path = lock_path, pid[24] = "";
    int rc = arena_job_dir(opt, dir, sizeof(dir));
    if (rc < 0 || lock_fd >= 0)
        return rc < 0 ? rc : 0;
    snprintf(path, sizeof(lock_path), "%s/" LOCK_FILE, dir);
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        rc = -errno;
        ssize_t n = rc == -EWOULDBLOCK ? pread(fd, pid, sizeof(pid) - 1, 0) : -1;
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (rc != -EWOULDBLOCK)
            return rc;
        ckpt_log(CKPT_ERROR, "job %s already runs on this machine (ckpt-resume pid %s holds %s): its snapshots "
                 "would be removed under its ranks; give this job another CKPT_JOB, or another CKPT_ARENA_DIR",
                 opt->job_name, *pid ? pid : "?", path);
        return -EBUSY;
    }
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        ckpt_log(CKPT_DEBUG, "%s: the pid is not written (%s)", path, strerror(errno));
    lock_fd = fd;
    return 0;
}

/* The job is over: its lock file goes (the lock itself with the process). */
void arena_unlock(void)
{
    if (lock_fd >= 0)
        unlink(lock_path);
}

/* Whether @name is a rank's directory (ckpt_rank_dir_name) of a rank ckpt-resume can run; *@rank is the rank. */
static bool rank_dir(const char *name, int *rank)
{
    return ckpt_rank_dir_name(name, rank) && *rank < RESUME_MAX_RANKS;
}

static int by_value(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/*
 * The ranks whose snapshots must agree, in *@ranks (the caller frees it):
 * first_rank.. for the nproc ranks we started, every rank<N> directory in @dir when
 * a wrapped launcher started them.  Returns how many, or -errno.
 */
static int job_ranks(const struct options *opt, const char *dir, int **ranks)
{
    if (!opt->wrap) {
        *ranks = malloc(opt->nproc * sizeof(int));
        if (!*ranks)
            return -ENOMEM;
        for (int i = 0; i < opt->nproc; i++)
            (*ranks)[i] = opt->first_rank + i;
        return opt->nproc;
    }
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int n = 0, cap = 0, r;
    *ranks = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (!rank_dir(e->d_name, &r))
            continue;
        if (n == cap) {
            int *grown = realloc(*ranks, (cap = cap ? 2 * cap : 16) * sizeof(int));
            if (!grown) {
                closedir(d);
                free(*ranks);
                *ranks = NULL;
                return -ENOMEM;
            }
            *ranks = grown;
        }
        (*ranks)[n++] = r;
    }
    closedir(d);
    if (n)
        qsort(*ranks, n, sizeof(int), by_value);
    return n;
}

/*
 * Verifies both slots of rank @r in the job directory @dir into @h; a
 * damaged one, or one of another job or rank, is named and skipped.
 */
void arena_scan_rank(const char *job, const char *dir, int r, struct held *h)
{
    char rdir[PATH_MAX + 32], path[PATH_MAX + 48], why[256];

    h->n = 0;
    if (ckpt_rank_dir(rdir, sizeof(rdir), dir, r) < 0)
        return;
    for (int s = 0; s < 2; s++) {
        if (ckpt_slot_path(path, sizeof(path), rdir, s) < 0)
            continue;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0) {
            if (errno != ENOENT)
                ckpt_log(CKPT_WARN, "cannot read %s: %s: skipped", path, strerror(errno));
            continue;
        }
        if (fstat(fd, &st) < 0 || st.st_size == 0) {
            close(fd); /* never written: the rank took no snapshot into it */
            continue;
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) {
            ckpt_log(CKPT_WARN, "cannot map %s: %s: skipped", path, strerror(errno));
            continue;
        }
        struct ckpt_header hdr;
        int rc = ckpt_image_verify(m, (size_t)st.st_size, &hdr, why, sizeof(why));
        munmap(m, (size_t)st.st_size);
        if (rc == -ENODATA) {
            ckpt_log(CKPT_DEBUG, "%s holds no committed snapshot", path); /* it was being written */
        } else if (rc < 0) {
            ckpt_log(CKPT_WARN, "%s is damaged (%s): skipped", path, why);
        } else if (strncmp(hdr.job, job, sizeof(hdr.job)) != 0 || hdr.rank != (uint32_t)r) {
            ckpt_log(CKPT_WARN, "%s holds a snapshot of job '%.*s' rank %u: skipped", path, (int)sizeof(hdr.job),
                     hdr.job, hdr.rank);
        } else if (hdr.iteration > 0) {
            h->iteration[h->n] = hdr.iteration;
            h->generation[h->n] = hdr.generation;
            h->epoch[h->n] = hdr.epoch;
            h->n++;
        }
    }
}

static bool holds(const struct held *h, uint64_t iteration)
{
    for (int i = 0; i < h->n; i++)
        if (h->iteration[i] == iteration)
            return true;
    return false;
}

/* "iterations 27 and 26", for a reason. */
static void describe(const struct held *h, char *out, size_t outlen)
{
    if (h->n == 2)
        snprintf(out, outlen, "iterations %llu and %llu", (unsigned long long)h->iteration[0],
                 (unsigned long long)h->iteration[1]);
    else
        snprintf(out, outlen, "only iteration %llu", (unsigned long long)h->iteration[0]);
}

/* Says in @why why the ranks @r, holding @h, share no iteration (older than @below, unless 0). */
static void no_common(const int *r, const struct held *h, int n, uint64_t below, char *why, size_t whylen)
{
    char which[64] = "", a[64], b[64];

    if (below)
        snprintf(which, sizeof(which), " older than %llu", (unsigned long long)below);
    for (int i = 0; i < n; i++) {
        if (h[i].n == 0) {
            snprintf(why, whylen, "rank %d has no verified snapshot", r[i]);
            return;
        }
    }
    for (int i = 1; i < n; i++) {
        bool shares = false;
        for (int k = 0; k < h[0].n; k++)
            shares |= (!below || h[0].iteration[k] < below) && holds(&h[i], h[0].iteration[k]);
        if (!shares) {
            describe(&h[0], a, sizeof(a));
            describe(&h[i], b, sizeof(b));
            snprintf(why, whylen, "no iteration%s has a verified snapshot on every rank (rank %d holds %s, rank %d %s)",
                     which, r[0], a, r[i], b);
            return;
        }
    }
    snprintf(why, whylen, "no iteration%s has a verified snapshot on every rank", which);
}

/*
 * Finds the newest iteration, below @below unless that is 0, that every
 * rank of the job holds a verified snapshot of.  Returns true with @pt
 * filled (the generation is the lowest rank's), or false with the reason
 * in @why.
 */
bool arena_pick(const struct options *opt, uint64_t below, struct restore_point *pt, char *why, size_t whylen)
{
    char dir[PATH_MAX];
    struct stat st;
    int *ranks = NULL;

    if (arena_job_dir(opt, dir, sizeof(dir)) < 0) {
        snprintf(why, whylen, "the arena path under %s is too long", opt->arena_root);
        return false;
    }
    if (stat(dir, &st) < 0 && errno == ENOENT) {
        snprintf(why, whylen, "no rank took a snapshot (there is no %s)", dir);
        return false;
    }
    int n = job_ranks(opt, dir, &ranks);
    if (n <= 0) {
        if (n == 0)
            snprintf(why, whylen, "no rank took a snapshot (%s holds no rank's directory)", dir);
        else
            snprintf(why, whylen, "cannot read the job's arena %s: %s", dir, strerror(-n));
        return false;
    }
    struct held *h = calloc(n, sizeof(*h));
    if (!h) {
        free(ranks);
        snprintf(why, whylen, "out of memory");
        return false;
    }
    for (int i = 0; i < n; i++)
        arena_scan_rank(opt->job_name, dir, ranks[i], &h[i]);

    bool found = false;
    for (int k = 0; k < h[0].n; k++) {
        uint64_t it = h[0].iteration[k];
        if ((below && it >= below) || (found && it <= pt->iteration))
            continue;
        bool everywhere = true;
        for (int i = 1; i < n && everywhere; i++)
            everywhere = holds(&h[i], it);
        if (everywhere) {
            *pt = (struct restore_point){ .iteration = it, .generation = h[0].generation[k] };
            found = true;
        }
    }
    if (!found)
        no_common(ranks, h, n, below, why, whylen);
    free(h);
    free(ranks);
    return found;
}

/*
 * Retires what rank @r holds in slot @s under @dir (the arena, or the
 * peers' store) of iterations after @after (ckpt_slot_retire); @what says
 * where it was, in the line that says so.  Returns 1 when it retired it.
 */
int arena_retire_slot(const char *job, const char *dir, int r, int s, uint64_t after, const char *what)
{
    char rdir[PATH_MAX + 32], path[PATH_MAX + 48];
    uint64_t it = 0;
    if (ckpt_rank_dir(rdir, sizeof(rdir), dir, r) < 0 || ckpt_slot_path(path, sizeof(path), rdir, s) < 0)
        return 0;
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int rc = ckpt_slot_retire(fd, job, r, after, &it);
    close(fd);
    if (rc > 0)
        ckpt_log(CKPT_INFO, "retired rank %d's snapshot of iteration %llu %s: newer than the restore point "
                 "%llu, it belongs to the run the restore replaces", r, (unsigned long long)it, what,
                 (unsigned long long)after);
    else if (rc < 0)
        ckpt_log(CKPT_WARN, "cannot retire %s (iteration %llu, newer than the restore point %llu): %s", path,
                 (unsigned long long)it, (unsigned long long)after, strerror(-rc));
    return rc > 0;
}

/* The same for both of rank @r's slots: how many it retired. */
int arena_retire(const char *job, const char *dir, int r, uint64_t after, const char *what)
{
    return arena_retire_slot(job, dir, r, 0, after, what) + arena_retire_slot(job, dir, r, 1, after, what);
}

/* Retires this node's ranks' snapshots after @after (arena_retire). */
void arena_supersede(const struct options *opt, uint64_t after)
{
    char dir[PATH_MAX];

    if (arena_job_dir(opt, dir, sizeof(dir)) < 0)
        return;
    for (int i = 0; i < opt->nproc; i++)
        arena_retire(opt->job_name, dir, opt->first_rank + i, after, "in this node's arena");
}

/*
 * Removes the rank directory @name of the job directory @dir (open as
 * @dfd), with the files libckpt keeps in it and its replay log on disk
 * unless generations on disk name it;
 * anything else there stays, and so does the directory.  Returns 0, or
 * -errno.
 */
static int remove_rank(const char *dir, int dfd, const char *name)
{
    char path[PATH_MAX + 256];
    int rfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return -errno;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    /* A log on disk that generations name stays with them (its stub goes
     * with the rank's files). */
    char disk[PATH_MAX];
    if (ckpt_rlog_where(path, disk, sizeof(disk)) <= 0 || !ckpt_persist_names_log(disk))
        ckpt_rlog_remove(path);
    for (int s = 0; s < 2; s++)
        unlinkat(rfd, ckpt_slot_name(s), 0);
    for (size_t i = 0; i < sizeof(rank_files) / sizeof(rank_files[0]); i++)
        unlinkat(rfd, rank_files[i], 0);
    /* The files a replaying process wrote aside, left by one stopped before it went live. */
    int sfd = openat(rfd, CKPT_REPLAY_FILES, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
    for (struct dirent *e; sd && (e = readdir(sd));)
        if (e->d_name[0] != '.')
            unlinkat(sfd, e->d_name, 0);
    if (sd)
        closedir(sd);
    else if (sfd >= 0)
        close(sfd);
    unlinkat(rfd, CKPT_REPLAY_FILES, AT_REMOVEDIR);
    close(rfd);
    return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

/* Removes the ranks' logs (rank<N>.replay.log) from the directory open as @dfd. */
static void remove_logs(int dfd)
{
    DIR *d = fdopendir(dup(dfd));
    int r;
    for (struct dirent *e; d && (e = readdir(d));)
        if (ckpt_rlog_disk_name(e->d_name, &r))
            unlinkat(dfd, e->d_name, 0);
    if (d)
        closedir(d);
}

/*
 * Removes the job's arena, as this file's opening says.  Returns 1 when
 * there was one and it is gone, 0 when there was none, -errno (said) when
 * part of it stays.
 */
int arena_remove(const struct options *opt)
{
    char dir[PATH_MAX];
    struct stat st;
    int rc = arena_job_dir(opt, dir, sizeof(dir)), r;

    if (rc < 0)
        return rc;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0; /* none; a root that cannot hold one is refused by main.c */
        rc = -errno;
        ckpt_log(CKPT_WARN, "cannot remove %s: %s", dir, strerror(-rc));
        return rc;
    }
    if (fstat(dfd, &st) < 0 || st.st_uid != geteuid()) {
        close(dfd);
        ckpt_log(CKPT_WARN, "%s is not this user's: left as it is", dir);
        return -EPERM;
    }
    DIR *d = fdopendir(dup(dfd));
    if (!d) {
        rc = -errno;
        close(dfd);
        return rc;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (rank_dir(e->d_name, &r) && (rc = remove_rank(dir, dfd, e->d_name)) < 0)
            ckpt_log(CKPT_WARN, "cannot remove %s/%s: %s", dir, e->d_name, strerror(-rc));
    }
    /* The ranks' logs on disk, where the arena is on disk too (disk.c),
     * whose stubs went with their rank directories or before them, and the
     * peers' the agent keeps beside them. */
    remove_logs(dfd);
    int pfd = openat(dfd, CKPT_PEERS_SUBDIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (pfd >= 0) {
        remove_logs(pfd);
        close(pfd);
        unlinkat(dfd, CKPT_PEERS_SUBDIR, AT_REMOVEDIR);
    }
    closedir(d);
    unlinkat(dfd, CKPT_FAULT_FIRED, 0);
    unlinkat(dfd, CKPT_PINS_FILE, 0);  /* left by an agent that was killed while persisting */
    unlinkat(dfd, CKPT_PINS_FILE CKPT_WHOLE_TMP, 0);
    unlinkat(dfd, LEDGER_FILE, 0);          /* the decisions its snapshots belonged to (ledger.c) */
    unlinkat(dfd, LEDGER_FILE CKPT_WHOLE_TMP, 0);
    close(dfd);
    if (rmdir(dir) < 0) {
        rc = -errno;
        char mine[PATH_MAX + 32];
        snprintf(mine, sizeof(mine), "%s/" LOCK_FILE, dir);
        if (rc == -ENOTEMPTY && lock_fd >= 0 && strcmp(mine, lock_path) == 0 && access(mine, F_OK) == 0)
            return 1; /* only this ckpt-resume's lock is left: the directory stays with it */
        ckpt_log(CKPT_WARN, "cannot remove %s: %s", dir,
                 rc == -ENOTEMPTY ? "it holds files libckpt did not create" : strerror(-rc));
        return rc;
    }
    return 1;
}
