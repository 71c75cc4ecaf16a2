/*
 * libFuzzer target: snapshot images (runtime/image.c) as a restore or
 * ckpt-inspect would meet them in a damaged or hostile arena.  Any input
 * must be verified or refused without a read outside the buffer, a crash
 * or an undefined operation.  Inputs whose first byte is odd get a correct
 * header checksum, so the fuzzer also reaches the checks behind it (record
 * bounds, chunk table, chunk sums) instead of stopping at the checksum.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int fix = data[0] & 1;
    data++;
    size--;
    /* The image is mapped in real use: give it its own aligned buffer. */
    uint8_t *img = aligned_alloc(4096, (size + 4095) / 4096 * 4096 + 4096);
    if (!img)
        return 0;
    memcpy(img, data, size);
    struct ckpt_header h;
    if (fix && size >= sizeof(h)) {
        memcpy(&h, img, sizeof(h));
        if (h.header_bytes >= sizeof(h) && h.header_bytes <= size) {
            h.header_sum = 0;
            XXH3_state_t st;
            XXH3_64bits_reset(&st);
            XXH3_64bits_update(&st, &h, sizeof(h));
            XXH3_64bits_update(&st, img + sizeof(h), h.header_bytes - sizeof(h));
            h.header_sum = XXH3_64bits_digest(&st);
            memcpy(img, &h, sizeof(h));
        }
    }
    char why[256];
    if (ckpt_image_verify(img, size, &h, why, sizeof(why)) == 0) {
        /* A verified image's records must lie inside it. */
        const struct ckpt_rec *recs = ckpt_image_recs(img);
        for (uint64_t i = 0; i < h.nallocs; i++)
            if (h.data_offset + recs[i].offset + recs[i].bytes > size || recs[i].start + recs[i].bytes > recs[i].size)
                abort();
    }
    free(img);
    return 0;
}
