/*
 * Wrappers of the NCCL API.  While a thread is inside NCCL, whatever device
 * memory it allocates belongs to NCCL (communicator buffers, FIFOs, flags):
 * the depth marks those allocations internal, so a restore can never write
 * old bytes into a live communicator.  Each wrapper forwards to the real
 * pncclX, the strong definition behind NCCL's weak ncclX.
 */
#include "interpose.h"

#define FORWARD(name, args)                                                    \
    NEED_REAL(name, ncclSystemError);                                          \
    ckpt_nccl_depth++;                                                         \
    ncclResult_t r = real_##name args;                                         \
    ckpt_nccl_depth--;                                                         \
    return r

__attribute__((visibility("default"))) ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    FORWARD(ncclCommInitRank, (comm, nranks, commId, rank));
}

__attribute__((visibility("default"))) ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    FORWARD(ncclCommInitRankConfig, (comm, nranks, commId, rank, config));
}

__attribute__((visibility("default"))) ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    FORWARD(ncclCommSplit, (comm, color, key, newcomm, config));
}

__attribute__((visibility("default"))) ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    FORWARD(ncclCommDestroy, (comm));
}

__attribute__((visibility("default"))) ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    FORWARD(ncclCommAbort, (comm));
}

__attribute__((visibility("default"))) ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    FORWARD(ncclCommFinalize, (comm));
}

__attribute__((visibility("default"))) ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    FORWARD(ncclMemAlloc, (ptr, size));
}

__attribute__((visibility("default"))) ncclResult_t ncclMemFree(void *ptr)
{
    FORWARD(ncclMemFree, (ptr));
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
    FORWARD(ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
}

__attribute__((visibility("default"))) ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(ncclBroadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream));
}

__attribute__((visibility("default"))) ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(ncclReduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
}

__attribute__((visibility("default"))) ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(ncclAllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream));
}

__attribute__((visibility("default"))) ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(ncclReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
}

__attribute__((visibility("default"))) ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(ncclSend, (sendbuff, count, datatype, peer, comm, stream));
}

__attribute__((visibility("default"))) ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)
{
    FORWARD(ncclRecv, (recvbuff, count, datatype, peer, comm, stream));
}
