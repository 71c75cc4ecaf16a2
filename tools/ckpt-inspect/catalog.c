/*
 * What a job has, everywhere: the tiers available now, the jobs of this
 * user they hold, and the catalog of one job's images (every rank, every
 * tier, every slot) with their headers checked.  The order of the tier
 * table is the order recovery prefers (fastest first), so commands that
 * need one copy of a rank's generation take the first that verifies.  A
 * header that does not verify is kept in the catalog, never dropped: its
 * generation is unknown, so it may be the one the user asks about.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arena.h"
#include "inspect.h"
#include "log.h"

/* Lists here are small (jobs, ranks x slots); without memory for them the
 * tool can do nothing useful, so running out ends it. */
static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return p;
    size_t c = *cap ? 2 * *cap : 16;
    void *q = realloc(p, c * elem);
    if (!q) {
        ckpt_log(CKPT_ERROR, "out of memory");
        exit(EXIT_ERROR);
    }
    memset((char *)q + *cap * elem, 0, (c - *cap) * elem);
    *cap = c;
    return q;
}

void names_add(struct names *n, const char *name)
{
    for (size_t i = 0; i < n->n; i++)
        if (strcmp(n->v[i], name) == 0)
            return;
    n->v = grow(n->v, &n->cap, n->n, sizeof(*n->v));
    n->v[n->n] = strdup(name);
    if (!n->v[n->n]) {
        ckpt_log(CKPT_ERROR, "out of memory");
        exit(EXIT_ERROR);
    }
    n->n++;
}

void names_free(struct names *n)
{
    for (size_t i = 0; i < n->n; i++)
        free(n->v[i]);
    free(n->v);
    *n = (struct names){0};
}

struct image *catalog_add(struct catalog *c)
{
    c->v = grow(c->v, &c->cap, c->n, sizeof(*c->v));
    return &c->v[c->n++];
}

void catalog_free(struct catalog *c)
{
    free(c->v);
    *c = (struct catalog){0};
}

static bool wanted(const struct options *o, const struct tier_ops *ops)
{
    return !o->tier || strcmp(o->tier, ops->name) == 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int tiers_open(const struct options *o, struct tier *t, int max)
{
    int n = 0;

    /* In the order recovery prefers: local memory, a peer's memory, disk. */
    if (n < max && wanted(o, &arena_tier_ops) && is_dir(o->arena_root)) {
        t[n].ops = &arena_tier_ops;
        snprintf(t[n].root, sizeof(t[n].root), "%s", o->arena_root);
        n++;
    }
    if (n < max && wanted(o, &peer_tier_ops)) {
        if (ckpt_peers_root(t[n].root, sizeof(t[n].root), o->arena_root) == 0 && is_dir(t[n].root))
            t[n++].ops = &peer_tier_ops;
    }
    /* The disk tier checks its directories itself: one missing is said
     * when a job is looked for, not taken for "no disk tier". */
    if (n < max && wanted(o, &disk_tier_ops) && o->persist_dirs && o->persist_dirs[strspn(o->persist_dirs, ",")]) {
        t[n].ops = &disk_tier_ops;
        snprintf(t[n].root, sizeof(t[n].root), "%s", o->persist_dirs);
        n++;
    }
    return n;
}

const char *tiers_where(const struct options *o, char *out, size_t outlen)
{
    if (o->tier && strcmp(o->tier, "disk") == 0)
        snprintf(out, outlen, "%s", o->persist_dirs && *o->persist_dirs ? o->persist_dirs : "(no CKPT_PERSIST_DIRS)");
    else if (o->tier && strcmp(o->tier, "peer") == 0)
        ckpt_peers_root(out, outlen, o->arena_root);
    else if (!o->tier && o->persist_dirs && *o->persist_dirs)
        snprintf(out, outlen, "%s or %s", o->arena_root, o->persist_dirs);
    else
        snprintf(out, outlen, "%s", o->arena_root);
    return out;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int jobs_find(const struct options *o, const struct tier *t, int nt, struct names *jobs)
{
    char why[PATH_MAX + 64];

    if (o->job) {
        names_add(jobs, o->job);
        return 0;
    }
    for (int i = 0; i < nt; i++) {
        int rc = t[i].ops->jobs(&t[i], jobs, why, sizeof(why));
        if (rc < 0) {
            ckpt_log(CKPT_ERROR, "%s", why);
            return rc;
        }
    }
    if (jobs->n)
        qsort(jobs->v, jobs->n, sizeof(*jobs->v), by_name);
    return 0;
}

int job_one(const struct options *o, const struct tier *t, int nt, const char **job, struct names *keep)
{
    int rc = jobs_find(o, t, nt, keep);
    if (rc < 0)
        return rc;
    if (keep->n == 1) {
        *job = keep->v[0];
        return 0;
    }
    char where[2 * PATH_MAX + 8];
    tiers_where(o, where, sizeof(where));
    if (keep->n == 0) {
        ckpt_log(CKPT_ERROR, "no job of this user in %s", where);
        return -ENOENT;
    }
    char list[512] = "";
    for (size_t i = 0; i < keep->n && strlen(list) < sizeof(list) - 80; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", keep->v[i]);
    ckpt_log(CKPT_ERROR, "%zu jobs in %s (%s): name one with --job", keep->n, where, list);
    return -EINVAL;
}

static int by_place(const void *pa, const void *pb)
{
    const struct image *a = pa, *b = pb;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->tier != b->tier)
        return a->tier < b->tier ? -1 : 1;
    return a->slot - b->slot;
}

int catalog_build(const struct tier *t, int nt, const char *job, struct catalog *cat)
{
    char why[PATH_MAX + 64];
    int found = 0;

    for (int i = 0; i < nt; i++) {
        int rc = t[i].ops->images(&t[i], job, cat, why, sizeof(why));
        if (rc == 0)
            found++;
        else if (rc != -ENOENT)
            ckpt_log(CKPT_WARN, "%s", why);
    }
    if (!found) {
        ckpt_log(CKPT_ERROR, "no tier holds job '%s'", job);
        return -ENOENT;
    }
    if (cat->n)
        qsort(cat->v, cat->n, sizeof(*cat->v), by_place);
    for (size_t i = 0; i < cat->n; i++)
        image_check(&cat->v[i], false, NULL, NULL);
    return 0;
}

static bool header_known(const struct image *img)
{
    return img->state >= IMG_HEADER_OK;
}

int catalog_world(const struct catalog *cat)
{
    int world = 0;
    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        if (img->rank + 1 > world)
            world = img->rank + 1;
        if (header_known(img) && (int)img->h.world > world)
            world = (int)img->h.world;
    }
    return world;
}

static bool rank_holds(const struct catalog *cat, int rank, uint64_t gen)
{
    for (size_t i = 0; i < cat->n; i++)
        if (cat->v[i].rank == rank && header_known(&cat->v[i]) && cat->v[i].h.generation == gen)
            return true;
    return false;
}

uint64_t catalog_newest(const struct catalog *cat)
{
    int world = catalog_world(cat);
    uint64_t best = 0;

    for (size_t i = 0; i < cat->n; i++) {
        const struct image *img = &cat->v[i];
        if (!header_known(img) || img->h.generation <= best)
            continue;
        bool all = true;
        for (int r = 0; r < world && all; r++)
            all = rank_holds(cat, r, img->h.generation);
        if (all)
            best = img->h.generation;
    }
    return best;
}

const char *image_name(const struct image *img, char *out, size_t outlen)
{
    char rank[24] = "";
    if (img->rank >= 0)
        snprintf(rank, sizeof(rank), "rank%d ", img->rank);
    if (img->slot >= 0)
        snprintf(out, outlen, "%sslot%d (%s)", rank, img->slot, img->tier->ops->name);
    else
        snprintf(out, outlen, "%sgen-%llu (%s)", rank, (unsigned long long)img->key, img->tier->ops->name);
    return out;
}
