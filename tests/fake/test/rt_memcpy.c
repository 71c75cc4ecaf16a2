/*
 * cudaMemcpy/cudaMemcpyAsync in every cudaMemcpyKind and cudaMemset/
 * cudaMemsetAsync, through every kind of memory the runtime allocates:
 * a pattern travels along a chain of copies (device, pinned, registered,
 * portable, managed and pageable memory) and must arrive intact, first with
 * synchronous copies, then with asynchronous ones on one stream.  Every
 * buffer is cleared before a pass, so a copy that does nothing is caught at
 * its own step.
 */
#include <string.h>

#include "rt_test.h"

#define N ((size_t)1 << 20 | 3) /* odd, so no copy can assume alignment */

enum buf { SRC, DEV0, DEV1, DEV2, PINNED, REGISTERED, PORTABLE, MANAGED, DST, NBUF };
static const char *const buf_name[NBUF] = {
    "pageable source", "device 0", "device 1", "device 2", "pinned (cudaMallocHost)",
    "registered (cudaHostRegister)", "portable (cudaHostAlloc)", "managed", "pageable destination",
};
static const int on_device[NBUF] = {[DEV0] = 1, [DEV1] = 1, [DEV2] = 1, [MANAGED] = 1};

static const struct step {
    enum buf dst, src;
    enum cudaMemcpyKind kind;
} chain[] = {
    {DEV0, SRC, cudaMemcpyHostToDevice},
    {DEV1, DEV0, cudaMemcpyDeviceToDevice},
    {PINNED, DEV1, cudaMemcpyDeviceToHost},
    {REGISTERED, PINNED, cudaMemcpyHostToHost},
    {DEV2, REGISTERED, cudaMemcpyDefault},
    {MANAGED, DEV2, cudaMemcpyDefault},
    {PORTABLE, MANAGED, cudaMemcpyDefault},
    {DST, PORTABLE, cudaMemcpyDefault},
};

static unsigned char *buf[NBUF];
static unsigned char scratch[N];

static void alloc_all(void)
{
    void *p;

    buf[SRC] = malloc(N);
    buf[DST] = malloc(N);
    buf[REGISTERED] = malloc(N);
    EXPECT(buf[SRC] && buf[DST] && buf[REGISTERED], "out of host memory");
    for (enum buf b = DEV0; b <= DEV2; b++) {
        CHECK(cudaMalloc(&p, N));
        buf[b] = p;
    }
    CHECK(cudaMallocHost(&p, N));
    buf[PINNED] = p;
    CHECK(cudaHostRegister(buf[REGISTERED], N, cudaHostRegisterDefault));
    CHECK(cudaHostAlloc(&p, N, cudaHostAllocPortable));
    buf[PORTABLE] = p;
    CHECK(cudaMallocManaged(&p, N, cudaMemAttachGlobal));
    buf[MANAGED] = p;
}

static void free_all(void)
{
    for (enum buf b = DEV0; b <= DEV2; b++)
        CHECK(cudaFree(buf[b]));
    CHECK(cudaFree(buf[MANAGED]));
    CHECK(cudaFreeHost(buf[PINNED]));
    CHECK(cudaFreeHost(buf[PORTABLE]));
    CHECK(cudaHostUnregister(buf[REGISTERED]));
    free(buf[REGISTERED]);
    free(buf[SRC]);
    free(buf[DST]);
}

/* Fails unless buffer b holds `want`, read back through a plain D2H copy. */
static void expect_contents(enum buf b, const unsigned char *want, const char *when)
{
    const unsigned char *have = buf[b];

    if (on_device[b]) {
        CHECK(cudaMemcpy(scratch, buf[b], N, cudaMemcpyDeviceToHost));
        have = scratch;
    }
    for (size_t i = 0; i < N; i++)
        EXPECT(have[i] == want[i], "%s: %s byte %zu is 0x%02x, expected 0x%02x",
               when, buf_name[b], i, have[i], want[i]);
}

static void run_chain(int async, cudaStream_t stream, unsigned seed)
{
    const char *mode = async ? "async" : "sync";

    for (size_t i = 0; i < N; i++)
        buf[SRC][i] = (unsigned char)(i * 131 + seed);
    for (enum buf b = SRC + 1; b < NBUF; b++) {
        if (on_device[b])
            CHECK(cudaMemset(buf[b], 0, N));
        else
            memset(buf[b], 0, N);
    }

    for (size_t s = 0; s < sizeof(chain) / sizeof(chain[0]); s++) {
        const struct step *st = &chain[s];
        char when[96];

        if (async) {
            CHECK(cudaMemcpyAsync(buf[st->dst], buf[st->src], N, st->kind, stream));
            CHECK(cudaStreamSynchronize(stream));
        } else {
            CHECK(cudaMemcpy(buf[st->dst], buf[st->src], N, st->kind));
        }
        snprintf(when, sizeof(when), "%s step %zu (kind %d)", mode, s, (int)st->kind);
        expect_contents(st->dst, buf[SRC], when);
    }
    /* After a synchronisation the host may read managed memory directly. */
    EXPECT(memcmp(buf[MANAGED], buf[SRC], N) == 0, "%s: managed memory differs on the host", mode);
}

/* A model of the device buffer that memsets must keep in step with. */
static void run_memsets(cudaStream_t stream)
{
    static const struct {
        size_t offset, count;
        int value;
        int async;
    } sets[] = {
        {0, N, 0x11, 0},
        {1, 7, 0x22, 0},
        {N - 5, 5, 0x1ff, 0}, /* the value is converted to unsigned char: 0xff */
        {4096, 65536 + 1, -2, 1},
        {100, 0, 0x33, 0}, /* nothing */
        {333, 1, 0x44, 1},
    };
    static unsigned char model[N];

    memset(model, 0xee, N);
    CHECK(cudaMemcpy(buf[DEV0], model, N, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        unsigned char *p = buf[DEV0] + sets[i].offset;
        char when[64];

        if (sets[i].async) {
            CHECK(cudaMemsetAsync(p, sets[i].value, sets[i].count, stream));
            CHECK(cudaStreamSynchronize(stream));
        } else {
            CHECK(cudaMemset(p, sets[i].value, sets[i].count));
        }
        memset(model + sets[i].offset, (unsigned char)sets[i].value, sets[i].count);
        snprintf(when, sizeof(when), "memset %zu", i);
        expect_contents(DEV0, model, when);
    }
}

int main(void)
{
    cudaStream_t stream;
    size_t free_bytes = 0, total = 0;

    alloc_all();
    CHECK(cudaStreamCreate(&stream));
    run_chain(0, stream, 1);
    run_chain(1, stream, 2);
    run_memsets(stream);

    /* A zero-byte copy succeeds; an unknown direction is refused as CUDA does. */
    CHECK(cudaMemcpy(buf[DEV0], buf[SRC], 0, cudaMemcpyHostToDevice));
    CHECK_ERR(cudaMemcpy(buf[DEV0], buf[SRC], N, (enum cudaMemcpyKind)7),
              cudaErrorInvalidMemcpyDirection);
    CHECK_ERR(cudaMemcpyAsync(buf[DEV0], buf[SRC], N, (enum cudaMemcpyKind)-1, stream),
              cudaErrorInvalidMemcpyDirection);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);

    CHECK(cudaMemGetInfo(&free_bytes, &total));
    EXPECT(total > 0 && free_bytes <= total, "free %zu of %zu", free_bytes, total);

    CHECK(cudaStreamDestroy(stream));
    free_all();
    return 0;
}
