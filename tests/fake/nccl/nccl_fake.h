/*
 * Internal header of the test double's NCCL (libnccl.so.2): ranks are
 * processes on one host that meet in a POSIX shared-memory segment named by
 * the unique id; collectives run in stream order as host functions on the
 * driver's stream workers and move data through that segment; a dead or
 * silent peer turns into an error within a bounded time, never a hang.
 * Like the real library it reaches the driver only through pointers from
 * cuGetProcAddress_v2, and owns device memory of its own (a FIFO and a flags
 * buffer per communicator) that it writes during collectives, so that
 * libckpt meets library-internal allocations here as it will on a GPU.
 *
 * Error convention: everything below the exported API returns 0 or -errno
 * (said above each function); nf_result() turns that into ncclResult_t at
 * the API edge, and nothing else does.  No name declared here is exported:
 * the version script exports nccl* and pnccl* only.
 */
#ifndef FAKEGPU_NCCL_FAKE_H
#define FAKEGPU_NCCL_FAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt_cuda.h"
#include "ckpt_nccl.h"
#include "ckpt_nccl_profiler.h"
#include "../common/fakegpu.h"

#pragma GCC visibility push(hidden)

/* ---- reaching the driver (driver.c) --------------------------------- */

/* The CUDA version NCCL 2.28 built for CUDA 13 asks cuGetProcAddress for. */
#define NF_CUDA_VERSION 13000

/*
 * Every driver function the library calls, once: X(base, suffix), where
 * base is the name given to cuGetProcAddress_v2 and base##suffix the
 * versioned function whose prototype the pointer has.
 */
#define NF_DRIVER_CALLS(X)                                                     \
    X(cuInit, )                                                                \
    X(cuDeviceGet, )                                                           \
    X(cuDevicePrimaryCtxRetain, )                                              \
    X(cuCtxGetCurrent, )                                                       \
    X(cuCtxSetCurrent, )                                                       \
    X(cuCtxGetDevice, _v2) /* CUDA 13's: (device, context) */                 \
    X(cuMemAlloc, _v2)                                                         \
    X(cuMemFree, _v2)                                                          \
    X(cuMemGetAllocationGranularity, )                                         \
    X(cuMemCreate, )                                                           \
    X(cuMemRelease, )                                                          \
    X(cuMemAddressReserve, )                                                   \
    X(cuMemAddressFree, )                                                      \
    X(cuMemMap, )                                                              \
    X(cuMemUnmap, )                                                            \
    X(cuMemSetAccess, )                                                        \
    X(cuMemGetAddressRange, _v2)                                               \
    X(cuMemHostAlloc, )                                                        \
    X(cuMemFreeHost, )                                                         \
    X(cuMemsetD8Async, )                                                       \
    X(cuStreamCreate, )                                                        \
    X(cuStreamDestroy, _v2)                                                    \
    X(cuEventCreate, )                                                         \
    X(cuEventRecord, )                                                         \
    X(cuEventSynchronize, )                                                    \
    X(cuEventDestroy, _v2)                                                     \
    X(cuThreadExchangeStreamCaptureMode, )                                     \
    X(cuLaunchHostFunc, )                                                      \
    X(cuStreamIsCapturing, )

struct nf_driver {
#define NF_DRIVER_FIELD(base, suffix) __typeof__(&base##suffix) base##suffix;
    NF_DRIVER_CALLS(NF_DRIVER_FIELD)
#undef NF_DRIVER_FIELD
};
/* Valid once nf_drv_enter() has returned 0. */
extern struct nf_driver nf_drv;
/* The double driver's PCIe device-to-host link (fakegpu_pcie_d2h_book), or
 * NULL: collectives book their bytes on it too, so they contend with
 * snapshot copies when FAKEGPU_COPY_GBPS and FAKEGPU_NET_GBPS are set. */
extern uint64_t (*nf_pcie_book)(size_t bytes);
/* The double driver's fakegpu_device_access, or NULL: the collectives'
 * host functions touch device pages, which its host threads may not. */
extern void (*nf_device_access)(int on);

/*
 * Loads the driver and resolves every entry point (once per process), runs
 * cuInit(0), and gives the calling thread a current context when it has
 * none (device 0's primary context), as NCCL's static runtime does.
 * 0, or -ENOSYS (no usable driver) / -EIO (a driver call failed).
 */
int nf_drv_enter(void);

/* NCCL's device memory (mem.c): cuMem calls unless NCCL_CUMEM_ENABLE=0,
 * then cuMemAlloc.  Valid after nf_drv_enter(), with a current context. */
CUresult nf_mem_alloc(CUdeviceptr *dptr, size_t bytes);
CUresult nf_mem_free(CUdeviceptr dptr);

/* ---- errors and logging (error.c) ----------------------------------- */

/*
 * The ncclResult_t for an internal result: -EINVAL invalid argument,
 * -EPERM/-EBUSY invalid usage, -EPIPE/-ECONNABORTED remote error (a peer
 * died, left or gave up), -EIO unhandled CUDA error, -EINPROGRESS in
 * progress, anything else a system error.
 */
ncclResult_t nf_result(int err);

/*
 * Records a failure as the text ncclGetLastError returns, and prints it on
 * stderr when NCCL_DEBUG is WARN or more verbose.  Returns err, so that a
 * caller can write `return nf_fail(-EINVAL, "...")`.  Keeps errno.
 */
int nf_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints on stderr when NCCL_DEBUG is INFO or more verbose. */
void nf_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last text nf_fail recorded in this process ("" when none). */
const char *nf_last_error(void);

/* ---- data types and reductions (reduce.c) --------------------------- */

/* Bytes per element, or 0 for a value that is no ncclDataType_t. */
size_t nf_type_size(ncclDataType_t type);
/* NCCL's name for the type ("ncclFloat32"), as profiler events carry it. */
const char *nf_type_name(ncclDataType_t type);
/*
 * dst[i] = dst[i] op src[i] for i < n, in the type's own arithmetic:
 * integers wrap, half/bf16/fp8 are computed in float and rounded back to
 * nearest-even after every step (fp8 saturating to its largest finite
 * value, as CUDA's conversions do), so a result depends on the order of
 * the operands only.  ncclAvg accumulates as ncclSum; see nf_divide.
 */
void nf_reduce(void *dst, const void *src, size_t n, ncclDataType_t type, ncclRedOp_t op);
/* dst[i] *= scalar (one element of type), for a PreMulSum's part. */
void nf_premultiply(void *dst, size_t n, ncclDataType_t type, const void *scalar);
/* dst[i] /= divisor: the last step of ncclAvg (integers truncate). */
void nf_divide(void *dst, size_t n, ncclDataType_t type, int divisor);

/* ---- the shared segment (shm.c) ------------------------------------- */

#define NF_UID_MAGIC 0x4c43434e656b6166ull /* "fakeNCCL" */
#define NF_SEG_MAGIC 0x676573636e6b6166ull /* "fakncseg" */
#define NF_SEG_VERSION 1
#define NF_NAME_MAX 96
#define NF_SLOT_BYTES (4u << 20) /* data slot of each rank */
#define NF_BOOT_BYTES 64         /* per-rank record of a host-side exchange */

/* The unique id: which segment the ranks of one communicator meet in. */
struct nf_uid {
    uint64_t magic;
    uint32_t version;
    uint32_t creator; /* the pid of the process that made it, where NCCL's bootstrap root runs */
    char name[NCCL_UNIQUE_ID_BYTES - 16]; /* "/fakenccl-...", NUL-terminated */
};
_Static_assert(sizeof(struct nf_uid) == NCCL_UNIQUE_ID_BYTES, "nf_uid must fill ncclUniqueId");

enum nf_rank_state { NF_RANK_EMPTY = 0, NF_RANK_JOINED = 1, NF_RANK_LEFT = 2 };

/* The segment's first bytes; the creator stores magic last. */
struct nf_seg_header {
    _Atomic uint64_t magic;
    uint32_t version;
    uint32_t nranks;
    uint64_t size;
    uint64_t rank_stride;  /* bytes per struct nf_seg_rank, with its p2p words */
    uint64_t slots_offset; /* where rank 0's data slot starts */
    uint64_t slot_bytes;
    _Atomic uint32_t doorbell;  /* futex word: bumped on every state change */
    _Atomic uint32_t waiters;   /* threads sleeping on the doorbell */
    _Atomic int32_t joined;     /* ranks registered so far */
    _Atomic int32_t aborted_by; /* 1 + the first rank that gave up, or 0 */
};

/* One per rank; every word is written by that rank only. */
struct nf_seg_rank {
    _Atomic int32_t pid;
    _Atomic int32_t state;          /* enum nf_rank_state */
    _Atomic uint64_t phase;         /* collective barrier counter */
    _Atomic uint64_t boot_phase;    /* host-side exchange counter */
    unsigned char boot[NF_BOOT_BYTES];
    /* [q]: chunks posted to peer q; [nranks + p]: chunks taken from peer p */
    _Atomic uint64_t p2p[];
};

/* A rank's mapping of a segment. */
struct nf_seg {
    struct nf_seg_header *hdr;
    size_t size;
    int nranks;
    int rank;
    char name[NF_NAME_MAX];
    uint64_t phase;      /* this rank's barrier counter (stream side only) */
    uint64_t boot_phase; /* this rank's exchange counter (under the comm's boot lock) */
};

/* How long a wait may last, and the flag that cancels it early. */
struct nf_wait {
    uint64_t timeout_ns;
    const _Atomic bool *cancel; /* NULL: none */
    /* A peer that died, left or gave up goes unnoticed, as real NCCL's
     * kernels over P2P/SHM do not notice it (NCCL_FAKE_DEAD_PEER=hang). */
    bool peers_unseen;
};

/*
 * Creates or opens the segment `name` for nranks ranks, registers the
 * caller as `rank`, and waits until every rank has registered.  The rank
 * that completes the set unlinks the name (everyone has it mapped by then),
 * so no file outlives a communicator, however its processes end.
 * 0; -EINVAL (the segment exists for another rank count), -EBUSY (the rank
 * is taken), -ETIMEDOUT, -EPIPE (a registered peer died), -ECANCELED, or
 * another -errno from the system.  On failure nothing is left mapped and
 * the name is unlinked.
 */
int nf_seg_join(struct nf_seg *seg, const char *name, int nranks, int rank,
                const struct nf_wait *wait);
/* Marks the caller's rank as gone for good and unmaps the segment. */
void nf_seg_leave(struct nf_seg *seg);
/* Tells every rank that this one gave up, so that their waits end now. */
void nf_seg_abort(struct nf_seg *seg);

struct nf_seg_rank *nf_seg_rank(const struct nf_seg *seg, int rank);
unsigned char *nf_seg_slot(const struct nf_seg *seg, int rank);
/* Wakes every waiter; call after publishing a state change. */
void nf_seg_ring(const struct nf_seg *seg);

/*
 * Sleeps until ready(arg) holds, re-testing it whenever any rank rings.
 * 0; -ECANCELED (the wait's cancel flag), -ECONNABORTED (a rank gave up),
 * -EPIPE (a rank died or left), or -ETIMEDOUT (nothing for timeout_ns).
 * Peers' liveness is probed every 100 ms while waiting.
 */
int nf_seg_wait(const struct nf_seg *seg, const struct nf_wait *wait,
                bool (*ready)(const struct nf_seg *seg, void *arg), void *arg);

/*
 * All ranks reach the same barrier: bumps this rank's phase and waits until
 * every rank's phase has reached it.  Stream side only.  0 or as nf_seg_wait.
 */
int nf_seg_barrier(struct nf_seg *seg, const struct nf_wait *wait);

/*
 * A host-side allgather of len <= NF_BOOT_BYTES bytes per rank (for split):
 * all[r * len] receives rank r's bytes.  Independent of the stream side, so
 * it may run while collectives are in flight.  0 or as nf_seg_wait.
 */
int nf_seg_exchange(struct nf_seg *seg, const struct nf_wait *wait,
                    const void *mine, size_t len, void *all);

/* ---- communicators (comm.c) ----------------------------------------- */

#define NF_COMM_MAGIC 0x6e63636cu /* "nccl" */
#define NF_FIFO_BYTES (1u << 20)
#define NF_FLAGS_BYTES 4096u

enum nf_func {
    NF_BROADCAST,
    NF_REDUCE,
    NF_ALLGATHER,
    NF_REDUCESCATTER,
    NF_ALLREDUCE,
    NF_SEND,
    NF_RECV,
    NF_NFUNCS
};

/* A registered buffer (ncclCommRegister); the handle is its address. */
struct nf_reg {
    struct nf_reg *next;
    void *buff;
    size_t size;
};

/* A reduction operator made by ncclRedOpCreatePreMulSum: its handle is
 * ncclNumOps + its index in the comm's table. */
#define NF_MAX_USER_OPS 64
struct nf_user_op {
    bool used;
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    _Alignas(8) unsigned char value[8]; /* host-immediate */
    const void *dev;        /* device-resident */
};

struct nf_comm {
    uint32_t magic; /* NF_COMM_MAGIC while the handle is live */
    int rank;
    int nranks;
    int cudev;
    bool blocking;
    char comm_name[64]; /* config->commName, for the profiler */
    uint64_t hash;      /* of the segment name: the profiler's commId */
    CUcontext ctx;      /* the creating thread's context, for the init thread */
    char seg_name[NF_NAME_MAX];
    struct nf_seg seg;
    bool joined; /* seg is mapped */

    /* Library-owned device memory, written by every collective. */
    CUdeviceptr fifo;
    CUdeviceptr flags;
    /* Host memory mapped for the device, as NCCL's ncclCudaHostCalloc
     * makes its abort flag and proxy FIFOs: the library's, not the
     * program's (nothing reads it here). */
    void *host_flags;

    /* Nonblocking init runs in this thread. */
    pthread_t init_thread;
    bool init_thread_live;

    /* 0, -EINPROGRESS while initialising, or the first error. */
    _Atomic int async_err;
    _Atomic bool aborting;
    _Atomic bool revoked;   /* ncclCommRevoke: no operation is taken any more */
    _Atomic bool suspended; /* ncclCommSuspend: none until ncclCommResume */
    bool finalized;
    uint32_t splits; /* splits made from this comm, to name their segments */

    /* Ordering of batches: issued at group end, run in that order. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic uint64_t issued;
    uint64_t done; /* under lock */
    uint64_t coll_seq[NF_NFUNCS]; /* profiler seqNumber per function */

    /* Stream side only (batches run one at a time). */
    uint64_t ops_run;    /* operations executed: the flags buffer's counter */
    uint64_t *p2p_sent;  /* [q] chunks posted to q */
    uint64_t *p2p_taken; /* [p] chunks taken from p */

    pthread_mutex_t boot_lock; /* serialises nf_seg_exchange */
    struct nf_reg *regs;       /* under lock */
    struct nf_reg *wins;       /* windows (ncclCommWindowRegister), under lock */
    struct nf_user_op user_ops[NF_MAX_USER_OPS]; /* under lock */
    bool prof_on;              /* the profiler plugin's init succeeded */
    void *prof_ctx;            /* and gave this context */
};

/* The configuration a comm is created with, read from ncclConfig_t. */
struct nf_config {
    bool blocking;
    const char *comm_name; /* NULL: none */
};

/*
 * Reads and checks a user's ncclConfig_t as NCCL does (NULL: defaults).
 * 0, or -EINVAL for a config not made by NCCL_CONFIG_INITIALIZER or with a
 * value out of range.
 */
int nf_config_read(const ncclConfig_t *config, struct nf_config *out);

/* The comm behind a handle, or NULL when it is not a live comm. */
struct nf_comm *nf_comm_get(ncclComm_t handle);

/*
 * Creates a comm and starts joining: in the calling thread when the config
 * is blocking (0 or an error), in a new thread otherwise (-EINPROGRESS, and
 * ncclCommGetAsyncError reports progress).  *out is set whenever a comm was
 * created, even if its initialisation then fails.
 */
int nf_comm_init(struct nf_comm **out, const char *seg_name, int nranks, int rank,
                 const struct nf_config *cfg);
/*
 * ncclCommSplit: every rank of parent calls it.  The ranks agree on the
 * new groups through the parent's segment in the calling thread; joining
 * the new comm then goes as in nf_comm_init.  *out is NULL for
 * NCCL_SPLIT_NOCOLOR.  cfg NULL: the parent's configuration.
 */
int nf_comm_split(struct nf_comm *parent, int color, int key, const struct nf_config *cfg,
                  struct nf_comm **out);
/* Waits (bounded) for every issued batch to run; 0 or the comm's error. */
int nf_comm_finalize(struct nf_comm *c);
/*
 * Releases the comm.  `abort` cancels what is in flight and tells the peers
 * first; otherwise issued work is waited for (bounded).  A comm whose
 * batches never ran is leaked rather than freed under their feet.
 */
void nf_comm_release(struct nf_comm *c, bool abort);
/* 0, -EINPROGRESS, or the comm's error. */
int nf_comm_status(struct nf_comm *c);
/* Records the comm's first error and tells the peers it gave up. */
void nf_comm_fail(struct nf_comm *c, int err);
/* The waits of this comm: NCCL_FAKE_TIMEOUT, cancelled by an abort. */
struct nf_wait nf_comm_wait(struct nf_comm *c);
/* The wait of a collective's data movement: nf_comm_wait, but with
 * NCCL_FAKE_DEAD_PEER=hang a dead peer goes unnoticed and there is no
 * timeout unless NCCL_FAKE_TIMEOUT is set, as with real NCCL's kernels. */
struct nf_wait nf_comm_coll_wait(struct nf_comm *c);

/* ncclCommRegister / ncclCommDeregister: 0 or -EINVAL. */
int nf_comm_register(struct nf_comm *c, void *buff, size_t size, void **handle);
int nf_comm_deregister(struct nf_comm *c, void *handle);
/* A window over [buff, buff + size): buff aligned to
 * NCCL_WIN_REQUIRED_ALIGNMENT and the range inside one device allocation
 * or mapping, as NCCL requires.  0 or -errno, named. */
int nf_comm_window_register(struct nf_comm *c, void *buff, size_t size, void **win);
int nf_comm_window_deregister(struct nf_comm *c, void *win);

/* ---- operations and groups (group.c, coll.c) ------------------------ */

struct nf_op {
    enum nf_func func;
    struct nf_comm *comm;
    CUstream stream;
    const void *sendbuff;
    void *recvbuff;
    size_t count; /* elements; per rank for AllGather and ReduceScatter */
    ncclDataType_t type;
    ncclRedOp_t redop; /* a PreMulSum op is a sum of premultiplied parts */
    int peer;   /* root of Broadcast/Reduce, peer of Send/Recv */
    void *prof; /* its Coll/P2p profiler event: parent of KernelCh */
    /* A PreMulSum's scalar: its value (host-immediate, read when the op
     * was queued) or where the device holds it (read when it runs). */
    bool premul;
    _Alignas(8) unsigned char scalar[8]; /* read as one element of type */
    const void *scalar_dev;
};


/* The work of one comm on one stream from one group: one host function. */
struct nf_batch {
    struct nf_comm *comm;
    uint64_t seq;   /* 1-based position in the comm's order */
    bool cancelled; /* never launched: only keeps the order */
    size_t nops;
    struct nf_op ops[]; /* collectives first, then sends and receives */
};

/*
 * Adds an operation to the calling thread's group, issuing it at once when
 * no group is open.  The operation has been validated.  0 or -errno (the
 * error also fails the open group, as NCCL's does).
 */
int nf_enqueue(const struct nf_op *op);
int nf_group_start(void);
/* 0, or the first error of the group (whose operations are then dropped). */
int nf_group_end(void);
/* Fails the calling thread's open group, if any, with err; returns err. */
int nf_group_fail(int err);

/* The host function that runs a batch on its stream's worker. */
void nf_batch_run(void *batch);
/* NCCL's name of the function ("AllReduce"), as profiler events carry it. */
const char *nf_func_name(enum nf_func func);
/* Bytes this rank sends for an op: what the network throttle charges. */
size_t nf_op_wire_bytes(const struct nf_op *op, int nranks);

/* ---- the profiler plugin (profiler.c) -------------------------------- */

/*
 * Loads NCCL_PROFILER_PLUGIN the first time a comm is initialised and calls
 * its init for c (c->prof_ctx).  A plugin that is missing or fails is
 * reported and ignored, as NCCL does.
 */
void nf_prof_comm_init(struct nf_comm *c);
void nf_prof_comm_fini(struct nf_comm *c);
/* Starts the Coll or P2p event of an op being enqueued; NULL when off. */
void *nf_prof_task_start(const struct nf_op *op);
/* Stops it: for NCCL, a stopped Coll means "enqueued". */
void nf_prof_task_stop(void *event);
/* A KernelCh child of the task event when the mask asks for one; NULL otherwise. */
void *nf_prof_kernel_start(struct nf_comm *c, void *task);
void nf_prof_kernel_stop(void *event);

#pragma GCC visibility pop

#endif /* FAKEGPU_NCCL_FAKE_H */
