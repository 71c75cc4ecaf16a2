/*
 * The timeline's ring and its file (timeline.h).  The ring is written from
 * NCCL's threads, the program's and libckpt's committer at once, so a slot
 * is claimed with one atomic add and published with a sequence number the
 * reader checks before and after copying it (a seqlock per slot): adding an
 * event never takes a lock or allocates.  Writing the file must never leave
 * a half-written one where a reader looks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* no libxxhash at run time: libckpt.so links nothing it need not */
#include <xxhash.h>

#include "timeline.h"
#include "util.h"

_Static_assert((CKPT_TL_CAP & (CKPT_TL_CAP - 1)) == 0, "CKPT_TL_CAP must be a power of two");

static struct {
    uint64_t seq; /* index + 1 once the event is complete, 0 while written */
    struct ckpt_tl_event e;
} ring[CKPT_TL_CAP];
static uint64_t head;      /* events ever claimed */
static uint64_t iteration = 1;

uint64_t ckpt_tl_iteration(void)
{
    return __atomic_load_n(&iteration, __ATOMIC_RELAXED);
}

void ckpt_tl_set_iteration(uint64_t in_progress)
{
    __atomic_store_n(&iteration, in_progress, __ATOMIC_RELAXED);
}

void ckpt_tl_add(const struct ckpt_tl_event *e)
{
    uint64_t i = __atomic_fetch_add(&head, 1, __ATOMIC_RELAXED);
    size_t s = i & (CKPT_TL_CAP - 1);

    __atomic_store_n(&ring[s].seq, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(&ring[s].e, e, sizeof(*e));
    __atomic_store_n(&ring[s].seq, i + 1, __ATOMIC_RELEASE);
}

size_t ckpt_tl_collect(uint64_t from_iter, struct ckpt_tl_event *out, uint64_t *dropped)
{
    uint64_t end = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    uint64_t begin = end > CKPT_TL_CAP ? end - CKPT_TL_CAP : 0;
    size_t n = 0;

    *dropped = begin;
    for (uint64_t i = begin; i < end; i++) {
        size_t s = i & (CKPT_TL_CAP - 1);
        struct ckpt_tl_event e;

        if (__atomic_load_n(&ring[s].seq, __ATOMIC_ACQUIRE) != i + 1) {
            (*dropped)++; /* still being written, or already overwritten */
            continue;
        }
        memcpy(&e, &ring[s].e, sizeof(e));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&ring[s].seq, __ATOMIC_RELAXED) != i + 1) {
            (*dropped)++;
            continue;
        }
        if (e.iteration >= from_iter)
            out[n++] = e;
    }
    return n;
}

static uint64_t checksum(const struct ckpt_tl_header *h, const void *events, size_t bytes)
{
    struct ckpt_tl_header copy = *h;
    XXH3_state_t st;

    copy.sum = 0;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &copy, sizeof(copy));
    XXH3_64bits_update(&st, events, bytes);
    return XXH3_64bits_digest(&st);
}

size_t ckpt_tl_encode(void *buf, uint32_t rank, const struct ckpt_tl_event *ev, size_t n, uint64_t dropped)
{
    struct ckpt_tl_header h = {.version = CKPT_TL_VERSION,
                               .header_bytes = sizeof(h),
                               .event_bytes = sizeof(*ev),
                               .rank = rank,
                               .nevents = n,
                               .dropped = dropped};

    memcpy(h.magic, CKPT_TL_MAGIC, sizeof(h.magic));
    memmove((char *)buf + sizeof(h), ev, n * sizeof(*ev));
    h.sum = checksum(&h, (char *)buf + sizeof(h), n * sizeof(*ev));
    memcpy(buf, &h, sizeof(h));
    return sizeof(h) + n * sizeof(*ev);
}

int ckpt_tl_decode(const void *buf, size_t len, struct ckpt_tl_header *h, char *why, size_t whylen)
{
    if (len < sizeof(*h)) {
        snprintf(why, whylen, "%zu bytes: shorter than a timeline header", len);
        return -EINVAL;
    }
    memcpy(h, buf, sizeof(*h));
    if (memcmp(h->magic, CKPT_TL_MAGIC, sizeof(h->magic)) != 0) {
        snprintf(why, whylen, "not a timeline (bad magic)");
        return -EINVAL;
    }
    if (h->version != CKPT_TL_VERSION || h->header_bytes != sizeof(*h) ||
        h->event_bytes != sizeof(struct ckpt_tl_event)) {
        snprintf(why, whylen, "timeline version %u (header %u, event %u bytes); this reader knows version %d",
                 h->version, h->header_bytes, h->event_bytes, CKPT_TL_VERSION);
        return -EINVAL;
    }
    if (h->nevents > (len - sizeof(*h)) / sizeof(struct ckpt_tl_event) ||
        sizeof(*h) + h->nevents * sizeof(struct ckpt_tl_event) != len) {
        snprintf(why, whylen, "%zu bytes, but the header says %llu events", len, (unsigned long long)h->nevents);
        return -EINVAL;
    }
    if (checksum(h, (const char *)buf + sizeof(*h), len - sizeof(*h)) != h->sum) {
        snprintf(why, whylen, "checksum mismatch: the file is damaged");
        return -EINVAL;
    }
    return 0;
}

/* One file image at a time: the buffer is static so that a boundary never
 * allocates. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static union {
    struct ckpt_tl_header h;
    char bytes[sizeof(struct ckpt_tl_header) + CKPT_TL_CAP * sizeof(struct ckpt_tl_event)];
} image;

int ckpt_tl_write(const char *dir, uint32_t rank)
{
    char path[4096];
    uint64_t it = ckpt_tl_iteration(), dropped;

    if (snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_FILE) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    pthread_mutex_lock(&write_lock);
    struct ckpt_tl_event *ev = (struct ckpt_tl_event *)(image.bytes + sizeof(struct ckpt_tl_header));
    size_t n = ckpt_tl_collect(it > CKPT_TL_ITERS ? it - CKPT_TL_ITERS : 0, ev, &dropped);
    size_t len = ckpt_tl_encode(image.bytes, rank, ev, n, dropped);
    int rc = ckpt_write_whole(path, image.bytes, len);
    pthread_mutex_unlock(&write_lock);
    return rc;
}

const char *ckpt_tl_func_name(uint32_t func)
{
    static const char *const names[CKPT_TL_NFUNCS] = {
        [CKPT_TL_OTHER] = "?", [CKPT_TL_ALLREDUCE] = "AllReduce", [CKPT_TL_BROADCAST] = "Broadcast",
        [CKPT_TL_REDUCE] = "Reduce", [CKPT_TL_ALLGATHER] = "AllGather", [CKPT_TL_REDUCESCATTER] = "ReduceScatter",
        [CKPT_TL_SEND] = "Send", [CKPT_TL_RECV] = "Recv", [CKPT_TL_ALLTOALL] = "AlltoAll",
        [CKPT_TL_GATHER] = "Gather", [CKPT_TL_SCATTER] = "Scatter",
    };
    return func < CKPT_TL_NFUNCS ? names[func] : "?";
}
