/*
 * torchrun as ckpt-resume's command: who restarts.  torchrun can restart
 * its workers itself (--max-restarts), but it restarts them from the start
 * of the program, without CKPT_RESTORE, without standbys and while
 * ckpt-resume counts the same failure: two restart policies fighting over
 * one job.  ckpt-resume restarts the job; torchrun's own restarts are set
 * to 0 (PET_MAX_RESTARTS, the variable torchrun reads for --max-restarts),
 * and a command or environment that asks torchrun for more is refused
 * before anything starts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int i = torchrun_options(cmd);
    if (i < 0)
        return 0;
    const char *env = getenv("PET_MAX_RESTARTS");
    if (env && restarts("PET_MAX_RESTARTS=", env))
        return -1;
    for (; cmd[i] && cmd[i][0] == '-'; i++) {
        const char *a = cmd[i];
        bool ours = strncmp(a, "--max-restarts", 14) == 0 || strncmp(a, "--max_restarts", 14) == 0;
        if (ours && a[14] == '=' && restarts("torchrun --max-restarts=", a + 15))
            return -1;
        if (ours && !a[14] && cmd[i + 1] && restarts("torchrun --max-restarts ", cmd[i + 1]))
            return -1;
        if (!strchr(a, '=') && !is_flag(a) && cmd[i + 1])
            i++; /* its value */
    }
    return 0;
}
