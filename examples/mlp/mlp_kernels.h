/*
 * The math of mlp-train: a counter-based hash for random numbers that any
 * rank can draw in any order, and the kernels of an MLP's forward and
 * backward passes, MSE loss and optimizers, in the portable convention of
 * examples/common/kernels.h.  Every kernel computes each output element in
 * one thread with a sequential loop in a fixed order, and no kernel uses
 * atomics, so results never depend on the grid or on scheduling: a run is
 * bit-for-bit repeatable on a GPU as on the CPU double (each with its own
 * results, since a GPU fuses multiply-adds).  Included once, by
 * mlp_train.cu: nvcc builds the trainer from that one source.
 */
#ifndef MLP_KERNELS_H
#define MLP_KERNELS_H

#include <math.h>
#include <stdint.h>
#include "kernels.h"

#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__ static inline
#else
#define HOST_DEVICE static inline
#endif

enum { ACT_NONE, ACT_RELU, ACT_TANH };

#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.999f
#define ADAM_EPS 1e-8f
#define SGD_MOMENTUM 0.9f

/* splitmix64's finaliser: a bijective mix with good avalanche, so hashing a
 * counter gives independent-looking values without any generator state. */
HOST_DEVICE uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Element i of the random stream (seed, stream), uniform in [-1, 1): any
 * rank can produce any element, in any order, with the same result. */
HOST_DEVICE float hash_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint64_t h = mix64(mix64(seed ^ mix64(stream)) + i);
    return (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* The hidden layers' activation; the output layer is linear (ACT_NONE). */
HOST_DEVICE float activate(int act, float z)
{
    if (act == ACT_RELU)
        return z > 0.0f ? z : 0.0f;
    if (act == ACT_TANH)
        return tanhf(z);
    return z;
}

/* f'(z) expressed through a = f(z), so backward needs only the outputs. */
HOST_DEVICE float activate_grad(int act, float a)
{
    if (act == ACT_RELU)
        return a > 0.0f ? 1.0f : 0.0f;
    if (act == ACT_TANH)
        return 1.0f - a * a;
    return 1.0f;
}

/* p = bound * stream (seed, stream) of hash_uniform: the same tensor for
 * any grid, on any rank. */
KERNEL(init_uniform, (size_t, n), (unsigned long long, seed),
       (unsigned long long, stream), (float, bound), (float *, p))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        p[i] = bound * hash_uniform(seed, stream, i);
}

/* y[r][j] = f(b[j] + sum_k w[j][k] x[r][k]); w is out x in, row-major. */
KERNEL(linear_forward, (int, rows), (int, in), (int, out), (const float *, x),
       (const float *, w), (const float *, b), (int, act), (float *, y))
{
    size_t n = (size_t)rows * out;
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        const float *xr = x + i / out * in, *wj = w + i % out * in;
        float acc = b[i % out];
        for (int k = 0; k < in; k++)
            acc += wj[k] * xr[k];
        y[i] = activate(act, acc);
    }
}

/* The layer's gradient bucket g = [dL/dw (out x in) | dL/db (out)] from the
 * output gradient d (rows x out) and the layer's input x (rows x in). */
KERNEL(linear_backward_params, (int, rows), (int, in), (int, out),
       (const float *, d), (const float *, x), (float *, g))
{
    size_t nw = (size_t)out * in;
    for (size_t i = KERNEL_INDEX; i < nw + out; i += KERNEL_STRIDE) {
        float acc = 0.0f;
        if (i < nw) {
            size_t j = i / in, k = i % in;
            for (int r = 0; r < rows; r++)
                acc += d[(size_t)r * out + j] * x[(size_t)r * in + k];
        } else {
            for (int r = 0; r < rows; r++)
                acc += d[(size_t)r * out + (i - nw)];
        }
        g[i] = acc;
    }
}

/* The gradient at the layer's input: dx[r][k] = f'(a[r][k]) sum_j d[r][j]
 * w[j][k], where a = f(z) is the previous layer's output. */
KERNEL(linear_backward_input, (int, rows), (int, in), (int, out),
       (const float *, d), (const float *, w), (const float *, a), (int, act),
       (float *, dx))
{
    size_t n = (size_t)rows * in;
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        const float *dr = d + i / in * out;
        size_t k = i % in;
        float acc = 0.0f;
        for (int j = 0; j < out; j++)
            acc += dr[j] * w[(size_t)j * in + k];
        dx[i] = activate_grad(act, a[i]) * acc;
    }
}

/* First level of the loss: per row r, d[r] = scale * (y[r] - t[r]) and
 * row_loss[r] = |y[r] - t[r]|^2. */
KERNEL(mse_rows, (int, rows), (int, cols), (const float *, y),
       (const float *, t), (float, scale), (float *, d), (float *, row_loss))
{
    for (size_t r = KERNEL_INDEX; r < (size_t)rows; r += KERNEL_STRIDE) {
        float acc = 0.0f;
        for (size_t c = r * cols; c < (r + 1) * cols; c++) {
            float e = y[c] - t[c];
            d[c] = scale * e;
            acc += e * e;
        }
        row_loss[r] = acc;
    }
}

/* Second level: one thread sums the rows in order. */
KERNEL(mse_total, (int, rows), (const float *, row_loss), (float, scale),
       (float *, loss))
{
    for (size_t i = KERNEL_INDEX; i < 1; i += KERNEL_STRIDE) {
        float acc = 0.0f;
        for (int r = 0; r < rows; r++)
            acc += row_loss[r];
        *loss = scale * acc;
    }
}

/* The optimizer's step counter lives on the device, as in capturable Adam,
 * so that a copy of device memory holds the whole optimizer state. */
KERNEL(step_tick, (unsigned long long *, step))
{
    for (size_t i = KERNEL_INDEX; i < 1; i += KERNEL_STRIDE)
        *step += 1;
}

/* Adam (Kingma & Ba) on one tensor; g is the summed gradient, g_scale turns
 * it into the mean over ranks. */
KERNEL(adam_update, (size_t, n), (const float *, g), (float, g_scale),
       (float, lr), (const unsigned long long *, step), (float *, p),
       (float *, m), (float *, v))
{
    float t = (float)*step;
    float c1 = 1.0f - powf(ADAM_BETA1, t), c2 = 1.0f - powf(ADAM_BETA2, t);
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        float gi = g[i] * g_scale;
        m[i] = ADAM_BETA1 * m[i] + (1.0f - ADAM_BETA1) * gi;
        v[i] = ADAM_BETA2 * v[i] + (1.0f - ADAM_BETA2) * gi * gi;
        p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + ADAM_EPS);
    }
}

/* SGD with momentum as torch.optim.SGD does it (buf starts at zero, so the
 * first step sets it to the gradient). */
KERNEL(sgd_update, (size_t, n), (const float *, g), (float, g_scale),
       (float, lr), (float *, p), (float *, buf))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        buf[i] = SGD_MOMENTUM * buf[i] + g[i] * g_scale;
        p[i] -= lr * buf[i];
    }
}

#endif /* MLP_KERNELS_H */
