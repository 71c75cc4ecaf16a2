/*
 * torchrun as ckpt-resume's command: who restarts.  torchrun can restart
 * its workers itself (--max-restarts), but it restarts them from the start
 * of the program, without CKPT_RESTORE, without standbys and while
 * ckpt-resume counts the same failure: two restart policies fighting over
 * one job.  ckpt-resume restarts the job; torchrun's own restarts are set
 * to 0 (PET_MAX_RESTARTS, the variable torchrun reads for --max-restarts),
 * and a command or environment that asks torchrun for more is refused
 * before anything starts.
 *
 * A torchrun of several nodes is refused: one ckpt-resume per node would
 * each restore its own ranks, from iterations of their own choosing
 * (--coord makes the nodes agree, with ranks ckpt-resume starts itself).
 *
 * Standbys under torchrun (CKPT_STANDBY=1): a second torchrun, the same
 * command, starts them, and serves their rendezvous as the first serves
 * the ranks' (a PyTorch worker meets at torchrun's own store), on a port
 * of their own: where the command names torchrun's port (--master-port,
 * --rdzv-endpoint, or PET_MASTER_PORT and PET_RDZV_ENDPOINT, which
 * torchrun reads for them), the second gets the standbys' port instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "resume.h"

/* torchrun's options that take no value; every other option takes one
 * (written apart or after '='), up to the training program. */
static const char *const flags[] = { "--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                                     "--run_path" };

/* The index in @cmd of torchrun's first option: after `torchrun` or
 * `python -m torch.distributed.run` (or .launch); -1 when @cmd is not
 * torchrun. */
static int torchrun_options(char *const *cmd)
{
    const char *base = strrchr(cmd[0], '/') ? strrchr(cmd[0], '/') + 1 : cmd[0];
    if (strcmp(base, "torchrun") == 0)
        return 1;
    if (strncmp(base, "python", 6) != 0)
        return -1;
    for (int i = 1; cmd[i] && cmd[i][0] == '-'; i++)
        if (strcmp(cmd[i], "-m") == 0)
            return cmd[i + 1] && (strcmp(cmd[i + 1], "torch.distributed.run") == 0 ||
                                  strcmp(cmd[i + 1], "torch.distributed.launch") == 0) ? i + 2 : -1;
    return -1;
}

bool torchrun_command(char *const *cmd)
{
    return torchrun_options(cmd) >= 0;
}

static bool is_flag(const char *arg)
{
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strcmp(arg, flags[i]) == 0)
            return true;
    return false;
}

/* Whether the @len bytes of @a are torchrun's option @name in either spelling ("--a-b" or "--a_b"). */
static bool spelled(const char *a, size_t len, const char *name)
{
    if (strlen(name) != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (a[i] != name[i] && !(name[i] == '-' && a[i] == '_' && i > 2))
            return false;
    return true;
}

/* The value of torchrun's option @name in @cmd (its last, as torchrun
 * takes it), else of variable @var (NULL: none); NULL: neither. */
static const char *option(char *const *cmd, const char *name, const char *var)
{
    const char *value = var ? getenv(var) : NULL;
    int i = torchrun_options(cmd);
    for (; i >= 0 && cmd[i] && cmd[i][0] == '-'; i++) {
        const char *eq = strchr(cmd[i], '=');
        size_t len = eq ? (size_t)(eq - cmd[i]) : strlen(cmd[i]);
        if (spelled(cmd[i], len, name))
            value = eq ? eq + 1 : cmd[i + 1];
        if (!eq && !is_flag(cmd[i]) && cmd[i + 1])
            i++;
    }
    return value;
}

/* A restart count other than 0: says so and returns true. */
static bool restarts(const char *where, const char *value)
{
    char *end;
    long n = strtol(value, &end, 10);
    if (*value && !*end && n == 0)
        return false;
    ckpt_log(CKPT_ERROR, "%s%s: torchrun would restart its workers itself, from the start of the program and without "
             "their snapshots, against ckpt-resume's own restarts; drop it: ckpt-resume sets torchrun's restarts to 0 "
             "and restarts the job itself (ckpt-resume --max-restarts or CKPT_MAX_RESTARTS say how often)", where,
             value);
    return true;
}

int torchrun_check(char *const *cmd)
{
    if (!torchrun_command(cmd))
        return 0;
    const char *nnodes = option(cmd, "--nnodes", "PET_NNODES");
    if (nnodes && strcmp(nnodes, "1") != 0 && strcmp(nnodes, "1:1") != 0) {
        ckpt_log(CKPT_ERROR, "torchrun --nnodes %s: under one ckpt-resume per node, each would restore its own "
                 "node's ranks from an iteration of its own choosing; run the job with one ckpt-resume --coord "
                 "etcd://HOST:PORT --nnodes N --nproc P -- CMD per node instead (it starts the ranks with the "
                 "variables torchrun sets, and the nodes agree on every restore)", nnodes);
        return -1;
    }
    /* The command line's, else the environment's, as torchrun reads them. */
    const char *arg = option(cmd, "--max-restarts", NULL), *env = getenv("PET_MAX_RESTARTS");
    if (arg)
        return restarts("torchrun --max-restarts ", arg) ? -1 : 0;
    return env && restarts("PET_MAX_RESTARTS=", env) ? -1 : 0;
}

int torchrun_standby_check(char *const *cmd)
{
    if (torchrun_command(cmd))
        return 0;
    if (getenv("CKPT_STANDBY")) { /* asked for: refused */
        ckpt_log(CKPT_ERROR, "CKPT_STANDBY=1: %s is not torchrun, and standbys under a launcher of the job's own "
                 "are made for torchrun only (a second torchrun starts them); start the ranks with ckpt-resume "
                 "--nproc N, or set CKPT_STANDBY=0 (a failure then recovers by replaying from the start)", cmd[0]);
        return -1;
    }
    /* The default: the job runs, without them. */
    ckpt_log(CKPT_WARN, "no standbys: %s is not torchrun, and standbys under a launcher of the job's own are made "
             "for torchrun only; a failure recovers by replaying from the start (CKPT_STANDBY=0 says so, ckpt-resume "
             "--nproc N starts the ranks with standbys)", cmd[0]);
    char err[256];
    if (setenv("CKPT_STANDBY", "0", 1) < 0 || ckpt_config_load(err, sizeof(err)) < 0)
        return -1;
    return 0;
}

/* In *@out (malloc'd), @prefix then the endpoint "HOST[:PORT]" @value at @port. */
static int endpoint_as(char **out, const char *prefix, const char *value, const char *port)
{
    const char *colon = strrchr(value, ':');
    if (colon && strchr(colon, ']'))
        colon = NULL; /* "[::1]": an IPv6 host without a port */
    int len = colon ? (int)(colon - value) : (int)strlen(value);
    if (asprintf(out, "%s%.*s:%s", prefix, len, value, port) < 0) {
        *out = NULL;
        return -ENOMEM;
    }
    return 0;
}

int torchrun_shadow(char ***out, char *const *cmd, const char *port)
{
    size_t n = 0;
    while (cmd[n])
        n++;
    /* The pointers, then each replaced argument (at most one per argument). */
    char **v = calloc(2 * n + 2, sizeof(*v));
    if (!v)
        return -ENOMEM;
    memcpy(v, cmd, n * sizeof(*v));
    int i = torchrun_options(cmd), rc = 0;
    size_t extra = n + 1;
    for (; rc == 0 && i >= 0 && cmd[i] && cmd[i][0] == '-'; i++) {
        const char *eq = strchr(cmd[i], '=');
        size_t len = eq ? (size_t)(eq - cmd[i]) : strlen(cmd[i]);
        bool master = spelled(cmd[i], len, "--master-port"), rdzv = spelled(cmd[i], len, "--rdzv-endpoint");
        int at = eq ? i : i + 1;
        if ((master || rdzv) && cmd[at]) {
            /* "--option=value" stays one argument; a value apart is replaced alone. */
            char prefix[32], *value = NULL;
            snprintf(prefix, sizeof(prefix), "%.*s", eq ? (int)(len + 1) : 0, cmd[i]);
            if (master)
                rc = asprintf(&value, "%s%s", prefix, port) < 0 ? (value = NULL, -ENOMEM) : 0;
            else
                rc = endpoint_as(&value, prefix, eq ? eq + 1 : cmd[at], port);
            if (rc == 0)
                v[at] = v[extra++] = value;
        }
        if (!eq && !is_flag(cmd[i]) && cmd[i + 1])
            i++;
    }
    if (rc < 0) {
        torchrun_shadow_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void torchrun_shadow_free(char **argv)
{
    if (!argv)
        return;
    size_t n = 0;
    while (argv[n])
        n++;
    for (size_t k = n + 1; argv[k]; k++)
        free(argv[k]);
    free(argv);
}

int torchrun_shadow_vars(char **master, char **rdzv, const char *port)
{
    const char *e = getenv("PET_RDZV_ENDPOINT");
    free(*master);
    free(*rdzv);
    *master = *rdzv = NULL;
    if (asprintf(master, "PET_MASTER_PORT=%s", port) < 0) {
        *master = NULL;
        return -ENOMEM;
    }
    return e && *e ? endpoint_as(rdzv, "PET_RDZV_ENDPOINT=", e, port) : 0;
}
