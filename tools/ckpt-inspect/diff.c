/*
 * `ckpt-inspect diff G1 G2 [--rank N]`: which allocations, matched by
 * ordinal, hold different bytes in two generations of a rank (XXH3-64 of
 * each allocation's bytes), and what that says: what changed between them
 * is parameters and optimizer state (and buffers a program rewrites every
 * iteration), what did not is constant.  Both images are verified in full
 * first: a difference must never come from damage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "image.h"
#include "inspect.h"
#include "log.h"

#define HASH_STEP (64u << 20) /* bytes hashed between progress updates */

struct hashed {
    struct ckpt_rec rec;
    uint64_t sum;
};

/* The XXH3 of every allocation of img (of its live parts, where and what
 * they hold, when the program declared the rest free), *count of them in
 * *out (the caller frees it).  Returns 0 or -errno (said). */
static int hash_image(const struct image *img, struct hashed **out, uint64_t *count, struct progress *p)
{
    struct view v;
    char why[256], name[64];

    int rc = image_map(img, &v, p, why, sizeof(why));
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", image_name(img, name, sizeof(name)), why);
        return rc;
    }
    const struct ckpt_rec *recs = ckpt_image_recs(v.base);
    struct hashed *h = calloc(img->h.nallocs ? img->h.nallocs : 1, sizeof(*h));
    if (!h) {
        img->tier->ops->unmap(img->tier, &v);
        ckpt_log(CKPT_ERROR, "out of memory");
        return -ENOMEM;
    }
    uint64_t n = 0;
    XXH3_state_t st;
    for (uint64_t i = 0; i < img->h.nallocs; i++) {
        const char *data = v.base + img->h.data_offset + recs[i].offset;
        bool first = !i || recs[i].ordinal != recs[i - 1].ordinal;
        bool last = i + 1 == img->h.nallocs || recs[i + 1].ordinal != recs[i].ordinal;
        if (first)
            XXH3_64bits_reset(&st);
        if (!first || !last || recs[i].bytes != recs[i].size) { /* a part: where it is counts too */
            uint64_t at[2] = {recs[i].start, recs[i].bytes};
            XXH3_64bits_update(&st, at, sizeof(at));
        }
        for (uint64_t done = 0; done < recs[i].bytes;) {
            uint64_t k = recs[i].bytes - done < HASH_STEP ? recs[i].bytes - done : HASH_STEP;
            XXH3_64bits_update(&st, data + done, k);
            done += k;
            progress_add(p, k);
        }
        if (last) {
            h[n].rec = recs[i];
            h[n++].sum = XXH3_64bits_digest(&st);
        }
    }
    *count = n;
    bool same = image_unchanged(img, &v);
    img->tier->ops->unmap(img->tier, &v);
    if (!same) {
        free(h);
        ckpt_log(CKPT_ERROR, "%s: generation %llu was replaced while it was read (the job is running)",
                 image_name(img, name, sizeof(name)), (unsigned long long)img->h.generation);
        return -ESTALE;
    }
    *out = h;
    return 0;
}

/* A set of allocations: how many, their bytes, and their ordinals as
 * ranges ("0-5, 8, 10-12"), cut short with "..." past the buffer. */
struct group {
    uint64_t count, bytes, first, last;
    char text[2048];
};

static void group_put(struct group *g)
{
    size_t n = strlen(g->text);
    if (n + 48 > sizeof(g->text)) {
        if (!strstr(g->text, "..."))
            snprintf(g->text + n, sizeof(g->text) - n, ", ...");
        return;
    }
    if (g->first == g->last)
        snprintf(g->text + n, sizeof(g->text) - n, "%s%llu", n ? ", " : "", (unsigned long long)g->first);
    else
        snprintf(g->text + n, sizeof(g->text) - n, "%s%llu-%llu", n ? ", " : "", (unsigned long long)g->first,
                 (unsigned long long)g->last);
}

static void group_add(struct group *g, uint64_t ordinal, uint64_t bytes)
{
    if (g->count && ordinal == g->last + 1) {
        g->last = ordinal;
    } else {
        if (g->count)
            group_put(g);
        g->first = g->last = ordinal;
    }
    g->count++;
    g->bytes += bytes;
}

static void group_print(struct group *g, const char *what, const char *meaning)
{
    char size[32];
    if (g->count)
        group_put(g);
    printf("  %s: %llu allocation%s, %s%s%s%s\n", what, (unsigned long long)g->count, g->count == 1 ? "" : "s",
           human_bytes(g->bytes, size, sizeof(size)), g->count ? " (" : "", g->count ? meaning : "",
           g->count ? ")" : "");
    if (g->count)
        printf("    ordinals %s\n", g->text);
}

/* Records are in ordinal order (the registry's), so a binary search. */
static const struct hashed *by_ordinal(const struct hashed *h, uint64_t n, uint64_t ordinal)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (h[mid].rec.ordinal < ordinal)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && h[lo].rec.ordinal == ordinal ? &h[lo] : NULL;
}

/* Compares the two generations of one rank; returns an exit status. */
static int diff_rank(struct catalog *cat, int rank, uint64_t g1, uint64_t g2)
{
    struct image *a, *b;
    struct hashed *ha = NULL, *hb = NULL;
    struct group changed = {0}, same = {0}, gone = {0}, born = {0};
    struct progress p;
    char size[32];

    uint64_t total = 0;
    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        if (img->rank == rank && img->state == IMG_HEADER_OK && (img->h.generation == g1 || img->h.generation == g2))
            total += image_check_work(img);
    }
    progress_start(&p, "verifying", total);
    a = image_find(cat, rank, g1, &p);
    b = image_find(cat, rank, g2, &p);
    progress_end(&p);
    if (!a || !b) {
        printf("rank%d: no verified image of generation %llu\n", rank, (unsigned long long)(a ? g2 : g1));
        return EXIT_DAMAGED;
    }
    /* Which tier each is read from, when several hold it. */
    char na[64], nb[64];
    printf("rank%d: generation %llu from %s, generation %llu from %s\n", rank, (unsigned long long)g1,
           image_name(a, na, sizeof(na)), (unsigned long long)g2, image_name(b, nb, sizeof(nb)));
    progress_start(&p, "comparing", image_data_work(a) + image_data_work(b));
    uint64_t count_a = 0, count_b = 0;
    int rc = hash_image(a, &ha, &count_a, &p) < 0 || hash_image(b, &hb, &count_b, &p) < 0 ? EXIT_ERROR : EXIT_OK;
    progress_end(&p);
    if (rc != EXIT_OK)
        goto out;
    printf("rank%d: generation %llu (iteration %llu) -> generation %llu (iteration %llu)\n", rank,
           (unsigned long long)g1, (unsigned long long)a->h.iteration, (unsigned long long)g2,
           (unsigned long long)b->h.iteration);
    printf("  %8s %-8s %6s %12s  %s\n", "ordinal", "kind", "birth", "size", "between them");
    for (uint64_t i = 0; i < count_a; i++) {
        const struct hashed *x = &ha[i], *y = by_ordinal(hb, count_b, x->rec.ordinal);
        const char *what = !y ? "freed" : x->sum != y->sum || x->rec.size != y->rec.size ? "changed" : "unchanged";
        printf("  %8llu %-8s %6llu %12s  %s\n", (unsigned long long)x->rec.ordinal, alloc_kind_name(x->rec.kind),
               (unsigned long long)x->rec.birth, human_bytes(x->rec.size, size, sizeof(size)), what);
        group_add(!y ? &gone : what[0] == 'c' ? &changed : &same, x->rec.ordinal, x->rec.size);
    }
    for (uint64_t i = 0; i < count_b; i++) {
        const struct hashed *y = &hb[i];
        if (by_ordinal(ha, count_a, y->rec.ordinal))
            continue;
        printf("  %8llu %-8s %6llu %12s  %s\n", (unsigned long long)y->rec.ordinal, alloc_kind_name(y->rec.kind),
               (unsigned long long)y->rec.birth, human_bytes(y->rec.size, size, sizeof(size)), "new");
        group_add(&born, y->rec.ordinal, y->rec.size);
    }
    group_print(&changed, "changed", "parameters, optimizer state, or buffers rewritten every iteration");
    group_print(&same, "unchanged", "constants");
    if (gone.count)
        group_print(&gone, "freed", "only in the older generation");
    if (born.count)
        group_print(&born, "new", "allocated since");
out:
    free(ha);
    free(hb);
    return rc;
}

int cmd_diff(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names keep = {0};
    struct catalog cat = {0};
    const char *job;
    uint64_t g[2], rank = UINT64_MAX;
    int ng = 0, rc = EXIT_OK;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 0, 1 << 24, &rank) < 0) {
                ckpt_log(CKPT_ERROR, "--rank takes a rank number, not '%s'", argv[i]);
                return EXIT_USAGE;
            }
        } else if (ng < 2 && parse_u64(argv[i], 1, UINT64_MAX, &g[ng]) == 0) {
            ng++;
        } else {
            ng = 3;
        }
    }
    if (ng != 2) {
        ckpt_log(CKPT_ERROR, "usage: ckpt-inspect diff G1 G2 [--rank N] (two generations: 1, 2, ...)");
        return EXIT_USAGE;
    }
    int nt = tiers_open(o, tiers, MAX_TIERS);
    if (job_one(o, tiers, nt, &job, &keep) < 0 || catalog_build(tiers, nt, job, &cat) < 0) {
        names_free(&keep);
        return EXIT_ERROR;
    }
    int world = catalog_world(&cat);
    if (rank != UINT64_MAX && rank >= (uint64_t)world) {
        ckpt_log(CKPT_ERROR, "job %s has ranks 0..%d, no rank %llu", job, world - 1, (unsigned long long)rank);
        rc = EXIT_USAGE;
    }
    for (int r = 0; r < world && rc != EXIT_USAGE; r++) {
        if (rank != UINT64_MAX && (uint64_t)r != rank)
            continue;
        int one = diff_rank(&cat, r, g[0], g[1]);
        if (one > rc)
            rc = one;
    }
    names_free(&keep);
    catalog_free(&cat);
    return rc;
}
