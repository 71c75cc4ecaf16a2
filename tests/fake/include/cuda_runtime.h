/* The test double's cuda_runtime.h: the project's declarations of the real ABI. */
#ifndef FAKEGPU_CUDA_RUNTIME_H
#define FAKEGPU_CUDA_RUNTIME_H
#include "ckpt_cudart.h"
#endif
