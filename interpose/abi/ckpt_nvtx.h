/*
 * The part of the NVTX v3 injection ABI that libckpt uses as an NVTX tool
 * (nvtx3/nvToolsExt.h and nvtx3/nvtxDetail/nvtxTypes.h, CUDA 13).  NVTX v3
 * is header-only: at a program's first NVTX call the client in the program
 * dlopens $NVTX_INJECTION64_PATH and calls its InitializeInjectionNvtx2 with
 * a getExportTable function; the tool asks it for the callback table
 * (NVTX_ETID_CALLBACKS), gets the per-module arrays of pointers to the
 * client's function-pointer slots, and stores its handlers there.  Slots the
 * tool leaves alone become no-ops.  Every type, value and member order here
 * must match the real headers: tests/abi checks them whenever a toolkit is
 * present.  With CKPT_ABI_PROTOTYPES_ONLY only the function-pointer types
 * and the entry point are declared (C11 allows an identical typedef twice,
 * so after the real headers any difference is a compile error).  Never put
 * project code here: this file only restates NVIDIA's ABI.
 */
#ifndef CKPT_NVTX_H
#define CKPT_NVTX_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CKPT_ABI_PROTOTYPES_ONLY

typedef uint64_t nvtxRangeId_t;

/* Opaque to clients and to libckpt, which registers no strings. */
typedef struct nvtxStringRegistration_st *nvtxStringHandle_t;

typedef enum nvtxMessageType_t {
    NVTX_MESSAGE_UNKNOWN = 0,
    NVTX_MESSAGE_TYPE_ASCII = 1,
    NVTX_MESSAGE_TYPE_UNICODE = 2,
    NVTX_MESSAGE_TYPE_REGISTERED = 3
} nvtxMessageType_t;

typedef union nvtxMessageValue_t {
    const char *ascii;
    const wchar_t *unicode;
    nvtxStringHandle_t registered;
} nvtxMessageValue_t;

/* What nvtxRangePushEx / nvtxRangeStartEx receive.  size says how much of
 * it the caller filled in. */
typedef struct nvtxEventAttributes_v2 {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union payload_t {
        uint64_t ullValue;
        int64_t llValue;
        double dValue;
        uint32_t uiValue;
        int32_t iValue;
        float fValue;
    } payload;
    int32_t messageType; /* nvtxMessageType_t */
    nvtxMessageValue_t message;
} nvtxEventAttributes_v2;

typedef struct nvtxEventAttributes_v2 nvtxEventAttributes_t;

typedef enum NvtxCallbackModule {
    NVTX_CB_MODULE_INVALID = 0,
    NVTX_CB_MODULE_CORE = 1,
    NVTX_CB_MODULE_CUDA = 2,
    NVTX_CB_MODULE_OPENCL = 3,
    NVTX_CB_MODULE_CUDART = 4,
    NVTX_CB_MODULE_CORE2 = 5,
    NVTX_CB_MODULE_SYNC = 6,
    NVTX_CB_MODULE_SIZE = 7,
    NVTX_CB_MODULE_FORCE_INT = 0x7fffffff
} NvtxCallbackModule;

/* Indices into the NVTX_CB_MODULE_CORE table. */
typedef enum NvtxCallbackIdCore {
    NVTX_CBID_CORE_INVALID = 0,
    NVTX_CBID_CORE_MarkEx = 1,
    NVTX_CBID_CORE_MarkA = 2,
    NVTX_CBID_CORE_MarkW = 3,
    NVTX_CBID_CORE_RangeStartEx = 4,
    NVTX_CBID_CORE_RangeStartA = 5,
    NVTX_CBID_CORE_RangeStartW = 6,
    NVTX_CBID_CORE_RangeEnd = 7,
    NVTX_CBID_CORE_RangePushEx = 8,
    NVTX_CBID_CORE_RangePushA = 9,
    NVTX_CBID_CORE_RangePushW = 10,
    NVTX_CBID_CORE_RangePop = 11,
    NVTX_CBID_CORE_NameCategoryA = 12,
    NVTX_CBID_CORE_NameCategoryW = 13,
    NVTX_CBID_CORE_NameOsThreadA = 14,
    NVTX_CBID_CORE_NameOsThreadW = 15,
    NVTX_CBID_CORE_SIZE = 16,
    NVTX_CBID_CORE_FORCE_INT = 0x7fffffff
} NvtxCallbackIdCore;

typedef enum NvtxExportTableID {
    NVTX_ETID_INVALID = 0,
    NVTX_ETID_CALLBACKS = 1,
    NVTX_ETID_RESERVED0 = 2,
    NVTX_ETID_VERSIONINFO = 3,
    NVTX_ETID_SIZE = 4,
    NVTX_ETID_FORCE_INT = 0x7fffffff
} NvtxExportTableID;

#endif /* CKPT_ABI_PROTOTYPES_ONLY */

/* A generic function pointer: a slot is written with the handler cast to
 * this type.  A module table is an array of pointers to the slots, indexed
 * by callback id. */
typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;

typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t exportTableId);
typedef int (*NvtxInitializeInjectionNvtxFunc_t)(NvtxGetExportTableFunc_t exportTable);

/* The handlers' types, one per core range call. */
typedef nvtxRangeId_t (*nvtxRangeStartEx_impl_fntype)(const nvtxEventAttributes_t *eventAttrib);
typedef nvtxRangeId_t (*nvtxRangeStartA_impl_fntype)(const char *message);
typedef nvtxRangeId_t (*nvtxRangeStartW_impl_fntype)(const wchar_t *message);
typedef void (*nvtxRangeEnd_impl_fntype)(nvtxRangeId_t id);
typedef int (*nvtxRangePushEx_impl_fntype)(const nvtxEventAttributes_t *eventAttrib);
typedef int (*nvtxRangePushA_impl_fntype)(const char *message);
typedef int (*nvtxRangePushW_impl_fntype)(const wchar_t *message);
typedef int (*nvtxRangePop_impl_fntype)(void);

#ifndef CKPT_ABI_PROTOTYPES_ONLY

/* getExportTable(NVTX_ETID_CALLBACKS).  GetModuleFunctionTable returns
 * non-zero when the module exists; *out_size is then the module's _SIZE as
 * the client was built (ids below it are valid; the entry at it is NULL). */
typedef struct NvtxExportTableCallbacks {
    size_t struct_size;
    int (*GetModuleFunctionTable)(NvtxCallbackModule callback_module, NvtxFunctionTable *out_table,
                                  unsigned int *out_size);
} NvtxExportTableCallbacks;

/* getExportTable(NVTX_ETID_VERSIONINFO): the client's NVTX version, and
 * where a tool says which version it was written for. */
typedef struct NvtxExportTableVersionInfo {
    size_t struct_size;
    uint32_t version;
    uint32_t reserved0;
    void (*SetInjectionNvtxVersion)(uint32_t version);
} NvtxExportTableVersionInfo;

#endif /* CKPT_ABI_PROTOTYPES_ONLY */

/* The tool's entry point, looked up by name in the injection library.
 * Returns non-zero when the tool attached; on zero the client unloads it
 * and turns every NVTX call into a no-op. */
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable);

#ifdef __cplusplus
}
#endif

#endif
