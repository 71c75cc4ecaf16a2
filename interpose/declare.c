/*
 * The program's own word on its device memory (include/libckpt.h): blocks
 * it declares free are left out of the snapshots (runtime/blocks.c).
 */
#include <errno.h>
#include <stdint.h>

#include "blocks.h"
#include "interpose.h"
#include "libckpt.h"
#include "log.h"

static void first_word(void)
{
    ckpt_log_once(CKPT_INFO, "the program declares which blocks of its allocations are free "
                  "(ckpt_declare_free): snapshots copy the rest");
}

__attribute__((visibility("default"))) int ckpt_declare_free(const void *device_ptr, size_t bytes)
{
    if (!ckpt_active)
        return 0;
    first_word();
    return ckpt_blocks_free((uint64_t)(uintptr_t)device_ptr, bytes);
}

__attribute__((visibility("default"))) int ckpt_declare_live(const void *device_ptr, size_t bytes)
{
    if (!ckpt_active)
        return 0;
    return ckpt_blocks_live((uint64_t)(uintptr_t)device_ptr, bytes);
}
