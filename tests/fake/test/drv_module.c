/*
 * Module loading.  Lazily (CUDA_MODULE_LOADING unset or LAZY, CUDA's
 * default since 12.2) a function's first launch in a context loads it, and
 * its code takes device memory between the program's allocations: a small
 * allocation made after a first launch lands elsewhere than one made
 * before it, unless the function was loaded already (a second launch, or
 * cuFuncLoad first).  cuFuncIsLoaded and cuFuncLoad take function handles
 * only; a kernel handle (CUkernel, what NVIDIA's runtime launches) goes
 * through cuKernelGetFunction, which gives a handle of its own, launchable,
 * and loads nothing.  With CUDA_MODULE_LOADING=EAGER (run again as a child)
 * everything counts as loaded and nothing moves.
 */
#include <dlfcn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drv_test.h"

static void one(void **args)
{
    *ARG(args, 0, int32_t *) += 1;
}

static void two(void **args)
{
    *ARG(args, 0, int32_t *) += 2;
}

static void three(void **args)
{
    *ARG(args, 0, int32_t *) += 3;
}

/* Where a 512-byte allocation lands now (it is freed again). */
static CUdeviceptr next_small(void)
{
    CUdeviceptr d = 0;

    if (cuMemAlloc_v2(&d, 512) != CUDA_SUCCESS || cuMemFree_v2(d) != CUDA_SUCCESS)
        return 0;
    return d;
}

static int eager(void)
{
    CUmoduleLoadingMode mode;
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
    CUdeviceptr d, before;

    DRV_SETUP();
    CHECK(cuModuleGetLoadingMode(&mode));
    EXPECT(mode == CU_MODULE_EAGER_LOADING, "loading mode %d under EAGER", (int)mode);
    CHECK(cuFuncIsLoaded(&state, (CUfunction)(void *)one));
    EXPECT(state == CU_FUNCTION_LOADING_STATE_LOADED, "a function not loaded under EAGER");
    CHECK(cuMemAlloc_v2(&d, 4096));
    before = next_small();
    CHECK(LAUNCH(NULL, one, PTR(d)));
    CHECK(cuCtxSynchronize());
    EXPECT(next_small() == before, "a first launch under EAGER moved the next allocation");
    return 0;
}

int main(int argc, char **argv)
{
    CUresult (*kernel_handle)(CUfunction);
    CUmoduleLoadingMode mode;
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
    CUfunction k = (CUfunction)(void *)three, fn = NULL, fn2 = NULL;
    CUdeviceptr d, before;
    drv_slot slot = {{0}};
    void *args[] = {&slot, NULL};
    int32_t v = 0;
    int status;
    pid_t pid;

    if (argc > 1 && strcmp(argv[1], "eager") == 0)
        return eager();
    unsetenv("CUDA_MODULE_LOADING");
    kernel_handle = (CUresult(*)(CUfunction))dlsym(RTLD_DEFAULT, "fakegpu_kernel_handle");
    EXPECT(kernel_handle, "the double exports no fakegpu_kernel_handle");
    DRV_SETUP();
    CHECK(cuModuleGetLoadingMode(&mode));
    EXPECT(mode == CU_MODULE_LAZY_LOADING, "loading mode %d by default", (int)mode);
    CHECK_RES(cuModuleGetLoadingMode(NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAlloc_v2(&d, sizeof(int32_t)));
    CHECK(cuMemsetD8_v2(d, 0, sizeof(int32_t)));

    /* The first launch loads: the next allocation moves past the code. */
    CHECK(cuFuncIsLoaded(&state, (CUfunction)(void *)one));
    EXPECT(state == CU_FUNCTION_LOADING_STATE_UNLOADED, "a function loaded before its first launch");
    before = next_small();
    CHECK(LAUNCH(NULL, one, PTR(d)));
    EXPECT(next_small() != before, "a first launch took no device memory");
    CHECK(cuFuncIsLoaded(&state, (CUfunction)(void *)one));
    EXPECT(state == CU_FUNCTION_LOADING_STATE_LOADED, "a launched function is not loaded");
    before = next_small();
    CHECK(LAUNCH(NULL, one, PTR(d)));
    EXPECT(next_small() == before, "a second launch took device memory");

    /* cuFuncLoad is what a first launch does; after it, a launch loads nothing. */
    CHECK(cuFuncLoad((CUfunction)(void *)two));
    before = next_small();
    CHECK(LAUNCH(NULL, two, PTR(d)));
    EXPECT(next_small() == before, "a launch after cuFuncLoad took device memory");

    /* A kernel handle: only through its function in the context. */
    CHECK(kernel_handle(k));
    CHECK_RES(cuFuncIsLoaded(&state, k), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuFuncLoad(k), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuKernelGetFunction(&fn, (CUkernel)(void *)one), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuKernelGetFunction(NULL, (CUkernel)(void *)k), CUDA_ERROR_INVALID_VALUE);
    before = next_small();
    CHECK(cuKernelGetFunction(&fn, (CUkernel)(void *)k));
    CHECK(cuKernelGetFunction(&fn2, (CUkernel)(void *)k));
    EXPECT(fn && fn != k && fn == fn2, "cuKernelGetFunction gave %p, then %p, for kernel %p", (void *)fn,
           (void *)fn2, (void *)k);
    CHECK(cuFuncIsLoaded(&state, fn));
    EXPECT(state == CU_FUNCTION_LOADING_STATE_UNLOADED && next_small() == before,
           "cuKernelGetFunction loaded the function");
    CHECK(cuFuncLoad(fn));
    EXPECT(next_small() != before, "cuFuncLoad took no device memory");
    before = next_small();
    CHECK(LAUNCH(NULL, three, PTR(d))); /* the kernel handle, as the runtime launches it */
    memcpy(&slot, &(uint64_t){PTR(d)}, sizeof(uint64_t));
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)); /* its function handle */
    EXPECT(next_small() == before, "launching a loaded kernel took device memory");
    /* More than 48 KiB of dynamic shared memory only once the function
     * allows it, in this context; a kernel handle's attributes are its
     * function's (cuKernelGetFunction first). */
    int attr = 0;
    CHECK_RES(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 64 << 10, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuFuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn));
    EXPECT(attr == 48 << 10, "dynamic shared memory %d by default", attr);
    CHECK_RES(cuFuncSetAttribute((CUfunction)(void *)k, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10),
              CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20),
              CUDA_ERROR_INVALID_VALUE);
    CHECK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10));
    CHECK(cuFuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn));
    EXPECT(attr == 64 << 10, "dynamic shared memory %d once set", attr);
    CHECK(cuLaunchKernel((CUfunction)(void *)k, 1, 1, 1, 1, 1, 1, 64 << 10, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH_v2(&v, d, sizeof(v)));
    EXPECT(v == 1 + 1 + 2 + 3 + 3 + 3, "the kernels added up to %d", v);
    CHECK(cuMemFree_v2(d));

    /* EAGER, read when the driver starts: a fresh process. */
    fflush(NULL);
    if ((pid = fork()) == 0) {
        setenv("CUDA_MODULE_LOADING", "EAGER", 1);
        execl("/proc/self/exe", argv[0], "eager", (char *)NULL);
        _exit(127);
    }
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the EAGER run failed");
    return 0;
}
