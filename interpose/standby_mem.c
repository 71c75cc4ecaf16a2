/*
 * A standby's device memory: address reservations, no memory.  A standby
 * replays its rank with device work suppressed, so nothing ever reads or
 * writes the program's allocations until it goes live; holding them for
 * real would take as much device memory again as the rank holds, on the
 * rank's own GPU.  So while a process stands by, each allocation the
 * program makes (cuMemAlloc, stream-ordered and pool allocations,
 * ncclMemAlloc) is answered with the address the recorded run got, from
 * the log, held by cuMemAddressReserve at that address: the program sees
 * the same pointers, the driver's address space has them taken, and no
 * physical memory backs them.  At the takeover each reserved range gets
 * memory (cuMemCreate on the device the context is on, cuMemMap,
 * cuMemSetAccess read-write) before the snapshot is copied in.
 *
 * Reservations are whole granules (2 MiB on NVIDIA GPUs).  The driver
 * packs allocations smaller than a granule into 2 MiB pages it shares with
 * its own and the libraries' allocations, so those are made for real, as
 * is any allocation not at a granule's start: the address space the
 * driver sees is then laid out as the rank's was.  (A framework's caching
 * allocator asks for 2 MiB or more: its segments are reserved.)  Stream-
 * ordered allocations are reserved whatever their size: a pool carves
 * them from address space of its own, and where it puts each depends on
 * how far its streams had got, which a takeover cannot reproduce.  The
 * pools then do not hold them, so a program that reads its pools'
 * statistics is refused at the takeover (the cold path restores it); and
 * an allocation and its free, with nothing but stream-ordered memory
 * between them, fold away in the journal (virtual.c), which then does not
 * grow with the job's age.  A range
 * is a run of granules no earlier range covered, released (unmapped, its
 * memory released, its addresses freed) with the last allocation that
 * touches it.  An allocation the log does not have (libraries' own, a run
 * past the log) is made for real, as before.  Managed and pitched memory,
 * graph-owned memory and the program's own virtual-memory calls are made
 * for real too (said in the guide).
 * A free of a reserved allocation after the takeover waits for the
 * stream of a stream-ordered free first: the memory is released at once.
 *
 * While the standby's contexts are virtual (virtual.c) it has no context
 * to reserve in: every allocation, whatever its size, is answered with the
 * recorded address and goes in virtual.c's journal with how it was asked
 * for, as do its frees and the library memory below; the journal, walked at
 * the takeover, makes each here in that order (ckpt_standby_mem_make and
 * _unmake): whole granules reserved, the rest made as the program asked and
 * refused unless at the recorded address.  What the paragraph above says
 * is made for real makes the standby's objects real first.
 *
 * A standby's communicators are virtual (comm.c): NCCL allocates nothing
 * for them until the takeover, where in the rank it took device memory
 * before the program's next allocations.  The rank's log says where (its
 * ASIDE records, on the thread NCCL worked for), and as replay steps over
 * them the standby takes the same: address reservations for whole
 * granules, a real allocation of the same size for a smaller one (the
 * driver packs those into pages it shares, which cannot be reserved), and
 * the ranges NCCL reserved for its cuMem buffers reserved again.
 * The program's next allocations then land where they did.  These
 * placeholders are given back at the takeover, before NCCL makes its
 * buffers for real.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interpose.h"
#include "log.h"
#include "replay.h"

struct range {
    CUdeviceptr base;
    size_t size;
    unsigned refs;
    CUmemGenericAllocationHandle mem; /* 0 until backed */
};

struct held {
    CUdeviceptr addr;
    size_t size;
    bool deferred; /* answered while the standby's objects were virtual: made at the takeover */
    int how;       /* CKPT_SMEM_*: how it was asked for */
    size_t made;   /* deferred: its entry in the journal (virtual.c) */
};

/* A library's memory held in the standby: recorded at, and got. */
struct aside {
    uint64_t thread; /* whose log has it */
    CUdeviceptr recorded, got;
    size_t size;
    bool reserved;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct aside *asides;
static size_t nasides, asides_cap;
static struct range *ranges; /* sorted by base, disjoint */
static size_t nranges, ranges_cap;
static struct held *helds;
static size_t nhelds, helds_cap;
static size_t granule;
static bool standing, backed; /* reserving; and ranges get memory as they are made */
static bool pool_stats;       /* the program read a pool's usage while standing by */
static bool ordered;          /* a stream-ordered allocation was held outside its pool */
static CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                   .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE}};

void ckpt_standby_mem_begin(void)
{
    standing = true;
    ckpt_rlog_on_aside(ckpt_standby_mem_aside);
}

bool ckpt_standby_mem_on(void)
{
    return __atomic_load_n(&standing, __ATOMIC_ACQUIRE);
}

/* Memory and access for one range.  Lock held. */
static CUresult back(struct range *r)
{
    CUresult e = real_cuMemCreate(&r->mem, r->size, &prop, 0);
    if (e != CUDA_SUCCESS) {
        r->mem = 0;
        return e;
    }
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    e = real_cuMemMap(r->base, r->size, 0, r->mem, 0);
    if (e == CUDA_SUCCESS && (e = real_cuMemSetAccess(r->base, r->size, &access, 1)) != CUDA_SUCCESS)
        real_cuMemUnmap(r->base, r->size);
    if (e != CUDA_SUCCESS) {
        real_cuMemRelease(r->mem);
        r->mem = 0;
    }
    return e;
}

/* The range gone: its memory, then its addresses.  Lock held. */
static void release(struct range *r)
{
    if (r->mem) {
        real_cuMemUnmap(r->base, r->size);
        real_cuMemRelease(r->mem);
    }
    real_cuMemAddressFree(r->base, r->size);
}

/* The first range at or after base.  Lock held. */
static size_t first_at(CUdeviceptr base)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].base + ranges[mid].size <= base)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Reserves [base, end) at exactly that address, as range i.  Lock held. */
static CUresult reserve(size_t i, CUdeviceptr base, CUdeviceptr end)
{
    CUdeviceptr got = 0;
    if (!ckpt_grow((void **)&ranges, &ranges_cap, nranges, sizeof(*ranges)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult e = real_cuMemAddressReserve(&got, end - base, granule, base, 0);
    if (e != CUDA_SUCCESS)
        return e;
    if (got != base) {
        real_cuMemAddressFree(got, end - base);
        return CUDA_ERROR_ALREADY_MAPPED;
    }
    memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof(*ranges));
    ranges[i] = (struct range){base, end - base, 0, 0};
    nranges++;
    if (backed && (e = back(&ranges[i])) != CUDA_SUCCESS) {
        real_cuMemAddressFree(base, end - base);
        memmove(&ranges[i], &ranges[i + 1], (--nranges - i) * sizeof(*ranges));
    }
    return e;
}

static CUresult granularity(void)
{
    if (granule)
        return CUDA_SUCCESS;
    if (ckpt_resolve("cuCtxGetDevice") < 0 || ckpt_resolve("cuMemGetAllocationGranularity") < 0 ||
        ckpt_resolve("cuMemAddressReserve") < 0 || ckpt_resolve("cuMemAddressFree") < 0 ||
        ckpt_resolve("cuMemCreate") < 0 || ckpt_resolve("cuMemRelease") < 0 ||
        ckpt_resolve("cuMemSetAccess") < 0 || ckpt_resolve("cuMemMap") < 0 || ckpt_resolve("cuMemUnmap") < 0)
        return CUDA_ERROR_NOT_FOUND;
    CUdevice dev;
    CUresult e = real_cuCtxGetDevice(&dev);
    if (e != CUDA_SUCCESS)
        return e;
    prop.location.id = dev;
    return real_cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

static void aside_release(const struct aside *a)
{
    ckpt_self_depth++;
    if (a->reserved)
        real_cuMemAddressFree(a->got, a->size);
    else
        real_cuMemFree_v2(a->got);
    ckpt_self_depth--;
}

void ckpt_standby_mem_aside(uint64_t thread, const struct ckpt_rl_rec *rec)
{
    if (!ckpt_standby_mem_on() || (ckpt_v_on() && ckpt_v_journal_aside(thread, rec)))
        return;
    pthread_mutex_lock(&lock);
    if (rec->c == CKPT_ASIDE_FREE) {
        for (size_t i = 0; i < nasides; i++)
            if (asides[i].recorded == rec->b) {
                aside_release(&asides[i]);
                asides[i] = asides[--nasides];
                break;
            }
        pthread_mutex_unlock(&lock);
        return;
    }
    struct aside a = {.thread = thread, .recorded = rec->b, .size = rec->a};
    if (granularity() == CUDA_SUCCESS && ckpt_resolve("cuMemAlloc_v2") == 0 && ckpt_resolve("cuMemFree_v2") == 0 &&
        ckpt_grow((void **)&asides, &asides_cap, nasides, sizeof(*asides))) {
        ckpt_self_depth++;
        if (rec->c == CKPT_ASIDE_RESERVE) {
            a.reserved = real_cuMemAddressReserve(&a.got, a.size, 0, a.recorded, 0) == CUDA_SUCCESS;
        } else if (a.size >= granule && a.recorded % granule == 0) {
            a.size = (a.size + granule - 1) / granule * granule;
            a.reserved = real_cuMemAddressReserve(&a.got, a.size, granule, a.recorded, 0) == CUDA_SUCCESS;
        } else if (real_cuMemAlloc_v2(&a.got, a.size) != CUDA_SUCCESS) {
            a.got = 0;
        }
        ckpt_self_depth--;
        if (a.got)
            asides[nasides++] = a;
    }
    pthread_mutex_unlock(&lock);
    if (a.got != a.recorded)
        ckpt_log(CKPT_DEBUG, "the library memory the rank got at 0x%llx (%zu bytes) is at 0x%llx in the standby",
                 (unsigned long long)a.recorded, a.size, (unsigned long long)a.got);
}

/* Takes every granule of [addr, addr + size) that no range covers yet,
 * and a reference on each range the allocation touches.  Lock held. */
static CUresult hold(CUdeviceptr addr, size_t size)
{
    CUdeviceptr lo = addr & ~(CUdeviceptr)(granule - 1);
    CUdeviceptr hi = (addr + size + granule - 1) & ~(CUdeviceptr)(granule - 1);
    size_t i = first_at(lo), first = i;
    for (CUdeviceptr at = lo; at < hi;) {
        if (i < nranges && ranges[i].base <= at) {
            at = ranges[i].base + ranges[i].size;
            i++;
            continue;
        }
        CUdeviceptr end = i < nranges && ranges[i].base < hi ? ranges[i].base : hi;
        CUresult e = reserve(i, at, end);
        if (e != CUDA_SUCCESS) {
            /* Undo the ranges this call made (none has a reference yet). */
            for (size_t k = first; k < i;) {
                if (ranges[k].refs) {
                    k++;
                    continue;
                }
                release(&ranges[k]);
                memmove(&ranges[k], &ranges[k + 1], (--nranges - k) * sizeof(*ranges));
                i--;
            }
            return e;
        }
        at = end;
        i++;
    }
    for (size_t k = first; k < nranges && ranges[k].base < hi; k++)
        ranges[k].refs++;
    return CUDA_SUCCESS;
}

/* Drops the allocation's references; a range no allocation touches goes.  Lock held. */
static void unhold(CUdeviceptr addr, size_t size)
{
    CUdeviceptr lo = addr & ~(CUdeviceptr)(granule - 1);
    CUdeviceptr hi = (addr + size + granule - 1) & ~(CUdeviceptr)(granule - 1);
    for (size_t k = first_at(lo); k < nranges && ranges[k].base < hi;) {
        if (--ranges[k].refs) {
            k++;
            continue;
        }
        release(&ranges[k]);
        memmove(&ranges[k], &ranges[k + 1], (--nranges - k) * sizeof(*ranges));
    }
}

/* Kept in helds.  Lock held. */
static CUresult keep(CUdeviceptr addr, size_t size, bool deferred, int how, size_t made)
{
    if (!ckpt_grow((void **)&helds, &helds_cap, nhelds, sizeof(*helds)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    helds[nhelds] = (struct held){addr, size, deferred, how, made};
    ordered |= how == CKPT_SMEM_ASYNC || how == CKPT_SMEM_POOL;
    __atomic_store_n(&nhelds, nhelds + 1, __ATOMIC_RELEASE); /* read unlocked by ckpt_standby_mem_free */
    return CUDA_SUCCESS;
}

/* The standby's objects are virtual (virtual.c): any allocation is
 * answered with its address, and made in the journal's order at the
 * takeover.  One the log does not have needs a real context. */
static bool deferred_alloc(CUresult *r, CUdeviceptr *dptr, size_t size, uint64_t addr, int how, CUstream s, void *pool)
{
    if (!addr) {
        ckpt_v_promote("an allocation the rank's log does not have");
        return false;
    }
    if (!ckpt_v_lock())
        return false;
    size_t made = ckpt_v_journal_alloc(how, addr, size, s, pool);
    pthread_mutex_lock(&lock);
    CUresult e = keep(addr, size, true, how, made);
    pthread_mutex_unlock(&lock);
    ckpt_v_unlock();
    if (e != CUDA_SUCCESS)
        ckpt_refuse("out of host memory for the standby's allocations");
    *dptr = addr;
    *r = CUDA_SUCCESS;
    return true;
}

/* Does the standby hold an allocation by reserving its addresses (the
 * granules around it), rather than make it the way the program asked?
 * Whole granules at a granule's start; and every stream-ordered one,
 * whatever its size: a pool carves those from address space of its own,
 * shared with nothing else, and where it puts each depends on how far its
 * streams had got, which nothing at the takeover reproduces.  Lock held,
 * granule known. */
static bool reserved_kind(int how, CUdeviceptr addr, size_t size)
{
    return how == CKPT_SMEM_ASYNC || how == CKPT_SMEM_POOL || (size >= granule && addr % granule == 0);
}

bool ckpt_standby_mem_alloc(CUresult *r, CUdeviceptr *dptr, size_t size, int how, CUstream s, void *pool)
{
    if (!ckpt_standby_mem_on() || !dptr || !size)
        return false;
    /* First: the recorded address, past the library memory before it. */
    uint64_t addr = ckpt_history_alloc_at();
    if (ckpt_v_on() && deferred_alloc(r, dptr, size, addr, how, s, pool))
        return true;
    pthread_mutex_lock(&lock);
    CUresult e = granularity();
    bool reserved = e == CUDA_SUCCESS && addr && reserved_kind(how, addr, size);
    pthread_mutex_unlock(&lock);
    if (!reserved)
        return false; /* packed into pages the driver shares: made for real */
    pthread_mutex_lock(&lock);
    e = hold(addr, size);
    if (e == CUDA_SUCCESS && (e = keep(addr, size, false, how, 0)) != CUDA_SUCCESS)
        unhold(addr, size);
    pthread_mutex_unlock(&lock);
    if (e != CUDA_SUCCESS)
        ckpt_refuse("the standby cannot reserve the addresses of the rank's allocation at 0x%llx (%zu bytes): "
                    "CUDA error %d%s", (unsigned long long)addr, size, (int)e,
                    e == CUDA_ERROR_ALREADY_MAPPED ? " (the driver has them in use)" : "");
    *dptr = addr;
    *r = CUDA_SUCCESS;
    return true;
}

bool ckpt_standby_mem_free(CUresult *r, CUdeviceptr p, CUstream stream, bool ordered)
{
    if (!__atomic_load_n(&nhelds, __ATOMIC_ACQUIRE))
        return false;
    bool virtual = ckpt_v_on() && ckpt_v_lock(); /* the journal's order is the lock's */
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < nhelds && helds[i].addr != p)
        i++;
    if (i == nhelds) {
        pthread_mutex_unlock(&lock);
        if (virtual)
            ckpt_v_unlock();
        return false;
    }
    struct held h = helds[i];
    helds[i] = helds[nhelds - 1];
    __atomic_store_n(&nhelds, nhelds - 1, __ATOMIC_RELEASE);
    bool wait = ordered && backed;
    pthread_mutex_unlock(&lock);
    if (h.deferred) { /* still virtual: freed in the journal */
        ckpt_v_journal_free(h.how | (ordered ? CKPT_SMEM_ORDERED : 0), h.addr, h.size, stream, h.made);
        ckpt_v_unlock();
        *r = CUDA_SUCCESS;
        return true;
    }
    if (virtual)
        ckpt_v_unlock();
    /* Work queued before a stream-ordered free may still use the memory. */
    *r = wait ? real_cuStreamSynchronize((CUstream)ckpt_v_peek(stream)) : CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    unhold(h.addr, h.size);
    pthread_mutex_unlock(&lock);
    return true;
}

/* NCCL makes what it is asked for its own way (cuMem granules, or
 * cuMemAlloc), as it did in the rank. */
static CUresult nccl_alloc(CUdeviceptr *got, size_t size)
{
    void *p = NULL;
    ckpt_nccl_depth++;
    ckpt_self_depth++;
    ncclResult_t r = real_ncclMemAlloc(&p, size);
    ckpt_self_depth--;
    ckpt_nccl_depth--;
    *got = (CUdeviceptr)(uintptr_t)p;
    return r == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}


void ckpt_standby_mem_make(int how, uint64_t addr, uint64_t size, CUstream s, void *pool)
{
    CUdeviceptr got = 0;
    pthread_mutex_lock(&lock);
    CUresult e = granularity();
    size_t i = 0;
    while (i < nhelds && !(helds[i].deferred && helds[i].addr == addr))
        i++;
    if (e == CUDA_SUCCESS && reserved_kind(how, addr, size)) {
        if ((e = hold(addr, size)) == CUDA_SUCCESS && i < nhelds)
            helds[i].deferred = false;
        got = addr;
    } else if (e == CUDA_SUCCESS) {
        if (i < nhelds) {
            helds[i] = helds[nhelds - 1];
            __atomic_store_n(&nhelds, nhelds - 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&lock);
        const char *name = how == CKPT_SMEM_ASYNC  ? "cuMemAllocAsync"
                           : how == CKPT_SMEM_POOL ? "cuMemAllocFromPoolAsync"
                           : how == CKPT_SMEM_NCCL ? "ncclMemAlloc"
                                                   : "cuMemAlloc_v2";
        e = ckpt_resolve(name) < 0 ? CUDA_ERROR_NOT_FOUND
            : how == CKPT_SMEM_NCCL  ? nccl_alloc(&got, size)
            : how == CKPT_SMEM_ASYNC   ? real_cuMemAllocAsync(&got, size, s)
            : how == CKPT_SMEM_POOL  ? real_cuMemAllocFromPoolAsync(&got, size, (CUmemoryPool)pool, s)
                                     : real_cuMemAlloc_v2(&got, size);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    if (e != CUDA_SUCCESS)
        ckpt_refuse("the standby cannot make the rank's allocation at 0x%llx (%llu bytes): CUDA error %d%s",
                    (unsigned long long)addr, (unsigned long long)size, (int)e,
                    e == CUDA_ERROR_ALREADY_MAPPED ? " (the driver has its addresses in use)" : "");
    if (got != addr)
        ckpt_refuse("the standby's allocation of %llu bytes is at 0x%llx, where the rank's was at 0x%llx: the "
                    "device's address space is not laid out as the rank's was", (unsigned long long)size,
                    (unsigned long long)got, (unsigned long long)addr);
}

void ckpt_standby_mem_unmake(int how, uint64_t addr, uint64_t size, CUstream s)
{
    bool ordered = how & CKPT_SMEM_ORDERED;
    how &= ~CKPT_SMEM_ORDERED;
    pthread_mutex_lock(&lock);
    bool reserved = granularity() == CUDA_SUCCESS && reserved_kind(how, addr, size);
    if (reserved)
        unhold(addr, size);
    pthread_mutex_unlock(&lock);
    bool freed = reserved;
    if (!reserved && how == CKPT_SMEM_NCCL) {
        ckpt_nccl_depth++;
        ckpt_self_depth++;
        freed = ckpt_resolve("ncclMemFree") == 0 && real_ncclMemFree((void *)(uintptr_t)addr) == ncclSuccess;
        ckpt_self_depth--;
        ckpt_nccl_depth--;
    } else if (!reserved) {
        freed = ckpt_resolve(ordered ? "cuMemFreeAsync" : "cuMemFree_v2") == 0 &&
                (ordered ? real_cuMemFreeAsync(addr, s) : real_cuMemFree_v2(addr)) == CUDA_SUCCESS;
    }
    if (!freed)
        ckpt_refuse("the standby cannot free the rank's allocation at 0x%llx again", (unsigned long long)addr);
}

void ckpt_standby_mem_pool_stats(void)
{
    if (ckpt_standby_mem_on())
        __atomic_store_n(&pool_stats, true, __ATOMIC_RELEASE);
}

int ckpt_standby_mem_back(char *why, size_t whylen)
{
    double bytes = 0;
    int rc = 0;
    pthread_mutex_lock(&lock);
    if (__atomic_load_n(&pool_stats, __ATOMIC_ACQUIRE) && ordered) {
        snprintf(why, whylen, "the program reads its memory pools' statistics (cuMemPoolGetAttribute), and the "
                 "standby held its stream-ordered memory outside the pools (by reserving its addresses): after a "
                 "takeover they would not be its rank's");
        pthread_mutex_unlock(&lock);
        return -1;
    }
    __atomic_store_n(&standing, false, __ATOMIC_RELEASE);
    backed = true;
    for (size_t i = 0; i < nasides; i++)
        aside_release(&asides[i]); /* NCCL makes its own now (said in the log once live) */
    for (size_t i = 0; i < nranges && !rc; i++) {
        CUresult e = ranges[i].mem ? CUDA_SUCCESS : back(&ranges[i]);
        if (e != CUDA_SUCCESS) {
            snprintf(why, whylen, "cannot give the standby's reserved range at 0x%llx (%zu bytes) device memory: "
                     "CUDA error %d%s", (unsigned long long)ranges[i].base, ranges[i].size, (int)e,
                     e == CUDA_ERROR_OUT_OF_MEMORY ? " (out of device memory)" : "");
            rc = -1;
        }
        bytes += (double)ranges[i].size;
    }
    size_t n = nranges;
    pthread_mutex_unlock(&lock);
    if (!rc && n)
        ckpt_log(CKPT_INFO, "device memory for the takeover: %zu ranges, %.1f MiB", n, bytes / (1 << 20));
    return rc;
}

/* The log goes on from the takeover: a standby that replays it later gives
 * back what this one held here too. */
void ckpt_standby_mem_live(void)
{
    pthread_mutex_lock(&lock);
    struct aside *gone = asides;
    size_t n = nasides;
    asides = NULL;
    nasides = asides_cap = 0;
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < n; i++) /* unlocked: the log's locks come before this one */
        ckpt_history_aside(gone[i].thread, CKPT_ASIDE_FREE, gone[i].recorded, 0);
    free(gone);
}
