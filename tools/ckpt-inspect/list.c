/*
 * `ckpt-inspect list`: every image of every job of this user (or of
 * --job) in every tier available now, one line per rank and slot (per
 * rank and persisted generation on disk), each
 * image verified in full so that the last column can be trusted.  It only
 * shows: whatever it finds, it exits 0 unless it could not look at all
 * (`verify` is the command whose exit status says whether data is good).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "inspect.h"
#include "log.h"

static uint64_t image_bytes(const struct image *img)
{
    return img->state >= IMG_HEADER_OK ? img->h.data_offset + img->h.data_bytes : img->file_bytes;
}

/* A header field: "-" when nothing was committed, "?" when the header
 * cannot be trusted. */
static void number(const struct image *img, uint64_t x, char *out, size_t outlen)
{
    if (img->state >= IMG_HEADER_OK)
        snprintf(out, outlen, "%llu", (unsigned long long)x);
    else
        snprintf(out, outlen, "%s", img->state == IMG_EMPTY ? "-" : "?");
}

static const char *status(const struct image *img, char *out, size_t outlen)
{
    switch (img->state) {
    case IMG_VERIFIED:
        return "verified";
    case IMG_EMPTY:
        snprintf(out, outlen, "-- %s", img->why);
        return out;
    default:
        snprintf(out, outlen, "NOT verified: %s", img->why);
        return out;
    }
}

/* What one snapshot of the newest generation copies, all ranks together
 * (one copy of each rank's image, from whichever tier holds it first), by
 * allocation kind: where the bytes of a snapshot go. */
static void print_kinds(const struct catalog *cat, uint64_t newest)
{
    uint64_t bytes[CKPT_KINDS + 1] = {0}, count[CKPT_KINDS + 1] = {0}, total = 0, allocated = 0;
    int seen[4096] = {0};
    char size[32];
    if (!newest)
        return;
    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        if (img->state < IMG_HEADER_OK || img->h.generation != newest || img->rank < 0 || img->rank >= 4096 ||
            seen[img->rank]++)
            continue;
        for (int k = 0; k <= CKPT_KINDS; k++) {
            bytes[k] += img->kind_bytes[k];
            count[k] += img->kind_count[k];
            total += img->kind_bytes[k];
        }
        allocated += img->allocated;
    }
    printf("  a snapshot of generation %llu copies %s:", (unsigned long long)newest,
           human_bytes(total, size, sizeof(size)));
    const char *sep = "";
    for (int k = 0; k <= CKPT_KINDS; k++) {
        if (!count[k])
            continue;
        printf("%s %s %s in %llu allocation%s", sep, k < CKPT_KINDS ? alloc_kind_name((uint32_t)k) : "unknown",
               human_bytes(bytes[k], size, sizeof(size)), (unsigned long long)count[k], count[k] == 1 ? "" : "s");
        sep = ",";
    }
    printf("%s\n", *sep ? "" : " nothing");
    if (allocated > total) /* the program declared the rest free */
        printf("  of %s allocated: %.1f%% copied, the rest declared free by the program\n",
               human_bytes(allocated, size, sizeof(size)), 100.0 * (double)total / (double)allocated);
}

/* The iteration of generation @gen, 0 when no image of it is known. */
static uint64_t iteration_of(const struct catalog *cat, uint64_t gen)
{
    for (size_t i = 0; gen && i < cat->n; i++)
        if (cat->v[i].state >= IMG_HEADER_OK && cat->v[i].h.generation == gen)
            return cat->v[i].h.iteration;
    return 0;
}

static void print_job(const char *job, const struct catalog *cat, const struct tier *tiers, int nt)
{
    char size[32], age[32], st[320], gen[24], iter[24], rank[16], slot[16];
    uint64_t newest = catalog_newest(cat);
    int world = catalog_world(cat);

    printf("job %s: %d rank%s", job, world, world == 1 ? "" : "s");
    if (newest) {
        printf(", newest generation on every rank %llu (iteration %llu)", (unsigned long long)newest,
               (unsigned long long)iteration_of(cat, newest));
    } else {
        printf(", no generation held by every rank");
    }
    printf("\n  %-6s %5s %4s %10s %10s %10s %8s  %s\n", "tier", "rank", "slot", "generation", "iteration", "size",
           "age", "status");
    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        bool known = img->state >= IMG_HEADER_OK;
        number(img, img->h.generation, gen, sizeof(gen));
        number(img, img->h.iteration, iter, sizeof(iter));
        if (!known && img->slot < 0) /* disk: the directory names the iteration */
            snprintf(iter, sizeof(iter), "%llu", (unsigned long long)img->key);
        snprintf(rank, sizeof(rank), "%d", img->rank);
        snprintf(slot, sizeof(slot), "%d", img->slot);
        if (img->rank < 0)
            snprintf(rank, sizeof(rank), "?");
        if (img->slot < 0)
            snprintf(slot, sizeof(slot), "-");
        printf("  %-6s %5s %4s %10s %10s %10s %8s  %s\n", img->tier->ops->name, rank, slot, gen, iter,
               human_bytes(image_bytes(img), size, sizeof(size)),
               human_age(known ? img->h.time_ns : img->mtime_ns, age, sizeof(age)), status(img, st, sizeof(st)));
    }
    print_kinds(cat, newest);
    for (int t = 0; t < nt; t++)
        if (tiers[t].ops == &arena_tier_ops)
            arena_print_standbys(&tiers[t], job, world, iteration_of(cat, newest));
}

int cmd_list(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names jobs = {0};
    struct progress p;
    int rc = EXIT_OK;
    (void)argv;

    if (argc > 0) {
        ckpt_log(CKPT_ERROR, "list takes no arguments");
        return EXIT_USAGE;
    }
    int nt = tiers_open(o, tiers, MAX_TIERS);
    if (jobs_find(o, tiers, nt, &jobs) < 0)
        return EXIT_ERROR;
    char where[2 * PATH_MAX + 8];
    if (!jobs.n)
        printf("no jobs of this user in %s\n", tiers_where(o, where, sizeof(where)));
    for (size_t j = 0; j < jobs.n; j++) {
        struct catalog cat = {0};
        if (catalog_build(tiers, nt, jobs.v[j], &cat) < 0) {
            rc = EXIT_ERROR;
            continue;
        }
        uint64_t total = 0;
        for (size_t i = 0; i < cat.n; i++)
            total += cat.v[i].state == IMG_HEADER_OK ? image_check_work(&cat.v[i]) : 0;
        progress_start(&p, "verifying", total);
        for (size_t i = 0; i < cat.n; i++)
            if (cat.v[i].state == IMG_HEADER_OK)
                image_check(&cat.v[i], true, &p, NULL);
        progress_end(&p);
        print_job(jobs.v[j], &cat, tiers, nt);
        catalog_free(&cat);
    }
    names_free(&jobs);
    return rc;
}
