/*
 * Wrappers of the NCCL API.  While a thread is inside NCCL, whatever device
 * memory it allocates belongs to NCCL (communicator buffers, FIFOs, flags):
 * the depth marks those allocations internal, so a restore can never write
 * old bytes into a live communicator.  Each wrapper forwards to the real
 * pncclX, the strong definition behind NCCL's weak ncclX.  While a
 * restarted rank replays, collectives are tokens only: the data they would
 * move is restored with the snapshot.  Communicators are comm.c's: real,
 * or a standby's virtual ones, which a collective makes real on first use
 * once the standby is live.
 */
#include "interpose.h"
#include "timeline.h"
#include "util.h"

#define FORWARD(name, args)                                                    \
    NEED_REAL(name, ncclSystemError);                                          \
    ckpt_nccl_depth++;                                                         \
    ncclResult_t r = real_##name args;                                         \
    ckpt_nccl_depth--;                                                         \
    return r

/* A collective is a token of the call stream (what it does, on how much,
 * on which communicator) and queues work on its stream; what it writes
 * (written, NULL for none) waits for its snapshot copy first (pacer.c). */
#define COLLECTIVE(name, args, op, count, type, comm, stream, written)         \
    NEED_REAL(name, ncclSystemError);                                          \
    ncclComm_t held = comm; /* the program's handle (comm.c) */                \
    if (ckpt_is_replaying()) {                                                      \
        ckpt_on_collective(token(op, count, type, held), stream);              \
        return ncclSuccess;                                                    \
    }                                                                          \
    ncclResult_t r;                                                            \
    if ((comm = ckpt_comm_real(comm, &r)) == NULL && r != ncclSuccess)         \
        return r;                                                              \
    stream = V(stream); /* a standby's, made real at its takeover */           \
    if (ckpt_active && (written)) {                                            \
        uint64_t w_ = (uint64_t)(uintptr_t)(written);                          \
        ckpt_pace_touch((CUstream)(stream), &w_, 1);                           \
    }                                                                          \
    uint64_t t0 = ckpt_now_ns();                                               \
    ckpt_nccl_depth++;                                                         \
    r = real_##name args;                                                      \
    ckpt_nccl_depth--;                                                         \
    if (r == ncclSuccess && ckpt_active) {                                     \
        host_times(op, count, t0);                                             \
        ckpt_on_collective(token(op, count, type, held), stream);              \
    }                                                                          \
    return r

enum {
    OP_ALLREDUCE = CKPT_TL_ALLREDUCE, OP_BROADCAST = CKPT_TL_BROADCAST, OP_REDUCE = CKPT_TL_REDUCE,
    OP_ALLGATHER = CKPT_TL_ALLGATHER, OP_REDUCESCATTER = CKPT_TL_REDUCESCATTER, OP_SEND = CKPT_TL_SEND,
    OP_RECV = CKPT_TL_RECV, OP_ALLTOALL = CKPT_TL_ALLTOALL, OP_GATHER = CKPT_TL_GATHER, OP_SCATTER = CKPT_TL_SCATTER
};

/* Without libckpt's profiler plugin in NCCL (the user chose another), the
 * timeline gets the host's view: the span of the call, which enqueues the
 * collective, not when the GPU ran it.  The op numbers are the timeline's
 * function numbers. */
static void host_times(int op, size_t count, uint64_t t0)
{
    if (__atomic_load_n(&ckpt_prof_comms, __ATOMIC_RELAXED) > 0)
        return;
    struct ckpt_tl_event e = {.start_ns = t0, .end_ns = ckpt_now_ns(), .iteration = ckpt_tl_iteration(),
                              .arg = count, .kind = CKPT_TL_COLL, .detail = (uint32_t)op};
    ckpt_tl_add(&e);
}

static uint64_t token(int op, size_t count, int type, ncclComm_t comm)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL * (uint64_t)op;
    h ^= (uint64_t)count + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= (uint64_t)type + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= (uint64_t)(uintptr_t)comm + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

/* The buffer is NCCL-allocated but the program's: it holds user data (for
 * buffer registration), so it is snapshotted like any allocation. */
__attribute__((visibility("default"))) ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    NEED_REAL(ncclMemAlloc, ncclSystemError);
    CUresult held;
    CUdeviceptr at = 0;
    ncclResult_t r;
    if (ckpt_active && ptr && ckpt_standby_mem_on() &&
        ckpt_standby_mem_alloc(&held, &at, size, CKPT_SMEM_NCCL, NULL, NULL)) {
        *ptr = (void *)(uintptr_t)at; /* a standby's: reserved, backed at takeover */
        r = ncclSuccess;
    } else {
        /* Not NCCL's memory, nor a library's aside: what it is made of is
         * not followed (it is tracked whole, below). */
        ckpt_nccl_depth++;
        ckpt_self_depth++;
        r = real_ncclMemAlloc(ptr, size);
        ckpt_self_depth--;
        ckpt_nccl_depth--;
    }
    if (r == ncclSuccess && ckpt_active && ptr && *ptr) {
        ckpt_reg_remove((uint64_t)(uintptr_t)*ptr);
        ckpt_track(NULL, (uint64_t)(uintptr_t)*ptr, size, CKPT_ALLOC_PLAIN, NULL);
    }
    return r;
}

__attribute__((visibility("default"))) ncclResult_t ncclMemFree(void *ptr)
{
    CUresult freed;
    if (ckpt_standby_mem_free(&freed, (CUdeviceptr)(uintptr_t)ptr, NULL, false)) {
        if (ckpt_active)
            ckpt_reg_remove((uint64_t)(uintptr_t)ptr);
        return freed == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
    }
    NEED_REAL(ncclMemFree, ncclSystemError);
    ckpt_nccl_depth++;
    ckpt_self_depth++;
    ncclResult_t r = real_ncclMemFree(ptr);
    ckpt_self_depth--;
    ckpt_nccl_depth--;
    if (r == ncclSuccess && ckpt_active)
        ckpt_reg_remove((uint64_t)(uintptr_t)ptr);
    return r;
}

__attribute__((visibility("default"))) ncclResult_t ncclGroupStart(void)
{
    FORWARD(ncclGroupStart, ());
}

__attribute__((visibility("default"))) ncclResult_t ncclGroupEnd(void)
{
    FORWARD(ncclGroupEnd, ());
}

__attribute__((visibility("default"))) ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    op = ckpt_comm_op(comm, op);
    COLLECTIVE(ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream), OP_ALLREDUCE, count, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclBroadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream), OP_BROADCAST, count, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    op = ckpt_comm_op(comm, op);
    COLLECTIVE(ncclReduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream), OP_REDUCE, count, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclAllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream), OP_ALLGATHER, sendcount, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    op = ckpt_comm_op(comm, op);
    COLLECTIVE(ncclReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream), OP_REDUCESCATTER, recvcount, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclSend, (sendbuff, count, datatype, peer, comm, stream), OP_SEND, count, datatype, comm, stream, (void *)NULL);
}

__attribute__((visibility("default"))) ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclRecv, (recvbuff, count, datatype, peer, comm, stream), OP_RECV, count, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclBcast, (buff, count, datatype, root, comm, stream), OP_BROADCAST, count, datatype, comm, stream, buff);
}

__attribute__((visibility("default"))) ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclAlltoAll, (sendbuff, recvbuff, count, datatype, comm, stream), OP_ALLTOALL, count, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclGather, (sendbuff, recvbuff, count, datatype, root, comm, stream), OP_GATHER, count, datatype, comm, stream, recvbuff);
}

__attribute__((visibility("default"))) ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    COLLECTIVE(ncclScatter, (sendbuff, recvbuff, count, datatype, root, comm, stream), OP_SCATTER, count, datatype, comm, stream, recvbuff);
}

/*
 * One-sided signals (NCCL 2.29): a peer's put lands in this rank's window
 * whenever it runs, and no snapshot copy of the window can be ordered
 * before it (the write is the peer's, on the peer's stream), so the first
 * one taints the log: snapshots from then on are not restored, said at
 * once.  While replaying they are tokens, as collectives are; live, the
 * program's handles become the real communicator and window.
 */
#define ONE_SIDED(name, args, op, count, comm, stream, win)                    \
    NEED_REAL(name, ncclSystemError);                                          \
    ncclComm_t held = comm;                                                    \
    if (ckpt_is_replaying()) {                                                      \
        ckpt_on_collective(token(op, count, 0, held), stream);                 \
        return ncclSuccess;                                                    \
    }                                                                          \
    ckpt_history_taint("the program uses one-sided NCCL signals (" #name "): a peer's write into this rank's " \
                       "window cannot be ordered against its snapshot copy");  \
    ncclResult_t r;                                                            \
    if ((comm = ckpt_comm_real(comm, &r)) == NULL && r != ncclSuccess)         \
        return r;                                                              \
    stream = V(stream); /* a standby's, made real at its takeover */           \
    if ((win) && !((win) = ckpt_comm_window(win)))                             \
        return ncclInvalidArgument;                                            \
    ckpt_nccl_depth++;                                                         \
    r = real_##name args;                                                      \
    ckpt_nccl_depth--;                                                         \
    if (r == ncclSuccess && ckpt_active)                                       \
        ckpt_on_collective(token(op, count, 0, held), stream);                 \
    return r

enum { OP_PUT_SIGNAL = 0x100, OP_SIGNAL, OP_WAIT_SIGNAL }; /* tokens only: not the timeline's */

__attribute__((visibility("default"))) ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)
{
    ONE_SIDED(ncclPutSignal, (localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream), OP_PUT_SIGNAL, count, comm, stream, peerWin);
}

__attribute__((visibility("default"))) ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)
{
    ncclWindow_t none = NULL;
    ONE_SIDED(ncclSignal, (peer, sigIdx, ctx, flags, comm, stream), OP_SIGNAL, (size_t)peer, comm, stream, none);
}

__attribute__((visibility("default"))) ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream)
{
    ncclWindow_t none = NULL;
    ONE_SIDED(ncclWaitSignal, (nDesc, signalDescs, comm, stream), OP_WAIT_SIGNAL, (size_t)nDesc, comm, stream, none);
}
