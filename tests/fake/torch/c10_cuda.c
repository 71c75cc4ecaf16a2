/*
 * The test double of PyTorch's CUDA side, as much of it as libckpt's
 * helper for PyTorch meets: libc10_cuda.so's caching allocator, a few ops
 * and the memory snapshot torch.cuda.memory_snapshot() reads.  Python
 * reaches it through torch/__init__.py beside it, with the interpreter
 * lock held during the calls, as torch's own C++ ops hold it.
 *
 * The allocator behaves as CUDACachingAllocator does where it matters to
 * a snapshot: segments of 2 MiB or more from cudaMalloc, never given
 * back; a block is split off the best-fitting free block and the rest
 * stays free; a freed block waits for the event recorded at its free
 * (active_pending_free) and is free again (inactive) once cudaEventQuery
 * says so, merged with free neighbours.  Blocks are listed per segment in
 * address order, with the states the real snapshot uses.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels.h"

#define SEGMENT ((size_t)2 << 20)
#define MAX_BLOCKS 4096

enum state { INACTIVE, ALLOCATED, PENDING };

struct block {
    uintptr_t addr;
    size_t size;
    int seg;          /* index of its segment */
    enum state state;
    cudaEvent_t done; /* PENDING: recorded at the free */
    int used;         /* slot in use */
};

static struct block blocks[MAX_BLOCKS];
static struct {
    uintptr_t addr;
    size_t size;
} segs[256];
static int nsegs;
static cudaStream_t stream;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *what, cudaError_t e)
{
    fprintf(stderr, "libc10_cuda (double): %s: CUDA error %d\n", what, (int)e);
    abort();
}

#define OK(call)                                                               \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess)                                                 \
            die(#call, e_);                                                    \
    } while (0)

static struct block *slot(void)
{
    for (int i = 0; i < MAX_BLOCKS; i++)
        if (!blocks[i].used)
            return memset(&blocks[i], 0, sizeof(blocks[i])), blocks[i].used = 1, &blocks[i];
    die("too many blocks", cudaErrorMemoryAllocation);
    return NULL;
}

/* The free block right after or before b in its segment, if any. */
static struct block *neighbour(const struct block *b, int after)
{
    uintptr_t at = after ? b->addr + b->size : b->addr;
    for (int i = 0; i < MAX_BLOCKS; i++) {
        struct block *o = &blocks[i];
        if (o->used && o != b && o->seg == b->seg && o->state == INACTIVE &&
            (after ? o->addr == at : o->addr + o->size == at))
            return o;
    }
    return NULL;
}

static void make_free(struct block *b)
{
    b->state = INACTIVE;
    struct block *n;
    while ((n = neighbour(b, 1)))
        b->size += n->size, n->used = 0;
    while ((n = neighbour(b, 0)))
        n->size += b->size, b->used = 0, b = n;
}

/* process_events: blocks whose last use the device finished are free. */
static void process_events(void)
{
    for (int i = 0; i < MAX_BLOCKS; i++) {
        struct block *b = &blocks[i];
        if (!b->used || b->state != PENDING)
            continue;
        cudaError_t e = cudaEventQuery(b->done);
        if (e == cudaErrorNotReady)
            continue;
        OK(e);
        OK(cudaEventDestroy(b->done));
        make_free(b);
    }
}

int tl_init(void)
{
    return cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess ? 0 : -1;
}

void *tl_alloc(size_t bytes)
{
    size_t size = (bytes + 511) & ~(size_t)511;
    pthread_mutex_lock(&lock);
    process_events();
    struct block *best = NULL;
    for (int i = 0; i < MAX_BLOCKS; i++) {
        struct block *b = &blocks[i];
        if (b->used && b->state == INACTIVE && b->size >= size && (!best || b->size < best->size))
            best = b;
    }
    if (!best) {
        size_t len = size > SEGMENT ? size : SEGMENT;
        void *p;
        if (nsegs == 256)
            die("too many segments", cudaErrorMemoryAllocation);
        OK(cudaMalloc(&p, len));
        segs[nsegs].addr = (uintptr_t)p;
        segs[nsegs].size = len;
        best = slot();
        *best = (struct block){(uintptr_t)p, len, nsegs++, INACTIVE, NULL, 1};
    }
    if (best->size > size) {
        struct block *rest = slot();
        *rest = (struct block){best->addr + size, best->size - size, best->seg, INACTIVE, NULL, 1};
        best->size = size;
    }
    best->state = ALLOCATED;
    pthread_mutex_unlock(&lock);
    return (void *)best->addr;
}

void tl_free(void *p)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_BLOCKS; i++) {
        struct block *b = &blocks[i];
        if (b->used && b->state == ALLOCATED && b->addr == (uintptr_t)p) {
            OK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
            OK(cudaEventRecord(b->done, stream));
            b->state = PENDING;
            pthread_mutex_unlock(&lock);
            return;
        }
    }
    die("free of a pointer the allocator did not hand out", cudaErrorInvalidValue);
}

/* The memory snapshot: segment i is (seg_addr[i], seg_size[i]) and holds
 * blocks first[i] .. first[i + 1] - 1 of (blk_size, blk_state), in address
 * order (states: 0 inactive, 1 active_allocated, 2 active_pending_free).
 * Returns the number of segments, or -1 when the arrays are too small. */
static int snapshot(uintptr_t *seg_addr, size_t *seg_size, int *first, size_t *blk_size, int *blk_state,
                    int max_blocks)
{
    int k = 0;
    for (int s = 0; s < nsegs; s++) {
        seg_addr[s] = segs[s].addr;
        seg_size[s] = segs[s].size;
        first[s] = k;
        for (uintptr_t at = segs[s].addr; at < segs[s].addr + segs[s].size;) {
            struct block *b = NULL;
            for (int i = 0; i < MAX_BLOCKS && !b; i++)
                if (blocks[i].used && blocks[i].seg == s && blocks[i].addr == at)
                    b = &blocks[i];
            if (!b || k == max_blocks)
                return -1;
            blk_size[k] = b->size;
            blk_state[k++] = (int)b->state;
            at += b->size;
        }
    }
    first[nsegs] = k;
    return nsegs;
}

int tl_snapshot(uintptr_t *seg_addr, size_t *seg_size, int *first, size_t *blk_size, int *blk_state, int max_blocks)
{
    pthread_mutex_lock(&lock);
    int n = snapshot(seg_addr, seg_size, first, blk_size, blk_state, max_blocks);
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---- ops, on the allocator's stream ------------------------------------- */

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

KERNEL(k_fill, (uint32_t *, p), (size_t, n), (uint32_t, value))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        p[i] = value;
}

KERNEL(k_act, (uint32_t *, act), (size_t, an), (const uint32_t *, w), (size_t, n), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < an; i += KERNEL_STRIDE)
        act[i] = mix(w[i % n] + seed + (uint32_t)i);
}

KERNEL(k_grad, (uint32_t *, g), (size_t, n), (const uint32_t *, act), (size_t, an))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] = act[i] ^ act[(i * 7 + 3) % an];
}

KERNEL(k_step, (uint32_t *, w), (uint32_t *, m), (const uint32_t *, g), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        m[i] = mix(m[i] * 3u + g[i]);
        w[i] += m[i] >> 3;
    }
}

KERNEL(k_sum, (uint32_t *, out), (const uint32_t *, w), (size_t, n))
{
    if (KERNEL_INDEX == 0) {
        uint32_t s = 0;
        for (size_t i = 0; i < n; i++)
            s = mix(s + w[i]);
        *out = s;
    }
}

void tl_fill(void *p, size_t n, uint32_t value) { OK(k_fill_launch(DIM3(8), DIM3(256), stream, p, n, value)); }
void tl_act(void *act, size_t an, const void *w, size_t n, uint32_t seed)
{
    OK(k_act_launch(DIM3(8), DIM3(256), stream, act, an, w, n, seed));
}
void tl_grad(void *g, size_t n, const void *act, size_t an) { OK(k_grad_launch(DIM3(8), DIM3(256), stream, g, n, act, an)); }
void tl_step(void *w, void *m, const void *g, size_t n) { OK(k_step_launch(DIM3(8), DIM3(256), stream, w, m, g, n)); }
void tl_sum(void *out, const void *w, size_t n) { OK(k_sum_launch(DIM3(1), DIM3(1), stream, out, w, n)); }

/* Tensor.item(): waits for the stream, then reads the 4 bytes. */
uint32_t tl_item(const void *p)
{
    uint32_t v;
    OK(cudaStreamSynchronize(stream));
    OK(cudaMemcpy(&v, p, sizeof(v), cudaMemcpyDeviceToHost));
    return v;
}
