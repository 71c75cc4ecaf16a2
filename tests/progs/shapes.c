/*
 * The ways a program reaches CUDA and NCCL, one per mode, each making the
 * same three device allocations and the same iterations (a copy in, a
 * host sync), so the capture tests can check that libckpt saw every
 * allocation whichever door the program used:
 *   linked    the runtime API, linked against libcudart.so.13 (plus one
 *             managed allocation)
 *   static    as nvcc's static runtime does: dlopen("libcuda.so.1"), then
 *             dlsym(handle, "cuGetProcAddress_v2") and every driver entry
 *             point through it
 *   pytorch   libcudart.so.13 dlopen'ed with RTLD_GLOBAL after start, driver
 *             calls through cudaGetDriverEntryPointByVersion
 *   nccl      the runtime linked, libnccl.so.2 dlopen'ed late; one-rank
 *             communicator and an all-reduce per iteration
 * Only "linked" uses link-time symbols; the others name nothing from the
 * GPU libraries, so the linker (--as-needed) records no dependency on them.
 * Prints "allocations <n>" at the end.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NALLOC 3
static const size_t sizes[NALLOC] = {1 << 12, 1 << 16, 3 << 14};
static int iters = 5;
static int extra_allocations; /* beyond the NALLOC every shape makes */

static void die(const char *what)
{
    fprintf(stderr, "shapes: %s\n", what);
    exit(1);
}

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p)
        die(name);
    return p;
}

/* The driver through cuGetProcAddress, as the static runtime does. */
static void run_driver(__typeof__(&cuGetProcAddress_v2) gpa, int version)
{
    CUdriverProcAddressQueryResult st;
    /* cuGetProcAddress takes base names; the version picks the variant. */
#define GET(var, fn, base)                                                     \
    __typeof__(&fn) var;                                                       \
    if (gpa(base, (void **)&var, version, 0, &st) != CUDA_SUCCESS) die(base)
    GET(init, cuInit, "cuInit");
    GET(retain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    GET(setcur, cuCtxSetCurrent, "cuCtxSetCurrent");
    GET(alloc, cuMemAlloc_v2, "cuMemAlloc");
    GET(htod, cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync");
    GET(mkstream, cuStreamCreate, "cuStreamCreate");
    GET(sync, cuStreamSynchronize, "cuStreamSynchronize");
#undef GET
    CUcontext ctx;
    CUstream s;
    CUdeviceptr d[NALLOC];
    static char host[1 << 16];
    if (init(0) || retain(&ctx, 0) || setcur(ctx) || mkstream(&s, 0))
        die("driver init");
    for (int i = 0; i < NALLOC; i++)
        if (alloc(&d[i], sizes[i]))
            die("cuMemAlloc_v2");
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < NALLOC; i++)
            htod(d[i], host, sizes[i] < sizeof(host) ? sizes[i] : sizeof(host), s);
        if (sync(s))
            die("cuStreamSynchronize");
    }
}

static void shape_static(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        die(dlerror());
    run_driver((__typeof__(&cuGetProcAddress_v2))sym(h, "cuGetProcAddress_v2"), 13000);
}

static void shape_pytorch(void)
{
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!rt)
        die(dlerror());
    __typeof__(&cudaGetDriverEntryPointByVersion) entry = (__typeof__(entry))sym(rt, "cudaGetDriverEntryPointByVersion");
    __typeof__(&cudaFree) rt_free = (__typeof__(rt_free))sym(rt, "cudaFree");
    rt_free(NULL); /* the runtime initialises itself, as torch.cuda.init() does */
    enum cudaDriverEntryPointQueryResult st;
    void *gpa = NULL;
    if (entry("cuGetProcAddress", &gpa, 13000, cudaEnableDefault, &st) != cudaSuccess || !gpa)
        die("cudaGetDriverEntryPointByVersion(cuGetProcAddress)");
    run_driver((__typeof__(&cuGetProcAddress_v2))gpa, 13000);
}

/* Also one managed allocation: libckpt tracks those too. */
static void shape_linked(void)
{
    void *d[NALLOC], *managed;
    static char host[1 << 16];
    cudaStream_t s;
    if (cudaStreamCreate(&s))
        die("cudaStreamCreate");
    for (int i = 0; i < NALLOC; i++)
        if (cudaMalloc(&d[i], sizes[i]))
            die("cudaMalloc");
    if (cudaMallocManaged(&managed, 1 << 12, cudaMemAttachGlobal))
        die("cudaMallocManaged");
    extra_allocations = 1;
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < NALLOC; i++)
            cudaMemcpyAsync(d[i], host, sizes[i] < sizeof(host) ? sizes[i] : sizeof(host), cudaMemcpyHostToDevice, s);
        cudaStreamSynchronize(s);
    }
}

static void shape_nccl(void)
{
    void *d[NALLOC];
    cudaStream_t s;
    if (cudaStreamCreate(&s))
        die("cudaStreamCreate");
    for (int i = 0; i < NALLOC; i++)
        if (cudaMalloc(&d[i], sizes[i]))
            die("cudaMalloc");
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        die(dlerror());
    __typeof__(&ncclGetUniqueId) get_id = (__typeof__(get_id))sym(h, "ncclGetUniqueId");
    __typeof__(&ncclCommInitRank) init = (__typeof__(init))sym(h, "ncclCommInitRank");
    __typeof__(&ncclAllReduce) allreduce = (__typeof__(allreduce))sym(h, "ncclAllReduce");
    __typeof__(&ncclCommDestroy) destroy = (__typeof__(destroy))sym(h, "ncclCommDestroy");
    ncclUniqueId id;
    ncclComm_t comm;
    if (get_id(&id) || init(&comm, 1, id, 0))
        die("ncclCommInitRank");
    for (int it = 0; it < iters; it++) {
        if (allreduce(d[1], d[1], sizes[1] / 4, ncclFloat, ncclSum, comm, s))
            die("ncclAllReduce");
        cudaStreamSynchronize(s);
    }
    destroy(comm);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shapes linked|static|pytorch|nccl [iterations]\n");
        return 2;
    }
    if (argc > 2)
        iters = atoi(argv[2]);
    if (strcmp(argv[1], "static") == 0)
        shape_static();
    else if (strcmp(argv[1], "pytorch") == 0)
        shape_pytorch();
    else if (strcmp(argv[1], "linked") == 0)
        shape_linked();
    else if (strcmp(argv[1], "nccl") == 0)
        shape_nccl();
    else
        return 2;
    printf("allocations %d\n", NALLOC + extra_allocations);
    return 0;
}
