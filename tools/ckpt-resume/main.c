/*
 * ckpt-resume's entry: the command line and the life of a job, which is a
 * loop of launch, watch and decide.  Usage errors are found here, before
 * anything starts, and end with exit status 2 and a message that names
 * the option and what it accepts.  Whatever happens once the job has been
 * launched, the last line on stderr is "ckpt-resume: done exit=C
 * restarts=N" and the exit status is C.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resume.h"

#define USAGE_ERROR 2

static const char usage_text[] =
    "usage: ckpt-resume [--nproc N] [--max-restarts R] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD as a training job on this node and stops all of it when one part\n"
    "fails.  It starts N local ranks of CMD, each with RANK, LOCAL_RANK,\n"
    "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT set as\n"
    "torchrun sets them, or, with one rank, wraps a launcher that starts its own\n"
    "processes (ckpt-resume -- torchrun --nproc-per-node 8 train.py).\n"
    "\n"
    "options:\n"
    "  --nproc N          local ranks to start, 1 to 4096 (default 1)\n"
    "  --max-restarts R   restarts from a checkpoint allowed after a failure,\n"
    "                     0 to 1000 (default 0)\n"
    "  -h, --help         this text\n"
    "\n"
    "environment:\n"
    "  CKPT_KILL_GRACE    seconds between SIGTERM and SIGKILL when the job is\n"
    "                     stopped (default 5)\n"
    "  MASTER_ADDR        kept when set, else 127.0.0.1\n"
    "  MASTER_PORT        kept when set, else a free TCP port\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are passed to the whole job.  The exit status is\n"
    "the first failing rank's (128+N for a rank killed by signal N), else 0.\n";

/* Reports a usage error (one line, then the usage line); returns -EINVAL. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    resume_log("%s", msg);
    fprintf(stderr, "usage: ckpt-resume [--nproc N] [--max-restarts R] -- CMD [ARGS...]  (see --help)\n");
    return -EINVAL;
}

/* Parses the whole of @s as an integer in [@min, @max]; -EINVAL otherwise. */
static int parse_int(const char *s, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

/*
 * Parses argv[*i] if it is an option that takes an integer, as "--name=V" or "--name V"
 * (then *i moves past V).  Returns 1 when it was one, 0 when it is no
 * integer option, -EINVAL after reporting a missing or bad value.
 */
static int parse_int_option(char **argv, int argc, int *i, struct options *opt)
{
    const struct {
        const char *name;
        int *value;
        long min, max;
        const char *accepted;
    } options[] = {
        { "--nproc", &opt->nproc, 1, RESUME_MAX_NPROC, "an integer from 1 to 4096" },
        { "--max-restarts", &opt->max_restarts, 0, RESUME_MAX_RESTARTS, "an integer from 0 to 1000" },
    };
    const char *arg = argv[*i];

    for (size_t k = 0; k < sizeof(options) / sizeof(options[0]); k++) {
        const __typeof__(options[0]) *o = &options[k];
        size_t n = strlen(o->name);
        const char *v;

        if (strncmp(arg, o->name, n) != 0 || (arg[n] != '=' && arg[n] != '\0'))
            continue;
        if (arg[n] == '=')
            v = arg + n + 1;
        else if (*i + 1 < argc && strcmp(argv[*i + 1], "--") != 0)
            v = argv[++*i];
        else
            return usage_error("%s needs a value: %s", o->name, o->accepted);
        if (parse_int(v, o->min, o->max, o->value) < 0)
            return usage_error("%s: expected %s, got '%s'", o->name, o->accepted, v);
        return 1;
    }
    return 0;
}

/* CKPT_KILL_GRACE: seconds, a number >= 0 (fractions allowed); 5 when unset. */
static int parse_grace(double *out)
{
    const char *s = getenv("CKPT_KILL_GRACE");
    char *end;

    *out = 5.0;
    if (!s || !*s)
        return 0;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 3600)
        return usage_error("CKPT_KILL_GRACE: expected seconds, a number from 0 to 3600, got '%s'", s);
    *out = v;
    return 0;
}

/*
 * Fills @opt from the command line.  Returns 1 when --help was asked for
 * (the text is printed), 0 to go on, -EINVAL after reporting a usage error.
 */
static int parse_options(int argc, char **argv, struct options *opt)
{
    *opt = (struct options){ .nproc = 1, .max_restarts = 0 };

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];

        if (strcmp(arg, "--") == 0) {
            if (i + 1 >= argc)
                return usage_error("no command after '--'");
            opt->cmd = argv + i + 1;
            return parse_grace(&opt->kill_grace_s);
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage_text, stdout);
            return 1;
        }
        int rc = parse_int_option(argv, argc, &i, opt);
        if (rc < 0)
            return rc;
        if (rc > 0)
            continue;
        if (arg[0] == '-')
            return usage_error("unknown option '%s'; accepted: --nproc N, --max-restarts R, --help, "
                               "then -- CMD", arg);
        return usage_error("expected '--' before the command, got '%s'", arg);
    }
    return usage_error("missing '-- CMD': the command to run comes after '--'");
}

/*
 * Whether to launch again after a run that ended with @out.  Success, a
 * requested stop and running out of restarts are final.  A failure is final
 * too while no checkpoint exists to restart from: a clean start would only
 * repeat the work lost.
 */
static bool decide_restart(const struct outcome *out, const struct options *opt, int restarts)
{
    if (out->exit_code == 0 || out->stop_signal)
        return false;
    if (restarts >= opt->max_restarts)
        return false;
    resume_log("no checkpoint to restart from; the job fails with rank %d's status %d", out->failed_rank,
               out->exit_code);
    return false;
}

int main(int argc, char **argv)
{
    struct options opt;
    struct job job;
    int restarts = 0;

    int rc = parse_options(argc, argv, &opt);
    if (rc != 0)
        return rc > 0 ? 0 : USAGE_ERROR;

    rc = job_open(&job, &opt);
    if (rc < 0) {
        resume_log("cannot prepare the job: %s", strerror(-rc));
        job_close(&job);
        resume_log("done exit=1 restarts=0");
        return 1;
    }
    for (;;) {
        job_launch(&job);
        job_watch(&job);
        if (!decide_restart(&job.out, &opt, restarts))
            break;
        restarts++;
    }
    int code = job.out.exit_code;
    job_close(&job);
    resume_log("done exit=%d restarts=%d", code, restarts);
    return code;
}
