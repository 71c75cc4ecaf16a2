/*
 * The pin file (pins.h): what an agent writes, a rank reads back from its
 * own directory, the plan's epoch included; a line of an agent that wrote
 * no epoch reads as epoch 0, and no file as nothing pinned.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pins.h"

int main(void)
{
    char job[] = "/tmp/ckpt-pins-XXXXXX", rank[PATH_MAX], path[PATH_MAX + 32];
    struct ckpt_pins p;

    CHECK(mkdtemp(job) != NULL, "mkdtemp");
    snprintf(rank, sizeof(rank), "%s/rank0", job);
    CHECK(mkdir(rank, 0700) == 0, "mkdir %s", rank);

    ckpt_pins_read(rank, &p);
    CHECK(p.n == 0 && p.from == 0 && p.epoch == 0, "no file: %u pins, from %llu, epoch %llu", p.n,
          (unsigned long long)p.from, (unsigned long long)p.epoch);

    struct ckpt_pins w = { .keep = { 40, 0, 45 }, .n = 3, .from = 50, .epoch = 1234567890123ull };
    CHECK(ckpt_pins_write(job, &w) == 0, "write");
    ckpt_pins_read(rank, &p);
    CHECK(p.n == 2 && p.keep[0] == 40 && p.keep[1] == 45, "kept: %u pins, %llu %llu", p.n,
          (unsigned long long)p.keep[0], (unsigned long long)p.keep[1]);
    CHECK(p.from == 50 && p.epoch == 1234567890123ull, "from %llu, epoch %llu", (unsigned long long)p.from,
          (unsigned long long)p.epoch);
    CHECK(ckpt_pins_hold(&p, 40) && ckpt_pins_hold(&p, 45) && ckpt_pins_hold(&p, 51) && !ckpt_pins_hold(&p, 41) &&
          !ckpt_pins_hold(&p, 0), "what the pins hold");

    /* Every value at its largest still fits the line. */
    struct ckpt_pins big = { .n = CKPT_PINS_MAX, .from = UINT64_MAX, .epoch = UINT64_MAX };
    for (unsigned i = 0; i < CKPT_PINS_MAX; i++)
        big.keep[i] = UINT64_MAX - i;
    CHECK(ckpt_pins_write(job, &big) == 0, "write the largest");
    ckpt_pins_read(rank, &p);
    CHECK(p.n == CKPT_PINS_MAX && p.keep[CKPT_PINS_MAX - 1] == UINT64_MAX - (CKPT_PINS_MAX - 1) &&
          p.from == UINT64_MAX && p.epoch == UINT64_MAX, "the largest read back: %u pins, epoch %llu", p.n,
          (unsigned long long)p.epoch);

    /* A line without an epoch (one node's agent before epochs). */
    ckpt_pins_path(path, sizeof(path), job);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("7 from=9\n", f) >= 0, "write an old line");
    if (f)
        fclose(f);
    ckpt_pins_read(rank, &p);
    CHECK(p.n == 1 && p.keep[0] == 7 && p.from == 9 && p.epoch == 0, "an old line: %u pins, from %llu, epoch %llu",
          p.n, (unsigned long long)p.from, (unsigned long long)p.epoch);

    ckpt_pins_remove(job);
    CHECK(access(path, F_OK) != 0, "removed");
    rmdir(rank);
    rmdir(job);
    return failures ? 1 : 0;
}
