/*
 * The external fence (CKPT_FENCE_CMD): a command the coordinator runs
 * against a node it declared lost, for a node that cannot stop its ranks
 * itself (frozen, or cut off with its agent dead).  A node that can renew
 * nothing fences itself (bridge.c); one that is frozen does nothing at all,
 * and would thaw with its ranks running beside the restarted job.  The
 * command (scancel, a pod delete, a power-off) runs as `sh -c CMD` with
 * CKPT_FENCE_NODE (the node rank), CKPT_FENCE_ADDR (the address the node
 * joined from) and CKPT_JOB; exit status 0 says the node is fenced.  The
 * coordinator does not restart the job before it is, trying again each
 * second up to 10 x CKPT_NODE_TIMEOUT, then ends the job rather than
 * restart beside a node that may still run.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "format.h"
#include "log.h"
#include "resume.h"
#include "util.h"

extern char **environ;

bool fence_wanted(void)
{
    const char *cmd = ckpt_cfg_str(CFG_FENCE_CMD);
    return cmd && *cmd;
}

pid_t fence_start(unsigned node, const char *hostport, const char *job)
{
    char vnode[48], vaddr[96], vjob[CKPT_JOB_MAX + 16], host[64];
    const char *port;
    if (ckpt_hostport_split(hostport, host, sizeof(host), &port) < 0)
        snprintf(host, sizeof(host), "%s", hostport);
    snprintf(vnode, sizeof(vnode), "CKPT_FENCE_NODE=%u", node);
    snprintf(vaddr, sizeof(vaddr), "CKPT_FENCE_ADDR=%s", host);
    snprintf(vjob, sizeof(vjob), "CKPT_JOB=%s", job);
    size_t n = 0;
    while (environ[n])
        n++;
    /* Built before the fork: the parent has threads. */
    char **env = calloc(n + 4, sizeof(*env));
    if (!env)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CKPT_FENCE_", 11) && strncmp(environ[i], "CKPT_JOB=", 9) &&
            strncmp(environ[i], "CKPT_JOB_KEY=", 13))
            env[k++] = environ[i];
    env[k++] = vnode, env[k++] = vaddr, env[k++] = vjob;
    char *argv[] = { "sh", "-c", (char *)ckpt_cfg_str(CFG_FENCE_CMD), NULL };
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        child_detach(parent, SIGKILL);
        execve("/bin/sh", argv, env);
        _exit(127);
    }
    int err = errno;
    free(env);
    if (pid < 0)
        return -err;
    ckpt_log(CKPT_INFO, "fencing node %u (%s) with CKPT_FENCE_CMD (pid %d)", node, host, (int)pid);
    return pid;
}

int fence_poll(pid_t pid, int *status)
{
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid)
        return 1;
    return r == 0 ? 0 : -errno;
}

void fence_cancel(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
