/*
 * Snapshot images: the format's layout is pinned (a change must bump the
 * version), a committed image verifies, and every kind of damage is caught
 * and named: a flipped data bit, a flipped header bit, truncation, a zeroed
 * page, an image that was never committed.  And a reader in another
 * process (a peer, the agent) that sees the magic of a slot being
 * committed sees a header whose sum verifies, never one half written.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "image.h"
#include "check.h"

static const struct {
    const char *field;
    size_t offset, expected;
} layout[] = {
    {"magic", offsetof(struct ckpt_header, magic), 0},
    {"version", offsetof(struct ckpt_header, version), 8},
    {"header_bytes", offsetof(struct ckpt_header, header_bytes), 12},
    {"job", offsetof(struct ckpt_header, job), 16},
    {"rank", offsetof(struct ckpt_header, rank), 80},
    {"world", offsetof(struct ckpt_header, world), 84},
    {"generation", offsetof(struct ckpt_header, generation), 88},
    {"iteration", offsetof(struct ckpt_header, iteration), 96},
    {"time_ns", offsetof(struct ckpt_header, time_ns), 104},
    {"nallocs", offsetof(struct ckpt_header, nallocs), 112},
    {"data_offset", offsetof(struct ckpt_header, data_offset), 120},
    {"data_bytes", offsetof(struct ckpt_header, data_bytes), 128},
    {"chunk_bytes", offsetof(struct ckpt_header, chunk_bytes), 136},
    {"nchunks", offsetof(struct ckpt_header, nchunks), 144},
    {"header_sum", offsetof(struct ckpt_header, header_sum), 152},
    {"epoch", offsetof(struct ckpt_header, epoch), 160},
    {"rec.ordinal", offsetof(struct ckpt_rec, ordinal), 0},
    {"rec.size", offsetof(struct ckpt_rec, size), 8},
    {"rec.offset", offsetof(struct ckpt_rec, offset), 16},
    {"rec.kind", offsetof(struct ckpt_rec, kind), 24},
    {"rec.birth", offsetof(struct ckpt_rec, birth), 32},
    {"rec.start", offsetof(struct ckpt_rec, start), 40},
    {"rec.bytes", offsetof(struct ckpt_rec, bytes), 48},
};

/* A committed image of three allocations (sizes chosen to straddle chunks). */
static char *build(size_t *len)
{
    struct ckpt_rec recs[3] = {{.ordinal = 0, .size = 5000, .bytes = 5000},
                               {.ordinal = 1, .size = 70000, .bytes = 70000},
                               {.ordinal = 4, .size = 1, .bytes = 1}};
    struct ckpt_header h = {.rank = 3, .world = 4, .generation = 7, .iteration = 42, .chunk_bytes = 16384};
    snprintf(h.job, sizeof(h.job), "unit");
    *len = ckpt_image_layout(&h, recs, 3);
    char *img = calloc(1, *len);
    for (size_t i = 0; i < 3; i++)
        memset(img + h.data_offset + recs[i].offset, (int)(0x10 + i), recs[i].size);
    ckpt_image_commit(img, &h, recs);
    return img;
}

static int verify(const char *img, size_t len, char *why)
{
    struct ckpt_header h;
    return ckpt_image_verify(img, len, &h, why, 200);
}

/* A child reads the shared slot while this process commits it again and
 * again, as a peer reads a rank's slot: each time the magic is set, the
 * header must verify.  Returns the number of bad headers the child saw. */
static int concurrent_readers_see_whole_headers(void)
{
    struct ckpt_rec rec = {.ordinal = 0, .size = 64, .bytes = 64};
    struct ckpt_header h = {.generation = 1, .iteration = 9, .chunk_bytes = 4096};
    size_t len = ckpt_image_layout(&h, &rec, 1);
    char *slot = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile int *stop = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (slot == MAP_FAILED || stop == MAP_FAILED)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        char why[200];
        struct ckpt_header seen;
        while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE))
            if (__atomic_load_n((uint64_t *)slot, __ATOMIC_ACQUIRE) != 0 &&
                ckpt_image_verify_header(slot, len, &seen, why, sizeof(why)) == -EBADMSG)
                bad++;
        _exit(bad > 100 ? 100 : bad);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 1000; i++) {
            ckpt_image_invalidate(slot);
            ckpt_image_commit(slot, &h, &rec);
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 300000000L);
    __atomic_store_n(stop, 1, __ATOMIC_RELEASE);
    int status;
    waitpid(pid, &status, 0);
    munmap(slot, len);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void)
{
    char why[200];
    size_t len;

    for (size_t i = 0; i < sizeof(layout) / sizeof(layout[0]); i++)
        CHECK(layout[i].offset == layout[i].expected, "layout: %s at %zu, pinned at %zu", layout[i].field,
              layout[i].offset, layout[i].expected);

    char *img = build(&len);
    struct ckpt_header h;
    int rc = ckpt_image_verify(img, len, &h, why, sizeof(why));
    CHECK(rc == 0, "intact image: %d %s", rc, why);
    CHECK(rc != 0 || (h.iteration == 42 && h.generation == 7 && h.nallocs == 3 && strcmp(h.job, "unit") == 0),
          "intact image: header fields wrong");
    CHECK(ckpt_image_recs(img)[1].size == 70000 && ckpt_image_recs(img)[1].offset % CKPT_DATA_ALIGN == 0,
          "records: wrong size or unaligned offset");

    /* Each damage, applied to a fresh copy, must be refused with its name. */
    static const struct {
        const char *what, *says;
        int expect;
    } damages[] = {
        {"flip a data bit", "chunk 2", -EBADMSG},
        {"flip a header bit", "header checksum", -EBADMSG},
        {"truncate", "inconsistent", -EBADMSG},
        {"zero a page of data", "chunk 0", -EBADMSG},
        {"never committed", "no committed snapshot", -ENODATA},
        {"flip a record bit", "header checksum", -EBADMSG},
    };
    for (size_t d = 0; d < sizeof(damages) / sizeof(damages[0]); d++) {
        char *copy = malloc(len);
        size_t clen = len;
        memcpy(copy, img, len);
        switch (d) {
        case 0: copy[h.data_offset + 2 * 16384 + 5] ^= 0x04; break;
        case 1: copy[offsetof(struct ckpt_header, iteration)] ^= 0x01; break;
        case 2: clen = len - 100; break;
        case 3: memset(copy + h.data_offset, 0, 4096); break;
        case 4: ckpt_image_invalidate(copy); break;
        case 5: copy[sizeof(struct ckpt_header) + 8] ^= 0x80; break;
        }
        why[0] = '\0';
        rc = verify(copy, clen, why);
        CHECK(rc == damages[d].expect && strstr(why, damages[d].says), "%s: rc %d, '%s'", damages[d].what, rc, why);
        free(copy);
    }
    free(img);

    int bad = concurrent_readers_see_whole_headers();
    CHECK(bad == 0, "a reader beside the committer saw %d headers with the magic set and a wrong sum", bad);
    return failures ? 1 : 0;
}
