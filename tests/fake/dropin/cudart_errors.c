/*
 * Prints the name and message of every cudaError_t the project declares
 * (interpose/abi/ckpt_cudart.h), one per line.  Built against NVIDIA's
 * headers and the real libcudart.so.13, it runs once on the real runtime
 * and once on the double, and tests/scenarios/double_dropin.bats compares
 * the two outputs: programs print these strings and tests match them.
 * Neither call needs a driver.  Keep the list in step with ckpt_cudart.h.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

static const cudaError_t codes[] = {
    cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
    cudaErrorInitializationError, cudaErrorCudartUnloading,
    cudaErrorInvalidMemcpyDirection, cudaErrorInsufficientDriver,
    cudaErrorInvalidDeviceFunction, cudaErrorNoDevice, cudaErrorInvalidDevice,
    cudaErrorDeviceUninitialized, cudaErrorAlreadyMapped, cudaErrorNotMapped,
    cudaErrorPeerAccessUnsupported, cudaErrorInvalidPtx, cudaErrorOperatingSystem,
    cudaErrorInvalidResourceHandle, cudaErrorIllegalState, cudaErrorSymbolNotFound,
    cudaErrorNotReady, cudaErrorIllegalAddress, cudaErrorLaunchFailure,
    cudaErrorNotPermitted, cudaErrorNotSupported,
    cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated,
    cudaErrorStreamCaptureUnmatched, cudaErrorStreamCaptureUnjoined,
    cudaErrorStreamCaptureIsolation, cudaErrorStreamCaptureImplicit,
    cudaErrorCapturedEvent, cudaErrorStreamCaptureWrongThread,
    cudaErrorInvalidResourceType, cudaErrorUnknown,
};

int main(void)
{
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        printf("%d %s: %s\n", (int)codes[i], cudaGetErrorName(codes[i]),
               cudaGetErrorString(codes[i]));
    return 0;
}
