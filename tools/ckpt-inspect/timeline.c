/*
 * `ckpt-inspect timeline [--iters A..B] [--rank R|all] [-o FILE.svg]`:
 * reads one rank's timeline from the arena (runtime/timeline.h), or every
 * rank's of this node, and draws it as an SVG (timeline_svg.c), or lists
 * the events on stdout without -o.  A timeline that does not verify is
 * refused, never drawn.  It only reads the arena.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "inspect.h"
#include "log.h"
#include "timeline.h"

static const char *kind_name(uint16_t kind)
{
    switch (kind) {
    case CKPT_TL_COLL: return "collective";
    case CKPT_TL_COPY: return "copy";
    case CKPT_TL_COMMIT: return "commit";
    case CKPT_TL_BOUNDARY: return "boundary";
    case CKPT_TL_NET: return "send";
    case CKPT_TL_DISK: return "disk-write";
    case CKPT_TL_STANDBY: return "standby";
    default: return "?";
    }
}

/* Reads and verifies path.  Returns the file's bytes (the caller frees
 * them) with h filled, or NULL after saying why (*rc: the exit status). */
static char *load(const char *path, struct ckpt_tl_header *h, int *rc)
{
    char why[256];
    struct stat st;
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    *rc = EXIT_DAMAGED;
    if (fd < 0 || fstat(fd, &st) < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", path, strerror(errno));
        *rc = errno == ENOENT ? EXIT_DAMAGED : EXIT_ERROR;
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (st.st_size > (off_t)(sizeof(*h) + (size_t)CKPT_TL_CAP * sizeof(struct ckpt_tl_event))) {
        ckpt_log(CKPT_ERROR, "%s: %lld bytes, more than any timeline holds", path, (long long)st.st_size);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        ckpt_log(CKPT_ERROR, "out of memory");
        *rc = EXIT_ERROR;
    } else if (read(fd, buf, (size_t)st.st_size) != st.st_size) {
        ckpt_log(CKPT_ERROR, "%s: short read", path);
        *rc = EXIT_ERROR;
        free(buf);
        buf = NULL;
    } else if (ckpt_tl_decode(buf, (size_t)st.st_size, h, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", path, why);
        free(buf);
        buf = NULL;
    }
    close(fd);
    return buf;
}

/* The node agent's events (dir/timeline.agent, when it verifies) appended
 * to the rank's, each placed in the iteration in progress at its start
 * (by the rank's boundaries).  Returns the new buffer (buf freed, h's
 * nevents grown) or NULL, leaving buf as it was. */
static char *with_agent(const char *path, char *buf, struct ckpt_tl_header *h)
{
    struct ckpt_tl_header ah;
    int rc;
    if (access(path, F_OK) != 0)
        return NULL;
    char *abuf = load(path, &ah, &rc);
    if (!abuf)
        return NULL;
    size_t n = h->nevents, m = ah.nevents;
    char *out = realloc(buf, h->header_bytes + (n + m) * sizeof(struct ckpt_tl_event));
    if (!out) {
        free(abuf);
        return NULL;
    }
    struct ckpt_tl_event *ev = (struct ckpt_tl_event *)(out + h->header_bytes);
    const struct ckpt_tl_event *add = (const struct ckpt_tl_event *)(abuf + ah.header_bytes);
    for (size_t j = 0; j < m; j++) {
        uint64_t it = 0, at = 0; /* the newest boundary before the event */
        for (size_t i = 0; i < n; i++)
            if (ev[i].kind == CKPT_TL_BOUNDARY && ev[i].start_ns <= add[j].start_ns && ev[i].start_ns >= at) {
                at = ev[i].start_ns;
                it = ev[i].iteration;
            }
        ev[n + j] = add[j];
        ev[n + j].iteration = it + 1;
    }
    h->nevents = n + m;
    free(abuf);
    return out;
}

/* "A..B" or "A": an inclusive range of iterations. */
static int parse_iters(const char *s, uint64_t *a, uint64_t *b)
{
    char first[32];
    const char *dots = strstr(s, "..");

    if (!dots)
        return parse_u64(s, 1, UINT64_MAX, a) < 0 ? -EINVAL : parse_u64(s, 1, UINT64_MAX, b);
    if ((size_t)(dots - s) >= sizeof(first))
        return -EINVAL;
    memcpy(first, s, (size_t)(dots - s));
    first[dots - s] = '\0';
    if (parse_u64(first, 1, UINT64_MAX, a) < 0 || parse_u64(dots + 2, 1, UINT64_MAX, b) < 0 || *a > *b)
        return -EINVAL;
    return 0;
}

static void list(const struct ckpt_tl_event *ev, size_t n, uint64_t a, uint64_t b, uint64_t t0)
{
    for (size_t i = 0; i < n; i++) {
        char what[64] = "-";
        if (ev[i].iteration < a || ev[i].iteration > b)
            continue;
        if (ev[i].kind == CKPT_TL_COLL)
            snprintf(what, sizeof(what), "%s", ckpt_tl_func_name(ev[i].detail));
        else if (ev[i].kind == CKPT_TL_STANDBY) /* where it stood, and how far behind */
            snprintf(what, sizeof(what), "at=%llu,behind=%u", (unsigned long long)ev[i].arg, ev[i].detail);
        uint32_t f = ev[i].flags;
        const char *how = f & CKPT_TL_SPILL ? " spill" : f & CKPT_TL_PACED ? " gap" : f & CKPT_TL_TOUCH ? " touch" : "";
        printf("%llu %s %.3f %.3f %s %s%s\n", (unsigned long long)ev[i].iteration, kind_name(ev[i].kind),
               (ev[i].start_ns - t0) / 1e6, (ev[i].end_ns - t0) / 1e6, what, f & CKPT_TL_GPU_TIME ? "gpu" : "host",
               how);
    }
}

/* The timeline of the rank whose arena directory is @dir, with its node
 * agent's events merged in: the file's bytes (the caller frees them) with
 * @h filled, or NULL after saying why (*rc: the exit status). */
static char *rank_timeline(const char *dir, struct ckpt_tl_header *h, int *rc)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_FILE);
    char *buf = load(path, h, rc);
    if (!buf)
        return NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_AGENT_FILE);
    char *merged = with_agent(path, buf, h);
    return merged ? merged : buf;
}

/* The ranks of the job's arena that hold a timeline, in order, into
 * @ranks (room for @max); their count. */
static size_t arena_ranks(const char *jobdir, uint32_t *ranks, size_t max)
{
    DIR *d = opendir(jobdir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        char path[PATH_MAX + 300];
        int rank;
        if (!ckpt_rank_dir_name(e->d_name, &rank))
            continue;
        snprintf(path, sizeof(path), "%s/%s/%s", jobdir, e->d_name, CKPT_TL_FILE);
        if (access(path, F_OK) != 0)
            continue;
        uint32_t r = (uint32_t)rank;
        size_t i = n++;
        for (; i > 0 && ranks[i - 1] > r; i--)
            ranks[i] = ranks[i - 1];
        ranks[i] = r;
    }
    if (d)
        closedir(d);
    return n;
}

#define MAX_NODE_RANKS 256

int cmd_timeline(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names keep = {0};
    const char *job, *out = NULL;
    char jobdir[PATH_MAX], dir[PATH_MAX];
    uint32_t ranks[MAX_NODE_RANKS];
    uint64_t rank = 0, a = 0, b = 0;
    bool all = false;
    size_t nranks = 1;
    int rc;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc && strcmp(argv[i + 1], "all") == 0) {
            all = true;
            i++;
        } else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc &&
                   parse_u64(argv[i + 1], 0, 1 << 24, &rank) == 0) {
            i++;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc && parse_iters(argv[i + 1], &a, &b) == 0) {
            i++;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else {
            ckpt_log(CKPT_ERROR, "usage: ckpt-inspect timeline [--iters A..B] [--rank R|all] [-o FILE.svg] "
                     "(bad or unknown argument '%s')", argv[i]);
            return EXIT_USAGE;
        }
    }
    int nt = tiers_open(o, tiers, MAX_TIERS);
    if (job_one(o, tiers, nt, &job, &keep) < 0) {
        names_free(&keep);
        return EXIT_ERROR;
    }
    char jobname[CKPT_JOB_MAX + 1];
    snprintf(jobname, sizeof(jobname), "%s", job);
    names_free(&keep);
    rc = ckpt_job_dir(jobdir, sizeof(jobdir), o->arena_root, jobname);
    if (rc == 0)
        rc = ckpt_rank_dir(dir, sizeof(dir), jobdir, all ? 0 : (int)rank);
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "no arena path for rank %llu: %s", (unsigned long long)rank, strerror(-rc));
        return EXIT_ERROR;
    }
    ranks[0] = (uint32_t)rank;
    if (all) {
        nranks = arena_ranks(jobdir, ranks, MAX_NODE_RANKS);
        if (!nranks) {
            ckpt_log(CKPT_ERROR, "%s: no rank of this node has a timeline", jobdir);
            return EXIT_DAMAGED;
        }
    }

    struct ckpt_tl_header h[MAX_NODE_RANKS];
    char *buf[MAX_NODE_RANKS] = {0};
    struct tl_rank tr[MAX_NODE_RANKS];
    uint64_t last = 0, t0 = UINT64_MAX;
    rc = EXIT_OK;
    for (size_t k = 0; k < nranks && rc == EXIT_OK; k++) {
        if (all)
            ckpt_rank_dir(dir, sizeof(dir), jobdir, (int)ranks[k]);
        int lrc;
        if (!(buf[k] = rank_timeline(dir, &h[k], &lrc))) {
            rc = lrc;
            break;
        }
        tr[k] = (struct tl_rank){.rank = h[k].rank, .ev = (const struct ckpt_tl_event *)(buf[k] + h[k].header_bytes),
                                 .n = h[k].nevents};
        for (size_t i = 0; i < tr[k].n; i++)
            last = tr[k].ev[i].iteration > last ? tr[k].ev[i].iteration : last;
    }
    if (rc == EXIT_OK && !b) { /* the last few iterations */
        b = last;
        a = last > 3 ? last - 3 : 1;
    }
    for (size_t k = 0; k < nranks && rc == EXIT_OK; k++)
        for (size_t i = 0; i < tr[k].n; i++)
            if (tr[k].ev[i].iteration >= a && tr[k].ev[i].iteration <= b && tr[k].ev[i].start_ns < t0)
                t0 = tr[k].ev[i].start_ns;
    if (rc == EXIT_OK && t0 == UINT64_MAX) {
        ckpt_log(CKPT_ERROR, "%s holds no event of iterations %llu..%llu (it has up to %llu)",
                 all ? "no timeline of this node" : dir, (unsigned long long)a, (unsigned long long)b,
                 (unsigned long long)last);
        rc = EXIT_DAMAGED;
    }
    if (rc == EXIT_OK && !out) {
        for (size_t k = 0; k < nranks; k++) {
            printf("# rank %u, iterations %llu..%llu, %llu events in the file, %llu dropped; times in ms\n",
                   h[k].rank, (unsigned long long)a, (unsigned long long)b, (unsigned long long)h[k].nevents,
                   (unsigned long long)h[k].dropped);
            list(tr[k].ev, tr[k].n, a, b, t0);
        }
    } else if (rc == EXIT_OK) {
        FILE *f = fopen(out, "w");
        if (!f) {
            ckpt_log(CKPT_ERROR, "%s: %s", out, strerror(errno));
            rc = EXIT_ERROR;
        } else {
            timeline_svg(f, tr, nranks, a, b);
            if (fclose(f) != 0) {
                ckpt_log(CKPT_ERROR, "%s: %s", out, strerror(errno));
                rc = EXIT_ERROR;
            }
        }
    }
    for (size_t k = 0; k < nranks; k++)
        free(buf[k]);
    return rc;
}
