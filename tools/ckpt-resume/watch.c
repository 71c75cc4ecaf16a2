/*
 * Watching a running job until nothing of it is left: reaping ranks and
 * their orphans, forwarding SIGINT/SIGTERM/SIGHUP to the job, reading the
 * ranks' reports on the agent channel, and stopping the job (SIGTERM,
 * then SIGKILL after CKPT_KILL_GRACE) when a rank fails or hangs, when we
 * are told to stop, or when the ranks have exited and left processes
 * behind.  The first failure decides the job's exit code; what the others
 * do while being stopped never does.  This file never leaves a process of
 * the job running when job_watch() returns, short of one that SIGKILL
 * cannot end, which it names.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "resume.h"

/*
 * How long to wait for processes to vanish after SIGKILL.  They normally
 * do at once; one that does not is stuck in the kernel, and waiting longer
 * would only hang the launcher.
 */
#define KILL_WAIT_S 5.0

const char *sig_name(int sig)
{
    static __thread char buf[16];
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, sizeof(buf), "SIG%s", abbrev);
    else
        snprintf(buf, sizeof(buf), "signal %d", sig);
    return buf;
}

/*
 * Calls @fn for each child of ours outside the job's process group: orphans
 * that had moved to a group or session of their own before their parent
 * died and they came back to us.  An orphan goes to the main thread (the
 * thread group's leader, alive as long as we run), which started the
 * ranks too; the coordinator's thread has children of its own, the nodes
 * it started (spawn.c), which are never the job's strays.
 */
static void for_each_stray(struct job *job, void (*fn)(pid_t pid, int sig), int sig)
{
    char path[64];

    snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    int pid;
    while (fscanf(f, "%d", &pid) == 1)
        if (getpgid(pid) != job->pgid && !standby_owns(job, pid))
            fn(pid, sig);
    fclose(f);
}

static void kill_one(pid_t pid, int sig)
{
    kill(pid, sig);
}

static void name_one(pid_t pid, int sig)
{
    (void)sig;
    ckpt_log(CKPT_WARN, "process %d (outside the job's process group) survived SIGKILL", (int)pid);
}

/*
 * Sends @sig to the job's process group and to every stray.  SIGCONT
 * follows SIGTERM, so that a stopped process (a hung rank someone
 * SIGSTOPped) can act on it now rather than at SIGKILL.
 */
static void job_signal(struct job *job, int sig)
{
    if (sig == SIGTERM)
        job->term_sent = true;
    if (job->pgid > 0)
        kill(-job->pgid, sig);
    for_each_stray(job, kill_one, sig);
    if (sig == SIGTERM) {
        if (job->pgid > 0)
            kill(-job->pgid, SIGCONT);
        for_each_stray(job, kill_one, SIGCONT);
    }
}

/*
 * Sends @sig to the job; the first time, also starts the grace period
 * after which SIGKILL follows.  Later calls never move that deadline.
 */
void job_stop(struct job *job, int sig)
{
    if (job->phase == JOB_RUNNING) {
        job->phase = JOB_TERMINATING;
        job->deadline = ckpt_now_s() + job->opt->kill_grace_s;
    }
    job_signal(job, sig);
}

/* Records how the process @pid ended if it is a rank; the first failure stops the job. */
static void reaped(struct job *job, pid_t pid, int status)
{
    int i;

    if (standby_reaped(job, pid, status))
        return;
    channel_ended(&job->chan, pid);
    for (i = 0; i < job->opt->nproc; i++)
        if (job->ranks[i].pid == pid)
            break;
    if (i == job->opt->nproc)
        return; /* a descendant of a rank, reaped as its subreaper */

    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    int rank = job->opt->first_rank + i;
    job->ranks[i].pid = 0;
    if (--job->running == 0)
        job_ranks_pgid_set(0);
    if (code == RESUME_EXIT_REFUSED && job->restore && job->out.refused_rank < 0)
        job->out.refused_rank = rank;
    channel_read(&job->chan, job->opt); /* a NO_ROOM sent just before the exit */
    if (code == RESUME_EXIT_NO_ROOM && job->chan.no_room_rank >= 0 && job->out.no_room_rank < 0)
        job->out.no_room_rank = job->chan.no_room_rank;
    if (code == 0 || job->out.failed_rank >= 0)
        return;

    job->out.exit_code = code;
    job->out.failed_rank = rank;
    job->out.failed_s = ckpt_now_s();
    /* A refused restore and a host without room are said and handled apart. */
    job->out.early = !WIFSIGNALED(status) && code != RESUME_EXIT_REFUSED && code != RESUME_EXIT_NO_ROOM &&
                     !channel_ticked(&job->chan);
    if (WIFSIGNALED(status))
        ckpt_log(CKPT_INFO, "rank %d (pid %d) was killed by %s", rank, (int)pid, sig_name(WTERMSIG(status)));
    else
        ckpt_log(CKPT_INFO, "rank %d (pid %d) exited with status %d", rank, (int)pid, code);
    if (job->member)
        member_failed(job);
    if (job->phase != JOB_RUNNING)
        return; /* already stopping: let the others finish with the signal they got */
    if (job->running > 0)
        ckpt_log(CKPT_INFO, "stopping the other ranks (SIGTERM, SIGKILL after %gs)", job->opt->kill_grace_s);
    job_stop(job, SIGTERM);
}

/* Has the job a process left: a child of ours that is not a standby? */
static bool job_left(struct job *job)
{
    char path[64];
    int pid;
    bool any = false;
    snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f)
        return true;
    while (!any && fscanf(f, "%d", &pid) == 1)
        any = !standby_owns(job, pid);
    fclose(f);
    return any;
}

/* Reaps every child that has ended; false once the job has no process
 * left (its standbys, which outlive it, aside). */
static bool reap(struct job *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG | __WNOTHREAD); /* not the coordinator's (spawn.c) */
        if (pid == 0)
            return job->running > 0 || !job->sb.running || job_left(job);
        if (pid < 0)
            return errno == EINTR;
        reaped(job, pid, status);
    }
}

/* A signal we were sent: the job gets it too, and is on its way to stop. */
static void forward(struct job *job, int sig)
{
    ckpt_log(CKPT_INFO, "got %s, passing it to the job", sig_name(sig));
    if (sig == SIGINT || sig == SIGTERM)
        disk_cancel(&job->disk); /* the persist of a job being stopped would only delay the stop */
    if (!job->out.stop_signal)
        job->out.stop_signal = sig;
    job_stop(job, sig);
}

/*
 * With hang detection on, a running job one of whose ranks has reached no
 * iteration boundary for CKPT_HANG_TIMEOUT is stopped, as a failure of
 * that rank.  Returns the milliseconds until the next check is due, -1
 * when none is.
 */
static int check_hang(struct job *job)
{
    double timeout = job->opt->hang_timeout_s, next;
    if (timeout <= 0 || job->phase != JOB_RUNNING)
        return -1;
    int r = channel_hung(&job->chan, timeout, &next);
    if (r < 0)
        return next < 0 ? -1 : (int)(next * 1000) + 1;

    ckpt_log(CKPT_INFO, "rank %d hung: no iteration boundary for %g s (last iteration %llu)", r, timeout,
             (unsigned long long)job->chan.reports[r].iteration);
    job->out.exit_code = RESUME_EXIT_HUNG;
    job->out.failed_rank = r;
    job->out.failed_s = ckpt_now_s();
    if (job->member)
        member_failed(job);
    ckpt_log(CKPT_INFO, "stopping the job (SIGTERM, SIGKILL after %gs)", job->opt->kill_grace_s);
    job_stop(job, SIGTERM);
    return -1;
}

/* Milliseconds until the phase's deadline, for poll(); -1 while running. */
static int timeout_ms(const struct job *job)
{
    if (job->phase == JOB_RUNNING)
        return -1;
    double left = job->deadline - ckpt_now_s();
    return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

/* The phase's deadline has passed: escalate, or give up on what SIGKILL cannot end. */
static bool deadline_passed(struct job *job)
{
    if (job->phase == JOB_TERMINATING) {
        ckpt_log(CKPT_INFO, "the job is still running %gs after SIGTERM; sending SIGKILL", job->opt->kill_grace_s);
        job->phase = JOB_KILLING;
        job->deadline = ckpt_now_s() + KILL_WAIT_S;
        job_signal(job, SIGKILL);
        return true;
    }
    if (job->pgid > 0 && kill(-job->pgid, 0) == 0)
        ckpt_log(CKPT_WARN, "processes of group %d survived SIGKILL", (int)job->pgid);
    for_each_stray(job, name_one, 0);
    return false;
}

/*
 * Waits until the job has no process left, stopping it as this file's
 * opening says; the outcome is in job->out.  Returns early only when
 * processes survive SIGKILL (named in the log), or when the signalfd fails.
 */
int job_wait_signal(struct job *job, int timeout_ms)
{
    struct pollfd pfd = {.fd = job->sigfd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0)
        return 0;
    struct signalfd_siginfo si;
    while (read(job->sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo != SIGCHLD)
            return (int)si.ssi_signo;
        while (waitpid(-1, NULL, WNOHANG | __WNOTHREAD) > 0)
            ; /* leftovers of a stopped job: reaped, nothing else */
    }
    return 0;
}

/*
 * A rank that refused its restore says so on the agent channel as well as
 * by its exit status, which a launcher between us and it (torchrun) may
 * not pass on: either makes the launch a refused one.
 */
static void take_refusal(struct job *job)
{
    channel_read(&job->chan, job->opt);
    if (job->restore && job->out.refused_rank < 0 && job->chan.refused_rank >= 0)
        job->out.refused_rank = job->chan.refused_rank;
    if (job->out.no_room_rank < 0 && job->chan.no_room_rank >= 0)
        job->out.no_room_rank = job->chan.no_room_rank;
}

static void watch(struct job *job)
{
    for (;;) {
        if (!reap(job))
            return;
        /*
         * What the ranks left behind gets SIGTERM once they are gone, even
         * when the job was stopped with another signal: a shell's
         * background children ignore SIGINT.
         */
        if (job->running == 0 && !job->term_sent) {
            ckpt_log(CKPT_INFO, "the ranks have exited; stopping the processes they left");
            job_stop(job, SIGTERM);
        }
        /* Orphans outside the group may have come back since the last SIGKILL. */
        if (job->phase == JOB_KILLING)
            job_signal(job, SIGKILL);

        int hang_ms = check_hang(job), wait_ms = timeout_ms(job);
        if (hang_ms >= 0 && (wait_ms < 0 || hang_ms < wait_ms))
            wait_ms = hang_ms;
        struct pollfd pfd[3 + MEMBER_FDS] = {
            { .fd = job->sigfd, .events = POLLIN },
            { .fd = job->chan.fd, .events = POLLIN },
            { .fd = job->sb.on ? job->sb.chan.fd : -1, .events = POLLIN },
        };
        int nfds = 3;
        if (job->member) {
            int member_ms = member_prepare(job, pfd + 3);
            nfds += MEMBER_FDS;
            if (member_ms >= 0 && (wait_ms < 0 || member_ms < wait_ms))
                wait_ms = member_ms;
        }
        metrics_update(job, false);
        int n = poll(pfd, nfds, wait_ms);
        if (job->member)
            member_events(job, pfd + 3);
        if (n < 0 && errno != EINTR) {
            ckpt_log(CKPT_ERROR, "cannot wait for the job: %s", strerror(errno));
            return;
        }
        if (n == 0 && job->phase != JOB_RUNNING && ckpt_now_s() >= job->deadline) {
            if (!deadline_passed(job))
                return;
            continue;
        }
        if (n <= 0)
            continue;

        if (pfd[1].revents) {
            channel_read(&job->chan, job->opt);
            if (job->member)
                member_tick(job);
            else
                disk_tick(job);
        }
        if (pfd[1].revents || pfd[2].revents)
            standby_tick(job);
        struct signalfd_siginfo si;
        while (read(job->sigfd, &si, sizeof(si)) == sizeof(si))
            if (si.ssi_signo != SIGCHLD)
                forward(job, (int)si.ssi_signo);
    }
}

void job_watch(struct job *job)
{
    watch(job);
    job->stopped_s = ckpt_now_s();
    metrics_update(job, true);
    take_refusal(job);
}
