/*
 * poolmix: state that lives only in stream-ordered memory and moves every
 * iteration, across three streams and two pools (the default pool and one
 * made with cuMemPoolCreate, trimmed now and then).  Each of four state
 * buffers is allocated anew on the next stream, filled from the old one
 * once the old one's stream has got there (an event), and the old one is
 * freed in stream order on the new stream, right before the iteration
 * ends; each stream also makes and frees a scratch buffer every
 * iteration.  In host order a buffer is born and dead long before its
 * stream gets there, and the pools hand freed blocks to the next
 * allocation once stream order allows: a snapshot copied in the next
 * iteration's gaps reads a buffer that the program has freed by then, and
 * whose block may be someone else's.  A snapshot must hold the four live
 * buffers and nothing else, as they were at its boundary.
 *
 * Prints "state N bytes", "iter I loss X" and "digest D".
 */
#include "fid.h"

#define STATES 4
#define STREAMS 3
#define WORDS 8192

KERNEL(move_step, (uint32_t *, dst), (const uint32_t *, src), (size_t, n), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        dst[i] = fid_mix(src[i] + seed + (uint32_t)i);
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "poolmix");

    cudaStream_t s[STREAMS];
    cudaEvent_t ready[STATES];
    for (int i = 0; i < STREAMS; i++)
        CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    for (int i = 0; i < STATES; i++)
        CHECK(cudaEventCreateWithFlags(&ready[i], cudaEventDisableTiming));
    cudaMemPool_t pools[2];
    CHECK(cudaDeviceGetDefaultMemPool(&pools[0], 0));
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool made;
    CHECK_CU(cuMemPoolCreate(&made, &props));
    pools[1] = (cudaMemPool_t)made;

    uint32_t *state[STATES], *dloss, loss;
    int on[STATES]; /* the stream each buffer was last written on */
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    for (int k = 0; k < STATES; k++) {
        on[k] = k % STREAMS;
        CHECK(cudaMallocFromPoolAsync((void **)&state[k], WORDS * sizeof(uint32_t), pools[k % 2], s[on[k]]));
        CHECK(cudaMemsetAsync(state[k], 0, WORDS * sizeof(uint32_t), s[on[k]]));
        CHECK(cudaEventRecord(ready[k], s[on[k]]));
    }
    printf("state %zu bytes\n", (size_t)STATES * WORDS * sizeof(uint32_t));

    for (int it = 1; it <= o.iters; it++) {
        for (int j = 0; j < STREAMS; j++) { /* scratch, made and freed on its stream */
            uint32_t *tmp;
            CHECK(cudaMallocFromPoolAsync((void **)&tmp, (size_t)(1 + (it + j) % 4) * WORDS, pools[(it + j) % 2], s[j]));
            CHECK(fid_step_launch(DIM3(4), DIM3(128), s[j], tmp, (size_t)(1 + (it + j) % 4) * WORDS / 4, (uint32_t)it));
            CHECK(cudaFreeAsync(tmp, s[j]));
        }
        for (int k = 0; k < STATES; k++) { /* each buffer moves to the next stream and the other pool */
            int to = (on[k] + 1) % STREAMS;
            uint32_t *moved;
            CHECK(cudaStreamWaitEvent(s[to], ready[k], 0));
            CHECK(cudaMallocFromPoolAsync((void **)&moved, WORDS * sizeof(uint32_t), pools[(it + k) % 2], s[to]));
            CHECK(move_step_launch(DIM3(8), DIM3(256), s[to], moved, state[k], WORDS, (uint32_t)(it * 31 + k)));
            CHECK(cudaFreeAsync(state[k], s[to]));
            state[k] = moved;
            on[k] = to;
            CHECK(cudaEventRecord(ready[k], s[to]));
        }
        if (it % 5 == 0)
            CHECK_CU(cuMemPoolTrimTo(made, 0));
        CHECK(cudaStreamWaitEvent(s[0], ready[STATES - 1], 0));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s[0], state[STATES - 1], WORDS, dloss));
        CHECK(cudaStreamSynchronize(s[0]));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
    }
    CHECK(cudaDeviceSynchronize());
    uint64_t h = FID_HASH_INIT;
    for (int k = 0; k < STATES; k++)
        h = fid_hash_device(h, state[k], WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
