/*
 * The NCCL profiler plugin ABI as NCCL 2.28 defines it (NCCL's
 * src/include/plugin/nccl_profiler.h, profiler/profiler_v4.h and
 * profiler/profiler_v5.h; v6 only arrived with NCCL 2.29).  A plugin is a
 * shared object exporting a struct named ncclProfiler_v5 (or _v4) of the
 * matching type; NCCL dlopens it at the first communicator init, calls init
 * once per communicator, then startEvent / recordEventState / stopEvent from
 * any of its threads, and finalize when the communicator goes away.
 * libckpt.so exports these symbols itself, and the test double's libnccl
 * calls them.  NCCL ships no installed header for this ABI, so no toolkit
 * check covers this file: every type, value and member order here must be
 * copied from NCCL's sources, never invented.
 */
#ifndef CKPT_NCCL_PROFILER_H
#define CKPT_NCCL_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt_nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The logger NCCL hands to init (NCCL's debug.h). */
typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
    NCCL_INIT = 0x1,
    NCCL_COLL = 0x2,
    NCCL_P2P = 0x4,
    NCCL_SHM = 0x8,
    NCCL_NET = 0x10,
    NCCL_GRAPH = 0x20,
    NCCL_TUNING = 0x40,
    NCCL_ENV = 0x80,
    NCCL_ALLOC = 0x100,
    NCCL_CALL = 0x200,
    NCCL_PROXY = 0x400,
    NCCL_NVLS = 0x800,
    NCCL_BOOTSTRAP = 0x1000,
    NCCL_REG = 0x2000,
    NCCL_PROFILE = 0x4000,
    NCCL_RAS = 0x8000,
    NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags,
                                  const char *file, int line, const char *fmt, ...);

/* Event types: the descriptor's type, and bits of the activation mask. */
enum {
    ncclProfileGroup = (1 << 0),        /* group event */
    ncclProfileColl = (1 << 1),         /* host collective call */
    ncclProfileP2p = (1 << 2),          /* host point-to-point call */
    ncclProfileProxyOp = (1 << 3),      /* proxy operation */
    ncclProfileProxyStep = (1 << 4),    /* proxy step */
    ncclProfileProxyCtrl = (1 << 5),    /* proxy control */
    ncclProfileKernelCh = (1 << 6),     /* kernel channel */
    ncclProfileNetPlugin = (1 << 7),    /* network plugin-defined events */
    ncclProfileGroupApi = (1 << 8),     /* ncclGroupStart/End API (v5) */
    ncclProfileCollApi = (1 << 9),      /* collective API call (v5) */
    ncclProfileP2pApi = (1 << 10),      /* point-to-point API call (v5) */
    ncclProfileKernelLaunch = (1 << 11) /* kernel launch (v5) */
};

/* State transitions reported through recordEventState. */
typedef enum {
    ncclProfilerProxyOpSendPosted = 0,      /* deprecated in v4 */
    ncclProfilerProxyOpSendRemFifoWait = 1, /* deprecated in v4 */
    ncclProfilerProxyOpSendTransmitted = 2, /* deprecated in v4 */
    ncclProfilerProxyOpSendDone = 3,        /* deprecated in v4 */
    ncclProfilerProxyOpRecvPosted = 4,      /* deprecated in v4 */
    ncclProfilerProxyOpRecvReceived = 5,    /* deprecated in v4 */
    ncclProfilerProxyOpRecvTransmitted = 6, /* deprecated in v4 */
    ncclProfilerProxyOpRecvDone = 7,        /* deprecated in v4 */
    ncclProfilerProxyOpInProgress_v4 = 19,

    /* proxy step states */
    ncclProfilerProxyStepSendGPUWait = 8,
    ncclProfilerProxyStepSendPeerWait_v4 = 20,
    ncclProfilerProxyStepSendWait = 9,
    ncclProfilerProxyStepRecvWait = 10,
    ncclProfilerProxyStepRecvFlushWait = 11,
    ncclProfilerProxyStepRecvGPUWait = 12,

    /* proxy control states */
    ncclProfilerProxyCtrlIdle = 13,
    ncclProfilerProxyCtrlActive = 14,
    ncclProfilerProxyCtrlSleep = 15,
    ncclProfilerProxyCtrlWakeup = 16,
    ncclProfilerProxyCtrlAppend = 17,
    ncclProfilerProxyCtrlAppendEnd = 18,

    /* network plugin-defined event states */
    ncclProfilerNetPluginUpdate = 21,

    /* kernel channel: stop, with the GPU timer of the end in the args */
    ncclProfilerKernelChStop = 22,

    /* group API states (v5): end of ncclGroupStart, start of ncclGroupEnd */
    ncclProfilerEndGroupApiStart = 23,
    ncclProfilerBeginGroupApiEnd = 24
} ncclProfilerEventState_t;

typedef ncclProfilerEventState_t ncclProfilerEventState_v4_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;

/* ---- version 4 (NCCL 2.26) ------------------------------------------ */

typedef struct {
    uint8_t type;    /* ncclProfileColl, ... */
    void *parentObj; /* the parent event's handle (for a Coll: its Group) */
    int rank;        /* originating rank */
    union {
        struct {
            uint64_t seqNumber;
            const char *func;
            void const *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
        } coll;

        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
        } p2p;

        struct {
            pid_t pid;         /* pid of the originating process */
            uint8_t channelId; /* channel of this proxy operation */
            int peer;          /* remote rank for send/recv */
            int nSteps;        /* number of steps of this proxy operation */
            int chunkSize;     /* bytes moved by this proxy operation */
            int isSend;
        } proxyOp;

        struct {
            int step;
        } proxyStep;

        struct {
            uint8_t channelId;
            uint64_t pTimer; /* start timestamp from the GPU globaltimer */
        } kernelCh;

        struct {
            int64_t id;
            void *data;
        } netPlugin;
    };
} ncclProfilerEventDescr_v4_t;

typedef union {
    struct {
        size_t transSize;
    } proxyStep;

    struct {
        int appendedProxyOps;
    } proxyCtrl;

    struct {
        void *data;
    } netPlugin;

    struct {
        uint64_t pTimer; /* GPU globaltimer at the stop of a KernelCh */
    } kernelCh;
} ncclProfilerEventStateArgs_v4_t;

typedef struct {
    const char *name;
    /* One context per communicator; the plugin sets *eActivationMask, and
       may change it later through the same pointer. */
    ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                         uint64_t commHash, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v4_t eState,
                                     ncclProfilerEventStateArgs_v4_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v4_t;

/* ---- version 5 (NCCL 2.27, 2.28) ------------------------------------ */

typedef struct {
    uint64_t type;   /* ncclProfileColl, ... */
    void *parentObj; /* the parent event's handle (for a Coll: its CollApi) */
    int rank;        /* originating rank */
    union {
        struct {
            bool graphCaptured;
            int groupDepth;
        } groupApi;

        struct {
            const char *func;
            size_t count;
            const char *datatype;
            int root;
            void *stream;
            bool graphCaptured;
        } collApi;

        struct {
            const char *func;
            size_t count;
            const char *datatype;
            void *stream;
            bool graphCaptured;
        } p2pApi;

        struct {
            void *stream;
        } kernelLaunch;

        struct {
            uint64_t seqNumber;
            const char *func;
            void const *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
            void *parentGroup; /* the Group event, as v4's parentObj was */
        } coll;

        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
            void *parentGroup; /* the Group event, as v4's parentObj was */
        } p2p;

        struct {
            pid_t pid;         /* pid of the originating process */
            uint8_t channelId; /* channel of this proxy operation */
            int peer;          /* remote rank for send/recv */
            int nSteps;        /* number of steps of this proxy operation */
            int chunkSize;     /* bytes moved by this proxy operation */
            int isSend;
        } proxyOp;

        struct {
            int step;
        } proxyStep;

        struct {
            uint8_t channelId;
            uint64_t pTimer; /* start timestamp from the GPU globaltimer */
        } kernelCh;

        struct {
            int64_t id;
            void *data;
        } netPlugin;
    };
} ncclProfilerEventDescr_v5_t;

typedef union {
    struct {
        size_t transSize;
    } proxyStep;

    struct {
        int appendedProxyOps;
    } proxyCtrl;

    struct {
        void *data;
    } netPlugin;

    struct {
        uint64_t pTimer; /* GPU globaltimer at the stop of a KernelCh */
    } kernelCh;
} ncclProfilerEventStateArgs_v5_t;

typedef struct {
    const char *name;
    /* As v4, with the communicator id first and no commHash. */
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                         const char *commName, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v5_t eState,
                                     ncclProfilerEventStateArgs_v5_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

#ifdef __cplusplus
}
#endif
#endif /* CKPT_NCCL_PROFILER_H */
