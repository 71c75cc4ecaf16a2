/*
 * alloc_train: one model, trained through either of the two allocators a
 * PyTorch job runs on, so that what a snapshot copies can be set against
 * what the model holds.
 *
 *   alloc_train caching [--iters N] [--die-at K]
 *       PyTorch's native caching allocator: tensors are blocks carved out
 *       of large segments (cudaMalloc of 2 MiB or more, never given back);
 *       a freed block is reused once the event recorded at its free says
 *       the device is done with it (cudaEventQuery).  Activations come and
 *       go every iteration, so at a boundary the segments hold the model
 *       and free space.
 *   alloc_train caching --declare [--iters N] [--die-at K]
 *       The same, telling libckpt which blocks are free (include/libckpt.h),
 *       as a framework's helper would from the allocator's trace: a new
 *       segment is declared free, a block live when it is handed out and
 *       free again when the tensor dies (its contents are dead then, even
 *       while queued work still reads them: that work runs before any
 *       snapshot copy).  Found with dlsym: the
 *       program runs the same without libckpt.
 *   alloc_train caching --answer [--iters N] [--die-at K]
 *       The same, answering at each snapshot instead, from a thread of its
 *       own (ckpt_declare_wait/answer), with every free and pending block
 *       of its lists, under the allocator's lock.
 *   alloc_train async [--iters N] [--die-at K]
 *       PyTorch's backend:cudaMallocAsync: one cudaMallocAsync per tensor
 *       on the compute stream, activations freed with cudaFreeAsync there
 *       before the iteration's end.
 *
 * The model: parameters, their gradients and an optimizer state (Adam's
 * first moment) for six tensors of different sizes; each iteration makes
 * an activation per tensor, of a size that changes with the iteration,
 * derives the gradient from it and updates the state and the parameter.
 * It prints "model N bytes" (parameters, gradients and optimizer state),
 * "iter I loss X" per iteration and "digest D" at the end, the same with
 * either allocator.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "fid.h"

#define TENSORS 6
#define SEGMENT ((size_t)2 << 20)

static const size_t words[TENSORS] = {65536, 4096, 32768, 1024, 16384, 8192};

KERNEL(act_fill, (uint32_t *, act), (size_t, an), (const uint32_t *, w), (size_t, n), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < an; i += KERNEL_STRIDE)
        act[i] = fid_mix(w[i % n] + seed + (uint32_t)i);
}

KERNEL(grad_of, (uint32_t *, g), (size_t, n), (const uint32_t *, act), (size_t, an))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] = act[i] ^ act[(i * 7 + 3) % an];
}

#define ADAM_SHARED (64 << 10)
#define STACK_BYTES 4096 /* a thread's stack (the default is 1 KiB) */

KERNEL(adam_step, (uint32_t *, w), (uint32_t *, m), (const uint32_t *, g), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        m[i] = fid_mix(m[i] * 3u + g[i]);
        w[i] += m[i] >> 3;
    }
}

/* ---- the caching allocator ---------------------------------------------- */

struct block {
    char *p;
    size_t size;
    cudaEvent_t done; /* recorded at its free: reusable once complete */
};

static struct block freed[256], pending[256];
static int (*declare_free)(const void *, size_t), (*declare_live)(const void *, size_t);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the lists, against the answering thread */

static void say_free(const void *p, size_t n)
{
    if (declare_free)
        REQUIRE(declare_free(p, n) == 0);
}
static int nfreed, npending, nsegments;
static cudaEvent_t spare_events[256];
static int nspare;

static cudaEvent_t take_event(void)
{
    cudaEvent_t e;
    if (nspare)
        return spare_events[--nspare];
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}

/* Blocks whose last use the device has finished become free again. */
static void process_events(void)
{
    for (int i = 0; i < npending;) {
        cudaError_t e = cudaEventQuery(pending[i].done);
        if (e == cudaErrorNotReady) {
            i++;
            continue;
        }
        CHECK(e);
        REQUIRE(nfreed < 256 && nspare < 256);
        spare_events[nspare++] = pending[i].done;
        freed[nfreed++] = pending[i];
        pending[i] = pending[--npending];
    }
}

static void *caching_alloc(size_t size)
{
    size = (size + 511) & ~(size_t)511;
    pthread_mutex_lock(&lock);
    process_events();
    int best = -1;
    for (int i = 0; i < nfreed; i++)
        if (freed[i].size >= size && (best < 0 || freed[i].size < freed[best].size))
            best = i;
    if (best < 0) { /* a new segment, as large as needed */
        size_t seg = size > SEGMENT ? size : SEGMENT;
        void *p;
        CHECK(cudaMalloc(&p, seg));
        nsegments++;
        say_free(p, seg);
        REQUIRE(nfreed < 256);
        freed[nfreed] = (struct block){(char *)p, seg, NULL};
        best = nfreed++;
    }
    struct block b = freed[best];
    if (b.size > size) { /* split: the rest stays free */
        freed[best] = (struct block){b.p + size, b.size - size, NULL};
    } else {
        freed[best] = freed[--nfreed];
    }
    pthread_mutex_unlock(&lock);
    if (declare_live)
        REQUIRE(declare_live(b.p, size) == 0);
    return b.p;
}

/* The answering thread: every block on the free and pending lists. */
static void *answer_snapshots(void *unused)
{
    int (*wait)(uint64_t *, int (*)(void)) = (int (*)(uint64_t *, int (*)(void)))dlsym(RTLD_DEFAULT, "ckpt_declare_wait");
    int (*answer)(uint64_t, const uint64_t *, size_t) =
        (int (*)(uint64_t, const uint64_t *, size_t))dlsym(RTLD_DEFAULT, "ckpt_declare_answer");
    static uint64_t pairs[2 * 512];
    uint64_t request;
    (void)unused;
    while (wait && answer && wait(&request, NULL) == 0) {
        size_t n = 0;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < nfreed; i++)
            pairs[n++] = (uint64_t)(uintptr_t)freed[i].p, pairs[n++] = freed[i].size;
        for (int i = 0; i < npending; i++)
            pairs[n++] = (uint64_t)(uintptr_t)pending[i].p, pairs[n++] = pending[i].size;
        pthread_mutex_unlock(&lock);
        REQUIRE(answer(request, pairs, n / 2) == 0);
    }
    return NULL;
}

static void caching_free(void *p, size_t size, cudaStream_t s)
{
    pthread_mutex_lock(&lock);
    REQUIRE(npending < 256);
    cudaEvent_t e = take_event();
    CHECK(cudaEventRecord(e, s));
    say_free(p, (size + 511) & ~(size_t)511); /* dead: no later work reads it */
    pending[npending++] = (struct block){(char *)p, (size + 511) & ~(size_t)511, e};
    pthread_mutex_unlock(&lock);
}

/* ---- either allocator ----------------------------------------------------- */

static int caching;

static uint32_t *alloc_words(size_t n, cudaStream_t s)
{
    void *p;
    if (caching)
        return (uint32_t *)caching_alloc(n * sizeof(uint32_t));
    CHECK(cudaMallocAsync(&p, n * sizeof(uint32_t), s));
    return (uint32_t *)p;
}

static void free_words(uint32_t *p, size_t n, cudaStream_t s)
{
    if (caching)
        caching_free(p, n * sizeof(uint32_t), s);
    else
        CHECK(cudaFreeAsync(p, s));
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "caching") != 0 && strcmp(argv[1], "async") != 0)) {
        fprintf(stderr, "usage: alloc_train caching [--declare|--answer]|async [--iters N] [--die-at K]\n");
        return 2;
    }
    caching = strcmp(argv[1], "caching") == 0;
    argv[1] = argv[0];
    if (caching && argc > 2 && strcmp(argv[2], "--declare") == 0) {
        *(void **)&declare_free = dlsym(RTLD_DEFAULT, "ckpt_declare_free");
        *(void **)&declare_live = dlsym(RTLD_DEFAULT, "ckpt_declare_live");
        argv[2] = argv[1];
        argv++, argc--;
    } else if (caching && argc > 2 && strcmp(argv[2], "--answer") == 0) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, answer_snapshots, NULL) == 0);
        argv[2] = argv[1];
        argv++, argc--;
    }
    struct fid_opts o;
    fid_parse(argc - 1, argv + 1, &o, "alloc_train");

    /* The compute stream from a pool, as c10's getStreamFromPool makes its
     * high-priority ones: at the greatest priority of the device's range,
     * read back as CUDAStream::priority() does. */
    cudaStream_t s;
    int least, greatest, prio;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    CHECK(cudaStreamGetPriority(s, &prio));
    REQUIRE(prio == greatest && greatest <= least);
    /* The optimizer's kernel takes more dynamic shared memory than a launch
     * gets by default: allowed once, with cudaFuncSetAttribute, as fused
     * kernels (flash attention, CUTLASS's) are. */
    CHECK(cudaFuncSetAttribute((const void *)adam_step, cudaFuncAttributeMaxDynamicSharedMemorySize, ADAM_SHARED));
    /* Each thread's stack, raised as a program with deep device calls
     * raises it: a setting of the context, read back every iteration, so
     * a rank that comes back (a restart, a standby's takeover) must have
     * it in its own context. */
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, STACK_BYTES));
    uint32_t *w[TENSORS], *g[TENSORS], *m[TENSORS], *dloss, loss;
    size_t model = 0;
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    /* Each tensor's initialisation leaves a scratch block between it and
     * the next (freed once all are made): the model lies in pieces inside
     * the segments, with free blocks between them, some shorter than a
     * copy is worth skipping. */
    uint32_t *scratch[TENSORS];
    for (int t = 0; t < TENSORS; t++) {
        w[t] = alloc_words(words[t], s);
        g[t] = alloc_words(words[t], s);
        scratch[t] = alloc_words(words[t], s);
        m[t] = alloc_words(words[t], s);
        CHECK(cudaMemsetAsync(w[t], 0, words[t] * sizeof(uint32_t), s));
        CHECK(cudaMemsetAsync(scratch[t], 0xff, words[t] * sizeof(uint32_t), s));
        CHECK(cudaMemsetAsync(m[t], 0, words[t] * sizeof(uint32_t), s));
        model += 3 * words[t] * sizeof(uint32_t);
    }
    for (int t = 0; t < TENSORS; t++)
        free_words(scratch[t], words[t], s);
    CHECK(cudaStreamSynchronize(s));
    printf("model %zu bytes\n", model);

    for (int it = 1; it <= o.iters; it++) {
        for (int t = 0; t < TENSORS; t++) {
            size_t an = words[t] * (size_t)(1 + (it + t) % 3); /* activations change size */
            uint32_t *act = alloc_words(an, s);
            CHECK(act_fill_launch(DIM3(8), DIM3(256), s, act, an, w[t], words[t], (uint32_t)it * 2654435761u));
            CHECK(grad_of_launch(DIM3(8), DIM3(256), s, g[t], words[t], act, an));
            free_words(act, an, s);
            CHECK(adam_step_launch_shared(DIM3(8), DIM3(256), ADAM_SHARED, s, w[t], m[t], g[t], words[t]));
        }
        size_t stack;
        CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
        REQUIRE(stack == STACK_BYTES);
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w[0], words[0], dloss));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
    }
    uint64_t h = FID_HASH_INIT;
    for (int t = 0; t < TENSORS; t++) {
        h = fid_hash_device(h, w[t], words[t] * sizeof(uint32_t));
        h = fid_hash_device(h, m[t], words[t] * sizeof(uint32_t));
    }
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
