/*
 * The environment each rank starts with: ckpt-resume's own, plus the
 * variables torchrun sets for a single node (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), so programs
 * written for torchrun run unchanged.  The environment is built in the
 * parent, before any fork, so a child never allocates; ckpt-resume's own
 * environment is never modified.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "resume.h"

extern char **environ;

/* The variables a rank gets from us; any inherited value is replaced. */
static const char *const rank_vars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
};
#define N_RANK_VARS (sizeof(rank_vars) / sizeof(rank_vars[0]))

static bool is_rank_var(const char *entry)
{
    for (size_t i = 0; i < N_RANK_VARS; i++) {
        size_t n = strlen(rank_vars[i]);
        if (strncmp(entry, rank_vars[i], n) == 0 && entry[n] == '=')
            return true;
    }
    return false;
}

/*
 * Asks the kernel for a TCP port that is free on the loopback interface
 * right now.  Another process may take it before rank 0 binds it; torchrun
 * accepts the same race, and a rank that loses it fails visibly.
 */
static int free_port(int *port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        rc = -errno;
    else
        *port = ntohs(sa.sin_port);
    close(fd);
    return rc;
}

/*
 * Decides where rank 0 listens: MASTER_ADDR and MASTER_PORT from our own
 * environment when set (a wrapping scheduler chose them), else 127.0.0.1
 * and a free port.  The caller frees *addr and *port.
 */
int job_master(char **addr, char **port)
{
    const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
    int n = 0;

    *addr = strdup(a && *a ? a : "127.0.0.1");
    if (p && *p) {
        *port = strdup(p);
    } else {
        int rc = free_port(&n);
        if (rc < 0) {
            free(*addr);
            *addr = NULL;
            return rc;
        }
        if (asprintf(port, "%d", n) < 0)
            *port = NULL;
    }
    if (!*addr || !*port) {
        free(*addr);
        free(*port);
        *addr = *port = NULL;
        return -ENOMEM;
    }
    return 0;
}

/*
 * Builds the environment of one rank in @out: every inherited variable
 * except those in rank_vars, then ours.  The caller releases it with
 * rank_env_free().
 */
int rank_env(char ***out, int rank, int nproc, const char *master_addr, const char *master_port)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + N_RANK_VARS + 1, sizeof(*env));
    if (!env)
        return -ENOMEM;

    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_rank_var(environ[i]))
            env[k++] = environ[i];
    size_t ours = k;

    /* One per rank_vars entry, in the same order. */
    int ok = asprintf(&env[k++], "RANK=%d", rank) >= 0 &&
             asprintf(&env[k++], "LOCAL_RANK=%d", rank) >= 0 &&
             asprintf(&env[k++], "WORLD_SIZE=%d", nproc) >= 0 &&
             asprintf(&env[k++], "LOCAL_WORLD_SIZE=%d", nproc) >= 0 &&
             asprintf(&env[k++], "GROUP_RANK=0") >= 0 &&
             asprintf(&env[k++], "MASTER_ADDR=%s", master_addr) >= 0 &&
             asprintf(&env[k++], "MASTER_PORT=%s", master_port) >= 0;
    if (!ok) {
        /* asprintf leaves the failed slot undefined: clear it, free the rest. */
        env[k - 1] = NULL;
        for (size_t i = ours; i < k - 1; i++)
            free(env[i]);
        free(env);
        return -ENOMEM;
    }
    env[k] = NULL;
    *out = env;
    return 0;
}

/* Frees what rank_env() built: our strings are the last N_RANK_VARS entries. */
void rank_env_free(char **env)
{
    if (!env)
        return;
    size_t n = 0;
    while (env[n])
        n++;
    for (size_t i = n - N_RANK_VARS; i < n; i++)
        free(env[i]);
    free(env);
}
