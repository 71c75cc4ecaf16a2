/*
 * The device's virtual address range, as the real driver's unified
 * address space: cuInit reserves one large PROT_NONE range with a plain
 * mmap (no fixed address, so address-space randomisation moves it as on a
 * real machine), and every device address comes out of it: cuMemAlloc,
 * pitch, managed and stream-ordered pool blocks, and cuMemAddressReserve
 * ranges.  Addresses are chosen first fit by address, so the same
 * sequence of calls gives the same addresses whatever else the process
 * maps meanwhile (thread stacks, libraries, buffers).
 *
 * Allocations of 2 MiB or more take extents of their own, 2 MiB-aligned
 * and rounded up to 2 MiB; smaller ones are packed, 512-byte aligned and
 * rounded up to 512 bytes, into 2 MiB chunks, as a GPU sub-allocates small
 * allocations from its 2 MiB pages: device memory, managed memory and
 * stream-ordered pools' blocks each in chunks of their own (fg_va_class).  Pages are mapped read-write (fresh,
 * zeroed, populated) when an allocation first uses them and made
 * inaccessible again (fresh pages, PROT_NONE) when no allocation uses them
 * any more, so a use after free faults unless a neighbour in the same page
 * is still live.  Reservations stay PROT_NONE: cuMemMap maps into them.
 * Nothing here may ever mmap outside the range, nor over a page another
 * allocation still uses.  All state is guarded by drv.lock.
 *
 * Device pages are host memory, but the host may not touch them, as it
 * cannot touch a GPU's: where the CPU has protection keys (x86 PKU), every
 * device page carries one key that threads may not use, but for a stream's
 * worker while it runs a kernel, a copy or a memset (fg_device_access), so
 * a host thread that dereferences device memory faults.  Managed memory,
 * which the host may touch, lives in chunks of its own, without the key.
 * FAKEGPU_HOST_DEREF=allow (read when the driver is loaded), or a CPU
 * without protection keys, lets the host touch device pages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"

#define UNIT 512u                                /* small allocations' alignment */
#define CHUNK ((size_t)FG_GRANULARITY)           /* small allocations are packed into these */
#define CHUNK_UNITS (CHUNK / UNIT)               /* 4096 */
#define WORD_BITS 64u

enum va_kind { VA_MAPPED, VA_RESERVED, VA_CHUNK };

struct va_chunk {
    uint64_t used[CHUNK_UNITS / WORD_BITS]; /* one bit per unit */
    size_t nused;
    enum fg_va_class cls; /* FG_VA_HOST: managed memory's, the host may touch its pages */
};

struct va_extent {
    uintptr_t base;
    size_t size; /* a multiple of the page size */
    enum va_kind kind;
    struct va_chunk *chunk; /* VA_CHUNK only */
};

static struct {
    uintptr_t base;
    size_t size;
    size_t page;
    struct va_extent *ext; /* sorted by base, never overlapping */
    size_t n, cap;
} va;

static uintptr_t align_up(uintptr_t x, size_t a)
{
    return (x + a - 1) & ~(uintptr_t)(a - 1);
}

/* The protection key of device pages, or -1 (the host may touch them). */
static int dev_key = -1;

/*
 * The key is made when the driver is loaded, with the loading thread's
 * access to it taken away: threads made later inherit their maker's rights
 * (threads already running when libcuda.so.1 is loaded keep access; a
 * program that links it has none yet).
 */
__attribute__((constructor)) static void device_key(void)
{
    const char *deref = getenv("FAKEGPU_HOST_DEREF");
    if (!deref || strcmp(deref, "allow") != 0)
        dev_key = pkey_alloc(0, PKEY_DISABLE_ACCESS);
}

int fg_va_protect(uintptr_t p, size_t n, int prot)
{
    if (dev_key < 0 || prot == PROT_NONE)
        return mprotect((void *)p, n, prot) ? -errno : 0;
    return pkey_mprotect((void *)p, n, prot, dev_key) ? -errno : 0;
}

void fg_device_access(int on)
{
    if (dev_key >= 0)
        pkey_set(dev_key, on ? 0 : PKEY_DISABLE_ACCESS);
}

/* Fresh zeroed pages, resident at once as device memory is, the host's
 * (host) or the device's: 0 or -ENOMEM. */
static int map_rw(uintptr_t p, size_t n, int host)
{
    void *m = mmap((void *)p, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_POPULATE | MAP_FIXED, -1, 0);

    if (m == MAP_FAILED)
        return -ENOMEM;
    return host ? 0 : fg_va_protect(p, n, PROT_READ | PROT_WRITE);
}

/* Drops the pages' contents and makes them inaccessible; still reserved. */
static void map_none(uintptr_t p, size_t n)
{
    mmap((void *)p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/*
 * FAKEGPU_VA_HINT: an address to ask mmap for instead of none.  For tests
 * run under ThreadSanitizer, whose runtime maps memory of its own in
 * amounts that depend on what the process did before its first context:
 * a standby's range would start 2 MiB from its rank's for the sanitizer's
 * sake, not libckpt's.
 */
static void *va_hint(void)
{
    const char *v = getenv("FAKEGPU_VA_HINT");
    char *end;
    unsigned long long at;

    if (!v || !*v)
        return NULL;
    errno = 0;
    at = strtoull(v, &end, 0);
    if (errno || *end || at % CHUNK) {
        fprintf(stderr, "fakegpu: FAKEGPU_VA_HINT=%s is not a 2 MiB-aligned address; ignored\n", v);
        return NULL;
    }
    return (void *)(uintptr_t)at;
}

int fg_va_init(size_t device_bytes)
{
    size_t want, len;
    void *p;

    if (va.base)
        return 0;
    va.page = (size_t)sysconf(_SC_PAGESIZE);
    /* 4x the device for allocations (managed memory is not accounted, and
     * first fit fragments), 8x for address reservations (PyTorch's
     * expandable segments reserve about the device's size per stream);
     * never under 64 GiB.  PROT_NONE and MAP_NORESERVE: costs no memory. */
    want = device_bytes > SIZE_MAX / 16 ? SIZE_MAX / 16 : 12 * device_bytes;
    if (want < ((size_t)64 << 30))
        want = (size_t)64 << 30;
    want = align_up(want, CHUNK);
    len = want + CHUNK;
    p = mmap(va_hint(), len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    /* Trim to a 2 MiB-aligned range. */
    va.base = align_up((uintptr_t)p, CHUNK);
    if (va.base > (uintptr_t)p)
        munmap(p, va.base - (uintptr_t)p);
    if ((uintptr_t)p + len > va.base + want)
        munmap((void *)(va.base + want), (uintptr_t)p + len - (va.base + want));
    va.size = want;
    return 0;
}

int fg_va_contains(uintptr_t addr, size_t bytes)
{
    return va.base && addr >= va.base && addr - va.base <= va.size && bytes <= va.size - (addr - va.base);
}

int fg_va_overlaps(uintptr_t addr, size_t bytes)
{
    return va.base && addr < va.base + va.size && addr + bytes > va.base;
}

/* ---- the table of extents ----------------------------------------- */

/* Index of the first extent whose base is above addr. */
static size_t upper_bound(uintptr_t addr)
{
    size_t lo = 0, hi = va.n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (va.ext[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The extent containing addr, or NULL. */
static struct va_extent *find(uintptr_t addr)
{
    size_t i = upper_bound(addr);

    if (i == 0 || addr - va.ext[i - 1].base >= va.ext[i - 1].size)
        return NULL;
    return &va.ext[i - 1];
}

static int insert(size_t i, uintptr_t base, size_t size, enum va_kind kind, struct va_chunk *chunk)
{
    if (va.n == va.cap) {
        size_t cap = va.cap ? 2 * va.cap : 64;
        struct va_extent *e = realloc(va.ext, cap * sizeof(*e));

        if (!e)
            return -ENOMEM;
        va.ext = e;
        va.cap = cap;
    }
    memmove(&va.ext[i + 1], &va.ext[i], (va.n - i) * sizeof(*va.ext));
    va.ext[i] = (struct va_extent){.base = base, .size = size, .kind = kind, .chunk = chunk};
    va.n++;
    return 0;
}

static void erase(struct va_extent *e)
{
    size_t i = (size_t)(e - va.ext);

    memmove(&va.ext[i], &va.ext[i + 1], (va.n - i - 1) * sizeof(*va.ext));
    va.n--;
}

/*
 * The lowest address of the range, a multiple of align, where size bytes
 * overlap no extent, with the index the new extent takes: 0, or -ENOMEM
 * when no gap is large enough.  The hint, when free and aligned, wins.
 */
static int first_fit(size_t size, size_t align, uintptr_t hint, uintptr_t *addr, size_t *idx)
{
    uintptr_t cur = va.base, end = va.base + va.size;
    size_t i;

    if (hint && hint % align == 0 && fg_va_contains(hint, size)) {
        i = upper_bound(hint);
        if ((i == 0 || va.ext[i - 1].base + va.ext[i - 1].size <= hint) &&
            (i == va.n || va.ext[i].base - hint >= size)) {
            *addr = hint;
            *idx = i;
            return 0;
        }
    }
    for (i = 0; i <= va.n; i++) {
        uintptr_t a = align_up(cur, align), limit = i < va.n ? va.ext[i].base : end;

        if (a <= limit && limit - a >= size) {
            *addr = a;
            *idx = i;
            return 0;
        }
        if (i < va.n)
            cur = va.ext[i].base + va.ext[i].size;
    }
    return -ENOMEM;
}

/* ---- chunks of small allocations ---------------------------------- */

static int unit_used(const struct va_chunk *c, size_t u)
{
    return (c->used[u / WORD_BITS] >> (u % WORD_BITS)) & 1;
}

static void set_units(struct va_chunk *c, size_t first, size_t count, int used)
{
    for (size_t u = first; u < first + count; u++) {
        if (used)
            c->used[u / WORD_BITS] |= (uint64_t)1 << (u % WORD_BITS);
        else
            c->used[u / WORD_BITS] &= ~((uint64_t)1 << (u % WORD_BITS));
    }
    c->nused = used ? c->nused + count : c->nused - count;
}

/* The first run of count free units in the chunk, or -1. */
static long find_units(const struct va_chunk *c, size_t count)
{
    size_t u = 0, run = 0;

    if (CHUNK_UNITS - c->nused < count)
        return -1;
    while (u < CHUNK_UNITS) {
        if (run == 0 && u % WORD_BITS == 0 && c->used[u / WORD_BITS] == UINT64_MAX) {
            u += WORD_BITS; /* a full word: skip it */
            continue;
        }
        if (unit_used(c, u)) {
            run = 0;
        } else if (++run == count) {
            return (long)(u + 1 - count);
        }
        u++;
    }
    return -1;
}

/*
 * Maps (used) or unmaps (!used) the pages of units [first, first + count)
 * that no other unit of the chunk uses, after the units' bits changed.
 */
static int sync_pages(const struct va_extent *e, size_t first, size_t count, int used)
{
    size_t per_page = va.page / UNIT;

    for (size_t u = first - first % per_page; u < first + count; u += per_page) {
        size_t lo = u < first ? first : u, hi = u + per_page < first + count ? u + per_page : first + count;
        int others = 0;

        /* Units of this page outside the range decide whether it was, or stays, mapped. */
        for (size_t v = u; v < u + per_page && !others; v++)
            others = (v < lo || v >= hi) && unit_used(e->chunk, v);
        if (others)
            continue;
        if (used && map_rw(e->base + u * UNIT, va.page, e->chunk->cls == FG_VA_HOST))
            return -ENOMEM;
        if (!used)
            map_none(e->base + u * UNIT, va.page);
    }
    return 0;
}

static int small_alloc(size_t bytes, enum fg_va_class cls, uintptr_t *addr)
{
    size_t count = (bytes + UNIT - 1) / UNIT, i;
    struct va_extent *e = NULL;
    struct va_chunk *c;
    uintptr_t base;
    long first = -1;

    for (i = 0; i < va.n && first < 0; i++)
        if (va.ext[i].kind == VA_CHUNK && va.ext[i].chunk->cls == cls &&
            (first = find_units(va.ext[i].chunk, count)) >= 0)
            e = &va.ext[i];
    if (!e) {
        /* A new chunk, first fit like any 2 MiB allocation. */
        if (!(c = calloc(1, sizeof(*c))))
            return -ENOMEM;
        c->cls = cls;
        if (first_fit(CHUNK, CHUNK, 0, &base, &i) || insert(i, base, CHUNK, VA_CHUNK, c)) {
            free(c);
            return -ENOMEM;
        }
        e = &va.ext[i];
        first = 0;
    }
    set_units(e->chunk, (size_t)first, count, 1);
    if (sync_pages(e, (size_t)first, count, 1)) {
        set_units(e->chunk, (size_t)first, count, 0);
        sync_pages(e, (size_t)first, count, 0);
        if (e->chunk->nused == 0) {
            free(e->chunk);
            erase(e);
        }
        return -ENOMEM;
    }
    *addr = e->base + (size_t)first * UNIT;
    return 0;
}

static void small_free(struct va_extent *e, uintptr_t addr, size_t bytes)
{
    size_t first = (addr - e->base) / UNIT, count = (bytes + UNIT - 1) / UNIT;

    set_units(e->chunk, first, count, 0);
    sync_pages(e, first, count, 0);
    if (e->chunk->nused == 0) {
        free(e->chunk);
        erase(e); /* its pages are all PROT_NONE again */
    }
}

/* ---- the interface ------------------------------------------------- */

int fg_va_alloc(size_t bytes, enum fg_va_class cls, uintptr_t *addr)
{
    size_t span, i;
    uintptr_t base;

    if (!va.base || bytes == 0 || bytes > va.size)
        return -ENOMEM;
    if (bytes < CHUNK)
        return small_alloc(bytes, cls, addr);
    span = align_up(bytes, CHUNK);
    if (first_fit(span, CHUNK, 0, &base, &i))
        return -ENOMEM;
    if (map_rw(base, span, cls == FG_VA_HOST)) {
        map_none(base, span);
        return -ENOMEM;
    }
    if (insert(i, base, span, VA_MAPPED, NULL)) {
        map_none(base, span);
        return -ENOMEM;
    }
    *addr = base;
    return 0;
}

void fg_va_free(uintptr_t addr, size_t bytes)
{
    struct va_extent *e = find(addr);

    if (!e)
        return;
    if (e->kind == VA_CHUNK) {
        small_free(e, addr, bytes);
    } else if (e->kind == VA_MAPPED && e->base == addr) {
        map_none(e->base, e->size);
        erase(e);
    }
}

int fg_va_reserve(size_t bytes, size_t align, uintptr_t hint, uintptr_t *addr)
{
    size_t i;
    uintptr_t base;

    if (!va.base || bytes == 0 || bytes % va.page || align % va.page)
        return -EINVAL;
    if (first_fit(bytes, align, hint, &base, &i) || insert(i, base, bytes, VA_RESERVED, NULL))
        return -ENOMEM;
    *addr = base;
    return 0;
}

int fg_va_unreserve(uintptr_t addr, size_t bytes)
{
    struct va_extent *e = find(addr);

    if (!e || e->kind != VA_RESERVED || e->base != addr || e->size != bytes)
        return -ENOENT;
    map_none(e->base, e->size);
    erase(e);
    return 0;
}

int fg_va_back(uintptr_t addr, size_t bytes)
{
    return map_rw(addr, bytes, 0);
}

void fg_va_unback(uintptr_t addr, size_t bytes)
{
    map_none(addr, bytes);
}

size_t fg_va_page(void)
{
    return va.page ? va.page : (size_t)sysconf(_SC_PAGESIZE);
}
