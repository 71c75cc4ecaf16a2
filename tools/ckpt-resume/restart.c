/*
 * The life of a job: launch, watch, decide, for as many launches as its
 * failures and CKPT_MAX_RESTARTS allow.  A restart goes back to the newest
 * iteration that every rank holds a verified snapshot of in the arena (or
 * to the beginning when there is none, saying why).  A rank that refuses
 * a restore has not failed the program: the next older common iteration
 * is tried, then a clean start, each step said with its reason, and none
 * of them counts as a restart.  Restarts wait, twice as long each time, so
 * a fault that persists does not spin.  This file decides and says; it
 * never chooses a snapshot that did not verify on every rank.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "resume.h"

/* Seconds to wait before restart number @n (1, 2, ...). */
double backoff_s(const struct options *opt, int n)
{
    double d = opt->backoff_s;
    for (int i = 1; i < n && d < RESUME_MAX_BACKOFF_S; i++)
        d *= 2;
    return d < RESUME_MAX_BACKOFF_S ? d : RESUME_MAX_BACKOFF_S;
}

/*
 * Waits before restart number @n.  Returns false when a signal told us to
 * stop meanwhile: then nothing is restarted.  Orphans of the last launch
 * that come back to us while we wait are reaped.
 */
static bool backoff(struct job *job, int n)
{
    double delay = backoff_s(job->opt, n), end = ckpt_now_s() + delay;

    if (delay > 0)
        ckpt_log(CKPT_INFO, "restart %d of %d in %g s", n, job->opt->max_restarts, delay);
    for (double left = delay; left > 0; left = end - ckpt_now_s()) {
        int sig = job_wait_signal(job, (int)(left * 1000) + 1);
        if (sig) {
            ckpt_log(CKPT_INFO, "got %s while waiting to restart; not restarting", sig_name(sig));
            job->out.stop_signal = sig;
            return false;
        }
    }
    return true;
}

/*
 * Where a restart after a failure goes back to: an iteration, or 0 for the
 * beginning.  With nothing usable in the arena, the newest generation on
 * disk is read back into it.
 */
static uint64_t restart_point(struct job *job)
{
    struct restore_point pt;
    char why[512], reported[256];
    uint64_t it;

    if (arena_pick(job->opt, 0, &pt, why, sizeof(why))) {
        ckpt_log(CKPT_INFO, "restarting from generation %llu (iteration %llu)", (unsigned long long)pt.generation,
                 (unsigned long long)pt.iteration);
        return pt.iteration;
    }
    if (job->disk.engine) {
        ckpt_log(CKPT_INFO, "nothing to restart from in the arena (%s); looking on disk", why);
        if ((it = disk_restore(job, 0)))
            return it;
    }
    channel_committed(&job->chan, reported, sizeof(reported));
    ckpt_log(CKPT_INFO, "restarting from the beginning: %s%s%s%s", why, *reported ? " (newest commits reported: " : "",
             reported, *reported ? ")" : "");
    return 0;
}

/*
 * Where to go after the restore of @refused was refused: older (arena,
 * then disk) into *@it.  With none, a clean start (*@it = 0) only when
 * CKPT_FALLBACK=clean allows it: it throws away all training and may
 * overwrite the program's outputs.  Returns false when the job stops.
 */
static bool fall_back(struct job *job, uint64_t refused, uint64_t newest, uint64_t *it)
{
    const struct options *opt = job->opt;
    struct restore_point pt;
    char why[512];

    if (arena_pick(opt, refused, &pt, why, sizeof(why))) {
        ckpt_log(CKPT_INFO, "falling back to generation %llu (iteration %llu), the next older iteration every "
                 "rank holds a verified snapshot of", (unsigned long long)pt.generation,
                 (unsigned long long)pt.iteration);
        *it = pt.iteration;
        return true;
    }
    /* The disk's copy of an iteration whose arena copy was refused may still be good. */
    if (job->disk.engine && (*it = disk_restore(job, refused == job->disk.restored ? refused : refused + 1)))
        return true;
    *it = 0;
    if (ckpt_cfg_int(CFG_FALLBACK) == 1) {
        ckpt_log(CKPT_INFO, "falling back to a clean start (CKPT_FALLBACK=clean): %s; the training up to "
                 "iteration %llu is lost", why, (unsigned long long)newest);
        return true;
    }
    ckpt_log(CKPT_ERROR, "no snapshot of this job can be restored (%s): the job stops here, with its snapshots "
             "kept; CKPT_FALLBACK=clean would start it again from the beginning, losing the training up to "
             "iteration %llu", why, (unsigned long long)newest);
    return false;
}

/*
 * The job's arena when it is over: removed after success (unless
 * CKPT_KEEP_ARENA), kept after a failure, with its path said, so that it
 * can be restored from by hand.
 */
void job_settle(const struct options *opt, int code)
{
    char dir[PATH_MAX];
    struct stat st;

    if (code == 0 && !opt->keep_arena) {
        arena_unlock();
        arena_remove(opt);
        if (opt->coord)
            rep_remove(opt);
        return;
    }
    if (arena_job_dir(opt, dir, sizeof(dir)) == 0 && stat(dir, &st) == 0)
        ckpt_log(CKPT_INFO, "the job's arena is kept in %s (CKPT_JOB=%s)", dir, opt->job_name);
}

/*
 * Adds to the end-of-job line how the recovery from the failure seen at
 * @since was made, and how long it took until every rank was restored.
 */
void job_recovered(struct job *job, const char *how, double since)
{
    char one[64];
    size_t len = strlen(job->recovered);

    if (!job->restore)
        how = "from the start"; /* no snapshot left to restore: a clean start */
    if (job->chan.restored_s > 0)
        snprintf(one, sizeof(one), "%s %.3f s", how, job->chan.restored_s - since);
    else
        snprintf(one, sizeof(one), "%s%s", how, job->opt->wrap || !strcmp(how, "from the start") ? "" : ", not restored");
    if (len + strlen(one) + 3 < sizeof(job->recovered) - 16)
        snprintf(job->recovered + len, sizeof(job->recovered) - len, "%s%s", len ? ", " : "", one);
    else
        job->recovered_more++;
}

/*
 * Runs the job to its end, as this file's opening says.  Returns the
 * job's exit code (its last launch's); *@restarts is the number of
 * restarts after failures.
 */
int job_run(struct job *job, int *restarts)
{
    const struct options *opt = job->opt;
    const struct outcome *out = &job->out;
    uint64_t restore = opt->first_restore, newest = restore;

    bool took_over = false, launched = false;
    int early_code = -1;    /* the last launch failed with this exit status before any boundary */
    const char *how = NULL; /* a recovery under way: how it is made */
    double since = 0;       /* and when its failure was seen */

    *restarts = 0;
    for (;;) {
        if (!took_over && !restore && launched)
            arena_supersede(opt, 0); /* started again from the beginning: nothing of the failed run counts */
        launched = true;
        bool started = took_over || job_launch(job, restore) == 0;
        took_over = false;
        job_watch(job);
        if (how && (job->chan.restored_s > 0 || out->refused_rank < 0)) {
            job_recovered(job, how, since); /* a refused restore falls back: the same recovery goes on */
            how = NULL;
        }
        /* A restore into the arena must not race the persist reading it. */
        if (!disk_wait(job) || out->exit_code == 0 || out->stop_signal)
            break;
        if (!started)
            break; /* what could not be started will not start on a restart either */
        if (out->no_room_rank >= 0) {
            ckpt_log(CKPT_ERROR, "rank %d stopped the job: it cannot have its arena on this host (said above); "
                     "not restarted, as a restart would not either", out->no_room_rank);
            break;
        }
        if (out->refused_rank >= 0) {
            ckpt_log(CKPT_INFO, "rank %d refused the restore of iteration %llu (exit %d): not a failure of the program",
                     out->refused_rank, (unsigned long long)restore, RESUME_EXIT_REFUSED);
            if (!fall_back(job, restore, newest, &restore))
                break;
            continue;
        }
        if (out->early && out->exit_code == early_code) {
            ckpt_log(CKPT_ERROR, "rank %d exited with status %d before any rank reached an iteration boundary, on "
                     "two launches in a row: an error in the command or its set-up (its output above says which), "
                     "which a restart would repeat; not restarted again", out->failed_rank, out->exit_code);
            break;
        }
        early_code = out->early ? out->exit_code : -1;
        /* Ranks under another agent would come back from an iteration of its choosing: none but the start is safe. */
        int world = opt->wrap ? channel_elsewhere(&job->chan) : 0;
        if (world && ckpt_cfg_int(CFG_FALLBACK) != 1) {
            ckpt_log(CKPT_ERROR, "not restarted: the ranks say WORLD_SIZE=%d, and the others run under another "
                     "agent, which would restore them from an iteration of its own choosing, not this one's; "
                     "CKPT_FALLBACK=clean would start the job again from the beginning (run one ckpt-resume "
                     "--coord etcd://HOST:PORT --nnodes N --nproc P -- CMD per node to have it restored)", world);
            break;
        }
        if (*restarts >= opt->max_restarts) {
            if (opt->max_restarts > 0)
                ckpt_log(CKPT_INFO, "giving up after %d restart%s", *restarts, *restarts == 1 ? "" : "s");
            break;
        }
        ++*restarts;
        metrics_restart();
        since = out->failed_s > 0 ? out->failed_s : ckpt_now_s();
        if (!backoff(job, *restarts))
            break;
        if (world)
            ckpt_log(CKPT_INFO, "starting the job again from the beginning (CKPT_FALLBACK=clean): its ranks under "
                     "another agent could not be restored to the same iteration");
        restore = world ? 0 : restart_point(job);
        if (restore > newest)
            newest = restore;
        job->recovering = restore ? "standby" : NULL; /* a start from the beginning restores nothing */
        job->recovering_since = since;
        if (restore && standby_take_over(job, restore) == 0) {
            took_over = true;
            how = "standby";
            continue;
        }
        how = "cold";
        job->recovering = restore ? how : NULL;
        if (job->out.stop_signal)
            break;
        if (job->sb.on)
            ckpt_log(CKPT_INFO, "recovering by the cold path: the restarted ranks replay from the start");
        job_new_master_port(job);
    }
    standby_stop(job, NULL);
    disk_finish(job);
    job_settle(opt, out->exit_code);
    return out->exit_code;
}
