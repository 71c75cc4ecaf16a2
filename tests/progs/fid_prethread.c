/*
 * fid_prethread: a loader thread started before the program's first CUDA
 * call, as a data loader's prefetch thread or a process group's store
 * thread is, that takes host address space of its own (its malloc arena,
 * its batch buffers) while the main thread sets CUDA up.  The driver maps
 * its address ranges when CUDA starts, wherever the process left room:
 * whether the thread had taken its own by then is decided by timing in a
 * real program, and differs from run to run.  Here it is decided by the
 * launch: in the first the main thread starts CUDA before it lets the
 * loader allocate; in a launch that follows the death (FID_DIE_ONCE's file
 * is there), and in a standby (CKPT_FOLLOW is set), after.  So the
 * restarted run's layout, and the standby's, differ from the recorded
 * run's as timing would make them differ, every time.
 *
 * The device state holds device pointers (a table of the weight tensors,
 * walked by the step kernel, as fid_ptrtable's): a restore that gave the
 * allocations other addresses than the recorded run's would leave the
 * table pointing at nothing.  Each iteration the loader fills a batch, the
 * main thread copies it to the device, steps and reads the loss back.
 */
#include <pthread.h>
#include <stdbool.h>

#include "fid.h"

#define NT 3
#define BATCH_WORDS (256 * 1024) /* 1 MiB */
#define DEPTH 4

struct entry {
    uint32_t *p;
    uint64_t n;
};

KERNEL(step, (const struct entry *, table), (int, count), (const uint32_t *, batch), (uint32_t *, loss))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0;
        for (int t = 0; t < count; t++)
            for (uint64_t i = 0; i < table[t].n; i++) {
                table[t].p[i] = fid_mix(table[t].p[i] + batch[(i * 7 + (uint64_t)t) % BATCH_WORDS]);
                h = fid_mix(h ^ table[t].p[i]);
            }
        *loss = h;
    }
}

static struct loader {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint32_t **buf;
    bool go;        /* the loader may allocate */
    int want, ready; /* ready: the batch last filled (0: the buffers are there) */
} L = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, false, -1, -1};

/* Once let, holds DEPTH buffers from its own arena; fills batch `want` when asked. */
static void *load(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&L.lock);
    while (!L.go)
        pthread_cond_wait(&L.cond, &L.lock);
    pthread_mutex_unlock(&L.lock);
    uint32_t **buf = (uint32_t **)calloc(DEPTH, sizeof(*buf));
    REQUIRE(buf != NULL);
    for (int d = 0; d < DEPTH; d++) {
        buf[d] = (uint32_t *)malloc(BATCH_WORDS * sizeof(uint32_t));
        REQUIRE(buf[d] != NULL);
    }
    pthread_mutex_lock(&L.lock);
    L.buf = buf;
    L.ready = 0;
    pthread_cond_broadcast(&L.cond);
    for (;;) {
        while (L.want <= L.ready)
            pthread_cond_wait(&L.cond, &L.lock);
        int it = L.want;
        if (it < 0)
            break;
        uint32_t *b = L.buf[it % DEPTH];
        for (uint32_t i = 0; i < BATCH_WORDS; i++)
            b[i] = fid_mix((uint32_t)it * 2654435761u + i);
        L.ready = it;
        pthread_cond_broadcast(&L.cond);
    }
    pthread_mutex_unlock(&L.lock);
    return NULL;
}

/* Batch `it`, filled by the loader. */
static const uint32_t *batch(int it)
{
    pthread_mutex_lock(&L.lock);
    L.want = it;
    pthread_cond_broadcast(&L.cond);
    while (L.ready != it)
        pthread_cond_wait(&L.cond, &L.lock);
    const uint32_t *b = L.buf[it % DEPTH];
    pthread_mutex_unlock(&L.lock);
    return b;
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_prethread");

    const char *died = getenv("FID_DIE_ONCE");
    bool restarted = (died && access(died, F_OK) == 0) || getenv("CKPT_FOLLOW");
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, load, NULL) == 0);
    cudaStream_t s = NULL;
    if (!restarted) /* CUDA starts first */
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    pthread_mutex_lock(&L.lock);
    L.go = true;
    pthread_cond_broadcast(&L.cond);
    while (L.ready < 0)
        pthread_cond_wait(&L.cond, &L.lock);
    pthread_mutex_unlock(&L.lock);
    if (restarted) /* the loader's arena and buffers first */
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct entry host[NT], *table;
    uint32_t *dbatch, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&table, sizeof(host)));
    CHECK(cudaMalloc((void **)&dbatch, BATCH_WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    for (int t = 0; t < NT; t++) {
        host[t].n = t == 0 ? (uint64_t)1 << 20 : 2048 + 1024 * (uint64_t)t; /* 4 MiB, then small ones */
        CHECK(cudaMalloc((void **)&host[t].p, host[t].n * sizeof(uint32_t)));
        CHECK(cudaMemsetAsync(host[t].p, 0, host[t].n * sizeof(uint32_t), s));
    }
    CHECK(cudaMemcpyAsync(table, host, sizeof(host), cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));

    for (int it = 1; it <= o.iters; it++) {
        /* Pageable: the copy returns once the bytes are taken, as CUDA's does. */
        CHECK(cudaMemcpyAsync(dbatch, batch(it), BATCH_WORDS * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
        CHECK(step_launch(DIM3(1), DIM3(1), s, table, NT, dbatch, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x\n", it, *loss_h);
        fid_end_iteration(&o, it);
    }

    pthread_mutex_lock(&L.lock);
    L.want = -1;
    L.ready = -2;
    pthread_cond_broadcast(&L.cond);
    pthread_mutex_unlock(&L.lock);
    pthread_join(thread, NULL);
    uint64_t h = FID_HASH_INIT;
    for (int t = 0; t < NT; t++)
        h = fid_hash_device(h, host[t].p, host[t].n * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
