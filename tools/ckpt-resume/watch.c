/*
 * Watching a running job until nothing of it is left: reaping ranks and
 * their orphans, forwarding SIGINT/SIGTERM/SIGHUP to the job, and stopping
 * it (SIGTERM, then SIGKILL after CKPT_KILL_GRACE) when a rank fails, when
 * we are told to stop, or when the ranks have exited and left processes
 * behind.  The first failure decides the job's exit code; what the others
 * do while being stopped never does.  This file never leaves a process of
 * the job running when job_watch() returns, short of one that SIGKILL
 * cannot end, which it names.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "resume.h"

/*
 * How long to wait for processes to vanish after SIGKILL.  They normally
 * do at once; one that does not is stuck in the kernel, and waiting longer
 * would only hang the launcher.
 */
#define KILL_WAIT_S 5.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *sig_name(int sig)
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
 * died and they came back to us.  Any thread may have become their parent,
 * so every thread's list is read.
 */
static void for_each_stray(struct job *job, void (*fn)(pid_t pid, int sig), int sig)
{
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *t;
    char path[64];

    if (!tasks)
        return;
    while ((t = readdir(tasks))) {
        if (t->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.20s/children", t->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        int pid;
        while (fscanf(f, "%d", &pid) == 1)
            if (getpgid(pid) != job->pgid)
                fn(pid, sig);
        fclose(f);
    }
    closedir(tasks);
}

static void kill_one(pid_t pid, int sig)
{
    kill(pid, sig);
}

static void name_one(pid_t pid, int sig)
{
    (void)sig;
    resume_log("process %d (outside the job's process group) survived SIGKILL", (int)pid);
}

/* Sends @sig to the job's process group and to every stray. */
static void job_signal(struct job *job, int sig)
{
    if (sig == SIGTERM)
        job->term_sent = true;
    if (job->pgid > 0)
        kill(-job->pgid, sig);
    for_each_stray(job, kill_one, sig);
}

/*
 * Sends @sig to the job; the first time, also starts the grace period
 * after which SIGKILL follows.  Later calls never move that deadline.
 */
void job_stop(struct job *job, int sig)
{
    if (job->phase == JOB_RUNNING) {
        job->phase = JOB_TERMINATING;
        job->deadline = now_s() + job->opt->kill_grace_s;
    }
    job_signal(job, sig);
}

/* Records how the process @pid ended if it is a rank; the first failure stops the job. */
static void reaped(struct job *job, pid_t pid, int status)
{
    int i;

    for (i = 0; i < job->opt->nproc; i++)
        if (job->ranks[i].pid == pid)
            break;
    if (i == job->opt->nproc)
        return; /* a descendant of a rank, reaped as its subreaper */

    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    job->ranks[i].pid = 0;
    job->running--;
    if (code == 0 || job->out.failed_rank >= 0)
        return;

    job->out.exit_code = code;
    job->out.failed_rank = i;
    if (WIFSIGNALED(status))
        resume_log("rank %d (pid %d) was killed by %s", i, (int)pid, sig_name(WTERMSIG(status)));
    else
        resume_log("rank %d (pid %d) exited with status %d", i, (int)pid, code);
    if (job->phase != JOB_RUNNING)
        return; /* already stopping: let the others finish with the signal they got */
    if (job->running > 0)
        resume_log("stopping the other ranks (SIGTERM, SIGKILL after %gs)", job->opt->kill_grace_s);
    job_stop(job, SIGTERM);
}

/* Reaps every child that has ended; false once we have no child left at all. */
static bool reap(struct job *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid == 0)
            return true;
        if (pid < 0)
            return errno == EINTR;
        reaped(job, pid, status);
    }
}

/* A signal we were sent: the job gets it too, and is on its way to stop. */
static void forward(struct job *job, int sig)
{
    resume_log("got %s, passing it to the job", sig_name(sig));
    if (!job->out.stop_signal)
        job->out.stop_signal = sig;
    job_stop(job, sig);
}

/* Milliseconds until the phase's deadline, for poll(); -1 while running. */
static int timeout_ms(const struct job *job)
{
    if (job->phase == JOB_RUNNING)
        return -1;
    double left = job->deadline - now_s();
    return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

/* The phase's deadline has passed: escalate, or give up on what SIGKILL cannot end. */
static bool deadline_passed(struct job *job)
{
    if (job->phase == JOB_TERMINATING) {
        resume_log("the job is still running %gs after SIGTERM; sending SIGKILL", job->opt->kill_grace_s);
        job->phase = JOB_KILLING;
        job->deadline = now_s() + KILL_WAIT_S;
        job_signal(job, SIGKILL);
        return true;
    }
    if (job->pgid > 0 && kill(-job->pgid, 0) == 0)
        resume_log("processes of group %d survived SIGKILL", (int)job->pgid);
    for_each_stray(job, name_one, 0);
    return false;
}

/*
 * Waits until the job has no process left, stopping it as this file's
 * opening says; the outcome is in job->out.  Returns early only when
 * processes survive SIGKILL (named in the log), or when the signalfd fails.
 */
void job_watch(struct job *job)
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
            resume_log("the ranks have exited; stopping the processes they left");
            job_stop(job, SIGTERM);
        }
        /* Orphans outside the group may have come back since the last SIGKILL. */
        if (job->phase == JOB_KILLING)
            job_signal(job, SIGKILL);

        struct pollfd pfd = { .fd = job->sigfd, .events = POLLIN };
        int n = poll(&pfd, 1, timeout_ms(job));
        if (n < 0 && errno != EINTR) {
            resume_log("cannot wait for the job: %s", strerror(errno));
            return;
        }
        if (n == 0) {
            if (!deadline_passed(job))
                return;
            continue;
        }

        struct signalfd_siginfo si;
        while (read(job->sigfd, &si, sizeof(si)) == sizeof(si))
            if (si.ssi_signo != SIGCHLD)
                forward(job, (int)si.ssi_signo);
    }
}
