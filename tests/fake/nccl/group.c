/*
 * Groups and issuing: every operation goes through the calling thread's
 * group (an ungrouped call is a group of one), and at the outermost
 * ncclGroupEnd the operations are cut into batches, one per communicator
 * and stream, each enqueued as one host function on its stream.  Issuing a
 * whole group at once is what lets matching sends and receives progress
 * together.  Profiler task events start and stop here, around the enqueue,
 * as NCCL's do.  Nothing here may wait for a peer: that is the stream's job.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_fake.h"

struct group {
    int depth;
    int err;           /* first error of the open group */
    struct nf_op *ops; /* pending until the outermost end */
    size_t n, cap;
};

static __thread struct group grp;

int nf_group_start(void)
{
    grp.depth++;
    return 0;
}

int nf_group_fail(int err)
{
    if (grp.depth && !grp.err)
        grp.err = err;
    return err;
}

static int add(const struct nf_op *op)
{
    if (grp.n == grp.cap) {
        size_t cap = grp.cap ? 2 * grp.cap : 16;
        struct nf_op *ops = realloc(grp.ops, cap * sizeof(*ops));

        if (!ops)
            return nf_group_fail(nf_fail(-ENOMEM, "out of memory for a group"));
        grp.ops = ops;
        grp.cap = cap;
    }
    grp.ops[grp.n++] = *op;
    return 0;
}

/* Whether op belongs to the batch of (comm, stream). */
static bool same_batch(const struct nf_op *op, const struct nf_op *first)
{
    return op->comm == first->comm && op->stream == first->stream;
}

/* Enqueues one batch; the batch belongs to the stream once launched. */
static int issue(struct nf_batch *b)
{
    struct nf_comm *c = b->comm;
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    CUstream stream = b->ops[0].stream;
    void **events;
    CUresult res;
    int err;

    err = nf_comm_status(c);
    if (err == -EINPROGRESS)
        err = nf_fail(-EPERM, "rank %d: communicator still initialising", c->rank);
    if (!err && c->finalized)
        err = nf_fail(-EPERM, "rank %d: communicator already finalized", c->rank);
    if (!err && nf_drv.cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS &&
        capture != CU_STREAM_CAPTURE_STATUS_NONE)
        err = nf_fail(-EPERM, "the test double cannot capture NCCL operations into a graph");
    events = err ? NULL : calloc(b->nops, sizeof(void *));
    if (!err && !events)
        err = nf_fail(-ENOMEM, "out of memory for a batch");
    if (err) {
        free(b);
        return err;
    }

    /* Once launched, b belongs to the stream's worker, which frees it. */
    size_t nops = b->nops;
    for (size_t i = 0; i < nops; i++)
        events[i] = b->ops[i].prof = nf_prof_task_start(&b->ops[i]);
    b->seq = atomic_fetch_add(&c->issued, 1) + 1;
    res = nf_drv.cuLaunchHostFunc(stream, nf_batch_run, b);
    if (res != CUDA_SUCCESS) {
        /* Never launched: run it here, empty, to keep the comm's order. */
        b->cancelled = true;
        nf_batch_run(b);
        err = nf_fail(-EIO, "cuLaunchHostFunc failed: CUresult %d", (int)res);
    }
    for (size_t i = 0; i < nops; i++)
        nf_prof_task_stop(events[i]);
    free(events);
    return err;
}

/* Cuts the pending operations into batches and issues them, in order. */
static int issue_all(void)
{
    bool *taken = calloc(grp.n, sizeof(bool));
    int err = nf_drv_enter(), first_err = 0;

    if (!taken)
        return nf_fail(-ENOMEM, "out of memory for a group");
    for (size_t i = 0; i < grp.n && !err; i++) {
        struct nf_batch *b;
        size_t n = 0;

        if (taken[i])
            continue;
        for (size_t j = i; j < grp.n; j++)
            n += !taken[j] && same_batch(&grp.ops[j], &grp.ops[i]);
        b = calloc(1, sizeof(*b) + n * sizeof(struct nf_op));
        if (!b) {
            err = nf_fail(-ENOMEM, "out of memory for a batch");
            break;
        }
        b->comm = grp.ops[i].comm;
        /* Collectives first, in order; then sends and receives, in order. */
        for (int pass = 0; pass < 2; pass++)
            for (size_t j = i; j < grp.n; j++)
                if (!taken[j] && same_batch(&grp.ops[j], &grp.ops[i]) &&
                    (grp.ops[j].func >= NF_SEND) == (pass == 1))
                    b->ops[b->nops++] = grp.ops[j];
        for (size_t j = i; j < grp.n; j++)
            taken[j] = taken[j] || same_batch(&grp.ops[j], &grp.ops[i]);
        err = issue(b);
        if (err && !first_err)
            first_err = err;
        err = 0; /* other comms' batches still go */
    }
    free(taken);
    return err ? err : first_err;
}

int nf_group_end(void)
{
    int err;

    if (grp.depth == 0)
        return nf_fail(-EPERM, "ncclGroupEnd without ncclGroupStart");
    if (--grp.depth > 0)
        return 0;
    err = grp.err;
    if (!err && grp.n)
        err = issue_all();
    grp.n = 0;
    grp.err = 0;
    return err;
}

int nf_enqueue(const struct nf_op *op)
{
    int err, end;

    nf_group_start();
    err = add(op);
    end = nf_group_end();
    return err ? err : end;
}
