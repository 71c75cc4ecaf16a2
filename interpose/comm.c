/*
 * Communicators: the wrappers of NCCL's communicator API, and a standby's
 * communicators, which are virtual until it goes live.
 *
 * A standby replays its rank with device work suppressed, a collective a
 * token only.  A real communicator would hold NCCL's buffers on the GPU,
 * its threads and a connection to every peer's standby for as long as it
 * stands by.  So while a process stands by, each communicator the program
 * makes (ncclCommInitRank, ncclCommInitRankConfig, ncclCommSplit) is
 * virtual: a handle of libckpt's that holds how it was made, with the
 * answers the recorded run got (the call's result, and later its count,
 * rank and device) served from the log.  The unique id the program passes
 * is the one the standbys' own rendezvous handed out: the shadow job's
 * rank 0 made it for real, and NCCL's bootstrap root waits in that
 * process until the takeover.
 *
 * On one node (CKPT_TAKEOVER_IDS), the id is not the standby's: rank 0 of
 * the communicator makes a new one at the takeover and leaves it in that
 * directory, named after the id the recorded run used (its hash is in the
 * log), where the others find it.  A standby started alone holds the live
 * job's id, the others their shadow job's: with new ids they meet all the
 * same.
 *
 * When the standby goes live, a virtual communicator becomes real on its
 * first use, after every communicator the program made before it (this
 * rank's logged order, the order in which every rank made them in the
 * recorded run, so the creations meet and cannot deadlock), with the same
 * ranks, id, colour, key and config.  It is made on a thread of libckpt's,
 * in the caller's context: the program may be inside an ncclGroupStart,
 * and a communicator made inside its group would join it.  The handles the
 * program holds stay valid: every call that takes one translates it.
 * Buffers and windows registered on a virtual communicator get a virtual
 * handle and are registered when it becomes real (windows are collective:
 * every rank registers them in the same order, just after it); its
 * PreMulSum reduction operators keep the value the rank got, made with
 * it, and the collectives that name one get the real one.
 *
 * A communicator made and destroyed while standing by is never made.
 * Other ways of making communicators (ncclCommInitAll, InitRankScalable,
 * Shrink, Grow) stop a standby with the reason: its rank recovers by the
 * cold path; so do the calls that revoke, suspend, resume or measure a
 * communicator.  Every call of NCCL's that takes a communicator is
 * wrapped here or in nccl.c: a virtual handle must never reach NCCL.
 */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "config.h"
#include "interpose.h"
#include "log.h"
#include "util.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_COMMS 4096
#define MAX_REGS 4096

struct vcomm {
    ncclComm_t real; /* NULL until made (and for a split that gave this rank none) */
    struct vcomm *parent; /* a split's */
    ncclUniqueId id;
    uint64_t id_name; /* the id the recorded run used, hashed: the same on each of its ranks */
    ncclConfig_t config;
    char *net_name, *comm_name; /* the config's strings, copied */
    int nranks, rank, color, key;
    bool split, has_config, made, gone;
    bool fresh; /* id is the takeover's (fresh_id): another try uses it again */
};

struct vreg {
    struct vcomm *comm;
    void *buff;
    size_t size;
    void *real;
    int flags;   /* a window's */
    bool window; /* ncclCommWindowRegister's, else ncclCommRegister's */
    bool gone;
};

/* A reduction operator (ncclRedOpCreatePreMulSum) of a communicator not
 * made yet: the program holds the value the rank got; made with the
 * communicator, the collectives that name it get the real one. */
struct vop {
    struct vcomm *comm;
    ncclRedOp_t logged, real;
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    _Alignas(8) unsigned char value[8]; /* a host-immediate scalar, read at the call as NCCL does */
    void *scalar;           /* a device-resident one */
    bool made, gone;
};

/* Virtual handles are addresses in these arrays: a handle is virtual when
 * it falls inside, which a collective checks without a lock. */
static struct vcomm *comms;
static struct vreg *regs;
static size_t ncomms, nregs;
#define MAX_OPS 1024
static struct vop *ops; /* a table of MAX_OPS, mapped at the first */
static size_t nops; /* read without the lock by collectives: grows only */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static bool standing(void)
{
    return ckpt_observed() && ckpt_standby_mem_on();
}

static struct vcomm *virtual_comm(ncclComm_t c)
{
    struct vcomm *v = (struct vcomm *)c, *base = __atomic_load_n(&comms, __ATOMIC_ACQUIRE);
    return base && v >= base && v < base + MAX_COMMS ? v : NULL;
}

static struct vreg *virtual_reg(void *h)
{
    struct vreg *r = h, *base = __atomic_load_n(&regs, __ATOMIC_ACQUIRE);
    return base && r >= base && r < base + MAX_REGS ? r : NULL;
}

static void *table(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* A new virtual communicator (zeroed), or NULL when the table is full. */
static struct vcomm *new_comm(void)
{
    pthread_mutex_lock(&lock);
    if (!comms)
        __atomic_store_n(&comms, table(MAX_COMMS * sizeof(*comms)), __ATOMIC_RELEASE);
    struct vcomm *v = comms && ncomms < MAX_COMMS ? &comms[ncomms++] : NULL;
    pthread_mutex_unlock(&lock);
    if (!v)
        ckpt_refuse("the standby cannot hold more than %d communicators", MAX_COMMS);
    return v;
}

static void keep_config(struct vcomm *v, const ncclConfig_t *config)
{
    if (!config)
        return;
    size_t n = config->size < sizeof(v->config) ? config->size : sizeof(v->config);
    memcpy(&v->config, config, n);
    v->has_config = true;
    if (n >= offsetof(ncclConfig_t, netName) + sizeof(char *) && config->netName)
        v->config.netName = v->net_name = strdup(config->netName);
    if (n >= offsetof(ncclConfig_t, commName) + sizeof(char *) && config->commName)
        v->config.commName = v->comm_name = strdup(config->commName);
}

/* What the recorded run got from the program's call: recorded, or served
 * while replaying (a standby's virtual calls have nothing else to go by). */
static int answer(uint64_t what, int got)
{
    uint64_t v = (uint64_t)(uint32_t)got;
    if (ckpt_observed())
        ckpt_history_value(what, &v);
    return (int)(uint32_t)v;
}

/* ---- making a virtual communicator real */

struct maker {
    struct vcomm *v;
    CUcontext ctx;
    ncclResult_t r;
};

static void *make(void *arg)
{
    struct maker *m = arg;
    struct vcomm *v = m->v;
    ncclConfig_t *config = v->has_config ? &v->config : NULL;
    ckpt_nccl_depth++;
    if (m->ctx)
        real_cuCtxSetCurrent(m->ctx);
    if (v->split)
        m->r = real_ncclCommSplit(v->parent->real, v->color, v->key, &v->real, config);
    else if (config)
        m->r = real_ncclCommInitRankConfig(&v->real, v->nranks, v->id, v->rank, config);
    else
        m->r = real_ncclCommInitRank(&v->real, v->nranks, v->id, v->rank);
    /* Nonblocking: the program's config stays, the creation is waited for here. */
    ncclResult_t state = m->r;
    while (m->r == ncclInProgress && v->real) {
        if (real_ncclCommGetAsyncError(v->real, &state) != ncclSuccess || state != ncclInProgress)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    }
    if (m->r == ncclInProgress)
        m->r = state;
    ckpt_nccl_depth--;
    return NULL;
}

static bool has_windows(void)
{
    for (size_t i = 0; i < nregs; i++)
        if (regs[i].window)
            return true;
    return false;
}

/* The takeover's unique id for v (CKPT_TAKEOVER_IDS): its rank 0 makes
 * it and leaves it in the directory, written whole (the file is this
 * process's alone: the communicator has one rank 0, and the node's agent
 * leaves there only the ids other nodes made); the others wait for it
 * there. */
#define FRESH_ID_WAIT_S 60.0
static ncclResult_t fresh_id(struct vcomm *v, const char *dir)
{
    char path[PATH_MAX];
    if (v->fresh)
        return ncclSuccess;
    snprintf(path, sizeof(path), "%s/%016llx.id", dir, (unsigned long long)v->id_name);
    ncclResult_t r = ncclSuccess;
    ckpt_self_depth++;
    if (v->rank == 0) {
        ckpt_nccl_depth++;
        r = real_ncclGetUniqueId(&v->id);
        ckpt_nccl_depth--;
        int rc = r == ncclSuccess ? ckpt_write_whole(path, &v->id, sizeof(v->id)) : 0;
        if (rc < 0) {
            ckpt_log(CKPT_ERROR, "cannot leave communicator %zu's new unique id in %s: %s", (size_t)(v - comms), dir,
                     strerror(-rc));
            r = ncclSystemError;
        }
    } else {
        double start = ckpt_now_s();
        for (;;) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            bool ok = fd >= 0 && read(fd, &v->id, sizeof(v->id)) == (ssize_t)sizeof(v->id);
            if (fd >= 0)
                close(fd);
            if (ok)
                break;
            if (ckpt_now_s() - start > FRESH_ID_WAIT_S) {
                ckpt_log(CKPT_ERROR, "rank 0 of communicator %zu left no new unique id in %s within %g s",
                         (size_t)(v - comms), dir, FRESH_ID_WAIT_S);
                r = ncclSystemError;
                break;
            }
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
    }
    ckpt_self_depth--;
    v->fresh = r == ncclSuccess;
    return r;
}

/* Makes every communicator up to and including v real, in order.  Lock held. */
static ncclResult_t make_upto(struct vcomm *v)
{
    const char *ids = ckpt_cfg_str(CFG_TAKEOVER_IDS);
    if (ids && !*ids)
        ids = NULL;
    if (ckpt_resolve("ncclCommInitRank") < 0 || ckpt_resolve("ncclCommInitRankConfig") < 0 ||
        (ids && ckpt_resolve("ncclGetUniqueId") < 0) ||
        ckpt_resolve("ncclCommSplit") < 0 || ckpt_resolve("ncclCommGetAsyncError") < 0 ||
        ckpt_resolve("ncclCommRegister") < 0 || ckpt_resolve("cuCtxGetCurrent") < 0 ||
        (has_windows() && ckpt_resolve("ncclCommWindowRegister") < 0) ||
        (__atomic_load_n(&nops, __ATOMIC_ACQUIRE) && ckpt_resolve("ncclRedOpCreatePreMulSum") < 0) ||
        ckpt_resolve("cuCtxSetCurrent") < 0)
        return ncclSystemError;
    struct maker m = {0};
    real_cuCtxGetCurrent(&m.ctx);
    double batch_start = ckpt_now_s();
    size_t made = 0;
    for (struct vcomm *c = comms; c <= v; c++) {
        if (c->split && !c->made && c->parent->gone && !c->parent->made)
            c->gone = true; /* its parent was destroyed before the takeover: it cannot be made */
        if (c->made || c->gone)
            continue;
        double start = ckpt_now_s();
        m.v = c;
        m.r = ids && !c->split ? fresh_id(c, ids) : ncclSuccess;
        if (m.r != ncclSuccess) {
            ckpt_log(CKPT_ERROR, "making communicator %zu of this rank real at the takeover failed: no unique id",
                     (size_t)(c - comms));
            return m.r;
        }
        m.r = ncclSystemError;
        pthread_t t;
        if (pthread_create(&t, NULL, make, &m) == 0)
            pthread_join(t, NULL);
        if (m.r != ncclSuccess) {
            ckpt_log(CKPT_ERROR, "making communicator %zu of this rank real at the takeover failed: NCCL error %d",
                     (size_t)(c - comms), (int)m.r);
            return m.r;
        }
        __atomic_store_n(&c->made, true, __ATOMIC_RELEASE);
        /* Registrations in the program's order: windows are collective, and
         * every rank registers them on this communicator just after it. */
        for (size_t i = 0; i < nregs; i++)
            if (regs[i].comm == c && !regs[i].gone && c->real) {
                struct vreg *g = &regs[i];
                ckpt_nccl_depth++;
                ncclResult_t r = g->window ? real_ncclCommWindowRegister(c->real, g->buff, g->size,
                                                                          (ncclWindow_t *)&g->real, g->flags)
                                           : real_ncclCommRegister(c->real, g->buff, g->size, &g->real);
                ckpt_nccl_depth--;
                if (r != ncclSuccess) {
                    ckpt_log(CKPT_ERROR, "registering a %s of %zu bytes with communicator %zu at the takeover "
                             "failed: NCCL error %d", g->window ? "window" : "buffer", g->size, (size_t)(c - comms),
                             (int)r);
                    return r;
                }
            }
        for (size_t i = 0; i < __atomic_load_n(&nops, __ATOMIC_ACQUIRE); i++) {
            struct vop *o = &ops[i];
            if (o->comm != c || o->gone)
                continue;
            ckpt_nccl_depth++;
            ncclResult_t r = real_ncclRedOpCreatePreMulSum(&o->real, o->residence == ncclScalarHostImmediate ?
                                                           (void *)o->value : o->scalar, o->type, o->residence,
                                                           c->real);
            ckpt_nccl_depth--;
            if (r != ncclSuccess) {
                ckpt_log(CKPT_ERROR, "making a reduction operator of communicator %zu at the takeover failed: NCCL "
                         "error %d", (size_t)(c - comms), (int)r);
                return r;
            }
            __atomic_store_n(&o->made, true, __ATOMIC_RELEASE);
        }
        ckpt_log(CKPT_DEBUG, "communicator %zu made real in %.3f s", (size_t)(c - comms), ckpt_now_s() - start);
        made++;
    }
    /* The takeover's communicator set-up, a phase of its own, paid on first use. */
    if (made)
        ckpt_log(CKPT_INFO, "communicator set-up after the takeover: %zu made in %.3f s, as the program first used "
                 "them", made, ckpt_now_s() - batch_start);
    return v->gone ? ncclInvalidUsage : ncclSuccess;
}

ncclComm_t ckpt_comm_real(ncclComm_t c, ncclResult_t *err)
{
    struct vcomm *v = virtual_comm(c);
    *err = ncclSuccess;
    if (!v)
        return c;
    if (__atomic_load_n(&v->made, __ATOMIC_ACQUIRE))
        return v->real;
    pthread_mutex_lock(&lock);
    if (v->gone)
        *err = ncclInvalidArgument;
    else if (standing())
        *err = ncclInvalidUsage; /* a standby uses none for real */
    else
        *err = make_upto(v);
    pthread_mutex_unlock(&lock);
    return *err == ncclSuccess ? v->real : NULL;
}

/* ---- the wrappers */

#define REAL_COMM(c, err)                                                      \
    do {                                                                       \
        ncclResult_t e_;                                                       \
        (c) = ckpt_comm_real((c), &e_);                                        \
        if (e_ != ncclSuccess)                                                 \
            return (err);                                                      \
    } while (0)

/* Calls the real name with args, as NCCL's own work (its allocations are internal). */
#define FORWARD_COMM(name, args)                                               \
    do {                                                                       \
        ckpt_nccl_depth++;                                                     \
        ncclResult_t r_ = real_##name args;                                    \
        ckpt_nccl_depth--;                                                     \
        return r_;                                                             \
    } while (0)

enum { INIT_RESULT, SPLIT_RESULT, COUNT, USER_RANK, CU_DEVICE, PREMUL_RESULT, PREMUL_OP, INIT_ID };

static ncclResult_t init(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
    ncclResult_t r;
    /* The id's name: this run's, or the recorded run's when replaying. */
    uint64_t name = XXH3_64bits(&id, sizeof(id));
    if (ckpt_observed())
        ckpt_history_value(CKPT_VALUE_NCCL + INIT_ID, &name);
    if (comm && standing()) {
        struct vcomm *v = new_comm();
        *v = (struct vcomm){.id = id, .id_name = name, .nranks = nranks, .rank = rank};
        keep_config(v, config);
        *comm = (ncclComm_t)v;
        r = (ncclResult_t)answer(CKPT_VALUE_NCCL + INIT_RESULT, ncclSuccess);
    } else {
        ckpt_nccl_depth++;
        r = config ? real_ncclCommInitRankConfig(comm, nranks, id, rank, config)
                   : real_ncclCommInitRank(comm, nranks, id, rank);
        ckpt_nccl_depth--;
        answer(CKPT_VALUE_NCCL + INIT_RESULT, r); /* a replay's real result stands */
    }
    return r;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    NEED_REAL(ncclGetUniqueId, ncclSystemError);
    FORWARD_COMM(ncclGetUniqueId, (uniqueId));
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    NEED_REAL(ncclCommInitRank, ncclSystemError);
    return init(comm, nranks, commId, rank, NULL);
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                           ncclConfig_t *config)
{
    NEED_REAL(ncclCommInitRankConfig, ncclSystemError);
    return init(comm, nranks, commId, rank, config);
}

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    NEED_REAL(ncclCommSplit, ncclSystemError);
    struct vcomm *parent = virtual_comm(comm);
    ncclResult_t r;
    if (parent && newcomm && standing()) {
        struct vcomm *v = new_comm();
        *v = (struct vcomm){.split = true, .parent = parent, .color = color, .key = key};
        keep_config(v, config);
        *newcomm = color == NCCL_SPLIT_NOCOLOR ? NULL : (ncclComm_t)v;
        return (ncclResult_t)answer(CKPT_VALUE_NCCL + SPLIT_RESULT, ncclSuccess);
    }
    REAL_COMM(comm, ncclInvalidArgument);
    ckpt_nccl_depth++;
    r = real_ncclCommSplit(comm, color, key, newcomm, config);
    ckpt_nccl_depth--;
    answer(CKPT_VALUE_NCCL + SPLIT_RESULT, r);
    return r;
}

/* Communicators made another way: real ones, from real ones.  A standby
 * cannot hold one without making it, so it stops (the cold path stays). */
static void not_while_standing(const char *how)
{
    if (standing())
        ckpt_refuse("the program makes a communicator with %s, which a standby cannot hold without making it "
                    "(ncclCommInitRank, ncclCommInitRankConfig and ncclCommSplit it can)", how);
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    NEED_REAL(ncclCommInitAll, ncclSystemError);
    not_while_standing("ncclCommInitAll");
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommInitAll(comm, ndev, devlist);
    ckpt_nccl_depth--;
    return r;
}

EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId *commIds, ncclConfig_t *config)
{
    NEED_REAL(ncclCommInitRankScalable, ncclSystemError);
    not_while_standing("ncclCommInitRankScalable");
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommInitRankScalable(newcomm, nranks, myrank, nId, commIds, config);
    ckpt_nccl_depth--;
    return r;
}

EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                   ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    NEED_REAL(ncclCommShrink, ncclSystemError);
    not_while_standing("ncclCommShrink");
    REAL_COMM(comm, ncclInvalidArgument);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
    ckpt_nccl_depth--;
    return r;
}

/* The end of a communicator: a virtual one not made is only forgotten. */
static ncclResult_t end(ncclComm_t comm, ncclResult_t (*real)(ncclComm_t), bool last)
{
    struct vcomm *v = virtual_comm(comm);
    if (v) {
        pthread_mutex_lock(&lock);
        bool made = v->made;
        if (!made && last)
            v->gone = true;
        pthread_mutex_unlock(&lock);
        if (!made)
            return ncclSuccess;
        comm = v->real;
    }
    ckpt_nccl_depth++;
    ncclResult_t r = real(comm);
    ckpt_nccl_depth--;
    if (v && last && r == ncclSuccess) {
        pthread_mutex_lock(&lock);
        v->gone = true;
        pthread_mutex_unlock(&lock);
    }
    return r;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    NEED_REAL(ncclCommFinalize, ncclSystemError);
    return end(comm, real_ncclCommFinalize, false);
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    NEED_REAL(ncclCommDestroy, ncclSystemError);
    return end(comm, real_ncclCommDestroy, true);
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    NEED_REAL(ncclCommAbort, ncclSystemError);
    return end(comm, real_ncclCommAbort, true);
}

/* A virtual communicator not made yet is ready and without error: what a
 * program polls for after a nonblocking init.  Not logged: watchdog
 * threads poll it on a clock. */
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    NEED_REAL(ncclCommGetAsyncError, ncclSystemError);
    struct vcomm *v = virtual_comm(comm);
    if (v && !__atomic_load_n(&v->made, __ATOMIC_ACQUIRE)) {
        if (!asyncError)
            return ncclInvalidArgument;
        *asyncError = ncclSuccess;
        return ncclSuccess;
    }
    return real_ncclCommGetAsyncError(v ? v->real : comm, asyncError);
}

/* Count, rank and device: recorded, served while replaying; a virtual
 * communicator not made yet answers from the log alone (standing by) or
 * is made (live). */
static ncclResult_t query(ncclComm_t comm, int *out, int what, ncclResult_t (*real)(const ncclComm_t, int *))
{
    struct vcomm *v = virtual_comm(comm);
    ncclResult_t r = ncclSuccess;
    int got = 0;
    if (!out)
        return ncclInvalidArgument;
    if (v && !__atomic_load_n(&v->made, __ATOMIC_ACQUIRE) && standing()) {
        got = v->split ? 0 : what == COUNT ? v->nranks : what == USER_RANK ? v->rank : 0;
    } else {
        ncclResult_t e;
        comm = ckpt_comm_real(comm, &e);
        if (e != ncclSuccess)
            return e;
        r = real(comm, &got);
    }
    if (r == ncclSuccess)
        *out = answer(CKPT_VALUE_NCCL + (uint64_t)what, got);
    return r;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    NEED_REAL(ncclCommCount, ncclSystemError);
    return query(comm, count, COUNT, real_ncclCommCount);
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    NEED_REAL(ncclCommUserRank, ncclSystemError);
    return query(comm, rank, USER_RANK, real_ncclCommUserRank);
}

EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    NEED_REAL(ncclCommCuDevice, ncclSystemError);
    return query(comm, device, CU_DEVICE, real_ncclCommCuDevice);
}

EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    NEED_REAL(ncclGetLastError, "");
    struct vcomm *v = virtual_comm(comm);
    return real_ncclGetLastError(v ? v->real : comm);
}

/* A registration (a buffer, or a window) of a communicator a standby has
 * not made: a virtual handle, registered when the communicator is made.
 * True when it was held so. */
static bool hold_registration(ncclComm_t comm, void *buff, size_t size, bool window, int flags, void **handle)
{
    struct vcomm *v = virtual_comm(comm);
    if (!v || __atomic_load_n(&v->made, __ATOMIC_ACQUIRE) || !standing() || !handle)
        return false;
    pthread_mutex_lock(&lock);
    if (!regs)
        __atomic_store_n(&regs, table(MAX_REGS * sizeof(*regs)), __ATOMIC_RELEASE);
    struct vreg *g = regs && nregs < MAX_REGS ? &regs[nregs++] : NULL;
    if (g)
        *g = (struct vreg){.comm = v, .buff = buff, .size = size, .window = window, .flags = flags};
    pthread_mutex_unlock(&lock);
    if (!g)
        ckpt_refuse("the standby cannot hold more than %d registered buffers and windows", MAX_REGS);
    *handle = g;
    return true;
}

/* The real handle to give back for handle, or NULL when there is none
 * to give back (a virtual one that was never registered). */
static void *registered(ncclComm_t comm, void *handle)
{
    struct vreg *g = virtual_reg(handle);
    if (!g)
        return handle;
    struct vcomm *v = virtual_comm(comm);
    pthread_mutex_lock(&lock);
    g->gone = true;
    void *real = g->real && v && v->made ? g->real : NULL;
    pthread_mutex_unlock(&lock);
    return real;
}

EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    NEED_REAL(ncclCommRegister, ncclSystemError);
    if (hold_registration(comm, buff, size, false, 0, handle))
        return ncclSuccess;
    ncclComm_t c = comm;
    REAL_COMM(c, ncclInvalidArgument);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommRegister(c, buff, size, handle);
    ckpt_nccl_depth--;
    return r;
}

EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    NEED_REAL(ncclCommDeregister, ncclSystemError);
    bool was_virtual = virtual_reg(handle) != NULL;
    if (!(handle = registered(comm, handle)) && was_virtual)
        return ncclSuccess;
    struct vcomm *v = virtual_comm(comm);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommDeregister(v ? v->real : comm, handle);
    ckpt_nccl_depth--;
    return r;
}

EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags)
{
    NEED_REAL(ncclCommWindowRegister, ncclSystemError);
    if (hold_registration(comm, buff, size, true, winFlags, (void **)win))
        return ncclSuccess;
    ncclComm_t c = comm;
    REAL_COMM(c, ncclInvalidArgument);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommWindowRegister(c, buff, size, win, winFlags);
    ckpt_nccl_depth--;
    return r;
}

EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    NEED_REAL(ncclCommWindowDeregister, ncclSystemError);
    bool was_virtual = virtual_reg(win) != NULL;
    if (!(win = registered(comm, win)) && was_virtual)
        return ncclSuccess;
    struct vcomm *v = virtual_comm(comm);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclCommWindowDeregister(v ? v->real : comm, win);
    ckpt_nccl_depth--;
    return r;
}

/* A window the program holds as the real one: a standby's virtual window
 * once its communicator is made (which registers it), else itself. */
ncclWindow_t ckpt_comm_window(ncclWindow_t win)
{
    struct vreg *g = virtual_reg(win);
    if (!g)
        return win;
    pthread_mutex_lock(&lock);
    void *real = g->gone ? NULL : g->real;
    pthread_mutex_unlock(&lock);
    return real;
}

EXPORT ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr)
{
    NEED_REAL(ncclWinGetUserPtr, ncclSystemError);
    struct vreg *g = virtual_reg(win);
    struct vcomm *v = virtual_comm(comm);
    if (g && v && !__atomic_load_n(&v->made, __ATOMIC_ACQUIRE) && standing() && outUserPtr) {
        *outUserPtr = g->buff; /* what the window was made over, as the recorded run got it */
        return ncclSuccess;
    }
    REAL_COMM(comm, ncclInvalidArgument);
    if (g && !(win = ckpt_comm_window(win)))
        return ncclInvalidArgument;
    FORWARD_COMM(ncclWinGetUserPtr, (comm, win, outUserPtr));
}

/* ---- what NCCL 2.28.7 and 2.29 added: revoking, growing, suspending a
 * communicator and its memory statistics.  A standby stands by without
 * any of them (a communicator it has not made has nothing to revoke,
 * suspend or measure, and what the recorded run got cannot be served
 * without it): it stops, naming the call, and its rank recovers by the
 * cold path.  Live, each takes the real communicator. */

static void not_standing_by(const char *how)
{
    if (standing())
        ckpt_refuse("the program calls %s, which a standby cannot answer for a communicator it has not made", how);
}

EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    NEED_REAL(ncclCommRevoke, ncclSystemError);
    not_standing_by("ncclCommRevoke");
    REAL_COMM(comm, ncclInvalidArgument);
    FORWARD_COMM(ncclCommRevoke, (comm, revokeFlags));
}

EXPORT ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags)
{
    NEED_REAL(ncclCommSuspend, ncclSystemError);
    not_standing_by("ncclCommSuspend");
    REAL_COMM(comm, ncclInvalidArgument);
    FORWARD_COMM(ncclCommSuspend, (comm, flags));
}

EXPORT ncclResult_t ncclCommResume(ncclComm_t comm)
{
    NEED_REAL(ncclCommResume, ncclSystemError);
    not_standing_by("ncclCommResume");
    REAL_COMM(comm, ncclInvalidArgument);
    FORWARD_COMM(ncclCommResume, (comm));
}

EXPORT ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    NEED_REAL(ncclCommMemStats, ncclSystemError);
    not_standing_by("ncclCommMemStats");
    REAL_COMM(comm, ncclInvalidArgument);
    FORWARD_COMM(ncclCommMemStats, (comm, stat, value));
}

EXPORT ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId)
{
    NEED_REAL(ncclCommGetUniqueId, ncclSystemError);
    not_standing_by("ncclCommGetUniqueId");
    REAL_COMM(comm, ncclInvalidArgument);
    FORWARD_COMM(ncclCommGetUniqueId, (comm, uniqueId));
}

/* Ranks new to the communicator pass none. */
EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                                 ncclComm_t *newcomm, ncclConfig_t *config)
{
    NEED_REAL(ncclCommGrow, ncclSystemError);
    not_while_standing("ncclCommGrow");
    if (comm)
        REAL_COMM(comm, ncclInvalidArgument);
    FORWARD_COMM(ncclCommGrow, (comm, nRanks, uniqueId, rank, newcomm, config));
}

/* ---- reduction operators */

/* The bytes of one element of t (at most 8). */
static size_t element_bytes(ncclDataType_t t)
{
    switch (t) {
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclFloat16: case ncclBfloat16: return 2;
    default: return 1; /* 8-bit integers and floats */
    }
}

/* The virtual operator op of the communicator whose handle is comm, or NULL. */
static struct vop *virtual_op(ncclComm_t comm, ncclRedOp_t op)
{
    struct vcomm *v = virtual_comm(comm);
    size_t n = __atomic_load_n(&nops, __ATOMIC_ACQUIRE);
    if (!v || (int)op < (int)ncclNumOps)
        return NULL;
    for (size_t i = n; i-- > 0;)
        if (ops[i].comm == v && ops[i].logged == op && !__atomic_load_n(&ops[i].gone, __ATOMIC_ACQUIRE))
            return &ops[i];
    return NULL;
}

ncclRedOp_t ckpt_comm_op(ncclComm_t comm, ncclRedOp_t op)
{
    if (__builtin_expect(!__atomic_load_n(&nops, __ATOMIC_ACQUIRE), 1))
        return op;
    struct vop *o = virtual_op(comm, op);
    if (!o)
        return op;
    if (!__atomic_load_n(&o->made, __ATOMIC_ACQUIRE) && !standing()) {
        ncclResult_t e; /* the collective's first use makes its communicator, and so the operator */
        ckpt_comm_real(comm, &e);
    }
    return __atomic_load_n(&o->made, __ATOMIC_ACQUIRE) ? o->real : op;
}

EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm)
{
    NEED_REAL(ncclRedOpCreatePreMulSum, ncclSystemError);
    struct vcomm *v = virtual_comm(comm);
    if (v && !__atomic_load_n(&v->made, __ATOMIC_ACQUIRE) && standing() && op && scalar) {
        ncclResult_t r = (ncclResult_t)answer(CKPT_VALUE_NCCL + PREMUL_RESULT, ncclSuccess);
        *op = (ncclRedOp_t)answer(CKPT_VALUE_NCCL + PREMUL_OP, 0);
        if (r != ncclSuccess)
            return r;
        pthread_mutex_lock(&lock);
        if (!ops)
            ops = table(MAX_OPS * sizeof(*ops));
        struct vop *o = ops && nops < MAX_OPS ? &ops[nops] : NULL;
        if (o) {
            *o = (struct vop){.comm = v, .logged = *op, .type = datatype, .residence = residence, .scalar = scalar};
            if (residence == ncclScalarHostImmediate)
                memcpy(o->value, scalar, element_bytes(datatype));
            __atomic_store_n(&nops, nops + 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&lock);
        if (!o)
            ckpt_refuse("the standby cannot hold more than %d reduction operators", MAX_OPS);
        return r;
    }
    ncclComm_t c = comm;
    REAL_COMM(c, ncclInvalidArgument);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, c);
    ckpt_nccl_depth--;
    answer(CKPT_VALUE_NCCL + PREMUL_RESULT, r); /* a replay's real ones stand */
    answer(CKPT_VALUE_NCCL + PREMUL_OP, r == ncclSuccess && op ? (int)*op : 0);
    return r;
}

EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    NEED_REAL(ncclRedOpDestroy, ncclSystemError);
    struct vop *o = virtual_op(comm, op);
    if (o) {
        pthread_mutex_lock(&lock);
        __atomic_store_n(&o->gone, true, __ATOMIC_RELEASE);
        bool made = o->made;
        pthread_mutex_unlock(&lock);
        if (!made)
            return ncclSuccess;
        op = o->real;
    }
    struct vcomm *v = virtual_comm(comm);
    ckpt_nccl_depth++;
    ncclResult_t r = real_ncclRedOpDestroy(op, v ? v->real : comm);
    ckpt_nccl_depth--;
    return r;
}
