/*
 * Building and checking a snapshot image (format.h) in memory: the layout
 * of the allocations in the data area, the commit that writes the header
 * last, and the verification every reader runs before it trusts a byte.
 */
#ifndef CKPT_IMAGE_H
#define CKPT_IMAGE_H

#include <stddef.h>

#include "format.h"

/* Gives each record its offset in the data area (aligned) and fills in the
 * sizes of h (nallocs, data_offset, data_bytes, nchunks, header_bytes) for
 * chunk_bytes h->chunk_bytes.  Returns the image's total size. */
size_t ckpt_image_layout(struct ckpt_header *h, struct ckpt_rec *recs, size_t n);

/* Clears the magic, so a reader never trusts the slot while its data is
 * being overwritten. */
void ckpt_image_invalidate(void *base);

/* With the data in place at base + h->data_offset: writes the records, the
 * chunk checksums and the header, the magic last (after a release fence).
 * The caller keeps recs. */
void ckpt_image_commit(void *base, const struct ckpt_header *h, const struct ckpt_rec *recs);

/* Checks an image of len bytes: magic, version, sizes, header checksum,
 * every chunk checksum.  Returns 0 and copies the header to *out, or
 * -EBADMSG (-ENODATA when never committed) with why naming what is wrong. */
int ckpt_image_verify(const void *base, size_t len, struct ckpt_header *out, char *why, size_t whylen);

/* The two halves of ckpt_image_verify, for readers that check a large
 * image piece by piece (ckpt-inspect shows progress and names every bad
 * chunk).  The header half checks all but the data and, like
 * ckpt_image_verify, copies the header to *out only when it verifies; the
 * chunk half checks chunks first .. first + count - 1 of an image whose
 * header verified, naming the first mismatch in why (-EBADMSG). */
int ckpt_image_verify_header(const void *base, size_t len, struct ckpt_header *out, char *why, size_t whylen);
int ckpt_image_verify_chunks(const void *base, const struct ckpt_header *h, uint64_t first, uint64_t count,
                             char *why, size_t whylen);

/* The records and chunk sums of a verified image. */
static inline const struct ckpt_rec *ckpt_image_recs(const void *base)
{
    return (const struct ckpt_rec *)((const char *)base + sizeof(struct ckpt_header));
}

#endif
