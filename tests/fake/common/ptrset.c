/*
 * A hash set of pointers (open addressing, linear probing, tombstones) for
 * telling live handles from stale ones.  It stores pointers only and never
 * dereferences them, so a made-up handle can be checked safely.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "fakegpu.h"

/* Marks a deleted slot; no real handle lives at address 1. */
#define TOMBSTONE ((void *)1)

static size_t hash_ptr(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* The slot holding p, or NULL. */
static void **find(const struct fg_ptrset *set, const void *p)
{
    size_t i;

    if (!set->cap || !p || p == TOMBSTONE)
        return NULL;
    for (i = hash_ptr(p, set->cap);; i = (i + 1) & (set->cap - 1)) {
        if (!set->slots[i])
            return NULL;
        if (set->slots[i] == p)
            return &set->slots[i];
    }
}

static int grow(struct fg_ptrset *set)
{
    size_t cap = set->cap ? set->cap : 16, i;
    void **old = set->slots, **slots;

    /* Rehash to a size where the live entries fill at most a quarter. */
    while (cap < 4 * (set->live + 1))
        cap *= 2;
    slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (i = 0; i < set->cap; i++) {
        void *p = old[i];
        size_t j;

        if (!p || p == TOMBSTONE)
            continue;
        for (j = hash_ptr(p, cap); slots[j]; j = (j + 1) & (cap - 1))
            ;
        slots[j] = p;
    }
    free(old);
    set->slots = slots;
    set->cap = cap;
    set->used = set->live;
    return 0;
}

int fg_ptrset_add(struct fg_ptrset *set, void *p)
{
    size_t i;

    if (find(set, p))
        return 0;
    if (2 * (set->used + 1) > set->cap && grow(set))
        return -ENOMEM;
    for (i = hash_ptr(p, set->cap); set->slots[i] && set->slots[i] != TOMBSTONE;
         i = (i + 1) & (set->cap - 1))
        ;
    if (!set->slots[i])
        set->used++;
    set->slots[i] = p;
    set->live++;
    return 0;
}

int fg_ptrset_del(struct fg_ptrset *set, void *p)
{
    void **slot = find(set, p);

    if (!slot)
        return 0;
    *slot = TOMBSTONE;
    set->live--;
    return 1;
}

int fg_ptrset_has(const struct fg_ptrset *set, const void *p)
{
    return find(set, p) != NULL;
}

void fg_ptrset_each(const struct fg_ptrset *set, void (*fn)(void *p, void *arg), void *arg)
{
    size_t i;

    for (i = 0; i < set->cap; i++)
        if (set->slots[i] && set->slots[i] != TOMBSTONE)
            fn(set->slots[i], arg);
}
