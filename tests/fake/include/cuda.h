/*
 * The test double's cuda.h: the project's declarations of the real ABI
 * (interpose/abi/ckpt_cuda.h), then the entry points the double's driver
 * implements beyond them, which libckpt does not hook: legacy v1 variants
 * (what cuGetProcAddress gives a caller asking for a CUDA version older
 * than the _v2 one), capture queries, graph update, stream callbacks and
 * kernel parameter queries.  Every type, value and prototype below must
 * match NVIDIA's cuda.h of CUDA 13.0 (the v1 prototypes as it declares them
 * under __CUDA_API_VERSION_INTERNAL); define CKPT_ABI_PROTOTYPES_ONLY for
 * the prototypes alone, as for ckpt_cuda.h.  Values missing from
 * ckpt_cuda.h's CUresult enum are macros here.
 */
#ifndef FAKEGPU_CUDA_H
#define FAKEGPU_CUDA_H

#include "ckpt_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CKPT_ABI_PROTOTYPES_ONLY

#define CUDA_ERROR_INVALID_IMAGE ((CUresult)200)
#define CUDA_ERROR_LOSSY_QUERY ((CUresult)402)
#define CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE ((CUresult)910)

typedef unsigned int CUdeviceptr_v1;
typedef struct CUgraphNode_st *CUgraphNode;
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;

typedef enum CUgraphExecUpdateResult_enum {
    CU_GRAPH_EXEC_UPDATE_SUCCESS = 0x0,
    CU_GRAPH_EXEC_UPDATE_ERROR = 0x1,
    CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 0x2,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED = 0x3,
    CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED = 0x4,
    CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED = 0x5,
    CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED = 0x6,
    CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE = 0x7,
    CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED = 0x8
} CUgraphExecUpdateResult;

typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;

#endif /* CKPT_ABI_PROTOTYPES_ONLY */

/* Legacy variants: 32-bit device pointers and sizes, capture without a mode. */
CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult cuMemFree(CUdeviceptr_v1 dptr);
CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount);
CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount);
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out);
CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out);

CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out, CUgraphExecUpdateResult *updateResult_out);
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);

CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags);
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags);

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);

#ifndef CKPT_ABI_PROTOTYPES_ONLY
/*
 * Not CUDA: the double's optional registry of kernel parameter counts.  A
 * kernel of the double is a host function whose parameter count the
 * driver cannot know; a program (or a kernel convention such as
 * examples/common/kernels.h) may declare it once, after which
 * cuFuncGetParamInfo refuses an index past it and cuLaunchKernel refuses a
 * launch with another count (CUDA_ERROR_INVALID_VALUE).  Exported under
 * the double's own prefix, never through cuGetProcAddress; absent from a
 * real driver, so look it up with dlsym and do without it there.
 */
CUresult fakegpu_func_set_param_count(CUfunction func, unsigned int count);
/* Not CUDA: marks func as a library kernel handle (CUkernel), as the
 * runtime launches them: cuFuncGetParamInfo refuses it with
 * CUDA_ERROR_INVALID_HANDLE, cuKernelGetParamInfo describes it. */
CUresult fakegpu_kernel_handle(CUfunction func);

/*
 * The double's image for cuLibraryLoadData, standing in for a fatbin: the
 * library's device variables (__device__, or __managed__ with managed set),
 * each of size bytes, initialised from init (or zeroed when NULL), found
 * by name with cuLibraryGetGlobal or cuLibraryGetManaged, freed by
 * cuLibraryUnload.  A real driver refuses it: a program using it runs only
 * on the double.
 */
#define FAKEGPU_LIBRARY_MAGIC 0x4c424746u /* "FGBL" */
struct fakegpu_library_var {
    const char *name;
    size_t size;
    int managed;
    const void *init;
};
struct fakegpu_library_image {
    unsigned int magic;
    unsigned int nvars;
    const struct fakegpu_library_var *vars;
};
#endif

#ifdef __cplusplus
}
#endif
#endif /* FAKEGPU_CUDA_H */
