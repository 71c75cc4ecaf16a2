/*
 * Declared free blocks, as blocks.h promises: one sorted array of disjoint,
 * non-touching free ranges over the whole address space, under one lock.
 * A caching allocator declares a few blocks per tensor it makes or frees;
 * the array holds about one range per free block, so a binary search and
 * a move of the tail is cheap next to the allocator's own bookkeeping.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"

struct range {
    uint64_t lo, hi; /* [lo, hi) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;
static size_t n, cap;

/* The first range whose end is at or past addr.  Lock held. */
static size_t first_ending_at(uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ranges[mid].hi < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Room for one more range.  Lock held.  Returns 0 or -ENOMEM. */
static int room(void)
{
    if (n < cap)
        return 0;
    size_t c = cap ? cap * 2 : 64;
    struct range *r = realloc(ranges, c * sizeof(*r));
    if (!r)
        return -ENOMEM;
    ranges = r;
    cap = c;
    return 0;
}

int ckpt_blocks_free(uint64_t addr, uint64_t len)
{
    if (!len || addr + len < addr)
        return -EINVAL;
    uint64_t lo = addr, hi = addr + len;
    int rc = 0;
    pthread_mutex_lock(&lock);
    /* Ranges i .. j-1 overlap or touch [lo, hi): they become one. */
    size_t i = first_ending_at(lo), j = i;
    while (j < n && ranges[j].lo <= hi)
        j++;
    if (i == j) {
        if ((rc = room()) == 0) {
            memmove(&ranges[i + 1], &ranges[i], (n - i) * sizeof(*ranges));
            ranges[i] = (struct range){lo, hi};
            n++;
        }
    } else {
        ranges[i].lo = lo < ranges[i].lo ? lo : ranges[i].lo;
        ranges[i].hi = hi > ranges[j - 1].hi ? hi : ranges[j - 1].hi;
        memmove(&ranges[i + 1], &ranges[j], (n - j) * sizeof(*ranges));
        n -= j - i - 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Takes [lo, hi) out of the free ranges.  Lock held. */
static void take_out(uint64_t lo, uint64_t hi)
{
    size_t i = first_ending_at(lo + 1); /* the first range that ends past lo */
    if (i < n && ranges[i].lo < lo && ranges[i].hi > hi) {
        /* Inside one range: it splits in two, or, without room for the
         * second half, all of it becomes live. */
        if (room() == 0) {
            memmove(&ranges[i + 1], &ranges[i], (n - i) * sizeof(*ranges));
            n++;
            ranges[i].hi = lo;
            ranges[i + 1].lo = hi;
        } else {
            memmove(&ranges[i], &ranges[i + 1], (n - i - 1) * sizeof(*ranges));
            n--;
        }
        return;
    }
    if (i < n && ranges[i].lo < lo && ranges[i].hi > lo)
        ranges[i++].hi = lo; /* keeps its part below */
    size_t j = i;
    while (j < n && ranges[j].hi <= hi)
        j++; /* wholly inside: gone */
    if (j < n && ranges[j].lo < hi)
        ranges[j].lo = hi; /* keeps its part above */
    memmove(&ranges[i], &ranges[j], (n - j) * sizeof(*ranges));
    n -= j - i;
}

int ckpt_blocks_live(uint64_t addr, uint64_t len)
{
    if (!len || addr + len < addr)
        return -EINVAL;
    pthread_mutex_lock(&lock);
    if (n)
        take_out(addr, addr + len);
    pthread_mutex_unlock(&lock);
    return 0;
}

void ckpt_blocks_forget(uint64_t addr, uint64_t len)
{
    if (!len || addr + len < addr)
        return;
    pthread_mutex_lock(&lock);
    if (n)
        take_out(addr, addr + len);
    pthread_mutex_unlock(&lock);
}

size_t ckpt_blocks_parts(uint64_t addr, uint64_t size, struct ckpt_part *out, size_t max)
{
    size_t count = 0;
    uint64_t end = addr + size, from = addr; /* the live part being gathered starts at from */
    pthread_mutex_lock(&lock);
    for (size_t i = n ? first_ending_at(addr + 1) : 0; i < n && ranges[i].lo < end; i++) {
        uint64_t lo = ranges[i].lo > addr ? ranges[i].lo : addr, hi = ranges[i].hi < end ? ranges[i].hi : end;
        /* A short gap inside is copied through; one at either edge never is. */
        if (lo > addr && hi < end && hi - lo < CKPT_BLOCKS_GAP)
            continue;
        if (lo > from) {
            if (count < max)
                out[count] = (struct ckpt_part){from - addr, lo - from};
            count++;
        }
        from = hi;
    }
    pthread_mutex_unlock(&lock);
    if (from < end) {
        if (count < max)
            out[count] = (struct ckpt_part){from - addr, end - from};
        count++;
    }
    return count;
}

static int by_start(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

int ckpt_blocks_replace(const uint64_t *pairs, size_t count)
{
    struct range *r = malloc((count ? count : 1) * sizeof(*r));
    if (!r)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        uint64_t lo = pairs[2 * i], len = pairs[2 * i + 1];
        if (!len || lo + len < lo) {
            free(r);
            return -EINVAL;
        }
        r[i] = (struct range){lo, lo + len};
    }
    qsort(r, count, sizeof(*r), by_start);
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        if (k && r[i].lo <= r[k - 1].hi)
            r[k - 1].hi = r[i].hi > r[k - 1].hi ? r[i].hi : r[k - 1].hi;
        else
            r[k++] = r[i];
    }
    pthread_mutex_lock(&lock);
    free(ranges);
    ranges = r;
    n = k;
    cap = count ? count : 1;
    pthread_mutex_unlock(&lock);
    return 0;
}

int ckpt_blocks_any(void)
{
    pthread_mutex_lock(&lock);
    int any = n != 0;
    pthread_mutex_unlock(&lock);
    return any;
}

void ckpt_blocks_reset(void)
{
    pthread_mutex_lock(&lock);
    free(ranges);
    ranges = NULL;
    n = cap = 0;
    pthread_mutex_unlock(&lock);
}
