/*
 * ckpt-persist: the persistence engine of runtime/persist.h from the
 * command line, for tests, benchmarks and by-hand recovery.  It calls
 * exactly the functions the node agent calls and adds nothing but option
 * parsing, finding the ranks of an arena, and printing: one result line
 * on stdout, reasons on stderr.  SIGINT/SIGTERM cancel cleanly (the
 * partial generation is removed).  It must never be run while the job's
 * ranks are being restarted into the same arena.
 *
 *   ckpt-persist save    [--job J] [--arena DIR] [--dirs D1,D2] [--ranks N] [--iteration K]
 *   ckpt-persist list    [--job J] [--dirs D1,D2] [--verify]
 *   ckpt-persist restore [--job J] [--arena DIR] [--dirs D1,D2] [--iteration K]
 *   common: [--depth N] [--block-kb K] [--keep N] [--rings N]
 * Defaults come from CKPT_JOB, CKPT_ARENA_DIR, CKPT_PERSIST_DIRS,
 * CKPT_IO_DEPTH, CKPT_IO_BLOCK_KB and CKPT_PERSIST_KEEP.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "log.h"
#include "persist.h"

static struct ckpt_persist *engine;

static void on_signal(int sig)
{
    (void)sig;
    if (engine)
        ckpt_persist_cancel(engine);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ckpt-persist save    [--job J] [--arena DIR] [--dirs D1,D2] [--ranks N] [--iteration K]\n"
               "       ckpt-persist list    [--job J] [--dirs D1,D2] [--verify]\n"
               "       ckpt-persist restore [--job J] [--arena DIR] [--dirs D1,D2] [--iteration K]\n"
               "common options: [--depth N] [--block-kb K] [--keep N] [--rings N]\n"
               "defaults: CKPT_JOB, CKPT_ARENA_DIR, CKPT_PERSIST_DIRS, CKPT_IO_DEPTH, CKPT_IO_BLOCK_KB, "
               "CKPT_PERSIST_KEEP\n");
}

static int number(const char *opt, const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (errno || !*s || *end || *s == '-' || *out > max) {
        fprintf(stderr, "ckpt-persist: %s '%s': expected an integer up to %llu\n", opt, s, max);
        return -1;
    }
    return 0;
}

static int by_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The ranks with a directory in the job's arena. */
static int find_ranks(const char *arena, const char *job, int **ranks, unsigned *n)
{
    char dir[PATH_MAX];
    if (ckpt_job_dir(dir, sizeof(dir), arena, job) < 0) {
        fprintf(stderr, "ckpt-persist: error: the arena path of job %s under %s is too long\n", job, arena);
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ckpt-persist: error: no arena of job %s: %s: %s\n", job, dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    unsigned cap = 0;
    while ((e = readdir(d))) {
        int r;
        if (!ckpt_rank_dir_name(e->d_name, &r))
            continue;
        if (*n == cap && !(*ranks = realloc(*ranks, (cap = cap ? 2 * cap : 8) * sizeof(**ranks))))
            break;
        (*ranks)[(*n)++] = r;
    }
    closedir(d);
    if (!*n) {
        fprintf(stderr, "ckpt-persist: error: no rank directory in %s\n", dir);
        return -1;
    }
    qsort(*ranks, *n, sizeof(**ranks), by_int);
    return 0;
}

static void print_gen(void *arg, const struct ckpt_persist_gen *g)
{
    (void)arg;
    if (g->status)
        printf("iteration %llu: not usable: %s\n", (unsigned long long)g->iteration, g->why);
    else
        printf("iteration %llu: complete, ranks %u, bytes %llu, stored %llu\n", (unsigned long long)g->iteration,
               g->nranks, (unsigned long long)g->logical_bytes, (unsigned long long)g->stored_bytes);
}

static void print_stats(const char *verb, const char *job, const struct ckpt_persist_stats *st)
{
    double s = st->seconds > 0 ? st->seconds : 1e-9;
    printf("%s iteration %llu of job %s: ranks %u, bytes %llu, %s %llu, seconds %.3f, GB/s %.2f%s\n", verb,
           (unsigned long long)st->iteration, job, st->nranks, (unsigned long long)st->logical_bytes,
           verb[0] == 'p' ? "written" : "read", (unsigned long long)st->moved_bytes, st->seconds,
           (double)st->moved_bytes / s / 1e9, st->registered ? "" : " (unregistered buffers)");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"job", required_argument, NULL, 'j'},      {"arena", required_argument, NULL, 'a'},
        {"dirs", required_argument, NULL, 'd'},     {"ranks", required_argument, NULL, 'n'},
        {"iteration", required_argument, NULL, 'i'}, {"verify", no_argument, NULL, 'v'},
        {"depth", required_argument, NULL, 'q'},    {"block-kb", required_argument, NULL, 'b'},
        {"keep", required_argument, NULL, 'k'},     {"rings", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    char err[512], why[512];
    struct ckpt_persist_opts o;
    struct ckpt_persist_req rq = {0};
    struct ckpt_persist_stats st;
    unsigned long long v, nranks = 0;
    unsigned flags = 0;
    int *ranks = NULL, c, rc;

    if (ckpt_config_load(err, sizeof(err)) < 0) {
        fprintf(stderr, "ckpt-persist: error: %s\n", err);
        return 2;
    }
    ckpt_log_init("ckpt-persist", (int)ckpt_cfg_int(CFG_LOG));
    ckpt_persist_opts_from_config(&o);
    rq.job = ckpt_cfg_str(CFG_JOB);
    rq.arena = ckpt_cfg_str(CFG_ARENA_DIR);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "save") != 0 && strcmp(cmd, "list") != 0 && strcmp(cmd, "restore") != 0) {
        fprintf(stderr, "ckpt-persist: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'j': rq.job = optarg; break;
        case 'a': rq.arena = optarg; break;
        case 'd': o.dirs = optarg; break;
        case 'v': flags |= CKPT_PERSIST_VERIFY; break;
        case 'n': if (number("--ranks", optarg, 1u << 20, &nranks) < 0 || !nranks) return 2; break;
        case 'i': if (number("--iteration", optarg, ~0ull, &v) < 0) return 2; rq.iteration = v; break;
        case 'q': if (number("--depth", optarg, 4096, &v) < 0) return 2; o.depth = (unsigned)v; break;
        case 'b': if (number("--block-kb", optarg, 65536, &v) < 0) return 2; o.block_kb = (unsigned)v; break;
        case 'k': if (number("--keep", optarg, 1000, &v) < 0) return 2; o.keep = (unsigned)v; break;
        case 'r': if (number("--rings", optarg, 64, &v) < 0) return 2; o.rings = (unsigned)v; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ckpt-persist: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((rc = ckpt_persist_open(&engine, &o, why, sizeof(why))) < 0) {
        fprintf(stderr, "ckpt-persist: error: %s\n", why);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (strcmp(cmd, "list") == 0) {
        rc = ckpt_persist_list(engine, rq.job, flags, print_gen, NULL, why, sizeof(why));
    } else if (strcmp(cmd, "restore") == 0) {
        if (!(rc = ckpt_persist_restore(engine, &rq, &st, why, sizeof(why))))
            print_stats("restored", rq.job, &st);
    } else {
        unsigned n = 0;
        if (nranks) {
            ranks = calloc(nranks, sizeof(*ranks));
            for (n = 0; ranks && n < nranks; n++)
                ranks[n] = (int)n;
        } else if (find_ranks(rq.arena, rq.job, &ranks, &n) < 0) {
            ckpt_persist_close(engine);
            return 1;
        }
        rq.ranks = ranks;
        rq.nranks = n;
        if (!(rc = ckpt_persist_generation(engine, &rq, &st, why, sizeof(why))))
            print_stats("persisted", rq.job, &st);
    }
    if (rc < 0)
        fprintf(stderr, "ckpt-persist: error: %s\n", why);
    free(ranks);
    ckpt_persist_close(engine);
    return rc < 0 ? 1 : 0;
}
