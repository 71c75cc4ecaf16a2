/* libckpt's own mappings, placed apart from the program's (aside.h). */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "aside.h"

/* 512 GiB just under 0x568000000000: far below the mmap base of a 47-bit
 * address space (the top, less the stack) and hundreds of GiB above a
 * position-independent program and its heap (0x555555554000 without
 * randomisation), in a range every sanitizer leaves to the program
 * (ThreadSanitizer's PIE range, AddressSanitizer's high memory). */
#define REGION_START ((uintptr_t)0x560000000000ull)
#define REGION_END ((uintptr_t)0x568000000000ull)
#define ALIGN ((uintptr_t)2 << 20)

static uintptr_t next = REGION_START;

void *ckpt_mmap_aside(size_t len, int prot, int flags, int fd, off_t off)
{
    uintptr_t span = ((uintptr_t)len + ALIGN - 1) / ALIGN * ALIGN + ALIGN; /* a guard gap after it */
    for (int tries = 0; tries < 8; tries++) {
        uintptr_t at = __atomic_fetch_add(&next, span, __ATOMIC_RELAXED);
        if (at + span > REGION_END || at + span < at)
            break;
        /* A hint, not MAP_FIXED_NOREPLACE: a sanitizer that owns the
         * address range drops the address and keeps the flags, and the
         * kernel would then map at 0. */
        void *p = mmap((void *)at, len, prot, flags, fd, off);
        if (p == (void *)at)
            return p;
        if (p != MAP_FAILED) /* placed elsewhere: that range is taken, or not ours to use */
            munmap(p, len);
    }
    return mmap(NULL, len, prot, flags, fd, off);
}

void *ckpt_aside_grow(void *old, size_t *cap, size_t want)
{
    if (want <= *cap)
        return old;
    size_t n = *cap ? *cap : ALIGN;
    while (n < want)
        n *= 2;
    void *p = ckpt_mmap_aside(n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (old) {
        memcpy(p, old, *cap);
        munmap(old, *cap);
    }
    *cap = n;
    return p;
}

void ckpt_aside_free(void *p, size_t cap)
{
    if (p && cap)
        munmap(p, cap);
}
