/*
 * Executing operations: the host function that runs a batch on its stream's
 * worker, once everything before it on that stream has run, and the data
 * movement of every collective and point-to-point operation through the
 * ranks' slots of the shared segment.  A collective moves in chunks of one
 * slot: each rank posts its part, all meet at a barrier, each computes its
 * result from the slots (reductions in rank order 0..n-1, so that every
 * rank gets the same bits), and all meet again before a slot is reused.
 * A point-to-point chunk goes through an area of the sender's slot reserved
 * for that receiver.  Nothing here may block without a bounded wait, and a
 * failure must still end the batch, so the stream moves on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_fake.h"

/* What a collective needs while it runs. */
struct run {
    struct nf_comm *c;
    struct nf_seg *seg;
    struct nf_wait wait;
    int n;
    int me;
    size_t es; /* element size */
    /* Pacing: the batch's wire bytes cross the modelled link between t0 and
     * until, chunk by chunk, so that a rank killed mid-way stops its peers
     * mid-way too (the wire bytes of the batch's earlier ops in wire_before). */
    uint64_t t0, until;
    size_t wire, wire_before;
};

/* One record per operation in the comm's FIFO buffer, as a kernel's work item. */
struct fifo_entry {
    uint64_t op;
    uint32_t func;
    uint32_t type;
    uint64_t count;
    uint64_t sendbuff;
    uint64_t recvbuff;
    int32_t peer;
    int32_t rank;
    unsigned char pad[16];
};
_Static_assert(sizeof(struct fifo_entry) == 64, "one FIFO entry per 64 bytes");

static pthread_once_t net_once = PTHREAD_ONCE_INIT;
static struct fg_link net; /* this process's NIC: FAKEGPU_NET_GBPS */

static void net_init(void)
{
    fg_link_init(&net, fg_env_double("FAKEGPU_NET_GBPS", 0));
}

static unsigned char *slot(const struct run *x, int rank)
{
    return nf_seg_slot(x->seg, rank);
}

static size_t slot_bytes(const struct run *x)
{
    return x->seg->hdr->slot_bytes;
}

const char *nf_func_name(enum nf_func func)
{
    static const char *const names[NF_NFUNCS] = {
        "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "Send", "Recv",
    };

    return names[func];
}

size_t nf_op_wire_bytes(const struct nf_op *op, int nranks)
{
    size_t bytes = op->count * nf_type_size(op->type);

    if (nranks == 1 || op->func == NF_RECV)
        return 0;
    switch (op->func) {
    case NF_ALLREDUCE: /* a ring: reduce-scatter, then all-gather */
        return 2 * bytes / (size_t)nranks * (size_t)(nranks - 1);
    case NF_ALLGATHER:
    case NF_REDUCESCATTER:
        return bytes * (size_t)(nranks - 1);
    default:
        return bytes;
    }
}

/*
 * The library's device memory, written as its kernels would: the op's
 * descriptor into the FIFO before the data moves, the completion counter
 * into the flags buffer after.  Device memory is host memory in the double.
 */
static void fifo_post(struct nf_comm *c, const struct nf_op *op)
{
    struct fifo_entry *e = (struct fifo_entry *)(uintptr_t)c->fifo +
                           c->ops_run % (NF_FIFO_BYTES / sizeof(struct fifo_entry));

    *e = (struct fifo_entry){
        .op = c->ops_run + 1,
        .func = op->func,
        .type = (uint32_t)op->type,
        .count = op->count,
        .sendbuff = (uintptr_t)op->sendbuff,
        .recvbuff = (uintptr_t)op->recvbuff,
        .peer = op->peer,
        .rank = c->rank,
    };
}

static void flags_post(struct nf_comm *c)
{
    atomic_store((_Atomic uint64_t *)(uintptr_t)c->flags, ++c->ops_run);
}

/* ---- collectives ---------------------------------------------------- */

/* Sleeps until the link has carried done of this op's wire bytes. */
static void pace(const struct run *x, size_t done)
{
    if (x->wire && x->until > x->t0)
        fg_sleep_until_ns(x->t0 + (uint64_t)((double)(x->until - x->t0) *
                                             (double)(x->wire_before + done) / (double)x->wire));
}

/* The same, for off + len of an op's count elements. */
static void pace_op(const struct run *x, const struct nf_op *op, size_t upto)
{
    pace(x, (size_t)((double)nf_op_wire_bytes(op, x->n) * (double)upto / (double)op->count));
}

/* Whether every peer has taken the p2p chunks this rank posted. */
static bool p2p_drained(const struct nf_seg *seg, void *arg)
{
    const struct nf_comm *c = arg;

    for (int q = 0; q < seg->nranks; q++)
        if (atomic_load(&nf_seg_rank(seg, q)->p2p[seg->nranks + seg->rank]) < c->p2p_sent[q])
            return false;
    return true;
}

/* A PreMulSum multiplies this rank's part by its scalar before the sum:
 * read from the device as the op runs, or the value given when queued. */
static void premultiply(const struct nf_op *op, void *part, size_t len)
{
    if (op->premul)
        nf_premultiply(part, len, op->type, op->scalar_dev ? op->scalar_dev : (const void *)op->scalar);
}

/* out = slot[0] op slot[1] op ... op slot[n-1], at byte offset off of each slot. */
static void reduce_slots(const struct run *x, const struct nf_op *op, void *out, size_t len,
                         size_t off)
{
    memcpy(out, slot(x, 0) + off, len * x->es);
    for (int p = 1; p < x->n; p++)
        nf_reduce(out, slot(x, p) + off, len, op->type, op->redop);
    if (op->redop == ncclAvg)
        nf_divide(out, len, op->type, x->n);
}

/* AllReduce, and Reduce (only the root keeps the result). */
static int allreduce(struct run *x, const struct nf_op *op, bool everyone)
{
    const unsigned char *send = op->sendbuff;
    unsigned char *recv = op->recvbuff;
    size_t chunk = slot_bytes(x) / x->es;
    int err;

    for (size_t off = 0; off < op->count; off += chunk) {
        size_t len = op->count - off < chunk ? op->count - off : chunk;

        memcpy(slot(x, x->me), send + off * x->es, len * x->es);
        premultiply(op, slot(x, x->me), len);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        if (everyone || x->me == op->peer)
            reduce_slots(x, op, recv + off * x->es, len, 0);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        pace_op(x, op, off + len);
    }
    return 0;
}

static int broadcast(struct run *x, const struct nf_op *op)
{
    const unsigned char *send = op->sendbuff;
    unsigned char *recv = op->recvbuff;
    size_t chunk = slot_bytes(x) / x->es;
    int err;

    for (size_t off = 0; off < op->count; off += chunk) {
        size_t len = op->count - off < chunk ? op->count - off : chunk;

        if (x->me == op->peer)
            memcpy(slot(x, x->me), send + off * x->es, len * x->es);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        memcpy(recv + off * x->es, slot(x, op->peer), len * x->es);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        pace_op(x, op, off + len);
    }
    return 0;
}

/* count is per rank; rank p's part lands at recvbuff + p * count. */
static int allgather(struct run *x, const struct nf_op *op)
{
    const unsigned char *send = op->sendbuff;
    unsigned char *recv = op->recvbuff;
    size_t chunk = slot_bytes(x) / x->es;
    int err;

    for (size_t off = 0; off < op->count; off += chunk) {
        size_t len = op->count - off < chunk ? op->count - off : chunk;

        memcpy(slot(x, x->me), send + off * x->es, len * x->es);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        for (int p = 0; p < x->n; p++)
            memcpy(recv + ((size_t)p * op->count + off) * x->es, slot(x, p), len * x->es);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        pace_op(x, op, off + len);
    }
    return 0;
}

/*
 * count is per rank: rank r gets the reduction of every rank's part r.  A
 * chunk posts len elements of every part, so that each rank finds its own
 * part of every slot at the same offset.
 */
static int reducescatter(struct run *x, const struct nf_op *op)
{
    const unsigned char *send = op->sendbuff;
    unsigned char *recv = op->recvbuff;
    size_t chunk = slot_bytes(x) / (x->es * (size_t)x->n);
    int err;

    for (size_t off = 0; off < op->count; off += chunk) {
        size_t len = op->count - off < chunk ? op->count - off : chunk;

        for (int q = 0; q < x->n; q++)
            memcpy(slot(x, x->me) + (size_t)q * len * x->es,
                   send + ((size_t)q * op->count + off) * x->es, len * x->es);
        premultiply(op, slot(x, x->me), len * (size_t)x->n);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        reduce_slots(x, op, recv + off * x->es, len, (size_t)x->me * len * x->es);
        if ((err = nf_seg_barrier(x->seg, &x->wait)))
            return err;
        pace_op(x, op, off + len);
    }
    return 0;
}

static int run_coll(struct run *x, const struct nf_op *op)
{
    /* The slot may still hold p2p chunks a peer has not taken yet. */
    int err = nf_seg_wait(x->seg, &x->wait, p2p_drained, x->c);

    if (err)
        return err;
    switch (op->func) {
    case NF_ALLREDUCE:
        return allreduce(x, op, true);
    case NF_REDUCE:
        return allreduce(x, op, false);
    case NF_BROADCAST:
        return broadcast(x, op);
    case NF_ALLGATHER:
        return allgather(x, op);
    case NF_REDUCESCATTER:
        return reducescatter(x, op);
    default:
        return -EINVAL;
    }
}

/* ---- point to point ------------------------------------------------- */

struct p2p {
    const struct nf_op *op;
    size_t done;  /* bytes moved */
    size_t total; /* bytes to move */
    bool finished;
    void *kernel; /* the KernelCh profiler event, while it moves data */
};

struct p2p_set {
    struct run *x;
    struct p2p *ops;
    size_t n;
};

/* The bytes of sender's slot reserved for one receiver. */
static size_t area_bytes(const struct run *x)
{
    return slot_bytes(x) / (size_t)x->n / 64 * 64;
}

/* An op waits for earlier ones of the batch in the same direction with the same peer. */
static bool blocked(const struct p2p_set *s, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (!s->ops[j].finished && s->ops[j].op->func == s->ops[i].op->func &&
            s->ops[j].op->peer == s->ops[i].op->peer)
            return true;
    return false;
}

static bool can_move(const struct run *x, const struct p2p *p)
{
    int peer = p->op->peer;

    if (p->op->func == NF_SEND) /* the receiver took everything sent so far */
        return atomic_load(&nf_seg_rank(x->seg, peer)->p2p[x->n + x->me]) >= x->c->p2p_sent[peer];
    return atomic_load(&nf_seg_rank(x->seg, peer)->p2p[x->me]) > x->c->p2p_taken[peer];
}

/* Moves one chunk; a send is finished once its last chunk is posted. */
static void move(struct run *x, struct p2p *p)
{
    struct nf_seg_rank *me = nf_seg_rank(x->seg, x->me);
    size_t area = area_bytes(x), len = p->total - p->done < area ? p->total - p->done : area;
    int peer = p->op->peer;

    if (p->op->func == NF_SEND) {
        memcpy(slot(x, x->me) + (size_t)peer * area, (const char *)p->op->sendbuff + p->done, len);
        atomic_store(&me->p2p[peer], ++x->c->p2p_sent[peer]);
    } else {
        memcpy((char *)p->op->recvbuff + p->done, slot(x, peer) + (size_t)x->me * area, len);
        atomic_store(&me->p2p[x->n + peer], ++x->c->p2p_taken[peer]);
    }
    nf_seg_ring(x->seg);
    p->done += len;
}

static bool any_movable(const struct nf_seg *seg, void *arg)
{
    const struct p2p_set *s = arg;

    (void)seg;
    for (size_t i = 0; i < s->n; i++)
        if (!s->ops[i].finished && !blocked(s, i) && can_move(s->x, &s->ops[i]))
            return true;
    return false;
}

/*
 * Progresses all sends and receives of a batch together, so that pairs
 * that depend on each other (a ring) cannot deadlock.  A KernelCh event
 * spans the time an op is eligible to move data until it is done.
 */
static int run_p2p(struct run *x, const struct nf_op *ops, size_t nops)
{
    struct p2p_set s = {x, calloc(nops, sizeof(struct p2p)), nops};
    size_t left = nops, sent = 0;
    int err = 0;

    if (!s.ops)
        return -ENOMEM;
    for (size_t i = 0; i < nops; i++) {
        s.ops[i].op = &ops[i];
        s.ops[i].total = ops[i].count * nf_type_size(ops[i].type);
    }
    fifo_post(x->c, &ops[0]); /* one kernel moves them all */
    while (left && !err) {
        bool moved = false;

        for (size_t i = 0; i < nops; i++) {
            struct p2p *p = &s.ops[i];
            size_t before;

            if (p->finished || blocked(&s, i))
                continue;
            if (!p->kernel)
                p->kernel = nf_prof_kernel_start(x->c, p->op->prof);
            if (!can_move(x, p))
                continue;
            before = p->done;
            move(x, p);
            sent += p->op->func == NF_SEND ? p->done - before : 0;
            moved = true;
            if (p->done == p->total) {
                p->finished = true;
                nf_prof_kernel_stop(p->kernel);
                p->kernel = NULL;
                left--;
            }
        }
        if (moved)
            pace(x, sent);
        else if (left)
            err = nf_seg_wait(x->seg, &x->wait, any_movable, &s);
    }
    for (size_t i = 0; i < nops; i++)
        nf_prof_kernel_stop(s.ops[i].kernel);
    free(s.ops);
    if (!err)
        flags_post(x->c);
    return err;
}

/* ---- the host function ---------------------------------------------- */

/* Waits until the comm's earlier batches have run (they may be on other streams). */
static int wait_turn(struct nf_comm *c, uint64_t seq, const struct nf_wait *wait)
{
    uint64_t deadline = fg_now_ns() + wait->timeout_ns;
    struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
    int err = 0;

    pthread_mutex_lock(&c->lock);
    while (c->done + 1 < seq && !err) {
        if (atomic_load(&c->aborting))
            err = -ECANCELED;
        else if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT)
            err = -ETIMEDOUT;
    }
    pthread_mutex_unlock(&c->lock);
    return err;
}

static int run_batch(struct nf_batch *b)
{
    struct nf_comm *c = b->comm;
    struct run x = {
        .c = c, .seg = &c->seg, .wait = nf_comm_coll_wait(c), .n = c->nranks, .me = c->rank,
    };
    size_t i, wire = 0;
    uint64_t until;
    int err;

    pthread_once(&net_once, net_init);
    for (i = 0; i < b->nops; i++)
        wire += nf_op_wire_bytes(&b->ops[i], c->nranks);
    x.t0 = fg_now_ns();
    until = fg_link_book(&net, wire);
    if (wire && net.bytes_per_ns > 0 && nf_pcie_book) { /* the bytes cross the GPU's PCIe link too */
        uint64_t pcie = nf_pcie_book(wire);
        until = pcie > until ? pcie : until;
    }
    x.until = until;
    x.wire = wire;

    for (i = 0; i < b->nops && b->ops[i].func < NF_SEND; i++) {
        void *kernel = nf_prof_kernel_start(c, b->ops[i].prof);

        x.es = nf_type_size(b->ops[i].type);
        fifo_post(c, &b->ops[i]);
        err = run_coll(&x, &b->ops[i]);
        if (!err)
            flags_post(c);
        nf_prof_kernel_stop(kernel);
        if (err)
            return err;
        x.wire_before += nf_op_wire_bytes(&b->ops[i], c->nranks);
    }
    if (i < b->nops && (err = run_p2p(&x, &b->ops[i], b->nops - i)))
        return err;
    fg_sleep_until_ns(until);
    return 0;
}

void nf_batch_run(void *arg)
{
    struct nf_batch *b = arg;
    struct nf_comm *c = b->comm;
    struct nf_wait wait = nf_comm_coll_wait(c);
    int err = wait_turn(c, b->seq, &wait);

    if (!err && !b->cancelled && !nf_comm_status(c)) {
        if (nf_device_access) /* a GPU's kernel moves the bytes; here, this host function */
            nf_device_access(1);
        err = run_batch(b);
        if (nf_device_access)
            nf_device_access(0);
        if (err)
            nf_fail(err, "rank %d: %s failed: %s%s", c->rank, nf_func_name(b->ops[0].func),
                    err == -ETIMEDOUT ? "no progress within NCCL_FAKE_TIMEOUT" :
                    err == -EPIPE ? "a peer died or left" :
                    err == -ECONNABORTED ? "a peer gave up" : strerror(-err),
                    b->nops > 1 ? " (in a group)" : "");
    }
    if (err && err != -ECANCELED)
        nf_comm_fail(c, err);

    pthread_mutex_lock(&c->lock);
    if (c->done < b->seq)
        c->done = b->seq;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    free(b);
}
