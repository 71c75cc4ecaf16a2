/*
 * The persistence engine's copy-free paths: an image in a shared-memory
 * arena (page-aligned data, as format.h lays it out) is written to the
 * disk straight from its slot and read back straight into the restored
 * file, every aligned whole block of it (counted exactly by
 * ckpt_persist_stats.direct_bytes; short tails and the log go through the
 * buffers), and comes back bit-exact.  Integrity holds on those paths: a
 * byte of the slot changed after its commit fails the persist naming the
 * chunk, and a damaged stripe fails the restore leaving no file that looks
 * like a valid image.  Exits 77 when /dev/shm is not shared memory here.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "arena.h"
#include "image.h"
#include "persist.h"
#include "persist_int.h"
#include "check.h"

#define CHUNK 65536u
#define BLOCK_KB 16u

static char shm[] = "/dev/shm/ckpt-persist-direct-XXXXXX", disk[] = "/tmp/ckpt-persist-direct-XXXXXX";
static const int rank0[] = {0};

/* Commits an image of iteration it into slot 0 of rank 0 of arena (two
 * allocations, the last chunk short) and a replay log of 5000 bytes (not
 * whole pages: it goes through the buffers); each 4-byte word differs, so
 * no chunk is deduplicated.  Returns the image's data bytes. */
static uint64_t make_image(const char *arena, uint64_t it)
{
    struct ckpt_rec recs[2] = {{.ordinal = 0, .size = 1 << 20, .bytes = 1 << 20},
                               {.ordinal = 1, .size = 100003, .bytes = 100003}};
    struct ckpt_header h = {.world = 1, .generation = it, .iteration = it, .chunk_bytes = CHUNK};
    struct ckpt_arena a;
    char why[256], path[PATH_MAX + 16];
    int moved;

    snprintf(h.job, sizeof(h.job), "job");
    if (ckpt_arena_open(&a, arena, "job", 0, 0, why, sizeof(why)) < 0) {
        printf("arena: %s\n", why);
        exit(1);
    }
    size_t len = ckpt_image_layout(&h, recs, 2);
    if (ckpt_arena_reserve(&a, 0, len, &moved) < 0)
        exit(1);
    ckpt_image_invalidate(a.base[0]);
    uint32_t *w = (uint32_t *)((char *)a.base[0] + h.data_offset);
    for (size_t i = 0; i < h.data_bytes / 4; i++)
        w[i] = (uint32_t)(it * 1000003u + i);
    ckpt_image_commit(a.base[0], &h, recs);
    snprintf(path, sizeof(path), "%s/replay.log", a.dir);
    ckpt_arena_close(&a);
    FILE *f = fopen(path, "wb");
    for (int i = 0; f && i < 5000; i++)
        fputc(i * 7, f);
    if (!f || fclose(f) != 0)
        exit(1);
    return h.data_bytes;
}

/* The bytes of an image of data_bytes that move in place: in each chunk,
 * the blocks that are whole pages. */
static uint64_t direct_bytes(uint64_t data_bytes)
{
    uint64_t n = 0;
    for (uint64_t c = 0; c < data_bytes; c += CHUNK) {
        uint64_t chunk = data_bytes - c < CHUNK ? data_bytes - c : CHUNK;
        for (uint64_t at = 0; at < chunk; at += BLOCK_KB * 1024) {
            uint64_t len = chunk - at < BLOCK_KB * 1024 ? chunk - at : BLOCK_KB * 1024;
            n += len % 4096 ? 0 : len;
        }
    }
    return n;
}

static void rank_file(char *out, size_t n, const char *arena, const char *file)
{
    char dir[PATH_MAX];
    ckpt_arena_path(dir, sizeof(dir), arena, "job", 0);
    snprintf(out, n, "%s/%s", dir, file);
}

/* No ring gave up the copy-free path: every aligned block so far went
 * straight, the ones of a failed call included. */
static bool all_direct(const struct ckpt_persist *p)
{
    for (unsigned i = 0; i < p->nrings; i++)
        if (p->rings[i].no_direct)
            return false;
    return true;
}

/* Flips a byte at offset off of a file. */
static void flip(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    int ch = f && fseek(f, off, SEEK_SET) == 0 ? fgetc(f) : EOF;
    if (ch == EOF || fseek(f, off, SEEK_SET) != 0 || fputc(ch ^ 0x10, f) == EOF)
        failures++;
    if (f)
        fclose(f);
}

int main(void)
{
    struct statfs fs;
    char arena[PATH_MAX], back[PATH_MAX], back2[PATH_MAX], why[512], path[PATH_MAX + 64], cmd[2 * PATH_MAX];

    if (statfs("/dev/shm", &fs) < 0 || fs.f_type != TMPFS_MAGIC || !mkdtemp(shm)) {
        printf("skipped: /dev/shm is not a writable tmpfs here\n");
        return 77;
    }
    if (!mkdtemp(disk))
        return 1;
    snprintf(arena, sizeof(arena), "%s/arena", shm);
    snprintf(back, sizeof(back), "%s/back", shm);
    snprintf(back2, sizeof(back2), "%s/back2", shm);
    struct ckpt_persist_opts o = {.dirs = disk, .depth = 4, .block_kb = BLOCK_KB, .keep = 3};
    struct ckpt_persist *p;
    int rc = ckpt_persist_open(&p, &o, why, sizeof(why));
    if (rc == -ENOSYS || rc == -EPERM) {
        printf("skipped: %s\n", why);
        return 77;
    }
    if (rc < 0) {
        printf("open: %s\n", why);
        return 1;
    }

    /* Iteration 10 goes out and comes back with every aligned block moved in place. */
    struct ckpt_persist_stats st;
    struct ckpt_persist_req rq = {.arena = arena, .job = "job", .ranks = rank0, .nranks = 1, .iteration = 10};
    uint64_t data = make_image(arena, 10), want = direct_bytes(data);
    rc = ckpt_persist_generation(p, &rq, &st, why, sizeof(why));
    CHECK(rc == 0 && st.direct_bytes == want && want > data / 2,
          "save: %d '%s', %llu bytes in place of the %llu expected (of %llu)", rc, why,
          (unsigned long long)st.direct_bytes, (unsigned long long)want, (unsigned long long)data);
    struct ckpt_persist_req rb = {.arena = back, .job = "job", .iteration = 10};
    rc = ckpt_persist_restore(p, &rb, &st, why, sizeof(why));
    CHECK(rc == 0 && st.direct_bytes == want, "restore: %d '%s', %llu bytes in place of the %llu expected", rc, why,
          (unsigned long long)st.direct_bytes, (unsigned long long)want);
    size_t alen, blen;
    rank_file(path, sizeof(path), arena, "slot0");
    char *x = slurp(path, &alen);
    rank_file(path, sizeof(path), back, "slot0");
    char *y = slurp(path, &blen);
    struct ckpt_header h;
    CHECK(x && y && blen <= alen && ckpt_image_verify(y, blen, &h, why, sizeof(why)) == 0 && h.iteration == 10 &&
              memcmp(x, y, blen) == 0,
          "restore: slot0 is not the persisted image bit-exact (%zu of %zu bytes)", blen, alen);
    free(x);
    free(y);

    /* Iteration 20 is committed, then a byte of chunk 5 (a whole aligned
     * block, so moved in place) changes before the persist. */
    make_image(arena, 20);
    rank_file(path, sizeof(path), arena, "slot0");
    size_t hlen;
    char *head = slurp(path, &hlen);
    memcpy(&h, head, sizeof(h));
    free(head);
    flip(path, (long)(h.data_offset + 5 * CHUNK + 1234));
    rq.iteration = 20;
    rc = ckpt_persist_generation(p, &rq, &st, why, sizeof(why));
    CHECK(rc == -ESTALE && strstr(why, "image chunk 5 changed while"), "changed slot: %d '%s'", rc, why);
    CHECK(all_direct(p), "changed slot: the blocks did not move in place");
    struct ckpt_persist_gen g;
    rc = ckpt_persist_newest(p, "job", 0, CKPT_PERSIST_VERIFY, &g, why, sizeof(why));
    CHECK(rc == 0 && g.iteration == 10, "changed slot: the newest generation is %llu (rc %d)",
          (unsigned long long)g.iteration, rc);

    /* A byte of the stripe inside an aligned block flips: the restore
     * fails, and leaves neither a slot that verifies nor the files it was
     * reading into. */
    snprintf(path, sizeof(path), "%s/%u-job/gen-10/stripe-0", disk, (unsigned)geteuid());
    flip(path, (long)(3 * CHUNK + 4321));
    rb.arena = back2;
    rc = ckpt_persist_restore(p, &rb, &st, why, sizeof(why));
    CHECK(rc == -EBADMSG && strstr(why, "do not match their checksum"), "damaged stripe: %d '%s'", rc, why);
    CHECK(all_direct(p), "damaged stripe: the blocks were not read in place");
    for (int k = 0; k < 2; k++) {
        rank_file(path, sizeof(path), back2, k ? "slot1" : "slot0");
        y = slurp(path, &blen);
        CHECK(!y || !blen || ckpt_image_verify(y, blen, &h, why, sizeof(why)) < 0,
              "damaged stripe: %s holds a valid image of iteration %llu", path, (unsigned long long)h.iteration);
        free(y);
    }
    static const char *const partial[] = {"slot0.from-disk", "replay.log.from-disk"};
    for (int k = 0; k < 2; k++) {
        rank_file(path, sizeof(path), back2, partial[k]);
        CHECK(access(path, F_OK) != 0, "damaged stripe: %s is left", path);
    }
    ckpt_persist_close(p);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", shm, disk);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
