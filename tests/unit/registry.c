/*
 * The allocation registry: lookups by start and by interior address,
 * ordinals in allocation order, and a table that follows the live count.
 * A program whose allocator keeps handing out new addresses (a million
 * allocate/free pairs here, 100 live at a time) must not grow it: every
 * lookup and every snapshot's listing walks the whole table.
 */
#include <errno.h>

#include "check.h"
#include "registry.h"

#define LIVE 100
#define PAIRS 1000000

static uint64_t addr_of(uint64_t i)
{
    return 0x7f0000000000ULL + i * 0x10000; /* never the same address twice */
}

int main(void)
{
    struct ckpt_alloc a;

    for (uint64_t i = 0; i < LIVE; i++)
        CHECK(ckpt_reg_add(addr_of(i), 4096, CKPT_ALLOC_PLAIN, 0, false, i) == 0 &&
                  ckpt_reg_find(addr_of(i), &a) == 0 && a.ordinal == i,
              "add %llu: ordinal %llu", (unsigned long long)i, (unsigned long long)a.ordinal);
    CHECK(ckpt_reg_add(addr_of(0), 4096, CKPT_ALLOC_PLAIN, 0, false, 0) == -EEXIST, "a live address added twice");
    CHECK(ckpt_reg_contains(addr_of(7) + 4095) && !ckpt_reg_contains(addr_of(7) + 4096),
          "interior address lookup");

    size_t first = ckpt_reg_capacity(), most = first;
    for (uint64_t i = LIVE; i < LIVE + PAIRS; i++) {
        if (ckpt_reg_remove(addr_of(i - LIVE)) != 0 ||
            ckpt_reg_add(addr_of(i), 4096, CKPT_ALLOC_PLAIN, 0, false, i) != 0) {
            CHECK(0, "churn failed at %llu", (unsigned long long)i);
            break;
        }
        if (ckpt_reg_capacity() > most)
            most = ckpt_reg_capacity();
    }
    CHECK(most == first, "%d live allocations, %d pairs: the table grew from %zu to %zu entries", LIVE, PAIRS,
          first, most);

    struct ckpt_alloc out[LIVE + 1], one;
    size_t n = ckpt_reg_snapshot(out, LIVE + 1);
    CHECK(n == LIVE, "snapshot lists %zu allocations, %d live", n, LIVE);
    for (size_t i = 0; i < n && i < LIVE; i++)
        CHECK(out[i].addr == addr_of(PAIRS + i) && out[i].ordinal == PAIRS + i, "entry %zu: %llx ordinal %llu",
              i, (unsigned long long)out[i].addr, (unsigned long long)out[i].ordinal);
    CHECK(ckpt_reg_find(addr_of(PAIRS - 1), &one) == -ENOENT, "a freed allocation is still found");
    CHECK(ckpt_reg_find(addr_of(PAIRS), &one) == 0 && one.size == 4096, "a live allocation is not found");
    return failures ? 1 : 0;
}
