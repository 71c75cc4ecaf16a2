/*
 * Snapshot images, as image.h promises.  Checksums are XXH3-64, per chunk
 * of the data area and over the header with its own sum field zeroed.  The
 * verification trusts nothing in the header before the header sum matched,
 * and bounds every size against the image length first.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "image.h"

static uint64_t *chunk_sums(void *base, const struct ckpt_header *h)
{
    return (uint64_t *)((char *)base + sizeof(*h) + h->nallocs * sizeof(struct ckpt_rec));
}

size_t ckpt_image_layout(struct ckpt_header *h, struct ckpt_rec *recs, size_t n)
{
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        recs[i].offset = off;
        off = ckpt_align_up(off + recs[i].bytes, CKPT_DATA_ALIGN);
    }
    if (!h->chunk_bytes)
        h->chunk_bytes = CKPT_CHUNK_DEFAULT;
    h->nallocs = n;
    h->data_bytes = off;
    h->nchunks = (off + h->chunk_bytes - 1) / h->chunk_bytes;
    h->header_bytes = (uint32_t)(sizeof(*h) + n * sizeof(struct ckpt_rec) + h->nchunks * sizeof(uint64_t));
    h->data_offset = ckpt_align_up(h->header_bytes, CKPT_DATA_ALIGN);
    return h->data_offset + h->data_bytes;
}

void ckpt_image_invalidate(void *base)
{
    __atomic_store_n((uint64_t *)base, 0, __ATOMIC_RELEASE);
}

/* XXH3-64 of the header *h (its sum field taken as 0) followed by the
 * records and chunk sums at base. */
static uint64_t header_sum(const struct ckpt_header *h, const void *base)
{
    XXH3_state_t st;
    struct ckpt_header tmp = *h;
    tmp.header_sum = 0;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &tmp, sizeof(tmp));
    XXH3_64bits_update(&st, (const char *)base + sizeof(tmp), h->header_bytes - sizeof(tmp));
    return XXH3_64bits_digest(&st);
}

void ckpt_image_commit(void *base, const struct ckpt_header *h, const struct ckpt_rec *recs)
{
    struct ckpt_header *dst = base;
    const char *data = (const char *)base + h->data_offset;
    uint64_t *sums = chunk_sums(base, h);

    memcpy((char *)base + sizeof(*h), recs, h->nallocs * sizeof(*recs));
    for (uint64_t c = 0; c < h->nchunks; c++) {
        uint64_t len = h->data_bytes - c * h->chunk_bytes;
        sums[c] = XXH3_64bits(data + c * h->chunk_bytes, len < h->chunk_bytes ? len : h->chunk_bytes);
    }
    /* The header is finished in a copy, its sum taken with the magic as
     * it will be, and written with the magic still zero: a reader (or a
     * peer deciding what every rank holds) never sees the magic on a header
     * whose sum is not final, even if this process dies halfway. */
    struct ckpt_header tmp = *h;
    memcpy(tmp.magic, CKPT_MAGIC, sizeof(tmp.magic));
    tmp.version = CKPT_FORMAT_VERSION;
    tmp.header_sum = header_sum(&tmp, base);
    memset(tmp.magic, 0, sizeof(tmp.magic));
    memcpy(base, &tmp, sizeof(tmp));
    uint64_t magic;
    memcpy(&magic, CKPT_MAGIC, sizeof(magic));
    __atomic_store_n((uint64_t *)dst->magic, magic, __ATOMIC_RELEASE);
}

int ckpt_image_verify_header(const void *base, size_t len, struct ckpt_header *out, char *why, size_t whylen)
{
    struct ckpt_header h;

    if (len < sizeof(h)) {
        snprintf(why, whylen, "image too short (%zu bytes)", len);
        return -EBADMSG;
    }
    memcpy(&h, base, sizeof(h));
    if (memcmp(h.magic, CKPT_MAGIC, sizeof(h.magic)) != 0) {
        snprintf(why, whylen, "no committed snapshot");
        return -ENODATA;
    }
    if (h.version != CKPT_FORMAT_VERSION) {
        snprintf(why, whylen, "format version %u, this libckpt reads %u", h.version, CKPT_FORMAT_VERSION);
        return -EBADMSG;
    }
    if (h.header_bytes < sizeof(h) || h.header_bytes > len || !h.chunk_bytes ||
        h.nallocs > (h.header_bytes - sizeof(h)) / sizeof(struct ckpt_rec) ||
        h.nchunks != (h.data_bytes + h.chunk_bytes - 1) / h.chunk_bytes ||
        h.header_bytes != sizeof(h) + h.nallocs * sizeof(struct ckpt_rec) + h.nchunks * sizeof(uint64_t) ||
        h.data_offset < h.header_bytes || h.data_offset > len || h.data_bytes > len - h.data_offset) {
        snprintf(why, whylen, "header sizes are inconsistent (truncated or corrupt image)");
        return -EBADMSG;
    }
    if (header_sum(&h, base) != h.header_sum) {
        snprintf(why, whylen, "header checksum mismatch");
        return -EBADMSG;
    }
    const struct ckpt_rec *recs = ckpt_image_recs(base);
    for (uint64_t i = 0; i < h.nallocs; i++) {
        const struct ckpt_rec *r = &recs[i], *prev = i ? &recs[i - 1] : NULL;
        if (r->offset > h.data_bytes || r->bytes > h.data_bytes - r->offset) {
            snprintf(why, whylen, "allocation %llu lies outside the data", (unsigned long long)r->ordinal);
            return -EBADMSG;
        }
        /* The parts of one allocation are adjacent, in order, inside it,
         * and agree on what it is; allocations come in ordinal order. */
        bool same = prev && prev->ordinal == r->ordinal;
        if (r->start > r->size || r->bytes > r->size - r->start || (prev && !same && prev->ordinal > r->ordinal) ||
            (same && (prev->size != r->size || prev->kind != r->kind || prev->birth != r->birth ||
                      r->start < prev->start + prev->bytes || !r->bytes))) {
            snprintf(why, whylen, "the records of allocation %llu are inconsistent (corrupt image)",
                     (unsigned long long)r->ordinal);
            return -EBADMSG;
        }
    }
    *out = h;
    return 0;
}

int ckpt_image_verify_chunks(const void *base, const struct ckpt_header *h, uint64_t first, uint64_t count,
                             char *why, size_t whylen)
{
    const uint64_t *sums = chunk_sums((void *)base, h);
    const char *data = (const char *)base + h->data_offset;
    for (uint64_t c = first; c < h->nchunks && c - first < count; c++) {
        uint64_t n = h->data_bytes - c * h->chunk_bytes;
        if (XXH3_64bits(data + c * h->chunk_bytes, n < h->chunk_bytes ? n : h->chunk_bytes) != sums[c]) {
            snprintf(why, whylen, "chunk %llu (bytes %llu..) checksum mismatch", (unsigned long long)c,
                     (unsigned long long)(c * h->chunk_bytes));
            return -EBADMSG;
        }
    }
    return 0;
}

int ckpt_image_verify(const void *base, size_t len, struct ckpt_header *out, char *why, size_t whylen)
{
    struct ckpt_header h;
    int rc = ckpt_image_verify_header(base, len, &h, why, whylen);
    if (rc < 0 || (rc = ckpt_image_verify_chunks(base, &h, 0, h.nchunks, why, whylen)) < 0)
        return rc;
    *out = h;
    return 0;
}
