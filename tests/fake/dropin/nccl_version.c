/*
 * A drop-in proof for the double's NCCL: built against NVIDIA's nccl.h and
 * linked against the real libnccl.so.2 (tests/scenarios/double_dropin.bats),
 * then run with the double first on the library path.  It prints the
 * version ncclGetVersion reports and the file the function came from.  It
 * must stay plain NCCL C: nothing here may know about the double.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include <nccl.h>

int main(void)
{
    Dl_info info;
    int version = 0;
    ncclResult_t res = ncclGetVersion(&version);

    if (res != ncclSuccess) {
        printf("ncclGetVersion: %s\n", ncclGetErrorString(res));
        return 1;
    }
    printf("nccl %d\n", version);
    if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname)
        printf("ncclGetVersion from %s\n", info.dli_fname);
    return 0;
}
