/*
 * Node 0 starting the job's other nodes (CKPT_NODE_LAUNCHER).  Node j's
 * ckpt-resume runs as
 *
 *     sh -c 'exec PREFIX "$@"' sh SELF --nproc P -- CMD [ARGS...]
 *
 * in a session of its own, with CKPT_COORD, CKPT_NNODES, CKPT_NODE_RANK=j,
 * CKPT_JOB and CKPT_JOB_KEY in its environment: the prefix (srun, or
 * anything that runs a command on another machine and carries the
 * environment there) hands the job's key to the other nodes without it
 * ever appearing on a command line.  A node whose command ends before the
 * job does is lost, and the job waits for its replacement: this file
 * starts the command again (its new agent waits for the node's lease to
 * end, then takes the node), up to CKPT_MAX_RESTARTS times.
 *
 * Everything here runs on the bridge's thread of node 0's agent (node 0
 * starts the others, whichever node leads), so the commands are that
 * thread's children: ckpt-resume's reaping of its ranks waits for the
 * main thread's children only (__WNOTHREAD) and never takes them, and
 * each command gets SIGTERM if that thread dies (PR_SET_PDEATHSIG, which
 * the exec keeps) before it has ended them itself.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "log.h"
#include "resume.h"

extern char **environ;

#define END_WAIT_S 0.05

struct launched {
    pid_t pid;          /* 0: not running */
    int starts;         /* times its command was started */
    double due;         /* when to start it (again); 0: not due */
};

struct spawn {
    const struct options *opt;
    char *script;       /* exec PREFIX "$@" */
    char self[PATH_MAX];
    char nproc[16];
    const char *key;    /* the job's key: the user's, or the one node 0 made */
    char **argv;        /* sh -c script sh SELF --nproc P -- CMD... */
    unsigned n;
    struct launched *node;
    bool gave_up;
};

/* The variables each command gets from us; inherited values are dropped. */
static const char *const set_vars[] = { "CKPT_COORD", "CKPT_NNODES", "CKPT_NODE_RANK", "CKPT_JOB",
                                        "CKPT_JOB_KEY" };
#define N_SET_VARS (sizeof(set_vars) / sizeof(set_vars[0]))

static bool is_set_var(const char *entry)
{
    for (size_t i = 0; i < N_SET_VARS; i++) {
        size_t n = strlen(set_vars[i]);
        if (strncmp(entry, set_vars[i], n) == 0 && entry[n] == '=')
            return true;
    }
    return false;
}

/* Node j's environment, built before the fork: ours, then the job's coordinates. */
static char **node_env(const struct spawn *s, unsigned j)
{
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + N_SET_VARS + 1, sizeof(*env));
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!is_set_var(environ[i]))
            env[k++] = environ[i];
    size_t first = k;
    if (asprintf(&env[k++], "CKPT_COORD=etcd://%s", s->opt->etcd) < 0 ||
        asprintf(&env[k++], "CKPT_NNODES=%u", s->n) < 0 || asprintf(&env[k++], "CKPT_NODE_RANK=%u", j) < 0 ||
        asprintf(&env[k++], "CKPT_JOB=%s", s->opt->job_name) < 0 ||
        (s->key && asprintf(&env[k++], "CKPT_JOB_KEY=%s", s->key) < 0)) {
        env[--k] = NULL; /* the one that failed holds nothing */
        goto fail;
    }
    return env;
fail:
    for (size_t i = first; i < k; i++)
        free(env[i]);
    free(env);
    return NULL;
}

static void node_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        if (is_set_var(env[i])) /* ours: the inherited ones were left out */
            explicit_bzero(env[i], strlen(env[i])), free(env[i]);
    free(env);
}

void child_detach(pid_t parent, int deathsig)
{
    /* Only async-signal-safe calls from here: the parent has threads. */
    sigset_t none;
    setsid();
    prctl(PR_SET_PDEATHSIG, deathsig);
    if (getppid() != parent)
        _exit(127);
    close_range(3, ~0U, 0); /* a library's descriptor without O_CLOEXEC is no child's business */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
}

static void start(struct spawn *s, unsigned j)
{
    struct launched *l = &s->node[j];
    char **env = node_env(s, j);
    pid_t parent = getpid();

    l->due = 0;
    if (!env) {
        ckpt_log(CKPT_WARN, "cannot start node %u: %s", j, strerror(ENOMEM));
        l->due = ckpt_now_s() + 1;
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        child_detach(parent, SIGTERM);
        execve("/bin/sh", s->argv, env);
        _exit(127);
    }
    int err = errno;
    node_env_free(env);
    if (pid < 0) {
        ckpt_log(CKPT_WARN, "cannot start node %u: %s", j, strerror(err));
        l->due = ckpt_now_s() + 1;
        return;
    }
    l->pid = pid;
    l->starts++;
    ckpt_log(CKPT_INFO, "started node %u (pid %d) with CKPT_NODE_LAUNCHER%s", j, (int)pid,
             l->starts > 1 ? ", again" : "");
}

static void describe(int status, char *out, size_t outlen)
{
    if (WIFSIGNALED(status))
        snprintf(out, outlen, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(out, outlen, "exit status %d", WEXITSTATUS(status));
}

int spawn_open(struct spawn **out, const struct options *opt)
{
    *out = NULL;
    if (!opt->launcher)
        return 0;
    struct spawn *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->opt = opt;
    s->n = (unsigned)opt->nnodes;
    const char *key = ckpt_cfg_str(CFG_JOB_KEY);
    s->key = key && *key ? key : opt->job_key[0] ? opt->job_key : NULL;
    ssize_t len = readlink("/proc/self/exe", s->self, sizeof(s->self) - 1);
    size_t ncmd = 0;
    while (opt->cmd[ncmd])
        ncmd++;
    s->node = calloc(s->n, sizeof(*s->node));
    s->argv = calloc(8 + ncmd + 1, sizeof(*s->argv));
    if (len <= 0 || !s->node || !s->argv || asprintf(&s->script, "exec %s \"$@\"", opt->launcher) < 0) {
        int rc = len <= 0 ? -errno : -ENOMEM;
        spawn_close(s, 0);
        return rc;
    }
    s->self[len] = '\0';
    snprintf(s->nproc, sizeof(s->nproc), "%d", opt->nproc);
    const char *head[] = { "sh", "-c", s->script, "sh", s->self, "--nproc", s->nproc, "--" };
    size_t k = 0;
    for (; k < sizeof(head) / sizeof(head[0]); k++)
        s->argv[k] = (char *)head[k];
    for (size_t i = 0; i < ncmd; i++)
        s->argv[k++] = opt->cmd[i];
    double now = ckpt_now_s();
    for (unsigned j = 1; j < s->n; j++)
        s->node[j].due = now;
    *out = s;
    return 0;
}

int spawn_turn(struct spawn *s, bool over, char *why, size_t whylen)
{
    double now = ckpt_now_s();
    for (unsigned j = 1; s && j < s->n; j++) {
        struct launched *l = &s->node[j];
        int status;
        if (l->pid > 0 && waitpid(l->pid, &status, WNOHANG) == l->pid) {
            l->pid = 0;
            /* Exit 0: its agent heard the end (through etcd, maybe before this one). */
            if (over || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
                continue;
            char how[64];
            describe(status, how, sizeof(how));
            if (l->starts > s->opt->max_restarts) {
                snprintf(why, whylen, "node %u cannot be kept running: its command (CKPT_NODE_LAUNCHER) ended %d "
                         "time%s, the last with %s", j, l->starts, l->starts == 1 ? "" : "s", how);
                s->gave_up = true;
                return (int)j;
            }
            ckpt_log(CKPT_WARN, "node %u's command ended (%s) before the job did; starting it again in %gs", j, how,
                     s->opt->backoff_s);
            l->due = now + s->opt->backoff_s;
        }
        if (!over && !s->gave_up && l->pid == 0 && l->due > 0 && now >= l->due)
            start(s, j);
    }
    return 0;
}

/* Waits up to @wait_s for every command to end; true when they all have. */
static bool wait_all(struct spawn *s, double wait_s)
{
    double until = ckpt_now_s() + wait_s;
    for (;;) {
        bool left = false;
        for (unsigned j = 1; j < s->n; j++) {
            struct launched *l = &s->node[j];
            if (l->pid > 0 && waitpid(l->pid, NULL, WNOHANG) == l->pid)
                l->pid = 0;
            left |= l->pid > 0;
        }
        if (!left)
            return true;
        if (ckpt_now_s() >= until)
            return false;
        usleep((useconds_t)(END_WAIT_S * 1e6));
    }
}

static void signal_all(struct spawn *s, int sig)
{
    for (unsigned j = 1; j < s->n; j++)
        if (s->node[j].pid > 0)
            kill(-s->node[j].pid, sig);
}

void spawn_close(struct spawn *s, double wait_s)
{
    if (!s)
        return;
    if (s->node && !wait_all(s, wait_s)) {
        ckpt_log(CKPT_INFO, "ending the nodes started with CKPT_NODE_LAUNCHER (SIGTERM, SIGKILL after %gs)",
                 s->opt->kill_grace_s);
        signal_all(s, SIGTERM);
        if (!wait_all(s, s->opt->kill_grace_s)) {
            signal_all(s, SIGKILL);
            wait_all(s, 5);
        }
    }
    free(s->node);
    free(s->argv);
    free(s->script);
    free(s);
}
