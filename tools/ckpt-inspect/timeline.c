/*
 * `ckpt-inspect timeline [--iters A..B] [--rank R] [-o FILE.svg]`: reads
 * one rank's timeline from the arena (runtime/timeline.h) and draws it as
 * an SVG (timeline_svg.c), or lists its events on stdout without -o.  A
 * timeline that does not verify is refused, never drawn.  It only reads
 * the arena.
 */
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
        if (ev[i].iteration < a || ev[i].iteration > b)
            continue;
        printf("%llu %s %.3f %.3f %s %s%s\n", (unsigned long long)ev[i].iteration, kind_name(ev[i].kind),
               (ev[i].start_ns - t0) / 1e6, (ev[i].end_ns - t0) / 1e6,
               ev[i].kind == CKPT_TL_COLL ? ckpt_tl_func_name(ev[i].detail) : "-",
               ev[i].flags & CKPT_TL_GPU_TIME ? "gpu" : "host", ev[i].flags & CKPT_TL_SPILL ? " spill" : ev[i].flags & CKPT_TL_PACED ? " gap" : "");
    }
}

int cmd_timeline(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names keep = {0};
    struct ckpt_tl_header h;
    const char *job, *out = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 16];
    uint64_t rank = 0, a = 0, b = 0;
    int rc;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc && parse_u64(argv[i + 1], 0, 1 << 24, &rank) == 0) {
            i++;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc && parse_iters(argv[i + 1], &a, &b) == 0) {
            i++;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else {
            ckpt_log(CKPT_ERROR, "usage: ckpt-inspect timeline [--iters A..B] [--rank R] [-o FILE.svg] "
                     "(bad or unknown argument '%s')", argv[i]);
            return EXIT_USAGE;
        }
    }
    int nt = tiers_open(o, tiers, MAX_TIERS);
    if (job_one(o, tiers, nt, &job, &keep) < 0) {
        names_free(&keep);
        return EXIT_ERROR;
    }
    rc = ckpt_arena_path(dir, sizeof(dir), o->arena_root, job, (int)rank);
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_FILE);
    names_free(&keep);
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "no arena path for rank %llu: %s", (unsigned long long)rank, strerror(-rc));
        return EXIT_ERROR;
    }
    char *buf = load(path, &h, &rc);
    if (!buf)
        return rc;
    struct ckpt_tl_event *ev = (struct ckpt_tl_event *)(buf + h.header_bytes);
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_AGENT_FILE);
    char *merged = with_agent(path, buf, &h);
    if (merged) {
        buf = merged;
        ev = (struct ckpt_tl_event *)(buf + h.header_bytes);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_FILE);
    uint64_t last = 0, t0 = UINT64_MAX;
    for (size_t i = 0; i < h.nevents; i++)
        last = ev[i].iteration > last ? ev[i].iteration : last;
    if (!b) { /* the last few iterations */
        b = last;
        a = last > 3 ? last - 3 : 1;
    }
    for (size_t i = 0; i < h.nevents; i++)
        if (ev[i].iteration >= a && ev[i].iteration <= b && ev[i].start_ns < t0)
            t0 = ev[i].start_ns;
    if (t0 == UINT64_MAX) {
        ckpt_log(CKPT_ERROR, "%s holds no event of iterations %llu..%llu (it has up to %llu)", path,
                 (unsigned long long)a, (unsigned long long)b, (unsigned long long)last);
        free(buf);
        return EXIT_DAMAGED;
    }
    rc = EXIT_OK;
    if (!out) {
        printf("# rank %u, iterations %llu..%llu, %llu events in the file, %llu dropped; times in ms\n", h.rank,
               (unsigned long long)a, (unsigned long long)b, (unsigned long long)h.nevents,
               (unsigned long long)h.dropped);
        list(ev, h.nevents, a, b, t0);
    } else {
        FILE *f = fopen(out, "w");
        if (!f) {
            ckpt_log(CKPT_ERROR, "%s: %s", out, strerror(errno));
            rc = EXIT_ERROR;
        } else {
            timeline_svg(f, ev, h.nevents, a, b, h.rank);
            if (fclose(f) != 0) {
                ckpt_log(CKPT_ERROR, "%s: %s", out, strerror(errno));
                rc = EXIT_ERROR;
            }
        }
    }
    free(buf);
    return rc;
}
