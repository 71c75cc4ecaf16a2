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
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
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

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t lo, hi; /* what is left of the hole: [lo, hi) */
static __thread bool starting; /* this thread is in the driver's start */

void ckpt_addrspace_hold(void)
{
#ifndef HOLD_NOTHING
    void *p = mmap(NULL, HOLE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        ckpt_log(CKPT_DEBUG, "no room held for the driver (%zu GiB of address space: %s)", HOLE >> 30,
                 strerror(errno));
        return;
    }
    lo = (uintptr_t)p;
    hi = lo + HOLE;
#endif
}

void ckpt_addrspace_driver_starts(void)
{
    pthread_mutex_lock(&lock);
    starting = hi > lo;
    pthread_mutex_unlock(&lock);
}

void ckpt_addrspace_driver_started(bool made)
{
    if (!starting)
        return;
    starting = false;
    if (!made)
        return;
    pthread_mutex_lock(&lock);
    if (hi > lo)
        munmap((void *)lo, hi - lo);
    lo = hi = 0;
    pthread_mutex_unlock(&lock);
}

/* The next mmap (libc's, or a sanitizer's before it); the system call
 * itself if there is none. */
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
    void *p = NULL;
    len = (len + page - 1) & ~(page - 1);
    pthread_mutex_lock(&lock);
    if (len && hi - lo >= len) {
        p = mmap_next((void *)(hi - len), len, prot, flags | MAP_FIXED, fd, off);
        if (p == MAP_FAILED)
            p = NULL;
        else
            hi -= len;
    }
    pthread_mutex_unlock(&lock);
    return p;
}

__attribute__((visibility("default"))) void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (starting && !addr && !(flags & (MAP_FIXED | MAP_FIXED_NOREPLACE))) {
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
