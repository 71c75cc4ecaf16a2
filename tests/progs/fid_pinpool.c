/*
 * fid_pinpool: a pool of pinned host buffers reused by event query, as
 * PyTorch's CachingHostAllocator (at::cuda::getCachingHostAllocator(),
 * behind tensor.pin_memory() and DataLoader(pin_memory=True)) does: when
 * an async copy using a buffer is queued, an event is recorded on the
 * copy's stream (recordEvent); once the buffer is freed, process_events()
 * hands it back to the pool when cudaEventQuery says that event completed
 * (scanning in free order, up to the first that has not); when no buffer
 * of the size is free, a new one is made with cudaHostAlloc.
 *
 * Each iteration the host collates a "batch" of 2 to 4 chunks, each in a
 * pinned buffer from the pool, uploads them with cudaMemcpyAsync on an
 * upload stream, trains on them, and reads its results back through
 * another pinned buffer (async D2H, then the loss sync).  The upload
 * stream lags the host while it collates (fid_busy, released once all
 * chunks are queued), so a chunk never finds the buffers of earlier chunks
 * of its own batch free and always finds last batch's: which buffers are
 * used, and how many the pool holds, is the same on every run.  The line
 * prints them; a replay that answers the queries from an idle device
 * reuses buffers the recorded run did not, and grows the pool less.
 */
#include "fid.h"

#define WORDS 4096
#define CHUNK_WORDS 2048
#define MAX_CHUNKS 4
#define RESULT_WORDS 16
#define MAX_BUFS 32

enum { FREE, USED, PENDING };
static struct {
    uint32_t *p;
    size_t bytes;
    int state;
    cudaEvent_t ev;
} buf[MAX_BUFS];
static int nbufs;
static int fifo[MAX_BUFS], fifo_head, nfifo; /* PENDING buffers, in free order */

static void process_events(void)
{
    while (nfifo > 0) {
        int b = fifo[fifo_head];
        cudaError_t e = cudaEventQuery(buf[b].ev);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            break;
        }
        CHECK(e);
        buf[b].state = FREE;
        fifo_head = (fifo_head + 1) % MAX_BUFS;
        nfifo--;
    }
}

/* A free buffer of exactly `bytes` (sizes are the pool's size classes), the
 * oldest first; a new one when there is none. */
static int host_alloc(size_t bytes)
{
    process_events();
    for (int b = 0; b < nbufs; b++)
        if (buf[b].state == FREE && buf[b].bytes == bytes) {
            buf[b].state = USED;
            return b;
        }
    REQUIRE(nbufs < MAX_BUFS);
    int b = nbufs++;
    CHECK(cudaHostAlloc((void **)&buf[b].p, bytes, cudaHostAllocDefault));
    CHECK(cudaEventCreateWithFlags(&buf[b].ev, cudaEventDisableTiming));
    buf[b].bytes = bytes;
    buf[b].state = USED;
    return b;
}

/* recordEvent(): called when a copy from or to the buffer is queued on
 * `stream` (PyTorch does it in the copy itself). */
static void host_record(int b, cudaStream_t stream)
{
    CHECK(cudaEventRecord(buf[b].ev, stream));
}

/* The buffer's tensor is gone: free once its recorded use has run. */
static void host_free(int b)
{
    buf[b].state = PENDING;
    fifo[(fifo_head + nfifo) % MAX_BUFS] = b;
    nfifo++;
}

KERNEL(train, (uint32_t *, w), (size_t, n), (const uint32_t *, batch), (size_t, nb), (uint32_t, it))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = fid_mix(w[i] + batch[i % nb] + it);
}

KERNEL(results, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0)
        for (int k = 0; k < RESULT_WORDS; k++) {
            uint32_t h = (uint32_t)k;
            for (size_t i = (size_t)k; i < n; i += RESULT_WORDS)
                h = fid_mix(h ^ w[i]);
            out[k] = h;
        }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_pinpool");

    cudaStream_t main_s, upload;
    CHECK(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&upload, cudaStreamNonBlocking));
    cudaEvent_t uploaded;
    CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
    uint32_t *w, *batch, *dres;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&batch, MAX_CHUNKS * CHUNK_WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dres, RESULT_WORDS * sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), main_s));

    uint64_t choices = FID_HASH_INIT, results_seen = FID_HASH_INIT;
    for (int it = 1; it <= o.iters; it++) {
        int nchunks = 2 + it % 3, chosen[MAX_CHUNKS];
        CHECK(fid_busy_launch(DIM3(1), DIM3(1), upload, it));
        for (int c = 0; c < nchunks; c++) {
            int b = host_alloc(CHUNK_WORDS * sizeof(uint32_t));
            chosen[c] = b;
            for (int i = 0; i < CHUNK_WORDS; i++) /* collate */
                buf[b].p[i] = fid_mix((uint32_t)(it * 131 + c * 17 + i));
            fid_sleep_us(200); /* the rest of the collate function's time */
            CHECK(cudaMemcpyAsync(batch + (size_t)c * CHUNK_WORDS, buf[b].p, CHUNK_WORDS * sizeof(uint32_t),
                                  cudaMemcpyHostToDevice, upload));
            host_record(b, upload);
            host_free(b);
        }
        fid_release(it);
        CHECK(cudaEventRecord(uploaded, upload));
        CHECK(cudaStreamWaitEvent(main_s, uploaded, 0));
        CHECK(train_launch(DIM3(16), DIM3(256), main_s, w, WORDS, batch, (size_t)nchunks * CHUNK_WORDS,
                           (uint32_t)it));
        CHECK(results_launch(DIM3(1), DIM3(1), main_s, w, WORDS, dres));
        int r = host_alloc(RESULT_WORDS * sizeof(uint32_t));
        CHECK(cudaMemcpyAsync(buf[r].p, dres, RESULT_WORDS * sizeof(uint32_t), cudaMemcpyDeviceToHost, main_s));
        host_record(r, main_s);
        CHECK(cudaStreamSynchronize(main_s));
        results_seen = fid_hash(results_seen, buf[r].p, RESULT_WORDS * sizeof(uint32_t));
        printf("iter %d loss 0x%08x metric 0x%08x chunks", it, buf[r].p[0], buf[r].p[1]);
        for (int c = 0; c < nchunks; c++) {
            printf("%c%d", c ? ',' : ' ', chosen[c]);
            choices = fid_hash_u64(choices, (uint64_t)chosen[c]);
        }
        printf(" result %d pool %d\n", r, nbufs);
        host_free(r);
        fid_end_iteration(&o, it);
    }

    CHECK(cudaDeviceSynchronize());
    uint64_t h = fid_hash_u64(FID_HASH_INIT, choices);
    h = fid_hash_u64(h, results_seen);
    h = fid_hash_u64(h, (uint64_t)nbufs);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
