/*
 * The subset of the NCCL API (nccl.h, NCCL 2.28; and what NCCL 2.29 added
 * that takes a communicator) that libckpt, its test double and the example
 * programs need.  It only restates NCCL's ABI and is
 * checked against the real nccl.h by tests/abi when a toolkit is present.
 * Every ncclX also exists as pncclX in the real library (and the double).
 */
#ifndef CKPT_NCCL_H
#define CKPT_NCCL_H

#include <limits.h>
#include "ckpt_cudart.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CKPT_ABI_PROTOTYPES_ONLY

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) \
    (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096
#define NCCL_COMM_NULL NULL
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {                                          \
    sizeof(ncclConfig_t), 0xcafebeef,                                      \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),                      \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,   \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,   \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,   \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,   \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                          \
}

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
    ncclScalarDevice = 0,
    ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

#define NCCL_REVOKE_DEFAULT 0x00

/* NCCL 2.29: suspending a communicator's memory, and one-sided signals.
 * (abi: newer than 2.28: tests/abi/check compares what lies between these
 * markers only with headers that have it.) */
#define NCCL_SUSPEND_MEM 0x01
typedef enum {
    ncclStatGpuMemSuspend = 0,
    ncclStatGpuMemSuspended = 1,
    ncclStatGpuMemPersist = 2,
    ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
typedef struct {
    int opCnt;
    int peer;
    int sigIdx;
    int ctx;
} ncclWaitSignalDesc_t;
/* (abi: end of newer than 2.28) */

#endif /* CKPT_ABI_PROTOTYPES_ONLY */

/* Each name is declared twice, as NCCL does: ncclX and its pncclX alias. */
#define CKPT_NCCL_DECLARE(ret, name, params) ret name params; ret p##name params;
CKPT_NCCL_DECLARE(ncclResult_t, ncclGetVersion, (int *version))
CKPT_NCCL_DECLARE(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *uniqueId))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommInitRank, (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommInitAll, (ncclComm_t *comm, int ndev, const int *devlist))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommInitRankScalable, (ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommShrink, (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device))
CKPT_NCCL_DECLARE(const char *, ncclGetErrorString, (ncclResult_t result))
CKPT_NCCL_DECLARE(const char *, ncclGetLastError, (ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclGroupStart, (void))
CKPT_NCCL_DECLARE(ncclResult_t, ncclGroupEnd, (void))
CKPT_NCCL_DECLARE(ncclResult_t, ncclAllReduce, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclBroadcast, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclReduce, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclAllGather, (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclReduceScatter, (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclBcast, (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclAlltoAll, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclGather, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclScatter, (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclSend, (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclRecv, (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommWindowRegister, (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
CKPT_NCCL_DECLARE(ncclResult_t, ncclRedOpCreatePreMulSum, (ncclRedOp_t *op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size))
CKPT_NCCL_DECLARE(ncclResult_t, ncclMemFree, (void *ptr))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
/* NCCL 2.29.2 and 2.29.7 (checked against headers that have them). */
#if !defined(CKPT_ABI_PROTOTYPES_ONLY) || NCCL_VERSION_CODE >= 22902
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId *uniqueId))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommGrow, (ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm, ncclConfig_t *config))
CKPT_NCCL_DECLARE(ncclResult_t, ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void **outUserPtr))
CKPT_NCCL_DECLARE(ncclResult_t, ncclPutSignal, (const void *localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclSignal, (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream))
CKPT_NCCL_DECLARE(ncclResult_t, ncclWaitSignal, (int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream))
#endif
#if !defined(CKPT_ABI_PROTOTYPES_ONLY) || NCCL_VERSION_CODE >= 22907
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommResume, (ncclComm_t comm))
CKPT_NCCL_DECLARE(ncclResult_t, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value))
#endif
#undef CKPT_NCCL_DECLARE

#ifdef __cplusplus
}
#endif
#endif /* CKPT_NCCL_H */
