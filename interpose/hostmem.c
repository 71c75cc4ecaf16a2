/*
 * Page-locked host memory the program holds: what cuMemHostAlloc,
 * cuMemAllocHost and cuMemHostRegister gave it.  Two questions depend on
 * it.  Is an asynchronous copy's destination pinned?  Into pageable memory
 * CUDA's asynchronous device-to-host copy has completed when the call
 * returns, so the host may read it at once (history.c logs it there).  And
 * can a kernel reach it?  Under unified addressing every pinned buffer is
 * device-accessible, mapped or not (the runtime's cudaMallocHost is a
 * cuMemHostAlloc), and so is managed memory, which the table also holds.
 * A kernel may then write host memory that the host reads with no copy
 * call, which replay cannot serve.  The rule is a heuristic: a launch
 * whose parameters carry a pointer into such memory the program holds
 * taints the log (ckpt_launch_reaches_host); a pointer the kernel finds in
 * device memory is not seen.  Libraries' own buffers (NCCL's mapped flags
 * and FIFOs) are theirs, not the program's: held, never counted.
 * libckpt's own registrations (the arena) are not here either.  A sorted
 * table; lookups are a binary search under a lock.
 *
 * A standby pins nothing until it takes over: while it stands by, the
 * program's pinned allocations are ordinary pages (mmap) and its
 * registrations are only written down; at the takeover each is registered
 * with the flags the program asked for (cuMemHostRegister: portable,
 * mapped), and a free after that unregisters it first.  Write-combined
 * memory cannot be made by registering, so it is allocated for real (a
 * standby whose context is still virtual makes it real first: virtual.c).
 * While standing by the driver does not know these pages: a program that
 * asks it about them (cuMemHostGetDevicePointer, cuMemHostGetFlags) gets
 * an error where the rank got an answer, and its standby diverges.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <unistd.h>

#include "interpose.h"
#include "log.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct range {
    uintptr_t start, end;
    bool mapped;        /* asked for with DEVICEMAP (named so when it taints) */
    bool managed;       /* managed memory: reachable, but not pinned */
    bool internal;      /* a library's own (NCCL's): never taints */
    bool later;         /* a standby's: registered at takeover, with flags */
    bool ours;          /* a standby's allocation: pages libckpt mapped */
    unsigned int flags; /* cuMemHostRegister's */
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

static void add_range(struct range r)
{
    const void *p = (const void *)r.start;
    size_t size = r.end - r.start;
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
    ranges[i] = r;
    nranges++;
    if (!r.internal)
        __atomic_add_fetch(&ckpt_host_visible, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
}

static void add(const void *caller, const void *p, size_t size, bool mapped)
{
    add_range((struct range){.start = (uintptr_t)p, .end = (uintptr_t)p + size, .mapped = mapped,
                             .internal = ckpt_internal_call(caller)});
}

static void drop(const void *p)
{
    ckpt_history_poller_changes("freed pinned host memory");
    pthread_mutex_lock(&lock);
    size_t i = lower((uintptr_t)p);
    if (i < nranges && ranges[i].start == (uintptr_t)p) {
        if (!ranges[i].internal)
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
    bool in = i < nranges && ranges[i].start <= (uintptr_t)p && (uintptr_t)p + size <= ranges[i].end &&
              !ranges[i].managed;
    pthread_mutex_unlock(&lock);
    return in;
}

void ckpt_host_managed(const void *caller, uint64_t addr, uint64_t size, bool allocated)
{
    if (!allocated)
        drop((const void *)(uintptr_t)addr);
    else
        add_range((struct range){.start = addr, .end = addr + size, .managed = true,
                                 .internal = ckpt_internal_call(caller)});
}

/* While a standby stands by, the program's pinned memory waits for the
 * takeover: its range, or none (found: false). */
static bool standing(const void *caller)
{
    return ckpt_active && !ckpt_self_depth && ckpt_standby_mem_on() && !ckpt_internal_call(caller);
}

static struct range find(const void *p, bool *found)
{
    struct range r = {0};
    pthread_mutex_lock(&lock);
    size_t i = lower((uintptr_t)p);
    *found = i < nranges && ranges[i].start == (uintptr_t)p;
    if (*found)
        r = ranges[i];
    pthread_mutex_unlock(&lock);
    return r;
}

static size_t page_span(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) & ~(page - 1);
}

/* A standby's allocation: ordinary pages, registered at takeover. */
static CUresult standby_alloc(void **pp, size_t bytesize, unsigned int flags)
{
    if (!pp || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, page_span(bytesize), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = p;
    add_range((struct range){.start = (uintptr_t)p, .end = (uintptr_t)p + bytesize,
                             .mapped = flags & CU_MEMHOSTREGISTER_DEVICEMAP, .later = true, .ours = true, .flags = flags});
    return CUDA_SUCCESS;
}

/* cuMemHostAlloc's PORTABLE and DEVICEMAP are cuMemHostRegister's. */
#define HOSTALLOC_AS_REGISTER (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    NEED_REAL(cuMemHostAlloc, CUDA_ERROR_NOT_INITIALIZED);
    if (!(Flags & ~HOSTALLOC_AS_REGISTER) && standing(__builtin_return_address(0)))
        return standby_alloc(pp, bytesize, Flags);
    ckpt_v_promote("cuMemHostAlloc"); /* write-combined, or a library's: pinned for real */
    CUresult r = real_cuMemHostAlloc(pp, bytesize, Flags);
    if (r == CUDA_SUCCESS)
        add(__builtin_return_address(0), *pp, bytesize, Flags & CU_MEMHOSTALLOC_DEVICEMAP);
    return r;
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    NEED_REAL(cuMemAllocHost_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (standing(__builtin_return_address(0)))
        return standby_alloc(pp, bytesize, 0);
    ckpt_v_promote("cuMemAllocHost_v2");
    CUresult r = real_cuMemAllocHost_v2(pp, bytesize);
    if (r == CUDA_SUCCESS)
        add(__builtin_return_address(0), *pp, bytesize, false);
    return r;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    NEED_REAL(cuMemFreeHost, CUDA_ERROR_NOT_INITIALIZED);
    bool found;
    struct range r = find(p, &found);
    if (found && r.ours) {
        CUresult e = r.later ? CUDA_SUCCESS : real_cuMemHostUnregister(p);
        if (e != CUDA_SUCCESS)
            return e;
        drop(p);
        munmap(p, page_span(r.end - r.start));
        return CUDA_SUCCESS;
    }
    CUresult e = real_cuMemFreeHost(p);
    if (e == CUDA_SUCCESS)
        drop(p);
    return e;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    NEED_REAL(cuMemHostRegister_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (p && bytesize && standing(__builtin_return_address(0))) {
        if (ckpt_host_pinned(p, 1) || ckpt_host_pinned((const char *)p + bytesize - 1, 1))
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        add_range((struct range){.start = (uintptr_t)p, .end = (uintptr_t)p + bytesize,
                                 .mapped = Flags & CU_MEMHOSTREGISTER_DEVICEMAP, .later = true, .flags = Flags});
        return CUDA_SUCCESS;
    }
    CUresult r = real_cuMemHostRegister_v2(p, bytesize, Flags);
    if (r == CUDA_SUCCESS)
        add(__builtin_return_address(0), p, bytesize, Flags & CU_MEMHOSTREGISTER_DEVICEMAP);
    return r;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    NEED_REAL(cuMemHostUnregister, CUDA_ERROR_NOT_INITIALIZED);
    bool found;
    struct range r = find(p, &found);
    if (found && r.later && !r.ours) {
        drop(p);
        return CUDA_SUCCESS;
    }
    CUresult e = real_cuMemHostUnregister(p);
    if (e == CUDA_SUCCESS)
        drop(p);
    return e;
}

int ckpt_standby_host_back(char *why, size_t whylen)
{
    size_t n = 0;
    double bytes = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nranges; i++) {
        if (!ranges[i].later)
            continue;
        size_t len = ranges[i].end - ranges[i].start;
        CUresult e = real_cuMemHostRegister_v2((void *)ranges[i].start, len, ranges[i].flags);
        if (e != CUDA_SUCCESS) {
            pthread_mutex_unlock(&lock);
            snprintf(why, whylen, "cannot pin the program's host buffer at %p (%zu bytes) at the takeover: CUDA "
                     "error %d%s", (void *)ranges[i].start, len, (int)e,
                     e == CUDA_ERROR_OUT_OF_MEMORY ? " (RLIMIT_MEMLOCK or host memory)" : "");
            return -1;
        }
        ranges[i].later = false;
        n++;
        bytes += (double)len;
    }
    pthread_mutex_unlock(&lock);
    if (n)
        ckpt_log(CKPT_INFO, "host memory pinned for the takeover: %zu buffers, %.1f MiB", n, bytes / (1 << 20));
    return 0;
}

/* ---- kernels passed a pointer into host memory the program holds */

/* The range holding @a (lock held), or NULL. */
static const struct range *holding(uintptr_t a)
{
    size_t i = lower(a);
    return i < nranges && ranges[i].start <= a ? &ranges[i] : NULL;
}

/* A parameter word pointing into the program's pinned or managed memory
 * stops the scan, the range in *hit. Lock held. */
static bool reaches(uint64_t w, void *hit)
{
    const struct range *r = holding((uintptr_t)w);
    if (!r || r->internal)
        return false;
    *(struct range *)hit = *r;
    return true;
}

bool ckpt_launch_reaches_host(CUfunction f, void **params, void **extra, char *why, size_t whylen)
{
    struct range hit = {0};
    CUresult asked[2] = {CUDA_SUCCESS, CUDA_SUCCESS};
    pthread_mutex_lock(&lock);
    int scan = ckpt_launch_scan(f, params, extra, reaches, &hit, asked);
    pthread_mutex_unlock(&lock);
    bool reach = scan > 0, unknown = scan < 0;
    if (reach)
        snprintf(why, whylen, "a kernel was passed a pointer into %s (%p, %zu bytes), which the kernel may write and "
                 "the host read without a copy call that replay could serve",
                 hit.managed ? "managed memory"
                 : hit.mapped ? "pinned host memory mapped for the device (zero-copy)"
                              : "pinned host memory (under unified addressing a kernel can write it: zero-copy)",
                 (void *)hit.start, (size_t)(hit.end - hit.start));
    else if (unknown)
        snprintf(why, whylen, "a kernel whose parameters the driver cannot describe (cuFuncGetParamInfo: CUDA error %d, "
                 "cuKernelGetParamInfo: %d) ran while the program holds managed or pinned host memory, which a "
                 "kernel may write and the host read without a copy call that replay could serve",
                 (int)asked[0], (int)asked[1]);
    return reach || unknown;
}
