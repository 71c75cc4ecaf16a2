/*
 * Communicators of the double's NCCL: configuration, joining (blocking, or
 * in a thread of their own when the config says blocking=0), splitting,
 * and the way out (finalize, destroy, abort).  A comm owns its mapping of
 * the segment and two device buffers allocated through the driver while
 * NCCL is being called (mem.c), as the real library's FIFOs and flags are.  A comm
 * is never freed while a batch that points to it may still run: when its
 * work cannot be drained in time it is leaked, never freed under a worker.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_fake.h"

#define CONFIG_MAGIC 0xcafebeefu

static pthread_once_t tunables_once = PTHREAD_ONCE_INIT;
static uint64_t op_timeout_ns;   /* NCCL_FAKE_TIMEOUT: any wait of a collective */
static uint64_t init_timeout_ns; /* NCCL_FAKE_INIT_TIMEOUT: waiting for all ranks */
static int default_blocking;     /* NCCL_COMM_BLOCKING, when the config leaves it open */
static bool dead_peer_hangs;     /* NCCL_FAKE_DEAD_PEER=hang */

/* "No timeout": about 30 years, so that deadlines computed from it cannot overflow. */
#define NEVER_NS ((uint64_t)1e18)

static void read_tunables(void)
{
    uint64_t blocking = fg_env_u64("NCCL_COMM_BLOCKING", 1);
    const char *dead = getenv("NCCL_FAKE_DEAD_PEER"), *t = getenv("NCCL_FAKE_TIMEOUT");

    if (dead && *dead && strcmp(dead, "error") && strcmp(dead, "hang"))
        fprintf(stderr, "fakegpu: ignoring NCCL_FAKE_DEAD_PEER=\"%s\": not \"error\" or \"hang\"\n", dead);
    dead_peer_hangs = dead && !strcmp(dead, "hang");
    /* Real NCCL's kernels wait for ever; the double's do when told to hang. */
    if (dead_peer_hangs && (!t || !*t))
        op_timeout_ns = NEVER_NS;
    else
        op_timeout_ns = (uint64_t)(fg_env_double("NCCL_FAKE_TIMEOUT", 30) * 1e9);
    init_timeout_ns = (uint64_t)(fg_env_double("NCCL_FAKE_INIT_TIMEOUT", 60) * 1e9);
    default_blocking = blocking != 0;
}

struct nf_wait nf_comm_wait(struct nf_comm *c)
{
    pthread_once(&tunables_once, read_tunables);
    return (struct nf_wait){.timeout_ns = op_timeout_ns, .cancel = &c->aborting};
}

struct nf_wait nf_comm_coll_wait(struct nf_comm *c)
{
    struct nf_wait w = nf_comm_wait(c);

    w.peers_unseen = dead_peer_hangs;
    return w;
}

/* FNV-1a: the comm's id for the profiler, and split names. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int nf_config_read(const ncclConfig_t *config, struct nf_config *out)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    size_t size;

    pthread_once(&tunables_once, read_tunables);
    out->blocking = default_blocking;
    out->comm_name = NULL;
    if (!config)
        return 0;
    /* As NCCL: overlay what the caller's version has on the defaults. */
    cfg.magic = 0;
    memcpy(&size, config, sizeof(size));
    memcpy(&cfg, config, size < sizeof(cfg) ? size : sizeof(cfg));
    if (cfg.magic != CONFIG_MAGIC)
        return nf_fail(-EINVAL, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    if (cfg.version < NCCL_VERSION(2, 14, 0))
        cfg.blocking = NCCL_CONFIG_UNDEF_INT;
    if (cfg.blocking != NCCL_CONFIG_UNDEF_INT && cfg.blocking != 0 && cfg.blocking != 1)
        return nf_fail(-EINVAL, "Invalid config blocking attribute value %d", cfg.blocking);
    if (cfg.blocking != NCCL_CONFIG_UNDEF_INT)
        out->blocking = cfg.blocking;
    if (size >= offsetof(ncclConfig_t, commName) + sizeof(cfg.commName))
        out->comm_name = cfg.commName;
    return 0;
}

struct nf_comm *nf_comm_get(ncclComm_t handle)
{
    struct nf_comm *c = (struct nf_comm *)handle;

    return c && c->magic == NF_COMM_MAGIC ? c : NULL;
}

int nf_comm_status(struct nf_comm *c)
{
    return atomic_load(&c->async_err);
}

void nf_comm_fail(struct nf_comm *c, int err)
{
    int none = 0;

    atomic_compare_exchange_strong(&c->async_err, &none, err);
    if (c->joined)
        nf_seg_abort(&c->seg);
}

static struct nf_comm *comm_new(const char *seg_name, int nranks, int rank,
                                const struct nf_config *cfg)
{
    struct nf_comm *c = calloc(1, sizeof(*c));
    pthread_condattr_t attr;

    if (!c)
        return NULL;
    c->p2p_sent = calloc((size_t)nranks, sizeof(uint64_t));
    c->p2p_taken = calloc((size_t)nranks, sizeof(uint64_t));
    if (!c->p2p_sent || !c->p2p_taken) {
        free(c->p2p_sent);
        free(c->p2p_taken);
        free(c);
        return NULL;
    }
    c->magic = NF_COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->blocking = cfg->blocking;
    snprintf(c->seg_name, sizeof(c->seg_name), "%s", seg_name);
    if (cfg->comm_name)
        snprintf(c->comm_name, sizeof(c->comm_name), "%s", cfg->comm_name);
    c->hash = fnv1a(0xcbf29ce484222325ull, seg_name, strlen(seg_name));
    atomic_init(&c->async_err, -EINPROGRESS);
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&c->boot_lock, NULL);
    nf_drv.cuCtxGetCurrent(&c->ctx);
    if (nf_drv.cuCtxGetDevice_v2(&c->cudev, NULL) != CUDA_SUCCESS)
        c->cudev = 0;
    return c;
}

/*
 * A zeroed internal buffer, as NCCL's ncclCudaCalloc makes one: allocated,
 * zeroed on a non-blocking stream of its own, and waited for, since a
 * memset returns before it has run and the buffer is written next by
 * collectives on streams that are not ordered after it; in relaxed capture
 * mode, as NCCL does, so that a capture on another thread is not
 * disturbed.  (An event is waited for rather than the stream, so that the
 * double's FAKEGPU_CRASH_AT, which counts cuStreamSynchronize, counts the
 * program's calls only.)  0, or -EIO after naming the failed allocation.
 */
static int alloc_internal(CUdeviceptr *dptr, size_t bytes, const char *what)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUstream s = NULL;
    CUevent done = NULL;
    CUresult res;

    nf_drv.cuThreadExchangeStreamCaptureMode(&mode);
    res = nf_mem_alloc(dptr, bytes);

    if (res == CUDA_SUCCESS)
        res = nf_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING);
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuMemsetD8Async(*dptr, 0, bytes, s);
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuEventRecord(done, s);
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuEventSynchronize(done);
    if (done)
        nf_drv.cuEventDestroy_v2(done);
    if (s)
        nf_drv.cuStreamDestroy_v2(s);
    nf_drv.cuThreadExchangeStreamCaptureMode(&mode);
    if (res == CUDA_SUCCESS)
        return 0;
    if (*dptr)
        nf_mem_free(*dptr);
    *dptr = 0;
    return nf_fail(-EIO, "cannot allocate the %zu-byte %s buffer: CUresult %d", bytes, what, (int)res);
}

/* Joins the segment and sets up what a comm owns.  0 or -errno. */
static int comm_setup(struct nf_comm *c)
{
    struct nf_wait wait = {.timeout_ns = init_timeout_ns, .cancel = &c->aborting};
    int err;

    err = nf_seg_join(&c->seg, c->seg_name, c->nranks, c->rank, &wait);
    if (err == -ETIMEDOUT)
        return nf_fail(err, "rank %d of %d: not all ranks joined %s within %.0f s "
                       "(NCCL_FAKE_INIT_TIMEOUT)", c->rank, c->nranks, c->seg_name,
                       (double)init_timeout_ns / 1e9);
    if (err)
        return nf_fail(err, "rank %d of %d cannot join %s: %s", c->rank, c->nranks,
                       c->seg_name, strerror(-err));
    c->joined = true;
    err = alloc_internal(&c->fifo, NF_FIFO_BYTES, "FIFO");
    if (!err)
        err = alloc_internal(&c->flags, NF_FLAGS_BYTES, "flags");
    if (!err && nf_drv.cuMemHostAlloc(&c->host_flags, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) !=
                    CUDA_SUCCESS)
        err = nf_fail(-EIO, "cannot allocate the mapped host flags");
    if (err)
        return err;
    nf_prof_comm_init(c);
    nf_info("comm %p rank %d nranks %d cudaDev %d - Init COMPLETE", (void *)c, c->rank,
            c->nranks, c->cudev);
    return 0;
}

static void *setup_thread(void *arg)
{
    struct nf_comm *c = arg;
    int err = 0;

    if (c->ctx && nf_drv.cuCtxSetCurrent(c->ctx) != CUDA_SUCCESS)
        err = nf_fail(-EIO, "the init thread cannot use the creator's context");
    if (!err)
        err = comm_setup(c);
    if (err && c->joined) /* the peers are waiting for a comm that will not be */
        nf_seg_abort(&c->seg);
    atomic_store(&c->async_err, err);
    return NULL;
}

int nf_comm_init(struct nf_comm **out, const char *seg_name, int nranks, int rank,
                 const struct nf_config *cfg)
{
    struct nf_comm *c;
    int err;

    *out = NULL;
    pthread_once(&tunables_once, read_tunables);
    err = nf_drv_enter();
    if (err)
        return err;
    c = comm_new(seg_name, nranks, rank, cfg);
    if (!c)
        return nf_fail(-ENOMEM, "out of memory for a communicator");
    if (c->blocking) {
        err = comm_setup(c);
        atomic_store(&c->async_err, err);
        if (err) {
            nf_comm_release(c, true);
            return err;
        }
        *out = c;
        return 0;
    }
    *out = c;
    err = pthread_create(&c->init_thread, NULL, setup_thread, c);
    if (err) {
        atomic_store(&c->async_err, -err);
        return nf_fail(-err, "cannot start the init thread: %s", strerror(err));
    }
    c->init_thread_live = true;
    return -EINPROGRESS;
}

/* ---- split --------------------------------------------------------- */

struct split_rec {
    int32_t color;
    int32_t key;
};

int nf_comm_split(struct nf_comm *parent, int color, int key, const struct nf_config *cfg,
                  struct nf_comm **out)
{
    struct nf_config inherited = {parent->blocking, parent->comm_name[0] ? parent->comm_name : NULL};
    struct nf_wait wait = nf_comm_wait(parent);
    struct split_rec mine = {color, key}, *all;
    char name[NF_NAME_MAX];
    int err, n = 0, rank = 0;
    uint32_t index;
    uint64_t h;

    *out = NULL;
    err = nf_comm_status(parent);
    if (err)
        return err == -EINPROGRESS ? nf_fail(-EPERM, "split of a communicator still initialising") : err;
    all = calloc((size_t)parent->nranks, sizeof(*all));
    if (!all)
        return nf_fail(-ENOMEM, "out of memory for a split");
    pthread_mutex_lock(&parent->boot_lock);
    index = parent->splits++;
    err = nf_seg_exchange(&parent->seg, &wait, &mine, sizeof(mine), all);
    pthread_mutex_unlock(&parent->boot_lock);
    if (err) {
        free(all);
        nf_comm_fail(parent, err);
        return nf_fail(err, "rank %d: ncclCommSplit failed: %s", parent->rank, strerror(-err));
    }
    /* As NCCL: the new rank orders members by key, then by parent rank. */
    for (int r = 0; r < parent->nranks; r++) {
        if (all[r].color != color)
            continue;
        n++;
        if (all[r].key < key || (all[r].key == key && r < parent->rank))
            rank++;
    }
    free(all);
    if (color == NCCL_SPLIT_NOCOLOR)
        return 0;

    h = fnv1a(parent->hash, &index, sizeof(index));
    h = fnv1a(h, &color, sizeof(color));
    snprintf(name, sizeof(name), "/fakenccl-%u-split-%016llx", (unsigned)getuid(),
             (unsigned long long)h);
    return nf_comm_init(out, name, n, rank, cfg ? cfg : &inherited);
}

/* ---- the way out --------------------------------------------------- */

/*
 * Waits until every issued batch has run; 0 or -ETIMEDOUT.  A batch gives
 * up within NCCL_FAKE_TIMEOUT of its last progress, but may first wait for
 * its stream: allow twice that between two completions.
 */
static int drain(struct nf_comm *c)
{
    uint64_t seen = UINT64_MAX, deadline = 0;
    struct timespec ts;
    int err = 0;

    pthread_mutex_lock(&c->lock);
    while (c->done < atomic_load(&c->issued) && err != ETIMEDOUT) {
        if (c->done != seen) {
            seen = c->done;
            deadline = fg_now_ns() + (op_timeout_ns >= NEVER_NS ? NEVER_NS : 2 * op_timeout_ns);
            ts.tv_sec = (time_t)(deadline / 1000000000u);
            ts.tv_nsec = (long)(deadline % 1000000000u);
        }
        err = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    err = c->done < atomic_load(&c->issued) ? -ETIMEDOUT : 0;
    pthread_mutex_unlock(&c->lock);
    return err;
}

int nf_comm_finalize(struct nf_comm *c)
{
    int err;

    pthread_once(&tunables_once, read_tunables);
    if (c->init_thread_live) {
        pthread_join(c->init_thread, NULL);
        c->init_thread_live = false;
    }
    err = drain(c);
    c->finalized = true;
    if (err)
        return nf_fail(err, "rank %d: operations still pending, none ended for %.0f s "
                       "(twice NCCL_FAKE_TIMEOUT)", c->rank, 2 * (double)op_timeout_ns / 1e9);
    return nf_comm_status(c);
}

void nf_comm_release(struct nf_comm *c, bool abort)
{
    struct nf_reg *reg;

    pthread_once(&tunables_once, read_tunables);
    if (abort) {
        atomic_store(&c->aborting, true);
        if (c->joined)
            nf_seg_abort(&c->seg);
        pthread_mutex_lock(&c->lock);
        pthread_cond_broadcast(&c->cond); /* batches waiting for their turn */
        pthread_mutex_unlock(&c->lock);
    }
    if (c->init_thread_live) {
        pthread_join(c->init_thread, NULL);
        c->init_thread_live = false;
    }
    if (drain(c)) {
        c->magic = 0;
        nf_fail(-ETIMEDOUT, "rank %d: communicator %p leaked: its operations never ran",
                c->rank, (void *)c);
        return;
    }
    nf_prof_comm_fini(c);
    while ((reg = c->regs)) {
        c->regs = reg->next;
        free(reg);
    }
    while ((reg = c->wins)) {
        c->wins = reg->next;
        free(reg);
    }
    if (c->fifo || c->flags || c->host_flags) {
        nf_drv_enter();
        if (c->fifo)
            nf_mem_free(c->fifo);
        if (c->flags)
            nf_mem_free(c->flags);
        if (c->host_flags)
            nf_drv.cuMemFreeHost(c->host_flags);
    }
    if (c->joined)
        nf_seg_leave(&c->seg);
    pthread_mutex_destroy(&c->boot_lock);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c->p2p_sent);
    free(c->p2p_taken);
    c->magic = 0;
    free(c);
}

/* ---- registration -------------------------------------------------- */

int nf_comm_register(struct nf_comm *c, void *buff, size_t size, void **handle)
{
    struct nf_reg *reg = malloc(sizeof(*reg));

    if (!reg)
        return nf_fail(-ENOMEM, "out of memory for a registration");
    reg->buff = buff;
    reg->size = size;
    pthread_mutex_lock(&c->lock);
    reg->next = c->regs;
    c->regs = reg;
    pthread_mutex_unlock(&c->lock);
    *handle = reg;
    return 0;
}

/* Takes handle out of the comm's list *head and frees it; false when it is not there. */
static bool unlink_reg(struct nf_comm *c, struct nf_reg **head, void *handle)
{
    struct nf_reg **p, *found = NULL;

    pthread_mutex_lock(&c->lock);
    for (p = head; *p && *p != handle; p = &(*p)->next)
        ;
    if (*p) {
        found = *p;
        *p = found->next;
    }
    pthread_mutex_unlock(&c->lock);
    free(found);
    return found != NULL;
}

int nf_comm_deregister(struct nf_comm *c, void *handle)
{
    if (!unlink_reg(c, &c->regs, handle))
        return nf_fail(-EINVAL, "ncclCommDeregister: %p is no registration of this comm", handle);
    return 0;
}

int nf_comm_window_register(struct nf_comm *c, void *buff, size_t size, void **win)
{
    CUdeviceptr base = 0;
    size_t len = 0;

    if ((uintptr_t)buff % NCCL_WIN_REQUIRED_ALIGNMENT)
        return nf_fail(-EINVAL, "ncclCommWindowRegister: %p is not aligned to %d bytes", buff,
                       NCCL_WIN_REQUIRED_ALIGNMENT);
    if (nf_drv_enter() || nf_drv.cuMemGetAddressRange_v2(&base, &len, (CUdeviceptr)(uintptr_t)buff) != CUDA_SUCCESS ||
        (uintptr_t)buff + size > base + len)
        return nf_fail(-EINVAL, "ncclCommWindowRegister: [%p, +%zu) is not inside one device allocation", buff,
                       size);
    struct nf_reg *w = malloc(sizeof(*w));
    if (!w)
        return nf_fail(-ENOMEM, "out of memory for a window");
    w->buff = buff;
    w->size = size;
    pthread_mutex_lock(&c->lock);
    w->next = c->wins;
    c->wins = w;
    pthread_mutex_unlock(&c->lock);
    *win = w;
    nf_info("comm %p rank %d window %p registered over %zu bytes", (void *)c, c->rank, (void *)w, size);
    return 0;
}

int nf_comm_window_deregister(struct nf_comm *c, void *win)
{
    if (!unlink_reg(c, &c->wins, win))
        return nf_fail(-EINVAL, "ncclCommWindowDeregister: %p is no window of this comm", win);
    return 0;
}
