/*
 * Room for the driver in the address space.  Restore by replay needs every
 * device allocation of the replaying run at the recorded run's address,
 * and with randomisation off the driver gives the same addresses to the
 * same calls, relative to where it mapped its address ranges when CUDA
 * started.  It maps them (mmap, no address asked: the kernel takes the
 * highest room that fits) wherever the process left room by then, and
 * what the process had mapped by then is not the same in every run: a
 * thread started before CUDA (a data loader's prefetch thread, a process
 * group's store) maps its malloc arena, 64 MiB, and its buffers, before or
 * after CUDA starts as timing decides; and a replaying run's libckpt maps
 * logs the recorded run's did not.  Any of it moves every device address.
 *
 * So, at load, before the program has a thread or a mapping of its own,
 * libckpt holds HOLE bytes of address space (no access, no memory: it
 * costs neither RAM nor commit) where the kernel puts the next large
 * mapping; every mapping made after then goes below it.  While a thread
 * is in cuInit or makes a context (the driver maps its ranges by the first
 * context at the latest), the mappings it asks for without an address
 * are put into the hole, from its top down, as the kernel would have put
 * them into an empty space there: at the same addresses in every run,
 * whatever the program's other threads, and libckpt, map meanwhile.  What
 * is left of the hole is let go once the first context is made.  A driver
 * that maps its ranges on a thread of its own, or by a system call of its
 * own, is not helped, nor harmed: they go below everything, as without
 * the hole, and a restore they move is refused (replay.c).
 *
 * Under ThreadSanitizer, whose runtime allows an application only some
 * ranges of the address space, nothing is held.
 */
/* mmap and mmap64 are both defined here: not one redirected to the other. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose.h"
#include "log.h"

#if defined(__SANITIZE_THREAD__)
#define HOLD_NOTHING 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HOLD_NOTHING 1
#endif
#endif

#define HOLE ((size_t)4 << 40) /* 4 TiB, of the 128 TiB a process has on x86-64 */

/* What is left of the hole, [lo, hi): hi moves down as the driver's
 * mappings go in, by compare-and-swap, with no lock (mmap may be called
 * from a signal handler, or in a child forked while another thread was in
 * it); 0 once let go.  lo is set once, at load. */
static uintptr_t lo, hi;
static __thread int starting; /* depth: a tool's library may call cuInit within cuInit */

void ckpt_addrspace_hold(void)
{
#ifndef HOLD_NOTHING
    void *p = mmap(NULL, HOLE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        ckpt_log(CKPT_INFO, "no address space held for the driver (%zu GiB: %s): a thread that maps memory while "
                 "CUDA starts may move every device address, and restores then be refused", HOLE >> 30,
                 strerror(errno));
        return;
    }
    lo = (uintptr_t)p;
    __atomic_store_n(&hi, lo + HOLE, __ATOMIC_RELEASE);
#endif
}

void ckpt_addrspace_driver_starts(void)
{
    starting++;
}

void ckpt_addrspace_driver_started(bool made)
{
    starting--;
    uintptr_t h = made ? __atomic_exchange_n(&hi, 0, __ATOMIC_ACQ_REL) : 0;
    if (h > lo)
        munmap((void *)lo, h - lo);
}

/* The next mmap (libc's: a sanitizer's interceptor comes before libckpt's);
 * the system call itself if there is none. */
static void *mmap_next(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    REAL_LIBC(mmap);
    if (real_mmap_)
        return real_mmap_(addr, len, prot, flags, fd, off);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* The driver's mapping, from the top of the hole: MAP_FIXED replaces the
 * hole's pages there; NULL when it does not fit, or cannot be put there
 * (the caller then maps it as asked). */
static void *into_hole(size_t len, int prot, int flags, int fd, off_t off)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t h = __atomic_load_n(&hi, __ATOMIC_ACQUIRE);
    len = (len + page - 1) & ~(page - 1);
    do
        if (!len || !h || h - lo < len)
            return NULL;
    while (!__atomic_compare_exchange_n(&hi, &h, h - len, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    void *p = mmap_next((void *)(h - len), len, prot, flags | MAP_FIXED, fd, off);
    if (p != MAP_FAILED)
        return p;
    /* A failed MAP_FIXED may have unmapped the range: held again, so that no
     * other mapping takes it and is unmapped with the hole. */
    mmap_next((void *)(h - len), len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return NULL;
}

__attribute__((visibility("default"))) void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (starting > 0 && !addr && !(flags & (MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_32BIT | MAP_HUGETLB | MAP_GROWSDOWN))) {
        void *p = into_hole(len, prot, flags, fd, off);
        if (p)
            return p;
    }
    return mmap_next(addr, len, prot, flags, fd, off);
}

__attribute__((visibility("default"))) void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}
