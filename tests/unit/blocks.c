/*
 * Declared free blocks against a byte map: random frees and lives over
 * a few segments, as a caching allocator declares them, then the parts a
 * snapshot copies of each segment, compared with what the map says they
 * must be (live bytes, joined across interior free runs shorter than
 * CKPT_BLOCKS_GAP, free edges dropped).  Then forgetting (a segment
 * freed) and a registry that forgets with it.
 */
#include <errno.h>
#include <string.h>

#include "blocks.h"
#include "check.h"
#include "registry.h"

#define BASE 0x7f0000000000ULL
#define SEG (4u << 20)
#define SEGS 3
#define UNIT 512u
#define UNITS (SEGS * SEG / UNIT)

static unsigned char freed[UNITS]; /* 1: declared free */
static uint64_t rng = 88172645463325252ULL;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The parts the map says segment s has. */
static size_t expected(int s, struct ckpt_part *out, size_t max)
{
    size_t count = 0, first = (size_t)s * SEG / UNIT, end = first + SEG / UNIT, from = first;
    for (size_t u = first; u < end;) {
        if (!freed[u]) {
            u++;
            continue;
        }
        size_t lo = u;
        while (u < end && freed[u])
            u++;
        if (lo > first && u < end && (u - lo) * UNIT < CKPT_BLOCKS_GAP)
            continue;
        if (lo > from && count < max)
            out[count++] = (struct ckpt_part){(from - first) * UNIT, (lo - from) * UNIT};
        from = u;
    }
    if (from < end && count < max)
        out[count++] = (struct ckpt_part){(from - first) * UNIT, (end - from) * UNIT};
    return count;
}

static void compare(const char *when)
{
    static struct ckpt_part got[UNITS], want[UNITS];
    for (int s = 0; s < SEGS; s++) {
        size_t n = ckpt_blocks_parts(BASE + (uint64_t)s * SEG, SEG, got, UNITS);
        size_t m = expected(s, want, UNITS);
        bool same = n == m && memcmp(got, want, n * sizeof(*got)) == 0;
        CHECK(same, "%s: segment %d has %zu parts, the map says %zu (first: +%llu %llu bytes, map +%llu %llu)", when,
              s, n, m, n ? (unsigned long long)got[0].start : 0ULL, n ? (unsigned long long)got[0].bytes : 0ULL,
              m ? (unsigned long long)want[0].start : 0ULL, m ? (unsigned long long)want[0].bytes : 0ULL);
        if (!same)
            return;
    }
}

int main(void)
{
    struct ckpt_part p[4];

    /* Nothing declared: every allocation is one whole part. */
    CHECK(!ckpt_blocks_any(), "declarations before any was made");
    CHECK(ckpt_blocks_parts(BASE, SEG, p, 4) == 1 && p[0].start == 0 && p[0].bytes == SEG, "an undeclared segment");
    CHECK(ckpt_blocks_free(BASE, 0) == -EINVAL && ckpt_blocks_live(UINT64_MAX - 1, 4) == -EINVAL,
          "empty and wrapping ranges are refused");

    /* Declared free from end to end: no part at all. */
    CHECK(ckpt_blocks_free(BASE, SEG) == 0 && ckpt_blocks_parts(BASE, SEG, p, 4) == 0, "a segment all free");
    /* A block made inside it: that block, alone. */
    CHECK(ckpt_blocks_live(BASE + 8192, 1024) == 0 && ckpt_blocks_parts(BASE, SEG, p, 4) == 1 &&
              p[0].start == 8192 && p[0].bytes == 1024, "one live block in a free segment");
    /* Two blocks closer than the gap are copied as one. */
    CHECK(ckpt_blocks_live(BASE + 8192 + 1024 + 4096, 512) == 0 && ckpt_blocks_parts(BASE, SEG, p, 4) == 1 &&
              p[0].start == 8192 && p[0].bytes == 1024 + 4096 + 512, "a short gap is copied through");
    /* The segment is freed: its declarations go. */
    ckpt_blocks_forget(BASE, SEG);
    CHECK(!ckpt_blocks_any() && ckpt_blocks_parts(BASE, SEG, p, 4) == 1 && p[0].bytes == SEG,
          "a forgotten segment is whole again");

    /* Random declarations, as an allocator splits, frees and reuses. */
    memset(freed, 0, sizeof(freed));
    for (int s = 0; s < SEGS; s++) {
        ckpt_blocks_free(BASE + (uint64_t)s * SEG, SEG);
        memset(freed + (size_t)s * SEG / UNIT, 1, SEG / UNIT);
    }
    for (int round = 0; round < 20000; round++) {
        size_t u = next() % UNITS, len = 1 + next() % (next() % 8 ? 16 : 512);
        if (u + len > UNITS)
            len = UNITS - u;
        bool free_it = next() % 2;
        int rc = free_it ? ckpt_blocks_free(BASE + u * UNIT, len * UNIT) : ckpt_blocks_live(BASE + u * UNIT, len * UNIT);
        CHECK(rc == 0, "round %d: declaration failed: %d", round, rc);
        memset(freed + u, free_it, len);
        if (round % 997 == 0)
            compare("random declarations");
    }
    compare("after the random declarations");

    /* Forgetting one segment leaves the others as they were. */
    ckpt_blocks_forget(BASE + SEG, SEG);
    memset(freed + SEG / UNIT, 0, SEG / UNIT);
    compare("one segment forgotten");

    /* An answer replaces everything: the map again, from its free runs
     * listed out of order, some split in two touching halves. */
    static uint64_t pairs[2 * UNITS];
    size_t np = 0;
    for (size_t u = 0; u < UNITS;) {
        if (!freed[u]) {
            u++;
            continue;
        }
        size_t lo = u;
        while (u < UNITS && freed[u])
            u++;
        if (u - lo > 1 && lo % 2) { /* two touching halves */
            size_t mid = lo + (u - lo) / 2;
            pairs[np++] = BASE + mid * UNIT, pairs[np++] = (u - mid) * UNIT;
            pairs[np++] = BASE + lo * UNIT, pairs[np++] = (mid - lo) * UNIT;
        } else {
            pairs[np++] = BASE + lo * UNIT, pairs[np++] = (u - lo) * UNIT;
        }
    }
    for (size_t i = 0; i + 2 < np; i += 4) { /* out of order */
        uint64_t a = pairs[i], b = pairs[i + 1];
        pairs[i] = pairs[i + 2], pairs[i + 1] = pairs[i + 3], pairs[i + 2] = a, pairs[i + 3] = b;
    }
    ckpt_blocks_free(BASE + SEG, SEG); /* to be replaced */
    CHECK(ckpt_blocks_replace(pairs, np / 2) == 0, "replace");
    compare("replaced by an answer");
    CHECK(ckpt_blocks_replace(pairs, 0) == 0 && !ckpt_blocks_any(), "an empty answer leaves nothing free");
    uint64_t bad[2] = {BASE, 0};
    CHECK(ckpt_blocks_replace(bad, 1) == -EINVAL, "an empty range in an answer");

    /* The registry forgets with a freed allocation, and a new one at the
     * same address starts whole. */
    ckpt_blocks_reset();
    CHECK(ckpt_reg_add(BASE, SEG, CKPT_ALLOC_PLAIN, 0, false, 1) == 0, "add a segment");
    ckpt_blocks_free(BASE, SEG);
    CHECK(ckpt_reg_remove(BASE) == 0 && !ckpt_blocks_any(), "a freed allocation's declarations stay behind");
    ckpt_blocks_free(BASE, SEG);
    CHECK(ckpt_reg_add(BASE, SEG, CKPT_ALLOC_PLAIN, 0, false, 2) == 0 && !ckpt_blocks_any(),
          "a new allocation inherits declarations made before it");
    return failures ? 1 : 0;
}
