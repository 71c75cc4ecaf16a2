/*
 * Every collective of the double's NCCL gives the exact expected bits on
 * every rank, for 1, 2, 3, 4 and 8 ranks: AllReduce, Reduce and
 * ReduceScatter with every operator, plus Broadcast and AllGather, for
 * every data type, out of place and in place (AllGather and ReduceScatter
 * at NCCL's in-place offsets), and a few operations larger than one slot
 * of the shared segment, so that they move in several chunks.  Reductions
 * are in rank order: the float references below add in that order, and
 * the 16- and 8-bit float types use values whose results are exact.  A
 * normal run leaves no file in /dev/shm.
 */
#include <dirent.h>

#include "nccl_test.h"

enum kind { K_INT, K_UINT, K_F32, K_F64, K_MINI };

/* A small float format, for exact encoding of the test's values. */
struct mini {
    int mbits, bias, small; /* small: values 0..small keep every sum exact */
};

static const struct mini minis[ncclNumTypes] = {
    [ncclFloat16] = {10, 15, 3},
    [ncclBfloat16] = {7, 127, 3},
    [ncclFloat8e4m3] = {3, 7, 2},
    [ncclFloat8e5m2] = {2, 15, 1},
};

static enum kind kind(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclInt32:
    case ncclInt64:
        return K_INT;
    case ncclUint8:
    case ncclUint32:
    case ncclUint64:
        return K_UINT;
    case ncclFloat32:
        return K_F32;
    case ncclFloat64:
        return K_F64;
    default:
        return K_MINI;
    }
}

static size_t size_of(ncclDataType_t t)
{
    static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return sizes[t];
}

/*
 * Rank p's value at index i.  Integers stay where sums and products are
 * exact in a double; the small float formats get values whose sums,
 * products, extremes and averages are all representable.
 */
static double gen(ncclDataType_t t, ncclRedOp_t op, int p, size_t i)
{
    unsigned h = (unsigned)(p * 7 + (int)(i % 100003) * 13 + 5);

    switch (kind(t)) {
    case K_INT:
        return op == ncclProd ? (int)(h % 7) - 3 : (int)(h % 201) - 100;
    case K_UINT:
        return op == ncclProd ? h % 4 : h % 201;
    case K_F32:
    case K_F64:
        return op == ncclProd ? 1.0 + (h % 97) / 1024.0 : (h % 1000) / 7.0 - 50;
    default:
        if (op == ncclProd)
            return h % 2 ? 2 : 1;
        if (op == ncclMax || op == ncclMin)
            return (int)(h % 9) - 4;
        if (op == ncclAvg) /* the same on every rank: the average is exact */
            return (double)(i % (size_t)(minis[t].small + 1));
        return h % (unsigned)(minis[t].small + 1);
    }
}

/* Bits of an exactly representable value in a small float format. */
static uint32_t mini_bits(ncclDataType_t t, double x)
{
    const struct mini *f = &minis[t];
    int total = (int)size_of(t) * 8 - 1, e = 0;
    uint32_t sign = x < 0 ? 1u << total : 0;
    double a = x < 0 ? -x : x;

    if (a == 0)
        return 0;
    while (a >= 2) {
        a /= 2;
        e++;
    }
    while (a < 1) {
        a *= 2;
        e--;
    }
    return sign | (uint32_t)(e + f->bias) << f->mbits | (uint32_t)((a - 1) * (1 << f->mbits));
}

/* Stores x at element i of a buffer of type t. */
static void put(ncclDataType_t t, void *buf, size_t i, double x)
{
    switch (t) {
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)(int64_t)x; break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)x; break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)(int64_t)x; break;
    case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)x; break;
    case ncclInt64: ((int64_t *)buf)[i] = (int64_t)x; break;
    case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)x; break;
    case ncclFloat32: ((float *)buf)[i] = (float)x; break;
    case ncclFloat64: ((double *)buf)[i] = x; break;
    case ncclFloat16:
    case ncclBfloat16: ((uint16_t *)buf)[i] = (uint16_t)mini_bits(t, x); break;
    default: ((uint8_t *)buf)[i] = (uint8_t)mini_bits(t, x); break;
    }
}

static double apply(double a, double b, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return b > a ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return a + b;
    }
}

static float applyf(float a, float b, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return b > a ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return a + b;
    }
}

/* The expected reduction of element i (of rank p's input: index idx) into out[0]. */
static void expect_reduced(ncclDataType_t t, ncclRedOp_t op, int n, size_t idx, void *out)
{
    double acc = gen(t, op, 0, idx);

    if (kind(t) == K_F32) {
        float f = (float)acc;

        for (int p = 1; p < n; p++)
            f = applyf(f, (float)gen(t, op, p, idx), op);
        if (op == ncclAvg)
            f /= (float)n;
        *(float *)out = f;
        return;
    }
    for (int p = 1; p < n; p++)
        acc = apply(acc, gen(t, op, p, idx), op);
    if (op == ncclAvg && kind(t) == K_F64)
        acc /= n;
    else if (op == ncclAvg && kind(t) == K_MINI)
        acc /= n; /* exact by construction */
    if (op == ncclAvg && (kind(t) == K_INT || kind(t) == K_UINT)) {
        /* the sum wraps in the type, then divides in it */
        switch (t) {
        case ncclInt8: acc = (int8_t)(int64_t)acc / n; break;
        case ncclUint8: acc = (uint8_t)(int64_t)acc / n; break;
        case ncclInt32: acc = (int32_t)(int64_t)acc / n; break;
        case ncclUint32: acc = (uint32_t)(int64_t)acc / (uint32_t)n; break;
        case ncclInt64: acc = (double)((int64_t)acc / n); break;
        default: acc = (double)((uint64_t)(int64_t)acc / (uint64_t)n); break;
        }
    }
    put(t, out, 0, acc);
}

enum func { ALLREDUCE, REDUCE, BROADCAST, ALLGATHER, REDUCESCATTER };
static const char *const func_names[] = {"AllReduce", "Reduce", "Broadcast", "AllGather",
                                         "ReduceScatter"};

struct tcase {
    enum func func;
    ncclDataType_t type;
    ncclRedOp_t op;
    bool inplace;
    size_t count; /* per rank for AllGather and ReduceScatter */
    int root;
};

struct ctx {
    int rank, n;
    ncclComm_t comm;
    cudaStream_t stream;
};

static void fail_case(const struct ctx *x, const struct tcase *k, size_t i, const char *what)
{
    fprintf(stderr, "rank %d/%d: %s type %d op %d %s count %zu root %d: %s at element %zu\n",
            x->rank, x->n, func_names[k->func], (int)k->type, (int)k->op,
            k->inplace ? "in place" : "out of place", k->count, k->root, what, i);
    exit(1);
}

static void run_case(const struct ctx *x, const struct tcase *k)
{
    size_t es = size_of(k->type), n = (size_t)x->n, me = (size_t)x->rank;
    size_t in_elems = k->func == REDUCESCATTER ? n * k->count : k->count;
    size_t out_elems = k->func == ALLGATHER ? n * k->count : k->count;
    size_t buf_elems = in_elems > out_elems ? in_elems : out_elems;
    unsigned char *host = malloc(buf_elems * es), want[8];
    unsigned char *dbuf, *dsend, *drecv;
    ncclRedOp_t gop = k->func == BROADCAST || k->func == ALLGATHER ? ncclSum : k->op;

    EXPECT(host, "out of memory");
    CCHECK(cudaMalloc((void **)&dbuf, (k->inplace ? buf_elems : in_elems + out_elems) * es));
    /* Inputs: a sentinel everywhere, then this rank's values where it sends from. */
    memset(host, 0xa5, buf_elems * es);
    CCHECK(cudaMemcpy(dbuf, host, buf_elems * es, cudaMemcpyHostToDevice));
    if (!k->inplace) {
        CCHECK(cudaMemcpy(dbuf + in_elems * es, host, out_elems * es, cudaMemcpyHostToDevice));
        dsend = dbuf;
        drecv = dbuf + in_elems * es;
    } else {
        drecv = dsend = dbuf;
        if (k->func == ALLGATHER)
            dsend = dbuf + me * k->count * es;
    }
    for (size_t i = 0; i < in_elems; i++)
        put(k->type, host, i, gen(k->type, gop, x->rank, i));
    CCHECK(cudaMemcpy(dsend, host, in_elems * es, cudaMemcpyHostToDevice));
    if (k->inplace && k->func == REDUCESCATTER)
        drecv = dbuf + me * k->count * es;

    switch (k->func) {
    case ALLREDUCE:
        NCHECK(ncclAllReduce(dsend, drecv, k->count, k->type, k->op, x->comm, x->stream));
        break;
    case REDUCE:
        NCHECK(ncclReduce(dsend, drecv, k->count, k->type, k->op, k->root, x->comm, x->stream));
        break;
    case BROADCAST:
        NCHECK(ncclBroadcast(dsend, drecv, k->count, k->type, k->root, x->comm, x->stream));
        break;
    case ALLGATHER:
        NCHECK(ncclAllGather(dsend, drecv, k->count, k->type, x->comm, x->stream));
        break;
    case REDUCESCATTER:
        NCHECK(ncclReduceScatter(dsend, drecv, k->count, k->type, k->op, x->comm, x->stream));
        break;
    }
    CCHECK(cudaStreamSynchronize(x->stream));
    CCHECK(cudaMemcpy(host, drecv, out_elems * es, cudaMemcpyDeviceToHost));

    for (size_t i = 0; i < out_elems; i++) {
        const unsigned char *got = host + i * es;

        switch (k->func) {
        case ALLREDUCE:
            expect_reduced(k->type, k->op, x->n, i, want);
            break;
        case REDUCE:
            if (x->rank != k->root) { /* a non-root's buffer is not written */
                if (k->inplace)
                    put(k->type, want, 0, gen(k->type, gop, x->rank, i));
                else
                    memset(want, 0xa5, es);
            } else {
                expect_reduced(k->type, k->op, x->n, i, want);
            }
            break;
        case BROADCAST:
            put(k->type, want, 0, gen(k->type, gop, k->root, i));
            break;
        case ALLGATHER:
            put(k->type, want, 0, gen(k->type, gop, (int)(i / k->count), i % k->count));
            break;
        case REDUCESCATTER:
            expect_reduced(k->type, k->op, x->n, me * k->count + i, want);
            break;
        }
        if (memcmp(got, want, es))
            fail_case(x, k, i, "wrong value");
    }
    CCHECK(cudaFree(dbuf));
    free(host);
}

static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg)
{
    struct ctx x = {.rank = rank, .n = nranks};
    int ncase = 0;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&x.stream));
    NCHECK(ncclCommInitRank(&x.comm, nranks, id, rank));

    for (int f = ALLREDUCE; f <= REDUCESCATTER; f++) {
        bool reduces = f != BROADCAST && f != ALLGATHER;

        for (int t = 0; t < ncclNumTypes; t++)
            for (int op = 0; op < (reduces ? ncclNumOps : 1); op++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    struct tcase k = {(enum func)f, (ncclDataType_t)t, (ncclRedOp_t)op,
                                      inplace, 1000 + (size_t)t, ncase++ % nranks};
                    run_case(&x, &k);
                }
    }

    /* Larger than a 4 MiB slot: several chunks each. */
    const struct tcase big[] = {
        {ALLREDUCE, ncclFloat32, ncclSum, false, (size_t)3 << 19, 0},
        {REDUCE, ncclInt64, ncclMax, false, (size_t)5 << 17, nranks - 1},
        {BROADCAST, ncclFloat64, ncclSum, false, (size_t)5 << 17, nranks / 2},
        {REDUCESCATTER, ncclFloat32, ncclSum, false, (size_t)3 << 18, 0},
        {ALLGATHER, ncclInt8, ncclSum, false, (size_t)9 << 19, 0},
    };
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
        if (big[i].func != ALLGATHER || nranks <= 4) /* keep memory modest */
            run_case(&x, &big[i]);

    NCHECK(ncclCommDestroy(x.comm));
    CCHECK(cudaStreamDestroy(x.stream));
    return 0;
}

/* Files this process's unique ids named, left in /dev/shm. */
static int litter(void)
{
    char prefix[64];
    struct dirent *d;
    DIR *dir = opendir("/dev/shm");
    int found = 0;

    snprintf(prefix, sizeof(prefix), "fakenccl-%u-%d-", (unsigned)getuid(), (int)getpid());
    while (dir && (d = readdir(dir)))
        if (!strncmp(d->d_name, prefix, strlen(prefix))) {
            fprintf(stderr, "left behind: /dev/shm/%s\n", d->d_name);
            found++;
        }
    if (dir)
        closedir(dir);
    return found;
}

int main(void)
{
    static const int sizes[] = {1, 2, 3, 4, 8};

    setenv("NCCL_FAKE_TIMEOUT", "20", 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (nccl_test_run(sizes[i], rank_main, NULL, 100, -1)) {
            fprintf(stderr, "collectives failed with %d ranks\n", sizes[i]);
            return 1;
        }
    }
    EXPECT(!litter(), "shared memory left in /dev/shm");
    return 0;
}
