/*
 * ckpt-resume's entry: the command line, the configuration (the CKPT_*
 * table of runtime/config.def, read once, never parsed a second way), the
 * job's name and libckpt.so, then the job.  Usage and configuration errors
 * are found here, before any rank starts, and end with exit status 2 and
 * one message that names the option or variable and what it accepts.
 * Whatever happens once the job has been launched, the line before the
 * last says how the job was protected (summary()), and the last line on
 * stderr is "ckpt-resume: done exit=C restarts=N", followed, when there
 * were recoveries, by how each was made and how long it took ("(standby
 * 0.006 s, cold 0.212 s)"), and by "UNPROTECTED: ..." when a rank ran
 * with checkpointing off; the exit status is C.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "auth.h"
#include "config.h"
#include "log.h"
#include "placement.h"
#include "replay.h"
#include "resume.h"

#define USAGE_ERROR 2

_Static_assert(sizeof(((struct options *)0)->job_key) > CKPT_AUTH_NEW_KEY, "a made key fits the options");

static const char usage_text[] =
    "usage: ckpt-resume [--nproc N] [--max-restarts R] -- CMD [ARGS...]\n"
    "       ckpt-resume --coord etcd://HOST:PORT[,...] --nnodes N [--node-rank I] --nproc P -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD as a training job on this node with libckpt.so preloaded, stops\n"
    "all of it when one part fails or hangs, and restarts it from the newest\n"
    "iteration every rank holds a verified snapshot of.  It starts N local ranks\n"
    "of CMD, each with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
    "MASTER_ADDR and MASTER_PORT set as torchrun sets them, or, without --nproc,\n"
    "wraps a launcher that starts its own processes\n"
    "(ckpt-resume -- torchrun --nproc-per-node 8 train.py).\n"
    "\n"
    "On several nodes, one ckpt-resume per node meet through the etcd cluster\n"
    "at --coord: each claims a node rank I (--node-rank, or whichever is free),\n"
    "any of them may lead, and ranks get RANK = I * P + LOCAL_RANK and\n"
    "WORLD_SIZE = N * P; each node's snapshots are replicated into the host\n"
    "memory of CKPT_REPLICAS - 1 other nodes, and a job that lost a node waits\n"
    "for a replacement, which takes the lost node's rank unasked (a spare,\n"
    "--spare, started beside the job takes the first lost node's), then resumes\n"
    "from the fastest copy of every rank: its own arena, a peer's, or its\n"
    "node's disk.  With CKPT_NODE_LAUNCHER (e.g. 'srun -N1 -n1 -r\n"
    "$CKPT_NODE_RANK'), node 0 starts the other nodes itself, and starts a lost\n"
    "one again.\n"
    "\n"
    "options:\n"
    "  --nproc N          local ranks to start, 1 to 4096 (default: CMD is one\n"
    "                     process, maybe a launcher of the ranks)\n"
    "  --coord etcd://HOST:PORT[,HOST:PORT...]\n"
    "                     the etcd cluster the nodes of the job meet through\n"
    "                     (default CKPT_COORD)\n"
    "  --nnodes N         nodes in the job, 1 to 65536 (default CKPT_NNODES, 1)\n"
    "  --node-rank I      this node, 0 to N-1 (default CKPT_NODE_RANK, 0)\n"
    "  --spare            wait beside the job, take the place of the\n"
    "                     first node lost, end with the job if none is\n"
    "  --max-restarts R   restarts after a failure before giving up, 0 to 1000\n"
    "                     (default CKPT_MAX_RESTARTS, 3)\n"
    "  -h, --help         this text\n"
    "  --help-env         every CKPT_* variable, its default and what it accepts\n"
    "  --new-key          print a new CKPT_JOB_KEY (256 random bits) and exit\n"
    "\n"
    "environment (see --help-env):\n"
    "  CKPT_KILL_GRACE    seconds between SIGTERM and SIGKILL when the job is\n"
    "                     stopped (default 5)\n"
    "  CKPT_HANG_TIMEOUT  seconds without an iteration boundary before a rank\n"
    "                     is taken as hung (default 1800; 0: never)\n"
    "  CKPT_RESTART_BACKOFF  seconds before the first restart, doubled for\n"
    "                     each further one, at most 30 (default 1)\n"
    "  CKPT_LIB           the libckpt.so to preload (default ../lib/libckpt.so\n"
    "                     beside ckpt-resume)\n"
    "  CKPT_JOB           the job's name (default: a new one per invocation)\n"
    "  MASTER_ADDR        kept when set, else 127.0.0.1\n"
    "  MASTER_PORT        kept when set, else a free TCP port, drawn for each launch\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are passed to the whole job.  The exit status is\n"
    "the last launch's first failing rank's (128+N for a rank killed by signal N,\n"
    "124 for a hang), else 0.\n";

static const char usage_line[] = "usage: ckpt-resume [--coord etcd://HOST:PORT[,...] --nnodes N [--node-rank I]] "
                                 "[--nproc N] [--max-restarts R] -- CMD [ARGS...]  (see --help)\n";

/* Reports a usage error (one line, then the usage line); returns -EINVAL. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ckpt_log(CKPT_ERROR, "%s", msg);
    fputs(usage_line, stderr);
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
 * Parses argv[*i] if it is an option that takes an integer, as "--name=V"
 * or "--name V" (then *i moves past V).  Returns 1 when it was one (*@given
 * is then set), 0 when it is no integer option, -EINVAL after reporting a
 * missing or bad value.
 */
static int parse_int_option(char **argv, int argc, int *i, struct options *opt, bool given[4])
{
    const struct {
        const char *name;
        int *value;
        long min, max;
        const char *accepted;
    } options[] = {
        { "--nproc", &opt->nproc, 1, RESUME_MAX_NPROC, "an integer from 1 to 4096" },
        { "--max-restarts", &opt->max_restarts, 0, RESUME_MAX_RESTARTS, "an integer from 0 to 1000" },
        { "--nnodes", &opt->nnodes, 1, 65536, "an integer from 1 to 65536" },
        { "--node-rank", &opt->node_rank, 0, 65535, "an integer from 0 to 65535" },
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
        given[k] = true;
        return 1;
    }
    return 0;
}

/*
 * Fills @opt's command-line part.  Returns 1 when --help or --help-env
 * was asked for (the text is printed), 0 to go on, -EINVAL after reporting
 * a usage error.  *@restarts_given says whether --max-restarts was.
 */
static int parse_options(int argc, char **argv, struct options *opt, bool *restarts_given, bool given[4])
{

    *opt = (struct options){ .nproc = 1 };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];

        if (strcmp(arg, "--") == 0) {
            if (i + 1 >= argc)
                return usage_error("no command after '--'");
            opt->cmd = argv + i + 1;
            opt->wrap = !given[0];
            *restarts_given = given[1];
            return 0;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage_text, stdout);
            return 1;
        }
        if (strcmp(arg, "--help-env") == 0) {
            ckpt_config_describe(stdout);
            return 1;
        }
        if (strcmp(arg, "--new-key") == 0) {
            char key[CKPT_AUTH_NEW_KEY + 1];
            int rc = ckpt_auth_new_key(key);
            if (rc < 0) {
                ckpt_log(CKPT_ERROR, "cannot make a key: %s", strerror(-rc));
                return -EIO;
            }
            puts(key);
            explicit_bzero(key, sizeof(key));
            return 1;
        }
        if (strcmp(arg, "--spare") == 0) {
            opt->spare = true;
            continue;
        }
        if (strncmp(arg, "--coord", 7) == 0 && (arg[7] == '=' || arg[7] == '\0')) {
            if (arg[7] == '=')
                opt->coord = arg + 8;
            else if (i + 1 < argc && strcmp(argv[i + 1], "--") != 0)
                opt->coord = argv[++i];
            else
                return usage_error("--coord needs a value: etcd://HOST:PORT[,...]");
            continue;
        }
        int rc = parse_int_option(argv, argc, &i, opt, given);
        if (rc < 0)
            return rc;
        if (rc > 0)
            continue;
        if (arg[0] == '-')
            return usage_error("unknown option '%s'; accepted: --nproc N, --max-restarts R, --coord etcd://HOST:PORT, "
                               "--nnodes N, --node-rank I, --spare, --help, --help-env, --new-key, then -- CMD", arg);
        return usage_error("expected '--' before the command, got '%s'", arg);
    }
    return usage_error("missing '-- CMD': the command to run comes after '--'");
}

static void warn_unknown(const char *name, const char *suggestion)
{
    if (suggestion)
        ckpt_log(CKPT_WARN, "%s is not a libckpt variable; did you mean %s?", name, suggestion);
    else
        ckpt_log(CKPT_WARN, "%s is not a libckpt variable (ckpt-resume --help-env lists them)", name);
}

/*
 * Fills the rest of @opt from the CKPT_* table, which must be loaded.
 * The job keeps the user's CKPT_JOB, else gets a name of its own, the same
 * for every launch of this invocation.  Returns 0, or -errno after saying
 * what is wrong.
 */
/*
 * The nodes of a job: --coord, --nnodes, --node-rank over CKPT_COORD,
 * CKPT_NNODES, CKPT_NODE_RANK.  On several nodes each ckpt-resume starts
 * its own ranks (--nproc), the replicas must fit the nodes, and the job's
 * name, unless CKPT_JOB gives one, is derived from where the nodes meet,
 * so that every node names it alike.
 */
static int configure_nodes(struct options *opt, const bool given[4])
{
    char why[512];
    int rc = 0;

    const char *coord = ckpt_cfg_str(CFG_COORD);
    if (!opt->coord && coord && *coord)
        opt->coord = coord;
    if (!given[2])
        opt->nnodes = (int)ckpt_cfg_int(CFG_NNODES);
    if (!given[3])
        opt->node_rank = (int)ckpt_cfg_int(CFG_NODE_RANK);
    const char *launcher = ckpt_cfg_str(CFG_NODE_LAUNCHER);
    if (launcher && *launcher && (!opt->coord || opt->nnodes == 1))
        ckpt_log(CKPT_WARN, "CKPT_NODE_LAUNCHER is not used: the job has one node (it starts nodes on a job of "
                 "several, with --coord and --nnodes)");
    if (!opt->coord) {
        if (opt->spare)
            return usage_error("--spare needs --coord etcd://...: the job whose lost node it replaces");
        if (opt->nnodes > 1 || given[3])
            return usage_error("--nnodes and --node-rank need --coord etcd://HOST:PORT[,...] (or CKPT_COORD): the "
                               "etcd cluster the nodes meet through");
        opt->nnodes = 1;
        opt->node_rank = 0;
        return 0;
    }
    if (strncmp(opt->coord, "etcd://", 7) != 0)
        return usage_error("--coord %s: the nodes of a job meet through etcd: expected etcd://HOST:PORT[,HOST:PORT...] "
                           "(a coordinator on node 0, --coord HOST:PORT, is no more)", opt->coord);
    opt->etcd = opt->coord + 7;
    if (!*opt->etcd)
        return usage_error("--coord etcd://: expected etcd://HOST:PORT[,HOST:PORT...]");
    if (!given[3] && !getenv("CKPT_NODE_RANK"))
        opt->node_rank = -1; /* whichever is free */
    if (opt->spare && opt->node_rank >= 0)
        return usage_error("--spare takes the rank of the node that is lost: give no --node-rank (or "
                           "CKPT_NODE_RANK)");
    /* The agent that starts the others is node 0. */
    if (launcher && *launcher && opt->node_rank < 0 && !opt->spare)
        opt->node_rank = 0;
    if (opt->node_rank >= opt->nnodes)
        return usage_error("--node-rank %d: expected 0 to %d (--nnodes %d)", opt->node_rank, opt->nnodes - 1,
                           opt->nnodes);
    if (opt->wrap)
        return usage_error("--coord needs --nproc N: on several nodes each ckpt-resume starts its node's ranks");
    unsigned m = (unsigned)ckpt_cfg_int(CFG_REPLICAS);
    enum ckpt_placement p = (enum ckpt_placement)ckpt_cfg_int(CFG_PLACEMENT);
    if (m > (unsigned)opt->nnodes)
        return usage_error("CKPT_REPLICAS=%u: the job has %d nodes, and each replica needs a node of its own", m,
                           opt->nnodes);
    if (ckpt_placement_check(ckpt_placement_choose(p, (unsigned)opt->nnodes, m), (unsigned)opt->nnodes, m, why,
                             sizeof(why)) < 0)
        return usage_error("CKPT_PLACEMENT: %s", why);
    if (ckpt_auth_set_key(ckpt_cfg_str(CFG_JOB_KEY)) < 0)
        return usage_error("CKPT_JOB_KEY is too short: it must have at least %d characters", CKPT_AUTH_KEY_MIN);
    if (opt->node_rank == 0 && launcher && *launcher)
        opt->launcher = launcher;
    if (!ckpt_auth_enabled() && opt->launcher) {
        int rc = ckpt_auth_new_key(opt->job_key);
        if (rc < 0 || ckpt_auth_set_key(opt->job_key) < 0) {
            ckpt_log(CKPT_ERROR, "cannot make a key for the job: %s", strerror(rc < 0 ? -rc : EINVAL));
            return -EIO;
        }
        ckpt_log(CKPT_INFO, "CKPT_JOB_KEY is not set: made one for this job, which the nodes CKPT_NODE_LAUNCHER "
                 "starts get in their environment");
    }
    if (!ckpt_auth_enabled())
        ckpt_log(CKPT_WARN, "CKPT_JOB_KEY is not set: the agents' connections are not authenticated, and any "
                 "process that reaches them could join or send replicas (ckpt-resume --new-key makes a key)");
    if (!getenv("CKPT_JOB")) {
        int k = snprintf(opt->job_name, sizeof(opt->job_name), "job-");
        for (const char *c = opt->coord; *c && k < (int)sizeof(opt->job_name) - 1; c++)
            opt->job_name[k++] = (isalnum((unsigned char)*c) || *c == '.') ? *c : '-';
        opt->job_name[k] = '\0';
    }
    if ((rc = bridge_start(opt, why, sizeof(why))) < 0) {
        ckpt_log(CKPT_ERROR, "cannot join the job through etcd: %s (CKPT_COORD)", why);
        return rc;
    }
    if (rc == 1) { /* a spare the job never needed */
        ckpt_log(CKPT_INFO, "%s", why);
        return 1;
    }
    opt->first_rank = opt->node_rank * opt->nproc;
    if (opt->node_rank == 0) {
        FILE *out = stderr;
        ckpt_placement_describe(out, ckpt_placement_choose(p, (unsigned)opt->nnodes, m), (unsigned)opt->nnodes, m);
    }
    return 0;
}

/* CKPT_TORCH_ALLOCATOR=async: the ranks get backend:cudaMallocAsync, unless
 * the user chose PyTorch's allocator settings already (never changed). */
static int torch_allocator(void)
{
    if (ckpt_cfg_int(CFG_TORCH_ALLOCATOR) != 1)
        return 0;
    static const char *const vars[] = { "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF" };
    for (int i = 0; i < 2; i++) {
        const char *conf = getenv(vars[i]);
        if (!conf)
            continue;
        if (strstr(conf, "backend:cudaMallocAsync"))
            return 0;
        ckpt_log(CKPT_ERROR, "CKPT_TORCH_ALLOCATOR=async would change the %s=%s you set: add "
                 "backend:cudaMallocAsync to it yourself, or unset CKPT_TORCH_ALLOCATOR", vars[i], conf);
        return -EINVAL;
    }
    return setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1) < 0 ? -errno : 0;
}

/*
 * With CKPT_HOST_MEM (a rank's snapshot size): does the arena's filesystem
 * hold CKPT_SLOTS of them for every rank of this host, counting what the
 * job's arena holds already?  Said with the numbers and refused when not:
 * the job would train unprotected.  A launcher we wrap starts ranks we do
 * not count: LOCAL_WORLD_SIZE says how many, else one.
 */
static int arena_preflight(const struct options *opt)
{
    uint64_t each = (uint64_t)ckpt_cfg_int(CFG_HOST_MEM), room = 0, size = 0;
    if (!each || ckpt_arena_room(opt->arena_root, &room, &size) < 0)
        return 0;
    char dir[PATH_MAX];
    uint64_t held = arena_job_dir(opt, dir, sizeof(dir)) == 0 ? ckpt_arena_held(dir) : 0;
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    long long ranks = !opt->wrap ? opt->nproc : lw && atoi(lw) > 0 ? atoi(lw) : 1, slots = ckpt_cfg_int(CFG_SLOTS);
    uint64_t need = (uint64_t)ranks * (uint64_t)slots * each;
    if (need <= room + held)
        return 0;
    ckpt_log(CKPT_ERROR, "this host cannot hold the job's arena: %lld rank%s x %lld slot%s x CKPT_HOST_MEM=%.1f MiB "
             "need %.1f MiB in %s, whose filesystem has %.1f MiB free of %.1f MiB; " CKPT_ARENA_ROOM_FIX "%s",
             ranks, ranks == 1 ? "" : "s", slots, slots == 1 ? "" : "s", each / 1048576.0, need / 1048576.0,
             opt->arena_root, (room + held) / 1048576.0, size / 1048576.0,
             slots > 1 ? ", or set CKPT_SLOTS=1 (one slot per rank: the previous snapshot is then kept only by "
                         "peers and on disk while the next is written)" : "");
    return -ENOSPC;
}

/*
 * Can the ranks of this host make their arenas?  A job whose arena cannot
 * be made would train with checkpointing off: refused, unless the user
 * allows it (CKPT_ALLOW_UNPROTECTED=1).
 */
static int arena_usable(const struct options *opt)
{
    char why[PATH_MAX + 128];
    if (ckpt_arena_usable(opt->arena_root, opt->job_name, why, sizeof(why)) == 0)
        return 0;
    if (ckpt_cfg_int(CFG_ALLOW_UNPROTECTED)) {
        ckpt_log(CKPT_WARN, "CKPT_ARENA_DIR=%s: %s: the job trains UNPROTECTED (CKPT_ALLOW_UNPROTECTED=1): no "
                 "snapshot will be taken, and a failure loses all its training", opt->arena_root, why);
        return 0;
    }
    ckpt_log(CKPT_ERROR, "CKPT_ARENA_DIR=%s: %s: the job would train with checkpointing off; point CKPT_ARENA_DIR at "
             "a directory on a tmpfs this user can write to (the default is /dev/shm/ckpt), or set "
             "CKPT_ALLOW_UNPROTECTED=1 to train without protection", opt->arena_root, why);
    return -EACCES;
}

static int configure(struct options *opt, bool restarts_given)
{
    if (!restarts_given)
        opt->max_restarts = (int)ckpt_cfg_int(CFG_MAX_RESTARTS);
    opt->kill_grace_s = ckpt_cfg_seconds(CFG_KILL_GRACE);
    opt->hang_timeout_s = ckpt_cfg_seconds(CFG_HANG_TIMEOUT);
    opt->backoff_s = ckpt_cfg_seconds(CFG_RESTART_BACKOFF);
    opt->keep_arena = ckpt_cfg_int(CFG_KEEP_ARENA);
    opt->first_restore = (uint64_t)ckpt_cfg_int(CFG_RESTORE);
    opt->arena_root = ckpt_cfg_str(CFG_ARENA_DIR);
    if (getenv("CKPT_JOB"))
        snprintf(opt->job_name, sizeof(opt->job_name), "%s", ckpt_cfg_str(CFG_JOB));
    else
        snprintf(opt->job_name, sizeof(opt->job_name), "j%d-%lld", (int)getpid(), (long long)time(NULL));
    const char *logdir = ckpt_cfg_str(CFG_REPLAY_LOG_DIR);
    struct stat st;
    if (logdir && *logdir && strcmp(logdir, CKPT_LOG_IN_ARENA) != 0 && (stat(logdir, &st) < 0 || !S_ISDIR(st.st_mode))) {
        ckpt_log(CKPT_ERROR, "CKPT_REPLAY_LOG_DIR=%s: not a directory; make it, set it to \"" CKPT_LOG_IN_ARENA
                 "\", or unset the variable", logdir);
        return -ENOTDIR;
    }
    if (torchrun_check(opt->cmd) < 0 || (opt->wrap && ckpt_cfg_int(CFG_STANDBY) && torchrun_standby_check(opt->cmd) < 0))
        return -EINVAL;
    int rc = torch_allocator();
    if (rc < 0 || (rc = arena_preflight(opt)) < 0)
        return rc;
    rc = preload_value(&opt->preload, ckpt_cfg_str(CFG_LIB));
    return rc < 0 ? rc : pythonpath_value(&opt->pythonpath, opt->preload, ckpt_cfg_int(CFG_TORCH_HELPER));
}

/*
 * The line before the last: how well the job was protected.  Counted from
 * what the ranks reported (every commit, the snapshots they skipped, how
 * far a boundary got past its rank's newest commit) and what this agent
 * persisted.
 */
static void summary(const struct job *job, int restarts)
{
    const struct channel *c = &job->chan;
    const struct disk *d = &job->disk;
    char disk[160];
    uint64_t skipped = c->skipped;
    for (int i = 0; i < c->nreports; i++)
        skipped += c->reports[i].skipped;
    if (!d->engine || !d->every)
        snprintf(disk, sizeof(disk), "not persisted (CKPT_PERSIST_DIRS unset or unusable)");
    else if (!d->newest)
        snprintf(disk, sizeof(disk), "nothing persisted (%llu failed)", (unsigned long long)d->failed);
    else
        snprintf(disk, sizeof(disk), "persisted through iteration %llu (at most %llu iterations behind the "
                 "commits; %llu generations, %llu skipped, %llu failed)", (unsigned long long)d->newest,
                 (unsigned long long)d->worst_lag, (unsigned long long)d->persisted, (unsigned long long)d->skipped,
                 (unsigned long long)d->failed);
    if (!c->committed)
        ckpt_log(CKPT_INFO, "summary: no snapshot committed%s; %s; %d restart%s",
                 c->unprotected_rank >= 0 ? " (UNPROTECTED)" : "", disk, restarts, restarts == 1 ? "" : "s");
    else
        ckpt_log(CKPT_INFO, "summary: snapshots %llu committed, %llu skipped; in memory through iteration %llu (a "
                 "boundary at most %llu iterations past its rank's newest commit); %s; %d restart%s",
                 (unsigned long long)c->committed, (unsigned long long)skipped, (unsigned long long)c->newest,
                 (unsigned long long)c->worst_lag, disk, restarts, restarts == 1 ? "" : "s");
}

int main(int argc, char **argv)
{
    struct options opt;
    struct job job;
    char err[512];
    bool restarts_given = false, given[4] = { false, false, false, false };
    int restarts = 0;

    ckpt_log_init("ckpt-resume", CKPT_INFO);
    int rc = parse_options(argc, argv, &opt, &restarts_given, given);
    if (rc != 0)
        return rc > 0 ? 0 : USAGE_ERROR;
    if (ckpt_config_load(err, sizeof(err)) < 0) {
        ckpt_log(CKPT_ERROR, "%s", err);
        return USAGE_ERROR;
    }
    ckpt_log_init("ckpt-resume", (int)ckpt_cfg_int(CFG_LOG));
    ckpt_config_unknown(warn_unknown);
    /* Inherited by every process started from here on, launchers and
     * their ranks included (a spare's standbys too, started while it
     * waits): restore by replay needs each device allocation back at its
     * address. */
    if (!ckpt_cfg_int(CFG_ADDR_RANDOMIZE)) {
        int pers = personality(0xffffffff);
        if (pers == -1 || personality((unsigned long)pers | ADDR_NO_RANDOMIZE) == -1)
            ckpt_log(CKPT_WARN, "cannot turn address-space randomisation off (%s): restores of ranks whose "
                     "allocations come back at other addresses will be refused", strerror(errno));
    }
    if (configure(&opt, restarts_given) < 0 || (rc = configure_nodes(&opt, given)) < 0) {
        bridge_stop();
        return USAGE_ERROR;
    }
    if (rc == 1) {
        bridge_stop();
        ckpt_log(CKPT_INFO, "done exit=0 restarts=0 (a spare, not needed)");
        return 0;
    }
    /*
     * A fresh start makes whatever an earlier run of this job left in the
     * arena useless, and stale slots could be taken for this run's when a
     * rank fails before it has written its own.
     */
    /* One node's job: nothing else may take its arena.  On several nodes
     * the coordinator decides which agent is a node (a node's new agent
     * may join while its old one is frozen on the same machine). */
    if (arena_usable(&opt) < 0 || (!opt.coord && arena_lock(&opt) < 0)) {
        bridge_stop();
        return USAGE_ERROR;
    }
    if (!opt.coord && !opt.first_restore && arena_remove(&opt) > 0)
        ckpt_log(CKPT_INFO, "removed the arena an earlier run of job %s left", opt.job_name);
    if (metrics_start() < 0) {
        bridge_stop();
        return USAGE_ERROR;
    }

    rc = job_open(&job, &opt);
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "cannot prepare the job: %s", strerror(-rc));
        bridge_stop();
        job_close(&job);
        free(opt.preload);
        free(opt.pythonpath);
        ckpt_log(CKPT_INFO, "done exit=1 restarts=0");
        metrics_stop();
        return 1;
    }
    if (opt.spare)
        spare_adopt(&job);
    int code;
    if (opt.coord) {
        code = member_run(&job, &restarts);
        bridge_stop();
        disk_finish(&job);
        job_settle(&opt, code);
    } else {
        code = job_run(&job, &restarts);
    }
    summary(&job, restarts);
    metrics_update(&job, true);
    char unprotected[96] = "";
    if (job.chan.unprotected_rank >= 0)
        snprintf(unprotected, sizeof(unprotected), " UNPROTECTED: rank %d ran with checkpointing off (said above)",
                 job.chan.unprotected_rank);
    if (job.recovered[0] && job.recovered_more)
        ckpt_log(CKPT_INFO, "done exit=%d restarts=%d (%s, and %d more)%s", code, restarts, job.recovered,
                 job.recovered_more, unprotected);
    else if (job.recovered[0])
        ckpt_log(CKPT_INFO, "done exit=%d restarts=%d (%s)%s", code, restarts, job.recovered, unprotected);
    else
        ckpt_log(CKPT_INFO, "done exit=%d restarts=%d%s", code, restarts, unprotected);
    metrics_stop();
    job_close(&job);
    free(opt.preload);
    free(opt.pythonpath);
    return code;
}
