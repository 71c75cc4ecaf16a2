/* The test double's cuda_runtime_api.h: the project's declarations of the real ABI. */
#ifndef FAKEGPU_CUDA_RUNTIME_API_H
#define FAKEGPU_CUDA_RUNTIME_API_H
#include "ckpt_cudart.h"
#endif
