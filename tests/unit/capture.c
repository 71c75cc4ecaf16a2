/*
 * Capture, end to end through an unmodified program: statewriter runs under
 * LD_PRELOAD=libckpt.so for a random number of iterations k, then the
 * arena is read back with the format's own verifier.  The newest committed
 * snapshot must be of iteration k and hold exactly pattern(k-1, ...) in
 * exactly the allocations the program had live (ordinals and sizes), with
 * scratch kernels racing beside it, allocation churn through every path,
 * both consistency modes, and every CKPT_SCHED (gap pacing its copies
 * between two AllReduces per iteration, 15 ms apart so that a loaded
 * machine's jitter leaves them open, with more state than the gaps
 * carry so that some of it spills to the update); the older slot must be the previous
 * iteration's, untouched (double buffering).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image.h"
#include "../progs/pattern.h"

static const struct {
    const char *name, *boundary, *consistency;
    int churn;
    const char *sched, *args; /* CKPT_SCHED, statewriter's extra arguments */
    const char *gbps;         /* FAKEGPU_COPY_GBPS when not 4 */
} cases[] = {
    {"auto boundary, overlap", "auto", "overlap", 0, "gap", "", NULL},
    {"auto boundary, strict", "auto", "strict", 0, "gap", "", NULL},
    {"every:1, churn, overlap", "every:1", "overlap", 1, "gap", "", NULL},
    {"every:1, churn, strict", "every:1", "strict", 1, "gap", "", NULL},
    {"auto boundary, collectives, CKPT_SCHED=gap", "auto", "overlap", 0, "gap", "--nccl 15 --mib 48", NULL},
    {"auto boundary, collectives, CKPT_SCHED=eager", "auto", "overlap", 0, "eager", "--nccl 4 --mib 48", NULL},
    {"auto boundary, collectives, CKPT_SCHED=off", "auto", "overlap", 0, "off", "--nccl 4 --mib 48", NULL},
    /* Copies slower than the writes, so that unordered writes overtake them. */
    {"every:1, a new stream each iteration, overlap", "every:1", "overlap", 0, "eager", "--streams --mib 16", "0.1"},
};

struct live {
    unsigned long long ordinal;
    size_t bytes;
};

static char build[PATH_MAX];

static int load_slot(const char *dir, int s, void **map, size_t *len)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof(path), "%s/slot%d", dir, s);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return -ENOENT;
    }
    *len = (size_t)st.st_size;
    *map = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return *map == MAP_FAILED ? -errno : 0;
}

/* Checks one image against the live set; returns the number of problems. */
static int check_image(const char *name, const void *img, const struct ckpt_header *h, const struct live *live,
                       int nlive, uint64_t iter)
{
    int bad = 0;
    const struct ckpt_rec *recs = ckpt_image_recs(img);
    if (h->iteration != iter) {
        printf("%s: snapshot of iteration %llu, expected %llu\n", name, (unsigned long long)h->iteration,
               (unsigned long long)iter);
        return 1;
    }
    /* Scratch buffers (ordinals 0, 1) are allocations too, so they are in it. */
    if ((int)h->nallocs != nlive + 2) {
        printf("%s: %llu allocations in the snapshot, the program had %d live\n", name,
               (unsigned long long)h->nallocs, nlive + 2);
        return 1;
    }
    for (int i = 0; i < nlive; i++) {
        const struct ckpt_rec *r = &recs[i + 2];
        if (r->ordinal != live[i].ordinal || r->size != live[i].bytes) {
            printf("%s: record %d is ordinal %llu (%llu bytes), expected %llu (%zu bytes)\n", name, i + 2,
                   (unsigned long long)r->ordinal, (unsigned long long)r->size, live[i].ordinal, live[i].bytes);
            bad++;
            continue;
        }
        const uint32_t *w = (const uint32_t *)((const char *)img + h->data_offset + r->offset);
        for (size_t k = 0; k < r->bytes / 4; k++) {
            if (w[k] != pattern(iter - 1, r->ordinal, k)) {
                printf("%s: ordinal %llu word %zu is %08x, expected %08x (iteration %llu's)\n", name,
                       (unsigned long long)r->ordinal, k, w[k], pattern(iter - 1, r->ordinal, k),
                       (unsigned long long)(iter - 1));
                bad++;
                break;
            }
        }
    }
    return bad;
}

static int run_case(int c, int iters)
{
    char root[] = "/tmp/ckpt-capture-XXXXXX", cmd[3 * PATH_MAX], dir[64];
    if (!mkdtemp(root))
        return 1;
    snprintf(cmd, sizeof(cmd),
             "CKPT_STATS_FILE=%s/stats CKPT_ARENA_DIR=%s CKPT_JOB=t CKPT_BOUNDARY=%s CKPT_CONSISTENCY=%s CKPT_SCHED=%s FAKEGPU_COPY_GBPS=%s "
             "LD_PRELOAD=%s/lib/libckpt.so %s/tests/progs/statewriter --iters %d %s %s",
             root, root, cases[c].boundary, cases[c].consistency, cases[c].sched, cases[c].gbps ? cases[c].gbps : "4",
             build, build, iters,
             cases[c].churn ? "--churn" : "", cases[c].args);
    FILE *p = popen(cmd, "r");
    struct live live[256];
    int nlive = 0;
    char line[256];
    while (p && fgets(line, sizeof(line), p) && nlive < 256) {
        int last;
        if (sscanf(line, "live %llu %zu %d", &live[nlive].ordinal, &live[nlive].bytes, &last) == 3)
            nlive++;
    }
    int status = p ? pclose(p) : -1;
    int bad = 0;
    if (status != 0) {
        printf("%s: statewriter failed (status %d): %s\n", cases[c].name, status, cmd);
        bad++;
    }

    /* The copies really were paced; not asked under ThreadSanitizer, whose
     * copies run a hundred times slower than the gaps they are sized for
     * (the consistency checks below still hold there). */
    if (strcmp(cases[c].sched, "gap") == 0 && *cases[c].args && !getenv("TEST_UNDER_TSAN")) {
        char stats[PATH_MAX + 64];
        snprintf(stats, sizeof(stats), "grep -q '\"paced\":true,\"boundary_bytes\":0,\"gap_bytes\":[1-9]' %s/stats",
                 root);
        if (system(stats) != 0) {
            printf("%s: no snapshot had copies in the gaps (%s/stats)\n", cases[c].name, root);
            bad++;
        }
    }
    snprintf(dir, sizeof(dir), "%s/%u-t/rank0", root, (unsigned)geteuid());
    void *img[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    struct ckpt_header h[2];
    int ok[2];
    char why[256];
    for (int s = 0; s < 2; s++) {
        ok[s] = load_slot(dir, s, &img[s], &len[s]) == 0 && ckpt_image_verify(img[s], len[s], &h[s], why, sizeof(why)) == 0;
    }
    int newest = ok[0] && (!ok[1] || h[0].generation > h[1].generation) ? 0 : ok[1] ? 1 : -1;
    if (!bad && newest < 0) {
        printf("%s: no verified snapshot in %s (%s)\n", cases[c].name, dir, why);
        bad++;
    }
    if (!bad)
        bad += check_image(cases[c].name, img[newest], &h[newest], live, nlive, (uint64_t)iters);
    /* The other slot: the previous generation, of the previous iteration. */
    int older = 1 - newest;
    if (!bad && !cases[c].churn) {
        if (!ok[older] || h[older].generation + 1 != h[newest].generation) {
            printf("%s: the older slot is not the previous generation\n", cases[c].name);
            bad++;
        } else {
            bad += check_image(cases[c].name, img[older], &h[older], live, nlive, (uint64_t)iters - 1);
        }
    }
    for (int s = 0; s < 2; s++)
        if (img[s] && img[s] != MAP_FAILED)
            munmap(img[s], len[s]);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        bad++;
    printf("%s, %d iterations: %s\n", cases[c].name, iters, bad ? "FAIL" : "ok");
    return bad;
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *b = getenv("BUILD");
    if (b)
        snprintf(build, sizeof(build), "%s", b);
    else {
        snprintf(build, sizeof(build), "%s", argv[0]);
        for (int up = 0; up < 3; up++) /* build/tests/unit/capture -> build */
            *strrchr(build, '/') = '\0';
    }
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int bad = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        bad += run_case((int)c, *cases[c].args ? 9 + rand() % 6 : 5 + rand() % 8); /* gap: profiled by 6 */
    return bad ? 1 : 0;
}
