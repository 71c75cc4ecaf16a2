/*
 * What the files of ckpt-resume share: the options it was started with, a
 * job (the ranks of one launch and how they ended), and the one logging
 * call.  Every function here returns 0 or -errno unless its comment says
 * otherwise.  Declarations only: no definitions, no static tables.
 */
#ifndef CKPT_RESUME_H
#define CKPT_RESUME_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#define RESUME_MAX_NPROC 4096
#define RESUME_MAX_RESTARTS 1000

struct options {
    int nproc;              /* local ranks to start, >= 1 */
    int max_restarts;       /* restarts allowed before giving up, >= 0 */
    double kill_grace_s;    /* SIGTERM -> SIGKILL delay, from CKPT_KILL_GRACE */
    char **cmd;             /* the command and its arguments, NULL-terminated */
};

struct rank {
    pid_t pid;              /* 0 once reaped */
};

/* How one launch of the job ended. */
struct outcome {
    int exit_code;          /* first failure's, as a shell has it (128 + N for signal N), else 0 */
    int failed_rank;        /* rank of the first failure, -1 when none */
    int stop_signal;        /* signal that asked the job to stop (forwarded), 0 if none */
};

enum job_phase {
    JOB_RUNNING,            /* ranks run; nothing asked them to stop */
    JOB_TERMINATING,        /* asked to stop; SIGKILL at the deadline */
    JOB_KILLING,            /* SIGKILL sent; give up waiting at the deadline */
};

struct job {
    const struct options *opt;
    struct rank *ranks;     /* opt->nproc entries */
    int running;            /* ranks not yet reaped */
    pid_t pgid;             /* the job's process group: the first rank's pid */
    char *master_addr, *master_port;
    int sigfd;              /* signalfd for SIGCHLD and the forwarded signals */
    sigset_t rank_mask;     /* the signal mask ranks start with: ours before we blocked */
    enum job_phase phase;
    bool term_sent;         /* SIGTERM has gone to the job */
    double deadline;        /* CLOCK_MONOTONIC seconds at which the phase times out */
    struct outcome out;
};

/* log.c */
void resume_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* env.c */
int rank_env(char ***out, int rank, int nproc, const char *master_addr, const char *master_port);
void rank_env_free(char **env);
int job_master(char **addr, char **port);

/* launch.c */
int job_open(struct job *job, const struct options *opt);
int job_launch(struct job *job);
void job_close(struct job *job);

/* watch.c */
void job_watch(struct job *job);
void job_stop(struct job *job, int sig);

#endif
