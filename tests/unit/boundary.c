/*
 * Iteration boundaries from the call stream: the learned period, where the
 * boundary falls in it (the first host sync after the last collective), the
 * iteration count (warm-up excluded, iterations before the lock included),
 * relearning when the pattern changes, the host-sync fallback, every:N.
 * The boundary is the last host sync before the collectives resume.
 */
#include <stdio.h>
#include <string.h>

#include "boundary.h"
#include "check.h"

enum { C1 = 11, C2 = 12, C3 = 13, B = 14, S1 = 21, S2 = 22 };

static enum ckpt_bd_event feed(int t)
{
    return ckpt_bd_feed(t >= S1 ? CKPT_TOK_SYNC : CKPT_TOK_COLL, (uint64_t)t);
}

/* A data-parallel trainer: a broadcast in iteration 0, then three gradient
 * buckets, a stream sync (S1) and the loss copy (S2) per iteration. */
static void trainer(void)
{
    ckpt_bd_init(0);
    int boundaries = 0, last_colls = 0;
    uint64_t first_iter = 0;
    feed(B);
    for (int it = 0; it < 10; it++) {
        const int seq[] = {C1, C2, C3, S1, S2};
        for (int k = 0; k < 5; k++) {
            enum ckpt_bd_event ev = feed(seq[k]);
            if (ev == CKPT_BD_BOUNDARY) {
                CHECK(seq[k] == S2, "trainer: boundary at token %d, not at the last sync", seq[k]);
                if (!boundaries++)
                    first_iter = ckpt_bd_iteration();
            }
            if (ev == CKPT_BD_LAST_COLL) {
                CHECK(seq[k] == C3, "trainer: last collective at token %d", seq[k]);
                last_colls++;
            }
        }
    }
    bool colls = false;
    CHECK(ckpt_bd_period(&colls) == 5 && colls, "trainer: period %u", ckpt_bd_period(NULL));
    /* Locked after three repetitions (at iteration 3's S1 at the latest),
     * then one boundary per iteration. */
    CHECK(boundaries >= 7 && boundaries <= 8, "trainer: %d boundaries", boundaries);
    CHECK(ckpt_bd_iteration() == 10, "trainer: iteration %llu, expected 10", (unsigned long long)ckpt_bd_iteration());
    CHECK(first_iter + (uint64_t)boundaries - 1 == 10, "trainer: first boundary at iteration %llu", (unsigned long long)first_iter);
    CHECK(last_colls >= 6, "trainer: %d last-collective marks", last_colls);

    /* The epilogue reads the state back with many host syncs: not training,
     * so no boundaries and no new period. */
    int epilogue = 0;
    for (int i = 0; i < 20; i++)
        epilogue += feed(S1) == CKPT_BD_BOUNDARY;
    CHECK(epilogue == 0 && ckpt_bd_iteration() == 10, "trainer epilogue: %d boundaries, iteration %llu", epilogue,
          (unsigned long long)ckpt_bd_iteration());
}

static void no_collectives(void)
{
    ckpt_bd_init(0);
    int boundaries = 0;
    for (int i = 0; i < 10; i++)
        boundaries += feed(S1) == CKPT_BD_BOUNDARY;
    bool colls = true;
    CHECK(ckpt_bd_period(&colls) == 1 && !colls, "syncs only: period %u", ckpt_bd_period(NULL));
    CHECK(boundaries == 8 && ckpt_bd_iteration() == 10, "syncs only: %d boundaries, iteration %llu", boundaries,
          (unsigned long long)ckpt_bd_iteration());
}

static void relearn(void)
{
    ckpt_bd_init(0);
    for (int it = 0; it < 5; it++) {
        feed(C1);
        feed(S1);
    }
    uint64_t before = ckpt_bd_iteration();
    /* The program switches to two buckets per iteration. */
    int boundaries = 0;
    for (int it = 0; it < 6; it++) {
        feed(C1);
        feed(C2);
        boundaries += feed(S1) == CKPT_BD_BOUNDARY;
    }
    CHECK(before == 5, "relearn: %llu iterations before the change", (unsigned long long)before);
    CHECK(ckpt_bd_period(NULL) == 3, "relearn: period %u after the change", ckpt_bd_period(NULL));
    CHECK(ckpt_bd_iteration() >= before + 5 && ckpt_bd_iteration() <= before + 6, "relearn: iteration %llu",
          (unsigned long long)ckpt_bd_iteration());
    CHECK(boundaries >= 3, "relearn: %d boundaries after the change", boundaries);
}

static void every_n(void)
{
    ckpt_bd_init(3);
    int boundaries = 0;
    for (int i = 1; i <= 9; i++) {
        feed(C1);
        enum ckpt_bd_event ev = feed(S1);
        CHECK((ev == CKPT_BD_BOUNDARY) == (i % 3 == 0), "every:3: sync %d gives %d", i, ev);
        boundaries += ev == CKPT_BD_BOUNDARY;
    }
    CHECK(boundaries == 3 && ckpt_bd_iteration() == 3, "every:3: %d boundaries", boundaries);
}

int main(void)
{
    trainer();
    no_collectives();
    relearn();
    every_n();
    return failures ? 1 : 0;
}
