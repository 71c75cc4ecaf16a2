/*
 * cuFuncGetParamInfo in the double's kernel convention: parameter i is the
 * 16-byte slot at offset 16 * i.  The driver cannot know how many
 * parameters a host-function kernel takes: without a declaration an index
 * up to the double's 64 arguments is answered; once the program declared
 * the count (fakegpu_func_set_param_count, the double's optional registry,
 * found with dlsym as a program would), an index past it is refused with
 * CUDA_ERROR_INVALID_VALUE, and so is a launch with fewer arguments.
 */
#include <dlfcn.h>

#include "drv_test.h"

static void two(void **args)
{
    *ARG(args, 0, int32_t *) = ARG(args, 1, int32_t);
}

static void undeclared(void **args)
{
    (void)args;
}

int main(void)
{
    CUresult (*declare)(CUfunction, unsigned int);
    CUfunction f = (CUfunction)(void *)two, u = (CUfunction)(void *)undeclared;
    size_t off = 1, size = 1;
    CUdeviceptr d;
    int32_t v = 0;

    declare = (CUresult(*)(CUfunction, unsigned int))dlsym(RTLD_DEFAULT, "fakegpu_func_set_param_count");
    EXPECT(declare, "the double exports no fakegpu_func_set_param_count");
    CHECK_RES(cuFuncGetParamInfo(f, 0, &off, &size), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(declare(f, 2)); /* before cuInit, as a program's start-up would */
    CHECK_RES(declare(f, 65), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(declare(NULL, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_SETUP();

    CHECK(cuFuncGetParamInfo(f, 1, &off, &size));
    EXPECT(off == 16 && size == 16, "parameter 1 at %zu, %zu bytes", off, size);
    CHECK(cuFuncGetParamInfo(f, 0, &off, NULL));
    EXPECT(off == 0, "parameter 0 at %zu", off);
    CHECK_RES(cuFuncGetParamInfo(f, 2, &off, &size), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuFuncGetParamInfo(f, 0, NULL, &size), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuFuncGetParamInfo(NULL, 0, &off, &size), CUDA_ERROR_INVALID_VALUE);

    /* Undeclared: anything the convention allows. */
    CHECK(cuFuncGetParamInfo(u, 63, &off, &size));
    EXPECT(off == 63 * 16 && size == 16, "parameter 63 at %zu", off);
    CHECK_RES(cuFuncGetParamInfo(u, 64, &off, &size), CUDA_ERROR_INVALID_VALUE);

    /* A declared kernel is launched with at least its parameters. */
    CHECK(cuMemAllocManaged(&d, sizeof(int32_t), CU_MEM_ATTACH_GLOBAL));
    CHECK_RES(LAUNCH(NULL, two, PTR(d)), CUDA_ERROR_INVALID_VALUE);
    CHECK(LAUNCH(NULL, two, PTR(d), 7));
    CHECK(LAUNCH(NULL, undeclared, PTR(d)));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH_v2(&v, d, sizeof(v)));
    EXPECT(v == 7, "the kernel wrote %d", v);
    /* A new declaration replaces the old one. */
    CHECK(declare(f, 3));
    CHECK(cuFuncGetParamInfo(f, 2, &off, &size));
    CHECK_RES(LAUNCH(NULL, two, PTR(d), 7), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree_v2(d));
    return 0;
}
