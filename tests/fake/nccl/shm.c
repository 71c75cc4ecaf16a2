/*
 * The shared segment where the ranks of one communicator meet: a header, one
 * control block per rank and one data slot per rank, in a POSIX shm object
 * named by the unique id.  Every control word has a single writer (its
 * rank); waiters sleep on one futex doorbell that every state change rings,
 * and while they sleep they probe their peers, so that a rank that died,
 * left or gave up ends every wait within a bounded time (unless the wait
 * is told to overlook peers, as real NCCL's kernels do: then only its
 * timeout or its own cancel flag ends it).  Nothing here may wait without
 * a timeout, and no name may outlive the join: the rank that completes the
 * set unlinks it, and a failed join unlinks it too.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nccl_fake.h"

#define PROBE_NS 100000000ull /* liveness probe period while waiting */
#define NAP_NS 20000000ull    /* longest sleep between checks */
#define POLL_US 1000          /* while a segment is being created */

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

static size_t ranks_offset(void)
{
    return round_up(sizeof(struct nf_seg_header), 64);
}

/* The layout for nranks ranks; returns the total size. */
static size_t layout(int nranks, uint64_t *stride, uint64_t *slots)
{
    *stride = round_up(sizeof(struct nf_seg_rank) + 2 * (size_t)nranks * sizeof(uint64_t), 64);
    *slots = round_up(ranks_offset() + (size_t)nranks * *stride, 4096);
    return *slots + (size_t)nranks * NF_SLOT_BYTES;
}

struct nf_seg_rank *nf_seg_rank(const struct nf_seg *seg, int rank)
{
    return (struct nf_seg_rank *)((char *)seg->hdr + ranks_offset() +
                                  (size_t)rank * seg->hdr->rank_stride);
}

unsigned char *nf_seg_slot(const struct nf_seg *seg, int rank)
{
    return (unsigned char *)seg->hdr + seg->hdr->slots_offset +
           (size_t)rank * seg->hdr->slot_bytes;
}

void nf_seg_ring(const struct nf_seg *seg)
{
    atomic_fetch_add(&seg->hdr->doorbell, 1);
    if (atomic_load(&seg->hdr->waiters))
        syscall(SYS_futex, &seg->hdr->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps until the doorbell moves from `seen`, or ns have passed. */
static void nap(const struct nf_seg *seg, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};

    atomic_fetch_add(&seg->hdr->waiters, 1);
    syscall(SYS_futex, &seg->hdr->doorbell, FUTEX_WAIT, seen, &ts, NULL, 0);
    atomic_fetch_sub(&seg->hdr->waiters, 1);
}

/*
 * Whether process pid still runs.  A zombie counts as dead: a killed rank
 * stays a zombie until its launcher reaps it, and kill(pid, 0) alone would
 * keep its peers waiting for it.
 */
static bool pid_alive(pid_t pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;

    if (pid <= 0)
        return false;
    if (kill(pid, 0) && errno == ESRCH)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = 0;
    p = strrchr(buf, ')'); /* the state follows the command name */
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* 0 while every registered peer is alive and in; -EPIPE otherwise. */
static int probe_peers(const struct nf_seg *seg)
{
    for (int r = 0; r < seg->nranks; r++) {
        struct nf_seg_rank *rk = nf_seg_rank(seg, r);
        int state = atomic_load(&rk->state);

        if (r == seg->rank || state == NF_RANK_EMPTY)
            continue;
        if (state == NF_RANK_LEFT)
            return -EPIPE;
        if (!pid_alive(atomic_load(&rk->pid)))
            return -EPIPE;
    }
    return 0;
}

int nf_seg_wait(const struct nf_seg *seg, const struct nf_wait *wait,
                bool (*ready)(const struct nf_seg *seg, void *arg), void *arg)
{
    uint64_t start = fg_now_ns(), next_probe = start + PROBE_NS;

    for (;;) {
        uint32_t seen = atomic_load(&seg->hdr->doorbell);
        uint64_t now, left, ns;

        if (ready(seg, arg))
            return 0;
        if (wait->cancel && atomic_load(wait->cancel))
            return -ECANCELED;
        if (!wait->peers_unseen && atomic_load(&seg->hdr->aborted_by))
            return -ECONNABORTED;
        now = fg_now_ns();
        if (now >= next_probe && !wait->peers_unseen) {
            int err = probe_peers(seg);

            /* A peer may publish its last word and then leave: look again. */
            if (err)
                return ready(seg, arg) ? 0 : err;
            next_probe = now + PROBE_NS;
        }
        if (now - start >= wait->timeout_ns)
            return -ETIMEDOUT;
        left = start + wait->timeout_ns - now;
        ns = next_probe - now;
        ns = ns < NAP_NS ? ns : NAP_NS;
        nap(seg, seen, ns < left ? ns : left);
    }
}

/* ---- joining ------------------------------------------------------- */

/*
 * Opens the segment, creating it when it does not exist yet, and maps it
 * once its creator has finished the header.  0 or -errno.
 */
static int open_segment(struct nf_seg *seg, const char *name, uint64_t deadline)
{
    uint64_t stride, slots;
    size_t size = layout(seg->nranks, &stride, &slots);
    struct nf_seg_header *hdr;
    bool creator = false;
    struct stat st;
    int fd, err;

    for (;;) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            creator = true;
            break;
        }
        if (errno != EEXIST)
            return -errno;
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd >= 0)
            break;
        if (errno != ENOENT) /* ENOENT: its creator gave up in between */
            return -errno;
        if (fg_now_ns() >= deadline)
            return -ETIMEDOUT;
        usleep(POLL_US);
    }

    if (creator) {
        /* Reserve the pages now: a full /dev/shm must fail the join, not
           raise SIGBUS in a collective later. */
        err = ftruncate(fd, (off_t)size) ? errno : posix_fallocate(fd, 0, (off_t)size);
        if (err) {
            close(fd);
            shm_unlink(name);
            return -err;
        }
    } else {
        /* The creator sizes it with one ftruncate: 0 or the final size. */
        while (!(err = fstat(fd, &st) ? errno : 0) && st.st_size == 0 && fg_now_ns() < deadline)
            usleep(POLL_US);
        if (err) {
            close(fd);
            return -err;
        }
        if (st.st_size != (off_t)size) {
            close(fd);
            return st.st_size ? -EINVAL : -ETIMEDOUT;
        }
    }
    hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    err = errno;
    close(fd);
    if (hdr == MAP_FAILED)
        return -err;
    seg->hdr = hdr;
    seg->size = size;

    if (creator) {
        hdr->version = NF_SEG_VERSION;
        hdr->nranks = (uint32_t)seg->nranks;
        hdr->size = size;
        hdr->rank_stride = stride;
        hdr->slots_offset = slots;
        hdr->slot_bytes = NF_SLOT_BYTES;
        atomic_store(&hdr->magic, NF_SEG_MAGIC);
        return 0;
    }
    while (atomic_load(&hdr->magic) != NF_SEG_MAGIC) {
        if (fg_now_ns() >= deadline)
            return -ETIMEDOUT;
        usleep(POLL_US);
    }
    if (hdr->version != NF_SEG_VERSION || hdr->nranks != (uint32_t)seg->nranks ||
        hdr->size != size)
        return -EINVAL;
    return 0;
}

static bool all_joined(const struct nf_seg *seg, void *arg)
{
    (void)arg;
    return atomic_load(&seg->hdr->joined) == seg->nranks;
}

int nf_seg_join(struct nf_seg *seg, const char *name, int nranks, int rank,
                const struct nf_wait *wait)
{
    uint64_t start = fg_now_ns(), spent;
    struct nf_wait rest = *wait;
    struct nf_seg_rank *me;
    int32_t none = 0;
    int err;

    memset(seg, 0, sizeof(*seg));
    snprintf(seg->name, sizeof(seg->name), "%s", name);
    seg->nranks = nranks;
    seg->rank = rank;

    err = open_segment(seg, name, start + wait->timeout_ns);
    if (err)
        goto fail;
    me = nf_seg_rank(seg, rank);
    if (!atomic_compare_exchange_strong(&me->pid, &none, (int32_t)getpid())) {
        munmap(seg->hdr, seg->size);
        seg->hdr = NULL;
        return -EBUSY; /* someone else's rank: leave their segment alone */
    }
    atomic_store(&me->state, NF_RANK_JOINED);
    if (atomic_fetch_add(&seg->hdr->joined, 1) + 1 == nranks)
        shm_unlink(name);
    nf_seg_ring(seg);

    spent = fg_now_ns() - start;
    rest.timeout_ns = spent < wait->timeout_ns ? wait->timeout_ns - spent : 0;
    err = nf_seg_wait(seg, &rest, all_joined, NULL);
    if (!err)
        return 0;
    atomic_store(&me->state, NF_RANK_LEFT);
    nf_seg_ring(seg);
fail:
    if (seg->hdr)
        munmap(seg->hdr, seg->size);
    seg->hdr = NULL;
    shm_unlink(name);
    return err;
}

void nf_seg_leave(struct nf_seg *seg)
{
    atomic_store(&nf_seg_rank(seg, seg->rank)->state, NF_RANK_LEFT);
    nf_seg_ring(seg);
    munmap(seg->hdr, seg->size);
    seg->hdr = NULL;
}

void nf_seg_abort(struct nf_seg *seg)
{
    int32_t none = 0;

    atomic_compare_exchange_strong(&seg->hdr->aborted_by, &none, seg->rank + 1);
    nf_seg_ring(seg);
}

/* ---- barriers ------------------------------------------------------ */

struct phase_target {
    size_t offset; /* of the counter in struct nf_seg_rank */
    uint64_t value;
};

static bool phase_reached(const struct nf_seg *seg, void *arg)
{
    const struct phase_target *t = arg;

    for (int r = 0; r < seg->nranks; r++) {
        _Atomic uint64_t *ctr = (_Atomic uint64_t *)((char *)nf_seg_rank(seg, r) + t->offset);

        if (atomic_load(ctr) < t->value)
            return false;
    }
    return true;
}

/* Publishes this rank's counter at `offset` as `value` and waits for all. */
static int reach(struct nf_seg *seg, const struct nf_wait *wait, size_t offset, uint64_t value)
{
    struct phase_target t = {offset, value};

    atomic_store((_Atomic uint64_t *)((char *)nf_seg_rank(seg, seg->rank) + offset), value);
    nf_seg_ring(seg);
    return nf_seg_wait(seg, wait, phase_reached, &t);
}

int nf_seg_barrier(struct nf_seg *seg, const struct nf_wait *wait)
{
    return reach(seg, wait, offsetof(struct nf_seg_rank, phase), ++seg->phase);
}

int nf_seg_exchange(struct nf_seg *seg, const struct nf_wait *wait,
                    const void *mine, size_t len, void *all)
{
    size_t off = offsetof(struct nf_seg_rank, boot_phase);
    int err;

    if (len > NF_BOOT_BYTES)
        return -EINVAL;
    memcpy(nf_seg_rank(seg, seg->rank)->boot, mine, len);
    err = reach(seg, wait, off, ++seg->boot_phase);
    if (err)
        return err;
    for (int r = 0; r < seg->nranks; r++)
        memcpy((char *)all + (size_t)r * len, nf_seg_rank(seg, r)->boot, len);
    /* Nobody may overwrite its record before everyone has read this round. */
    return reach(seg, wait, off, ++seg->boot_phase);
}
