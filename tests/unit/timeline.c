/*
 * The timeline format and ring (runtime/timeline.h): the layout is pinned
 * (a change must bump the version), the ring keeps the newest CKPT_TL_CAP
 * events in order and counts the ones it lost, the file holds only the
 * iteration in progress and the CKPT_TL_ITERS before it, and reads back as
 * written, and a damaged
 * file (a flipped bit, a cut tail, another version, another magic) is
 * refused with its reason.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "timeline.h"
#include "check.h"

static const struct {
    const char *field;
    size_t offset, expected;
} layout[] = {
    {"magic", offsetof(struct ckpt_tl_header, magic), 0},
    {"version", offsetof(struct ckpt_tl_header, version), 8},
    {"header_bytes", offsetof(struct ckpt_tl_header, header_bytes), 12},
    {"event_bytes", offsetof(struct ckpt_tl_header, event_bytes), 16},
    {"rank", offsetof(struct ckpt_tl_header, rank), 20},
    {"nevents", offsetof(struct ckpt_tl_header, nevents), 24},
    {"dropped", offsetof(struct ckpt_tl_header, dropped), 32},
    {"sum", offsetof(struct ckpt_tl_header, sum), 40},
    {"event.start_ns", offsetof(struct ckpt_tl_event, start_ns), 0},
    {"event.end_ns", offsetof(struct ckpt_tl_event, end_ns), 8},
    {"event.iteration", offsetof(struct ckpt_tl_event, iteration), 16},
    {"event.arg", offsetof(struct ckpt_tl_event, arg), 24},
    {"event.kind", offsetof(struct ckpt_tl_event, kind), 32},
    {"event.flags", offsetof(struct ckpt_tl_event, flags), 34},
    {"event.detail", offsetof(struct ckpt_tl_event, detail), 36},
};

static struct ckpt_tl_event out[CKPT_TL_CAP];
static char file[sizeof(struct ckpt_tl_header) + CKPT_TL_CAP * sizeof(struct ckpt_tl_event)];

/* Event i of the test: its number in arg, ten per iteration. */
static void add(uint64_t i)
{
    struct ckpt_tl_event e = {.start_ns = 1000 * i, .end_ns = 1000 * i + 500, .iteration = 1 + i / 10,
                              .arg = i, .kind = CKPT_TL_COLL, .detail = CKPT_TL_ALLREDUCE};
    ckpt_tl_add(&e);
}

static int decode(size_t len, char *why)
{
    struct ckpt_tl_header h;
    return ckpt_tl_decode(file, len, &h, why, 200);
}

int main(void)
{
    char why[200], dir[] = "/tmp/ckpt-tl-XXXXXX";
    uint64_t dropped;

    CHECK(CKPT_TL_VERSION == 1 && memcmp(CKPT_TL_MAGIC, "CKPTTML1", 8) == 0, "magic/version changed");
    for (size_t i = 0; i < sizeof(layout) / sizeof(layout[0]); i++)
        CHECK(layout[i].offset == layout[i].expected, "layout: %s at %zu, pinned at %zu", layout[i].field,
              layout[i].offset, layout[i].expected);

    /* Not yet full: everything, in order. */
    for (uint64_t i = 0; i < 100; i++)
        add(i);
    size_t n = ckpt_tl_collect(0, out, &dropped);
    CHECK(n == 100 && dropped == 0, "100 events: collected %zu, dropped %llu", n, (unsigned long long)dropped);
    CHECK(n && out[0].arg == 0 && out[n - 1].arg == 99, "not oldest first");

    /* Wrapped around: the newest CKPT_TL_CAP, the rest counted as lost. */
    uint64_t total = CKPT_TL_CAP + 1000;
    for (uint64_t i = 100; i < total; i++)
        add(i);
    n = ckpt_tl_collect(0, out, &dropped);
    CHECK(n == CKPT_TL_CAP && dropped == 1000, "after wrap: %zu events, %llu dropped", n,
          (unsigned long long)dropped);
    for (size_t i = 0; i < n; i++)
        if (out[i].arg != 1000 + i) {
            CHECK(0, "after wrap: event %zu is number %llu, not %zu", i, (unsigned long long)out[i].arg, 1000 + i);
            break;
        }

    /* The file: only the last CKPT_TL_ITERS iterations, read back intact. */
    uint64_t last_iter = 1 + (total - 1) / 10;
    ckpt_tl_set_iteration(last_iter);
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    CHECK(ckpt_tl_write(dir, 5) == 0, "ckpt_tl_write failed");
    char path[64];
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_TL_FILE);
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(file, 1, sizeof(file), f) : 0;
    if (f)
        fclose(f);
    struct ckpt_tl_header h;
    int rc = ckpt_tl_decode(file, len, &h, why, sizeof(why));
    CHECK(rc == 0, "written file refused: %s", why);
    if (rc == 0) {
        const struct ckpt_tl_event *ev = (const struct ckpt_tl_event *)(file + h.header_bytes);
        CHECK(h.rank == 5 && h.dropped == 1000, "header: rank %u dropped %llu", h.rank,
              (unsigned long long)h.dropped);
        CHECK(h.nevents == total - 10 * (last_iter - CKPT_TL_ITERS - 1), "file holds %llu events",
              (unsigned long long)h.nevents);
        CHECK(h.nevents && ev[0].iteration == last_iter - CKPT_TL_ITERS && ev[h.nevents - 1].arg == total - 1,
              "file: first iteration %llu, last event %llu", (unsigned long long)ev[0].iteration,
              (unsigned long long)ev[h.nevents - 1].arg);
    }
    unlink(path);
    rmdir(dir);

    /* Damage, each on a fresh image of three events. */
    struct ckpt_tl_event three[3] = {{.iteration = 1}, {.iteration = 2}, {.iteration = 3}};
    static const struct {
        const char *what;
        size_t offset; /* of the byte flipped; SIZE_MAX: cut the last byte */
        const char *reason;
    } damage[] = {
        {"event bit", sizeof(struct ckpt_tl_header) + 40 + 17, "checksum"},
        {"count", offsetof(struct ckpt_tl_header, nevents), "events"},
        {"version", offsetof(struct ckpt_tl_header, version), "version"},
        {"magic", 0, "magic"},
        {"tail", SIZE_MAX, "events"},
    };
    for (size_t d = 0; d < sizeof(damage) / sizeof(damage[0]); d++) {
        len = ckpt_tl_encode(file, 0, three, 3, 0);
        CHECK(decode(len, why) == 0, "intact image refused: %s", why);
        if (damage[d].offset == SIZE_MAX)
            len--;
        else
            file[damage[d].offset] ^= 0x04;
        rc = decode(len, why);
        CHECK(rc == -EINVAL && strstr(why, damage[d].reason), "%s damaged: rc %d, '%s'", damage[d].what, rc,
              rc ? why : "");
    }
    CHECK(decode(10, why) == -EINVAL, "a 10-byte file was accepted");

    printf("%s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
