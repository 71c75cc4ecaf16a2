/*
 * Starting the ranks of a job.  All ranks share one new process group, the
 * job's, so one kill() reaches them and everything they start (a wrapped
 * torchrun's workers, a shell's children); ckpt-resume stays outside it, so
 * a terminal's Ctrl-C reaches the job once, through us.  ckpt-resume is the
 * job's child subreaper: orphans of the job come back to it to be reaped,
 * never to init.  A rank is started with posix_spawn, which reports a
 * failed exec as an error here, and never runs our code after the fork.
 * Every launch of a job gets the same LD_PRELOAD, CKPT_JOB and agent
 * socket; only CKPT_RESTORE differs from one launch to the next.
 */
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "resume.h"

/* Sets *@slot to "@name=@value"; on failure to NULL (asprintf leaves it undefined). */
int job_set_var(char **slot, const char *name, const char *value)
{
    free(*slot);
    if (asprintf(slot, "%s=%s", name, value) < 0) {
        *slot = NULL;
        return -ENOMEM;
    }
    return 0;
}

/*
 * Prepares @job to launch @opt->cmd: picks the master address and port,
 * opens the agent channel, blocks SIGCHLD and the signals we forward (they
 * arrive on job->sigfd instead) and makes us the subreaper.  The caller
 * keeps @opt alive and calls job_close() whatever this returns.
 */
int job_open(struct job *job, const struct options *opt)
{
    sigset_t set;

    memset(job, 0, sizeof(*job));
    job->opt = opt;
    job->sigfd = -1;
    job->chan.fd = -1;
    job->ranks = calloc(opt->nproc, sizeof(*job->ranks));
    if (!job->ranks)
        return -ENOMEM;
    int rc = job_master(&job->master_addr, &job->master_port);
    if (rc < 0)
        return rc;
    rc = channel_open(&job->chan);
    if (rc < 0)
        return rc;
    if ((rc = job_set_var(&job->vars[0], "LD_PRELOAD", opt->preload)) < 0 ||
        (rc = job_set_var(&job->vars[1], "CKPT_JOB", opt->job_name)) < 0 ||
        (rc = job_set_var(&job->vars[2], "CKPT_AGENT_SOCKET", job->chan.path)) < 0)
        return rc;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, &job->rank_mask) < 0)
        return -errno;
    job->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (job->sigfd < 0)
        return -errno;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        return -errno;
    disk_open(&job->disk, opt);
    job->nfixed = 3;
    if (job->disk.log_dir[0] &&
        (rc = job_set_var(&job->vars[job->nfixed++], "CKPT_REPLAY_LOG_DIR", job->disk.log_dir)) < 0)
        return rc;
    return standby_open(job);
}

void job_close(struct job *job)
{
    standby_close(job);
    disk_close(&job->disk);
    if (job->sigfd >= 0)
        close(job->sigfd);
    channel_close(&job->chan);
    for (size_t i = 0; i < sizeof(job->vars) / sizeof(job->vars[0]); i++)
        free(job->vars[i]);
    free(job->ranks);
    free(job->master_addr);
    free(job->master_port);
    memset(job, 0, sizeof(*job));
    job->sigfd = -1;
    job->chan.fd = -1;
}

/* Shell convention for a command that could not be run: 127 not found, 126 not runnable. */
static int exec_failure_code(int err)
{
    return err == ENOENT ? 127 : 126;
}

int spawn_process(struct job *job, int i, char *const *cmd, const char *port, char *const *vars, pid_t *pgid,
                  pid_t *pid)
{
    posix_spawnattr_t attr;
    char **env;

    int rc = rank_env(&env, job->opt, i, job->master_addr, port, vars);
    if (rc < 0)
        return rc;
    rc = posix_spawnattr_init(&attr);
    if (rc == 0) {
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
        posix_spawnattr_setpgroup(&attr, *pgid);
        posix_spawnattr_setsigmask(&attr, &job->rank_mask);
        rc = posix_spawnp(pid, cmd[0], NULL, &attr, cmd, env);
        posix_spawnattr_destroy(&attr);
    }
    rank_env_free(env);
    if (rc != 0)
        return -rc;
    if (!*pgid)
        *pgid = *pid;
    return 0;
}

static pid_t ranks_pgid;

pid_t job_ranks_pgid(void)
{
    return __atomic_load_n(&ranks_pgid, __ATOMIC_ACQUIRE);
}

void job_ranks_pgid_set(pid_t pgid)
{
    __atomic_store_n(&ranks_pgid, pgid, __ATOMIC_RELEASE);
}

/*
 * Starts rank @i in the job's process group (a new one for rank 0), with
 * the signal mask we had before job_open() blocked ours.
 */
static int spawn_rank(struct job *job, int i)
{
    pid_t pid;
    if (i == 0)
        job->pgid = 0;
    int rc = spawn_process(job, i, job->opt->cmd, job->master_port, job->vars, &job->pgid, &pid);
    if (rc < 0)
        return rc;
    job->ranks[i] = (struct rank){ .pid = pid };
    job->running++;
    job_ranks_pgid_set(job->pgid);
    return 0;
}

/*
 * Draws rank 0 a new port for the next launch, unless MASTER_PORT chose it:
 * a port another process took costs one launch, not every restart after it.
 */
void job_new_master_port(struct job *job)
{
    char port[16], *p;
    int rc = job_master_port(port);

    if (rc < 0)
        ckpt_log(CKPT_WARN, "keeping rank 0's port %s: cannot find another free one: %s", job->master_port,
                 strerror(-rc));
    if (rc <= 0 || !(p = strdup(port)))
        return;
    free(job->master_port);
    job->master_port = p;
}

/*
 * Starts every rank, with CKPT_RESTORE=@restore (none when 0).  If one
 * cannot be started, the outcome records it (with the shell's 126/127) and
 * the ranks already running are being stopped when this returns:
 * job_watch() still has to reap them.
 */
int job_launch(struct job *job, uint64_t restore)
{
    const struct options *opt = job->opt;

    /* New ranks write their logs anew: standbys start again behind them. */
    standby_stop(job, NULL);
    job->sb.lost[0] = '\0';
    job->sb.lost_killed = false;
    memset(job->ranks, 0, opt->nproc * sizeof(*job->ranks));
    job->running = 0;
    job->pgid = 0;
    job->phase = JOB_RUNNING;
    job->term_sent = false;
    job->out = (struct outcome){ .failed_rank = -1, .refused_rank = -1, .no_room_rank = -1 };
    job->restore = restore;
    job->disk.retire_after = restore;
    for (int i = job->nfixed; i < job->nfixed + 3; i++) {
        free(job->vars[i]);
        job->vars[i] = NULL;
    }
    int k = job->nfixed;
    if (opt->pythonpath && job_set_var(&job->vars[k++], "PYTHONPATH", opt->pythonpath) < 0)
        k = -1;
    if (restore && k > 0) {
        char value[24];
        snprintf(value, sizeof(value), "%" PRIu64, restore);
        /* Python's own buffer would hand what replay printed to the
         * program's stdout once it goes live: a replaying Python writes
         * through unbuffered, unless the user chose otherwise. */
        if (job_set_var(&job->vars[k++], "CKPT_RESTORE", value) < 0 ||
            (!getenv("PYTHONUNBUFFERED") && job_set_var(&job->vars[k++], "PYTHONUNBUFFERED", "1") < 0))
            k = -1;
    }
    if (k < 0) {
        ckpt_log(CKPT_ERROR, "cannot start the job: %s", strerror(ENOMEM));
        job->out.exit_code = 1;
        job->out.failed_rank = 0;
        return -ENOMEM;
    }
    channel_reset(&job->chan);
    job->disk.seen = 0; /* the commits of this launch count from its restore point */

    for (int i = 0; i < opt->nproc; i++) {
        int rc = spawn_rank(job, i);
        if (rc < 0) {
            ckpt_log(CKPT_ERROR, "cannot start rank %d: %s: %s", opt->first_rank + i, opt->cmd[0], strerror(-rc));
            job->out.exit_code = exec_failure_code(-rc);
            job->out.failed_rank = opt->first_rank + i;
            if (job->running > 0)
                job_stop(job, SIGTERM);
            return rc;
        }
    }
    ckpt_log(CKPT_INFO, "started %d rank%s of %s (process group %d, master %s:%s)", opt->nproc,
             opt->nproc == 1 ? "" : "s", opt->cmd[0], (int)job->pgid, job->master_addr, job->master_port);
    return 0;
}
