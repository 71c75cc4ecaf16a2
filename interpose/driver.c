/*
 * Wrappers of the CUDA driver API: the source of truth for device
 * allocations, whichever way the program reached the driver.  Each wrapper
 * calls the real function first and records only what succeeded; it must
 * never change what the program sees, and a failure inside libckpt only
 * costs the registry an entry, reported once.  A per-thread default
 * stream variant (_ptsz) does what its plain call does, its NULL stream
 * being the calling thread's CU_STREAM_PER_THREAD.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "boundary.h"
#include "interpose.h"
#include "log.h"
#include "registry.h"

__thread int ckpt_rt_depth;
__thread int ckpt_nccl_depth;
__thread int ckpt_self_depth;

void ckpt_track(const void *caller, uint64_t p, uint64_t size, enum ckpt_alloc_kind kind, CUstream stream)
{
    if (!ckpt_active || ckpt_self_depth)
        return;
    bool internal = ckpt_internal_call(caller);
    /* Replaying, a thread past its point at the snapshot allocates for the
     * resumed run: counted once the restore went live, not in it. */
    if (__builtin_expect(ckpt_is_replaying(), 0) && !internal)
        ckpt_history_dry_wait();
    uint64_t ordinal = internal ? 0 : ckpt_thread_ordinal(false);
    int rc = ckpt_reg_add(p, size, kind, (uint64_t)(uintptr_t)stream, internal, ordinal);
    if (rc == 0 && !internal) {
        ckpt_thread_ordinal(true);
        ckpt_history_alloc(ordinal, size, p);
    } else if (rc == 0 && kind == CKPT_ALLOC_PLAIN) {
        ckpt_history_aside(ckpt_thread_owner(), CKPT_ASIDE_ALLOC, p, size); /* a library's, for a program thread */
    }
    if (rc == 0) {
        ckpt_hookstat(CKPT_HS_ALLOC, caller, internal);
        if (kind == CKPT_ALLOC_VMM)
            ckpt_hookstat_vmm(size, internal);
    }
    if (rc < 0 && rc != -EEXIST)
        ckpt_log_once(CKPT_WARN, "cannot track a device allocation (%s); checkpoints are incomplete",
                      rc == -ENOMEM ? "out of host memory" : "registry error");
}

#define track(...) ckpt_track(__builtin_return_address(0), __VA_ARGS__)

/* A standby answers the program's allocations with address reservations
 * (standby_mem.c); a library's are made for real.  True when it answered. */
static bool standby_alloc(const void *caller, CUresult *r, CUdeviceptr *dptr, size_t size, int how, CUstream s,
                          void *pool)
{
    return ckpt_active && !ckpt_self_depth && ckpt_standby_mem_on() && !ckpt_internal_call(caller) &&
           ckpt_standby_mem_alloc(r, dptr, size, how, s, pool);
}

/* A free is device work for replay's count (ckpt_history_work): a thread
 * past its point at the snapshot frees nothing until the restore (the
 * allocation was live at the snapshot). */
static void before_untrack(void)
{
    ckpt_history_work();
    ckpt_history_poller_changes("freed device memory");
}

static void untrack(CUdeviceptr p)
{
    if (ckpt_active)
        ckpt_reg_remove(p);
}

__attribute__((visibility("default"))) CUresult cuInit(unsigned int Flags)
{
    NEED_REAL(cuInit, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_addrspace_driver_starts(); /* its ranges go where room was held for them */
    CUresult r = real_cuInit(Flags);
    ckpt_addrspace_driver_started(false);
    if (r == CUDA_SUCCESS)
        ckpt_wake();
    return r;
}

/* The driver maps its address ranges by the first context at the latest.
 * A standby's contexts are virtual until it takes over (virtual.c). */
__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    NEED_REAL(cuDevicePrimaryCtxRetain, CUDA_ERROR_NOT_INITIALIZED);
    CUresult v;
    if (ckpt_v_on() && ckpt_v_primary_retain(&v, pctx, dev))
        return v;
    ckpt_addrspace_driver_starts();
    CUresult r = real_cuDevicePrimaryCtxRetain(pctx, dev);
    ckpt_addrspace_driver_started(r == CUDA_SUCCESS);
    return r;
}

__attribute__((visibility("default"))) CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    NEED_REAL(cuCtxCreate_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult v;
    if (ckpt_v_on() && ckpt_v_ctx_create(&v, pctx, flags, dev, false))
        return v;
    ckpt_addrspace_driver_starts();
    CUresult r = real_cuCtxCreate_v2(pctx, flags, dev);
    ckpt_addrspace_driver_started(r == CUDA_SUCCESS);
    return r;
}

__attribute__((visibility("default"))) CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                                               unsigned int flags, CUdevice dev)
{
    NEED_REAL(cuCtxCreate_v4, CUDA_ERROR_NOT_INITIALIZED);
    CUresult v;
    if (params) /* execution affinity, a CIG context: not kept virtually */
        ckpt_v_promote("cuCtxCreate_v4 with parameters");
    else if (ckpt_v_on() && ckpt_v_ctx_create(&v, pctx, flags, dev, true))
        return v;
    ckpt_addrspace_driver_starts();
    CUresult r = real_cuCtxCreate_v4(pctx, params, flags, dev);
    ckpt_addrspace_driver_started(r == CUDA_SUCCESS);
    return r;
}

/* ---- device variables.  What NVIDIA's runtime finds of a module's
 * __device__ and __managed__ variables when it loads the module (or a
 * program asks for itself) is device state like any allocation: tracked,
 * snapshotted and restored under an ordinal of the thread that asked
 * first (asking again finds the same variable), and untracked when its
 * module or library is unloaded. */
static pthread_mutex_t vars_lock = PTHREAD_MUTEX_INITIALIZER;
static struct var {
    const void *owner;
    CUdeviceptr addr;
} *vars;
static size_t nvars, vars_cap;

/* A standby with no context answers from the log (no driver call). */
static bool standing_by(void)
{
    return ckpt_v_on() && ckpt_is_replaying() && ckpt_observed();
}

/* Where a variable is, and its size, are what the host reads: recorded,
 * then served.  A restarted rank that finds it elsewhere cannot restore
 * (its program would keep the recorded address); a standby's is made at
 * its takeover where the journal has it.  r and the failure code, when
 * the recorded run's call failed, are logged too. */
static CUresult logged(CUresult r, CUdeviceptr *addr, size_t *size, const void *owner, const char *vname,
                       bool managed)
{
    if (!ckpt_observed())
        return r;
    bool virtual = standing_by();
    uint64_t a = r == CUDA_SUCCESS ? *addr : UINT64_MAX, b = r == CUDA_SUCCESS ? *size : (uint64_t)r;
    uint64_t was_a = a, was_b = b;
    ckpt_history_value(CKPT_VALUE_VARIABLE, &a);
    ckpt_history_value(CKPT_VALUE_VARIABLE_SIZE, &b);
    if (!virtual && (a != was_a || b != was_b))
        ckpt_refuse("the program's device variable %s is at 0x%llx (%llu bytes), where the recorded run had it at "
                    "0x%llx (%llu bytes)", vname ? vname : "?", (unsigned long long)was_a, (unsigned long long)was_b,
                    (unsigned long long)a, (unsigned long long)b);
    if (a == UINT64_MAX)
        return virtual ? (CUresult)b : r;
    *addr = a;
    *size = b;
    if (virtual && !ckpt_v_journal_variable((CUlibrary)owner, vname, managed, a))
        ckpt_variable_make((CUlibrary)owner, vname, managed, a); /* made real meanwhile */
    return CUDA_SUCCESS;
}

static CUresult variable(CUresult r, const void *caller, const void *owner, CUdeviceptr addr, size_t size,
                         enum ckpt_alloc_kind kind)
{
    if (r != CUDA_SUCCESS || !addr || !size || !ckpt_active)
        return r;
    pthread_mutex_lock(&vars_lock);
    size_t i = 0;
    while (i < nvars && vars[i].addr != addr)
        i++;
    if (i == nvars) {
        if (nvars == vars_cap) {
            size_t cap = vars_cap ? vars_cap * 2 : 64;
            struct var *v = realloc(vars, cap * sizeof(*v));
            if (!v) {
                pthread_mutex_unlock(&vars_lock);
                ckpt_history_taint("out of host memory to follow the program's device variables");
                return r;
            }
            vars = v;
            vars_cap = cap;
        }
        vars[nvars++] = (struct var){owner, addr};
    }
    pthread_mutex_unlock(&vars_lock);
    ckpt_track(caller, addr, size, kind, NULL); /* asked again: already tracked */
    return r;
}

/* The variables of owner go with it. */
static void variables_gone(const void *owner)
{
    pthread_mutex_lock(&vars_lock);
    for (size_t i = 0; i < nvars;) {
        if (vars[i].owner != owner) {
            i++;
            continue;
        }
        untrack(vars[i].addr);
        vars[i] = vars[--nvars];
    }
    pthread_mutex_unlock(&vars_lock);
}

#define GET_VARIABLE(name, handle_t, kind)                                                                     \
    __attribute__((visibility("default"))) CUresult name(CUdeviceptr *dptr, size_t *bytes, handle_t h,         \
                                                         const char *vname)                                     \
    {                                                                                                          \
        size_t size = 0;                                                                                       \
        CUdeviceptr addr = 0;                                                                                  \
        NEED_REAL(name, CUDA_ERROR_NOT_FOUND);                                                                 \
        CUresult r = standing_by() ? CUDA_SUCCESS : real_##name(&addr, &size, h, vname);                       \
        r = logged(r, &addr, &size, (const void *)h, vname, kind == CKPT_ALLOC_MANAGED);                       \
        if (r == CUDA_SUCCESS && dptr)                                                                         \
            *dptr = addr;                                                                                      \
        if (r == CUDA_SUCCESS && bytes)                                                                        \
            *bytes = size;                                                                                     \
        return variable(r, __builtin_return_address(0), h, addr, size, kind);                                  \
    }
GET_VARIABLE(cuModuleGetGlobal_v2, CUmodule, CKPT_ALLOC_GLOBAL)
GET_VARIABLE(cuLibraryGetGlobal, CUlibrary, CKPT_ALLOC_GLOBAL)
GET_VARIABLE(cuLibraryGetManaged, CUlibrary, CKPT_ALLOC_MANAGED)

/* The standby makes a library's variable in its real context, where the
 * journal has it (virtual.c): at the recorded address, or it cannot take
 * over. */
void ckpt_variable_make(CUlibrary lib, const char *vname, bool managed, uint64_t recorded)
{
    CUdeviceptr addr = 0;
    size_t size;
    const char *fn = managed ? "cuLibraryGetManaged" : "cuLibraryGetGlobal";
    if (ckpt_resolve(fn) < 0)
        ckpt_refuse("the driver lacks %s, which a standby needs to take over", fn);
    CUresult r = managed ? real_cuLibraryGetManaged(&addr, &size, lib, vname)
                         : real_cuLibraryGetGlobal(&addr, &size, lib, vname);
    if (r != CUDA_SUCCESS || addr != recorded)
        ckpt_refuse("the standby cannot make the library's variable %s where its rank had it (0x%llx): %s 0x%llx "
                    "(CUDA error %d)", vname, (unsigned long long)recorded, r ? "not made" : "made at",
                    (unsigned long long)addr, (int)r);
}

#define UNLOAD(name, handle_t)                                                                                 \
    __attribute__((visibility("default"))) CUresult name(handle_t h)                                           \
    {                                                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_FOUND);                                                                 \
        before_untrack();                                                                                      \
        if (ckpt_active)                                                                                       \
            ckpt_before_free(NULL, false);                                                                     \
        CUresult r = real_##name(h);                                                                           \
        if (r == CUDA_SUCCESS && ckpt_active)                                                                  \
            variables_gone(h);                                                                                 \
        return r;                                                                                              \
    }
UNLOAD(cuModuleUnload, CUmodule)
UNLOAD(cuLibraryUnload, CUlibrary)

/* The runtime's own plumbing.  NVIDIA's runtime (shared, or linked into
 * the program or into a library such as cuBLAS) asks for the driver's
 * private tables while it starts, then does its device work through the
 * entry points it resolved with cuGetProcAddress, which libckpt hooks; a
 * call before the first boundary is taken as that start.  One after it is
 * not what a runtime does while it merely runs: replay past it is refused.
 * Whether a runtime's tables ever move device state libckpt does not see
 * is for the GPU premise checks to show (P2 replays a PyTorch process). */
__attribute__((visibility("default"))) CUresult cuGetExportTable(const void **ppExportTable,
                                                                 const struct CUuuid_st *pExportTableId)
{
    NEED_REAL(cuGetExportTable, CUDA_ERROR_NOT_FOUND);
    if (ckpt_active && !ckpt_self_depth && !ckpt_nccl_depth && !ckpt_thread_internal && ckpt_bd_iteration() > 0 &&
        !ckpt_caller_is_library(__builtin_return_address(0)))
        ckpt_history_taint("cuGetExportTable after the first iteration: the driver's private functions it hands "
                           "out are calls no hook sees");
    /* Those functions may be handed a standby's virtual handles. */
    ckpt_v_promote("cuGetExportTable");
    return real_cuGetExportTable(ppExportTable, pExportTableId);
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                                                    cuuint64_t flags,
                                                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    NEED_REAL(cuGetProcAddress_v2, CUDA_ERROR_NOT_FOUND);
    CUresult r = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = ckpt_hook_substitute(*pfn);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    NEED_REAL(cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_pace_shadow_take();
    CUresult r;
    if (!standby_alloc(__builtin_return_address(0), &r, dptr, bytesize, CKPT_SMEM_PLAIN, NULL, NULL))
        r = real_cuMemAlloc_v2(dptr, bytesize);
    if (r == CUDA_SUCCESS)
        track(*dptr, bytesize, CKPT_ALLOC_PLAIN, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                                                   size_t Height, unsigned int ElementSizeBytes)
{
    NEED_REAL(cuMemAllocPitch_v2, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_v_promote("cuMemAllocPitch_v2");
    ckpt_pace_shadow_take();
    CUresult r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS)
        track(*dptr, *pPitch * Height, CKPT_ALLOC_PITCH, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    NEED_REAL(cuMemAllocManaged, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_v_promote("cuMemAllocManaged");
    ckpt_pace_shadow_take();
    CUresult r = real_cuMemAllocManaged(dptr, bytesize, flags);
    if (r == CUDA_SUCCESS) {
        track(*dptr, bytesize, CKPT_ALLOC_MANAGED, NULL);
        ckpt_host_managed(__builtin_return_address(0), *dptr, bytesize, true);
    }
    return r;
}

static CUresult free_sync(CUdeviceptr p, CUstream s)
{
    (void)s;
    return real_cuMemFree_v2(p);
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED_REAL(cuMemFree_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_active && ckpt_graphmem_owns(dptr))
        return ckpt_graphmem_free(dptr, false, free_sync, NULL);
    struct ckpt_alloc a = {0};
    before_untrack();
    if (ckpt_active) {
        ckpt_before_free(NULL, false);
        ckpt_reg_find(dptr, &a);
    }
    CUresult r;
    if (!ckpt_standby_mem_free(&r, dptr, NULL, false))
        r = real_cuMemFree_v2(dptr);
    if (r == CUDA_SUCCESS && ckpt_active && ckpt_internal_call(__builtin_return_address(0)))
        ckpt_history_aside(ckpt_thread_owner(), CKPT_ASIDE_FREE, dptr, 0);
    if (r == CUDA_SUCCESS) {
        if (a.addr && a.kind == CKPT_ALLOC_MANAGED)
            ckpt_host_managed(NULL, dptr, 0, false);
        untrack(dptr);
    }
    return r;
}

/* Stream-ordered allocation, plain and per-thread (null_means: the stream
 * a NULL hStream is); inside a capture, graph-owned memory (graphmem.c).
 * Macros, so that track() sees the program's caller. */
#define ALLOC_ASYNC_HOOK(name, null_means, how, pool, params, args)           \
    __attribute__((visibility("default"))) CUresult name params                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        ckpt_pace_shadow_take();                                               \
        CUstream s_ = ckpt_stream_or(hStream, null_means);                     \
        CUresult r;                                                            \
        if ((ckpt_active && ckpt_stream_capturing(s_)) ||                      \
            !standby_alloc(__builtin_return_address(0), &r, dptr, bytesize, how, hStream, pool)) \
            r = real_##name(CKPT_MAP(CKPT_V_IN, CKPT_ARGS args));              \
        if (r == CUDA_SUCCESS && ckpt_active && ckpt_stream_capturing(s_))     \
            ckpt_graphmem_alloc(s_, *dptr, bytesize);                          \
        else if (r == CUDA_SUCCESS)                                            \
            track(*dptr, bytesize, CKPT_ALLOC_ASYNC, s_);                      \
        return r;                                                              \
    }

ALLOC_ASYNC_HOOK(cuMemAllocAsync, NULL, CKPT_SMEM_ASYNC, NULL, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
                 (dptr, bytesize, hStream))
ALLOC_ASYNC_HOOK(cuMemAllocAsync_ptsz, CU_STREAM_PER_THREAD, CKPT_SMEM_ASYNC, NULL, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
                 (dptr, bytesize, hStream))
ALLOC_ASYNC_HOOK(cuMemAllocFromPoolAsync, NULL, CKPT_SMEM_POOL, pool,
                 (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
                 (dptr, bytesize, pool, hStream))
ALLOC_ASYNC_HOOK(cuMemAllocFromPoolAsync_ptsz, CU_STREAM_PER_THREAD, CKPT_SMEM_POOL, pool,
                 (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
                 (dptr, bytesize, pool, hStream))

/* The block stays valid for work already queued before the free, but no
 * snapshot taken after this call may read it: it is dead for the program.
 * The free is ordered after the snapshot's copies on its own stream. */
static CUresult free_async(__typeof__(&cuMemFreeAsync) real, CUstream null_means, CUdeviceptr dptr, CUstream hStream)
{
    if (ckpt_active && ckpt_graphmem_owns(dptr))
        return ckpt_graphmem_free(dptr, ckpt_stream_capturing(ckpt_stream_or(hStream, null_means)), real,
                                  V(hStream));
    before_untrack();
    if (ckpt_active)
        ckpt_before_free(ckpt_stream_or(hStream, null_means), true);
    CUresult r;
    if (!ckpt_standby_mem_free(&r, dptr, ckpt_stream_or(hStream, null_means), true))
        r = real(dptr, V(hStream));
    if (r == CUDA_SUCCESS)
        untrack(dptr);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    NEED_REAL(cuMemFreeAsync, CUDA_ERROR_NOT_INITIALIZED);
    return free_async(real_cuMemFreeAsync, NULL, dptr, hStream);
}

__attribute__((visibility("default"))) CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    NEED_REAL(cuMemFreeAsync_ptsz, CUDA_ERROR_NOT_INITIALIZED);
    return free_async(real_cuMemFreeAsync_ptsz, CU_STREAM_PER_THREAD, dptr, hStream);
}

/* Virtual memory: what the program can read is a mapped range, so the
 * mapping (not cuMemCreate's physical handle) is the allocation. */
__attribute__((visibility("default"))) CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    NEED_REAL(cuMemMap, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_v_promote("cuMemMap"); /* the program's virtual memory is not kept virtually */
    CUresult r = real_cuMemMap(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS)
        track(ptr, size, CKPT_ALLOC_VMM, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_REAL(cuMemUnmap, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_v_promote("cuMemUnmap"); /* the program's virtual memory is not kept virtually */
    before_untrack();
    if (ckpt_active)
        ckpt_before_free(NULL, false);
    CUresult r = real_cuMemUnmap(ptr, size);
    /* The range covers whole mappings (CUDA refuses a part of one), one
     * or several: all of them are gone. */
    if (r == CUDA_SUCCESS && ckpt_active)
        ckpt_reg_remove_range(ptr, size);
    return r;
}

/* Address reservations.  The program's are followed through what it maps
 * into them; a library's (NCCL's cuMem buffers: reserved, then mapped) are
 * its memory, logged as such for the program thread it works for, so that
 * a standby, where NCCL makes nothing until the takeover, holds the same
 * range and the program's later allocations land where they did. */
__attribute__((visibility("default"))) CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                                                    CUdeviceptr addr, unsigned long long flags)
{
    NEED_REAL(cuMemAddressReserve, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_v_promote("cuMemAddressReserve"); /* the program's virtual memory is not kept virtually */
    ckpt_pace_shadow_take();
    CUresult r = real_cuMemAddressReserve(ptr, size, alignment, addr, flags);
    /* NCCL's only (inside an NCCL call, or on a thread a library started):
     * a standby makes the driver's and the runtime's own for real, and
     * holding their range again would move the program's addresses. */
    if (r == CUDA_SUCCESS && ckpt_active && (ckpt_nccl_depth > 0 || ckpt_thread_internal))
        ckpt_history_aside(ckpt_thread_owner(), CKPT_ASIDE_RESERVE, *ptr, size);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    NEED_REAL(cuMemAddressFree, CUDA_ERROR_NOT_INITIALIZED);
    ckpt_v_promote("cuMemAddressFree"); /* the program's virtual memory is not kept virtually */
    CUresult r = real_cuMemAddressFree(ptr, size);
    if (r == CUDA_SUCCESS && ckpt_active && (ckpt_nccl_depth > 0 || ckpt_thread_internal))
        ckpt_history_aside(ckpt_thread_owner(), CKPT_ASIDE_FREE, ptr, 0);
    return r;
}
