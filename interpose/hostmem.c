/*
 * Page-locked host memory the program holds: what cuMemHostAlloc,
 * cuMemAllocHost and cuMemHostRegister gave it.  Two questions depend on
 * it.  Is an asynchronous copy's destination pinned?  Into pageable memory
 * CUDA's asynchronous device-to-host copy has completed when the call
 * returns, so the host may read it at once (history.c logs it there).  And
 * is any of it mapped for the device (zero-copy)?  A kernel may then write
 * host memory that the host reads with no copy call, which replay cannot
 * serve: kernel launches taint the log while such memory is live.
 * libckpt's own registrations (the arena) are not the program's and are
 * not here.  A sorted table; lookups are a binary search under a lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "interpose.h"
#include "log.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct range {
    uintptr_t start, end;
    bool mapped;
} *ranges;
static size_t nranges, cap;
int ckpt_host_visible;

/* The index of the first range ending after p. Lock held. */
static size_t lower(uintptr_t p)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].end <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void add(const void *p, size_t size, bool mapped)
{
    if (!ckpt_active || ckpt_self_depth || !size)
        return;
    ckpt_history_poller_changes("allocated pinned host memory");
    pthread_mutex_lock(&lock);
    if (nranges == cap) {
        size_t c = cap ? cap * 2 : 64;
        struct range *r = realloc(ranges, c * sizeof(*r));
        if (!r) {
            pthread_mutex_unlock(&lock);
            ckpt_history_taint("out of host memory to follow the program's pinned memory");
            return;
        }
        ranges = r;
        cap = c;
    }
    size_t i = lower((uintptr_t)p);
    memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof(*ranges));
    ranges[i] = (struct range){(uintptr_t)p, (uintptr_t)p + size, mapped};
    nranges++;
    if (mapped)
        __atomic_add_fetch(&ckpt_host_visible, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
}

static void drop(const void *p)
{
    ckpt_history_poller_changes("freed pinned host memory");
    pthread_mutex_lock(&lock);
    size_t i = lower((uintptr_t)p);
    if (i < nranges && ranges[i].start == (uintptr_t)p) {
        if (ranges[i].mapped)
            __atomic_sub_fetch(&ckpt_host_visible, 1, __ATOMIC_RELAXED);
        memmove(&ranges[i], &ranges[i + 1], (nranges - i - 1) * sizeof(*ranges));
        nranges--;
    }
    pthread_mutex_unlock(&lock);
}

bool ckpt_host_pinned(const void *p, size_t size)
{
    pthread_mutex_lock(&lock);
    size_t i = lower((uintptr_t)p);
    bool in = i < nranges && ranges[i].start <= (uintptr_t)p && (uintptr_t)p + size <= ranges[i].end;
    pthread_mutex_unlock(&lock);
    return in;
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    NEED_REAL(cuMemHostAlloc, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemHostAlloc(pp, bytesize, Flags);
    if (r == CUDA_SUCCESS)
        add(*pp, bytesize, Flags & CU_MEMHOSTALLOC_DEVICEMAP);
    return r;
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    NEED_REAL(cuMemAllocHost_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemAllocHost_v2(pp, bytesize);
    if (r == CUDA_SUCCESS)
        add(*pp, bytesize, false);
    return r;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    NEED_REAL(cuMemFreeHost, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemFreeHost(p);
    if (r == CUDA_SUCCESS)
        drop(p);
    return r;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    NEED_REAL(cuMemHostRegister_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemHostRegister_v2(p, bytesize, Flags);
    if (r == CUDA_SUCCESS)
        add(p, bytesize, Flags & CU_MEMHOSTREGISTER_DEVICEMAP);
    return r;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    NEED_REAL(cuMemHostUnregister, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemHostUnregister(p);
    if (r == CUDA_SUCCESS)
        drop(p);
    return r;
}
