/*
 * Verification of one image, as libckpt's readers do it (image.h), but
 * chunk by chunk so that a long read shows progress and every damaged
 * chunk is named, not only the first.  The image may belong to a job that
 * is still running: a slot can be replaced while it is read.  A mismatch
 * is reported as damage only when the header is still the one that was
 * verified at the start; otherwise the image is said to have changed.  It
 * must never write to the image.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "image.h"
#include "inspect.h"
#include "registry.h"

bool image_unchanged(const struct image *img, const struct view *v)
{
    struct ckpt_header now;

    /* The writer clears the magic before it overwrites any data; reading
     * the header after the data (ordered by the fence) sees that. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    memcpy(&now, v->base, sizeof(now));
    return memcmp(now.magic, CKPT_MAGIC, sizeof(now.magic)) == 0 && now.generation == img->h.generation &&
           now.header_sum == img->h.header_sum;
}

/* The header half: fills img->state, h and why.  Returns 0 when it verified. */
static int check_header(struct image *img, const struct view *v)
{
    struct ckpt_header h;

    if (v->len == 0) {
        img->state = IMG_EMPTY;
        snprintf(img->why, sizeof(img->why), "empty: no snapshot was taken into it");
        return -ENODATA;
    }
    int rc = ckpt_image_verify_header(v->base, v->len, &h, img->why, sizeof(img->why));
    if (rc == -ENODATA) {
        img->state = IMG_EMPTY;
        snprintf(img->why, sizeof(img->why), "no committed snapshot (never written, or being written now)");
        return rc;
    }
    if (rc < 0) {
        img->state = IMG_BAD_HEADER;
        return rc;
    }
    if (strncmp(h.job, img->job, sizeof(h.job)) != 0 || (int)h.rank != img->rank) {
        img->state = IMG_BAD_HEADER;
        snprintf(img->why, sizeof(img->why), "holds a snapshot of job '%.*s' rank %u, not of this job and rank",
                 (int)sizeof(h.job), h.job, h.rank);
        return -EBADMSG;
    }
    img->h = h;
    img->state = IMG_HEADER_OK;
    memset(img->kind_bytes, 0, sizeof(img->kind_bytes));
    memset(img->kind_count, 0, sizeof(img->kind_count));
    img->allocated = 0;
    const struct ckpt_rec *recs = ckpt_image_recs(v->base);
    for (uint64_t i = 0; i < h.nallocs; i++) {
        uint32_t k = recs[i].kind < CKPT_KINDS ? recs[i].kind : CKPT_KINDS;
        img->kind_bytes[k] += recs[i].bytes;
        if (!i || recs[i].ordinal != recs[i - 1].ordinal) { /* an allocation's first record */
            img->kind_count[k]++;
            img->allocated += recs[i].size;
        }
    }
    return 0;
}

int image_check(struct image *img, bool full, struct progress *p,
                void (*each)(const struct image *img, const char *why))
{
    struct view v;
    char why[256];

    img->bad_chunks = 0;
    img->why[0] = '\0';
    int rc = img->tier->ops->map(img->tier, img, full, &v, p, img->why, sizeof(img->why));
    if (rc < 0) {
        img->state = IMG_BAD_HEADER;
        return rc;
    }
    if ((rc = check_header(img, &v)) < 0 || !full) {
        img->tier->ops->unmap(img->tier, &v);
        return rc;
    }
    const struct ckpt_header *h = &img->h;
    if (p)
        progress_add(p, h->data_offset);
    for (uint64_t c = 0; c < h->nchunks; c++) {
        if (ckpt_image_verify_chunks(v.base, h, c, 1, why, sizeof(why)) < 0 && !img->bad_chunks++)
            snprintf(img->why, sizeof(img->why), "%s", why);
        if (p) {
            uint64_t left = h->data_bytes - c * h->chunk_bytes;
            progress_add(p, left < h->chunk_bytes ? left : h->chunk_bytes);
        }
    }
    if (!image_unchanged(img, &v)) {
        img->state = IMG_CHANGED;
        img->bad_chunks = 0;
        snprintf(img->why, sizeof(img->why),
                 "replaced by a newer snapshot while it was read (the job is running): generation %llu is gone",
                 (unsigned long long)h->generation);
        rc = -ESTALE;
    } else if (img->bad_chunks) {
        img->state = IMG_BAD_DATA;
        rc = -EBADMSG;
        /* Damage is rare: naming every bad chunk may take a second pass. */
        for (uint64_t c = 0; each && c < h->nchunks; c++)
            if (ckpt_image_verify_chunks(v.base, h, c, 1, why, sizeof(why)) < 0)
                each(img, why);
        if (img->bad_chunks > 1) {
            size_t n = strlen(img->why);
            snprintf(img->why + n, sizeof(img->why) - n, ", and %llu more chunk%s",
                     (unsigned long long)(img->bad_chunks - 1), img->bad_chunks > 2 ? "s" : "");
        }
    } else {
        img->state = IMG_VERIFIED;
    }
    img->tier->ops->unmap(img->tier, &v);
    return rc;
}

struct image *image_find(struct catalog *cat, int rank, uint64_t gen, struct progress *p)
{
    for (size_t i = 0; i < cat->n; i++) {
        struct image *img = &cat->v[i];
        if (img->rank != rank || img->state < IMG_HEADER_OK || img->h.generation != gen)
            continue;
        if (img->state == IMG_HEADER_OK)
            image_check(img, true, p, NULL);
        if (img->state == IMG_VERIFIED)
            return img;
    }
    return NULL;
}

int image_map(const struct image *img, struct view *v, struct progress *p, char *why, size_t whylen)
{
    int rc = img->tier->ops->map(img->tier, img, true, v, p, why, whylen);
    if (rc < 0)
        return rc;
    if (v->len < img->h.data_offset + img->h.data_bytes || !image_unchanged(img, v)) {
        img->tier->ops->unmap(img->tier, v);
        snprintf(why, whylen, "generation %llu was replaced by a newer snapshot after it verified (the job is "
                 "running)", (unsigned long long)img->h.generation);
        return -ESTALE;
    }
    return 0;
}

uint64_t image_check_work(const struct image *img)
{
    return img->h.data_offset + image_data_work(img);
}

uint64_t image_data_work(const struct image *img)
{
    return img->h.data_bytes * (img->tier->ops->reads ? 2 : 1);
}

const char *alloc_kind_name(uint32_t kind)
{
    static const char *const names[] = {
        [CKPT_ALLOC_PLAIN] = "plain",
        [CKPT_ALLOC_ASYNC] = "async",
        [CKPT_ALLOC_VMM] = "vmm",
        [CKPT_ALLOC_MANAGED] = "managed",
        [CKPT_ALLOC_PITCH] = "pitch",
        [CKPT_ALLOC_GLOBAL] = "global",
    };
    return kind < sizeof(names) / sizeof(names[0]) && names[kind] ? names[kind] : "unknown";
}
