/* The test double's cuda.h: the project's declarations of the real ABI. */
#ifndef FAKEGPU_CUDA_H
#define FAKEGPU_CUDA_H
#include "ckpt_cuda.h"
#endif
