/*
 * `ckpt-inspect export [GEN] [--format safetensors] DIR [--rank N]`: each
 * rank's image of a generation (without GEN, the newest of which every
 * rank exported has an image that verifies) as DIR/rank<N>.safetensors, one tensor of
 * bytes (dtype U8, shape [size]) per allocation, named rank<N>/alloc<ordinal>,
 * and what the image's header says (job, rank, world, iteration,
 * generation; each allocation's ordinal, kind and birth) in __metadata__.
 * Only an image that verified in full is exported, and a file is put in
 * place only when the image was still the same after it was written: an
 * export of a running job is never a mix of two snapshots.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "inspect.h"
#include "log.h"

static void meta_str(struct st_meta *m, size_t *n, const char *key, const char *value)
{
    snprintf(m[*n].key, sizeof(m[*n].key), "%s", key);
    snprintf(m[*n].value, sizeof(m[*n].value), "%s", value);
    (*n)++;
}

static void meta_u64(struct st_meta *m, size_t *n, const char *key, uint64_t value)
{
    char text[24];
    snprintf(text, sizeof(text), "%llu", (unsigned long long)value);
    meta_str(m, n, key, text);
}

/* Writes one rank's file; returns an exit status (the problem said). */
static int export_rank(const struct image *img, const char *dir, struct progress *p)
{
    char why[PATH_MAX + 128], name[64], path[PATH_MAX], tmp[PATH_MAX + 16];
    struct view v;
    const struct ckpt_header *h = &img->h;

    image_name(img, name, sizeof(name));
    if (image_map(img, &v, p, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", name, why);
        return EXIT_DAMAGED;
    }
    struct st_tensor *t = calloc(h->nallocs ? h->nallocs : 1, sizeof(*t));
    struct st_meta *m = calloc(6 + 5 * h->nallocs, sizeof(*m));
    int rc = EXIT_ERROR;
    if (!t || !m) {
        ckpt_log(CKPT_ERROR, "out of memory");
        goto out;
    }
    size_t nm = 0;
    char job[CKPT_JOB_MAX + 1], key[80];
    snprintf(job, sizeof(job), "%.*s", (int)sizeof(h->job), h->job);
    meta_str(m, &nm, "job", job);
    meta_u64(m, &nm, "rank", h->rank);
    meta_u64(m, &nm, "world", h->world);
    meta_u64(m, &nm, "iteration", h->iteration);
    meta_u64(m, &nm, "generation", h->generation);
    meta_u64(m, &nm, "time_ns", h->time_ns);
    const struct ckpt_rec *recs = ckpt_image_recs(v.base);
    for (uint64_t i = 0; i < h->nallocs; i++) {
        /* A part of an allocation the program declared partly free is named
         * by where in it it starts. */
        if (recs[i].bytes == recs[i].size)
            snprintf(t[i].name, sizeof(t[i].name), "rank%u/alloc%llu", h->rank, (unsigned long long)recs[i].ordinal);
        else
            snprintf(t[i].name, sizeof(t[i].name), "rank%u/alloc%llu@%llu", h->rank,
                     (unsigned long long)recs[i].ordinal, (unsigned long long)recs[i].start);
        t[i].data = v.base + h->data_offset + recs[i].offset;
        t[i].size = recs[i].bytes;
        snprintf(key, sizeof(key), "%s.ordinal", t[i].name);
        meta_u64(m, &nm, key, recs[i].ordinal);
        snprintf(key, sizeof(key), "%s.kind", t[i].name);
        meta_str(m, &nm, key, alloc_kind_name(recs[i].kind));
        snprintf(key, sizeof(key), "%s.birth", t[i].name);
        meta_u64(m, &nm, key, recs[i].birth);
        if (recs[i].bytes != recs[i].size) {
            snprintf(key, sizeof(key), "%s.start", t[i].name);
            meta_u64(m, &nm, key, recs[i].start);
            snprintf(key, sizeof(key), "%s.allocation_bytes", t[i].name);
            meta_u64(m, &nm, key, recs[i].size);
        }
    }
    snprintf(path, sizeof(path), "%s/rank%u.safetensors", dir, h->rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(tmp); /* a leftover of an export that was stopped */
    if (safetensors_write(tmp, t, h->nallocs, m, nm, p, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s", why);
        unlink(tmp);
        goto out;
    }
    if (!image_unchanged(img, &v)) {
        ckpt_log(CKPT_ERROR, "%s: generation %llu was replaced while it was exported (the job is running); "
                 "nothing written for rank %u", name,
                 (unsigned long long)h->generation, h->rank);
        unlink(tmp);
        rc = EXIT_DAMAGED;
        goto out;
    }
    if (rename(tmp, path) < 0) {
        ckpt_log(CKPT_ERROR, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    progress_pause(p);
    printf("rank%u: generation %llu (iteration %llu) from %s, %llu allocations -> %s\n", h->rank,
           (unsigned long long)h->generation, (unsigned long long)h->iteration, name, (unsigned long long)h->nallocs,
           path);
    fflush(stdout);
    rc = EXIT_OK;
out:
    free(t);
    free(m);
    img->tier->ops->unmap(img->tier, &v);
    return rc;
}

/* The newest generation of which every rank asked for (@rank, or all of
 * @world) has a copy that verifies, its images in img[]; 0 when none. */
static uint64_t newest_verified(struct catalog *cat, int world, uint64_t rank, struct image **img)
{
    uint64_t below = UINT64_MAX;
    for (;;) {
        uint64_t gen = 0;
        for (size_t i = 0; i < cat->n; i++)
            if (cat->v[i].state >= IMG_HEADER_OK && cat->v[i].h.generation < below && cat->v[i].h.generation > gen)
                gen = cat->v[i].h.generation;
        if (!gen)
            return 0;
        bool all = true;
        for (int r = 0; r < world; r++) {
            img[r] = rank == UINT64_MAX || (uint64_t)r == rank ? image_find(cat, r, gen, NULL) : NULL;
            all = all && (img[r] || (rank != UINT64_MAX && (uint64_t)r != rank));
        }
        if (all)
            return gen;
        below = gen;
    }
}

int cmd_export(const struct options *o, int argc, char **argv)
{
    struct tier tiers[MAX_TIERS];
    struct names keep = {0};
    struct catalog cat = {0};
    struct progress p;
    const char *job, *dir = NULL, *pos[2];
    int npos = 0;
    uint64_t gen = 0, rank = UINT64_MAX;
    int rc = EXIT_OK;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            if (strcmp(argv[++i], "safetensors") != 0) {
                ckpt_log(CKPT_ERROR, "--format: only 'safetensors' is known, not '%s'", argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], 0, 1 << 24, &rank) < 0) {
                ckpt_log(CKPT_ERROR, "--rank takes a rank number, not '%s'", argv[i]);
                return EXIT_USAGE;
            }
        } else if (argv[i][0] != '-' && npos < 2) {
            pos[npos++] = argv[i];
        } else {
            npos = 3;
            break;
        }
    }
    /* GEN DIR, or DIR alone: the newest generation every rank exported has verified. */
    if (npos == 2 && parse_u64(pos[0], 1, UINT64_MAX, &gen) == 0)
        dir = pos[1];
    else if (npos == 1)
        dir = pos[0];
    if (!dir) {
        ckpt_log(CKPT_ERROR, "usage: ckpt-inspect export [GEN] [--format safetensors] DIR [--rank N]");
        return EXIT_USAGE;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        ckpt_log(CKPT_ERROR, "cannot create %s: %s", dir, strerror(errno));
        return EXIT_ERROR;
    }
    int nt = tiers_open(o, tiers, MAX_TIERS);
    if (job_one(o, tiers, nt, &job, &keep) < 0 || catalog_build(tiers, nt, job, &cat) < 0) {
        names_free(&keep);
        return EXIT_ERROR;
    }
    int world = catalog_world(&cat);
    bool given = gen != 0;
    struct image **img = calloc(world > 0 ? (size_t)world : 1, sizeof(*img));
    if (!img || (rank != UINT64_MAX && rank >= (uint64_t)world)) {
        rc = img ? EXIT_USAGE : EXIT_ERROR;
        if (img)
            ckpt_log(CKPT_ERROR, "job %s has ranks 0..%d, no rank %llu", job, world - 1, (unsigned long long)rank);
        else
            ckpt_log(CKPT_ERROR, "out of memory");
        free(img);
        names_free(&keep);
        catalog_free(&cat);
        return rc;
    }
    uint64_t total = 0;
    if (!gen && !(gen = newest_verified(&cat, world, rank, img))) {
        printf("no generation of job %s has a verified image of %s: nothing exported\n", job,
               rank == UINT64_MAX ? "every rank" : "that rank");
        rc = EXIT_DAMAGED;
    } else if (given) {
        for (size_t i = 0; i < cat.n; i++)
            if (cat.v[i].state == IMG_HEADER_OK && cat.v[i].h.generation == gen)
                total += image_check_work(&cat.v[i]);
        progress_start(&p, "verifying", total);
        for (int r = 0; r < world; r++) {
            img[r] = rank == UINT64_MAX || (uint64_t)r == rank ? image_find(&cat, r, gen, &p) : NULL;
            if (!img[r] && (rank == UINT64_MAX || (uint64_t)r == rank)) {
                progress_pause(&p);
                printf("rank%d: no verified image of generation %llu: not exported\n", r, (unsigned long long)gen);
                rc = EXIT_DAMAGED;
            }
        }
        progress_end(&p);
    } else {
        printf("generation %llu (iteration %llu): the newest with a verified image of %s\n",
               (unsigned long long)gen, (unsigned long long)img[rank == UINT64_MAX ? 0 : rank]->h.iteration,
               rank == UINT64_MAX ? "every rank" : "that rank");
    }
    total = 0;
    for (int r = 0; r < world; r++)
        total += img[r] ? image_data_work(img[r]) : 0;
    progress_start(&p, "exporting", total);
    for (int r = 0; r < world; r++) {
        int one = img[r] ? export_rank(img[r], dir, &p) : EXIT_OK;
        if (one > rc)
            rc = one;
    }
    progress_end(&p);
    free(img);
    names_free(&keep);
    catalog_free(&cat);
    return rc;
}
