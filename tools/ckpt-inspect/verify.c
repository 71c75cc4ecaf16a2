/*
 * `ckpt-inspect verify [GEN|all]`: every copy of one generation (default:
 * the newest that every rank holds) in every tier, every chunk checked,
 * and every rank's replay log, whose records must all verify and reach
 * the generation's iteration (a restore replays up to it).  Any problem is
 * named (rank, slot or log, chunk or byte) and makes the exit status 1.
 * An image whose header does not verify could be of any generation, so it
 * is always a problem.  A job that is running is verified as it is: the
 * last record of a log still being written is looked at again.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "arena.h"
#include "inspect.h"
#include "log.h"
#include "replay.h"

static int problems;
static struct progress bar;

static void bad_chunk(const struct image *img, const char *why)
{
    char name[64];
    progress_pause(&bar);
    printf("%s: generation %llu: %s\n", image_name(img, name, sizeof(name)), (unsigned long long)img->h.generation,
           why);
    fflush(stdout);
    problems++;
}

/* Whether img is one of those asked for (all: gen is 0). */
static bool selected(const struct image *img, uint64_t gen)
{
    if (img->state == IMG_EMPTY)
        return false;
    return img->state < IMG_HEADER_OK || !gen || img->h.generation == gen;
}

static void report(const struct image *img)
{
    char name[64], size[32], epoch[32] = "";

    image_name(img, name, sizeof(name));
    progress_pause(&bar);
    if (img->h.epoch) /* committed under a plan of several nodes' */
        snprintf(epoch, sizeof(epoch), ", epoch %llu", (unsigned long long)img->h.epoch);
    if (img->state == IMG_VERIFIED)
        printf("%s: generation %llu, iteration %llu%s, %s: verified\n", name, (unsigned long long)img->h.generation,
               (unsigned long long)img->h.iteration, epoch,
               human_bytes(img->h.data_offset + img->h.data_bytes, size, sizeof(size)));
    else if (img->state != IMG_BAD_DATA) /* bad_chunk named each chunk */
        printf("%s: %s\n", name, img->why), problems++;
    fflush(stdout);
}

/* The replay log that goes with img must verify and reach iteration. */
static void check_log(const struct image *img, uint64_t iteration)
{
    const struct tier *t = img->tier;
    char why[512], name[PATH_MAX + 64];
    uint64_t last;
    int rc;

    char dir[PATH_MAX], disk[PATH_MAX];
    if (t->ops->log_per_copy)
        snprintf(name, sizeof(name), "%s gen-%llu", t->ops->name, (unsigned long long)img->key);
    else if (t->ops == &arena_tier_ops && ckpt_arena_path(dir, sizeof(dir), t->root, img->job, img->rank) == 0 &&
             ckpt_rlog_where(dir, disk, sizeof(disk)) == 1)
        snprintf(name, sizeof(name), "%s, kept on disk in %s", t->ops->name, disk);
    else
        snprintf(name, sizeof(name), "%s", t->ops->name);
    /* A record cut short may be one that a live rank is writing now. */
    for (int tries = 0; (rc = t->ops->rlog_verify(t, img, &last, why, sizeof(why))) == -ENODATA && tries < 20;
         tries++)
        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
    if (rc < 0) {
        printf("rank%d replay log (%s): %s\n", img->rank, name, why);
        problems++;
    } else if (last < iteration) {
        printf("rank%d replay log (%s): ends at iteration %llu, before iteration %llu: that snapshot cannot be "
               "restored\n", img->rank, name, (unsigned long long)last, (unsigned long long)iteration);
        problems++;
    } else {
        printf("rank%d replay log (%s): verified through iteration %llu\n", img->rank, name,
               (unsigned long long)last);
    }
}

/* The logs of rank in tier t: one per rank (checked against the highest
 * iteration asked for), or each selected copy's own. */
static void check_logs(const struct catalog *cat, const struct tier *t, int rank, uint64_t gen, uint64_t iteration)
{
    const struct image *one = NULL;
    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        if (img->rank != rank || img->tier != t)
            continue;
        if (!t->ops->log_per_copy) {
            one = img;
            break;
        }
        /* A copy whose header did not verify has already been reported. */
        if (img->state >= IMG_HEADER_OK && img->state != IMG_CHANGED && (!gen || img->h.generation == gen))
            check_log(img, img->h.iteration);
    }
    if (one)
        check_log(one, iteration);
}

/* What rank holds of gen (all: of any generation): whether a copy
 * verified, and the iteration its log must reach. */
static bool rank_verified(const struct catalog *cat, int rank, uint64_t gen, uint64_t *iteration)
{
    bool ok = false;
    *iteration = 0;
    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        if (img->rank != rank || img->state != IMG_VERIFIED || (gen && img->h.generation != gen))
            continue;
        ok = true;
        if (img->h.iteration > *iteration)
            *iteration = img->h.iteration;
    }
    return ok;
}

int cmd_verify(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names keep = {0};
    struct catalog cat = {0};
    const char *job;
    uint64_t gen = 0, iteration = 0;

    if (argc > 1 || (argc == 1 && strcmp(argv[0], "all") != 0 && parse_u64(argv[0], 1, UINT64_MAX, &gen) < 0)) {
        ckpt_log(CKPT_ERROR, "verify takes one optional argument: a generation (1, 2, ...) or 'all'");
        return EXIT_USAGE;
    }
    bool all = argc == 1 && !gen;
    int nt = tiers_open(o, tiers, MAX_TIERS);
    if (job_one(o, tiers, nt, &job, &keep) < 0 || catalog_build(tiers, nt, job, &cat) < 0) {
        names_free(&keep);
        return EXIT_ERROR;
    }
    problems = 0;
    if (!all && !gen && !(gen = catalog_newest(&cat))) {
        printf("job %s: no generation is held by every rank\n", job);
        problems++;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < cat.n; i++)
        if (selected(&cat.v[i], gen) && cat.v[i].state == IMG_HEADER_OK)
            total += image_check_work(&cat.v[i]);
    progress_start(&bar, "verifying", total);
    for (size_t i = 0; i < cat.n && (all || gen); i++) {
        if (!selected(&cat.v[i], gen))
            continue;
        if (cat.v[i].state == IMG_HEADER_OK)
            image_check(&cat.v[i], true, &bar, bad_chunk);
        report(&cat.v[i]);
    }
    progress_end(&bar);

    int world = catalog_world(&cat);
    for (int r = 0; r < world && (all || gen); r++) {
        uint64_t it;
        if (!rank_verified(&cat, r, gen, &it)) {
            if (all)
                printf("rank%d: no verified image\n", r);
            else
                printf("rank%d: no verified image of generation %llu\n", r, (unsigned long long)gen);
            problems++;
        }
        if (it > iteration)
            iteration = it;
        /* Each tier that holds the rank and keeps logs: its logs too. */
        for (int t = 0; t < nt; t++)
            if (tiers[t].ops->rlog_verify)
                check_logs(&cat, &tiers[t], r, gen, it);
    }
    if (problems)
        printf("job %s: %d problem%s found\n", job, problems, problems == 1 ? "" : "s");
    else if (all)
        printf("job %s: every image and replay log verified\n", job);
    else
        printf("job %s: generation %llu (iteration %llu) verified on all %d rank%s\n", job, (unsigned long long)gen,
               (unsigned long long)iteration, world, world == 1 ? "" : "s");
    names_free(&keep);
    catalog_free(&cat);
    return problems ? EXIT_DAMAGED : EXIT_OK;
}
