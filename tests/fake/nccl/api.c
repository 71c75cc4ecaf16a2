/*
 * The exported NCCL API of the double: every function of ckpt_nccl.h as
 * pncclX, with ncclX a weak alias of it, as NCCL's PROFAPI build exports
 * them (an interposer can reach the real function through pncclX).  This is
 * the API edge: arguments are checked here, internal -errno results become
 * ncclResult_t here and nowhere else, and nothing here blocks on a peer
 * except initialisation and split, which NCCL also makes wait.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "nccl_fake.h"

#define NF_ALIAS(name) extern __typeof__(p##name) name __attribute__((weak, alias("p" #name)))

ncclResult_t pncclGetVersion(int *version)
{
    if (!version)
        return nf_result(nf_fail(-EINVAL, "ncclGetVersion: version is NULL"));
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}
NF_ALIAS(ncclGetVersion);

ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
    static _Atomic unsigned counter;
    struct nf_uid uid = {.magic = NF_UID_MAGIC, .version = NF_SEG_VERSION, .creator = (uint32_t)getpid()};
    unsigned long long nonce;

    if (!uniqueId)
        return nf_result(nf_fail(-EINVAL, "ncclGetUniqueId: uniqueId is NULL"));
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
        return nf_result(nf_fail(-errno, "ncclGetUniqueId: no random bytes: %s", strerror(errno)));
    snprintf(uid.name, sizeof(uid.name), "/fakenccl-%u-%d-%u-%016llx", (unsigned)getuid(),
             (int)getpid(), atomic_fetch_add(&counter, 1), nonce);
    memcpy(uniqueId, &uid, sizeof(uid));
    return ncclSuccess;
}
NF_ALIAS(ncclGetUniqueId);

ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t *config)
{
    struct nf_uid uid;
    struct nf_config cfg;
    struct nf_comm *c = NULL;
    int err;

    if (!comm)
        return nf_result(nf_fail(-EINVAL, "ncclCommInitRank: comm is NULL"));
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return nf_result(nf_fail(-EINVAL, "ncclCommInitRank: rank %d of %d", rank, nranks));
    memcpy(&uid, &commId, sizeof(uid));
    if (uid.magic != NF_UID_MAGIC || uid.version != NF_SEG_VERSION || uid.name[0] != '/' ||
        !memchr(uid.name, 0, sizeof(uid.name)))
        return nf_result(nf_fail(-EINVAL, "ncclCommInitRank: not a unique id of this library"));
    /* Real NCCL's ranks meet at a bootstrap root that runs in the process
     * that called ncclGetUniqueId: with that process gone, they cannot. */
    if (uid.creator && uid.creator != (uint32_t)getpid() && kill((pid_t)uid.creator, 0) < 0 && errno == ESRCH)
        return nf_result(nf_fail(-ECONNREFUSED, "ncclCommInitRank: the process that made the unique id (pid %u) "
                                 "is gone, and NCCL's bootstrap root with it", uid.creator));
    err = nf_config_read(config, &cfg);
    if (!err)
        err = nf_comm_init(&c, uid.name, nranks, rank, &cfg);
    *comm = (ncclComm_t)c;
    return nf_result(err);
}
NF_ALIAS(ncclCommInitRankConfig);

ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}
NF_ALIAS(ncclCommInitRank);

ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config)
{
    struct nf_comm *c = nf_comm_get(comm), *child = NULL;
    struct nf_config cfg;
    int err;

    if (!newcomm)
        return nf_result(nf_fail(-EINVAL, "ncclCommSplit: newcomm is NULL"));
    *newcomm = NULL;
    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommSplit: invalid communicator"));
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return nf_result(nf_fail(-EINVAL, "ncclCommSplit: color %d", color));
    err = config ? nf_config_read(config, &cfg) : 0;
    if (!err)
        err = nf_comm_split(c, color, key, config ? &cfg : NULL, &child);
    *newcomm = (ncclComm_t)child;
    return nf_result(err);
}
NF_ALIAS(ncclCommSplit);

ncclResult_t pncclCommFinalize(ncclComm_t comm)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommFinalize: invalid communicator"));
    return nf_result(nf_comm_finalize(c));
}
NF_ALIAS(ncclCommFinalize);

ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!comm)
        return ncclSuccess;
    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommDestroy: invalid communicator"));
    if (!c->finalized)
        nf_comm_finalize(c);
    nf_comm_release(c, false);
    return ncclSuccess;
}
NF_ALIAS(ncclCommDestroy);

ncclResult_t pncclCommAbort(ncclComm_t comm)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!comm)
        return ncclSuccess;
    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommAbort: invalid communicator"));
    nf_comm_release(c, true);
    return ncclSuccess;
}
NF_ALIAS(ncclCommAbort);

ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c || !asyncError)
        return nf_result(nf_fail(-EINVAL, "ncclCommGetAsyncError: invalid argument"));
    *asyncError = nf_result(nf_comm_status(c));
    return ncclSuccess;
}
NF_ALIAS(ncclCommGetAsyncError);

/*
 * The check NCCL makes before answering a query on a nonblocking comm:
 * not ready yet is invalid usage, a failed one reports its error.
 */
static int query_check(struct nf_comm *c, const void *out)
{
    int err;

    if (!c || !out)
        return nf_fail(-EINVAL, "invalid communicator or NULL result pointer");
    err = c->blocking ? 0 : nf_comm_status(c);
    return err == -EINPROGRESS ? nf_fail(-EPERM, "communicator still initialising") : err;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
    struct nf_comm *c = nf_comm_get(comm);
    int err = query_check(c, count);

    if (!err)
        *count = c->nranks;
    return nf_result(err);
}
NF_ALIAS(ncclCommCount);

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
    struct nf_comm *c = nf_comm_get(comm);
    int err = query_check(c, rank);

    if (!err)
        *rank = c->rank;
    return nf_result(err);
}
NF_ALIAS(ncclCommUserRank);

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
    struct nf_comm *c = nf_comm_get(comm);
    int err = query_check(c, device);

    if (!err)
        *device = c->cudev;
    return nf_result(err);
}
NF_ALIAS(ncclCommCuDevice);

const char *pncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}
NF_ALIAS(ncclGetErrorString);

const char *pncclGetLastError(ncclComm_t comm)
{
    (void)comm; /* NCCL keeps one text per process */
    return nf_last_error();
}
NF_ALIAS(ncclGetLastError);

ncclResult_t pncclGroupStart(void)
{
    return nf_result(nf_group_start());
}
NF_ALIAS(ncclGroupStart);

ncclResult_t pncclGroupEnd(void)
{
    return nf_result(nf_group_end());
}
NF_ALIAS(ncclGroupEnd);

/* ---- operations ----------------------------------------------------- */

/*
 * A PreMulSum operator of c for op's data type: op becomes a sum of parts
 * premultiplied by its scalar (a host-immediate one read now).  False for
 * any other handle.
 */
static bool user_op(struct nf_comm *c, struct nf_op *op)
{
    unsigned i = (unsigned)op->redop - ncclNumOps;
    bool ok = false;

    pthread_mutex_lock(&c->lock);
    if (i < NF_MAX_USER_OPS && c->user_ops[i].used && c->user_ops[i].type == op->type) {
        const struct nf_user_op *u = &c->user_ops[i];
        op->premul = true;
        op->redop = ncclSum;
        op->scalar_dev = u->residence == ncclScalarDevice ? u->dev : NULL;
        memcpy(op->scalar, u->value, sizeof(op->scalar));
        ok = true;
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

/*
 * Checks an operation as NCCL's argument check does, then enqueues it.
 * An operation of zero elements is valid and does nothing.  A failure also
 * fails the open group.
 */
static ncclResult_t enqueue(struct nf_op *op, ncclComm_t comm, bool needs_redop,
                            bool needs_send, bool needs_recv)
{
    struct nf_comm *c = nf_comm_get(comm);
    const char *what = NULL;
    int err = 0;

    if (!c)
        what = "invalid communicator";
    else if (!nf_type_size(op->type))
        what = "invalid data type";
    else if (needs_redop && (unsigned)op->redop >= ncclNumOps && !user_op(c, op))
        what = "invalid reduction operation";
    else if (op->peer < 0 || op->peer >= c->nranks)
        what = op->func >= NF_SEND ? "invalid peer" : "invalid root";
    else if (op->count && ((needs_send && !op->sendbuff) || (needs_recv && !op->recvbuff)))
        what = "NULL buffer";
    if (what)
        return nf_result(nf_group_fail(nf_fail(-EINVAL, "%s", what)));
    err = nf_comm_status(c);
    if (err == -EINPROGRESS)
        err = nf_fail(-EPERM, "rank %d: communicator still initialising", c->rank);
    else if (!err && atomic_load(&c->revoked))
        err = nf_fail(-EPERM, "rank %d: communicator revoked", c->rank);
    else if (!err && atomic_load(&c->suspended))
        err = nf_fail(-EPERM, "rank %d: communicator suspended", c->rank);
    if (err)
        return nf_result(nf_group_fail(err));
    if (!op->count)
        return ncclSuccess;
    op->comm = c;
    return nf_result(nf_enqueue(op));
}

ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream)
{
    struct nf_op o = {.func = NF_ALLREDUCE, .stream = stream, .sendbuff = sendbuff,
                      .recvbuff = recvbuff, .count = count, .type = datatype, .redop = op};

    return enqueue(&o, comm, true, true, true);
}
NF_ALIAS(ncclAllReduce);

ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream)
{
    struct nf_comm *c = nf_comm_get(comm);
    struct nf_op o = {.func = NF_BROADCAST, .stream = stream, .sendbuff = sendbuff,
                      .recvbuff = recvbuff, .count = count, .type = datatype, .peer = root};

    return enqueue(&o, comm, false, c && c->rank == root, true);
}
NF_ALIAS(ncclBroadcast);

ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream)
{
    struct nf_comm *c = nf_comm_get(comm);
    struct nf_op o = {.func = NF_REDUCE, .stream = stream, .sendbuff = sendbuff,
                      .recvbuff = recvbuff, .count = count, .type = datatype, .redop = op,
                      .peer = root};

    return enqueue(&o, comm, true, true, c && c->rank == root);
}
NF_ALIAS(ncclReduce);

ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    struct nf_op o = {.func = NF_ALLGATHER, .stream = stream, .sendbuff = sendbuff,
                      .recvbuff = recvbuff, .count = sendcount, .type = datatype};

    return enqueue(&o, comm, false, true, true);
}
NF_ALIAS(ncclAllGather);

ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream)
{
    struct nf_op o = {.func = NF_REDUCESCATTER, .stream = stream, .sendbuff = sendbuff,
                      .recvbuff = recvbuff, .count = recvcount, .type = datatype, .redop = op};

    return enqueue(&o, comm, true, true, true);
}
NF_ALIAS(ncclReduceScatter);

ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream)
{
    struct nf_op o = {.func = NF_SEND, .stream = stream, .sendbuff = sendbuff, .count = count,
                      .type = datatype, .peer = peer};

    return enqueue(&o, comm, false, true, false);
}
NF_ALIAS(ncclSend);

ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream)
{
    struct nf_op o = {.func = NF_RECV, .stream = stream, .recvbuff = recvbuff, .count = count,
                      .type = datatype, .peer = peer};

    return enqueue(&o, comm, false, false, true);
}
NF_ALIAS(ncclRecv);

/* ---- reduction operators -------------------------------------------- */

ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm)
{
    struct nf_comm *c = nf_comm_get(comm);
    size_t es = nf_type_size(datatype);
    int err;

    if (!c || !op || !scalar || !es || (residence != ncclScalarDevice && residence != ncclScalarHostImmediate))
        return nf_result(nf_fail(-EINVAL, "ncclRedOpCreatePreMulSum: invalid argument"));
    if ((err = nf_comm_status(c)))
        return nf_result(err == -EINPROGRESS ? nf_fail(-EPERM, "ncclRedOpCreatePreMulSum: communicator still "
                                                       "initialising") : err);
    pthread_mutex_lock(&c->lock);
    unsigned i = 0;
    while (i < NF_MAX_USER_OPS && c->user_ops[i].used)
        i++;
    if (i < NF_MAX_USER_OPS) {
        struct nf_user_op *u = &c->user_ops[i];
        *u = (struct nf_user_op){.used = true, .type = datatype, .residence = residence};
        if (residence == ncclScalarHostImmediate)
            memcpy(u->value, scalar, es);
        else
            u->dev = scalar;
    }
    pthread_mutex_unlock(&c->lock);
    if (i == NF_MAX_USER_OPS)
        return nf_result(nf_fail(-ENOMEM, "ncclRedOpCreatePreMulSum: %d operators already", NF_MAX_USER_OPS));
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
}
NF_ALIAS(ncclRedOpCreatePreMulSum);

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    struct nf_comm *c = nf_comm_get(comm);
    unsigned i = (unsigned)op - ncclNumOps;
    bool ok = false;

    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclRedOpDestroy: invalid communicator"));
    pthread_mutex_lock(&c->lock);
    if (i < NF_MAX_USER_OPS && c->user_ops[i].used) {
        c->user_ops[i].used = false;
        ok = true;
    }
    pthread_mutex_unlock(&c->lock);
    return ok ? ncclSuccess
              : nf_result(nf_fail(-EINVAL, "ncclRedOpDestroy: operator %d is not one this communicator made",
                                  (int)op));
}
NF_ALIAS(ncclRedOpDestroy);

ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream)
{
    return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
NF_ALIAS(ncclBcast);

/*
 * AlltoAll, Gather and Scatter move count elements between each pair of
 * ranks they involve: part p of a buffer is the count elements at p *
 * count.  NCCL runs them as one group of sends and receives, and so does
 * the double (its profiler events are those sends and receives).
 */
enum exchange { ALLTOALL, GATHER, SCATTER };

static ncclResult_t exchange(enum exchange kind, const void *sendbuff, void *recvbuff, size_t count,
                             ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    static const char *const names[] = {"ncclAlltoAll", "ncclGather", "ncclScatter"};
    struct nf_comm *c = nf_comm_get(comm);
    size_t part = count * nf_type_size(datatype);
    ncclResult_t r;

    if (!c || !nf_type_size(datatype) || (kind != ALLTOALL && (root < 0 || root >= c->nranks)))
        return nf_result(nf_group_fail(nf_fail(-EINVAL, "%s: invalid %s", names[kind],
                                               !c ? "communicator" : !nf_type_size(datatype) ? "data type" : "root")));
    if ((r = nf_result(nf_group_start())) != ncclSuccess)
        return r;
    for (int p = 0; p < c->nranks && r == ncclSuccess; p++) {
        const char *from = (const char *)sendbuff + (size_t)p * part;
        char *into = (char *)recvbuff + (size_t)p * part;
        if (kind == ALLTOALL || (kind == SCATTER && c->rank == root))
            r = pncclSend(from, count, datatype, p, comm, stream);
        if (r == ncclSuccess && (kind == ALLTOALL || (kind == GATHER && c->rank == root)))
            r = pncclRecv(into, count, datatype, p, comm, stream);
    }
    if (r == ncclSuccess && kind == GATHER)
        r = pncclSend(sendbuff, count, datatype, root, comm, stream);
    if (r == ncclSuccess && kind == SCATTER)
        r = pncclRecv(recvbuff, count, datatype, root, comm, stream);
    ncclResult_t end = nf_result(nf_group_end());
    return r != ncclSuccess ? r : end;
}

ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return exchange(ALLTOALL, sendbuff, recvbuff, count, datatype, 0, comm, stream);
}
NF_ALIAS(ncclAlltoAll);

ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream)
{
    return exchange(GATHER, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
NF_ALIAS(ncclGather);

ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream)
{
    return exchange(SCATTER, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
NF_ALIAS(ncclScatter);

/* ---- memory --------------------------------------------------------- */

ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c || !handle || (!buff && size))
        return nf_result(nf_fail(-EINVAL, "ncclCommRegister: invalid argument"));
    return nf_result(nf_comm_register(c, buff, size, handle));
}
NF_ALIAS(ncclCommRegister);

ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommDeregister: invalid communicator"));
    return nf_result(nf_comm_deregister(c, handle));
}
NF_ALIAS(ncclCommDeregister);

ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags)
{
    struct nf_comm *c = nf_comm_get(comm);
    int err;

    if (!c || !win || !buff || !size || (winFlags & ~NCCL_WIN_COLL_SYMMETRIC))
        return nf_result(nf_fail(-EINVAL, "ncclCommWindowRegister: invalid argument"));
    err = nf_comm_status(c);
    if (err)
        return nf_result(err == -EINPROGRESS ? nf_fail(-EPERM, "ncclCommWindowRegister: communicator still initialising")
                                             : err);
    return nf_result(nf_comm_window_register(c, buff, size, (void **)win));
}
NF_ALIAS(ncclCommWindowRegister);

ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommWindowDeregister: invalid communicator"));
    return nf_result(nf_comm_window_deregister(c, win));
}
NF_ALIAS(ncclCommWindowDeregister);

ncclResult_t pncclMemAlloc(void **ptr, size_t size)
{
    CUdeviceptr dptr = 0;
    CUresult res;
    int err;

    if (!ptr || !size)
        return nf_result(nf_fail(-EINVAL, "ncclMemAlloc: invalid argument"));
    err = nf_drv_enter();
    if (err)
        return nf_result(err);
    res = nf_mem_alloc(&dptr, size);
    if (res != CUDA_SUCCESS)
        return nf_result(nf_fail(-EIO, "ncclMemAlloc of %zu bytes: CUresult %d", size, (int)res));
    *ptr = (void *)(uintptr_t)dptr;
    return ncclSuccess;
}
NF_ALIAS(ncclMemAlloc);

ncclResult_t pncclMemFree(void *ptr)
{
    CUresult res;
    int err;

    if (!ptr)
        return ncclSuccess;
    err = nf_drv_enter();
    if (err)
        return nf_result(err);
    res = nf_mem_free((CUdeviceptr)(uintptr_t)ptr);
    if (res != CUDA_SUCCESS)
        return nf_result(nf_fail(-EIO, "ncclMemFree(%p): CUresult %d", ptr, (int)res));
    return ncclSuccess;
}
NF_ALIAS(ncclMemFree);

/* ---- NCCL 2.28.7 and 2.29: revoking, suspending, measuring a communicator;
 * its windows' buffers.  Growing a communicator and one-sided signals are
 * not in the double: said, and refused. */

ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c || revokeFlags != NCCL_REVOKE_DEFAULT)
        return nf_result(nf_fail(-EINVAL, "ncclCommRevoke: invalid argument"));
    /* Operations run in the order they were issued: once the stream side has
     * run the last, the communicator is quiescent, as NCCL's is when its
     * state leaves ncclInProgress. */
    atomic_store(&c->revoked, true);
    nf_info("comm %p rank %d revoked", (void *)c, c->rank);
    return ncclSuccess;
}
NF_ALIAS(ncclCommRevoke);

ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c || (flags & ~NCCL_SUSPEND_MEM))
        return nf_result(nf_fail(-EINVAL, "ncclCommSuspend: invalid argument"));
    atomic_store(&c->suspended, true);
    return ncclSuccess;
}
NF_ALIAS(ncclCommSuspend);

ncclResult_t pncclCommResume(ncclComm_t comm)
{
    struct nf_comm *c = nf_comm_get(comm);

    if (!c)
        return nf_result(nf_fail(-EINVAL, "ncclCommResume: invalid communicator"));
    if (!atomic_exchange(&c->suspended, false))
        return nf_result(nf_fail(-EPERM, "ncclCommResume: rank %d's communicator is not suspended", c->rank));
    return ncclSuccess;
}
NF_ALIAS(ncclCommResume);

/* The library's device memory of the communicator: its FIFO and flags,
 * which a suspend would keep (the double frees nothing). */
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    struct nf_comm *c = nf_comm_get(comm);
    uint64_t kept = NF_FIFO_BYTES + NF_FLAGS_BYTES;

    if (!c || !value || (unsigned)stat > ncclStatGpuMemTotal)
        return nf_result(nf_fail(-EINVAL, "ncclCommMemStats: invalid argument"));
    *value = stat == ncclStatGpuMemSuspend ? 0 : stat == ncclStatGpuMemSuspended ? atomic_load(&c->suspended) : kept;
    return ncclSuccess;
}
NF_ALIAS(ncclCommMemStats);

ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr)
{
    struct nf_comm *c = nf_comm_get(comm);
    const struct nf_reg *w;

    if (!c || !outUserPtr)
        return nf_result(nf_fail(-EINVAL, "ncclWinGetUserPtr: invalid argument"));
    pthread_mutex_lock(&c->lock);
    for (w = c->wins; w && (const void *)w != (const void *)win; w = w->next)
        ;
    if (w)
        *outUserPtr = w->buff;
    pthread_mutex_unlock(&c->lock);
    return w ? ncclSuccess : nf_result(nf_fail(-EINVAL, "ncclWinGetUserPtr: %p is no window of rank %d's communicator",
                                               (void *)win, c->rank));
}
NF_ALIAS(ncclWinGetUserPtr);

static ncclResult_t not_here(const char *what)
{
    return nf_result(nf_fail(-EPERM, "%s: not in the test double", what));
}

ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId)
{
    return nf_comm_get(comm) && uniqueId ? not_here("ncclCommGetUniqueId")
                                         : nf_result(nf_fail(-EINVAL, "ncclCommGetUniqueId: invalid argument"));
}
NF_ALIAS(ncclCommGetUniqueId);

ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    (void)nRanks, (void)uniqueId, (void)rank, (void)config;
    return (comm && !nf_comm_get(comm)) || !newcomm ? nf_result(nf_fail(-EINVAL, "ncclCommGrow: invalid argument"))
                                                    : not_here("ncclCommGrow");
}
NF_ALIAS(ncclCommGrow);

ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
                            size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                            cudaStream_t stream)
{
    (void)localbuff, (void)count, (void)datatype, (void)peer, (void)peerWin, (void)peerWinOffset, (void)sigIdx;
    (void)ctx, (void)flags, (void)stream;
    return nf_comm_get(comm) ? not_here("ncclPutSignal") : nf_result(nf_fail(-EINVAL, "invalid communicator"));
}
NF_ALIAS(ncclPutSignal);

ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)
{
    (void)peer, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    return nf_comm_get(comm) ? not_here("ncclSignal") : nf_result(nf_fail(-EINVAL, "invalid communicator"));
}
NF_ALIAS(ncclSignal);

ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream)
{
    (void)nDesc, (void)signalDescs, (void)stream;
    return nf_comm_get(comm) ? not_here("ncclWaitSignal") : nf_result(nf_fail(-EINVAL, "invalid communicator"));
}
NF_ALIAS(ncclWaitSignal);
