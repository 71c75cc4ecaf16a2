/*
 * The job's snapshots on disk (runtime/persist.h), driven by the node
 * agent.  CKPT_PERSIST_EVERY=N has one meaning on one node and on several:
 * a persist is due once every rank of the node has committed N more
 * iterations since the last one started, and starts at the first chance
 * that finds none running (on one node, the next iteration every rank
 * committed; on several, the next replication round, whose iteration the
 * pin file holds already); a due point that finds one running is counted
 * as skipped, and none is ever queued, so that persisting keeps up: the
 * interval is N snapshots, or the time one persist takes, whichever is
 * longer.  One worker thread writes the generation while the pin file
 * (pins.h) keeps the ranks from overwriting its slots.  When a restart finds no iteration in
 * the arena, the newest complete generation is read back into it.  This
 * file must never hold a rank (the training goes on whatever the disks
 * do), never touch a complete generation but through the engine, and never
 * read a generation into the arena while ranks run or a persist reads it.
 */
#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "arena.h"
#include "config.h"
#include "log.h"
#include "persist.h"
#include "pins.h"
#include "replay.h"
#include "resume.h"
#include "timeline.h"
#include "util.h"

/*
 * Without a directory for the replay logs (CKPT_REPLAY_LOG_DIR unset, no
 * CKPT_PERSIST_DIRS) they would live in the arena's rank directories, in
 * memory, and end the job's protection when they reach
 * CKPT_REPLAY_LOG_MAX.  They go to disk instead: where the arena itself is
 * on disk, to its job directory; where it is in memory (/dev/shm), to a
 * directory of this user's under CKPT_LOG_HOME, one per arena and job
 * (libckpt-<uid>/<hash of the arena's job directory>-<job>), removed with
 * the logs when the job succeeds.  Where neither can be, they stay in the
 * arena, and that is said.
 */
static bool in_memory(const char *path)
{
    struct statfs fs;
    return statfs(path, &fs) < 0 || fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
}

/* Makes dir, this user's alone (or finds it so). */
static bool private_dir(const char *dir)
{
    struct stat st;
    return (mkdir(dir, 0700) == 0 || errno == EEXIST) && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
           ckpt_private(&st);
}

static void default_log_dir(struct disk *d, const struct options *opt)
{
    char home[PATH_MAX], arena[PATH_MAX];
    const char *why = NULL;

    snprintf(home, sizeof(home), "%s/libckpt-%u", CKPT_LOG_HOME, (unsigned)geteuid());
    if (arena_job_dir(opt, arena, sizeof(arena)) < 0)
        why = "the arena's path is too long";
    else if (!in_memory(opt->arena_root))
        snprintf(d->log_dir, sizeof(d->log_dir), "%s", arena);
    else if (in_memory(CKPT_LOG_HOME))
        why = "it is in memory";
    else if (snprintf(d->log_dir, sizeof(d->log_dir), "%s/%016llx-%s", home,
                      (unsigned long long)XXH3_64bits(arena, strlen(arena)), opt->job_name) >= (int)sizeof(d->log_dir))
        why = "the path is too long";
    else if (!private_dir(home))
        why = "it cannot be made this user's alone";
    if (!why && !private_dir(d->log_dir))
        why = "it cannot be made this user's alone";
    char note[PATH_MAX + 16], text[PATH_MAX + 1];
    int len = snprintf(text, sizeof(text), "%s\n", arena);
    snprintf(note, sizeof(note), "%s/" CKPT_LOG_HOME_ARENA, d->log_dir);
    if (!why && d->log_dir[0] && strcmp(d->log_dir, arena) && ckpt_write_whole(note, text, (size_t)len) < 0)
        ckpt_log(CKPT_DEBUG, "cannot note the arena in %s: ckpt-inspect gc will not find these logs", note);
    if (why) {
        d->log_dir[0] = '\0';
        ckpt_log(CKPT_WARN, "the replay logs stay in the arena, bounded by CKPT_REPLAY_LOG_MAX (a long job loses its "
                 "protection when they reach it): no directory for them under %s (%s); set CKPT_REPLAY_LOG_DIR or "
                 "CKPT_PERSIST_DIRS to a directory on disk", CKPT_LOG_HOME, why);
        return;
    }
    d->log_default = true;
}

/*
 * Opens the engine when CKPT_PERSIST_DIRS is set.  CKPT_PERSIST_EVERY=0
 * turns persisting off but keeps recovery from what an earlier run wrote.
 * A failure to open is said and leaves the job running without it.  Then
 * decides where the ranks keep their replay logs (log_dir).
 */
void disk_open(struct disk *d, const struct options *opt)
{
    struct ckpt_persist_opts o;
    char why[512];
    const char *given = ckpt_cfg_str(CFG_REPLAY_LOG_DIR);

    memset(d, 0, sizeof(*d));
    d->every = (unsigned)ckpt_cfg_int(CFG_PERSIST_EVERY);
    if (given && strcmp(given, CKPT_LOG_IN_ARENA) == 0)
        ; /* the user's choice: in memory, bounded */
    else if (given && *given)
        snprintf(d->log_dir, sizeof(d->log_dir), "%s", given);
    ckpt_persist_opts_from_config(&o);
    if (!o.dirs || !*o.dirs) {
        if (!given || !*given)
            default_log_dir(d, opt);
        return;
    }
    if (arena_job_dir(opt, d->pin, sizeof(d->pin)) < 0) {
        ckpt_log(CKPT_WARN, "the arena path under %s is too long: snapshots are not persisted", opt->arena_root);
        return;
    }
    int rc = ckpt_persist_open(&d->engine, &o, why, sizeof(why));
    if (rc < 0) {
        ckpt_log(CKPT_WARN, "cannot persist snapshots to %s: %s; the job runs without", o.dirs, why);
        d->engine = NULL;
        return;
    }
    /* The replay logs go whole to disk beside the generations, so that the
     * arena holds none of them at any age of the job. */
    if ((!given || !*given) &&
        ckpt_persist_job_dir(d->engine, opt->job_name, d->log_dir, sizeof(d->log_dir), why, sizeof(why)) < 0) {
        d->log_dir[0] = '\0';
        ckpt_log(CKPT_WARN, "the replay logs stay in the arena: %s", why);
    }
}


/* Says why a persist failed: faults once per kind, with the engine's reason naming the path. */
static void failed(struct disk *d, uint64_t iteration, int rc, const char *why)
{
    if (rc == -ECANCELED) {
        ckpt_log(CKPT_INFO, "the persist of iteration %llu was cancelled; nothing of it is left",
                 (unsigned long long)iteration);
        return;
    }
    if (rc == -ESTALE || rc == -EEXIST) {
        d->skipped++; /* the slot moved on, or an earlier launch persisted it: nothing is wrong */
        ckpt_log(CKPT_DEBUG, "iteration %llu not persisted: %s", (unsigned long long)iteration, why);
        return;
    }
    d->failed++;
    unsigned kind = -rc < 63 ? (unsigned)-rc : 63;
    if (d->warned & (1ull << kind))
        return;
    d->warned |= 1ull << kind;
    ckpt_log(CKPT_WARN, "cannot persist iteration %llu: %s; the last complete generation is kept and training "
             "goes on", (unsigned long long)iteration, why);
}

static void *worker(void *arg)
{
    struct disk *d = arg;
    struct ckpt_persist_req rq = { .arena = d->arena, .job = d->job, .ranks = d->ranks, .nranks = d->nranks,
                                   .iteration = d->iteration };
    struct ckpt_persist_stats st = {0};

    uint64_t t0 = ckpt_now_ns();
    d->out_rc = ckpt_persist_generation(d->engine, &rq, &st, d->out_why, sizeof(d->out_why));
    if (d->own_pin)
        ckpt_pins_remove(d->pin);
    if (d->out_rc == 0) {
        /* The write on each rank's timeline (its disk-writes lane). */
        struct ckpt_tl_event e = {.start_ns = t0, .end_ns = ckpt_now_ns(), .arg = st.logical_bytes / st.nranks,
                                  .kind = CKPT_TL_DISK, .detail = (uint32_t)st.iteration};
        char dir[PATH_MAX];
        for (unsigned i = 0; i < d->nranks; i++)
            if (ckpt_arena_path(dir, sizeof(dir), d->arena, d->job, d->ranks[i]) == 0)
                ckpt_tl_agent_add(dir, &e);
        ckpt_log(CKPT_DEBUG, "persisted iteration %llu: %llu bytes of state, %llu written, in %.3f s",
                 (unsigned long long)st.iteration, (unsigned long long)st.logical_bytes,
                 (unsigned long long)st.moved_bytes, st.seconds);
    }
    d->out_iteration = st.iteration;
    d->out_bytes = st.moved_bytes; /* written: a log named, not copied, and chunks stored once are not */
    d->out_seconds = st.seconds;
    __atomic_store_n(&d->done, true, __ATOMIC_RELEASE);
    return NULL;
}

/* Joins a worker that has finished and counts what it did (the counters
 * are the main thread's: the metrics and the summary read them); true
 * when none is running now. */
static bool reap_worker(struct disk *d)
{
    if (d->running && __atomic_load_n(&d->done, __ATOMIC_ACQUIRE)) {
        pthread_join(d->thread, NULL);
        d->running = false;
        if (d->out_rc == 0) {
            d->persisted++;
            if (d->out_iteration > d->newest)
                d->newest = d->out_iteration;
            d->bytes += d->out_bytes;
            d->seconds += d->out_seconds;
        } else {
            failed(d, d->iteration, d->out_rc, d->out_why);
        }
    }
    return !d->running;
}

/*
 * The newest iteration every rank of the launch has committed, or 0.
 * Ranks we started are first_rank.. (nproc of them); a wrapped launcher's
 * are those that have reported.
 */
static uint64_t all_committed(const struct job *job)
{
    const struct channel *c = &job->chan;
    int first = job->opt->wrap ? 0 : job->opt->first_rank;
    int want = job->opt->wrap ? c->nreports : job->opt->nproc;
    uint64_t k = 0;

    if (first + want > c->nreports)
        return 0;
    for (int i = first; i < first + want; i++) {
        const struct report *r = &c->reports[i];
        if (job->opt->wrap && !r->pid)
            continue;
        if (!r->committed_iteration)
            return 0;
        if (!k || r->committed_iteration < k)
            k = r->committed_iteration;
    }
    return k;
}

/* The ranks a persist starting now covers, into d->ranks (never while one runs: its worker reads them). */
static int pick_ranks(struct disk *d, const struct job *job)
{
    const struct options *opt = job->opt;
    const struct channel *c = &job->chan;
    bool wrapped = !opt->coord && opt->wrap;
    int first = wrapped ? 0 : opt->first_rank, want = wrapped ? c->nreports : opt->nproc;
    int *ranks = realloc(d->ranks, (want ? want : 1) * sizeof(int));

    if (!ranks)
        return -ENOMEM;
    d->ranks = ranks;
    d->cap = want;
    d->nranks = 0;
    for (int i = first; i < first + want; i++)
        if (!wrapped || c->reports[i].pid)
            d->ranks[d->nranks++] = i;
    return 0;
}

/* Whether a persist is running (one that has ended is reaped). */
bool disk_busy(struct disk *d)
{
    return !reap_worker(d);
}

/*
 * Starts persisting iteration @k of this node's ranks.  With @own_pin the
 * pin file is written here and removed when the persist ends; without, the
 * caller keeps @k pinned (member.c, whose pin file says more).  Returns 0
 * or -errno (said).
 */
int disk_start(struct job *job, uint64_t k, bool own_pin)
{
    struct disk *d = &job->disk;
    const struct options *opt = job->opt;
    pthread_t t;
    int rc;

    if (d->running)
        return -EBUSY;
    if ((rc = pick_ranks(d, job)) < 0)
        return rc;
    if (own_pin && (rc = ckpt_pins_write(d->pin, &(struct ckpt_pins){ .keep = { k }, .n = 1 })) < 0) {
        failed(d, k, rc, "cannot write the pin file");
        return rc;
    }
    d->own_pin = own_pin;
    d->started = d->commits;
    d->arena = opt->arena_root;
    d->job = opt->job_name;
    d->iteration = k;
    d->done = false;
    if ((rc = pthread_create(&t, NULL, worker, d)) != 0) {
        if (own_pin)
            ckpt_pins_remove(d->pin);
        failed(d, k, -rc, "cannot start the persist thread");
        return -rc;
    }
    d->thread = t;
    d->running = true;
    return 0;
}

/*
 * After the channel was read: counts a new iteration every rank of the
 * node committed, and whether a persist is due (this file's opening).
 * Returns the iteration when one is due and none runs, else 0.
 */
uint64_t disk_due(struct job *job)
{
    struct disk *d = &job->disk;

    if (!d->engine || !d->every || job->phase != JOB_RUNNING)
        return 0;
    bool idle = reap_worker(d);
    uint64_t k = all_committed(job), since;
    if (k > d->seen) {
        d->seen = k;
        d->commits++;
        if (d->newest && k > d->newest && k - d->newest > d->worst_lag)
            d->worst_lag = k - d->newest;
        since = d->commits - d->started;
        if (!idle && since >= d->every && since % d->every == 0) {
            d->skipped++;
            ckpt_log(CKPT_DEBUG, "iteration %llu not persisted: the persist of iteration %llu is still running",
                     (unsigned long long)k, (unsigned long long)d->iteration);
        }
    }
    return idle && d->seen && d->commits - d->started >= d->every ? d->seen : 0;
}

/* One node: once a restore is live, the generations of later iterations
 * go (they name parts of the logs the restore cut away, and a later
 * persist of the same iteration would find them there); then starts a
 * persist when one is due. */
void disk_tick(struct job *job)
{
    struct disk *d = &job->disk;
    if (d->retire_after && job->chan.restored_s > 0 && !disk_busy(d)) {
        disk_supersede(job, d->retire_after);
        d->retire_after = 0;
    }
    uint64_t k = disk_due(job);
    if (k)
        disk_start(job, k, true);
}

/* Asks a running persist to stop; safe from any thread. */
void disk_cancel(struct disk *d)
{
    if (d->engine)
        ckpt_persist_cancel(d->engine);
}

/*
 * Waits for a running persist to end.  SIGINT or SIGTERM meanwhile cancel
 * it and are recorded as the job's stop signal; returns false then.
 */
bool disk_wait(struct job *job)
{
    struct disk *d = &job->disk;
    bool go_on = true;

    while (!reap_worker(d)) {
        int sig = job_wait_signal(job, 50);
        if (!sig)
            continue;
        ckpt_log(CKPT_INFO, "got %s while persisting iteration %llu; cancelling it", sig_name(sig),
                 (unsigned long long)d->iteration);
        if (!job->out.stop_signal)
            job->out.stop_signal = sig;
        disk_cancel(d);
        go_on = false;
    }
    return go_on;
}

/*
 * Reads the newest complete generation below @below (0: any) back into
 * the arena; one that does not restore is skipped with its reason and the
 * next older one tried.  Returns its iteration, or 0 when there is none.
 * The ranks must be gone and no persist running (disk_wait).
 */
uint64_t disk_restore(struct job *job, uint64_t below)
{
    struct disk *d = &job->disk;
    const struct options *opt = job->opt;
    struct ckpt_persist_req rq = { .arena = opt->arena_root, .job = opt->job_name };
    struct ckpt_persist_stats st;
    struct ckpt_persist_gen g;
    struct restore_point pt;
    char why[512];

    while (d->engine) {
        int rc = ckpt_persist_newest(d->engine, opt->job_name, below, 0, &g, why, sizeof(why));
        if (rc == -ENOENT) {
            ckpt_log(CKPT_INFO, "no complete generation of job %s on disk%s", opt->job_name,
                     below ? " older than the one refused" : "");
            return 0;
        }
        if (rc < 0) {
            ckpt_log(CKPT_WARN, "cannot look for generations on disk: %s", why);
            return 0;
        }
        rq.iteration = g.iteration;
        below = g.iteration;
        if ((rc = ckpt_persist_restore(d->engine, &rq, &st, why, sizeof(why))) < 0) {
            ckpt_log(CKPT_WARN, "cannot restore iteration %llu from disk: %s; trying an older one",
                     (unsigned long long)g.iteration, why);
            continue;
        }
        /* The arena is checked as after any failure: only a snapshot every rank verifies is used. */
        if (!arena_pick(opt, g.iteration + 1, &pt, why, sizeof(why)) || pt.iteration != g.iteration) {
            ckpt_log(CKPT_WARN, "iteration %llu read back from disk does not verify in the arena (%s); trying an "
                     "older one", (unsigned long long)g.iteration, why);
            continue;
        }
        ckpt_log(CKPT_INFO, "restoring generation %llu (iteration %llu) from disk", (unsigned long long)pt.generation,
                 (unsigned long long)pt.iteration);
        return d->restored = pt.iteration;
    }
    return 0;
}

/*
 * Reads the generation of iteration @it back into the arena (every rank of
 * the node).  Returns 0, or -errno after saying why.  The ranks must be
 * gone and no persist running.
 */
int disk_read(struct job *job, uint64_t it)
{
    struct disk *d = &job->disk;
    const struct options *opt = job->opt;
    struct ckpt_persist_req rq = { .arena = opt->arena_root, .job = opt->job_name, .iteration = it };
    struct ckpt_persist_stats st;
    char why[512];

    if (!d->engine || !it)
        return -ENOENT;
    int rc = ckpt_persist_restore(d->engine, &rq, &st, why, sizeof(why));
    if (rc < 0)
        ckpt_log(CKPT_WARN, "cannot read iteration %llu back from disk: %s", (unsigned long long)it, why);
    else
        d->restored = it;
    return rc;
}

/*
 * Restoring @after: this node's generations of later iterations are
 * removed (ckpt_persist_retire says why).  No persist may be running.
 */
void disk_supersede(struct job *job, uint64_t after)
{
    struct disk *d = &job->disk;
    char why[512];

    if (!d->engine)
        return;
    if (ckpt_persist_retire(d->engine, job->opt->job_name, after, "this node's", why, sizeof(why)) < 0)
        ckpt_log(CKPT_WARN, "cannot retire the generations on disk newer than the restore point %llu: %s",
                 (unsigned long long)after, why);
    else if (d->newest > after)
        d->newest = 0;
}

/* Ends persisting: waits for the running persist and says what was done. */
void disk_finish(struct job *job)
{
    struct disk *d = &job->disk;

    if (!d->engine || !d->every)
        return;
    disk_wait(job);
    double s = d->seconds > 0 ? d->seconds : 1e-9;
    ckpt_log(CKPT_INFO, "persisted %llu generation%s (skipped %llu, failed %llu), %llu bytes written, %.1f MB/s",
             (unsigned long long)d->persisted, d->persisted == 1 ? "" : "s", (unsigned long long)d->skipped,
             (unsigned long long)d->failed, (unsigned long long)d->bytes, d->bytes / s / 1e6);
}

void disk_close(struct disk *d)
{
    if (d->running) {
        ckpt_persist_cancel(d->engine);
        pthread_join(d->thread, NULL);
        ckpt_pins_remove(d->pin);
    }
    if (d->engine)
        ckpt_persist_close(d->engine);
    if (d->log_default) /* once the logs are gone with the arena and the replicas (a job kept keeps them) */
        ckpt_rlog_home_close(d->log_dir);
    free(d->ranks);
    memset(d, 0, sizeof(*d));
}
