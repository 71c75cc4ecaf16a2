/*
 * Internal header of the fake CUDA driver (libcuda.so.1 of the CPU test
 * double).  One device whose "device memory" is host memory, streams run
 * in order by one worker thread each, events with real timestamps, stream
 * capture into replayable graphs.  All driver state is guarded by one lock,
 * drv.lock; work runs outside it.  Nothing here is exported: only the cu*
 * entry points are, through libcuda.map.
 *
 * Error convention: functions that implement API semantics (validating
 * handles, enqueueing work) return CUresult, because the fake driver is
 * itself the API edge; plain helpers (tables, memory) return 0 or -errno.
 */
#ifndef FAKEGPU_DRIVER_H
#define FAKEGPU_DRIVER_H

#include <pthread.h>
#include <stdint.h>

#include "../include/cuda.h" /* ckpt_cuda.h and what the double implements beyond it */
#include "../common/fakegpu.h"

#define FG_DRIVER_VERSION 13000
#define FG_GRANULARITY (2u << 20) /* VMM granularity, minimum and recommended */
#define FG_MAX_KERNEL_ARGS 64

/* ---- work on streams (stream.c, copy.c, launch.c, event.c) --------- */

/* One argument slot of the double's kernel convention (examples/common/kernels.h). */
struct fg_arg_slot {
    _Alignas(16) unsigned char bytes[16];
};

enum fg_op_kind {
    FG_OP_KERNEL,      /* call a kernel with its private copy of the arguments */
    FG_OP_HOST_FN,     /* cuLaunchHostFunc */
    FG_OP_COPY,        /* memcpy, throttled when it crosses a link */
    FG_OP_MEMSET,      /* 1- or 4-byte elements */
    FG_OP_RECORD,      /* stamp an event */
    FG_OP_WAIT,        /* block until another stream ran up to a sequence number */
    FG_OP_POOL_FREE,   /* return a stream-ordered allocation to its pool */
    FG_OP_GRAPH_ALLOC, /* back a graph-owned allocation with memory (graphmem.c) */
    FG_OP_GRAPH_FREE,  /* take the memory back from one */
};

struct fg_event;
struct fg_stream;
struct fg_block;
struct fg_gmem;
struct fg_alloc;

/*
 * A unit of stream work.  Ops are heap blocks of op->size bytes with no
 * internal pointers, so a graph can copy them byte for byte; the references
 * they hold (events, streams, blocks) are taken by fg_op_clone and dropped
 * by fg_op_free.
 */
struct fg_op {
    struct fg_op *next;
    enum fg_op_kind kind;
    size_t size;
    union {
        struct {
            CUfunction f;
            unsigned nargs; /* the slots follow the op */
        } kernel;
        struct {
            CUhostFn fn;           /* cuLaunchHostFunc: fn(data) */
            void *data;
            CUstreamCallback cb;   /* cuStreamAddCallback: cb(stream, CUDA_SUCCESS, data) */
            CUstream stream;       /* the handle cb is given */
        } host;
        struct {
            void *dst;
            const void *src;
            size_t n;
            struct fg_link *link; /* NULL: not throttled */
        } copy;
        struct {
            void *dst;
            unsigned value;
            unsigned elem; /* 1 or 4 */
            size_t n;      /* elements */
        } memset;
        struct {
            struct fg_event *ev;
            uint64_t gen;
        } record;
        struct {
            struct fg_stream *s;
            uint64_t seq;
        } wait;
        struct {
            struct fg_block *block;
            uint64_t gen;
        } pool_free;
        struct fg_gmem *gmem; /* FG_OP_GRAPH_ALLOC, FG_OP_GRAPH_FREE */
    } u;
    struct fg_arg_slot slots[];
};

/* A zeroed op of the given kind with room for nslots argument slots, or NULL. */
struct fg_op *fg_op_new(enum fg_op_kind kind, unsigned nslots);
/* A copy of op holding its own references, or NULL.  Lock held. */
struct fg_op *fg_op_clone(const struct fg_op *op);
/* Drops the op's references and frees it.  Lock held. */
void fg_op_free(struct fg_op *op);

enum fg_stream_kind { FG_STREAM_USER, FG_STREAM_LEGACY, FG_STREAM_PER_THREAD };

struct fg_capture;

/* Stream priorities: the range of current GPUs (a lower number runs first). */
#define FG_PRIORITY_GREATEST (-5)

struct fg_stream {
    struct fg_ctx *ctx;
    enum fg_stream_kind kind;
    unsigned flags; /* CU_STREAM_NON_BLOCKING */
    int priority;   /* FG_PRIORITY_GREATEST..0; the work runs the same */
    int refs; /* the handle, plus every op that waits on this stream */
    struct fg_op *head, *tail;
    uint64_t enq_seq;     /* ops ever enqueued */
    uint64_t done_seq;    /* ops completed, in order */
    uint64_t legacy_seen; /* legacy-stream work this stream already waits for */
    pthread_cond_t wake;  /* new work, or stop */
    pthread_t thread;
    int running, stopping;
    struct fg_capture *capture; /* NULL unless capturing */
    struct fg_stream *ctx_prev, *ctx_next;
};

/* ---- contexts (ctx.c) ---------------------------------------------- */

struct fg_ctx {
    uint64_t id; /* unique for the life of the process */
    int primary;
    struct fg_stream *legacy;
    struct fg_stream *streams; /* every stream of the context, legacy included */
    struct fg_code *code;      /* functions loaded lazily, and their code (module.c) */
    size_t limit[CU_LIMIT_PERSISTING_L2_CACHE_SIZE + 1]; /* cuCtxSetLimit's, a GPU's defaults at first */
};

/* ---- module loading (module.c) ------------------------------------- */

struct fg_code;

/* Loads f into ctx unless it is loaded (or loading is eager): its code
 * takes device addresses.  Lock held. */
CUresult fg_code_load(struct fg_ctx *ctx, CUfunction f);
/* The shared memory of a block on current GPUs (227 KiB). */
#define FG_MAX_SHARED_MEM 232448
/* The dynamic shared memory a launch of f in ctx may ask for.  Lock held. */
unsigned fg_func_max_shared(const struct fg_ctx *ctx, CUfunction f);
/* Frees a dying context's code and function handles.  Lock held. */
void fg_code_release(struct fg_ctx *ctx);
/* The host function a function handle from cuKernelGetFunction stands
 * for; any other f is its own.  Lock held. */
CUfunction fg_func_host(CUfunction f);
/* Whether f was marked a kernel handle (launch.c).  Lock held. */
int fg_func_is_kernel(CUfunction f);

/* ---- events (event.c) ---------------------------------------------- */

/*
 * An event is its most recent record: the stream and sequence number of
 * the record op (complete once the stream got there), and the time that op
 * ran.  Waiting on an event is waiting on that stream position.
 */
struct fg_event {
    uint64_t ctx_id;             /* the context it was created in */
    unsigned flags;
    int refs;                    /* the handle, plus pending record ops */
    struct fg_stream *rec_stream; /* referenced; NULL: never recorded */
    uint64_t rec_seq;
    uint64_t rec_gen;            /* counts records; stamps of older ones are dropped */
    uint64_t time_gen;           /* the record time_ns belongs to */
    uint64_t time_ns;
    uint64_t capture_id;         /* nonzero: last recorded into that capture */
};

void fg_event_unref(struct fg_event *ev);
/* Makes the record op, just enqueued as op number seq of s, its event's latest record.  Lock held. */
void fg_event_mark(struct fg_op *op, struct fg_stream *s, uint64_t seq);

/* ---- stream capture and graphs (graph.c) --------------------------- */

struct fg_graph {
    struct fg_op *head, *tail;
    unsigned long long flags; /* an instantiated graph's CUDA_GRAPH_INSTANTIATE_FLAG_* */
};

struct fg_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    pthread_t thread;
    struct fg_stream *origin;
    int invalidated;
    struct fg_graph *graph;
    CUgraphNode deps[1]; /* what cuStreamGetCaptureInfo last handed out */
    struct fg_capture *next;
};

/* The active capture with this id, or NULL.  Lock held. */
struct fg_capture *fg_capture_find(uint64_t id);
/* Appends op to the capture's graph and takes ownership of it.  Lock held. */
CUresult fg_capture_add(struct fg_capture *cap, struct fg_op *op);
/* Marks a capture invalid: later work fails and EndCapture reports it.  Lock held. */
void fg_capture_invalidate(struct fg_capture *cap);
/*
 * For calls CUDA forbids while capturing ("potentially unsafe": allocation,
 * device synchronisation, querying or waiting for an event):
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, after invalidating the captures
 * that forbid it, or CUDA_SUCCESS.  Which do depends on the calling
 * thread's interaction mode (cuThreadExchangeStreamCaptureMode): in global
 * mode (the default) every global-mode capture and the thread's own
 * non-relaxed ones, in thread-local mode only its own, in relaxed mode
 * none.  Lock held.
 */
CUresult fg_capture_forbid_unsafe(void);
void fg_graph_free(struct fg_graph *g);

/* ---- graph-owned memory (graphmem.c); lock held throughout ---------- */

/* cuMemAllocAsync on a stream capturing into cap: an allocation node. */
CUresult fg_gmem_alloc(struct fg_capture *cap, size_t bytes, CUdeviceptr *dptr);
/* cuMemFreeAsync of graph memory a (FG_MEM_GRAPH) while capturing into cap: a free node. */
CUresult fg_gmem_free_captured(struct fg_capture *cap, struct fg_alloc *a);
/* cuMemFreeAsync of graph memory on s after a launch, or cuMemFree (s NULL, the device drained). */
CUresult fg_gmem_free(struct fg_alloc *a, struct fg_stream *s);
/* Before exec's ops are enqueued on s: refuses a launch over unfreed
 * allocations, or (auto-free) enqueues their frees. */
CUresult fg_gmem_launch(struct fg_graph *exec, struct fg_stream *s);
/* After: the allocations exec leaves unfreed are the program's. */
void fg_gmem_launched(struct fg_graph *exec);
/* An op's reference (fg_op_clone, fg_op_free) and its run. */
void fg_gmem_ref(struct fg_gmem *g);
void fg_gmem_unref(struct fg_gmem *g);
void fg_gmem_run(struct fg_op *op);

/* ---- memory (memory.c, pool.c, vmm.c) ------------------------------ */

enum fg_mem_kind {
    FG_MEM_DEVICE,     /* cuMemAlloc, cuMemAllocPitch */
    FG_MEM_MANAGED,    /* cuMemAllocManaged */
    FG_MEM_POOL,       /* stream-ordered allocation; owner is its fg_block */
    FG_MEM_VMM,        /* a cuMemMap mapping; owner is the mapped handle */
    FG_MEM_HOST,       /* cuMemAllocHost, cuMemHostAlloc */
    FG_MEM_REGISTERED, /* cuMemHostRegister */
    FG_MEM_GRAPH,      /* graph-owned, from capture to the graph's end; owner is its fg_gmem */
};

struct fg_alloc {
    uintptr_t base;
    size_t size;
    enum fg_mem_kind kind;
    void *owner;
};

/* The sorted table of every allocation the driver knows.  Lock held. */
int fg_alloc_insert(uintptr_t base, size_t size, enum fg_mem_kind kind, void *owner);
/* Returns 0, or -ENOENT when no entry starts at base. */
int fg_alloc_remove(uintptr_t base);
/* The entry containing addr, or NULL.  The pointer is valid until the table changes. */
struct fg_alloc *fg_alloc_find(uintptr_t addr);
/* The first entry overlapping [base, base + size), or NULL. */
struct fg_alloc *fg_alloc_overlap(uintptr_t base, size_t size);
/* Whether an entry of this kind lives in GPU memory (as opposed to host memory). */
int fg_mem_is_device(enum fg_mem_kind kind);

/*
 * Accounts bytes of device memory: 0, or -ENOMEM when the device (of
 * FAKEGPU_MEM_GB) would be over-full.  Lock held.
 */
/* Device memory held against the device's total (share.c: one GPU may be
 * shared by processes, FAKEGPU_SHARED_GPU): 0 or -ENOMEM.  Lock held. */
int fg_mem_reserve(size_t bytes);
void fg_mem_unreserve(size_t bytes);
/* What cuMemGetInfo says is free.  Lock held. */
size_t fg_mem_free(void);
/* Reads FAKEGPU_SHARED_GPU at cuInit.  Lock held. */
void fg_share_init(void);
/* Host memory pinned (cuMemHostAlloc, cuMemHostRegister) grew or shrank by
 * delta bytes: published beside the device bytes.  Lock held. */
void fg_share_pinned(ptrdiff_t delta);

/* Anonymous page-aligned memory standing in for pinned host memory, or NULL. */
void *fg_pages_alloc(size_t bytes);
void fg_pages_free(void *p, size_t bytes);

/*
 * The device's virtual address range (va.c), reserved once at cuInit.
 * Every device address comes from it, first fit by address: the same
 * sequence of calls gives the same addresses.  Lock held.
 */
/* Reserves the range for a device of device_bytes: 0 or -ENOMEM. */
int fg_va_init(size_t device_bytes);
/* What small allocations share a 2 MiB chunk with: device memory with
 * device memory; managed memory, which the host may touch, with managed
 * memory; a pool's blocks only with blocks of pools (CUDA's pools map
 * address space of their own, which nothing else shares). */
enum fg_va_class { FG_VA_DEVICE, FG_VA_HOST, FG_VA_POOL };
/* Readable and writable memory of bytes at a new address: 0 or -ENOMEM. */
int fg_va_alloc(size_t bytes, enum fg_va_class cls, uintptr_t *addr);
/* Gives back fg_va_alloc memory (bytes as allocated): its pages become inaccessible. */
void fg_va_free(uintptr_t addr, size_t bytes);
/*
 * An inaccessible address range of bytes (a multiple of the page size),
 * aligned to align (a power of two, at least the page size), at hint when
 * that part of the range is free: 0, -EINVAL or -ENOMEM.
 */
int fg_va_reserve(size_t bytes, size_t align, uintptr_t hint, uintptr_t *addr);
/* Gives back a reservation, which nothing may map any more: 0 or -ENOENT. */
int fg_va_unreserve(uintptr_t addr, size_t bytes);
/* Sets the protection of device pages (mprotect, with the device's key, va.c): 0 or -errno. */
int fg_va_protect(uintptr_t addr, size_t bytes, int prot);
/* Gives the calling thread access to device pages, or takes it away (a stream's worker, around an op). */
void fg_device_access(int on);
/* Backs part of a reservation with fresh zeroed pages (0 or -ENOMEM), or makes it inaccessible again. */
int fg_va_back(uintptr_t addr, size_t bytes);
void fg_va_unback(uintptr_t addr, size_t bytes);
/* Whether [addr, addr + bytes) lies inside, or overlaps, the device's range. */
int fg_va_contains(uintptr_t addr, size_t bytes);
int fg_va_overlaps(uintptr_t addr, size_t bytes);
/* The host page size. */
size_t fg_va_page(void);

struct fg_pool;

struct fg_block {
    void *ptr;
    size_t cap;  /* bytes backed */
    size_t size; /* bytes of the current allocation */
    struct fg_pool *pool;
    struct fg_block *next;   /* in the pool's cache, or its list of queued frees */
    struct fg_stream *freeing; /* the stream of a queued free that has not run, else NULL */
    uint64_t gen;            /* counts the block's allocations: a queued free of an older one does nothing */
    int refs;                /* queued frees that name it: the struct outlives its memory until they ran */
    int released;            /* its memory went back (the struct waits for refs) */
};

/* Executes a stream-ordered free of the block's allocation gen: the block
 * becomes reusable, unless an allocation on the same stream took it
 * already.  Lock held. */
void fg_pool_free_queued(struct fg_block *b, uint64_t gen);
/* Frees a block's allocation now (cuMemFree of pool memory).  Lock held. */
void fg_pool_free_block(struct fg_block *b);
/* Releases every pool's cached blocks above its release threshold (0). Lock held. */
void fg_pool_trim_all(void);
/* Creates the default pool at cuInit: 0 or -ENOMEM.  Lock held. */
int fg_pool_init(void);

/* ---- the driver ---------------------------------------------------- */

struct fg_driver {
    pthread_mutex_t lock;
    pthread_cond_t progress; /* broadcast when any op completes or a stream stops */
    int initialized;
    int forked; /* this process is a child forked after cuInit */
    size_t total_mem, used_mem;
    size_t registered_bytes; /* pages pinned by cuMemHostRegister, against RLIMIT_MEMLOCK */
    size_t pinned_host;      /* all host memory pinned: cuMemHostAlloc's and registered (share.c) */
    struct fg_link h2d, d2h;
    struct fg_ctx *primary;
    int primary_refs;
    struct fg_ptrset ctxs, streams, events, graphs, execs, pools, vmm_handles;
    struct fg_pool *default_pool;
    struct fg_capture *captures;
    uint64_t next_capture_id;
    struct fg_alloc *allocs;
    size_t nallocs, allocs_cap;
};

extern struct fg_driver drv;

void fg_lock(void);
void fg_unlock(void);
/* Waits on drv.progress.  Lock held. */
void fg_wait_progress(void);
/* CUDA_ERROR_NOT_INITIALIZED before cuInit, else CUDA_SUCCESS.  Lock held. */
CUresult fg_check_init(void);
/* The calling thread's current context, checked: NOT_INITIALIZED, INVALID_CONTEXT.  Lock held. */
CUresult fg_current_ctx(struct fg_ctx **ctx);

/* ---- streams (stream.c) -------------------------------------------- */

/* A new stream of ctx, or NULL (out of memory).  Lock held. */
struct fg_stream *fg_stream_new(struct fg_ctx *ctx, enum fg_stream_kind kind, unsigned flags);
/*
 * Resolves a stream handle of the current context: NULL and
 * CU_STREAM_LEGACY are its legacy stream, CU_STREAM_PER_THREAD the calling
 * thread's per-thread stream (created on first use).  Lock held.
 */
CUresult fg_stream_get(CUstream h, struct fg_stream **s);
/* The stream a _ptsz/_ptds entry point queues on: h, or for NULL the
 * calling thread's CU_STREAM_PER_THREAD. */
static inline CUstream fg_per_thread(CUstream h)
{
    return h ? h : CU_STREAM_PER_THREAD;
}
/*
 * Enqueues op on s and takes ownership of it, whatever the result.  Adds
 * the legacy stream's implicit synchronisation; while s captures, records
 * op into the capture instead.  Lock held.
 */
CUresult fg_submit(struct fg_stream *s, struct fg_op *op);
/* Waits until s has completed the first seq ops.  Lock held (released while waiting). */
void fg_stream_wait_seq(struct fg_stream *s, uint64_t seq);
/* Stops and frees a stream after its work has completed.  Lock held. */
void fg_stream_retire(struct fg_stream *s);
void fg_stream_unref(struct fg_stream *s);
/* Waits for all work of every stream of ctx enqueued before the call.  Lock held. */
void fg_ctx_drain(struct fg_ctx *ctx);
/* fg_ctx_drain for every context: before memory goes away under running work. */
void fg_drain_all(void);
/* Runs op on the calling worker; lock held, released around user code. */
void fg_op_run(struct fg_op *op);
/* Whether the caller is a stream worker (running a kernel or host function). */
int fg_in_worker(void);

#endif /* FAKEGPU_DRIVER_H */
