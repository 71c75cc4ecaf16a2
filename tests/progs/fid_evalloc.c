/*
 * fid_evalloc: a caching device allocator that reuses a freed block only
 * once the event recorded after its last use has completed, as PyTorch's
 * CUDACachingAllocator does (c10/cuda/CUDACachingAllocator.cpp: a block
 * used on another stream through record_stream() goes back to the pool
 * when process_events() finds, by cudaEventQuery, that the events recorded
 * on those streams at free time have completed; the first one not ready
 * ends the scan).  Two large cudaMalloc segments are cut into blocks; the
 * "model" (three parameter tensors) lives in blocks chosen this way, and
 * each iteration a gradient per parameter goes through a second stream
 * (DDP's communication stream) two times out of three.
 *
 * What the host observes of the device is which blocks came back: the
 * iteration line prints the blocks chosen, and the digest covers them.
 * The second stream lags the host for the whole allocation phase of an
 * iteration (fid_busy, released before the loss is read), so every query
 * in that phase finds this iteration's events not ready and earlier ones
 * complete: the choices are the same on every run.  A replay that answers
 * those queries from the real device (where nothing ran) chooses other
 * blocks, and the program's pointers no longer match the snapshot's bytes.
 * (The host spends a little time of its own between ops, as a Python
 * program does, so that work the device did not lag on is complete by the
 * next query.)  Before it records a block's event it asks whether the
 * stream is capturing (cudaStreamGetCaptureInfo), as NCCL does before each
 * launch: a standby answers that for streams it holds no real one for.
 */
#include "fid.h"

#define WORDS 4096 /* one tensor: 16 KiB, one block */
#define BLOCK_BYTES (WORDS * sizeof(uint32_t))
#define SEG_BYTES (16 * BLOCK_BYTES)
#define NSEG 2
#define NBLK (NSEG * (int)(SEG_BYTES / BLOCK_BYTES))
#define NPARAM 3

enum { FREE, USED, PENDING };
static struct {
    uint32_t *p;
    int state;
    cudaEvent_t ev; /* recorded after its last use on the other stream */
} blk[NBLK];
static int pending[NBLK], pending_head, npending; /* FIFO of PENDING blocks */

/* process_events(): blocks whose events completed go back to the pool,
 * in free order, up to the first that has not. */
static void process_events(void)
{
    while (npending > 0) {
        int b = pending[pending_head];
        cudaError_t e = cudaEventQuery(blk[b].ev);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            break;
        }
        CHECK(e);
        blk[b].state = FREE;
        pending_head = (pending_head + 1) % NBLK;
        npending--;
    }
}

/* The lowest free block (the pool is ordered by address). */
static int block_alloc(void)
{
    process_events();
    for (int b = 0; b < NBLK; b++)
        if (blk[b].state == FREE) {
            blk[b].state = USED;
            return b;
        }
    fid_fail("block_alloc", "no free block", __FILE__, __LINE__);
    return -1;
}

/* Frees a block used on the allocation stream, and on `other` if not NULL:
 * then it comes back only when the work queued there so far has run. */
static void block_free(int b, cudaStream_t other)
{
    if (!other) {
        blk[b].state = FREE; /* stream-ordered reuse on the same stream */
        return;
    }
    /* An event recorded during a capture cannot be queried: such a block
     * waits for the capture's end (PyTorch keeps the list of captures under
     * way; NCCL asks cudaStreamGetCaptureInfo before each launch, as here). */
    enum cudaStreamCaptureStatus st;
    unsigned long long id;
    CHECK(cudaStreamGetCaptureInfo(other, &st, &id, NULL, NULL, NULL, NULL));
    if (st != cudaStreamCaptureStatusNone)
        fid_fail("block_free", "a block freed on a capturing stream", __FILE__, __LINE__);
    CHECK(cudaEventRecord(blk[b].ev, other));
    blk[b].state = PENDING;
    pending[(pending_head + npending) % NBLK] = b;
    npending++;
}

KERNEL(grad, (const uint32_t *, w), (uint32_t *, g), (size_t, n), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] = fid_mix(w[i] ^ seed) >> 7;
}

KERNEL(apply, (const uint32_t *, w), (const uint32_t *, g), (uint32_t *, out), (size_t, n), (uint32_t, block))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        out[i] = fid_mix(w[i] + g[i] + block);
}

/* The communication stream's reduction: reads g, accumulates a norm. */
KERNEL(metrics, (const uint32_t *, g), (size_t, n), (uint32_t *, acc))
{
    if (KERNEL_INDEX == 0) {
        uint32_t s = *acc;
        for (size_t i = 0; i < n; i++)
            s = s * 31u + g[i];
        *acc = s;
    }
}

KERNEL(loss3, (const uint32_t *, a), (const uint32_t *, b), (const uint32_t *, c), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0;
        for (size_t i = 0; i < n; i++)
            h = fid_mix(h ^ a[i] ^ (b[i] << 1) ^ (c[i] << 2));
        *out = h;
    }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_evalloc");

    cudaStream_t main_s, side;
    CHECK(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t grad_ready, side_done;
    CHECK(cudaEventCreateWithFlags(&grad_ready, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&side_done, cudaEventDisableTiming));

    for (int s = 0; s < NSEG; s++) {
        char *seg;
        CHECK(cudaMalloc((void **)&seg, SEG_BYTES));
        for (int k = 0; k < (int)(SEG_BYTES / BLOCK_BYTES); k++) {
            int b = s * (int)(SEG_BYTES / BLOCK_BYTES) + k;
            blk[b].p = (uint32_t *)(seg + (size_t)k * BLOCK_BYTES);
            CHECK(cudaEventCreateWithFlags(&blk[b].ev, cudaEventDisableTiming));
        }
    }
    uint32_t *acc, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&acc, NPARAM * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(acc, 0, NPARAM * sizeof(uint32_t), main_s));

    int w[NPARAM];
    for (int p = 0; p < NPARAM; p++) {
        w[p] = block_alloc();
        CHECK(cudaMemsetAsync(blk[w[p]].p, 0, BLOCK_BYTES, main_s));
        CHECK(fid_step_launch(DIM3(16), DIM3(256), main_s, blk[w[p]].p, WORDS, 1000u + (uint32_t)p));
    }

    uint64_t choices = FID_HASH_INIT;
    for (int it = 1; it <= o.iters; it++) {
        int chosen[2 * NPARAM];
        CHECK(fid_busy_launch(DIM3(1), DIM3(1), side, it));
        for (int p = 0; p < NPARAM; p++) {
            int g = block_alloc();
            chosen[2 * p] = g;
            CHECK(grad_launch(DIM3(16), DIM3(256), main_s, blk[w[p]].p, blk[g].p, WORDS, (uint32_t)(it * 7 + p)));
            int communicated = (it + p) % 3 != 0;
            if (communicated) {
                CHECK(cudaEventRecord(grad_ready, main_s));
                CHECK(cudaStreamWaitEvent(side, grad_ready, 0));
                CHECK(metrics_launch(DIM3(1), DIM3(1), side, blk[g].p, WORDS, acc + p));
            }
            int nw = block_alloc();
            chosen[2 * p + 1] = nw;
            CHECK(apply_launch(DIM3(16), DIM3(256), main_s, blk[w[p]].p, blk[g].p, blk[nw].p, WORDS, (uint32_t)nw));
            block_free(g, communicated ? side : NULL);
            block_free(w[p], NULL);
            w[p] = nw;
            fid_sleep_us(200); /* the host's own work before the next op (Python, the data loader) */
        }
        fid_release(it);
        /* The optimizer waits for the communication stream, as DDP does. */
        CHECK(cudaEventRecord(side_done, side));
        CHECK(cudaStreamWaitEvent(main_s, side_done, 0));
        CHECK(loss3_launch(DIM3(1), DIM3(1), main_s, blk[w[0]].p, blk[w[1]].p, blk[w[2]].p, WORDS, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, main_s));
        CHECK(cudaStreamSynchronize(main_s));
        printf("iter %d loss 0x%08x blocks", it, *loss_h);
        for (int k = 0; k < 2 * NPARAM; k++) {
            printf("%c%d", k ? ',' : ' ', chosen[k]);
            choices = fid_hash_u64(choices, (uint64_t)chosen[k]);
        }
        printf("\n");
        fid_end_iteration(&o, it);
    }

    CHECK(cudaDeviceSynchronize());
    uint64_t h = fid_hash_u64(FID_HASH_INIT, choices);
    for (int p = 0; p < NPARAM; p++) {
        h = fid_hash_u64(h, (uint64_t)w[p]);
        h = fid_hash_device(h, blk[w[p]].p, BLOCK_BYTES);
    }
    h = fid_hash_device(h, acc, NPARAM * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
