/*
 * mlp-train: a data-parallel training program that does what PyTorch DDP
 * does, in one CUDA C source that builds with nvcc for a GPU and as plain C
 * against libckpt's CPU test double.  It is the unmodified binary libckpt is
 * tested and measured on: every parameter, optimizer state and scratch
 * tensor has its own cudaMalloc; rank 0's initial weights are broadcast;
 * each rank trains on its shard of every global batch, copied in from
 * pinned host memory; gradients are all-reduced in one bucket per layer,
 * last layer first; the loss is copied to the host and the stream
 * synchronised every iteration.  The same arguments and rank count give the
 * same loss lines and the same final digest on every run.  Of what the host
 * holds, only the loop counter changes during training, so device memory at
 * an iteration boundary is the whole training state.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include "mlp_kernels.h"
#include "rendezvous.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define BLOCK 256
#define WATCHDOG_PERIOD_MS 100

enum { OPT_ADAM, OPT_SGD };

static int g_rank; /* for messages only */

/* ---- errors: a CUDA or NCCL call that fails ends the program with a
 * message naming the call, and status 1. ---- */

#define CUDA_CHECK(call) cuda_check((call), #call)
#define NCCL_CHECK(call) nccl_check((call), #call)

static void cuda_check(cudaError_t err, const char *call)
{
    if (err == cudaSuccess)
        return;
    fprintf(stderr, "mlp-train[rank %d]: %s failed: %s (%s)\n", g_rank, call,
            cudaGetErrorName(err), cudaGetErrorString(err));
    exit(1);
}

/* A call may be the first to learn that a peer died: NCCL fails any call
 * on a communicator that has seen a remote error. */
static void nccl_check(ncclResult_t res, const char *call)
{
    if (res == ncclSuccess)
        return;
    fprintf(stderr, "mlp-train[rank %d]: %s failed: %s%s\n", g_rank, call,
            ncclGetErrorString(res), res == ncclRemoteError ? " (a peer rank failed)" : "");
    exit(1);
}

static void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "mlp-train[rank %d]: out of host memory (%zu bytes)\n", g_rank, bytes);
        exit(1);
    }
    return p;
}

/* ---- command line and environment: a bad value is a usage error, status 2 ---- */

typedef struct {
    int iters, layers, hidden, batch, optimizer, activation;
    unsigned long long seed;
    float lr;
} options;

typedef struct {
    int rank, world, local_rank;
    const char *master_addr, *master_port;
} topology;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mlp-train [options]\n"
            "Trains an MLP on a synthetic regression task, data-parallel over the\n"
            "ranks named by RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT\n"
            "(as torchrun sets them; one rank when they are unset).\n"
            "  --iters N          iterations (default 100)\n"
            "  --seed S           seed of the initial weights and the data (default 1)\n"
            "  --layers L         linear layers, H x H each (default 4)\n"
            "  --hidden H         width of every layer (default 256)\n"
            "  --batch B          global batch, split evenly over the ranks (default 32)\n"
            "  --optimizer NAME   adam (default) or sgd (with momentum 0.9)\n"
            "  --lr X             learning rate (default 1e-3 for adam, 0.5 for sgd)\n"
            "  --activation NAME  relu (default) or tanh\n"
            "  --help             this text\n"
            "Rank 0 prints 'iter I loss X' after every iteration and, at the end,\n"
            "'digest D': an XXH64 of all parameters and optimizer state.\n");
}

__attribute__((noreturn, format(printf, 1, 2))) static void bad_usage(const char *fmt, ...)
{
    va_list ap;
    char msg[512];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One write: stderr is unbuffered, and other ranks write to the same pipe. */
    fprintf(stderr, "mlp-train: %s\n(mlp-train --help lists the options)\n", msg);
    exit(2);
}

/* A decimal integer in [lo, hi], or a usage error naming `what`. */
static long long parse_int(const char *s, long long lo, long long hi, const char *what)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        bad_usage("%s must be an integer in [%lld, %lld], not '%s'", what, lo, hi, s);
    return v;
}

static void parse_options(int argc, char **argv, options *o)
{
    static const struct option longopts[] = {
        {"iters", required_argument, NULL, 'i'},
        {"seed", required_argument, NULL, 's'},
        {"layers", required_argument, NULL, 'l'},
        {"hidden", required_argument, NULL, 'h'},
        {"batch", required_argument, NULL, 'b'},
        {"optimizer", required_argument, NULL, 'o'},
        {"lr", required_argument, NULL, 'r'},
        {"activation", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    int c;

    o->iters = 100;
    o->seed = 1;
    o->layers = 4;
    o->hidden = 256;
    o->batch = 32;
    o->optimizer = OPT_ADAM;
    o->activation = ACT_RELU;
    o->lr = 0.0f;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': o->iters = (int)parse_int(optarg, 1, 1000000000, "--iters"); break;
        case 's': o->seed = (unsigned long long)parse_int(optarg, 0, INT64_MAX, "--seed"); break;
        case 'l': o->layers = (int)parse_int(optarg, 1, 4096, "--layers"); break;
        case 'h': o->hidden = (int)parse_int(optarg, 1, 65536, "--hidden"); break;
        case 'b': o->batch = (int)parse_int(optarg, 1, 1 << 20, "--batch"); break;
        case 'o':
            if (!strcmp(optarg, "adam"))
                o->optimizer = OPT_ADAM;
            else if (!strcmp(optarg, "sgd"))
                o->optimizer = OPT_SGD;
            else
                bad_usage("--optimizer must be adam or sgd, not '%s'", optarg);
            break;
        case 'a':
            if (!strcmp(optarg, "relu"))
                o->activation = ACT_RELU;
            else if (!strcmp(optarg, "tanh"))
                o->activation = ACT_TANH;
            else
                bad_usage("--activation must be relu or tanh, not '%s'", optarg);
            break;
        case 'r':
            errno = 0;
            o->lr = strtof(optarg, &end);
            if (errno || end == optarg || *end || !(o->lr > 0.0f && o->lr < 1000.0f))
                bad_usage("--lr must be a number in (0, 1000), not '%s'", optarg);
            break;
        case 'H':
            usage(stdout);
            exit(0);
        case ':':
            bad_usage("option '%s' needs a value", argv[optind - 1]);
        default:
            bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        bad_usage("unexpected argument '%s'", argv[optind]);
    if (o->lr == 0.0f)
        o->lr = o->optimizer == OPT_ADAM ? 1e-3f : 0.5f;
}

/* The variables torchrun sets; the defaults make one rank. */
static void read_topology(topology *t)
{
    const char *world = getenv("WORLD_SIZE"), *rank = getenv("RANK");
    const char *local = getenv("LOCAL_RANK"), *addr = getenv("MASTER_ADDR");
    const char *port = getenv("MASTER_PORT");

    t->world = world ? (int)parse_int(world, 1, 1 << 20, "WORLD_SIZE") : 1;
    t->rank = rank ? (int)parse_int(rank, 0, t->world - 1, "RANK") : 0;
    t->local_rank = local ? (int)parse_int(local, 0, 1 << 20, "LOCAL_RANK") : t->rank;
    t->master_addr = addr ? addr : "127.0.0.1";
    t->master_port = port ? port : "29500";
    g_rank = t->rank;
}

/* ---- the synthetic dataset ---- */

/* Streams of hash_uniform, one per use, so that no two share numbers. */
#define STREAM_DATA 1ull
#define STREAM_TEACHER 2ull /* + 1 for its second layer */
#define STREAM_WEIGHTS 4ull /* + 2 * layer, + 1 for the bias */
#define TEACHER_SEED 0x7eac4e7ull
#define TEACHER_UNITS 2

/* Sample s has inputs uniform in [-1, 1)^dim drawn from (seed, s), so that
 * any rank can produce any sample, and as target the output of a fixed
 * teacher network, dim -> TEACHER_UNITS tanh units -> dim, whose weights do
 * not depend on the seed and are scaled to give its hidden units inputs of
 * unit variance.  A student MLP can fit it, so the loss really falls. */
typedef struct {
    uint64_t seed;
    size_t dim;
    float *in, *out; /* TEACHER_UNITS x dim and dim x TEACHER_UNITS */
} dataset;

static void dataset_init(dataset *d, uint64_t seed, int dim)
{
    size_t n = (size_t)TEACHER_UNITS * dim;

    d->seed = seed;
    d->dim = (size_t)dim;
    d->in = (float *)host_alloc(n * sizeof(float));
    d->out = (float *)host_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        d->in[i] = hash_uniform(TEACHER_SEED, STREAM_TEACHER, i);
        d->out[i] = hash_uniform(TEACHER_SEED, STREAM_TEACHER + 1, i);
    }
}

static void dataset_destroy(dataset *d)
{
    free(d->in);
    free(d->out);
}

/* Samples first .. first + rows - 1 into x and t, rows x dim each. */
static void dataset_batch(const dataset *d, uint64_t first, int rows, float *x, float *t)
{
    size_t dim = d->dim;
    float in_scale = 3.0f / sqrtf((float)dim), out_scale = sqrtf(3.0f / TEACHER_UNITS);

    for (int r = 0; r < rows; r++, x += dim, t += dim) {
        float hidden[TEACHER_UNITS];
        for (size_t k = 0; k < dim; k++)
            x[k] = hash_uniform(d->seed, STREAM_DATA, (first + (uint64_t)r) * dim + k);
        for (int q = 0; q < TEACHER_UNITS; q++) {
            float acc = 0.0f;
            for (size_t k = 0; k < dim; k++)
                acc += d->in[q * dim + k] * x[k];
            hidden[q] = tanhf(in_scale * acc);
        }
        for (size_t j = 0; j < dim; j++) {
            float acc = 0.0f;
            for (int q = 0; q < TEACHER_UNITS; q++)
                acc += d->out[j * TEACHER_UNITS + q] * hidden[q];
            t[j] = out_scale * acc;
        }
    }
}

/* ---- the model: every tensor its own allocation, as frameworks make them ---- */

typedef struct {
    float *w, *b;     /* parameters; w is hidden x hidden, row-major */
    float *grad;      /* the layer's gradient bucket: dw, then db */
    float *m_w, *m_b; /* Adam's first moments, or SGD's momentum */
    float *v_w, *v_b; /* Adam's second moments; NULL under SGD */
    float *out;       /* the layer's output for the local batch */
} linear_layer;

typedef struct {
    int layers, hidden, rows; /* rows: this rank's share of the batch */
    linear_layer *layer;
    float *x, *t;             /* the local batch: inputs and targets */
    float *delta[2];          /* output gradients, ping-pong over layers */
    float *row_loss, *loss;
    unsigned long long *step; /* the optimizer's step counter */
    float *host_x, *host_t;   /* pinned staging of the batch */
} model;

static float *device_floats(size_t n)
{
    void *p;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
    return (float *)p;
}

static void device_zero(void *p, size_t bytes, cudaStream_t s)
{
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
}

/* Allocates everything in one fixed order (a restore matches allocations
 * by their order) and zeroes the optimizer state on s. */
static void model_create(model *m, const options *o, int rows, cudaStream_t s)
{
    size_t h = (size_t)o->hidden, hh = h * h, batch = (size_t)rows * h;
    void *p;

    m->layers = o->layers;
    m->hidden = o->hidden;
    m->rows = rows;
    m->layer = (linear_layer *)host_alloc((size_t)o->layers * sizeof(linear_layer));
    for (int l = 0; l < o->layers; l++) {
        linear_layer *y = &m->layer[l];
        y->w = device_floats(hh);
        y->b = device_floats(h);
        y->grad = device_floats(hh + h);
        y->m_w = device_floats(hh);
        y->m_b = device_floats(h);
        device_zero(y->m_w, hh * sizeof(float), s);
        device_zero(y->m_b, h * sizeof(float), s);
        y->v_w = y->v_b = NULL;
        if (o->optimizer == OPT_ADAM) {
            y->v_w = device_floats(hh);
            y->v_b = device_floats(h);
            device_zero(y->v_w, hh * sizeof(float), s);
            device_zero(y->v_b, h * sizeof(float), s);
        }
        y->out = device_floats(batch);
    }
    m->x = device_floats(batch);
    m->t = device_floats(batch);
    m->delta[0] = device_floats(batch);
    m->delta[1] = device_floats(batch);
    m->row_loss = device_floats((size_t)rows);
    m->loss = device_floats(1);
    CUDA_CHECK(cudaMalloc(&p, sizeof(*m->step)));
    m->step = (unsigned long long *)p;
    device_zero(m->step, sizeof(*m->step), s);
    CUDA_CHECK(cudaMallocHost(&p, batch * sizeof(float)));
    m->host_x = (float *)p;
    CUDA_CHECK(cudaMallocHost(&p, batch * sizeof(float)));
    m->host_t = (float *)p;
}

static void model_destroy(model *m)
{
    for (int l = 0; l < m->layers; l++) {
        linear_layer *y = &m->layer[l];
        float *tensors[] = {y->w, y->b, y->grad, y->m_w, y->m_b, y->v_w, y->v_b, y->out};
        for (size_t i = 0; i < sizeof(tensors) / sizeof(tensors[0]); i++)
            CUDA_CHECK(cudaFree(tensors[i]));
    }
    float *scratch[] = {m->x, m->t, m->delta[0], m->delta[1], m->row_loss, m->loss};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
        CUDA_CHECK(cudaFree(scratch[i]));
    CUDA_CHECK(cudaFree(m->step));
    CUDA_CHECK(cudaFreeHost(m->host_x));
    CUDA_CHECK(cudaFreeHost(m->host_t));
    free(m->layer);
}

static dim3 grid_for(size_t n)
{
    size_t blocks = (n + BLOCK - 1) / BLOCK;
    return DIM3(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

/* Rank 0 draws the initial weights from the seed as nn.Linear does (uniform
 * in +-1/sqrt(fan_in)), and the broadcast gives every rank that model, as
 * DDP's constructor does. */
static void model_init(model *m, const options *o, int rank, ncclComm_t comm, cudaStream_t s)
{
    size_t h = (size_t)m->hidden, hh = h * h;
    float bound = 1.0f / sqrtf((float)m->hidden);

    for (int l = 0; l < m->layers; l++) {
        linear_layer *y = &m->layer[l];
        if (rank == 0) {
            unsigned long long stream = STREAM_WEIGHTS + 2ull * (unsigned)l;
            CUDA_CHECK(init_uniform_launch(grid_for(hh), DIM3(BLOCK), s, hh, o->seed, stream,
                                           bound, y->w));
            CUDA_CHECK(init_uniform_launch(grid_for(h), DIM3(BLOCK), s, h, o->seed, stream + 1,
                                           bound, y->b));
        }
        NCCL_CHECK(ncclBroadcast(y->w, y->w, hh, ncclFloat, 0, comm, s));
        NCCL_CHECK(ncclBroadcast(y->b, y->b, h, ncclFloat, 0, comm, s));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
}

/* ---- training ---- */

/* Enqueues iteration `iter` (from 1) on s: this rank's shard of the global
 * batch, forward, MSE loss, backward with each layer's bucket all-reduced
 * as soon as it is complete (last layer first, as DDP's reducer does), then
 * the optimizer on the mean gradient.  The caller synchronises s before the
 * staging buffers are written again. */
static void train_step(model *m, const options *o, const dataset *data, int rank, int world,
                       ncclComm_t comm, cudaStream_t s, int iter)
{
    int h = m->hidden, rows = m->rows, last = m->layers - 1;
    size_t hh = (size_t)h * h, batch = (size_t)rows * h;
    uint64_t first = (uint64_t)(iter - 1) * (uint64_t)o->batch + (uint64_t)rank * rows;
    float scale = 1.0f / (float)batch, g_scale = 1.0f / (float)world;
    float *d = m->delta[0], *d_in = m->delta[1];

    dataset_batch(data, first, rows, m->host_x, m->host_t);
    CUDA_CHECK(cudaMemcpyAsync(m->x, m->host_x, batch * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(m->t, m->host_t, batch * sizeof(float), cudaMemcpyHostToDevice, s));

    for (int l = 0; l <= last; l++) {
        linear_layer *y = &m->layer[l];
        CUDA_CHECK(linear_forward_launch(grid_for(batch), DIM3(BLOCK), s, rows, h, h,
                                         l ? m->layer[l - 1].out : m->x, y->w, y->b,
                                         l == last ? ACT_NONE : o->activation, y->out));
    }
    CUDA_CHECK(mse_rows_launch(grid_for((size_t)rows), DIM3(BLOCK), s, rows, h,
                               m->layer[last].out, m->t, 2.0f * scale, d, m->row_loss));
    CUDA_CHECK(mse_total_launch(DIM3(1), DIM3(1), s, rows, m->row_loss, scale, m->loss));

    for (int l = last; l >= 0; l--) {
        linear_layer *y = &m->layer[l];
        const float *in = l ? m->layer[l - 1].out : m->x;
        CUDA_CHECK(linear_backward_params_launch(grid_for(hh + h), DIM3(BLOCK), s, rows, h, h,
                                                 d, in, y->grad));
        NCCL_CHECK(ncclAllReduce(y->grad, y->grad, hh + h, ncclFloat, ncclSum, comm, s));
        if (l) {
            float *done = d;
            CUDA_CHECK(linear_backward_input_launch(grid_for(batch), DIM3(BLOCK), s, rows, h, h,
                                                    d, y->w, in, o->activation, d_in));
            d = d_in;
            d_in = done;
        }
    }

    CUDA_CHECK(step_tick_launch(DIM3(1), DIM3(1), s, m->step));
    for (int l = 0; l <= last; l++) {
        linear_layer *y = &m->layer[l];
        if (o->optimizer == OPT_ADAM) {
            CUDA_CHECK(adam_update_launch(grid_for(hh), DIM3(BLOCK), s, hh, y->grad, g_scale,
                                          o->lr, m->step, y->w, y->m_w, y->v_w));
            CUDA_CHECK(adam_update_launch(grid_for(h), DIM3(BLOCK), s, (size_t)h, y->grad + hh,
                                          g_scale, o->lr, m->step, y->b, y->m_b, y->v_b));
        } else {
            CUDA_CHECK(sgd_update_launch(grid_for(hh), DIM3(BLOCK), s, hh, y->grad, g_scale,
                                         o->lr, y->w, y->m_w));
            CUDA_CHECK(sgd_update_launch(grid_for(h), DIM3(BLOCK), s, (size_t)h, y->grad + hh,
                                         g_scale, o->lr, y->b, y->m_b));
        }
    }
}

static void digest_tensor(XXH64_state_t *st, float *buf, const float *t, size_t n)
{
    CUDA_CHECK(cudaMemcpy(buf, t, n * sizeof(float), cudaMemcpyDeviceToHost));
    XXH64_update(st, buf, n * sizeof(float));
}

/* XXH64 of every parameter, then all optimizer state, then the step
 * counter, read back from the device in that fixed order. */
static uint64_t model_digest(const model *m)
{
    size_t h = (size_t)m->hidden, hh = h * h;
    float *buf = (float *)host_alloc(hh * sizeof(float));
    unsigned long long step;
    XXH64_state_t st;

    XXH64_reset(&st, 0);
    for (int l = 0; l < m->layers; l++) {
        digest_tensor(&st, buf, m->layer[l].w, hh);
        digest_tensor(&st, buf, m->layer[l].b, h);
    }
    for (int l = 0; l < m->layers; l++) {
        const linear_layer *y = &m->layer[l];
        digest_tensor(&st, buf, y->m_w, hh);
        digest_tensor(&st, buf, y->m_b, h);
        if (y->v_w) {
            digest_tensor(&st, buf, y->v_w, hh);
            digest_tensor(&st, buf, y->v_b, h);
        }
    }
    CUDA_CHECK(cudaMemcpy(&step, m->step, sizeof(step), cudaMemcpyDeviceToHost));
    XXH64_update(&st, &step, sizeof(step));
    free(buf);
    return XXH64_digest(&st);
}

/* ---- the failure of a peer ---- */

/* NCCL reports a dead or failed peer only through the communicator's
 * asynchronous error.  The process ends at once, without tearing the
 * communicator down (which could wait on the dead peer): the other ranks
 * learn of this one's end from its exit, as it learned of the failed one's.
 * Only the first caller reports; a second one waits for the exit. */
__attribute__((noreturn)) static void peer_failed(ncclComm_t comm, ncclResult_t err, int iter)
{
    static int reported;

    if (__atomic_exchange_n(&reported, 1, __ATOMIC_ACQ_REL))
        for (;;)
            pause();
    fprintf(stderr, "mlp-train[rank %d]: a peer rank failed at iteration %d, giving up: %s (%s)\n",
            g_rank, iter, ncclGetErrorString(err), ncclGetLastError(comm));
    fflush(stdout);
    _exit(1);
}

/* A watchdog thread, as PyTorch's ProcessGroupNCCL runs one, for what the
 * main thread cannot see: on a GPU, a collective whose peer died never
 * completes, and the main thread stays in cudaStreamSynchronize. */
typedef struct {
    ncclComm_t comm; /* the job's communicator */
    int iter;        /* the iteration the main thread is in; 0 before */
    int stop;
    pthread_t thread;
} watchdog;

static void *watchdog_run(void *arg)
{
    watchdog *w = (watchdog *)arg;
    struct timespec period = {0, WATCHDOG_PERIOD_MS * 1000000L};

    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        ncclResult_t err;
        if (ncclCommGetAsyncError(w->comm, &err) == ncclSuccess && err != ncclSuccess &&
            err != ncclInProgress)
            peer_failed(w->comm, err, __atomic_load_n(&w->iter, __ATOMIC_RELAXED));
        nanosleep(&period, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    options o;
    topology t;
    ncclUniqueId id;
    ncclComm_t comm;
    dataset data;
    model m;
    watchdog dog;
    cudaStream_t s;
    int devices;

    setvbuf(stdout, NULL, _IOLBF, 0);
    parse_options(argc, argv, &o);
    read_topology(&t);
    if (o.batch % t.world)
        bad_usage("--batch %d must be a multiple of WORLD_SIZE, %d", o.batch, t.world);

    CUDA_CHECK(cudaGetDeviceCount(&devices));
    CUDA_CHECK(cudaSetDevice(t.local_rank % devices));
    CUDA_CHECK(cudaStreamCreate(&s));
    if (t.rank == 0)
        NCCL_CHECK(ncclGetUniqueId(&id));
    rendezvous rv = {t.master_addr, t.master_port, t.rank, t.world};
    rendezvous_share(&rv, &id);
    NCCL_CHECK(ncclCommInitRank(&comm, t.world, id, t.rank));
    dog.comm = comm;
    dog.iter = 0;
    dog.stop = 0;
    if (pthread_create(&dog.thread, NULL, watchdog_run, &dog)) {
        fprintf(stderr, "mlp-train[rank %d]: cannot start the watchdog thread\n", t.rank);
        return 1;
    }

    dataset_init(&data, o.seed, o.hidden);
    model_create(&m, &o, o.batch / t.world, s);
    model_init(&m, &o, t.rank, comm, s);
    for (int iter = 1; iter <= o.iters; iter++) {
        float loss;
        ncclResult_t err;

        __atomic_store_n(&dog.iter, iter, __ATOMIC_RELAXED);
        train_step(&m, &o, &data, t.rank, t.world, comm, s, iter);
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaMemcpy(&loss, m.loss, sizeof(loss), cudaMemcpyDeviceToHost));
        NCCL_CHECK(ncclCommGetAsyncError(comm, &err));
        if (err != ncclSuccess)
            peer_failed(comm, err, iter);
        if (t.rank == 0)
            printf("iter %d loss %.9g\n", iter, loss);
    }
    __atomic_store_n(&dog.stop, 1, __ATOMIC_RELEASE);
    pthread_join(dog.thread, NULL);

    if (t.rank == 0)
        printf("digest %016llx\n", (unsigned long long)model_digest(&m));
    NCCL_CHECK(ncclCommDestroy(comm));
    model_destroy(&m);
    dataset_destroy(&data);
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
}
