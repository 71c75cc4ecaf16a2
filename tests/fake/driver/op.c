/*
 * Units of stream work: how an op is made, copied into and out of graphs,
 * run by a stream's worker, and freed.  Running an op is the only place the
 * double touches "device memory" on behalf of the program, and it always
 * does so outside the driver lock: a kernel or host function may take as
 * long as it likes, and must never be able to deadlock the driver.  Only
 * kernels, copies and memsets may touch device pages (va.c); a host
 * function, as on a GPU, may not.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

struct fg_op *fg_op_new(enum fg_op_kind kind, unsigned nslots)
{
    size_t size = sizeof(struct fg_op) + (size_t)nslots * sizeof(struct fg_arg_slot);
    struct fg_op *op = calloc(1, size);

    if (!op)
        return NULL;
    op->kind = kind;
    op->size = size;
    return op;
}

/* Takes the references an op holds; the lock is held. */
static void op_ref(struct fg_op *op)
{
    switch (op->kind) {
    case FG_OP_RECORD:
        op->u.record.ev->refs++;
        break;
    case FG_OP_WAIT:
        op->u.wait.s->refs++;
        break;
    case FG_OP_GRAPH_ALLOC:
    case FG_OP_GRAPH_FREE:
        fg_gmem_ref(op->u.gmem);
        break;
    default:
        break;
    }
}

struct fg_op *fg_op_clone(const struct fg_op *op)
{
    struct fg_op *copy = malloc(op->size);

    if (!copy)
        return NULL;
    memcpy(copy, op, op->size);
    copy->next = NULL;
    op_ref(copy);
    return copy;
}

void fg_op_free(struct fg_op *op)
{
    switch (op->kind) {
    case FG_OP_RECORD:
        fg_event_unref(op->u.record.ev);
        break;
    case FG_OP_WAIT:
        fg_stream_unref(op->u.wait.s);
        break;
    case FG_OP_GRAPH_ALLOC:
    case FG_OP_GRAPH_FREE:
        fg_gmem_unref(op->u.gmem);
        break;
    default:
        break;
    }
    free(op);
}

static void run_kernel(const struct fg_op *op)
{
    void (*kernel)(void **) = (void (*)(void **))(void *)op->u.kernel.f;
    void *argv[FG_MAX_KERNEL_ARGS + 1];
    unsigned i;

    /* Each launch gets its own copy of the slots, so kernels may not see
     * another launch's arguments even if one of them writes to its own. */
    for (i = 0; i < op->u.kernel.nargs; i++)
        argv[i] = (void *)op->slots[i].bytes;
    argv[i] = NULL;
    kernel(argv);
}

/* A throttled copy moves its bytes over the time its link gives it, a
 * piece at a time, as a DMA engine does: work on another stream that runs
 * beside it without waiting for it sees it half done. */
#define COPY_PIECE (1u << 20)

static void run_copy(const struct fg_op *op)
{
    struct fg_link *link = op->u.copy.link;
    char *dst = op->u.copy.dst;
    const char *src = op->u.copy.src;
    size_t n = op->u.copy.n;

    if (!link || link->bytes_per_ns <= 0 || n <= COPY_PIECE) {
        uint64_t end = link ? fg_link_book(link, n) : 0;
        memmove(dst, src, n);
        if (link)
            fg_sleep_until_ns(end);
        return;
    }
    uint64_t end = fg_link_book(link, n), span = (uint64_t)((double)n / link->bytes_per_ns), start = end - span;
    for (size_t off = 0; off < n; off += COPY_PIECE) {
        fg_sleep_until_ns(start + (uint64_t)((double)span * (double)off / (double)n));
        memcpy(dst + off, src + off, n - off < COPY_PIECE ? n - off : COPY_PIECE);
    }
    fg_sleep_until_ns(end);
}

static void run_memset(const struct fg_op *op)
{
    size_t i;

    if (op->u.memset.elem == 1) {
        memset(op->u.memset.dst, (int)op->u.memset.value, op->u.memset.n);
        return;
    }
    for (i = 0; i < op->u.memset.n; i++)
        ((uint32_t *)op->u.memset.dst)[i] = op->u.memset.value;
}

void fg_op_run(struct fg_op *op)
{
    struct fg_event *ev;

    switch (op->kind) {
    case FG_OP_KERNEL:
        fg_unlock();
        fg_device_access(1);
        run_kernel(op);
        fg_device_access(0);
        fg_lock();
        break;
    case FG_OP_HOST_FN:
        fg_unlock();
        if (op->u.host.cb)
            op->u.host.cb(op->u.host.stream, CUDA_SUCCESS, op->u.host.data);
        else
            op->u.host.fn(op->u.host.data);
        fg_lock();
        break;
    case FG_OP_COPY:
        fg_unlock();
        fg_device_access(1);
        run_copy(op);
        fg_device_access(0);
        fg_lock();
        break;
    case FG_OP_MEMSET:
        fg_unlock();
        fg_device_access(1);
        run_memset(op);
        fg_device_access(0);
        fg_lock();
        break;
    case FG_OP_RECORD:
        /* A record overtaken by a later one of the same event keeps quiet:
         * the event now stands for the later record. */
        ev = op->u.record.ev;
        if (op->u.record.gen == ev->rec_gen) {
            ev->time_ns = fg_now_ns();
            ev->time_gen = op->u.record.gen;
        }
        break;
    case FG_OP_WAIT:
        while (op->u.wait.s->done_seq < op->u.wait.seq)
            fg_wait_progress();
        break;
    case FG_OP_POOL_FREE:
        fg_pool_free_queued(op->u.pool_free.block, op->u.pool_free.gen);
        break;
    case FG_OP_GRAPH_ALLOC:
    case FG_OP_GRAPH_FREE:
        fg_gmem_run(op);
        break;
    }
}
