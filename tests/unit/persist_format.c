/*
 * The persisted generation's manifest format: its layout is pinned, field
 * by field, so that a change to persist_format.h is a deliberate new
 * CKPT_PM_VERSION and never an accident that strands generations on disk.
 */
#include <stddef.h>
#include <stdio.h>

#include "persist_format.h"

#define AT(type, field, expected) {#type "." #field, offsetof(struct type, field), expected}

static const struct {
    const char *field;
    size_t offset, expected;
} layout[] = {
    AT(ckpt_pm_header, magic, 0),          AT(ckpt_pm_header, version, 8),
    AT(ckpt_pm_header, ndirs, 12),         AT(ckpt_pm_header, job, 16),
    AT(ckpt_pm_header, iteration, 80),     AT(ckpt_pm_header, time_ns, 88),
    AT(ckpt_pm_header, nranks, 96),        AT(ckpt_pm_header, reserved, 100),
    AT(ckpt_pm_header, nextents, 104),     AT(ckpt_pm_header, nrefs, 112),
    AT(ckpt_pm_header, manifest_bytes, 120), AT(ckpt_pm_header, logical_bytes, 128),
    AT(ckpt_pm_header, stored_bytes, 136), AT(ckpt_pm_header, sum, 144),
    AT(ckpt_pm_rank, rank, 0),             AT(ckpt_pm_rank, world, 4),
    AT(ckpt_pm_rank, generation, 8),       AT(ckpt_pm_rank, image_bytes, 16),
    AT(ckpt_pm_rank, head_offset, 24),     AT(ckpt_pm_rank, head_bytes, 32),
    AT(ckpt_pm_rank, chunk_bytes, 40),     AT(ckpt_pm_rank, data_ref, 48),
    AT(ckpt_pm_rank, data_chunks, 56),     AT(ckpt_pm_rank, log_bytes, 64),
    AT(ckpt_pm_rank, log_ref, 72),         AT(ckpt_pm_rank, log_chunks, 80),
    AT(ckpt_pm_rank, log_sum, 88),         AT(ckpt_pm_rank, log_where, 96),
    AT(ckpt_pm_rank, reserved, 100),
    AT(ckpt_pm_extent, dir, 0),            AT(ckpt_pm_extent, reserved, 4),
    AT(ckpt_pm_extent, offset, 8),         AT(ckpt_pm_extent, bytes, 16),
    AT(ckpt_pm_extent, sum, 24),
};

int main(void)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(layout) / sizeof(layout[0]); i++) {
        if (layout[i].offset != layout[i].expected) {
            printf("layout: %s at %zu, pinned at %zu\n", layout[i].field, layout[i].offset, layout[i].expected);
            failures++;
        }
    }
    if (sizeof(CKPT_PM_MAGIC) - 1 != 8 || CKPT_PM_ALIGN % 512) {
        printf("magic is not 8 bytes, or the alignment is not one O_DIRECT accepts\n");
        failures++;
    }
    return failures ? 1 : 0;
}
