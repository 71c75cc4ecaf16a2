/* The test double's nccl.h: the project's declarations of the real ABI. */
#ifndef FAKEGPU_NCCL_H
#define FAKEGPU_NCCL_H
#include "ckpt_nccl.h"
#endif
