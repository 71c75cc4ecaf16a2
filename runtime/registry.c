/*
 * The allocation registry of registry.h: an open-addressing hash table
 * keyed by address, under one mutex.  Hooked allocation calls are far
 * rarer than launches, and a snapshot copies the table out before it reads
 * device memory, so one lock is enough; it is never held across a CUDA
 * call.  It must never allocate while holding the lock except to grow.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "registry.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ckpt_alloc *slots; /* addr == 0: empty; TOMB: deleted */
static size_t cap, used, tombs;
static uint64_t iteration;
#define TOMB UINT64_MAX

static size_t hash(uint64_t a)
{
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdULL;
    a ^= a >> 33;
    return (size_t)a;
}

/* The slot holding addr, or the first free one on its probe path. */
static struct ckpt_alloc *probe(uint64_t addr, bool for_insert)
{
    struct ckpt_alloc *free_slot = NULL;
    for (size_t i = hash(addr) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        struct ckpt_alloc *s = &slots[i];
        if (s->addr == addr)
            return s;
        if (s->addr == TOMB && !free_slot)
            free_slot = s;
        if (s->addr == 0)
            return for_insert ? (free_slot ? free_slot : s) : NULL;
    }
}

/* Makes room: a table whose live entries fill at most half of it is
 * rebuilt at its size, without its tombstones, else at twice the size.  So
 * the table follows the live count, not how many addresses were ever freed. */
static int grow(void)
{
    size_t ncap = !cap ? 1024 : (used + 1) * 2 <= cap ? cap : cap * 2;
    struct ckpt_alloc *old = slots, *n = calloc(ncap, sizeof(*n));
    if (!n)
        return -ENOMEM;
    size_t ocap = cap;
    slots = n;
    cap = ncap;
    used = tombs = 0;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].addr && old[i].addr != TOMB) {
            *probe(old[i].addr, true) = old[i];
            used++;
        }
    }
    free(old);
    return 0;
}

int ckpt_reg_add(uint64_t addr, uint64_t size, enum ckpt_alloc_kind kind, uint64_t stream, bool internal,
                 uint64_t ordinal)
{
    int rc = 0;
    if (addr == 0 || addr == TOMB)
        return -EINVAL;
    pthread_mutex_lock(&lock);
    if ((used + tombs + 1) * 4 > cap * 3 && (rc = grow()) < 0)
        goto out;
    struct ckpt_alloc *s = probe(addr, true);
    if (s->addr == addr) {
        rc = -EEXIST;
        goto out;
    }
    if (s->addr == TOMB)
        tombs--;
    *s = (struct ckpt_alloc){
        .addr = addr,
        .size = size,
        .ordinal = internal ? 0 : ordinal,
        .stream = stream,
        .birth = __atomic_load_n(&iteration, __ATOMIC_RELAXED),
        .kind = (uint8_t)kind,
        .internal = internal,
    };
    used++;
out:
    pthread_mutex_unlock(&lock);
    if (rc == 0)
        ckpt_blocks_forget(addr, size); /* a new allocation starts live, whatever was declared there before */
    return rc;
}

bool ckpt_reg_contains(uint64_t addr)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < cap && !found; i++) {
        const struct ckpt_alloc *s = &slots[i];
        found = s->addr && s->addr != TOMB && addr >= s->addr && addr - s->addr < s->size;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

int ckpt_reg_remove(uint64_t addr)
{
    uint64_t size = 0;
    pthread_mutex_lock(&lock);
    struct ckpt_alloc *s = cap ? probe(addr, false) : NULL;
    if (s) {
        size = s->size;
        s->addr = TOMB;
        used--;
        tombs++;
    }
    pthread_mutex_unlock(&lock);
    if (!s)
        return -ENOENT;
    ckpt_blocks_forget(addr, size); /* what the program declared inside it goes with it */
    return 0;
}

size_t ckpt_reg_remove_range(uint64_t addr, uint64_t size)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < cap; i++) {
        struct ckpt_alloc *s = &slots[i];
        if (s->addr && s->addr != TOMB && s->addr >= addr && s->addr - addr < size) {
            s->addr = TOMB;
            used--;
            tombs++;
            n++;
        }
    }
    pthread_mutex_unlock(&lock);
    if (n)
        ckpt_blocks_forget(addr, size);
    return n;
}

int ckpt_reg_find(uint64_t addr, struct ckpt_alloc *out)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&lock);
    struct ckpt_alloc *s = cap ? probe(addr, false) : NULL;
    if (s) {
        *out = *s;
        rc = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int by_ordinal(const void *a, const void *b)
{
    const struct ckpt_alloc *x = a, *y = b;
    return (x->ordinal > y->ordinal) - (x->ordinal < y->ordinal);
}

size_t ckpt_reg_snapshot(struct ckpt_alloc *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < cap; i++) {
        const struct ckpt_alloc *s = &slots[i];
        if (s->addr == 0 || s->addr == TOMB || s->internal)
            continue;
        if (n < max)
            out[n] = *s;
        n++;
    }
    pthread_mutex_unlock(&lock);
    if (out && n && max)
        qsort(out, n < max ? n : max, sizeof(*out), by_ordinal);
    return n;
}

void ckpt_reg_stats(size_t *count, uint64_t *bytes, size_t *internal_count, uint64_t *internal_bytes)
{
    *count = *internal_count = 0;
    *bytes = *internal_bytes = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < cap; i++) {
        const struct ckpt_alloc *s = &slots[i];
        if (s->addr == 0 || s->addr == TOMB)
            continue;
        if (s->internal) {
            (*internal_count)++;
            *internal_bytes += s->size;
        } else {
            (*count)++;
            *bytes += s->size;
        }
    }
    pthread_mutex_unlock(&lock);
}

size_t ckpt_reg_capacity(void)
{
    pthread_mutex_lock(&lock);
    size_t n = cap;
    pthread_mutex_unlock(&lock);
    return n;
}

void ckpt_reg_set_iteration(uint64_t iter)
{
    __atomic_store_n(&iteration, iter, __ATOMIC_RELAXED);
}

void ckpt_reg_reset(void)
{
    pthread_mutex_lock(&lock);
    free(slots);
    slots = NULL;
    cap = used = tombs = 0;
    __atomic_store_n(&iteration, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
    ckpt_blocks_reset();
}
